//! One process's side of the simulated driver: CUDA ordinals mapped through
//! `CUDA_VISIBLE_DEVICES`, its contexts and allocations, and the contents of device memory.
//! Usage is charged to the shared box state on every change, so NVML readers in other
//! processes see it. Contents live in this process only: allocations up to
//! [`BACKED_LIMIT`] are backed by host memory; larger ones hold a uniform 32-bit pattern (what
//! the fill kernel writes), so a 40 GiB allocation costs no host RAM.
//!
//! Kernels are emulated by name: `vramdoc_fill_u32` and `vramdoc_checksum_u32` (see
//! kernels/vramdoc.cu and `vramdoc_gpu_spec::kernel`) compute exactly what the PTX computes on
//! a GPU.

use crate::{procinfo, SimBox, SimError, SimMemory, GRANULARITY};
use std::collections::{BTreeMap, HashMap};
use vramdoc_gpu_spec::units::{round_up, MIB};
use vramdoc_gpu_spec::{visible, ProcessKind};

mod client;
mod contents;
mod ipc;
mod managed;

pub use ipc::{Import, IPC_HANDLE_SIZE};
#[cfg(test)]
mod tests;

pub use client::CONTEXT_UVM_MAPPING;
use client::{forget_token, token_file, ClientFiles, UvmMapping};

/// What a process's environment says about the devices it may use and their order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessEnv {
    /// `CUDA_VISIBLE_DEVICES`: indices (in CUDA's order) or UUIDs.
    pub cuda_visible: Option<String>,
    /// `CUDA_DEVICE_ORDER`: `FASTEST_FIRST` (default) or `PCI_BUS_ID`.
    pub device_order: Option<String>,
}

impl ProcessEnv {
    /// This process's own environment.
    pub fn from_env() -> ProcessEnv {
        ProcessEnv {
            cuda_visible: std::env::var(visible::CUDA_VISIBLE_DEVICES).ok(),
            device_order: std::env::var(visible::CUDA_DEVICE_ORDER).ok(),
        }
    }
}

/// Host indices of the devices a process sees, in CUDA's enumeration order (before
/// `CUDA_VISIBLE_DEVICES`).
pub fn cuda_enumeration(sim: &SimBox, env: &ProcessEnv) -> Vec<u32> {
    let mounted = sim.mounted();
    visible::cuda_order(&mounted, env.device_order.as_deref(), |i| {
        let name = sim.device(i).map(|d| d.name.as_str()).unwrap_or("");
        let ((major, minor), sms) = crate::spec::arch_of(name);
        (major, minor, sms)
    })
}

/// Allocations up to this size get real host backing for their contents.
pub const BACKED_LIMIT: u64 = 64 * MIB;
/// Host memory one simulated process may use to back allocations (docs/security.md).
pub const HOST_BACKING_LIMIT: u64 = 512 * MIB;

/// Where simulated device pointers start; each allocation gets its own aligned range.
const VA_BASE: u64 = 0x7f00_0000_0000;

#[derive(Debug)]
enum Contents {
    /// Host backing (lazily zero-filled).
    Backed(Vec<u8>),
    /// Every 32-bit word holds this value (zero after allocation).
    Uniform(u32),
}

#[derive(Debug)]
struct Allocation {
    ordinal: u32,
    size: u64,
    charged: u64,
    contents: Contents,
    /// Managed (`cuMemAllocManaged`): charged to the process's `managed_bytes`, not to its
    /// listed usage.
    managed: bool,
    /// A managed allocation's mapping of `dev/nvidia-uvm` (its size), unmapped with it.
    _uvm_map: Option<UvmMapping>,
}

/// The simulated driver as one process sees it.
#[derive(Debug)]
pub struct SimProcess {
    sim: SimBox,
    pid: u32,
    start_time: u64,
    /// Physical index for each CUDA ordinal.
    ordinals: Vec<u32>,
    /// Context reference counts per ordinal.
    contexts: HashMap<u32, u32>,
    allocations: BTreeMap<u64, Allocation>,
    next_va: u64,
    /// Bytes of host-backed allocations (bounded by [`HOST_BACKING_LIMIT`]).
    backed_bytes: u64,
    /// PID as this process sees it (differs from `pid` inside a PID namespace).
    own_pid: u32,
    kind: ProcessKind,
    /// Further NVML lists the process is in (`C+G`).
    also: Vec<ProcessKind>,
    files: Option<ClientFiles>,
    /// CUDA IPC mappings this process opened, by the device pointer it got.
    imports: BTreeMap<u64, Import>,
}

