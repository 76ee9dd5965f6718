//! The one boundary between vramdoc and the GPU. Two traits:
//!
//! - [`Driver`]: what a workload does through CUDA — contexts, allocations, the fill and
//!   checksum kernels, memory info as the process sees it;
//! - [`Monitor`]: what an observer reads through NVML — versions, inventory, memory, processes.
//!
//! Here: the traits, [`GpuError`], the types both report, and the real backends, `cuda`
//! (cudarc driver API) and `nvml` (nvml-wrapper), which load whatever `libcuda.so` and
//! `libnvidia-ml.so.1` the dynamic loader finds. [`visible`] is vramdoc's reading of
//! `CUDA_VISIBLE_DEVICES` and its kin; [`lanes`] puts any [`Monitor`] under a per-GPU deadline
//! (the recorder's calls, and [`lanes::Deadlined`], the hang-guarded monitor every command's
//! session opens). Nothing outside this module names cudarc or
//! nvml-wrapper; other implementations of the traits (and the choice between them) live in
//! `crate::backend`.

pub mod cuda;
pub mod device_read;
pub mod lanes;
pub mod nvml;
pub mod visible;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use device_read::{DeviceRead, ProcessLists};
pub use vramdoc_gpu_spec::kernel::expected_checksum;
pub use vramdoc_gpu_spec::uuid::{format_gpu_uuid, parse_gpu_uuid};
pub use vramdoc_gpu_spec::ProcessKind;

/// Errors at the GPU boundary.
#[derive(Debug, Error)]
pub enum GpuError {
    /// A driver library is missing: an environment problem (exit code 3).
    #[error("{library} could not be loaded: {hint}")]
    LibraryMissing { library: String, hint: String },
    /// The driver loaded but reports no usable device (exit code 3).
    #[error("no GPU device: {0}")]
    NoDevice(String),
    #[error("invalid device ordinal {0}")]
    InvalidDevice(u32),
    #[error("device {0} is lost (fallen off the bus); reboot the node")]
    DeviceLost(u32),
    #[error("out of memory on device {device}: requested {requested} bytes ({detail})")]
    OutOfMemory {
        device: u32,
        requested: u64,
        detail: String,
    },
    /// Any other driver error, with the API call and the driver's own code and text.
    #[error("{call} failed: {code}: {message}")]
    Driver {
        call: String,
        code: String,
        message: String,
    },
    /// The backend itself failed rather than a driver call (e.g. the state files of a backend
    /// that keeps them), with its own error. `environment`: exit code 3.
    #[error("{what}: {error}")]
    Backend {
        what: &'static str,
        environment: bool,
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The driver stack is present but unusable as installed (library/kernel-module version
    /// mismatch, a CUDA toolkit stub shadowing the driver, no PTX JIT compiler): exit code 3.
    /// The message says what to do.
    #[error("{call} failed: {code}: {advice}")]
    Environment {
        call: String,
        code: String,
        advice: String,
    },
}

impl GpuError {
    /// Whether this is an environment problem (missing driver, no device, a backend that
    /// cannot start): exit 3.
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            GpuError::LibraryMissing { .. }
                | GpuError::NoDevice(_)
                | GpuError::Environment { .. }
                | GpuError::Backend {
                    environment: true,
                    ..
                }
        )
    }

    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, GpuError::OutOfMemory { .. })
    }
}

/// CUDA driver codes vramdoc gives advice for (cuda.h). Read as plain integers: 226 is newer
/// than the CUDA 12.0 headers the `cuda` backend is built against.
pub mod cuda_codes {
    pub const STUB_LIBRARY: i32 = 34;
    pub const DEVICE_UNAVAILABLE: i32 = 46;
    pub const JIT_COMPILER_NOT_FOUND: i32 = 221;
    pub const CONTAINED: i32 = 226;
    pub const LAUNCH_FAILED: i32 = 719;
    pub const SYSTEM_DRIVER_MISMATCH: i32 = 803;
}

/// The `CUDA_ERROR_*` name of a code this module knows, for codes a client's headers may not.
pub fn cuda_code_name(code: i32) -> Option<&'static str> {
    use cuda_codes::*;
    Some(match code {
        STUB_LIBRARY => "CUDA_ERROR_STUB_LIBRARY",
        DEVICE_UNAVAILABLE => "CUDA_ERROR_DEVICE_UNAVAILABLE",
        JIT_COMPILER_NOT_FOUND => "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
        CONTAINED => "CUDA_ERROR_CONTAINED",
        LAUNCH_FAILED => "CUDA_ERROR_LAUNCH_FAILED",
        SYSTEM_DRIVER_MISMATCH => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        _ => return None,
    })
}

