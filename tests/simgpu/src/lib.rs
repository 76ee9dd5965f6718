//! simgpu: vramdoc's simulated machine (`vramdoc::sim`) behind the C ABIs of the CUDA driver
//! API (`cuda`) and NVML (`nvml`). Built as a cdylib and installed under the names
//! libcuda.so, libcuda.so.1 and libnvidia-ml.so.1, so cudarc, nvml-wrapper and NVIDIA's own
//! Python bindings load it unchanged. The box comes from `VRAMDOC_SIM_DIR`.
#![allow(non_snake_case, non_camel_case_types, clippy::missing_safety_doc)]

pub mod cuda;
pub mod nvml;
