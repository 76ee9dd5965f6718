//! The box's container runtime: what the NVIDIA container runtime and the Kubernetes device
//! plugin do to a process that is given GPUs. The driver never reads
//! `NVIDIA_VISIBLE_DEVICES`; the runtime reads it (or the device plugin's mounts, or a CDI
//! spec) and mounts only the chosen GPUs' device files into the container. This module does
//! the same to a process on the box:
//!
//! - a **mount namespace** in which the box's `dev/` holds only the chosen `nvidiaN` files
//!   (plus `nvidiactl` and the shared `clients/`), so the simulated driver — which enumerates
//!   the device files it can see, as the real one does — shows only those GPUs, to CUDA and
//!   NVML alike, whatever the process's environment says;
//! - the **environment** the device plugin and runtime set for the chosen strategy
//!   ([`Strategy`]): a list of UUIDs or indices (`envvar`), the path
//!   `/var/run/nvidia-container-devices` with one `/dev/null` bind mount per device named by
//!   its ID in that directory (`volume-mounts`), the image's `all` or the CDI spec's `void`
//!   (`cdi`), `MIG-…` ids (`mig`);
//! - its own **cgroup**, shaped like a real runtime's (`docker/<64 hex>` by default, the
//!   Docker cgroupfs layout; any shape with `{id}`, e.g. kubepods), in every cgroup hierarchy.
//!
//! Sources: NVIDIA/k8s-device-plugin `internal/plugin/server.go` (`getAllocateResponse`,
//! `deviceListAsVolumeMountsContainerPathRoot`), NVIDIA/nvidia-container-toolkit
//! (`internal/config/image/cuda_image.go`, `pkg/nvcdi/wrapper.go`), Docker's runtime-metrics
//! docs (cgroup paths). See docs/simulator.md.
//!
//! [`spawn`] starts a container process; [`crate::runtime`] is the daemon that does it for
//! clients, outside their process tree.

mod cgroup;
mod spawn;

pub use cgroup::{
    cgroup_hierarchies, check_path as check_cgroup_path, remove_dirs as cgroup_remove, Cgroups,
};
pub use spawn::{spawn, Started, Stdio3};

use crate::{SimBox, SimError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Where the device plugin's volume-mounts strategy lists a container's devices.
pub const VOLUME_MOUNTS_ROOT: &str = "/var/run/nvidia-container-devices";
/// The variable the NVIDIA container runtime reads.
pub const NVIDIA_VISIBLE_DEVICES: &str = vramdoc_gpu_spec::visible::NVIDIA_VISIBLE_DEVICES;
/// Default cgroup of a container, relative to each hierarchy's root: Docker's cgroupfs
/// driver layout (`/sys/fs/cgroup/docker/<longid>` on v2, `…/memory/docker/<longid>` on v1).
pub const DEFAULT_CGROUP: &str = "docker/{id}";
/// Directory of the containers' records inside a box.
pub const DIR: &str = "containers";

/// How the device list reaches the runtime (k8s-device-plugin `DEVICE_LIST_STRATEGY`, plus
/// MIG ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// `NVIDIA_VISIBLE_DEVICES=<id>,<id>` (the plugin's default).
    #[default]
    Envvar,
    /// `NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`, one `/dev/null` bind mount
    /// per device named by its ID in that directory.
    VolumeMounts,
    /// CDI: the plugin sets no variable; the image's `NVIDIA_VISIBLE_DEVICES=all` stays, or
    /// the CDI spec's `void` wins ([`CdiEnv`]).
    Cdi,
    /// `NVIDIA_VISIBLE_DEVICES=MIG-<uuid>,…`: MIG device ids (one full-GPU instance per GPU).
    Mig,
}

/// Which value of `NVIDIA_VISIBLE_DEVICES` a CDI container ends up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CdiEnv {
    /// The CUDA base images' default, kept because the plugin sets nothing.
    #[default]
    All,
    /// What toolkit-generated CDI specs add (`NVIDIA_VISIBLE_DEVICES=void`).
    Void,
}

/// How devices are named to the runtime (k8s-device-plugin `DEVICE_ID_STRATEGY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum IdKind {
    #[default]
    Uuid,
    Index,
}

/// What a container is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// Physical indices of the GPUs mounted into it, in PCI order.
    pub gpus: Vec<u32>,
    pub strategy: Strategy,
    #[serde(default)]
    pub ids: IdKind,
    #[serde(default)]
    pub cdi_env: CdiEnv,
    /// Cgroup path relative to each hierarchy's root, `{id}` replaced by the container id;
    /// `None`: stay in the caller's cgroup.
    pub cgroup: Option<String>,
}

/// Errors of the container runtime: the user's to fix, or the kernel's refusal.
#[derive(Debug, Error)]
pub enum ContainerError {
    #[error("--gpus {given:?}: {reason}")]
    BadGpus { given: String, reason: String },
    #[error("{what}: {source} (the container runtime needs root, or CAP_SYS_ADMIN, to create a mount namespace and cgroups; run as root, or use `--cgroup none` where cgroups are read-only)")]
    Refused {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("{0}")]
    Spawn(String),
}