impl SimProcess {
    /// Attach this process to `sim`, with `visible` as its `CUDA_VISIBLE_DEVICES` (and no
    /// other device environment: every device mounted, CUDA's default order).
    pub fn new(sim: SimBox, visible: Option<&str>) -> SimProcess {
        let env = ProcessEnv {
            cuda_visible: visible.map(str::to_string),
            ..ProcessEnv::default()
        };
        SimProcess::with_env(sim, &env)
    }

    /// Attach this process to `sim` with the given device environment.
    pub fn with_env(sim: SimBox, env: &ProcessEnv) -> SimProcess {
        let order = cuda_enumeration(&sim, env);
        let uuids: Vec<String> = order
            .iter()
            .filter_map(|i| sim.device(*i).ok())
            .map(|d| d.uuid.clone())
            .collect();
        // MIG: instances instead of their parents (crate::mig::cuda_devices).
        let mig = crate::mig::cuda_devices(
            sim.mig_instances(),
            &|m| sim.mig_openable(m),
            &order,
            env.cuda_visible.as_deref(),
            &|k| sim.device(k).ok().map(|d| d.uuid.clone()),
        );
        let ordinals = mig.unwrap_or_else(|| {
            visible::visible_devices(env.cuda_visible.as_deref(), &uuids)
                .into_iter()
                .filter_map(|pos| order.get(pos as usize).copied())
                .collect()
        });
        let own_pid = std::process::id();
        // The host PID, as the box's broker (its "kernel driver") sees us.
        let pid = crate::broker::host_pid(sim.dir()).unwrap_or(own_pid);
        SimProcess {
            start_time: procinfo::start_time(own_pid).unwrap_or(0),
            pid,
            own_pid,
            sim,
            ordinals,
            contexts: HashMap::new(),
            allocations: BTreeMap::new(),
            next_va: VA_BASE,
            backed_bytes: 0,
            kind: ProcessKind::Compute,
            also: Vec::new(),
            files: None,
            imports: BTreeMap::new(),
        }
    }

    /// Attach to the box of `VRAMDOC_SIM_DIR`, honouring this process's
    /// `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER` (and, in a container, the devices its
    /// runtime mounted: [`SimBox::mounted`]).
    pub fn from_env() -> Result<SimProcess, SimError> {
        let sim = SimBox::from_env()?;
        Ok(SimProcess::with_env(sim, &ProcessEnv::from_env()))
    }

    /// List this process in NVML's graphics or MPS list instead of the compute one (set
    /// before the first context).
    pub fn set_kind(&mut self, kind: ProcessKind) {
        self.kind = kind;
    }

    /// Also list this process in `kinds` (a process with compute and graphics contexts is
    /// `C+G`: in both lists, with the same memory). Set before the first context.
    pub fn set_also(&mut self, kinds: &[ProcessKind]) {
        self.also = kinds.to_vec();
    }

    /// This process's PID as NVML reports it (the host PID).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// This process's token file name under `dev/clients`: `<pid>-<start time>`.
    fn token_name(&self) -> String {
        format!("{}-{}", self.pid, self.start_time)
    }

    /// Open the driver files (once) and the node of `phys`, as a real CUDA client opens
    /// /dev/nvidiactl and /dev/nvidiaN. Returns the token file's name.
    fn open_files(&mut self, phys: u32) -> Result<String, SimError> {
        let token = self.token_name();
        if self.files.is_none() {
            let dev = self.sim.dir().join(crate::DEV_DIR);
            let tok = token_file(&dev, &token)?;
            let ctl = crate::open_node(&dev.join("nvidiactl"))?;
            // Every CUDA process holds nvidia-uvm, managed memory or not (creating the node in
            // a box made before it existed).
            let uvm = crate::open_node(&dev.join(crate::UVM_NODE))?;
            self.files = Some(ClientFiles {
                token: tok,
                ctl,
                nodes: HashMap::new(),
                uvm,
                context_map: None,
            });
        }
        // A MIG instance is reached through its parent's device file.
        let node = self
            .sim
            .node_path(self.sim.mig_instance(phys).map_or(phys, |m| m.parent))?;
        if let Some(f) = self.files.as_mut() {
            if let std::collections::hash_map::Entry::Vacant(e) = f.nodes.entry(phys) {
                e.insert(crate::open_node(&node)?);
            }
        }
        Ok(token)
    }

