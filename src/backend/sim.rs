//! The in-process simulated backends: [`SimDriver`] and [`SimMonitor`] over a `vramdoc_sim`
//! box, and how the simulator's errors read as [`GpuError`]s. They answer as the real backends
//! do over the `vramdoc-simgpu` libraries, without loading any library. Utilization is always
//! 0 % and temperature a fixed [`vramdoc_sim::TEMPERATURE_C`]: the simulator models memory
//! only.

use crate::gpu::{
    cuda_codes, cuda_error, cuda_version_string, nvml_version_mismatch, AllocId, CallCounters,
    CallCounts, ContextId, DeviceInfo, DeviceStatus, Driver, GpuError, GpuProcess, MemoryInfo,
    Monitor, Result, Versions,
};
use std::collections::HashMap;
use std::time::Duration;
use vramdoc_sim::{Faults, SimBox, SimError, SimMemory, SimProcess};

/// The simulator's errors at the GPU boundary: each as the real driver's error for the same
/// condition (a lost device, a busy one, out of memory...); the box's own failures (no box,
/// unreadable files) as [`GpuError::Backend`], an environment problem when there is no usable
/// box.
impl From<SimError> for GpuError {
    fn from(e: SimError) -> Self {
        use SimError as S;
        match e {
            S::InvalidDevice(i) => GpuError::InvalidDevice(i),
            S::DeviceLost(i) => GpuError::DeviceLost(i),
            S::DeviceBusy(_) => cuda_error(
                "cuDevicePrimaryCtxRetain",
                cuda_codes::DEVICE_UNAVAILABLE,
                "",
                "",
            ),
            S::Contained(_) => cuda_error("cuCtxSynchronize", cuda_codes::CONTAINED, "", ""),
            S::NoPermission(i) => GpuError::Driver {
                call: format!("device {i}"),
                code: "NVML_ERROR_NO_PERMISSION".into(),
                message: "insufficient permissions to query this device".into(),
            },
            S::OutOfMemory {
                device,
                requested,
                free,
            } => GpuError::OutOfMemory {
                device,
                requested,
                detail: format!("{free} bytes free"),
            },
            other => GpuError::Backend {
                what: "simulated box",
                environment: matches!(other, S::NoBox | S::BadBox { .. }),
                error: Box::new(other),
            },
        }
    }
}

/// CUDA on the simulated box, in this process.
pub struct SimDriver {
    proc: SimProcess,
    contexts: HashMap<ContextId, u32>,
    allocs: HashMap<AllocId, (ContextId, u64, u64)>,
    next_ctx: u32,
}

impl SimDriver {
    /// Attach to `VRAMDOC_SIM_DIR`, honouring `CUDA_VISIBLE_DEVICES`.
    pub fn from_env() -> Result<SimDriver> {
        SimDriver::open(SimProcess::from_env()?)
    }

    /// A driver for `proc`, failing as `cuInit` would on a box whose faults make CUDA
    /// unusable (toolkit stub library, driver/library version mismatch).
    pub fn open(proc: SimProcess) -> Result<SimDriver> {
        let faults = proc.sim().faults()?;
        if faults.cuda_stub_library {
            return Err(cuda_error("cuInit", cuda_codes::STUB_LIBRARY, "", ""));
        }
        if faults.driver_version_mismatch {
            return Err(cuda_error(
                "cuInit",
                cuda_codes::SYSTEM_DRIVER_MISMATCH,
                "",
                "",
            ));
        }
        Ok(SimDriver::new(proc))
    }

    pub fn new(proc: SimProcess) -> SimDriver {
        SimDriver {
            proc,
            contexts: HashMap::new(),
            allocs: HashMap::new(),
            next_ctx: 1,
        }
    }

    fn ordinal(&self, ctx: ContextId) -> Result<u32> {
        self.contexts.get(&ctx).copied().ok_or(GpuError::Driver {
            call: "context".into(),
            code: "CUDA_ERROR_INVALID_CONTEXT".into(),
            message: format!("unknown context {}", ctx.0),
        })
    }
}