/// Parse `--gpus` like `docker run --gpus`: `all`, `none`, `device=0,2`, `0,2`, GPU UUIDs (or
/// unique prefixes), `"device=GPU-…"`, MIG instances' `MIG-<uuid>`. Result: physical
/// indices, PCI order, then MIG instance keys ([`crate::mig::key`]).
pub fn parse_gpus(sim: &SimBox, given: &str) -> Result<Vec<u32>, ContainerError> {
    let bad = |reason: String| ContainerError::BadGpus {
        given: given.to_string(),
        reason,
    };
    let t = given.trim().trim_matches('"');
    let t = t.strip_prefix("device=").unwrap_or(t);
    let n = sim.devices().len() as u32;
    match t {
        "all" => return Ok((0..n).collect()),
        "none" => return Ok(Vec::new()),
        "" => return Err(bad("empty; write `all`, `none`, `0,1` or GPU UUIDs".into())),
        _ => {}
    }
    let mut out = Vec::new();
    for tok in t.split(',').map(str::trim) {
        let i = if tok.chars().all(|c| c.is_ascii_digit()) {
            let i: u32 = tok
                .parse()
                .map_err(|_| bad(format!("{tok:?} is not an index")))?;
            if i >= n {
                return Err(bad(format!(
                    "the box has {n} GPU(s), numbered 0..{}",
                    n.saturating_sub(1)
                )));
            }
            i
        } else if tok.to_ascii_lowercase().starts_with("mig-") {
            // A MIG instance (`sim init --mig`): its key; the container gets its parent's
            // device file and the instance's capability.
            let lower = tok.to_ascii_lowercase();
            let hits: Vec<u32> = sim
                .mig_instances()
                .iter()
                .filter(|m| m.device.uuid.to_ascii_lowercase().starts_with(&lower))
                .map(|m| m.device.index)
                .collect();
            match hits.as_slice() {
                [one] => *one,
                [] => return Err(bad(format!("no MIG instance of the box has UUID {tok:?}"))),
                _ => return Err(bad(format!("{tok:?} matches several MIG instances"))),
            }
        } else {
            let lower = tok.to_ascii_lowercase();
            let hits: Vec<u32> = sim
                .devices()
                .iter()
                .filter(|d| {
                    lower.starts_with("gpu-") && d.uuid.to_ascii_lowercase().starts_with(&lower)
                })
                .map(|d| d.index)
                .collect();
            match hits.as_slice() {
                [one] => *one,
                [] => return Err(bad(format!("no GPU of the box has UUID {tok:?}"))),
                _ => return Err(bad(format!("{tok:?} matches several GPUs"))),
            }
        };
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The MIG device UUID the simulator gives the (one, full-GPU) MIG instance of a GPU:
/// `MIG-` + a UUID derived from the GPU's (the `MIG-<uuid>` form of R470+ drivers).
pub fn mig_uuid(gpu_uuid: &str) -> String {
    let mut b = vramdoc_gpu_spec::uuid::parse_gpu_uuid(gpu_uuid).unwrap_or_default();
    for (i, x) in b.iter_mut().enumerate() {
        *x ^= 0x5A ^ (i as u8).wrapping_mul(31);
    }
    let s = vramdoc_gpu_spec::uuid::format_gpu_uuid(&b);
    format!("MIG-{}", s.trim_start_matches("GPU-"))
}

impl ContainerSpec {
    /// The device ids the plugin hands the runtime, one per GPU.
    pub fn device_ids(&self, sim: &SimBox) -> Vec<String> {
        self.gpus
            .iter()
            .filter_map(|i| sim.device(*i).ok())
            .map(|d| match (self.strategy, self.ids) {
                // A MIG instance of the box is named by its own `MIG-<uuid>`.
                _ if crate::mig::is_key(d.index) => d.uuid.clone(),
                (Strategy::Mig, _) => mig_uuid(&d.uuid),
                (_, IdKind::Uuid) => d.uuid.clone(),
                (_, IdKind::Index) => d.index.to_string(),
            })
            .collect()
    }

    /// `NVIDIA_VISIBLE_DEVICES` inside the container.
    pub fn visible_env(&self, sim: &SimBox) -> String {
        if self.gpus.is_empty() && self.strategy != Strategy::Cdi {
            return "none".into();
        }
        match self.strategy {
            Strategy::Envvar | Strategy::Mig => self.device_ids(sim).join(","),
            Strategy::VolumeMounts => VOLUME_MOUNTS_ROOT.into(),
            Strategy::Cdi => match self.cdi_env {
                CdiEnv::All => "all".into(),
                CdiEnv::Void => "void".into(),
            },
        }
    }

    /// Entries under [`VOLUME_MOUNTS_ROOT`] (volume-mounts strategy only).
    pub fn volume_entries(&self, sim: &SimBox) -> Vec<String> {
        match self.strategy {
            Strategy::VolumeMounts => self.device_ids(sim),
            _ => Vec::new(),
        }
    }
}

/// A new container id: 64 hex digits, as Docker's long ids.
pub fn new_id() -> String {
    let mut bytes = [0u8; 32];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = ((t >> (i % 16 * 8)) as u8) ^ (std::process::id() as u8).wrapping_add(i as u8);
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The record of one container in the box (`containers/<id>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: String,
    /// Host PID of the container's main process.
    pub pid: u32,
    pub spec: ContainerSpec,
    /// UUIDs of the GPUs mounted.
    pub gpu_uuids: Vec<String>,
    /// `NVIDIA_VISIBLE_DEVICES` as the container sees it.
    pub nvidia_visible_devices: String,
    /// The cgroup directories it was placed in (one per hierarchy).
    pub cgroups: Vec<PathBuf>,
    /// The cgroup path as `/proc/PID/cgroup` shows it (relative to the hierarchy roots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    pub command: Vec<String>,
    /// Seconds since the Unix epoch.
    pub started: u64,
    /// Exit code (or 128 + signal), once it exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// Path of a container's record in the box `dir`.
pub fn record_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(DIR).join(format!("{id}.json"))
}

/// Every container record of the box in `dir`, oldest first.
pub fn records(dir: &Path) -> Vec<ContainerRecord> {
    let mut out: Vec<ContainerRecord> = std::fs::read_dir(dir.join(DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect();
    out.sort_by_key(|r: &ContainerRecord| (r.started, r.pid));
    out
}

#[cfg(test)]
mod tests;
