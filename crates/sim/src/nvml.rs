//! NVML's semantics on a box, once: a session ([`SimNvml`]) opened as `nvmlInit` opens one,
//! and its per-device queries — memory (v2 and v1), the process lists — with every fault,
//! driver-branch difference, latency and hang that applies to them. Answers are typed
//! ([`SimError`], whose `nvmlReturn_t` is [`SimError::nvml_code`]). The C ABI
//! (`vramdoc-simgpu`'s libnvidia-ml.so.1) and vramdoc's in-process monitor are translations of
//! this into `nvmlReturn_t` / structs and into `GpuError` / `MemoryInfo`: a new NVML behaviour
//! goes here, and both paths have it (docs/simulator.md, "Where a driver behaviour goes").
//!
//! Devices are named by their physical (host) index; a session sees only the devices mounted
//! into its process's view of the box ([`SimBox::mounted`]).

mod files;

pub use files::NvmlFiles;

use crate::profile::PidView;
use crate::{Faults, Platform, SimBox, SimDevice, SimError, SimMemory};
use std::time::{Duration, Instant};
use vramdoc_gpu_spec::ProcessKind;

/// Poll interval of a hung call ([`hang`]).
const HANG_POLL: Duration = Duration::from_millis(20);

/// Where the caller of a session stands, for the driver's PID translation
/// ([`crate::profile::PidView`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// In the box's (host) PID namespace: host PIDs with usage, whatever the driver.
    Host,
    /// In another PID namespace (a container without `hostPID`): its namespace's inode.
    Namespace(u64),
}

impl Caller {
    /// This process: in the host namespace when the box's broker reports our own PID (or
    /// there is no broker), else in our namespace.
    pub fn this_process(sim: &SimBox) -> Caller {
        let own = std::process::id();
        match (
            crate::broker::host_pid(sim.dir()),
            crate::procinfo::own_pidns(),
        ) {
            (Some(host), Some(ns)) if host != own => Caller::Namespace(ns),
            _ => Caller::Host,
        }
    }
}

/// One NVML session on a box (between `nvmlInit` and `nvmlShutdown`).
#[derive(Debug, Clone)]
pub struct SimNvml {
    sim: SimBox,
    /// Where the caller stands, for the driver's PID translation.
    caller: Caller,
    /// Host index of each NVML index this session shows.
    mounted: Vec<u32>,
    /// The box's NVML epoch when the session opened ([`Faults::nvml_epoch`]): a newer epoch
    /// means the session was lost.
    epoch: u64,
    /// The device files the session holds open, as real NVML's does ([`NvmlFiles`]).
    files: std::sync::Arc<NvmlFiles>,
}

/// Memory as `nvmlDeviceGetMemoryInfo` (v1, `nvmlMemory_t`) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryV1 {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// One record of a process list: `used` is `None` where NVML writes
/// `NVML_VALUE_NOT_AVAILABLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlProcess {
    pub pid: u32,
    pub used: Option<u64>,
    /// The GPU and compute instance ids of the MIG instance it runs in; `None` outside MIG
    /// mode (nvml.h, `nvmlProcessInfo_v2_t`: "If MIG is enabled, stores a valid GPU instance
    /// ID. gpuInstanceId is set to 0xFFFFFFFF otherwise", and so for the compute instance).
    pub instance: Option<(u32, u32)>,
}

/// Block while the box's `nvml_hang` fault applies to a call on physical `device` (`None`: a
/// call not about one device), re-reading the faults every 20 ms; past the fault's bound the
/// call fails ([`SimError::Hung`], `NVML_ERROR_UNKNOWN`). Returns the faults as they are when
/// the call may go on.
pub fn hang(sim: &SimBox, device: Option<u32>, mut faults: Faults) -> Result<Faults, SimError> {
    let start = Instant::now();
    while let Some(h) = faults.nvml_hang.filter(|h| h.applies(device)) {
        if start.elapsed() >= Duration::from_millis(h.limit_ms) {
            return Err(SimError::Hung {
                limit_ms: h.limit_ms,
            });
        }
        std::thread::sleep(HANG_POLL);
        faults = sim.faults()?;
    }
    Ok(faults)
}

