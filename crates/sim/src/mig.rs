//! MIG (Multi-Instance GPU) on a box: the profiles each board offers, the instances
//! `vramdoc sim init SPEC --mig PROFILE[,PROFILE...]` creates on every device, and what the
//! driver derives from them — the parent's memory as the sum of its instances', who may read
//! the parent's aggregate process lists, which instances a process can open, how CUDA
//! enumerates them.
//!
//! Each instance is a device of its own in the box state, under a *key* that is not a
//! physical index ([`key`], from [`KEY_BASE`]): contexts and allocations made in it are
//! charged to that key, so its memory and process list are its own, while the parent's
//! memory is the sum over its instances (as real drivers report it).
//!
//! Sources (docs/simulator.md, "MIG"): NVIDIA Multi-Instance GPU User Guide, "Supported MIG
//! Profiles" (profile names, memory as `nvidia-smi mig -lgip` prints it, instances per GPU),
//! "Device Nodes and Capabilities" (`/dev/nvidia-caps`, the `mig/monitor` capability that
//! lets a process see every instance, root-only by default) and "CUDA Device Enumeration"
//! (one MIG device per CUDA process; `CUDA_VISIBLE_DEVICES=MIG-<uuid>`); nvml.h
//! (`nvmlDeviceGetComputeRunningProcesses_v3`: "In MIG mode, if device handle is provided,
//! the API returns aggregate information, only if the caller has appropriate privileges.
//! Per-instance information can be queried by using specific MIG device handles").

use crate::{SimDevice, SimError, SimMemory, State};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use vramdoc_gpu_spec::units::MIB;

/// State keys of MIG instances start here (physical indices stay below
/// [`crate::spec::MAX_DEVICES`]).
pub const KEY_BASE: u32 = 0x1000;
/// Instances one GPU can hold at most (seven compute slices).
pub const MAX_INSTANCES: u32 = 7;
/// The flattened name of the `mig/monitor` capability's device file
/// (`/dev/nvidia-caps/nvidia-cap2` on real machines): a process that can open it sees every
/// instance and the parents' aggregate process lists.
pub const MONITOR_CAP: &str = "nvidia-cap2";

/// The state key of instance `n` (0-based, creation order) of physical device `parent`.
pub fn key(parent: u32, n: u32) -> u32 {
    KEY_BASE + parent * 8 + n
}

/// Whether a device number is a MIG instance's key rather than a physical index.
pub fn is_key(index: u32) -> bool {
    index >= KEY_BASE
}

/// The device file (in the box's `dev/`) that grants access to the instance of `key`: the
/// simulator's flattened `/dev/nvidia-caps/nvidia-capN` (its own minor numbers).
pub fn cap_file(key: u32) -> String {
    format!("nvidia-cap{key}")
}

/// One GPU instance profile (one compute instance spanning it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// As `nvidia-smi` names it: `3g.40gb`.
    pub name: &'static str,
    /// Compute slices (of 7).
    pub compute: u32,
    /// Memory slices (of 8).
    pub memory_slices: u32,
    /// Memory of the instance, MiB (`nvidia-smi mig -lgip`'s "Memory GiB" × 1024).
    pub memory_mib: u64,
    /// Instances of this profile one GPU can hold.
    pub max: u32,
}

const fn p(
    name: &'static str,
    compute: u32,
    memory_slices: u32,
    gib_x100: u64,
    max: u32,
) -> Profile {
    Profile {
        name,
        compute,
        memory_slices,
        memory_mib: gib_x100 * 1024 / 100,
        max,
    }
}

/// A100 40GB ("Supported MIG Profiles", A100-SXM4-40GB table).
const A100_40GB: &[Profile] = &[
    p("1g.5gb", 1, 1, 475, 7),
    p("1g.10gb", 1, 2, 975, 4),
    p("2g.10gb", 2, 2, 975, 3),
    p("3g.20gb", 3, 4, 1962, 2),
    p("4g.20gb", 4, 4, 1962, 1),
    p("7g.40gb", 7, 8, 3925, 1),
];

/// A100 80GB.
const A100_80GB: &[Profile] = &[
    p("1g.10gb", 1, 1, 950, 7),
    p("1g.20gb", 1, 2, 1950, 4),
    p("2g.20gb", 2, 2, 1950, 3),
    p("3g.40gb", 3, 4, 3925, 2),
    p("4g.40gb", 4, 4, 3925, 1),
    p("7g.80gb", 7, 8, 7875, 1),
];

