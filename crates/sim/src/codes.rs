//! The driver's return codes, once: `CUresult` values and their cuda.h names and texts, the
//! `nvmlReturn_t` values, and which code each [`SimError`] is in CUDA and in NVML. The C ABI
//! (`vramdoc-simgpu`) returns these numbers; the in-process backend hands the same numbers to
//! vramdoc's own reading of driver codes, so both paths fail alike by construction.

use crate::SimError;
use std::ffi::CStr;

/// `CUresult` values (cuda.h `enum cudaError_enum`): the codes the simulator returns.
pub mod cuda {
    use super::CStr;

    pub const CUDA_SUCCESS: u32 = 0;
    pub const CUDA_ERROR_INVALID_VALUE: u32 = 1;
    pub const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;
    pub const CUDA_ERROR_NOT_INITIALIZED: u32 = 3;
    pub const CUDA_ERROR_STUB_LIBRARY: u32 = 34;
    pub const CUDA_ERROR_DEVICE_UNAVAILABLE: u32 = 46;
    pub const CUDA_ERROR_NO_DEVICE: u32 = 100;
    pub const CUDA_ERROR_INVALID_DEVICE: u32 = 101;
    pub const CUDA_ERROR_INVALID_IMAGE: u32 = 200;
    pub const CUDA_ERROR_INVALID_CONTEXT: u32 = 201;
    pub const CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: u32 = 217;
    pub const CUDA_ERROR_INVALID_PTX: u32 = 218;
    /// Newer than some client headers: cuda.h 12.0 ends its JIT codes at 222, but 221 exists
    /// since CUDA 11.1; 226 arrived with CUDA 12.4 (CUDA 12.0 clients do not know it).
    pub const CUDA_ERROR_JIT_COMPILER_NOT_FOUND: u32 = 221;
    pub const CUDA_ERROR_CONTAINED: u32 = 226;
    pub const CUDA_ERROR_FILE_NOT_FOUND: u32 = 301;
    pub const CUDA_ERROR_INVALID_HANDLE: u32 = 400;
    pub const CUDA_ERROR_NOT_FOUND: u32 = 500;
    pub const CUDA_ERROR_NOT_READY: u32 = 600;
    pub const CUDA_ERROR_ILLEGAL_ADDRESS: u32 = 700;
    pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: u32 = 704;
    pub const CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: u32 = 705;
    pub const CUDA_ERROR_LAUNCH_FAILED: u32 = 719;
    pub const CUDA_ERROR_NOT_SUPPORTED: u32 = 801;
    pub const CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: u32 = 803;
    pub const CUDA_ERROR_UNKNOWN: u32 = 999;