    pub fn sim(&self) -> &SimBox {
        &self.sim
    }

    pub fn device_count(&self) -> u32 {
        self.ordinals.len() as u32
    }

    /// Physical index of a CUDA ordinal.
    pub fn physical(&self, ordinal: u32) -> Result<u32, SimError> {
        self.ordinals
            .get(ordinal as usize)
            .copied()
            .ok_or(SimError::InvalidDevice(ordinal))
    }

    pub fn device(&self, ordinal: u32) -> Result<&crate::SimDevice, SimError> {
        self.sim.device(self.physical(ordinal)?)
    }

    pub fn has_context(&self, ordinal: u32) -> bool {
        self.contexts.get(&ordinal).copied().unwrap_or(0) > 0
    }

    /// Create (or retain) a context on `ordinal`; every context costs the device's overhead.
    pub fn create_context(&mut self, ordinal: u32) -> Result<(), SimError> {
        let phys = self.physical(ordinal)?;
        let (pid, start, own_pid, kind) = (self.pid, self.start_time, self.own_pid, self.kind);
        let also = self.also.clone();
        let name = procinfo::comm(own_pid);
        let token = self.open_files(phys)?;
        // The context's mappings, made before it is listed (a monitor that sees the process
        // sees them), and undone if the context is refused.
        self.map_context_uvm()?;
        let sim = self.sim.clone();
        let made = sim.update(|st, faults| {
            let dev = sim.check_device(phys, faults)?;
            if faults.exclusive_process_devices.contains(&phys) {
                // EXCLUSIVE_PROCESS: one process may hold contexts on the device.
                let other = st.processes.iter().any(|(p, e)| {
                    *p != pid
                        && e.kind == ProcessKind::Compute
                        && e.devices.get(&phys).is_some_and(|u| u.contexts > 0)
                });
                if other {
                    return Err(SimError::DeviceBusy(phys));
                }
            }
            // A graphics-only client (a display server: NVML's graphics list, no CUDA
            // context) holds what it allocates and no CUDA context overhead: Xorg at 28 MiB
            // and gnome-shell at 46 MiB in nvidia-smi -q (NVIDIA/nvidia-docker#1264).
            let overhead = if kind == ProcessKind::Graphics {
                0
            } else {
                dev.context_overhead
            };
            let mut mem = crate::memory_of(dev, st);
            if mem.free < overhead {
                crate::reclaim(st, phys, overhead - mem.free);
                mem = crate::memory_of(dev, st);
            }
            if mem.free < overhead {
                return Err(SimError::OutOfMemory {
                    device: phys,
                    requested: overhead,
                    free: mem.free,
                });
            }
            let entry = st.processes.entry(pid).or_default();
            entry.start_time = start;
            entry.name = name;
            entry.kind = kind;
            entry.also = also.clone();
            entry.client = Some(token);
            entry.ns_pid = (own_pid != pid).then_some(own_pid);
            entry.pidns = procinfo::own_pidns();
            let u = entry.devices.entry(phys).or_default();
            u.contexts = u.contexts.saturating_add(1);
            u.context_bytes = u.context_bytes.saturating_add(overhead);
            Ok(())
        });
        if let Err(e) = made {
            if self.contexts.is_empty() {
                if let Some(f) = self.files.as_mut() {
                    f.context_map = None;
                }
            }
            return Err(e);
        }
        let n = self.contexts.entry(ordinal).or_insert(0);
        *n = n.saturating_add(1);
        Ok(())
    }

