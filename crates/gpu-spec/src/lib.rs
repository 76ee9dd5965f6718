//! vramdoc-gpu-spec: the facts vramdoc and its simulated GPU driver (the `vramdoc-sim` and
//! `vramdoc-simgpu` crates) must agree on, written down once as documented semantics. Nothing
//! here talks to a driver or knows the simulator:
//!
//! - [`units`]: byte quantities (`24GiB`, `1.5GB`) as specs and flags write them, and as
//!   vramdoc prints them;
//! - [`uuid`]: the text form of a GPU UUID (`GPU-` + 8-4-4-4-12 hex), as NVML prints it and
//!   as `cuDeviceGetUuid` returns it in 16 bytes;
//! - [`kernel`]: the fill and checksum kernels (kernels/vramdoc.cu) by name, and the checksum
//!   a fill must read back;
//! - [`ProcessKind`]: NVML's three process lists;
//! - [`driver`]: driver generations by version, as a caller in a PID namespace sees them;
//! - [`visible`]: `CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER` as
//!   the CUDA driver and the NVIDIA container runtime read them.

pub mod driver;
pub mod kernel;
pub mod units;
pub mod uuid;
pub mod visible;

use serde::{Deserialize, Serialize};

/// Which of NVML's process lists a process is in.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ProcessKind {
    /// A CUDA (or other compute API) process: `nvmlDeviceGetComputeRunningProcesses`.
    #[default]
    Compute,
    /// A graphics client such as Xorg or a Wayland compositor:
    /// `nvmlDeviceGetGraphicsRunningProcesses`.
    Graphics,
    /// A client of the CUDA MPS server: `nvmlDeviceGetMPSComputeRunningProcesses`.
    Mps,
}
