//! How the NVML backend reads NVML's return codes: the `NVML_ERROR_*` names, the
//! [`GpuError`] and [`DeviceStatus`] of each, and the advice at a failed init. Public where
//! another implementation of NVML's semantics (the in-process simulator) needs to fail
//! exactly as this backend does.

use super::LIBRARY_NAMES;
use crate::gpu::{DeviceStatus, GpuError};
use nvml_wrapper::error::NvmlError;

/// The `NVML_ERROR_*` name of an error, for messages.
pub(super) fn code_name(e: &NvmlError) -> String {
    let s = match e {
        NvmlError::Uninitialized => "NVML_ERROR_UNINITIALIZED",
        NvmlError::InvalidArg => "NVML_ERROR_INVALID_ARGUMENT",
        NvmlError::NotSupported => "NVML_ERROR_NOT_SUPPORTED",
        NvmlError::NoPermission => "NVML_ERROR_NO_PERMISSION",
        NvmlError::NotFound => "NVML_ERROR_NOT_FOUND",
        NvmlError::InsufficientSize(_) => "NVML_ERROR_INSUFFICIENT_SIZE",
        NvmlError::DriverNotLoaded => "NVML_ERROR_DRIVER_NOT_LOADED",
        NvmlError::Timeout => "NVML_ERROR_TIMEOUT",
        NvmlError::LibraryNotFound => "NVML_ERROR_LIBRARY_NOT_FOUND",
        NvmlError::FunctionNotFound => "NVML_ERROR_FUNCTION_NOT_FOUND",
        NvmlError::GpuLost => "NVML_ERROR_GPU_IS_LOST",
        NvmlError::ResetRequired => "NVML_ERROR_RESET_REQUIRED",
        NvmlError::LibRmVersionMismatch => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        NvmlError::InsufficientMemory => "NVML_ERROR_MEMORY",
        NvmlError::Unknown => "NVML_ERROR_UNKNOWN",
        other => return format!("{other:?}"),
    };
    s.to_string()
}

pub(super) fn map_err(call: &str, index: Option<u32>, library: &str, e: NvmlError) -> GpuError {
    match (e, index) {
        (NvmlError::GpuLost, Some(i)) => GpuError::DeviceLost(i),
        (NvmlError::FailedToLoadSymbol(s), _) => GpuError::LibraryMissing {
            library: library.to_string(),
            hint: format!(
                "{call} is missing from it ({s}); update the NVIDIA driver to a CUDA 12 one"
            ),
        },
        (NvmlError::LibRmVersionMismatch, _) => crate::gpu::nvml_version_mismatch(),
        (NvmlError::DriverNotLoaded, _) => GpuError::NoDevice(format!(
            "{call}: the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED); \
             load it (`nvidia-smi` must work), or without a GPU use --sim SPEC"
        )),
        (e, _) => GpuError::Driver {
            call: call.to_string(),
            code: code_name(&e),
            message: e.to_string(),
        },
    }
}

/// The [`GpuError`] this backend reports when NVML's `call` (about NVML index `index`) returns
/// `code` (`nvmlReturn_t`): another implementation of NVML's semantics (the in-process
/// simulator) reads its return codes here, so it fails exactly as this backend does.
pub fn error_of_code(call: &str, index: Option<u32>, code: u32) -> GpuError {
    map_err(call, index, LIBRARY_NAMES[0], NvmlError::from(code))
}

/// [`error_of_code`] for `nvmlInit_v2`: the environment error (exit 3) [`NvmlMonitor::open`]
/// gives when NVML loads but does not initialise.
pub fn init_error_of_code(code: u32) -> GpuError {
    init_failed(error_of_code("nvmlInit_v2", None, code))
}

/// The [`DeviceStatus`] `devices()` gives a device whose queries failed with `code`.
pub fn status_of_code(code: u32) -> DeviceStatus {
    status_of(NvmlError::from(code))
}

pub(super) fn status_of(e: NvmlError) -> DeviceStatus {
    match e {
        NvmlError::GpuLost => DeviceStatus::Lost,
        NvmlError::NoPermission => DeviceStatus::NoPermission,
        e => DeviceStatus::Error {
            message: format!("{}: {e}", code_name(&e)),
        },
    }
}

/// NVML that loads but does not initialise is the machine's state, not a finding: exit 3
/// (docs/exit-codes.md), never the 1 that `--fail-on` gives to findings. "Unknown Error" at
/// init is the known loss of device access in a container after the runtime or systemd
/// reloaded its cgroups (NVIDIA/nvidia-container-toolkit#48): say so.
pub(super) fn init_failed(e: GpuError) -> GpuError {
    match e {
        GpuError::Driver {
            call,
            code,
            message,
        } => {
            let advice = if code == "NVML_ERROR_UNKNOWN" {
                format!(
                    "{message}; NVML cannot be initialised (\"Failed to initialize NVML: Unknown \
                     Error\"): in a container this is the known loss of GPU access after the \
                     container runtime or systemd reloaded (nvidia-container-toolkit#48) — \
                     restart the container; on a host, check that `nvidia-smi` works"
                )
            } else {
                format!("{message}; NVML cannot be initialised: check that `nvidia-smi` works")
            };
            GpuError::Environment { call, code, advice }
        }
        other => other,
    }
}