    /// cuda.h names and descriptions (cuGetErrorName / cuGetErrorString) of the codes above and
    /// the other common ones.
    pub const ERRORS: &[(u32, &CStr, &CStr)] = &[
        (0, c"CUDA_SUCCESS", c"no error"),
        (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
        (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
        (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
        (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
        (
            34,
            c"CUDA_ERROR_STUB_LIBRARY",
            c"CUDA driver is a stub library",
        ),
        (
            100,
            c"CUDA_ERROR_NO_DEVICE",
            c"no CUDA-capable device is detected",
        ),
        (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
        (
            46,
            c"CUDA_ERROR_DEVICE_UNAVAILABLE",
            c"CUDA-capable device(s) is/are busy or unavailable",
        ),
        (
            221,
            c"CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
            c"PTX JIT compiler library not found",
        ),
        (
            226,
            c"CUDA_ERROR_CONTAINED",
            c"uncorrectable error was contained",
        ),
        (
            803,
            c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            c"system has unsupported display driver / cuda driver combination",
        ),
        (
            200,
            c"CUDA_ERROR_INVALID_IMAGE",
            c"device kernel image is invalid",
        ),
        (
            201,
            c"CUDA_ERROR_INVALID_CONTEXT",
            c"invalid device context",
        ),
        (
            218,
            c"CUDA_ERROR_INVALID_PTX",
            c"a PTX JIT compilation failed",
        ),
        (
            222,
            c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            c"the provided PTX was compiled with an unsupported toolchain.",
        ),
        (
            217,
            c"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
            c"peer access is not supported between these two devices",
        ),
        (301, c"CUDA_ERROR_FILE_NOT_FOUND", c"file not found"),
        (
            400,
            c"CUDA_ERROR_INVALID_HANDLE",
            c"invalid resource handle",
        ),
        (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
        (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
        (
            700,
            c"CUDA_ERROR_ILLEGAL_ADDRESS",
            c"an illegal memory access was encountered",
        ),
        (
            704,
            c"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
            c"peer access is already enabled",
        ),
        (
            705,
            c"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
            c"peer access has not been enabled",
        ),
        (
            709,
            c"CUDA_ERROR_CONTEXT_IS_DESTROYED",
            c"context is destroyed",
        ),
        (
            719,
            c"CUDA_ERROR_LAUNCH_FAILED",
            c"unspecified launch failure",
        ),
        (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
        (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
    ];

    /// The cuda.h name and description of `code` (`cuGetErrorName` / `cuGetErrorString`).
    pub fn describe(code: u32) -> Option<(&'static CStr, &'static CStr)> {
        ERRORS
            .iter()
            .find(|(c, _, _)| *c == code)
            .map(|(_, n, t)| (*n, *t))
    }

    /// The cuda.h name of `code`, as text.
    pub fn name_of(code: u32) -> Option<&'static str> {
        describe(code).and_then(|(n, _)| n.to_str().ok())
    }
}

/// `nvmlReturn_t` values (nvml.h): the codes the simulator returns.
pub mod nvml {
    pub const NVML_SUCCESS: u32 = 0;
    pub const NVML_ERROR_UNINITIALIZED: u32 = 1;
    pub const NVML_ERROR_INVALID_ARGUMENT: u32 = 2;
    pub const NVML_ERROR_NOT_SUPPORTED: u32 = 3;
    pub const NVML_ERROR_NO_PERMISSION: u32 = 4;
    pub const NVML_ERROR_NOT_FOUND: u32 = 6;
    pub const NVML_ERROR_INSUFFICIENT_SIZE: u32 = 7;
    pub const NVML_ERROR_DRIVER_NOT_LOADED: u32 = 9;
    pub const NVML_ERROR_FUNCTION_NOT_FOUND: u32 = 13;
    pub const NVML_ERROR_GPU_IS_LOST: u32 = 15;
    pub const NVML_ERROR_LIB_RM_VERSION_MISMATCH: u32 = 18;
    pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: u32 = 25;
    pub const NVML_ERROR_UNKNOWN: u32 = 999;
}

impl SimError {
    /// The `CUresult` a CUDA call fails with on this error. A lost device is
    /// `CUDA_ERROR_UNKNOWN` outside work on it; launches and synchronisation report
    /// [`SimError::LaunchFailed`] instead (`CUDA_ERROR_LAUNCH_FAILED`).
    pub fn cuda_code(&self) -> u32 {
        use cuda::*;
        use SimError as S;
        match self {
            S::InvalidDevice(_) => CUDA_ERROR_INVALID_DEVICE,
            S::DeviceLost(_) => CUDA_ERROR_UNKNOWN,
            S::LaunchFailed(_) => CUDA_ERROR_LAUNCH_FAILED,
            S::OutOfMemory { .. } => CUDA_ERROR_OUT_OF_MEMORY,
            S::NoContext(_) => CUDA_ERROR_INVALID_CONTEXT,
            S::InvalidPointer(_) | S::OutOfBounds { .. } => CUDA_ERROR_INVALID_VALUE,
            S::Unsupported(_) | S::NotSupported { .. } => CUDA_ERROR_NOT_SUPPORTED,
            S::NoBox => CUDA_ERROR_NO_DEVICE,
            S::IpcHandle => CUDA_ERROR_INVALID_VALUE,
            // "cuIpcOpenMemHandle() failed: invalid device context" (openucx/ucx#11603).
            S::IpcSameProcess => CUDA_ERROR_INVALID_CONTEXT,
            // NVML-only (MIG parent, unmounted device): CUDA never sees such a device.
            S::NoPermission(_) => CUDA_ERROR_INVALID_DEVICE,
            S::DeviceBusy(_) => CUDA_ERROR_DEVICE_UNAVAILABLE,
            S::Contained(_) => CUDA_ERROR_CONTAINED,
            S::IllegalAddress(_) => CUDA_ERROR_ILLEGAL_ADDRESS,
            S::StubLibrary => CUDA_ERROR_STUB_LIBRARY,
            S::DriverMismatch => CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
            S::NoPtxJit => CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
            S::FunctionNotFound(_) => CUDA_ERROR_NOT_FOUND,
            S::BadBox { .. }
            | S::Io { .. }
            | S::Spec(_)
            | S::Profile(_)
            | S::Mig(_)
            | S::Hung { .. }
            | S::SessionLost
            | S::Unknown(_) => CUDA_ERROR_UNKNOWN,
        }
    }

    /// The `nvmlReturn_t` an NVML call fails with on this error. No box (or an unreadable
    /// one) is `NVML_ERROR_DRIVER_NOT_LOADED`: the library is there, the "driver" is not.
    pub fn nvml_code(&self) -> u32 {
        use nvml::*;
        use SimError as S;
        match self {
            S::InvalidDevice(_) => NVML_ERROR_INVALID_ARGUMENT,
            S::DeviceLost(_) | S::LaunchFailed(_) => NVML_ERROR_GPU_IS_LOST,
            S::NoPermission(_) => NVML_ERROR_NO_PERMISSION,
            S::NoBox | S::BadBox { .. } => NVML_ERROR_DRIVER_NOT_LOADED,
            S::DriverMismatch => NVML_ERROR_LIB_RM_VERSION_MISMATCH,
            S::NotSupported { .. } | S::Unsupported(_) => NVML_ERROR_NOT_SUPPORTED,
            S::FunctionNotFound(_) => NVML_ERROR_FUNCTION_NOT_FOUND,
            _ => NVML_ERROR_UNKNOWN,
        }
    }
}
