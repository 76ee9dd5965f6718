//! vramdoc-simgpu: vramdoc's simulated machine (the `vramdoc-sim` crate) behind the C ABIs of
//! the CUDA driver API (`cuda`) and NVML (`nvml`). Built as a cdylib (`libsimgpu.so`,
//! `cargo build -p vramdoc-simgpu`) and installed under the names libcuda.so, libcuda.so.1 and
//! libnvidia-ml.so.1, so cudarc, nvml-wrapper, NVIDIA's own Python bindings and any other
//! client load it unchanged. The box comes from `VRAMDOC_SIM_DIR`. It does not link vramdoc.
#![allow(non_snake_case, non_camel_case_types, clippy::missing_safety_doc)]

pub mod cuda;
pub mod nvml;
