//! Which implementation of the [`gpu`](crate::gpu) traits a command gets. [`BackendKind::Real`]
//! is the real path, `gpu::cuda` and `gpu::nvml`, over whatever libcuda.so and
//! libnvidia-ml.so.1 the loader finds (NVIDIA's, or the simulated ones of `vramdoc-simgpu`);
//! [`BackendKind::Sim`] is [`sim`], the simulated machine of `vramdoc-sim` in this process with
//! no library loaded. Callers open backends here, and only here is the simulator named next
//! to the real path.

pub mod sim;

use crate::gpu::{cuda::CudaDriver, nvml::NvmlMonitor, Driver, Monitor, Result};
use serde::{Deserialize, Serialize};

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
        BackendKind::Real => Ok(Box::new(real_monitor()?)),
    }
}

/// Open a driver of the given kind.
pub fn open_driver(kind: BackendKind) -> Result<Box<dyn Driver>> {
    match kind {
        BackendKind::Sim => Ok(Box::new(sim::SimDriver::from_env()?)),
        BackendKind::Real => Ok(Box::new(CudaDriver::open()?)),
    }
}

/// NVML by name. When `VRAMDOC_SIM_DIR` names a box, the library found may be the simulated
/// one serving it, whose "device files" are the box's `dev/` files: they are reported beside
/// the real `/dev` ones, so a process holding them open is found on this path too.
fn real_monitor() -> Result<NvmlMonitor> {
    let monitor = NvmlMonitor::open()?;
    Ok(match vramdoc_sim::SimBox::from_env() {
        Ok(sim) => monitor.with_device_nodes(sim.device_nodes()),
        Err(_) => monitor,
    })
}
