//! Matchers and extractors of the table's entries for PaddlePaddle, text-generation-inference,
//! TensorRT-LLM, ONNX Runtime, MXNet and the CUDA math libraries' non-allocation statuses
//! (issue 37): pure functions on one line, used by [`super::table::PATTERNS`].

use super::extract::{bytes_after, ordinal_after, size_after};
use super::Facts;

/// `Out of memory error on GPU 0. Cannot allocate 98.000244MB memory on GPU 0, 6.000000GB
/// memory has been allocated and available memory is only 0.000000B.` (sizes as printed).
pub(super) fn paddle_facts(l: &str) -> Facts {
    Facts {
        device: ordinal_after(l, "error on GPU "),
        requested: size_after(l, "Cannot allocate "),
        free: size_after(l, "available memory is only "),
        ..Facts::default()
    }
}

/// `Allocation on device 0 would exceed allowed memory. (out of memory)`.
pub(super) fn allowed_facts(l: &str) -> Facts {
    Facts {
        device: ordinal_after(l, "Allocation on device "),
        ..Facts::default()
    }
}

/// `[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(…): out of memory (…)`.
pub(super) fn is_trtllm_runtime_oom(l: &str) -> bool {
    l.contains(": out of memory")
}

pub(super) fn ort_facts(l: &str) -> Facts {
    Facts {
        requested: bytes_after(l, "requested buffer of size "),
        ..Facts::default()
    }
}

/// MXNet's storage managers: `cudaMalloc retry failed: out of memory` (1.6+), and
/// `pooled_storage_manager.h:157: cudaMalloc failed: out of memory` (1.x).
pub(super) fn is_mxnet_oom(l: &str) -> bool {
    l.contains("out of memory")
        && (l.contains("cudaMalloc retry failed") || l.contains("storage_manager"))
}

/// Statuses of the CUDA math libraries that name a failure other than allocation. Their
/// `INTERNAL_ERROR` statuses are left out on purpose: cuDNN's handle creation and cuFFT's
/// plans report an allocation failure that way (rwth-i6/returnn#1465, pytorch#119420), so
/// they cannot be said to be "not memory".
pub(super) const LIBRARY_FAULTS: [&str; 8] = [
    "CUBLAS_STATUS_EXECUTION_FAILED",
    "CUBLAS_STATUS_ARCH_MISMATCH",
    "CUBLAS_STATUS_MAPPING_ERROR",
    "CUDNN_STATUS_EXECUTION_FAILED",
    "CUDNN_STATUS_ARCH_MISMATCH",
    "CUDNN_STATUS_MAPPING_ERROR",
    "CUSOLVER_STATUS_EXECUTION_FAILED",
    "CUFFT_EXEC_FAILED",
];
