//! Which GPUs a process may use and how it numbers them, as vramdoc reads a process's
//! environment to diagnose it: `CUDA_VISIBLE_DEVICES` hides and renumbers devices for CUDA
//! (parsing stops at the first bad entry), `NVIDIA_VISIBLE_DEVICES` is the set of GPUs a
//! container runtime mounted, `CUDA_DEVICE_ORDER` is CUDA's enumeration order (fastest first
//! unless `PCI_BUS_ID`). NVML ignores all three and numbers GPUs physically, so vramdoc maps a
//! process's CUDA ordinals onto NVML indices by GPU UUID.
//!
//! The semantics are defined once, with their sources, in `vramdoc_gpu_spec::visible`: every
//! component that must agree on which devices a process sees takes them from there.

pub use vramdoc_gpu_spec::visible::{
    cuda_order, mounted_devices, resolve, uuid_matches, visible_devices, CUDA_DEVICE_ORDER,
    CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES,
};