/// H100 80GB.
const H100_80GB: &[Profile] = &[
    p("1g.10gb", 1, 1, 975, 7),
    p("1g.20gb", 1, 2, 1975, 4),
    p("2g.20gb", 2, 2, 1975, 3),
    p("3g.40gb", 3, 4, 3950, 2),
    p("4g.40gb", 4, 4, 3950, 1),
    p("7g.80gb", 7, 8, 7925, 1),
];

/// H200 141GB.
const H200: &[Profile] = &[
    p("1g.18gb", 1, 1, 1625, 7),
    p("1g.35gb", 1, 2, 3250, 4),
    p("2g.35gb", 2, 2, 3250, 3),
    p("3g.71gb", 3, 4, 6600, 2),
    p("4g.71gb", 4, 4, 6600, 1),
    p("7g.141gb", 7, 8, 13100, 1),
];

/// The MIG profiles of a board, by product name; `None`: the simulator has no MIG table for
/// it (not MIG-capable, or not modelled).
pub fn profiles_of(name: &str, total: u64) -> Option<&'static [Profile]> {
    let n = name.to_ascii_lowercase();
    if n.contains("h200") {
        Some(H200)
    } else if n.contains("h100") {
        Some(H100_80GB)
    } else if n.contains("a100") {
        Some(if total > 48 * 1024 * MIB {
            A100_80GB
        } else {
            A100_40GB
        })
    } else {
        None
    }
}

/// Errors of a `--mig` layout: the user's to fix.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum MigError {
    #[error("--mig: empty profile list; write e.g. `--mig 3g.40gb,3g.40gb`")]
    Empty,
    #[error(
        "--mig: GPU {index} ({name}) has no MIG profiles in the simulator (MIG: A100, H100, H200)"
    )]
    NotCapable { index: u32, name: String },
    #[error("--mig: GPU {index} ({name}) has no profile {profile:?}; its profiles: {offered}")]
    UnknownProfile {
        index: u32,
        name: String,
        profile: String,
        offered: String,
    },
    #[error("--mig: {profile} fits at most {max} time(s) on GPU {index} ({name})")]
    TooMany {
        index: u32,
        name: String,
        profile: String,
        max: u32,
    },
    #[error("--mig: {profiles} do not fit on GPU {index} ({name}): {what} (a GPU has 7 compute and 8 memory slices)")]
    DoesNotFit {
        index: u32,
        name: String,
        profiles: String,
        what: String,
    },
}

/// One MIG instance of a box (a GPU instance with one compute instance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstance {
    /// Physical index of the parent GPU.
    pub parent: u32,
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id (within the GPU instance).
    pub ci: u32,
    /// Profile as nvidia-smi names it (`3g.40gb`).
    pub profile: String,
    /// The instance as a device: `index` is its key ([`key`]), `uuid` its `MIG-<uuid>`,
    /// `name` what NVML's `nvmlDeviceGetName` answers on its handle
    /// (`NVIDIA A100-SXM4-80GB MIG 3g.40gb`), `total` the profile's memory.
    pub device: SimDevice,
}

fn mig_uuid(parent_uuid: &str, gi: u32) -> String {
    let mut b = vramdoc_gpu_spec::uuid::parse_gpu_uuid(parent_uuid).unwrap_or_default();
    for (i, x) in b.iter_mut().enumerate() {
        *x ^= 0xA5 ^ (gi as u8).wrapping_mul(0x3B) ^ (i as u8).wrapping_mul(17);
    }
    let s = vramdoc_gpu_spec::uuid::format_gpu_uuid(&b);
    format!("MIG-{}", s.trim_start_matches("GPU-"))
}

/// Parse a `--mig` list (`3g.40gb,3g.40gb`).
pub fn parse_layout(list: &str) -> Result<Vec<String>, MigError> {
    let out: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    if out.is_empty() {
        return Err(MigError::Empty);
    }
    Ok(out)
}