/// A CUDA driver error for `call` with raw `code`: the codes with a known remedy become a
/// sentence that says what to do (and [`GpuError::Environment`] where the installation is at
/// fault, exit code 3); any other code keeps the driver's `name` and `text`.
pub fn cuda_error(call: &str, code: i32, name: &str, text: &str) -> GpuError {
    use cuda_codes::*;
    let env = |advice: &str| GpuError::Environment {
        call: call.into(),
        code: cuda_code_name(code).unwrap_or(name).into(),
        advice: advice.into(),
    };
    let drv = |message: &str| GpuError::Driver {
        call: call.into(),
        code: cuda_code_name(code).unwrap_or(name).into(),
        message: message.into(),
    };
    match code {
        STUB_LIBRARY => env(
            "the libcuda.so that was loaded is the CUDA toolkit's stub (lib64/stubs), not the \
             driver's; remove the stubs directory from LD_LIBRARY_PATH (and from ldconfig)",
        ),
        JIT_COMPILER_NOT_FOUND => env(
            "the driver's PTX JIT compiler (libnvidia-ptxjitcompiler.so.1) is missing; install \
             the full driver user-space libraries (in a container set \
             NVIDIA_DRIVER_CAPABILITIES=compute,utility)",
        ),
        SYSTEM_DRIVER_MISMATCH => env(
            "the CUDA driver library and the loaded kernel module are different versions \
             (driver upgraded without a reboot); reboot or reload the nvidia kernel module",
        ),
        DEVICE_UNAVAILABLE => drv(
            "the GPU is busy or unavailable: it is in exclusive-process (or prohibited) compute \
             mode and another process holds it; use another GPU, stop that process, or reset \
             the mode with `nvidia-smi -c DEFAULT`",
        ),
        CONTAINED => drv(
            "an uncorrectable GPU error was contained (CUDA 12.4+ code 226); this process can \
             no longer use CUDA: restart it, and check `nvidia-smi -q -d ECC` and Xid messages \
             in the kernel log",
        ),
        _ => drv(text),
    }
}

/// NVML's answer at init after a driver upgrade without a reboot
/// (`NVML_ERROR_LIB_RM_VERSION_MISMATCH`): exit code 3, with what to do.
pub fn nvml_version_mismatch() -> GpuError {
    GpuError::Environment {
        call: "nvmlInit_v2".into(),
        code: "NVML_ERROR_LIB_RM_VERSION_MISMATCH".into(),
        advice: "Driver/library version mismatch: the NVML library and the loaded kernel module \
                 are different versions (driver upgraded without a reboot); reboot or reload \
                 the nvidia kernel module"
            .into(),
    }
}

/// A CUDA driver API version as `cuDriverGetVersion` and NVML report it, as people write it:
/// `12040` → `12.4`.
pub fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

pub type Result<T> = std::result::Result<T, GpuError>;

/// A CUDA context created through a [`Driver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ContextId(pub u32);

/// A device allocation made through a [`Driver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AllocId(pub u64);

/// What a workload does on GPUs, through CUDA. Ordinals are CUDA ordinals (renumbered by
/// `CUDA_VISIBLE_DEVICES`). Dropping a driver releases everything it created.
pub trait Driver {
    /// Backend name (`cuda`, or another implementation's).
    fn backend(&self) -> &'static str;
    /// Devices this process can see.
    fn device_count(&mut self) -> Result<u32>;
    /// Create a context on `ordinal` (costs the driver's per-context overhead on that device).
    fn create_context(&mut self, ordinal: u32) -> Result<ContextId>;
    /// Destroy a context; its allocations are freed with it.
    fn destroy_context(&mut self, ctx: ContextId) -> Result<()>;
    /// Allocate `bytes` of device memory in `ctx`.
    fn alloc(&mut self, ctx: ContextId, bytes: u64) -> Result<AllocId>;
    /// Free an allocation.
    fn free(&mut self, alloc: AllocId) -> Result<()>;
    /// Run the fill kernel (every 32-bit word := `value`) over the allocation, then the
    /// checksum kernel, and return the checksum read back to the host: proof memory was touched.
    fn fill(&mut self, alloc: AllocId, value: u32) -> Result<u64>;
    /// `(free, total)` bytes of the context's device, as this process sees it.
    fn mem_info(&mut self, ctx: ContextId) -> Result<(u64, u64)>;
    /// Wait for all work in the context.
    fn synchronize(&mut self, ctx: ContextId) -> Result<()>;
    /// UUID of the device behind a CUDA ordinal, formatted as NVML prints it
    /// (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`): the one way to match a CUDA ordinal to an
    /// NVML index (`cuDeviceGetUuid`).
    fn device_uuid(&mut self, ordinal: u32) -> Result<String>;
}