/// The driver's lock a process list is read under: a client's lists (one per GPU, from as
/// many threads as it likes) are served one at a time, so reading eight GPUs' lists at once
/// still costs eight list latencies, as on a real driver (docs/simulator.md, *Latency*).
static LIST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Sleep an injected process-list latency of `us` microseconds under [`LIST_LOCK`].
fn list_delay(us: u64) {
    if us > 0 {
        let _held = LIST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::sleep(Duration::from_micros(us));
    }
}

/// Sleep an injected latency of `us` microseconds.
fn delay(us: u64) {
    if us > 0 {
        std::thread::sleep(Duration::from_micros(us));
    }
}

impl SimNvml {
    /// `nvmlInit` on `sim`, seeing the devices mounted into this process's view of the box.
    pub fn init(sim: SimBox) -> Result<SimNvml, SimError> {
        let mounted = sim.mounted();
        SimNvml::init_mounted(sim, mounted)
    }

    /// `nvmlInit` seeing only `mounted` (host indices, PCI order), numbered 0.. as NVML in a
    /// container does. Fails as the real init does: a hang of every call waits here, a
    /// library/kernel-module mismatch is [`SimError::DriverMismatch`], a container that lost
    /// its devices [`SimError::SessionLost`] ("Failed to initialize NVML: Unknown Error",
    /// NVIDIA/nvidia-container-toolkit#48).
    pub fn init_mounted(sim: SimBox, mounted: Vec<u32>) -> Result<SimNvml, SimError> {
        let faults = hang(&sim, None, sim.faults()?)?;
        if faults.driver_version_mismatch {
            return Err(SimError::DriverMismatch);
        }
        if faults.nvml_sessions_lost {
            return Err(SimError::SessionLost);
        }
        let caller = Caller::this_process(&sim);
        let files = std::sync::Arc::new(NvmlFiles::open(&sim, &mounted));
        Ok(SimNvml {
            sim,
            caller,
            mounted,
            epoch: faults.nvml_epoch,
            files,
        })
    }

    /// A session on `mounted` opened without init's checks (a monitor handed a box it was
    /// told to watch, tests): lost, like any session, once the box's NVML epoch moves on.
    pub fn attach(sim: SimBox, mounted: Vec<u32>) -> SimNvml {
        let epoch = sim.faults().map(|f| f.nvml_epoch).unwrap_or(0);
        let caller = Caller::this_process(&sim);
        let files = std::sync::Arc::new(NvmlFiles::open(&sim, &mounted));
        SimNvml {
            sim,
            caller,
            mounted,
            epoch,
            files,
        }
    }

    /// The same session as seen by `caller` (tests, and clients that know better).
    pub fn seen_from(mut self, caller: Caller) -> SimNvml {
        self.caller = caller;
        self
    }

    pub fn sim(&self) -> &SimBox {
        &self.sim
    }

    /// The device files this session holds open.
    pub fn files(&self) -> &NvmlFiles {
        &self.files
    }

    /// Host index of each NVML index of this session.
    pub fn mounted(&self) -> &[u32] {
        &self.mounted
    }

    /// Host index behind NVML index `index`.
    pub fn host(&self, index: u32) -> Result<u32, SimError> {
        self.mounted
            .get(index as usize)
            .copied()
            .ok_or(SimError::InvalidDevice(index))
    }

    /// Any call of the session: lost once the box's epoch moved past it
    /// ([`SimError::SessionLost`]), and waiting out a hang of every call. Returns the faults
    /// in force.
    pub fn session(&self) -> Result<Faults, SimError> {
        let faults = self.sim.faults()?;
        if faults.nvml_epoch > self.epoch {
            return Err(SimError::SessionLost);
        }
        hang(&self.sim, None, faults)
    }

    /// A per-device call on physical `host`: the session's checks, the device mounted in
    /// this view (else [`SimError::InvalidDevice`]), a hang of that device waited out, then
    /// the device lost or hidden from this caller.
    pub fn device(&self, host: u32) -> Result<(&SimDevice, Faults), SimError> {
        let faults = self.session()?;
        // A MIG instance (by its key): its parent mounted here and its capability openable.
        let visible = match self.sim.mig_instance(host) {
            Some(m) => self.mounted.contains(&m.parent) && self.sim.mig_openable(m),
            None => self.mounted.contains(&host),
        };
        if !visible {
            return Err(SimError::InvalidDevice(host));
        }
        let faults = hang(&self.sim, Some(host), faults)?;
        let dev = self.sim.check_nvml_device(host, &faults)?;
        Ok((dev, faults))
    }

