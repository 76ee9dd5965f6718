//! The mutable shared state of a box (`state.json`): per-process usage per physical device,
//! and what NVML derives from it (memory per device, process lists); reading it.

use super::{entry_alive, Faults, SimBox, SimDevice, SimError};
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
    /// Mappings of this device's memory the process holds without owning it (CUDA IPC
    /// handles opened from a peer, peer access): it is listed on the device, charged nothing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub peer_mappings: u32,
    /// Managed (unified) memory of the process resident on this device
    /// (`cuMemAllocManaged`): counted in the device's `used`, in no process's
    /// `usedGpuMemory` (docs/simulator.md, "Managed memory").
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub managed_bytes: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl DeviceUsage {
    /// What NVML lists as the process's `usedGpuMemory` on the device: its contexts and
    /// device allocations, not its managed memory.
    pub fn total(&self) -> u64 {
        self.context_bytes + self.alloc_bytes
    }

    /// What the process's usage adds to the device's `used`: [`DeviceUsage::total`] plus
    /// its resident managed memory.
    pub fn resident(&self) -> u64 {
        self.total().saturating_add(self.managed_bytes)
    }

    /// Whether the process appears in the device's NVML process list.
    pub fn listed(&self) -> bool {
        self.contexts > 0 || self.total() > 0 || self.peer_mappings > 0
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
    /// Further lists it also appears in, with the same memory (`C+G`: a process with both
    /// compute and graphics contexts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<ProcessKind>,
    /// Token file under `dev/clients/` the process holds open and locked: the process's
    /// memory stays while any process (a forked child) still holds it. `None`: liveness by
    /// PID and start time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The PID the process sees for itself when that differs from the host PID (the key)
    /// because it runs in a child PID namespace (a container, `unshare --pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<u32>,
    /// The process's PID namespace (the inode of `/proc/PID/ns/pid`), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pidns: Option<u64>,
}

/// The mutable shared state of a box.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    pub processes: BTreeMap<u32, ProcessEntry>,
    /// Allocation calls made on the box so far (for `Faults::alloc_fail_after`).
    pub alloc_calls: u64,
    /// Coherent-memory devices (GPU memory as a NUMA node, GH200/GB200): bytes of exited
    /// processes the operating system has not taken back, still counted as used, by
    /// physical device. Reclaimed when an allocation needs them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub retained: BTreeMap<u32, u64>,
    /// CUDA IPC handles exported on the box (`cuIpcGetMemHandle`), by handle id.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ipc: BTreeMap<u64, IpcExport>,
    /// The next IPC handle id.
    pub next_ipc: u64,
}

/// An allocation exported with `cuIpcGetMemHandle`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpcExport {
    /// Host PID of the exporter (the memory is charged to it).
    pub pid: u32,
    /// Physical device of the memory.
    pub device: u32,
    /// Size of the allocation, bytes.
    pub size: u64,
    /// The exporter's device pointer.
    pub ptr: u64,
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

/// Reading the state: shared per version of the file ([`crate::cache`]), reaped of exited
/// processes unless the faults keep them.
impl SimBox {
    /// The state file as it is (missing: the empty state), parsed only when it was
    /// replaced since this handle last read it ([`crate::cache`]).
    pub(crate) fn read_state_shared(&self) -> Result<std::sync::Arc<State>, SimError> {
        let path = self.dir.join(crate::STATE_FILE);
        Ok(self.state_seen.read(&self.dir, &path)?.unwrap_or_default())
    }

    pub(crate) fn read_state_raw(&self) -> Result<State, SimError> {
        Ok((*self.read_state_shared()?).clone())
    }

    /// The state as it is now, with exited processes' memory returned (unless the
    /// `keep_dead_processes` fault holds it). Lock-free: state.json is replaced atomically.
    pub fn state(&self) -> Result<State, SimError> {
        self.state_with(&self.faults()?)
    }

    /// [`state`](Self::state) under faults the caller has already read.
    pub fn state_with(&self, faults: &Faults) -> Result<State, SimError> {
        Ok((*self.state_view(faults)?).clone())
    }

    /// [`state_with`](Self::state_with) shared, for the per-call paths (NVML's memory and
    /// process lists): the parsed file itself while every process in it is alive (checked
    /// now, on each call), a reaped copy otherwise.
    pub fn state_view(&self, faults: &Faults) -> Result<std::sync::Arc<State>, SimError> {
        let st = self.read_state_shared()?;
        if faults.keep_dead_processes
            || st
                .processes
                .iter()
                .all(|(pid, p)| entry_alive(&self.dir, *pid, p))
        {
            return Ok(st);
        }
        let mut own = (*st).clone();
        reap(&self.dir, &mut own, &self.coherent_devices());
        Ok(std::sync::Arc::new(own))
    }
}

/// Memory of `dev` given `st` (NVML v2: used excludes reserved).
pub fn memory_of(dev: &SimDevice, st: &State) -> SimMemory {
    let used: u64 = st
        .processes
        .values()
        .filter_map(|p| p.devices.get(&dev.index))
        .map(DeviceUsage::resident)
        .sum::<u64>()
        .saturating_add(st.retained.get(&dev.index).copied().unwrap_or(0));
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
    processes_iter(index, st).collect()
}

/// [`processes_on`] without collecting (NVML's process lists filter it further).
pub fn processes_iter(index: u32, st: &State) -> impl Iterator<Item = SimProcessView> + '_ {
    st.processes.iter().flat_map(move |(pid, p)| {
        p.devices
            .get(&index)
            .filter(|u| u.listed())
            .into_iter()
            .flat_map(move |u| {
                std::iter::once(p.kind)
                    .chain(p.also.iter().copied().filter(move |k| *k != p.kind))
                    .map(move |kind| SimProcessView {
                        pid: *pid,
                        used: u.total(),
                        kind,
                    })
            })
    })
}

/// Take back up to `need` bytes a coherent device retained for exited processes; returns
/// what was taken.
pub fn reclaim(st: &mut State, device: u32, need: u64) -> u64 {
    let Some(r) = st.retained.get_mut(&device) else {
        return 0;
    };
    let take = (*r).min(need);
    *r -= take;
    if *r == 0 {
        st.retained.remove(&device);
    }
    take
}

/// Drop exited processes from `st` (and the IPC handles they exported); returns the token
/// files of those that had one. On `coherent` devices their memory stays counted as used
/// ([`State::retained`]), as NVML documents for GPUs that are NUMA nodes.
pub(crate) fn reap(dir: &Path, st: &mut State, coherent: &[u32]) -> Vec<String> {
    let mut gone = Vec::new();
    let mut dead = Vec::new();
    let mut kept: BTreeMap<u32, u64> = BTreeMap::new();
    st.processes.retain(|pid, p| {
        let alive = entry_alive(dir, *pid, p);
        if !alive {
            gone.extend(p.client.clone());
            dead.push(*pid);
            for (d, u) in &p.devices {
                if coherent.contains(d) {
                    *kept.entry(*d).or_insert(0) += u.resident();
                }
            }
        }
        alive
    });
    for (d, bytes) in kept {
        if bytes > 0 {
            *st.retained.entry(d).or_insert(0) += bytes;
        }
    }
    st.ipc.retain(|_, e| !dead.contains(&e.pid));
    gone
}