/// The device files of the real NVIDIA driver whose open descriptors keep GPU memory alive
/// (`/dev/nvidia[0-9]*`, `/dev/nvidiactl`, `/dev/nvidia-uvm`), those that exist.
pub fn real_device_nodes() -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = std::fs::read_dir("/dev")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n == "nvidiactl"
                || n == "nvidia-uvm"
                || n.strip_prefix("nvidia")
                    .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Versions of the driver stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Versions {
    /// Kernel driver version, e.g. `550.54.15`.
    pub driver: String,
    /// CUDA driver API version, e.g. `12.4`.
    pub cuda: String,
    /// NVML library version, e.g. `12.550.54.15`.
    pub nvml: String,
}

/// Memory of one device (NVML v2 definitions): `used` excludes `reserved`, and
/// `total = reserved + used + free`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoryInfo {
    pub total: u64,
    pub reserved: u64,
    pub used: u64,
    pub free: u64,
}

impl MemoryInfo {
    /// All zero: what a device that did not answer reports.
    pub fn zeroed() -> MemoryInfo {
        MemoryInfo {
            total: 0,
            reserved: 0,
            used: 0,
            free: 0,
        }
    }
}

/// One physical device as NVML numbers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceInfo {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub pci_bus_id: String,
    pub memory: MemoryInfo,
    /// GPU utilization in percent, when the driver reports it.
    pub utilization_gpu: Option<u32>,
    /// Temperature in degrees Celsius, when the driver reports it.
    pub temperature_c: Option<u32>,
    /// On coherent-memory platforms (GH200, GB200: the GPU's memory is a NUMA node of the
    /// host), that NUMA node (`nvmlDeviceGetNumaNodeId`, which "only applies to platforms
    /// where the GPUs are NUMA nodes"); `None` elsewhere. There NVML keeps pages freed by an
    /// exited process counted as used until they are reclaimed (nvml.h,
    /// `nvmlDeviceGetMemoryInfo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// MIG (Multi-Instance GPU): a GPU in MIG mode, or one MIG instance of one, read through
    /// its MIG device handle (`nvmlDeviceGetMigDeviceHandleByIndex`); `None`: a whole GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigInfo>,
    /// Why the device's memory is unknown while the device answers (`None`: known): the
    /// memory query is `NVML_ERROR_NOT_SUPPORTED` on unified-memory parts such as GB10
    /// (DGX Spark), whose per-process usage still works. `memory` is then zeroed, not
    /// measured: rules that need it do not decide (docs/scan.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_unknown: Option<String>,
    /// Whether the driver answered for this device. Anything but `ok`: memory is zeroed and
    /// utilization / temperature are absent, the other devices are still reported.
    #[serde(default)]
    pub status: DeviceStatus,
    /// The device's minor number (`nvmlDeviceGetMinorNumber`): the `N` of its device file
    /// `/dev/nvidiaN`, which Slurm's `SLURM_JOB_GPUS`, GKE's `nvidiaN` ids and a container's
    /// mounted device files name. Assigned in the kernel module's probe order, it need not be
    /// the NVML index (NVIDIA/nvidia-docker#1432, #376). `None`: not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
}

impl DeviceInfo {
    /// An inventory entry for a device that did not answer: the facts that could be read
    /// (empty where none), zeroed memory, no utilization or temperature, and `status` saying
    /// why. One bad device never ends an inventory.
    pub fn unanswered(
        index: u32,
        (name, uuid, pci_bus_id): (String, String, String),
        status: DeviceStatus,
    ) -> DeviceInfo {
        DeviceInfo {
            index,
            name,
            uuid,
            pci_bus_id,
            memory: MemoryInfo::zeroed(),
            utilization_gpu: None,
            temperature_c: None,
            numa_node: None,
            mig: None,
            memory_unknown: None,
            status,
            minor: None,
        }
    }

    /// Whether this is a GPU in MIG mode: its memory is the sum of its instances', whose
    /// processes and headroom are read per instance (never on the parent).
    pub fn is_mig_parent(&self) -> bool {
        matches!(self.mig, Some(MigInfo::Parent))
    }

