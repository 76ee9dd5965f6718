//! The in-process simulated backends: [`SimDriver`] and [`SimMonitor`] over a `vramdoc_sim`
//! box, translations of the simulator's core (`vramdoc_sim::process` and `vramdoc_sim::cuda`
//! for CUDA, `vramdoc_sim::nvml` for NVML) into the [`gpu`](crate::gpu) traits, with no driver
//! behaviour of their own: each core error becomes the driver code it is at the C ABI
//! ([`SimError::cuda_code`], [`SimError::nvml_code`]) read by the real backends' own code
//! readers, so the two paths fail alike (tests/it/backends.rs, the fault matrix). Here too:
//! how the simulator's errors map to exit codes ([`error_class`]). Utilization is always 0 % and
//! temperature a fixed [`vramdoc_sim::TEMPERATURE_C`]: the simulator models memory only.

use crate::gpu::{
    cuda_error, cuda_version_string, nvml, AllocId, CallCounters, CallCounts, ContextId,
    DeviceInfo, Driver, GpuError, GpuProcess, MemoryInfo, Monitor, ProcessKind, Result, Versions,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use vramdoc_sim::nvml::SimNvml;
use vramdoc_sim::{SimBox, SimMemory, SimProcess};

/// What kind of failure a simulator error that reached the command edge is (src/exit.rs
/// turns it into an exit code): no box or an unreadable one is the environment, a bad box
/// spec is usage; `None`: not a simulator error, or one with no class of its own.
pub fn error_class(cause: &(dyn std::error::Error + 'static)) -> Option<super::ErrorClass> {
    use super::ErrorClass;
    if let Some(e) = cause.downcast_ref::<SimError>() {
        return match e {
            SimError::NoBox | SimError::BadBox { .. } => Some(ErrorClass::Environment),
            SimError::Spec(_) => Some(ErrorClass::Usage),
            _ => None,
        };
    }
    cause
        .downcast_ref::<vramdoc_sim::SpecError>()
        .map(|_| ErrorClass::Usage)
}

pub use vramdoc_sim::{kernlog, parse_spec, SimError, SpecError, SIM_DIR_ENV};

/// The preset named `name` whose total is within 1 % of `total` (drivers differ by a few
/// MiB), as its spec key (`t4`, `h100`).
pub fn preset_key(name: &str, total: u64) -> Option<&'static str> {
    vramdoc_sim::spec::PRESETS
        .iter()
        .find(|p| p.name == name && p.total.abs_diff(total) <= p.total / 100)
        .map(|p| p.key)
}

/// Whether `spec` is a box this vramdoc can build (else why not).
pub fn check_spec(spec: &str) -> std::result::Result<(), String> {
    vramdoc_sim::parse_spec(spec)
        .map(|_| ())
        .map_err(|e| e.reason)
}

/// Create a box for `spec` in `dir` (`--sim SPEC`'s private box).
pub fn create_box(dir: &std::path::Path, spec: &str) -> std::result::Result<(), SimError> {
    SimBox::create(dir, spec, &vramdoc_sim::InitOptions::default()).map(|_| ())
}

/// The box at `dir` (`None`: the simulator's own "no box" error).
pub fn open_box(dir: Option<&std::path::Path>) -> std::result::Result<SimBox, SimError> {
    match dir {
        Some(d) => SimBox::open(d),
        None => Err(SimError::NoBox),
    }
}

/// The spec of the box at `dir`, for report headers.
pub fn box_spec(dir: Option<&std::path::Path>) -> Option<String> {
    open_box(dir).ok().map(|b| b.config().spec.clone())
}

/// The device files of the box at `dir` (none without one): what the simulated
/// libnvidia-ml.so.1 serving it counts as its driver's device files.
pub fn box_device_nodes(dir: Option<&std::path::Path>) -> Vec<std::path::PathBuf> {
    open_box(dir)
        .map(|sim| sim.device_nodes())
        .unwrap_or_default()
}

/// The in-process monitor over the box at `dir`.
pub fn open_monitor(dir: Option<&std::path::Path>) -> Result<SimMonitor> {
    SimMonitor::open(open_box(dir).map_err(box_error)?)
}

/// The in-process driver over the box at `dir`, as a process with this process's
/// environment (`CUDA_VISIBLE_DEVICES`...).
pub fn open_driver(dir: Option<&std::path::Path>) -> Result<SimDriver> {
    let process = SimProcess::with_env(
        open_box(dir).map_err(box_error)?,
        &vramdoc_sim::ProcessEnv::from_env(),
    );
    SimDriver::open(process)
}

/// The box's own failures (no box, unreadable files): [`GpuError::Backend`], an environment
/// problem when there is no usable box.
fn box_error(e: SimError) -> GpuError {
    GpuError::Backend {
        what: "simulated box",
        environment: matches!(e, SimError::NoBox | SimError::BadBox { .. }),
        error: Box::new(e),
    }
}

fn is_box_error(e: &SimError) -> bool {
    matches!(
        e,
        SimError::NoBox
            | SimError::BadBox { .. }
            | SimError::Io { .. }
            | SimError::Spec(_)
            | SimError::Profile(_)
            | SimError::Mig(_)
    )
}

/// A CUDA call's failure, as `gpu::cuda` reports the same `CUresult`. Out of memory and an
/// invalid ordinal keep their typed form (as `CudaDriver` gives them), against the CUDA
/// `ordinal` the call was about. A lost device stays [`GpuError::DeviceLost`] with its index:
/// the simulator knows which device fell off the bus, where the real backend only sees
/// `CUDA_ERROR_LAUNCH_FAILED` / `CUDA_ERROR_UNKNOWN` (the fault matrix's one documented
/// difference).
fn cuda_err(call: &str, ordinal: Option<u32>, e: SimError) -> GpuError {
    match e {
        e if is_box_error(&e) => box_error(e),
        SimError::OutOfMemory {
            device,
            requested,
            free,
        } => GpuError::OutOfMemory {
            device: ordinal.unwrap_or(device),
            requested,
            detail: format!("{free} bytes free"),
        },
        SimError::InvalidDevice(i) => GpuError::InvalidDevice(ordinal.unwrap_or(i)),
        SimError::DeviceLost(d) | SimError::LaunchFailed(d) => GpuError::DeviceLost(d),
        other => {
            let code = other.cuda_code();
            let (name, text) = vramdoc_sim::codes::cuda::describe(code)
                .map(|(n, t)| (n.to_string_lossy(), t.to_string_lossy()))
                .unwrap_or_default();
            cuda_error(call, code as i32, &name, &text)
        }
    }
}

/// An NVML call's failure, as `gpu::nvml` reports the same `nvmlReturn_t` (`index`: the
/// NVML index the call was about).
fn nvml_err(call: &str, index: Option<u32>, e: SimError) -> GpuError {
    if is_box_error(&e) {
        return box_error(e);
    }
    nvml::error_of_code(call, index, e.nvml_code())
}

/// CUDA on the simulated box, in this process.
pub struct SimDriver {
    proc: SimProcess,
    contexts: HashMap<ContextId, u32>,
    allocs: HashMap<AllocId, (ContextId, u64, u64)>,
    next_ctx: u32,
    /// Ordinals whose (primary) context a kernel fault poisoned: every later call on it
    /// fails with that fault ("any further CUDA work will return the same error"), until the
    /// context is destroyed. The core decides the fault; the context is this backend's.
    poisoned: HashMap<u32, SimError>,
}

impl SimDriver {
    /// Attach to `VRAMDOC_SIM_DIR`, honouring `CUDA_VISIBLE_DEVICES`.
    pub fn from_env() -> Result<SimDriver> {
        SimDriver::open(SimProcess::from_env().map_err(|e| cuda_err("cuInit", None, e))?)
    }

    /// A driver for `proc`, failing as `cuInit` does on its box (the core's
    /// `vramdoc_sim::cuda::init`).
    pub fn open(proc: SimProcess) -> Result<SimDriver> {
        vramdoc_sim::cuda::init(proc.sim()).map_err(|e| cuda_err("cuInit", None, e))?;
        Ok(SimDriver::new(proc))
    }

    pub fn new(proc: SimProcess) -> SimDriver {
        SimDriver {
            proc,
            contexts: HashMap::new(),
            allocs: HashMap::new(),
            next_ctx: 1,
            poisoned: HashMap::new(),
        }
    }

    /// `cuMemAllocManaged` of `bytes` in `ctx` (the core's managed memory: resident on the
    /// device, in its `used`, in no process's usage; `vramdoc sim hold --managed`).
    pub fn alloc_managed(&mut self, ctx: ContextId, bytes: u64) -> Result<AllocId> {
        let ordinal = self.ordinal(ctx)?;
        let ptr = self
            .proc
            .alloc_managed(ordinal, bytes)
            .map_err(|e| cuda_err("cuMemAllocManaged", Some(ordinal), e))?;
        let id = AllocId(ptr);
        self.allocs.insert(id, (ctx, ptr, bytes));
        Ok(id)
    }

    fn ordinal(&self, ctx: ContextId) -> Result<u32> {
        self.contexts.get(&ctx).copied().ok_or(GpuError::Driver {
            call: "context".into(),
            code: "CUDA_ERROR_INVALID_CONTEXT".into(),
            message: format!("unknown context {}", ctx.0),
        })
    }

    /// The ordinal of a context that is still usable (not poisoned by a kernel fault).
    fn live(&self, ctx: ContextId, call: &str) -> Result<u32> {
        let ordinal = self.ordinal(ctx)?;
        match self.poisoned.get(&ordinal) {
            Some(SimError::IllegalAddress(d)) => {
                Err(cuda_err(call, Some(ordinal), SimError::IllegalAddress(*d)))
            }
            _ => Ok(ordinal),
        }
    }

    /// A launch's failure: a kernel fault sticks to the context.
    fn launch_failed(&mut self, ordinal: u32, e: SimError) -> GpuError {
        if let SimError::IllegalAddress(d) = e {
            self.poisoned.insert(ordinal, SimError::IllegalAddress(d));
        }
        cuda_err("cuLaunchKernel", Some(ordinal), e)
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
        // on an ordinal creates it (and costs the overhead), with what CudaDriver makes with
        // it: a stream (work on the device) and the kernels' PTX module; later ones share it.
        if !self.contexts.values().any(|o| *o == ordinal) {
            let call = "cuDevicePrimaryCtxRetain";
            self.proc
                .create_context(ordinal)
                .map_err(|e| cuda_err(call, Some(ordinal), e))?;
            let ready = (self.proc.work(ordinal).map_err(|e| ("cuStreamCreate", e)))
                .and_then(|_| self.proc.load_ptx().map_err(|e| ("cuModuleLoadData", e)));
            if let Err((call, e)) = ready {
                // The context goes with the failure, as CudaDriver drops it.
                let _ = self.proc.destroy_context(ordinal);
                return Err(cuda_err(call, Some(ordinal), e));
            }
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
            self.poisoned.remove(&ordinal);
            self.proc
                .destroy_context(ordinal)
                .map_err(|e| cuda_err("cuDevicePrimaryCtxRelease", Some(ordinal), e))?;
        }
        Ok(())
    }

    fn alloc(&mut self, ctx: ContextId, bytes: u64) -> Result<AllocId> {
        let ordinal = self.live(ctx, "cuMemAllocAsync")?;
        let ptr = self
            .proc
            .alloc(ordinal, bytes)
            .map_err(|e| cuda_err("cuMemAllocAsync", Some(ordinal), e))?;
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
        self.proc
            .free(ptr)
            .map_err(|e| cuda_err("cuMemFreeAsync", None, e))
    }

    fn fill(&mut self, alloc: AllocId, value: u32) -> Result<u64> {
        let (ctx, ptr, bytes) = *self.allocs.get(&alloc).ok_or(GpuError::Driver {
            call: "fill".into(),
            code: "CUDA_ERROR_INVALID_VALUE".into(),
            message: format!("unknown allocation {:#x}", alloc.0),
        })?;
        let ordinal = self.live(ctx, "cuCtxSynchronize")?;
        // As CudaDriver: the context synchronised first, then the two kernels launched.
        self.proc
            .work(ordinal)
            .map_err(|e| cuda_err("cuCtxSynchronize", Some(ordinal), e))?;
        let words = bytes / 4;
        let sum = self
            .proc
            .launch(ordinal)
            .and_then(|_| self.proc.fill_u32(ptr, value, words))
            .and_then(|_| self.proc.launch(ordinal))
            .and_then(|_| self.proc.checksum_u32(ptr, words));
        sum.map_err(|e| self.launch_failed(ordinal, e))
    }

    fn mem_info(&mut self, ctx: ContextId) -> Result<(u64, u64)> {
        let ordinal = self.live(ctx, "cuMemGetInfo")?;
        self.proc
            .mem_info(ordinal)
            .map_err(|e| cuda_err("cuMemGetInfo", Some(ordinal), e))
    }

    fn synchronize(&mut self, ctx: ContextId) -> Result<()> {
        let ordinal = self.live(ctx, "cuCtxSynchronize")?;
        self.proc
            .work(ordinal)
            .map_err(|e| cuda_err("cuCtxSynchronize", Some(ordinal), e))
    }

    fn device_uuid(&mut self, ordinal: u32) -> Result<String> {
        Ok(self
            .proc
            .device(ordinal)
            .map_err(|e| cuda_err("cuDeviceGetUuid", Some(ordinal), e))?
            .uuid
            .clone())
    }
}

impl Drop for SimDriver {
    fn drop(&mut self) {
        // Like process exit on a real driver: everything this driver created is returned.
        let _ = self.proc.release_all();
    }
}

/// NVML on the simulated box, in this process: a session of the core's
/// [`SimNvml`], read as `NvmlMonitor` reads a library (memory v2, else v1 from then on).
pub struct SimMonitor {
    nvml: SimNvml,
    /// The queries made, by kind.
    calls: CallCounters,
    /// v2 memory info is missing or failing on this box: read v1 directly (as NvmlMonitor).
    memory_v1_only: AtomicBool,
}

impl SimMonitor {
    /// `nvmlInit` on the box of `VRAMDOC_SIM_DIR`; a process in a container of the box's
    /// runtime sees only the devices mounted into it, renumbered from 0.
    pub fn from_env() -> Result<SimMonitor> {
        SimMonitor::open(SimBox::from_env().map_err(box_error)?)
    }

    /// `nvmlInit` on `sim`, failing as the simulated libnvidia-ml.so.1 does (the core's
    /// [`SimNvml::init`]), read as `NvmlMonitor::open` reads a failed init.
    pub fn open(sim: SimBox) -> Result<SimMonitor> {
        let nvml = SimNvml::init(sim).map_err(|e| {
            if is_box_error(&e) {
                box_error(e)
            } else {
                nvml::init_error_of_code(e.nvml_code())
            }
        })?;
        Ok(SimMonitor::of(nvml))
    }

    /// Every device of the box, host numbering.
    pub fn new(sim: SimBox) -> SimMonitor {
        let mounted = (0..sim.devices().len() as u32).collect();
        SimMonitor::with_mounted(sim, mounted)
    }

    /// Only `mounted` (host indices, PCI order), numbered 0.. as NVML in a container does.
    pub fn with_mounted(sim: SimBox, mounted: Vec<u32>) -> SimMonitor {
        SimMonitor::of(SimNvml::attach(sim, mounted))
    }

    fn of(nvml: SimNvml) -> SimMonitor {
        SimMonitor {
            nvml,
            calls: CallCounters::default(),
            memory_v1_only: AtomicBool::new(false),
        }
    }

    /// Host index behind an NVML index of this monitor: a mounted GPU, or past them a MIG
    /// instance's key ([`SimMonitor::instances`]).
    fn host(&self, index: u32) -> Result<u32> {
        let mounted = self.nvml.mounted().len() as u32;
        if index >= mounted {
            return self
                .instances()
                .get((index - mounted) as usize)
                .map(|(_, m)| m.device.index)
                .ok_or(GpuError::InvalidDevice(index));
        }
        self.nvml
            .host(index)
            .map_err(|_| GpuError::InvalidDevice(index))
    }

    /// The MIG instances this caller can open, with their parent's NVML index, parents in
    /// NVML order: they follow the GPUs in this monitor's numbering (as `NvmlMonitor`
    /// numbers the instances it opens through MIG device handles).
    fn instances(&self) -> Vec<(u32, vramdoc_sim::mig::MigInstance)> {
        if self.nvml.sim().mig_instances().is_empty() {
            return Vec::new();
        }
        self.nvml
            .mounted()
            .iter()
            .enumerate()
            .flat_map(|(i, host)| {
                let list = self.nvml.mig_instances(*host).unwrap_or_default();
                list.into_iter().map(move |m| (i as u32, m))
            })
            .collect()
    }

    /// The MIG facts of NVML index `index` (host device `host`).
    fn mig_of(&self, index: u32, host: u32) -> Option<crate::gpu::MigInfo> {
        use crate::gpu::{MigInfo, MigInstanceInfo};
        if !vramdoc_sim::mig::is_key(host) {
            // A box fact: no second wait on a GPU that did not answer.
            return self
                .nvml
                .sim()
                .is_mig_parent(host)
                .then_some(MigInfo::Parent);
        }
        let mounted = self.nvml.mounted().len() as u32;
        let (parent, m) = self
            .instances()
            .into_iter()
            .nth(index.checked_sub(mounted)? as usize)?;
        let parent_uuid = self.nvml.sim().device(m.parent).ok()?.uuid.clone();
        Some(MigInfo::Instance(MigInstanceInfo {
            parent,
            parent_uuid,
            gi: Some(m.gi),
            ci: Some(m.ci),
            profile: m.profile,
        }))
    }

    /// Memory of host device `host` (NVML index `index`): v2, or v1 (reported with
    /// `reserved` 0) where v2 is missing, failing or not supported and v1 answers; the v2
    /// error where neither does.
    fn memory_of(&self, host: u32) -> std::result::Result<MemoryInfo, SimError> {
        if !self.memory_v1_only.load(Ordering::Relaxed) {
            match self.nvml.memory(host) {
                Ok(m) => return Ok(to_memory(m)),
                Err(
                    e @ (SimError::FunctionNotFound(_)
                    | SimError::Unknown(_)
                    | SimError::NotSupported { .. }),
                ) => {
                    let m = self.nvml.memory_v1(host).map_err(|_| e)?;
                    self.memory_v1_only.store(true, Ordering::Relaxed);
                    return Ok(v1_memory(m));
                }
                Err(e) => return Err(e),
            }
        }
        self.nvml.memory_v1(host).map(v1_memory)
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

fn v1_memory(m: vramdoc_sim::nvml::MemoryV1) -> MemoryInfo {
    MemoryInfo {
        total: m.total,
        reserved: 0,
        used: m.used,
        free: m.free,
    }
}

impl Monitor for SimMonitor {
    fn backend(&self) -> &'static str {
        "sim"
    }

    fn versions(&self) -> Result<Versions> {
        let c = self.nvml.sim().config();
        Ok(Versions {
            driver: c.driver_version.clone(),
            cuda: cuda_version_string(c.cuda_driver_version),
            nvml: c.nvml_version.clone(),
        })
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        let count = self.device_count()?;
        (0..count).map(|i| self.inventory_entry(i)).collect()
    }

    fn device_count(&self) -> Result<u32> {
        self.calls.inventory();
        self.nvml
            .session()
            .map_err(|e| nvml_err("nvmlDeviceGetCount_v2", None, e))?;
        Ok((self.nvml.mounted().len() + self.instances().len()) as u32)
    }

    fn inventory_entry(&self, index: u32) -> Result<DeviceInfo> {
        let host = self.host(index)?;
        // As over NVML: a device that does not answer has no name, UUID or bus id either
        // (every per-device query fails the same way); one whose memory query fails keeps
        // them. Either way its memory is zeroed and the status says why.
        let (facts, answer) = match self.nvml.device(host) {
            Ok((d, _)) => (Some(d.clone()), self.memory_of(host)),
            Err(e) => (None, Err(e)),
        };
        let text = |f: fn(&vramdoc_sim::SimDevice) -> &String| {
            facts.as_ref().map(f).cloned().unwrap_or_default()
        };
        let mut info = DeviceInfo {
            index,
            name: text(|d| &d.name),
            uuid: text(|d| &d.uuid),
            pci_bus_id: text(|d| &d.pci_bus_id),
            memory: MemoryInfo::zeroed(),
            utilization_gpu: None,
            temperature_c: None,
            numa_node: None,
            mig: self.mig_of(index, host),
            memory_unknown: None,
            status: crate::gpu::DeviceStatus::Ok,
            minor: None,
        };
        match answer {
            Ok(memory) => {
                info.memory = memory;
                info.utilization_gpu = Some(0);
                info.temperature_c = Some(vramdoc_sim::TEMPERATURE_C);
                // As over NVML: a device whose memory query fails is an unanswered entry.
                // A MIG instance has no minor of its own (its parent's device file).
                info.minor = facts
                    .as_ref()
                    .filter(|d| !vramdoc_sim::mig::is_key(d.index))
                    .map(|d| d.minor());
                info.numa_node = facts.and_then(|d| d.numa_node);
            }
            Err(e) if is_box_error(&e) => return Err(box_error(e)),
            // GB10: no framebuffer memory to report; the device answers everything else.
            Err(SimError::NotSupported { .. }) if facts.is_some() => {
                info.memory_unknown = Some(crate::gpu::MEMORY_NOT_SUPPORTED.into());
                info.utilization_gpu = Some(0);
                info.temperature_c = Some(vramdoc_sim::TEMPERATURE_C);
            }
            Err(e) => info.status = nvml::status_of_code(e.nvml_code()),
        }
        Ok(info)
    }

    fn memory(&self, index: u32) -> Result<MemoryInfo> {
        self.calls.memory();
        let host = self.host(index)?;
        self.memory_of(host)
            .map_err(|e| nvml_err("nvmlDeviceGetMemoryInfo_v2", Some(index), e))
    }

    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>> {
        self.lists(
            index,
            &[
                ProcessKind::Compute,
                ProcessKind::Graphics,
                ProcessKind::Mps,
            ],
        )
    }

    fn process_list(&self, index: u32, kind: ProcessKind) -> Result<Vec<GpuProcess>> {
        self.lists(index, &[kind])
    }

    fn device_nodes(&self) -> Vec<std::path::PathBuf> {
        self.nvml.sim().device_nodes()
    }

    fn cuda_speed(&self, index: u32) -> Option<(i32, i32, i32)> {
        let d = self.nvml.sim().device(self.host(index).ok()?).ok()?;
        let ((major, minor), sms) = vramdoc_sim::spec::arch_of(&d.name);
        Some((major, minor, sms))
    }

    fn call_counts(&self) -> CallCounts {
        self.calls.counts()
    }
}

impl SimMonitor {
    /// The lists of `kinds` on a device (one core call each, as NvmlMonitor makes one NVML
    /// call each): one entry per (pid, kind).
    fn lists(&self, index: u32, kinds: &[ProcessKind]) -> Result<Vec<GpuProcess>> {
        self.calls.processes();
        let host = self.host(index)?;
        let mut out = Vec::new();
        for &kind in kinds {
            let list = self
                .nvml
                .processes(host, kind)
                .map_err(|e| nvml_err(list_call(kind), Some(index), e))?;
            out.extend(list.into_iter().map(|p| GpuProcess {
                pid: p.pid,
                used: p.used,
                kind,
            }));
        }
        Ok(out)
    }
}

/// The NVML entry point of a process list (for error messages).
fn list_call(kind: ProcessKind) -> &'static str {
    match kind {
        ProcessKind::Compute => "nvmlDeviceGetComputeRunningProcesses_v3",
        ProcessKind::Graphics => "nvmlDeviceGetGraphicsRunningProcesses_v3",
        ProcessKind::Mps => "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulator_errors_read_as_the_real_drivers_and_box_failures_as_environment() {
        let no_box = cuda_err("cuInit", None, SimError::NoBox);
        assert!(no_box.is_environment());
        assert_eq!(
            no_box.to_string(),
            format!("simulated box: {}", SimError::NoBox)
        );
        let bad = cuda_err("cuMemcpy", None, SimError::InvalidPointer(0x10));
        assert!(!bad.is_environment());
        assert!(
            bad.to_string().contains("CUDA_ERROR_INVALID_VALUE"),
            "{bad}"
        );
        assert!(matches!(
            cuda_err("cuCtxSynchronize", None, SimError::LaunchFailed(2)),
            GpuError::DeviceLost(2)
        ));
        assert!(matches!(
            nvml_err(
                "nvmlDeviceGetMemoryInfo_v2",
                Some(1),
                SimError::DeviceLost(3)
            ),
            GpuError::DeviceLost(1)
        ));
        let oom = cuda_err(
            "cuMemAllocAsync",
            Some(0),
            SimError::OutOfMemory {
                device: 1,
                requested: 4096,
                free: 0,
            },
        );
        assert!(matches!(oom, GpuError::OutOfMemory { device: 0, .. }));
        assert!(
            cuda_err("cuDevicePrimaryCtxRetain", Some(0), SimError::DeviceBusy(0))
                .to_string()
                .contains("CUDA_ERROR_DEVICE_UNAVAILABLE")
        );
        assert!(cuda_err("cuInit", None, SimError::StubLibrary).is_environment());
        assert!(nvml::init_error_of_code(SimError::DriverMismatch.nvml_code()).is_environment());
    }

    #[test]
    fn simulator_errors_have_their_exit_codes() {
        use crate::backend::ErrorClass;
        let spec = vramdoc_sim::parse_spec("nope").unwrap_err();
        assert_eq!(error_class(&spec), Some(ErrorClass::Usage));
        assert_eq!(error_class(&SimError::NoBox), Some(ErrorClass::Environment));
        assert_eq!(error_class(&SimError::InvalidPointer(1)), None);
    }
}
