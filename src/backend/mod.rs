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

/// Absolute paths of NVML to load instead of searching the loader's path, colon-separated;
/// the first that exists is loaded. A DaemonSet whose driver lives in another root file system
/// (the GPU operator's driver container at /run/nvidia/driver) names its library this way
/// rather than putting that root's `/usr/lib…` (a foreign glibc) on `LD_LIBRARY_PATH`.
pub const NVML_LIBRARY_ENV: &str = "VRAMDOC_NVML_LIBRARY";

/// The first existing absolute path of a [`NVML_LIBRARY_ENV`] value.
pub fn nvml_library(value: Option<&std::ffi::OsStr>) -> Option<std::path::PathBuf> {
    let v = value?.to_str()?;
    v.split(':')
        .map(std::path::Path::new)
        .find(|p| p.is_absolute() && p.is_file())
        .map(std::path::Path::to_path_buf)
}

/// NVML by name (or [`NVML_LIBRARY_ENV`]'s path). When `VRAMDOC_SIM_DIR` names a box, the library found may be the simulated
/// one serving it, whose "device files" are the box's `dev/` files: they are reported beside
/// the real `/dev` ones, so a process holding them open is found on this path too.
fn real_monitor() -> Result<NvmlMonitor> {
    let monitor = match nvml_library(std::env::var_os(NVML_LIBRARY_ENV).as_deref()) {
        Some(path) => NvmlMonitor::open_path(&path)?,
        None => NvmlMonitor::open()?,
    };
    Ok(match vramdoc_sim::SimBox::from_env() {
        Ok(sim) => monitor.with_device_nodes(sim.device_nodes()),
        Err(_) => monitor,
    })
}

/// The box spec that stands for recorded GPUs, given as (product name, total bytes): a
/// preset where one has that name and a total within 1 % (drivers differ by a few MiB),
/// else a generic card of that size (`16GiB`).
/// Scenarios converted from recordings carry it (`recorded_on`); `--sim recorded` builds it.
pub fn recorded_box_spec(devices: &[(String, u64)]) -> Option<String> {
    use vramdoc_gpu_spec::units::{GIB, MIB};
    let parts: Vec<String> = devices
        .iter()
        .map(|(name, total)| {
            match vramdoc_sim::spec::PRESETS
                .iter()
                .find(|p| p.name == name && p.total.abs_diff(*total) <= p.total / 100)
            {
                Some(p) => p.key.to_string(),
                None if total % GIB == 0 => format!("{}GiB", total / GIB),
                None if total % MIB == 0 => format!("{}MiB", total / MIB),
                None => total.to_string(),
            }
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
        if let Err(e) = vramdoc_sim::parse_spec(r) {
            return Err(RecordedBoxError::Unknown {
                file: file.clone(),
                spec: r.to_string(),
                reason: e.reason,
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

#[cfg(test)]
mod tests {
    #[test]
    fn nvml_library_takes_the_first_existing_absolute_path() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::write(&lib, b"").unwrap();
        let value = format!(
            "/nonexistent/libnvidia-ml.so.1:libnvidia-ml.so.1:{}",
            lib.display()
        );
        assert_eq!(
            super::nvml_library(Some(std::ffi::OsStr::new(&value))),
            Some(lib.clone())
        );
        // Relative names are the loader's business, not this variable's.
        assert_eq!(
            super::nvml_library(Some(std::ffi::OsStr::new("libnvidia-ml.so.1"))),
            None
        );
        assert_eq!(super::nvml_library(None), None);
        // A directory is not a library.
        assert_eq!(super::nvml_library(Some(dir.path().as_os_str())), None);
    }
}
