//! The simulator's place in a build without it (`cargo build --no-default-features`): the
//! names backend selection and the commands use, each refusing with [`NoSimulator`] (an
//! environment error, exit 3) or answering that there is no box. The real path is unchanged.

use crate::gpu::{GpuError, Result};

/// Environment variable naming a simulated box (ignored by this build but for the message).
pub const SIM_DIR_ENV: &str = "VRAMDOC_SIM_DIR";

/// Why a simulator feature is unavailable.
#[derive(Debug, thiserror::Error)]
#[error("this vramdoc was built without the simulator (cargo feature `sim`): --sim, --backend sim, {SIM_DIR_ENV} and `vramdoc sim` are unavailable; use a build with default features")]
pub struct NoSimulator;

fn refused() -> GpuError {
    GpuError::Backend {
        what: "simulated box",
        environment: true,
        error: Box::new(NoSimulator),
    }
}

/// In-process simulated CUDA: unavailable.
pub struct SimDriver;

impl SimDriver {
    pub fn from_env() -> Result<SimDriver> {
        Err(refused())
    }
}

/// In-process simulated NVML: unavailable.
pub struct SimMonitor;

impl SimMonitor {
    pub fn from_env() -> Result<SimMonitor> {
        Err(refused())
    }
}

impl crate::gpu::Driver for SimDriver {
    fn backend(&self) -> &'static str {
        "sim"
    }
    fn device_count(&mut self) -> Result<u32> {
        Err(refused())
    }
    fn create_context(&mut self, _: u32) -> Result<crate::gpu::ContextId> {
        Err(refused())
    }
    fn destroy_context(&mut self, _: crate::gpu::ContextId) -> Result<()> {
        Err(refused())
    }
    fn alloc(&mut self, _: crate::gpu::ContextId, _: u64) -> Result<crate::gpu::AllocId> {
        Err(refused())
    }
    fn free(&mut self, _: crate::gpu::AllocId) -> Result<()> {
        Err(refused())
    }
    fn fill(&mut self, _: crate::gpu::AllocId, _: u32) -> Result<u64> {
        Err(refused())
    }
    fn mem_info(&mut self, _: crate::gpu::ContextId) -> Result<(u64, u64)> {
        Err(refused())
    }
    fn synchronize(&mut self, _: crate::gpu::ContextId) -> Result<()> {
        Err(refused())
    }
    fn device_uuid(&mut self, _: u32) -> Result<String> {
        Err(refused())
    }
}

impl crate::gpu::Monitor for SimMonitor {
    fn backend(&self) -> &'static str {
        "sim"
    }
    fn versions(&self) -> Result<crate::gpu::Versions> {
        Err(refused())
    }
    fn devices(&self) -> Result<Vec<crate::gpu::DeviceInfo>> {
        Err(refused())
    }
    fn memory(&self, _: u32) -> Result<crate::gpu::MemoryInfo> {
        Err(refused())
    }
    fn processes(&self, _: u32) -> Result<Vec<crate::gpu::GpuProcess>> {
        Err(refused())
    }
    fn call_counts(&self) -> crate::gpu::CallCounts {
        crate::gpu::CallCounts::default()
    }
}

/// A refused simulator feature is the environment (exit 3).
pub fn error_class(cause: &(dyn std::error::Error + 'static)) -> Option<super::ErrorClass> {
    (cause.downcast_ref::<NoSimulator>().is_some()
        || cause.downcast_ref::<SimError>().is_some()
        || cause.downcast_ref::<SpecError>().is_some())
    .then_some(super::ErrorClass::Environment)
}

/// No preset names without the simulator: recorded GPUs are written as sizes.
pub fn preset_key(_: &str, _: u64) -> Option<&'static str> {
    None
}

/// No box can be built.
pub fn check_spec(_: &str) -> std::result::Result<(), String> {
    Err(NoSimulator.to_string())
}

/// `--sim SPEC`: refused.
pub fn parse_spec(_: &str) -> std::result::Result<(), SpecError> {
    Err(SpecError {
        reason: NoSimulator.to_string(),
    })
}

/// `--sim SPEC`: refused.
pub fn create_box(_: &std::path::Path, _: &str) -> std::result::Result<(), SimError> {
    Err(SimError::NoBox(NoSimulator))
}

/// A spec error of this build: every spec is refused, saying why.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct SpecError {
    pub reason: String,
}

/// A box error of this build.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// No box can be opened or built without the simulator.
    #[error("{0}")]
    NoBox(#[from] NoSimulator),
}

/// No box.
pub fn box_spec(_: Option<&std::path::Path>) -> Option<String> {
    None
}

/// No box's device files.
pub fn box_device_nodes(_: Option<&std::path::Path>) -> Vec<std::path::PathBuf> {
    Vec::new()
}

/// The in-process monitor: refused.
pub fn open_monitor(_: Option<&std::path::Path>) -> Result<SimMonitor> {
    Err(refused())
}

/// The in-process driver: refused.
pub fn open_driver(_: Option<&std::path::Path>) -> Result<SimDriver> {
    Err(refused())
}

/// The box's kernel log's name (no box in this build: never joined to a directory).
pub mod kernlog {
    pub const KERN_LOG: &str = "kern.log";
}