    /// The framebuffer memory of a device that answered [`device`](Self::device): none on a
    /// unified-memory part ([`SimDevice::no_memory_info`]: `NVML_ERROR_NOT_SUPPORTED`), else
    /// after the injected memory latency.
    fn framebuffer(
        &self,
        dev: &SimDevice,
        faults: &Faults,
        call: &'static str,
    ) -> Result<SimMemory, SimError> {
        if dev.no_memory_info {
            return Err(SimError::NotSupported {
                call,
                device: dev.index,
            });
        }
        delay(faults.nvml_memory_latency_us);
        self.sim.memory_with(dev.index, faults)
    }

    /// `nvmlDeviceGetMemoryInfo_v2` (`used` excludes `reserved`): missing before R510
    /// ([`SimError::FunctionNotFound`]), failing under WSL (nvitop PR #30: "unknown error"
    /// with driver 516.59), not supported on unified-memory parts.
    pub fn memory(&self, host: u32) -> Result<SimMemory, SimError> {
        const CALL: &str = "nvmlDeviceGetMemoryInfo_v2";
        let (dev, faults) = self.device(host)?;
        self.parent_readable(dev)?;
        if !self.sim.config().nvml_api().memory_v2 {
            return Err(SimError::FunctionNotFound(CALL));
        }
        if self.sim.config().platform == Platform::Wsl {
            return Err(SimError::Unknown(
                "nvmlDeviceGetMemoryInfo_v2 fails under WSL (the Windows driver model)",
            ));
        }
        self.framebuffer(dev, &faults, CALL)
    }

    /// `nvmlDeviceGetMemoryInfo` (v1): `used` is reserved + allocated on R510+ (nvml.h "Sum
    /// of Reserved and Allocated"); before R510 the reservation is outside `total` and `used`.
    pub fn memory_v1(&self, host: u32) -> Result<MemoryV1, SimError> {
        let (dev, faults) = self.device(host)?;
        self.parent_readable(dev)?;
        let m = self.framebuffer(dev, &faults, "nvmlDeviceGetMemoryInfo")?;
        Ok(if self.sim.config().nvml_api().v1_counts_reserved {
            MemoryV1 {
                total: m.total,
                free: m.free,
                used: m.reserved + m.used,
            }
        } else {
            MemoryV1 {
                total: m.total - m.reserved,
                free: m.free,
                used: m.used,
            }
        })
    }

    /// Whether this caller may read MIG parents' aggregate process lists: in the host PID
    /// namespace and holding the `mig/monitor` capability ([`SimBox::mig_monitor`]); a
    /// container (another PID namespace, no capability file) may not.
    pub fn mig_privileged(&self) -> bool {
        self.caller == Caller::Host && self.sim.mig_monitor()
    }

    /// A MIG parent's aggregate data (memory, process lists) answers privileged callers only
    /// ([`SimNvml::mig_privileged`]); others get [`SimError::NoPermission`] and read their
    /// instances through MIG device handles.
    fn parent_readable(&self, dev: &SimDevice) -> Result<(), SimError> {
        if self.sim.is_mig_parent(dev.index) && !self.mig_privileged() {
            return Err(crate::mig::no_aggregate(dev.index));
        }
        Ok(())
    }

    /// `nvmlDeviceGetMigMode` (current mode) of physical `host`: whether it has instances.
    pub fn mig_mode(&self, host: u32) -> Result<bool, SimError> {
        let (dev, _) = self.device(host)?;
        Ok(self.sim.is_mig_parent(dev.index))
    }

    /// The MIG instances of physical `host` this caller can open, in GPU-instance order
    /// (`nvmlDeviceGetMigDeviceHandleByIndex` numbers them 0..): a container sees only those
    /// its runtime gave it.
    /// Box facts only (the session checked, no per-device hang or loss): counting devices
    /// never waits on one GPU; the instances' own queries meet those.
    pub fn mig_instances(&self, host: u32) -> Result<Vec<crate::mig::MigInstance>, SimError> {
        self.session()?;
        if !self.mounted.contains(&host) {
            return Err(SimError::InvalidDevice(host));
        }
        Ok(self
            .sim
            .mig_instances()
            .iter()
            .filter(|m| m.parent == host && self.sim.mig_openable(m))
            .cloned()
            .collect())
    }

