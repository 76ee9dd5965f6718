//! CUDA driver API over the simulator (in progress).