    /// Whether this entry's own memory and processes count: it answered, and it is not a MIG
    /// parent (whose memory and processes are its instances', counted on them).
    pub fn is_counted(&self) -> bool {
        self.status.is_ok() && !self.is_mig_parent()
    }

    /// The MIG instance facts of this entry, if it is one.
    pub fn mig_instance(&self) -> Option<&MigInstanceInfo> {
        match &self.mig {
            Some(MigInfo::Instance(i)) => Some(i),
            _ => None,
        }
    }

    /// How the device is named to people: `2` for a GPU, `0/1` (parent / GPU instance) for a
    /// MIG instance.
    pub fn label(&self) -> String {
        match self.mig_instance() {
            Some(m) => match m.gi {
                Some(gi) => format!("{}/{gi}", m.parent),
                None => format!("{}/?", m.parent),
            },
            None => self.index.to_string(),
        }
    }
}

/// A device's part in MIG (Multi-Instance GPU).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "role", rename_all = "kebab-case")]
pub enum MigInfo {
    /// A GPU in MIG mode (`nvmlDeviceGetMigMode` current = enabled). Its process lists answer
    /// only privileged callers (nvml.h: "per-instance information can be queried by using
    /// specific MIG device handles"); its instances are inventory entries of their own.
    Parent,
    /// One MIG instance (a GPU instance with its compute instance).
    Instance(MigInstanceInfo),
}

/// One MIG instance: where it lives and what it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MigInstanceInfo {
    /// NVML index of the parent GPU.
    pub parent: u32,
    /// UUID of the parent GPU.
    pub parent_uuid: String,
    /// GPU instance id (`nvmlDeviceGetGpuInstanceId`), when the driver says.
    pub gi: Option<u32>,
    /// Compute instance id (`nvmlDeviceGetComputeInstanceId`), when the driver says.
    pub ci: Option<u32>,
    /// Profile as nvidia-smi names it (`3g.40gb`), from the instance's name
    /// (`NVIDIA A100-SXM4-80GB MIG 3g.40gb`); empty when the name does not say.
    pub profile: String,
}

/// The inventory index of a MIG instance among `devices`: by its `MIG-<uuid>`, or by its
/// parent's index and GPU instance id (the `MIG-GPU-<uuid>/<gi>/<ci>` and GKE `nvidiaN/giM`
/// forms). `None`: not an instance this inventory holds.
pub fn mig_device_of(
    devices: &[DeviceInfo],
    uuid: Option<&str>,
    parent_gi: Option<(u32, u32)>,
) -> Option<u32> {
    devices
        .iter()
        .find(|d| {
            let Some(m) = d.mig_instance() else {
                return false;
            };
            uuid.is_some_and(|u| d.uuid.eq_ignore_ascii_case(u))
                || parent_gi.is_some_and(|(p, gi)| m.parent == p && m.gi == Some(gi))
        })
        .map(|d| d.index)
}

/// The profile in a MIG device's NVML name (`NVIDIA A100-SXM4-80GB MIG 3g.40gb` → `3g.40gb`).
pub fn mig_profile_of_name(name: &str) -> String {
    name.rsplit_once(" MIG ")
        .map(|(_, p)| p.trim().to_string())
        .unwrap_or_default()
}

/// [`DeviceInfo::memory_unknown`] of a device whose memory query answers
/// `NVML_ERROR_NOT_SUPPORTED` (both backends say it the same way).
pub const MEMORY_NOT_SUPPORTED: &str = "nvmlDeviceGetMemoryInfo: NVML_ERROR_NOT_SUPPORTED \
     (a unified-memory GPU such as GB10 has no framebuffer memory to report; per-process \
     usage is shown)";

/// What the driver said when this device was queried.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceStatus {
    /// Every query answered.
    #[default]
    Ok,
    /// The GPU has fallen off the bus (`NVML_ERROR_GPU_IS_LOST`, Xid 79): reboot the node
    /// (NVIDIA's Xid catalogue: a restart of the machine).
    Lost,
    /// The caller may not query this device (`NVML_ERROR_NO_PERMISSION`), e.g. a MIG parent
    /// device read by an unprivileged user, or a device not mounted into a container.
    NoPermission,
    /// Any other per-device error, with the driver's call, code and text.
    Error { message: String },
}

impl DeviceStatus {
    pub fn is_ok(&self) -> bool {
        matches!(self, DeviceStatus::Ok)
    }
}