    /// One process list (`kind`: compute, graphics or MPS) of physical `host`, after the
    /// injected process-list latency (~4.5 ms on real drivers, per list). A MIG parent read
    /// by an unprivileged caller has no aggregate data ([`SimError::NoPermission`]);
    /// per-process memory is "not available" under the fault that says so and always under
    /// WDDM ("Under WDDM, NVML_VALUE_NOT_AVAILABLE is always reported", nvml.h). A caller in
    /// another PID namespace sees what the box's driver generation shows it
    /// ([`PidView`]): host PIDs, or its own namespace's processes under their PIDs there
    /// (with 0 bytes from 535.113 to the 560 series, with usage from 565).
    pub fn processes(&self, host: u32, kind: ProcessKind) -> Result<Vec<NvmlProcess>, SimError> {
        let (dev, faults) = self.device(host)?;
        list_delay(faults.nvml_process_latency_us);
        if faults.mig_unprivileged_devices.contains(&dev.index) {
            return Err(SimError::NoPermission(dev.index));
        }
        // A parent in MIG mode: the aggregate of its instances, for privileged callers only.
        self.parent_readable(dev)?;
        // The devices whose processes the list shows: the device, or a MIG parent's
        // instances (by key); no list of them is built.
        let parent = self.sim.is_mig_parent(dev.index);
        let index = dev.index;
        let keys = self
            .sim
            .mig_instances()
            .iter()
            .filter(move |m| parent && m.parent == index)
            .map(|m| m.device.index)
            .chain((!parent).then_some(index));
        let hidden =
            faults.nvml_used_memory_unavailable || self.sim.config().platform == Platform::Wsl;
        let view = match self.caller {
            Caller::Host => PidView::HostPids,
            Caller::Namespace(_) => self.sim.config().pid_view,
        };
        let st = self.sim.state_view(&faults)?;
        Ok(keys
            .flat_map(|k| {
                let ids = self.sim.mig_instance(k).map(|m| (m.gi, m.ci));
                crate::processes_iter(k, &st).map(move |p| (p, ids))
            })
            .filter(|(p, _)| p.kind == kind)
            .filter_map(|(p, instance)| {
                let entry = st.processes.get(&p.pid);
                let (pid, used) = match (view, self.caller) {
                    (PidView::HostPids, _) | (_, Caller::Host) => (p.pid, p.used),
                    (_, Caller::Namespace(ns)) => {
                        // Translated into the caller's namespace; not visible there: dropped.
                        let e = entry.filter(|e| e.pidns == Some(ns))?;
                        let pid = e.ns_pid.unwrap_or(p.pid);
                        let used = if view == PidView::Translated {
                            p.used
                        } else {
                            0
                        };
                        (pid, used)
                    }
                };
                Some(NvmlProcess {
                    pid,
                    used: (!hidden).then_some(used),
                    instance,
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{InitOptions, NvmlHang};

    fn session(spec: &str, faults: Faults) -> (tempfile::TempDir, SimNvml) {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), spec, &InitOptions::default()).unwrap();
        sim.set_faults(&faults).unwrap();
        (dir, SimNvml::init(sim).unwrap())
    }

    #[test]
    fn gb10_has_no_framebuffer_memory_but_lists_its_processes() {
        let (_d, nvml) = session("gb10", Faults::default());
        let mut p = crate::SimProcess::new(nvml.sim().clone(), None);
        p.create_context(0).unwrap();
        for e in [
            nvml.memory(0).unwrap_err(),
            nvml.memory_v1(0).map(|_| ()).unwrap_err(),
        ] {
            assert!(matches!(e, SimError::NotSupported { device: 0, .. }), "{e}");
            assert_eq!(e.nvml_code(), crate::codes::nvml::NVML_ERROR_NOT_SUPPORTED);
        }
        let list = nvml.processes(0, ProcessKind::Compute).unwrap();
        assert_eq!(list.len(), 1);
        assert!(list[0].used.is_some_and(|u| u > 0));
        // CUDA's view works there.
        assert!(p.mem_info(0).unwrap().1 > 0);
    }

    #[test]
    fn init_and_sessions_fail_as_the_faults_say() {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "2x16GiB", &InitOptions::default()).unwrap();
        let nvml = SimNvml::init(sim.clone()).unwrap();
        sim.update_faults(|f, _| {
            f.nvml_sessions_lost = true;
            f.nvml_epoch += 1;
            Ok(())
        })
        .unwrap();
        assert!(matches!(nvml.memory(0), Err(SimError::SessionLost)));
        assert!(matches!(
            SimNvml::init(sim.clone()),
            Err(SimError::SessionLost)
        ));
        sim.update_faults(|f, _| {
            *f = f.cleared();
            f.driver_version_mismatch = true;
            Ok(())
        })
        .unwrap();
        let e = SimNvml::init(sim.clone()).unwrap_err();
        assert!(matches!(e, SimError::DriverMismatch));
        assert_eq!(
            e.nvml_code(),
            crate::codes::nvml::NVML_ERROR_LIB_RM_VERSION_MISMATCH
        );
        assert_eq!(
            e.cuda_code(),
            crate::codes::cuda::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        );
    }

    /// Two processes on device 0: ours (in namespace 111 as PID 7) and a neighbour's (in
    /// namespace 222), as each driver generation shows them to a caller in namespace 111.
    #[test]
    fn pid_namespaces_by_driver_generation() {
        for (view, want) in [
            (
                PidView::HostPids,
                vec![(4001, Some(1 << 30)), (4002, Some(2 << 30))],
            ),
            (PidView::TranslatedZeroUsage, vec![(7, Some(0))]),
            (PidView::Translated, vec![(7, Some(1 << 30))]),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let opts = InitOptions {
                pid_view: view,
                ..InitOptions::default()
            };
            let sim = SimBox::create(dir.path(), "16GiB", &opts).unwrap();
            sim.update(|st, _| {
                for (pid, ns, ns_pid, gib) in [(4001, 111, Some(7), 1u64), (4002, 222, None, 2)] {
                    let mut e = crate::ProcessEntry {
                        pidns: Some(ns),
                        ns_pid,
                        ..Default::default()
                    };
                    e.devices.insert(
                        0,
                        crate::DeviceUsage {
                            contexts: 1,
                            context_bytes: gib << 30,
                            ..Default::default()
                        },
                    );
                    st.processes.insert(pid, e);
                }
                Ok(())
            })
            .unwrap();
            let faults = Faults {
                keep_dead_processes: true,
                ..Faults::default()
            };
            sim.set_faults(&faults).unwrap();
            let nvml = SimNvml::attach(sim.clone(), vec![0]);
            let seen = |n: &SimNvml| -> Vec<(u32, Option<u64>)> {
                let mut l: Vec<_> = n
                    .processes(0, ProcessKind::Compute)
                    .unwrap()
                    .into_iter()
                    .map(|p| (p.pid, p.used))
                    .collect();
                l.sort();
                l
            };
            let inside = nvml.clone().seen_from(Caller::Namespace(111));
            assert_eq!(seen(&inside), want, "{view:?}");
            // The host sees host PIDs with usage under every generation.
            let host = nvml.seen_from(Caller::Host);
            assert_eq!(
                seen(&host),
                vec![(4001, Some(1 << 30)), (4002, Some(2 << 30))],
                "{view:?}"
            );
        }
    }

    #[test]
    fn per_device_faults_hangs_and_hidden_usage() {
        let (_d, nvml) = session(
            "3x16GiB",
            Faults {
                lost_devices: vec![1],
                mig_unprivileged_devices: vec![2],
                nvml_used_memory_unavailable: true,
                nvml_hang: Some(NvmlHang {
                    device: Some(0),
                    limit_ms: 30,
                }),
                ..Faults::default()
            },
        );
        assert!(matches!(
            nvml.memory(0),
            Err(SimError::Hung { limit_ms: 30 })
        ));
        assert!(matches!(nvml.memory(1), Err(SimError::DeviceLost(1))));
        assert!(nvml.memory(2).is_ok());
        assert!(matches!(
            nvml.processes(2, ProcessKind::Compute),
            Err(SimError::NoPermission(2))
        ));
        assert!(matches!(nvml.memory(7), Err(SimError::InvalidDevice(7))));
        let mut p = crate::SimProcess::new(nvml.sim().clone(), None);
        p.create_context(2).unwrap();
        nvml.sim()
            .update_faults(|f, _| {
                f.mig_unprivileged_devices.clear();
                Ok(())
            })
            .unwrap();
        let list = nvml.processes(2, ProcessKind::Compute).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].used, None, "usage not available under the fault");
        assert!(nvml.processes(2, ProcessKind::Graphics).unwrap().is_empty());
    }
}
