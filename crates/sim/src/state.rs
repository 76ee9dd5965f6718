//! The mutable shared state of a box (`state.json`): per-process usage per physical device,
//! and what NVML derives from it (memory per device, process lists).

use super::{entry_alive, SimDevice};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use vramdoc_gpu_spec::ProcessKind;

/// Usage of one process on one physical device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceUsage {
    pub contexts: u32,
    pub context_bytes: u64,
    pub allocations: u32,
    pub alloc_bytes: u64,
}

impl DeviceUsage {
    pub fn total(&self) -> u64 {
        self.context_bytes + self.alloc_bytes
    }
}

/// One process known to the box.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEntry {
    /// Start time from /proc (0: unknown, liveness by PID only).
    pub start_time: u64,
    pub name: String,
    /// Usage keyed by physical device index.
    pub devices: BTreeMap<u32, DeviceUsage>,
    /// Which NVML process list the process appears in.
    #[serde(default)]
    pub kind: ProcessKind,
    /// Token file under `dev/clients/` the process holds open and locked: the process's
    /// memory stays while any process (a forked child) still holds it. `None`: liveness by
    /// PID and start time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The PID the process sees for itself when that differs from the host PID (the key)
    /// because it runs in a child PID namespace (a container, `unshare --pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<u32>,
}

/// The mutable shared state of a box.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    pub processes: BTreeMap<u32, ProcessEntry>,
    /// Allocation calls made on the box so far (for `Faults::alloc_fail_after`).
    pub alloc_calls: u64,
}

/// Memory of one device, NVML v2 definitions: `used` excludes `reserved`;
/// `total = reserved + used + free`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimMemory {
    pub total: u64,
    pub reserved: u64,
    pub used: u64,
    pub free: u64,
}

/// A process on a device as NVML lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimProcessView {
    pub pid: u32,
    pub used: u64,
    pub kind: ProcessKind,
}

/// Memory of `dev` given `st` (NVML v2: used excludes reserved).
pub fn memory_of(dev: &SimDevice, st: &State) -> SimMemory {
    let used: u64 = st
        .processes
        .values()
        .filter_map(|p| p.devices.get(&dev.index))
        .map(DeviceUsage::total)
        .sum();
    let avail = dev.total.saturating_sub(dev.reserved);
    let used = used.min(avail);
    SimMemory {
        total: dev.total,
        reserved: dev.reserved,
        used,
        free: avail - used,
    }
}

/// Processes holding anything (a context at least) on physical device `index`.
pub fn processes_on(index: u32, st: &State) -> Vec<SimProcessView> {
    st.processes
        .iter()
        .filter_map(|(pid, p)| {
            p.devices
                .get(&index)
                .filter(|u| u.contexts > 0 || u.total() > 0)
                .map(|u| SimProcessView {
                    pid: *pid,
                    used: u.total(),
                    kind: p.kind,
                })
        })
        .collect()
}

/// Drop exited processes from `st`; returns the token files of those that had one.
pub(crate) fn reap(dir: &Path, st: &mut State) -> Vec<String> {
    let mut gone = Vec::new();
    st.processes.retain(|pid, p| {
        let alive = entry_alive(dir, *pid, p);
        if !alive {
            gone.extend(p.client.clone());
        }
        alive
    });
    gone
}
