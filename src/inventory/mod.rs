//! Scan inventory: everything `vramdoc scan` reads about the machine, and nothing it decides.
//! GPU facts come through the [`Monitor`] trait (versions, one `devices()` call, per device
//! the compute process list, and the graphics and MPS lists only where the compute list
//! leaves used memory unexplained: [`ProcessLists`]); facts about each
//! process come from /proc through [`crate::host`] (user, name, redacted command line,
//! `CUDA_VISIBLE_DEVICES`,
//! container hint, whether the PID exists in our PID namespace), plus what decides which
//! physical GPUs a process may use (`CUDA_DEVICE_ORDER`, `NVIDIA_VISIBLE_DEVICES`), which
//! processes hold the driver's device files open (the `fuser -v /dev/nvidia*` answer), and
//! whether per-process data exists on this platform at all (WSL). A device that fails keeps
//! its status and never ends the scan. Findings are decided from this in `crate::diagnose`,
//! never here.

use crate::gpu::{DeviceInfo, GpuError, Monitor};
use crate::host::{self, Environ};
use crate::model::{Environment, ProcessDeviceUsage, ProcessInfo, Vantage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `CUDA_VISIBLE_DEVICES` value shown when the variable is not set for a process.
pub const CVD_UNSET: &str = "unset";
/// `CUDA_VISIBLE_DEVICES` value shown when /proc/PID/environ cannot be read.
pub const CVD_UNKNOWN: &str = "unknown";

mod vantage;
pub use vantage::*;

/// Everything one scan read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Host, versions and devices (as NVML numbers them, with memory at scan time; a device
    /// that failed has a status other than `ok`).
    pub environment: Environment,
    /// Processes NVML lists on any device (compute, graphics and MPS lists), merged by PID,
    /// sorted by PID.
    pub processes: Vec<ProcessInfo>,
    /// Where vramdoc stood when it read all this (its PID namespace, the driver generation,
    /// the device nodes it can open): established once per command ([`crate::vantage`]).
    pub vantage: Vantage,
    /// What else the scan read (all optional facts; default: none known).
    #[serde(default)]
    pub details: Details,
}

/// Facts beside the devices and processes that decide whether a finding is real.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Details {
    /// GPU-selecting environment of each visible process, by PID.
    pub gpu_env: BTreeMap<u32, GpuEnv>,
    /// Devices whose process lists could not be read, with the driver's error.
    pub list_errors: BTreeMap<u32, String>,
    /// Processes holding the driver's device files open (`Monitor::device_nodes`), not
    /// vramdoc itself, sorted by PID: who keeps memory alive through a descriptor.
    pub node_holders: Vec<NodeHolder>,
    /// Why per-process data does not exist on this platform (WSL: the Windows driver lists
    /// no processes), when so.
    pub per_process_unavailable: Option<String>,
    /// Why pod attribution is missing or partial ([`crate::pods`]), when so.
    #[serde(default)]
    pub pods_note: Option<String>,
    /// GPUs the kubelet allocated to each container of the node (pod-resources).
    #[serde(default)]
    pub pod_allocations: Vec<crate::model::PodAllocation>,
    /// Allocated GPUs no process of their pod holds memory on, and since when
    /// ([`crate::pods::PodMemory::idle`]).
    #[serde(default)]
    pub idle_allocations: Vec<crate::pods::IdleAllocation>,
    /// The registration socket of NVIDIA's DRA kubelet plugin, when it is registered on this
    /// node ([`crate::pods::Attribution::dra_registration`]).
    #[serde(default)]
    pub dra_registration: Option<std::path::PathBuf>,
    /// The pod-resources answer listed DRA claims for some container (the kubelet's
    /// `KubeletPodResourcesDynamicResources` gate is on).
    #[serde(default)]
    pub dynamic_resources_listed: bool,
}

pub use crate::model::GpuEnv;