/// A process with memory (or a context) on a device. PIDs are those of the host PID
/// namespace, as the driver reports them, whatever namespace the reader is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuProcess {
    pub pid: u32,
    /// Bytes used on this device; `None` where NVML says "not available" (e.g. some
    /// containers or Windows WDDM).
    pub used: Option<u64>,
    /// Which NVML list the process is in.
    #[serde(default)]
    pub kind: ProcessKind,
}

/// How many queries of each kind a monitor has made (for benches and the
/// once-per-device-per-scan rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCounts {
    pub inventory: u64,
    pub memory: u64,
    pub processes: u64,
}

/// A monitor's counters behind [`CallCounts`], counted as its queries are made.
#[derive(Debug, Default)]
pub struct CallCounters {
    inventory: std::sync::atomic::AtomicU64,
    memory: std::sync::atomic::AtomicU64,
    processes: std::sync::atomic::AtomicU64,
}

impl CallCounters {
    /// Count one inventory query.
    pub fn inventory(&self) {
        self.inventory
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Count one memory query.
    pub fn memory(&self) {
        self.memory
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Count one process-list query.
    pub fn processes(&self) {
        self.processes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn counts(&self) -> CallCounts {
        use std::sync::atomic::Ordering::Relaxed;
        CallCounts {
            inventory: self.inventory.load(Relaxed),
            memory: self.memory.load(Relaxed),
            processes: self.processes.load(Relaxed),
        }
    }
}

/// What an observer reads about the machine, through NVML. Indices are physical.
pub trait Monitor: Send + Sync {
    /// Backend name (`nvml`, or another implementation's).
    fn backend(&self) -> &'static str;
    fn versions(&self) -> Result<Versions>;
    /// Every device with its static facts and current memory, utilization, temperature.
    fn devices(&self) -> Result<Vec<DeviceInfo>>;
    /// How many devices there are (`nvmlDeviceGetCount`), without asking any of them.
    fn device_count(&self) -> Result<u32> {
        Ok(self.devices()?.len() as u32)
    }
    /// One entry of [`Monitor::devices`], asking that device only (a device that does not
    /// answer gets a status, as in the inventory): a caller with a per-GPU deadline asks each
    /// device on its own, so one hung GPU never holds up the others.
    fn inventory_entry(&self, index: u32) -> Result<DeviceInfo> {
        self.devices()?
            .into_iter()
            .find(|d| d.index == index)
            .ok_or(GpuError::InvalidDevice(index))
    }
    /// Memory of one device (fast: ~12 µs on real drivers).
    fn memory(&self, index: u32) -> Result<MemoryInfo>;
    /// Compute, graphics and MPS processes on one device, one entry per (pid, kind)
    /// (slow: ~4.5 ms per list on real drivers, holds a driver lock).
    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>>;
    /// One of the three lists of one device (one NVML call on real drivers). The default
    /// filters [`Monitor::processes`]; backends with one call per list override it.
    fn process_list(&self, index: u32, kind: ProcessKind) -> Result<Vec<GpuProcess>> {
        Ok(self
            .processes(index)?
            .into_iter()
            .filter(|p| p.kind == kind)
            .collect())
    }
    /// What a scan reads of every device: each entry, and each counted device's process
    /// lists as `lists` picks them ([`device_read`]), handed to `each` in index order as
    /// each GPU's read arrives (the caller works on one GPU's processes while the driver
    /// serves the next). The default asks in turn; a monitor over lanes asks each GPU's
    /// whole read on its lane, all GPUs at once.
    fn read_devices(&self, lists: ProcessLists, each: &mut dyn FnMut(DeviceRead)) -> Result<()> {
        device_read::read_in_turn(self, lists, each)
    }
    /// Queries made so far.
    fn call_counts(&self) -> CallCounts;
    /// CUDA's fastest-first key of a device (compute capability major, minor, then SM or
    /// core count), for `CUDA_DEVICE_ORDER` ([`visible::cuda_order`]); `None`: unknown.
    fn cuda_speed(&self, _index: u32) -> Option<(i32, i32, i32)> {
        None
    }
    /// Files whose open descriptors keep GPU memory alive: on a real machine
    /// `/dev/nvidia[0-9]*`, `/dev/nvidiactl`, `/dev/nvidia-uvm` (a backend whose driver keeps
    /// its device files elsewhere names those). A process holding one open (even one that never made a context, such as
    /// a forked DataLoader worker) keeps its parent's memory allocated.
    fn device_nodes(&self) -> Vec<std::path::PathBuf> {
        real_device_nodes()
    }
}
