//! Which implementation of the [`gpu`](crate::gpu) traits a command gets. [`BackendKind::Real`]
//! is the real path, `gpu::cuda` and `gpu::nvml`, over whatever libcuda.so and
//! libnvidia-ml.so.1 the loader finds (NVIDIA's, or the simulated ones of `vramdoc-simgpu`);
//! [`BackendKind::Sim`] is [`sim`], the simulated machine of `vramdoc-sim` in this process with
//! no library loaded. Callers open backends here, and only here is the simulator named next
//! to the real path.

#[cfg(feature = "sim")]
pub mod sim;
/// Built without the simulator (`--no-default-features`): the same names, failing with a
/// message that says so.
#[cfg(not(feature = "sim"))]
#[path = "no_sim.rs"]
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

/// NVML by name. When a box is named, the library found may be the simulated one serving it,
/// whose "device files" are the box's `dev/` files ([`sim::box_device_nodes`]): they are
/// reported beside the real `/dev` ones, so a process holding them open is found on this
/// path too. The real monitor itself knows nothing of the simulator.
fn real_monitor() -> Result<NvmlMonitor> {
    Ok(NvmlMonitor::open()?.with_device_nodes(sim::box_device_nodes()))
}

/// What kind of failure an error that reached the command edge is, where a backend knows
/// better than its type says (the simulator's own errors): src/exit.rs makes it an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The machine: no usable box (exit 3).
    Environment,
    /// The user's input: a bad box spec (exit 2).
    Usage,
}

/// The [`ErrorClass`] of `cause`, when a backend gives it one.
pub fn error_class(cause: &(dyn std::error::Error + 'static)) -> Option<ErrorClass> {
    sim::error_class(cause)
}

/// The box spec that stands for recorded GPUs, given as (product name, total bytes): a
/// preset where one has that name and a total within 1 % (drivers differ by a few MiB),
/// else a generic card of that size (`16GiB`).
/// Scenarios converted from recordings carry it (`recorded_on`); `--sim recorded` builds it.
pub fn recorded_box_spec(devices: &[(String, u64)]) -> Option<String> {
    use vramdoc_gpu_spec::units::{GIB, MIB};
    let parts: Vec<String> = devices
        .iter()
        .map(|(name, total)| match sim::preset_key(name, *total) {
            Some(key) => key.to_string(),
            None if total % GIB == 0 => format!("{}GiB", total / GIB),
            None if total % MIB == 0 => format!("{}MiB", total / MIB),
            None => total.to_string(),
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    // `2xt4` rather than `t4,t4` when every GPU is the same.
    Some(if parts.iter().all(|p| p == &parts[0]) && parts.len() > 1 {
        format!("{}x{}", parts.len(), parts[0])
    } else {
        parts.join(",")
    })
}

/// Why `--sim recorded` cannot be used: no scenario named, or none that records its box.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordedBoxError {
    #[error("--sim recorded: {0} does not say which GPUs it was recorded on (no `recorded_on`); give a box instead, e.g. --sim 16GiB or --sim h100")]
    NotRecorded(String),
    #[error("--sim recorded: the scenarios were recorded on different boxes ({0}); replay them one at a time")]
    Different(String),
    #[error("--sim recorded: recorded_on = {spec:?} in {file} is not a box this vramdoc can build: {reason}")]
    Unknown {
        file: String,
        spec: String,
        reason: String,
    },
}

/// The box `--sim recorded` stands for: the one every named scenario was recorded on,
/// given as (file, its `recorded_on`).
pub fn resolve_recorded(
    scenarios: &[(String, Option<String>)],
) -> std::result::Result<String, RecordedBoxError> {
    let mut spec: Option<&str> = None;
    for (file, rec) in scenarios {
        let Some(r) = rec.as_deref() else {
            return Err(RecordedBoxError::NotRecorded(file.clone()));
        };
        if let Err(reason) = sim::check_spec(r) {
            return Err(RecordedBoxError::Unknown {
                file: file.clone(),
                spec: r.to_string(),
                reason,
            });
        }
        match spec {
            Some(s) if s != r => {
                return Err(RecordedBoxError::Different(format!("{s}, {r}")));
            }
            _ => spec = Some(r),
        }
    }
    spec.map(str::to_string)
        .ok_or_else(|| RecordedBoxError::NotRecorded("no scenario file".into()))
}