/// A process holding GPU device files open.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHolder {
    pub pid: u32,
    pub name: Option<String>,
    pub user: Option<String>,
    /// The device files it holds open.
    pub nodes: Vec<String>,
    /// Bytes it has mapped from the UVM device file (`/proc/PID/maps`), when it holds that
    /// file and its maps could be read; `None` otherwise (another user's process, `hidepid`,
    /// an older report). Every CUDA context maps 2 MiB; managed memory maps its size
    /// (`host::uvm_mapped_bytes`, `diagnose::unattributed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uvm_mapped: Option<u64>,
    /// Whether its maps show a CUDA context (`host::DeviceMaps::has_context`): only such a
    /// process holds GPU memory through the files (every NVML monitor holds descriptors of
    /// them). `None`: its maps were not read (not needed, not readable, an older report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<bool>,
}

impl Inventory {
    /// Devices as NVML numbers them (physical), with memory at scan time.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.environment.devices
    }

    /// Whether vramdoc runs in the host PID namespace (the vantage's).
    pub fn host(&self) -> bool {
        self.vantage.host()
    }

    /// Whether a listed PID that does not exist here is a process that exited: in the host
    /// PID namespace, and in a container under a driver that translates PIDs into it (it
    /// lists this namespace's processes only, an exited one under its namespace PID). Under
    /// host PIDs in a container, or an unknown generation, it may be a live host process.
    pub fn invisible_is_dead(&self) -> bool {
        self.host()
            || matches!(
                self.list_view(),
                crate::model::vantage::ListView::OwnNamespaceOnly { .. }
            )
    }

    /// What the process lists mean from this vantage: the driver generation, corrected by
    /// what was listed (a PID that does not exist here means host PIDs; a process of this
    /// namespace listed with bytes means the lists carry usage).
    pub fn list_view(&self) -> crate::model::vantage::ListView {
        let own_usage = self
            .processes
            .iter()
            .any(|p| p.visible && p.devices.iter().any(|u| u.used.is_some_and(|b| b > 0)));
        self.vantage
            .view_seen(self.processes.iter().any(|p| !p.visible), own_usage)
    }
}

/// The [`Environment`] section of a report: host, kernel, versions, devices, read through
/// `monitor`. `sim_spec` is the box spec when simulated.
pub fn environment(
    monitor: &dyn Monitor,
    sim_spec: Option<String>,
) -> Result<Environment, GpuError> {
    let versions = monitor.versions()?;
    Ok(environment_of(
        monitor,
        sim_spec,
        versions,
        monitor.devices()?,
    ))
}

/// An [`Environment`] of the GPU facts read and the host's.
fn environment_of(
    monitor: &dyn Monitor,
    sim_spec: Option<String>,
    versions: crate::gpu::Versions,
    devices: Vec<DeviceInfo>,
) -> Environment {
    Environment {
        hostname: host::hostname().unwrap_or_else(|_| "unknown".into()),
        kernel: host::kernel_release().unwrap_or_else(|_| "unknown".into()),
        vramdoc_version: env!("CARGO_PKG_VERSION").to_string(),
        backend: monitor.backend().to_string(),
        sim_spec,
        versions,
        devices,
    }
}

pub use crate::gpu::ProcessLists;