impl Driver for SimDriver {
    fn backend(&self) -> &'static str {
        "sim"
    }

    fn device_count(&mut self) -> Result<u32> {
        Ok(self.proc.device_count())
    }

    fn create_context(&mut self, ordinal: u32) -> Result<ContextId> {
        // Primary-context semantics, as CUDA frameworks and CudaDriver use: the first context
        // on an ordinal creates it (and costs the overhead); later ones share it.
        if !self.contexts.values().any(|o| *o == ordinal) {
            self.proc
                .create_context(ordinal)
                .map_err(|e| on_ordinal(e, ordinal))?;
        }
        let id = ContextId(self.next_ctx);
        self.next_ctx += 1;
        self.contexts.insert(id, ordinal);
        Ok(id)
    }

    fn destroy_context(&mut self, ctx: ContextId) -> Result<()> {
        let ordinal = self.ordinal(ctx)?;
        // Free this context's allocations, then the context itself.
        let mine: Vec<AllocId> = self
            .allocs
            .iter()
            .filter(|(_, (c, _, _))| *c == ctx)
            .map(|(a, _)| *a)
            .collect();
        for a in mine {
            self.free(a)?;
        }
        self.contexts.remove(&ctx);
        if !self.contexts.values().any(|o| *o == ordinal) {
            self.proc.destroy_context(ordinal)?;
        }
        Ok(())
    }

    fn alloc(&mut self, ctx: ContextId, bytes: u64) -> Result<AllocId> {
        let ordinal = self.ordinal(ctx)?;
        let ptr = self
            .proc
            .alloc(ordinal, bytes)
            .map_err(|e| on_ordinal(e, ordinal))?;
        let id = AllocId(ptr);
        self.allocs.insert(id, (ctx, ptr, bytes));
        Ok(id)
    }

    fn free(&mut self, alloc: AllocId) -> Result<()> {
        let (_, ptr, _) = self.allocs.remove(&alloc).ok_or(GpuError::Driver {
            call: "free".into(),
            code: "CUDA_ERROR_INVALID_VALUE".into(),
            message: format!("unknown allocation {:#x}", alloc.0),
        })?;
        self.proc.free(ptr)?;
        Ok(())
    }

    fn fill(&mut self, alloc: AllocId, value: u32) -> Result<u64> {
        let (ctx, ptr, bytes) = *self.allocs.get(&alloc).ok_or(GpuError::Driver {
            call: "fill".into(),
            code: "CUDA_ERROR_INVALID_VALUE".into(),
            message: format!("unknown allocation {:#x}", alloc.0),
        })?;
        let ordinal = self.ordinal(ctx)?;
        self.proc.check(ordinal)?;
        // The fill kernel is PTX: loading it needs the driver's JIT compiler.
        if self.proc.sim().faults()?.no_ptx_jit {
            return Err(cuda_error(
                "cuModuleLoadData",
                cuda_codes::JIT_COMPILER_NOT_FOUND,
                "",
                "",
            ));
        }
        let words = bytes / 4;
        self.proc.fill_u32(ptr, value, words)?;
        Ok(self.proc.checksum_u32(ptr, words)?)
    }

    fn mem_info(&mut self, ctx: ContextId) -> Result<(u64, u64)> {
        let ordinal = self.ordinal(ctx)?;
        Ok(self.proc.mem_info(ordinal)?)
    }

    fn synchronize(&mut self, ctx: ContextId) -> Result<()> {
        let ordinal = self.ordinal(ctx)?;
        Ok(self.proc.check(ordinal)?)
    }

    fn device_uuid(&mut self, ordinal: u32) -> Result<String> {
        Ok(self.proc.device(ordinal)?.uuid.clone())
    }
}

/// Report out-of-memory against the CUDA ordinal, as CudaDriver does.
fn on_ordinal(e: SimError, ordinal: u32) -> GpuError {
    match GpuError::from(e) {
        GpuError::OutOfMemory {
            requested, detail, ..
        } => GpuError::OutOfMemory {
            device: ordinal,
            requested,
            detail,
        },
        other => other,
    }
}

impl Drop for SimDriver {
    fn drop(&mut self) {
        // Like process exit on a real driver: everything this driver created is returned.
        let _ = self.proc.release_all();
    }
}

/// NVML on the simulated box, in this process. Applies the box's injected NVML latencies.
pub struct SimMonitor {
    sim: SimBox,
    /// Host index of each NVML index this monitor shows.
    mounted: Vec<u32>,
    /// The queries made, by kind.
    calls: CallCounters,
}

impl SimMonitor {
    /// Open the box of `VRAMDOC_SIM_DIR`; a process in a container of the box's runtime
    /// sees only the devices mounted into it, renumbered from 0.
    pub fn from_env() -> Result<SimMonitor> {
        SimMonitor::open(SimBox::from_env()?)
    }

    /// [`SimMonitor::from_env`] over the box `sim` (the session's box, passed as a value).
    pub fn open(sim: SimBox) -> Result<SimMonitor> {
        if sim.faults()?.driver_version_mismatch {
            return Err(nvml_version_mismatch());
        }
        let mounted = sim.mounted();
        Ok(SimMonitor::with_mounted(sim, mounted))
    }

    /// Every device of the box, host numbering.
    pub fn new(sim: SimBox) -> SimMonitor {
        let mounted = (0..sim.devices().len() as u32).collect();
        SimMonitor::with_mounted(sim, mounted)
    }

    /// Only `mounted` (host indices, PCI order), numbered 0.. as NVML in a container does.
    pub fn with_mounted(sim: SimBox, mounted: Vec<u32>) -> SimMonitor {
        SimMonitor {
            mounted,
            sim,
            calls: CallCounters::default(),
        }
    }