    /// Destroy one context on `ordinal`. Destroying the last one frees every allocation the
    /// process made on that device, as the real driver does.
    pub fn destroy_context(&mut self, ordinal: u32) -> Result<(), SimError> {
        let phys = self.physical(ordinal)?;
        let count = self.contexts.get(&ordinal).copied().unwrap_or(0);
        if count == 0 {
            return Err(SimError::NoContext(ordinal));
        }
        let last = count == 1;
        let freed: Vec<u64> = if last {
            self.allocations
                .iter()
                .filter(|(_, a)| a.ordinal == ordinal)
                .map(|(va, _)| *va)
                .collect()
        } else {
            Vec::new()
        };
        let freed_of = |managed: bool| -> (u64, u32) {
            freed
                .iter()
                .filter_map(|va| self.allocations.get(va))
                .filter(|a| a.managed == managed)
                .fold((0, 0), |(b, n), a| (b + a.charged, n + 1))
        };
        let (freed_bytes, n_freed) = freed_of(false);
        let (freed_managed, _) = freed_of(true);
        let pid = self.pid;
        let sim = self.sim.clone();
        sim.update(|st, _| {
            if let Some(entry) = st.processes.get_mut(&pid) {
                if let Some(u) = entry.devices.get_mut(&phys) {
                    let overhead = sim.device(phys)?.context_overhead;
                    u.contexts = u.contexts.saturating_sub(1);
                    u.context_bytes = u.context_bytes.saturating_sub(overhead);
                    u.alloc_bytes = u.alloc_bytes.saturating_sub(freed_bytes);
                    u.allocations = u.allocations.saturating_sub(n_freed);
                    u.managed_bytes = u.managed_bytes.saturating_sub(freed_managed);
                    if !u.listed() {
                        entry.devices.remove(&phys);
                    }
                }
                if entry.devices.is_empty() {
                    st.processes.remove(&pid);
                }
            }
            Ok(())
        })?;
        for va in freed {
            self.forget_allocation(va);
        }
        if last {
            self.contexts.remove(&ordinal);
        } else if let Some(c) = self.contexts.get_mut(&ordinal) {
            *c -= 1;
        }
        if self.contexts.is_empty() {
            if let Some(f) = self.files.as_mut() {
                f.context_map = None;
            }
        }
        Ok(())
    }

    /// Allocate `bytes` on `ordinal` (a context must exist there). Charged rounded up to the
    /// 2 MiB granularity. Returns the device pointer.
    pub fn alloc(&mut self, ordinal: u32, bytes: u64) -> Result<u64, SimError> {
        self.alloc_as(ordinal, bytes, false)
    }

    /// [`SimProcess::alloc`], or a managed allocation ([`SimProcess::alloc_managed`]).
    fn alloc_as(&mut self, ordinal: u32, bytes: u64, managed: bool) -> Result<u64, SimError> {
        if !self.has_context(ordinal) {
            return Err(SimError::NoContext(ordinal));
        }
        let phys = self.physical(ordinal)?;
        let charged = round_up(bytes.max(1), GRANULARITY);
        let pid = self.pid;
        let sim = self.sim.clone();
        sim.update(|st, faults| {
            sim.check_device(phys, faults)?;
            st.alloc_calls = st.alloc_calls.saturating_add(1);
            let mut mem = crate::memory_of(sim.device(phys)?, st);
            if mem.free < charged {
                // Coherent memory: the OS hands back pages it kept from exited processes.
                crate::reclaim(st, phys, charged - mem.free);
                mem = crate::memory_of(sim.device(phys)?, st);
            }
            let injected = faults.alloc_fail_after.is_some_and(|n| st.alloc_calls > n);
            if injected || mem.free < charged {
                return Err(SimError::OutOfMemory {
                    device: phys,
                    requested: charged,
                    free: mem.free,
                });
            }
            let u = st
                .processes
                .entry(pid)
                .or_default()
                .devices
                .entry(phys)
                .or_default();
            if managed {
                u.managed_bytes = u.managed_bytes.saturating_add(charged);
            } else {
                u.allocations = u.allocations.saturating_add(1);
                u.alloc_bytes = u.alloc_bytes.saturating_add(charged);
            }
            Ok(())
        })
        .map_err(|e| {
            // The failed call still counts towards alloc_fail_after.
            if matches!(e, SimError::OutOfMemory { .. }) {
                let _ = sim.update(|st, _| {
                    st.alloc_calls = st.alloc_calls.saturating_add(1);
                    Ok(())
                });
            }
            e
        })?;
        let va = self.next_va;
        self.next_va =
            round_up(va.saturating_add(charged), GRANULARITY).saturating_add(GRANULARITY);
        // Host memory is bounded per process: past HOST_BACKING_LIMIT, small allocations are
        // uniform like large ones.
        let contents = if bytes <= BACKED_LIMIT
            && self.backed_bytes.saturating_add(bytes) <= HOST_BACKING_LIMIT
        {
            self.backed_bytes += bytes;
            Contents::Backed(Vec::new())
        } else {
            Contents::Uniform(0)
        };
        self.allocations.insert(
            va,
            Allocation {
                ordinal,
                size: bytes,
                charged,
                contents,
                managed,
                _uvm_map: None,
            },
        );
        Ok(va)
    }