/// The instances `layout` (profile names) creates on each of `devices`, validated against
/// each board's profiles and slices. GPU instance ids are 1, 2, … in the order given (real
/// drivers number them by placement); each has one compute instance, id 0. An empty layout:
/// MIG off, no instances.
pub fn plan(devices: &[SimDevice], layout: &[String]) -> Result<Vec<MigInstance>, MigError> {
    if layout.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for d in devices {
        let profiles = profiles_of(&d.name, d.total).ok_or_else(|| MigError::NotCapable {
            index: d.index,
            name: d.name.clone(),
        })?;
        let mut chosen: Vec<&Profile> = Vec::new();
        for name in layout {
            let prof = profiles.iter().find(|p| p.name == name).ok_or_else(|| {
                MigError::UnknownProfile {
                    index: d.index,
                    name: d.name.clone(),
                    profile: name.clone(),
                    offered: profiles
                        .iter()
                        .map(|p| p.name)
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            })?;
            chosen.push(prof);
            let count = chosen.iter().filter(|c| c.name == prof.name).count() as u32;
            if count > prof.max {
                return Err(MigError::TooMany {
                    index: d.index,
                    name: d.name.clone(),
                    profile: prof.name.into(),
                    max: prof.max,
                });
            }
        }
        let compute: u32 = chosen.iter().map(|p| p.compute).sum();
        let memory: u32 = chosen.iter().map(|p| p.memory_slices).sum();
        if compute > 7 || memory > 8 {
            return Err(MigError::DoesNotFit {
                index: d.index,
                name: d.name.clone(),
                profiles: layout.join(","),
                what: format!("{compute} compute and {memory} memory slices"),
            });
        }
        for (n, prof) in chosen.iter().enumerate() {
            let n = n as u32;
            let gi = n + 1;
            out.push(MigInstance {
                parent: d.index,
                gi,
                ci: 0,
                profile: prof.name.to_string(),
                device: SimDevice {
                    index: key(d.index, n),
                    name: format!("{} MIG {}", d.name, prof.name),
                    uuid: mig_uuid(&d.uuid, gi),
                    pci_bus_id: d.pci_bus_id.clone(),
                    total: prof.memory_mib * MIB,
                    reserved: 0,
                    context_overhead: d.context_overhead,
                    numa_node: None,
                    no_memory_info: false,
                    minor: None,
                },
            });
        }
    }
    Ok(out)
}

/// Check a `--mig` layout against the devices of box spec `spec` before a box is made (a bad
/// spec is the spec check's to report: nothing to say here then).
pub fn check_layout(spec: &str, layout: &[String]) -> Result<(), MigError> {
    let Ok(models) = crate::parse_spec(spec) else {
        return Ok(());
    };
    let devices: Vec<SimDevice> = models
        .iter()
        .enumerate()
        .map(|(i, m)| SimDevice {
            index: i as u32,
            name: m.name.clone(),
            uuid: String::new(),
            pci_bus_id: String::new(),
            total: m.total,
            reserved: m.reserved,
            context_overhead: 0,
            numa_node: None,
            no_memory_info: m.no_memory_info,
            minor: None,
        })
        .collect();
    plan(&devices, layout).map(|_| ())
}

/// The parent's memory in MIG mode: its own total and reservation; `used` the sum of its
/// instances' (the instances' memory is carved out of it).
pub fn parent_memory(parent: &SimDevice, instances: &[MigInstance], st: &State) -> SimMemory {
    let used: u64 = instances
        .iter()
        .filter(|m| m.parent == parent.index)
        .map(|m| crate::memory_of(&m.device, st).used)
        .sum();
    let avail = parent.total.saturating_sub(parent.reserved);
    let used = used.min(avail);
    SimMemory {
        total: parent.total,
        reserved: parent.reserved,
        used,
        free: avail - used,
    }
}

/// The CUDA devices of a process over `order` (host indices in CUDA's order) on a box with
/// MIG instances, given its `CUDA_VISIBLE_DEVICES`: `None` when none of those devices is in
/// MIG mode (the caller's ordinary mapping applies). A `MIG-<uuid>` list (unique prefixes
/// allowed, parsing stopping at the first entry that names no instance the process can open)
/// selects those instances; otherwise each MIG parent is replaced by the first instance the
/// process can open, and the list is read as usual. Either way CUDA enumerates at most one
/// MIG device per process ("CUDA Device Enumeration").
pub fn cuda_devices(
    instances: &[MigInstance],
    openable: &dyn Fn(&MigInstance) -> bool,
    order: &[u32],
    cuda_visible: Option<&str>,
    uuid_of: &dyn Fn(u32) -> Option<String>,
) -> Option<Vec<u32>> {
    if !order
        .iter()
        .any(|i| instances.iter().any(|m| m.parent == *i))
    {
        return None;
    }
    let open: Vec<&MigInstance> = order
        .iter()
        .flat_map(|i| instances.iter().filter(move |m| m.parent == *i))
        .filter(|m| openable(m))
        .collect();
    let mig_list = cuda_visible
        .map(str::trim)
        .is_some_and(|v| v.to_ascii_uppercase().starts_with("MIG-"));
    let mut out: Vec<u32> = Vec::new();
    if mig_list {
        for token in cuda_visible.unwrap_or("").split(',').map(str::trim) {
            let lower = token.to_ascii_lowercase();
            let hits: Vec<&&MigInstance> = open
                .iter()
                .filter(|m| {
                    lower.starts_with("mig-")
                        && m.device.uuid.to_ascii_lowercase().starts_with(&lower)
                })
                .collect();
            match hits.as_slice() {
                [one] if !out.contains(&one.device.index) => out.push(one.device.index),
                _ => break,
            }
        }
    } else {
        let expanded: Vec<u32> = order
            .iter()
            .filter_map(|i| {
                if instances.iter().any(|m| m.parent == *i) {
                    open.iter().find(|m| m.parent == *i).map(|m| m.device.index)
                } else {
                    Some(*i)
                }
            })
            .collect();
        let uuids: Vec<String> = expanded
            .iter()
            .map(|k| uuid_of(*k).unwrap_or_default())
            .collect();
        out = vramdoc_gpu_spec::visible::visible_devices(cuda_visible, &uuids)
            .into_iter()
            .filter_map(|pos| expanded.get(pos as usize).copied())
            .collect();
    }
    // One MIG device per process: the first one stays.
    let mut seen_mig = false;
    out.retain(|k| {
        if is_key(*k) {
            let keep = !seen_mig;
            seen_mig = true;
            keep
        } else {
            true
        }
    });
    Some(out)
}

impl crate::SimBox {
    /// Every MIG instance of the box (`sim init --mig`).
    pub fn mig_instances(&self) -> &[MigInstance] {
        &self.config.mig
    }

    /// The MIG instance of `key`.
    pub fn mig_instance(&self, key: u32) -> Option<&MigInstance> {
        self.config.mig.iter().find(|m| m.device.index == key)
    }

    /// Whether physical device `index` is in MIG mode (has instances).
    pub fn is_mig_parent(&self, index: u32) -> bool {
        !is_key(index) && self.config.mig.iter().any(|m| m.parent == index)
    }

    /// Whether this process can open MIG instance `m`: its capability file
    /// ([`cap_file`]) and its parent's device file exist in this process's view of the
    /// box (a container of the box's runtime gets only its instances' files).
    pub fn mig_openable(&self, m: &MigInstance) -> bool {
        let dev = self.dir.join(crate::DEV_DIR);
        self.device(m.parent)
            .is_ok_and(|p| dev.join(p.node_name()).exists())
            && dev.join(cap_file(m.device.index)).exists()
    }

    /// Whether this process holds the `mig/monitor` capability ([`MONITOR_CAP`] in its
    /// view of the box, readable by it): it may read MIG parents' aggregate process lists.
    pub fn mig_monitor(&self) -> bool {
        std::fs::File::open(self.dir.join(crate::DEV_DIR).join(MONITOR_CAP)).is_ok()
    }

    /// The box's MIG capability files: the monitor capability and one per instance (none
    /// without MIG).
    pub fn mig_cap_files(&self) -> Vec<std::path::PathBuf> {
        if self.config.mig.is_empty() {
            return Vec::new();
        }
        let dev = self.dir.join(crate::DEV_DIR);
        std::iter::once(dev.join(MONITOR_CAP))
            .chain(
                self.config
                    .mig
                    .iter()
                    .map(|m| dev.join(cap_file(m.device.index))),
            )
            .collect()
    }
}

/// The error of a query on a MIG parent's process lists that the caller may not make.
pub fn no_aggregate(parent: u32) -> SimError {
    SimError::NoPermission(parent)
}

#[cfg(test)]
mod tests;