    /// Block while the box's `nvml_hang` fault applies to a call on host device `device`
    /// (`None`: a call about no device), as the simulated libnvidia-ml does: re-read the
    /// faults every 20 ms, fail with `NVML_ERROR_UNKNOWN` past the fault's bound.
    fn hang(&self, device: Option<u32>, mut faults: Faults) -> Result<Faults> {
        let start = std::time::Instant::now();
        while let Some(h) = faults.nvml_hang.filter(|h| h.applies(device)) {
            if start.elapsed() >= Duration::from_millis(h.limit_ms) {
                return Err(GpuError::Driver {
                    call: "nvml".into(),
                    code: "NVML_ERROR_UNKNOWN".into(),
                    message: "the call hung past the fault's bound".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
            faults = self.sim.faults()?;
        }
        Ok(faults)
    }

    fn delay(us: u64) {
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
    }
}

impl SimMonitor {
    /// Host index behind an NVML index of this monitor.
    fn host(&self, index: u32) -> Result<u32> {
        self.mounted
            .get(index as usize)
            .copied()
            .ok_or(GpuError::InvalidDevice(index))
    }
}

fn to_memory(m: SimMemory) -> MemoryInfo {
    MemoryInfo {
        total: m.total,
        reserved: m.reserved,
        used: m.used,
        free: m.free,
    }
}

impl Monitor for SimMonitor {
    fn backend(&self) -> &'static str {
        "sim"
    }

    fn versions(&self) -> Result<Versions> {
        let c = self.sim.config();
        Ok(Versions {
            driver: c.driver_version.clone(),
            cuda: cuda_version_string(c.cuda_driver_version),
            nvml: c.nvml_version.clone(),
        })
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        self.calls.inventory();
        let faults = self.hang(None, self.sim.faults()?)?;
        let st = self.sim.state_with(&faults)?;
        let mut out = Vec::new();
        for (index, host) in self.mounted.iter().enumerate() {
            let d = self.sim.device(*host)?;
            Self::delay(faults.nvml_memory_latency_us);
            let status = match self.sim.check_nvml_device(d.index, &faults) {
                Ok(_) => DeviceStatus::Ok,
                Err(SimError::DeviceLost(_)) => DeviceStatus::Lost,
                Err(SimError::NoPermission(_)) => DeviceStatus::NoPermission,
                Err(e) => DeviceStatus::Error {
                    message: e.to_string(),
                },
            };
            let ok = status.is_ok();
            // As over NVML: a device that does not answer has no name, UUID or bus id either
            // (every per-device query fails the same way).
            let text = |s: &String| if ok { s.clone() } else { String::new() };
            out.push(DeviceInfo {
                index: index as u32,
                name: text(&d.name),
                uuid: text(&d.uuid),
                pci_bus_id: text(&d.pci_bus_id),
                memory: if ok {
                    to_memory(vramdoc_sim::memory_of(d, &st))
                } else {
                    MemoryInfo::zeroed()
                },
                utilization_gpu: ok.then_some(0),
                temperature_c: ok.then_some(vramdoc_sim::TEMPERATURE_C),
                numa_node: if ok { d.numa_node } else { None },
                status,
            });
        }
        Ok(out)
    }

    fn memory(&self, index: u32) -> Result<MemoryInfo> {
        self.calls.memory();
        let host = self.host(index)?;
        let faults = self.hang(Some(host), self.sim.faults()?)?;
        Self::delay(faults.nvml_memory_latency_us);
        self.sim.check_nvml_device(host, &faults)?;
        Ok(to_memory(self.sim.memory_with(host, &faults)?))
    }

    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>> {
        self.calls.processes();
        let host = self.host(index)?;
        let faults = self.hang(Some(host), self.sim.faults()?)?;
        Self::delay(faults.nvml_process_latency_us);
        let hidden = faults.nvml_used_memory_unavailable;
        self.sim.check_nvml_device(host, &faults)?;
        if faults.mig_unprivileged_devices.contains(&host) {
            return Err(SimError::NoPermission(host).into());
        }
        Ok(self
            .sim
            .processes_with(host, &faults)?
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used: (!hidden).then_some(p.used),
                kind: p.kind,
            })
            .collect())
    }

    fn device_nodes(&self) -> Vec<std::path::PathBuf> {
        self.sim.device_nodes()
    }

    fn cuda_speed(&self, index: u32) -> Option<(i32, i32, i32)> {
        let d = self.sim.device(self.host(index).ok()?).ok()?;
        let ((major, minor), sms) = vramdoc_sim::spec::arch_of(&d.name);
        Some((major, minor, sms))
    }

    fn call_counts(&self) -> CallCounts {
        self.calls.counts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulator_errors_read_as_the_real_drivers_and_box_failures_as_environment() {
        let no_box = GpuError::from(SimError::NoBox);
        assert!(no_box.is_environment());
        assert_eq!(
            no_box.to_string(),
            format!("simulated box: {}", SimError::NoBox)
        );
        let bad = GpuError::from(SimError::InvalidPointer(0x10));
        assert!(!bad.is_environment());
        assert!(matches!(
            GpuError::from(SimError::DeviceLost(2)),
            GpuError::DeviceLost(2)
        ));
        let oom = GpuError::from(SimError::OutOfMemory {
            device: 1,
            requested: 4096,
            free: 0,
        });
        assert!(oom.is_out_of_memory());
        assert!(GpuError::from(SimError::DeviceBusy(0))
            .to_string()
            .contains("CUDA_ERROR_DEVICE_UNAVAILABLE"));
    }
}