/// Collect one scan through `monitor`: `versions()` once, each device's entry and the process
/// lists `lists` says ([`Monitor::read_devices`]), and /proc for each PID, read as soon as
/// the first list naming it arrives: while the driver serves the other GPUs' lists (~4.5 ms
/// each under its lock), the processes already named are read, not after the last list.
pub fn collect(
    monitor: &dyn Monitor,
    sim_spec: Option<String>,
    vantage: Vantage,
    lists: ProcessLists,
) -> Result<Inventory, GpuError> {
    let versions = monitor.versions()?;
    let dev_dir = host::devices::dev_dir_of(&monitor.device_nodes());
    // The machine-wide files every process's reading consults, read once for all of them.
    let files = host::HostFiles::new();
    let mut details = Details::default();
    let mut devices = Vec::new();
    let mut by_pid: BTreeMap<u32, Vec<ProcessDeviceUsage>> = BTreeMap::new();
    let mut facts: BTreeMap<u32, (ProcessInfo, Option<GpuEnv>)> = BTreeMap::new();
    let mut failed: Option<GpuError> = None;
    monitor.read_devices(lists, &mut |r| {
        let index = r.info.index;
        devices.push(r.info);
        // A MIG parent's lists are not read (`DeviceRead::lists` is `None`): its processes
        // are its instances', listed per instance.
        let list = match r.lists {
            None => return,
            Some(Ok(l)) => l,
            // One device failing never ends the scan: its lists are missing, and said so.
            Some(Err(e)) if !e.is_environment() => {
                details.list_errors.insert(index, e.to_string());
                return;
            }
            Some(Err(e)) => {
                failed.get_or_insert(e);
                return;
            }
        };
        for p in list {
            let usage = by_pid.entry(p.pid).or_default();
            // A process in two lists of one device (compute and graphics) is one owner:
            // NVML reports its memory on the device in each list.
            match usage.iter_mut().find(|u| u.device == index) {
                Some(u) => {
                    u.used = match (u.used, p.used) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                    if !u.lists.contains(&p.kind) {
                        u.lists.push(p.kind);
                        u.lists.sort_unstable();
                    }
                }
                None => usage.push(ProcessDeviceUsage {
                    device: index,
                    used: p.used,
                    lists: vec![p.kind],
                }),
            }
            facts.entry(p.pid).or_insert_with(|| {
                let (info, mut gpu_env) = process_info_and_env(p.pid, Vec::new(), &files);
                if let Some(env) = gpu_env.as_mut() {
                    // What it can open (issue 25): its device files, its device cgroup.
                    (env.node_minors, env.cgroup_minors) =
                        host::devices::access(p.pid, dev_dir.as_deref(), &files);
                }
                (info, gpu_env)
            });
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    let environment = environment_of(monitor, sim_spec, versions, devices);
    let vantage = complete_vantage(vantage, &environment, monitor);
    let mut processes: Vec<ProcessInfo> = Vec::with_capacity(by_pid.len());
    for (pid, mut usage) in by_pid {
        usage.sort_by_key(|u| u.device);
        let Some((mut info, gpu_env)) = facts.remove(&pid) else {
            continue;
        };
        info.devices = usage;
        if let Some(env) = gpu_env {
            details.gpu_env.insert(pid, env);
        }
        processes.push(info);
    }
    // `details.node_holders` (every process's open files) is left to the scan engine, which
    // walks them only when a finding needs them as evidence (`crate::scan::scan`).
    details.per_process_unavailable = host::kernel_release().ok().and_then(|r| wsl_reason(&r));
    Ok(Inventory {
        environment,
        processes,
        vantage,
        details,
    })
}

/// `CUDA_DEVICE_ORDER`, `NVIDIA_VISIBLE_DEVICES` and Slurm's GPU list of a process's
/// environment.
pub fn gpu_env_from_environ(env: &Environ) -> GpuEnv {
    GpuEnv::from_vars(|k| env.get(k))
}

/// Why per-process data is unavailable, from the kernel release: WSL kernels name
/// Microsoft; under WSL the Windows (WDDM) driver lists no GPU processes at all.
pub fn wsl_reason(osrelease: &str) -> Option<String> {
    let r = osrelease.trim();
    let l = r.to_ascii_lowercase();
    (l.contains("microsoft") || l.contains("wsl")).then(|| {
        format!("WSL kernel ({r}): the Windows driver (WDDM) reports no per-process GPU data")
    })
}

/// Every process (not this one) with an open descriptor on one of `nodes`, from
/// /proc/PID/fd: what `fuser -v` prints. Processes whose fds we may not read are skipped.
/// The maps of a holder (context evidence and managed bytes, one read) are read only where
/// `maps_wanted(name, held files)` says they are evidence (`crate::scan`).
pub fn node_holders(
    nodes: &[std::path::PathBuf],
    maps_wanted: &dyn Fn(Option<&str>, &[std::path::PathBuf]) -> bool,
) -> Vec<NodeHolder> {
    if nodes.is_empty() {
        return Vec::new();
    }
    // Descriptor links name the canonical path.
    let nodes = host::canonical_nodes(nodes);
    let me = std::process::id();
    let files = host::HostFiles::new();
    let mut out = Vec::new();
    for pid in host::pids().unwrap_or_default() {
        if pid == me {
            continue;
        }
        let Ok(held) = host::held_nodes(pid, &nodes) else {
            continue;
        };
        if held.is_empty() {
            continue;
        }
        let (name, user) = name_and_user(pid, &files).unzip();
        let maps = maps_wanted(name.as_deref(), &held)
            .then(|| host::device_maps(pid))
            .flatten();
        let held: Vec<String> = held.iter().map(|t| t.display().to_string()).collect();
        out.push(NodeHolder {
            pid,
            name,
            user,
            nodes: held,
            uvm_mapped: maps.map(|m| m.uvm_bytes),
            context: maps.map(|m| m.has_context()),
        });
    }
    out.sort_by_key(|h| h.pid);
    out
}

/// What /proc says about one PID (all optional: a PID may not exist here).
pub fn process_info(pid: u32, devices: Vec<ProcessDeviceUsage>) -> ProcessInfo {
    process_info_and_env(pid, devices, &host::HostFiles::new()).0
}

/// The name and user of `pid` from /proc/PID/status, when it is live and visible here
/// (not a zombie, not gone).
fn name_and_user(pid: u32, files: &host::HostFiles) -> Option<(String, String)> {
    let status = host::status(pid).ok().filter(|s| !s.is_exited())?;
    Some((
        crate::term::escape_bytes(&status.name),
        files.user_name(status.ruid),
    ))
}

/// [`process_info`] and, when /proc/PID/environ of a visible process is readable, its
/// [`GpuEnv`]: the environ file is read once for both.
fn process_info_and_env(
    pid: u32,
    devices: Vec<ProcessDeviceUsage>,
    files: &host::HostFiles,
) -> (ProcessInfo, Option<GpuEnv>) {
    let Some((name, user)) = name_and_user(pid, files) else {
        let info = ProcessInfo {
            pid,
            visible: false,
            user: None,
            name: None,
            cmdline: None,
            cuda_visible_devices: CVD_UNKNOWN.into(),
            container: None,
            pod: None,
            devices,
        };
        return (info, None);
    };
    let cmdline = host::cmdline(pid)
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| crate::redact::redact_cmdline(&crate::term::escape_args(&v)));
    let (cuda_visible_devices, gpu_env) = match host::environ(pid) {
        Ok(env) => {
            let mut gpu_env = gpu_env_from_environ(&env);
            // The device plugin's volume-mounts strategy: the list is the directory's entries.
            if let Some(dir) = gpu_env.mount_dir() {
                gpu_env.mounted_device_ids = host::container::dir_entries(pid, dir).ok();
            }
            (cvd_from_environ(&env), Some(gpu_env))
        }
        Err(_) => (CVD_UNKNOWN.into(), None),
    };
    let info = ProcessInfo {
        pid,
        visible: true,
        user: Some(user),
        name: Some(name),
        cmdline,
        cuda_visible_devices,
        container: container_hint(pid),
        pod: None,
        devices,
    };
    (info, gpu_env)
}

/// `CUDA_VISIBLE_DEVICES` of `pid`, through the one redaction function: the value, `unset`,
/// or `unknown` when /proc/PID/environ cannot be read (another user's process, gone).
pub fn cuda_visible_devices(pid: u32) -> String {
    match host::environ(pid) {
        Ok(env) => cvd_from_environ(&env),
        Err(_) => CVD_UNKNOWN.into(),
    }
}

/// `CUDA_VISIBLE_DEVICES` of a process's environment, redacted: the value, or `unset`.
pub fn cvd_from_environ(env: &Environ) -> String {
    const KEY: &str = "CUDA_VISIBLE_DEVICES";
    match env.get(KEY) {
        Some(v) => crate::redact::redact_env(KEY, &v).unwrap_or_else(|| CVD_UNKNOWN.into()),
        None => CVD_UNSET.into(),
    }
}

/// A container runtime named in /proc/PID/cgroup (`docker`, `kubepods`, `containerd`,
/// `podman`, `lxc`, `crio`), if any.
pub fn container_hint(pid: u32) -> Option<String> {
    let paths = host::cgroup_paths(pid).ok()?;
    container_from_cgroup(&paths.join("\n"))
}

pub fn container_from_cgroup(text: &str) -> Option<String> {
    const HINTS: &[(&str, &str)] = &[
        ("kubepods", "kubepods"),
        ("docker", "docker"),
        ("libpod", "podman"),
        ("crio", "crio"),
        ("containerd", "containerd"),
        ("lxc", "lxc"),
    ];
    let lower = text.to_ascii_lowercase();
    HINTS
        .iter()
        .find(|(needle, _)| lower.contains(needle))
        .map(|(_, name)| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(bytes: &[u8]) -> Environ {
        Environ::from_bytes(bytes)
    }

    #[test]
    fn cvd_from_environ_bytes() {
        assert_eq!(
            cvd_from_environ(&env(b"HOME=/root\0CUDA_VISIBLE_DEVICES=1,0\0")),
            "1,0"
        );
        assert_eq!(cvd_from_environ(&env(b"HOME=/root\0")), CVD_UNSET);
        assert_eq!(cvd_from_environ(&env(b"CUDA_VISIBLE_DEVICES=\0")), "");
    }

    #[test]
    fn hidepid_is_not_taken_for_a_container() {
        // (Reading hidepid from mountinfo: crate::host::system.)
        // hidepid hides kthreadd from non-root users on the host: still the host.
        let ns = decide_pid_namespace(1, false, Some("2"), None);
        assert!(ns.host, "{}", ns.reason);
        assert!(ns.reason.contains("hidepid=2"));
        // hidepid inside a real container: the container sign wins.
        assert!(!decide_pid_namespace(1, false, Some("2"), Some("/.dockerenv exists")).host);
        // No hidepid, no kthreadd: a container, as before.
        assert!(!decide_pid_namespace(1, false, None, None).host);
        assert!(decide_pid_namespace(1, true, None, None).host);
        assert!(!decide_pid_namespace(2, true, None, None).host);
    }

    #[test]
    fn the_namespace_inode_decides_first() {
        let host = decide_from_ns_link("pid:[4026531836]").unwrap();
        assert!(host.host, "{}", host.reason);
        let c = decide_from_ns_link("pid:[4026532301]\n").unwrap();
        assert!(!c.host);
        assert!(c.reason.contains("4026532301"), "{}", c.reason);
        for odd in ["", "pid:[]", "mnt:[4026531836]", "pid:[x]", "4026531836"] {
            assert!(decide_from_ns_link(odd).is_none(), "{odd:?}");
        }
    }

    #[test]
    fn gpu_env_and_wsl() {
        let e = gpu_env_from_environ(&env(
            b"CUDA_DEVICE_ORDER=PCI_BUS_ID\0NVIDIA_VISIBLE_DEVICES=GPU-ab,1\0HOME=/\0",
        ));
        assert_eq!(e.cuda_device_order.as_deref(), Some("PCI_BUS_ID"));
        assert_eq!(e.nvidia_visible_devices.as_deref(), Some("GPU-ab,1"));
        assert_eq!(gpu_env_from_environ(&env(b"HOME=/\0")), GpuEnv::default());
        // Slurm's GPUs: the step's before the job's; empty means unset.
        let s = gpu_env_from_environ(&env(b"SLURM_JOB_GPUS=1,3\0SLURM_STEP_GPUS=3\0"));
        assert_eq!(
            s.slurm_gpus,
            Some(("SLURM_STEP_GPUS".to_string(), "3".to_string()))
        );
        let s = gpu_env_from_environ(&env(b"SLURM_STEP_GPUS=\0SLURM_JOB_GPUS=2\0"));
        assert_eq!(
            s.slurm_gpus,
            Some(("SLURM_JOB_GPUS".to_string(), "2".to_string()))
        );
        assert!(wsl_reason("5.15.153.1-microsoft-standard-WSL2\n").is_some());
        assert!(wsl_reason("6.1.0-18-amd64").is_none());
    }

    #[test]
    fn holders_of_a_device_file_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("nvidia0");
        std::fs::write(&node, b"").unwrap();
        // A child that holds the file open on its stdin, as a forked DataLoader worker
        // holds /dev/nvidia0 through an inherited descriptor.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::fs::File::open(&node).unwrap())
            .spawn()
            .unwrap();
        let holders = node_holders(std::slice::from_ref(&node), &|_, _| true);
        let unread = node_holders(std::slice::from_ref(&node), &|_, _| false);
        child.kill().unwrap();
        child.wait().unwrap();
        let h = holders
            .iter()
            .find(|h| h.pid == child.id())
            .expect("holder");
        assert_eq!(h.nodes, vec![node.display().to_string()]);
        // A descriptor and no mapping: no CUDA context (what an NVML monitor holds).
        assert_eq!((h.context, h.uvm_mapped), (Some(false), Some(0)));
        let h = unread.iter().find(|h| h.pid == child.id()).expect("holder");
        assert_eq!((h.context, h.uvm_mapped), (None, None), "maps not wanted");
        assert!(!holders.iter().any(|h| h.pid == std::process::id()));
        assert!(node_holders(&[], &|_, _| true).is_empty());
    }

    #[test]
    fn cgroup_hints() {
        assert_eq!(
            container_from_cgroup("0::/system.slice/docker-abc.scope\n").as_deref(),
            Some("docker")
        );
        assert_eq!(
            container_from_cgroup("0::/kubepods/burstable/pod1/x\n").as_deref(),
            Some("kubepods")
        );
        assert_eq!(
            container_from_cgroup("0::/user.slice/session-1.scope\n"),
            None
        );
    }

    #[test]
    fn own_process_and_child_env_are_read() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("CUDA_VISIBLE_DEVICES", "1")
            .spawn()
            .unwrap();
        // Wait until the child has exec'd (before that /proc shows the test binary).
        let mut info = process_info(child.id(), vec![]);
        for _ in 0..400 {
            // exec sets the name before the new command line: wait for both.
            if info.name.as_deref() == Some("sleep") && info.cmdline.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            info = process_info(child.id(), vec![]);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(info.visible);
        assert_eq!(info.name.as_deref(), Some("sleep"));
        assert_eq!(info.cmdline.as_deref(), Some("sleep 30"));
        assert_eq!(info.cuda_visible_devices, "1");
        assert!(info.user.is_some());
        // Reaped: no longer visible.
        let gone = process_info(child.id(), vec![]);
        assert!(!gone.visible);
        assert_eq!(gone.cuda_visible_devices, CVD_UNKNOWN);
    }

    #[test]
    fn unreadable_environ_is_unknown_not_failure() {
        // A PID that does not exist.
        assert_eq!(cuda_visible_devices(u32::MAX - 1), CVD_UNKNOWN);
        // PID 1's environ is unreadable unless we are root (or PID 1 is ours).
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root && host::environ(1).is_err() {
            assert_eq!(cuda_visible_devices(1), CVD_UNKNOWN);
        }
    }
}
