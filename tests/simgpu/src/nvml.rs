//! NVML over the simulator (in progress).
