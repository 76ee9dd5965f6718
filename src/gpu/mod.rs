//! The one boundary between vramdoc and the GPU. Two traits:
//!
//! - [`Driver`]: what a workload does through CUDA — contexts, allocations, the fill and
//!   checksum kernels, memory info as the process sees it;
//! - [`Monitor`]: what an observer reads through NVML — versions, inventory, memory, processes.
//!
//! Backends: `cuda` (cudarc driver API) and `nvml` (nvml-wrapper) for real machines and for
//! tests/simgpu loaded in their place; `sim` (in-process, over `crate::sim`). Nothing outside
//! this module names cudarc or nvml-wrapper.

pub mod cuda;
pub mod nvml;
pub mod sim;

use serde::{Deserialize, Serialize};
use thiserror::Error;

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
    #[error("device {0} is lost (fallen off the bus); reset it or reboot")]
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
    #[error("simulated box: {0}")]
    Sim(crate::sim::SimError),
}

impl GpuError {
    /// Whether this is an environment problem (missing driver, no device, no box): exit 3.
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            GpuError::LibraryMissing { .. }
                | GpuError::NoDevice(_)
                | GpuError::Sim(crate::sim::SimError::NoBox)
                | GpuError::Sim(crate::sim::SimError::BadBox { .. })
        )
    }

    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, GpuError::OutOfMemory { .. })
    }
}

impl From<crate::sim::SimError> for GpuError {
    fn from(e: crate::sim::SimError) -> Self {
        use crate::sim::SimError as S;
        match e {
            S::InvalidDevice(i) => GpuError::InvalidDevice(i),
            S::DeviceLost(i) => GpuError::DeviceLost(i),
            S::OutOfMemory {
                device,
                requested,
                free,
            } => GpuError::OutOfMemory {
                device,
                requested,
                detail: format!("{free} bytes free"),
            },
            other => GpuError::Sim(other),
        }
    }
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
    /// Backend name (`cuda`, `sim`).
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
    /// UUID (`GPU-…`) of the device behind a CUDA ordinal.
    fn device_uuid(&mut self, ordinal: u32) -> Result<String> {
        Err(GpuError::InvalidDevice(ordinal))
    }
}

/// Expected checksum of [`Driver::fill`] over `bytes` with `value`.
pub fn expected_checksum(bytes: u64, value: u32) -> u64 {
    (value as u64).wrapping_mul(bytes / 4)
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
}

/// A compute process on a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuProcess {
    pub pid: u32,
    /// Bytes used on this device; `None` where NVML says "not available" (e.g. some
    /// containers or Windows WDDM).
    pub used: Option<u64>,
}

/// How many queries of each kind a monitor has made (for benches and the
/// once-per-device-per-scan rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCounts {
    pub inventory: u64,
    pub memory: u64,
    pub processes: u64,
}

/// What an observer reads about the machine, through NVML. Indices are physical.
pub trait Monitor: Send + Sync {
    /// Backend name (`nvml`, `sim`).
    fn backend(&self) -> &'static str;
    fn versions(&self) -> Result<Versions>;
    /// Every device with its static facts and current memory, utilization, temperature.
    fn devices(&self) -> Result<Vec<DeviceInfo>>;
    /// Memory of one device (fast: ~12 µs on real drivers).
    fn memory(&self, index: u32) -> Result<MemoryInfo>;
    /// Compute processes on one device (slow: ~4.5 ms on real drivers, holds a driver lock).
    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>>;
    /// Queries made so far.
    fn call_counts(&self) -> CallCounts;
}

/// Which backends to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackendKind {
    /// The in-process simulator over the box in `VRAMDOC_SIM_DIR`.
    Sim,
    /// cudarc + nvml-wrapper, over whatever libcuda.so / libnvidia-ml.so.1 the loader finds.
    Real,
}

/// Open a monitor of the given kind.
pub fn open_monitor(kind: BackendKind) -> Result<Box<dyn Monitor>> {
    match kind {
        BackendKind::Sim => Ok(Box::new(sim::SimMonitor::from_env()?)),
        BackendKind::Real => Ok(Box::new(nvml::NvmlMonitor::open()?)),
    }
}

/// Open a driver of the given kind.
pub fn open_driver(kind: BackendKind) -> Result<Box<dyn Driver>> {
    match kind {
        BackendKind::Sim => Ok(Box::new(sim::SimDriver::from_env()?)),
        BackendKind::Real => Ok(Box::new(cuda::CudaDriver::open()?)),
    }
}