    /// Free the allocation starting at `ptr`.
    pub fn free(&mut self, ptr: u64) -> Result<(), SimError> {
        let alloc = self
            .allocations
            .get(&ptr)
            .ok_or(SimError::InvalidPointer(ptr))?;
        let phys = self.physical(alloc.ordinal)?;
        let (charged, managed) = (alloc.charged, alloc.managed);
        let pid = self.pid;
        self.sim.update(|st, _| {
            // Its IPC handles die with it.
            st.ipc.retain(|_, e| !(e.pid == pid && e.ptr == ptr));
            if let Some(u) = st
                .processes
                .get_mut(&pid)
                .and_then(|e| e.devices.get_mut(&phys))
            {
                if managed {
                    u.managed_bytes = u.managed_bytes.saturating_sub(charged);
                } else {
                    u.alloc_bytes = u.alloc_bytes.saturating_sub(charged);
                    u.allocations = u.allocations.saturating_sub(1);
                }
            }
            Ok(())
        })?;
        self.forget_allocation(ptr);
        Ok(())
    }

    /// Drop this process's record of the allocation at `va`, returning its host backing to
    /// the per-process budget.
    fn forget_allocation(&mut self, va: u64) {
        if let Some(a) = self.allocations.remove(&va) {
            if matches!(a.contents, Contents::Backed(_)) {
                self.backed_bytes = self.backed_bytes.saturating_sub(a.size);
            }
        }
    }

    /// Size (as requested) of the allocation starting at `ptr`.
    pub fn allocation_size(&self, ptr: u64) -> Option<u64> {
        self.allocations.get(&ptr).map(|a| a.size)
    }

    /// `(free, total)` of a device as `cuMemGetInfo` reports it.
    pub fn mem_info(&self, ordinal: u32) -> Result<(u64, u64), SimError> {
        let faults = self.sim.faults()?;
        let m: SimMemory = self.sim.memory_with(self.physical(ordinal)?, &faults)?;
        let total = if faults.cuda_total_excludes_reserved {
            m.total - m.reserved
        } else {
            m.total
        };
        Ok((m.free, total))
    }

    /// Fail if the device behind `ordinal` is lost or had an error contained (for
    /// synchronize and launches).
    pub fn check(&self, ordinal: u32) -> Result<(), SimError> {
        let faults = self.sim.faults()?;
        let phys = self.physical(ordinal)?;
        self.sim.check_device(phys, &faults)?;
        if faults.contained_devices.contains(&phys) {
            return Err(SimError::Contained(phys));
        }
        Ok(())
    }

    /// Release everything this process holds on the box (contexts and allocations).
    pub fn release_all(&mut self) -> Result<(), SimError> {
        let pid = self.pid;
        self.sim.update(|st, _| {
            st.processes.remove(&pid);
            st.ipc.retain(|_, e| e.pid != pid);
            Ok(())
        })?;
        self.allocations.clear();
        self.imports.clear();
        self.backed_bytes = 0;
        self.contexts.clear();
        let last = self
            .files
            .take()
            .is_some_and(|f| std::sync::Arc::strong_count(&f.token) == 2);
        if last {
            let dev = self.sim.dir().join(crate::DEV_DIR);
            forget_token(&dev);
            let _ = std::fs::remove_file(dev.join(crate::CLIENTS_DIR).join(self.token_name()));
        }
        Ok(())
    }
}
