//! The table of recognised failure lines, most specific first (the first match wins). Every
//! entry cites the public source of its wording; `example` is a real line (trimmed) that the
//! table's tests check against the entry itself.

use super::extract::{
    bytes_after, int_after, nccl_device, ordinal_after, size_after, size_token, tf_tensor_bytes,
};
use super::runtimes::{
    allowed_facts, is_mxnet_oom, is_trtllm_runtime_oom, ort_facts, paddle_facts, LIBRARY_FAULTS,
};
use super::{Facts, Framework, Pattern, Stream};
use crate::model::RunErrorKind;

fn none(_: &str) -> Facts {
    Facts::default()
}

fn has_any(l: &str, keys: &[&str]) -> bool {
    keys.iter().any(|k| l.contains(k))
}

// ---------------------------------------------------------------------------------------
// PyTorch.

/// `CUDA out of memory` (HIP on ROCm) or PyTorch's `OutOfMemoryError` class; never Java's
/// `java.lang.OutOfMemoryError` or Python's `MemoryError`.
fn is_torch_oom(l: &str) -> bool {
    !l.contains("java.lang.OutOfMemoryError")
        && has_any(
            l,
            &[
                "CUDA out of memory",
                "HIP out of memory",
                "torch.OutOfMemoryError",
                "torch.cuda.OutOfMemoryError",
                "OutOfMemoryError: CUDA",
            ],
        )
}

/// 1.x: `(GPU 0; 15.78 GiB total capacity; …)`; 2.x: `GPU 0 has a total capacity`.
fn torch_facts(l: &str) -> Facts {
    let device = ordinal_after(l, "(GPU ").or_else(|| {
        let i = l.find(" has a total capac")?;
        let head = &l[..i];
        let j = head.rfind("GPU ")?;
        head[j + 4..].trim().parse().ok()
    });
    Facts {
        device,
        requested: size_after(l, "Tried to allocate "),
        ..Facts::default()
    }
}

fn cuda_ordinal(l: &str) -> Facts {
    Facts {
        device: ordinal_after(l, "cuda:"),
        ..Facts::default()
    }
}

/// Not TensorFlow's stream executor logging, at info or warning level, a region it failed to
/// grow and will retry smaller (`I tensorflow/stream_executor/cuda/cuda_driver.cc:739] failed
/// to allocate 2.12G … CUDA_ERROR_OUT_OF_MEMORY`: the BFC allocator goes on, talmolab/sleap#2142).
fn is_runtime_oom(l: &str) -> bool {
    let tf_retry = l.contains("cuda_driver.cc") && (l.contains(": I ") || l.contains(": W "));
    !tf_retry
}

/// `failed to allocate 17.79G (19104890880 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY`.
fn bytes_in_parens(l: &str) -> Facts {
    Facts {
        device: ordinal_after(l, "cuda:"),
        requested: l
            .find(" (")
            .and_then(|i| size_token(&l[i + 2..]))
            .or_else(|| size_after(l, "failed to allocate ")),
        ..Facts::default()
    }
}

// ---------------------------------------------------------------------------------------
// TensorFlow, JAX/XLA.

fn tf_facts(l: &str) -> Facts {
    Facts {
        device: ordinal_after(l, "device:GPU:").or_else(|| ordinal_after(l, "GPU_")),
        requested: tf_tensor_bytes(l),
        ..Facts::default()
    }
}

fn jax_request(l: &str) -> Facts {
    // `32.00MiB (33554432B)`: the exact count in parentheses when printed.
    let requested = l
        .find("Failed to allocate request for ")
        .and_then(|i| {
            let rest = &l[i + "Failed to allocate request for ".len()..];
            rest.find(" (")
                .and_then(|j| size_token(&rest[j + 2..]))
                .filter(|_| rest.find(')').is_some())
                .or_else(|| size_token(rest))
        })
        .or_else(|| size_after(l, "Out of memory while trying to allocate "))
        .or_else(|| size_after(l, "Out of memory allocating "));
    Facts {
        device: ordinal_after(l, "device ordinal "),
        requested,
        ..Facts::default()
    }
}

fn is_jax(l: &str) -> bool {
    let exhausted = has_any(l, &["RESOURCE_EXHAUSTED", "Resource exhausted"]);
    exhausted
        && has_any(
            l,
            &[
                "Failed to allocate request for",
                "Out of memory while trying to allocate",
                "Out of memory allocating",
            ],
        )
}

// ---------------------------------------------------------------------------------------
// NCCL.

fn nccl_facts(l: &str) -> Facts {
    Facts {
        device: nccl_device(l),
        requested: size_after(l, "Failed to CUDA calloc "),
        ..Facts::default()
    }
}

fn is_nccl_oom(l: &str) -> bool {
    (l.contains("Cuda failure") && l.contains("'out of memory'"))
        || l.contains("Failed to CUDA calloc")
}

// ---------------------------------------------------------------------------------------
// Inference runtimes.

/// `allocating 144817.04 MiB on device 0: cudaMalloc failed`, or `failed to allocate CUDA0
/// buffer of size 151851674624`.
fn ggml_facts(l: &str) -> Facts {
    let device = ordinal_after(l, " on device ")
        .or_else(|| ordinal_after(l, "allocate CUDA"))
        .or_else(|| ordinal_after(l, "allocate ROCm"));
    Facts {
        device,
        requested: size_after(l, "allocating ").or_else(|| bytes_after(l, "buffer of size ")),
        ..Facts::default()
    }
}

fn is_ggml_buffer(l: &str) -> bool {
    has_any(l, &["failed to allocate CUDA", "failed to allocate ROCm"]) && l.contains(" buffer")
        || has_any(l, &["unable to allocate CUDA", "unable to allocate ROCm"])
}

fn trt_facts(l: &str) -> Facts {
    Facts {
        requested: size_after(l, "Requested size was ")
            .or_else(|| size_after(l, "Requested amount of GPU memory (")),
        ..Facts::default()
    }
}

fn is_trt_oom(l: &str) -> bool {
    l.contains("Cuda Runtime (out of memory)")
        || (l.contains("Cuda Error in ") && l.contains("(out of memory)"))
        || l.contains("Error Code 2: OutOfMemory")
        || (l.contains("Requested amount of GPU memory") && l.contains("could not be allocated"))
}

fn vllm_free_memory(l: &str) -> Facts {
    // `… is less than desired GPU memory utilization (0.9, 19.84 GiB)`: the claim is the second.
    let requested = l.rfind("utilization (").and_then(|i| {
        let rest = &l[i + "utilization (".len()..];
        let comma = rest.find(',')?;
        size_token(rest[comma + 1..].trim())
    });
    Facts {
        device: ordinal_after(l, "cuda:"),
        requested,
        ..Facts::default()
    }
}

fn vllm_kv_needed(l: &str) -> Facts {
    // `(24.0 GiB KV cache is needed, …`
    let requested = l.find(" KV cache is needed").and_then(|i| {
        let head = &l[..i];
        let j = head.rfind('(')?;
        size_token(&head[j + 1..])
    });
    Facts {
        requested,
        ..Facts::default()
    }
}

// ---------------------------------------------------------------------------------------
// Launchers, workers, faults.

fn worker_signal(l: &str) -> Facts {
    let name = l.find(" is killed by signal: ").map(|i| {
        l[i + " is killed by signal: ".len()..]
            .trim()
            .trim_end_matches('.')
    });
    let signal = match name {
        Some("Killed") => Some(9),
        Some("Terminated") => Some(15),
        Some("Segmentation fault") => Some(11),
        Some("Bus error") => Some(7),
        Some("Aborted") => Some(6),
        _ => None,
    };
    Facts {
        exit_code: signal.map(|s: i32| -s),
        ..Facts::default()
    }
}

fn torchrun_failed(l: &str) -> Facts {
    Facts {
        exit_code: int_after(l, "(exitcode:"),
        ..Facts::default()
    }
}

fn signal_received(l: &str) -> Facts {
    let code = int_after(l, "Signal ").or_else(|| int_after(l, "signal "));
    Facts {
        exit_code: code.filter(|c| *c > 0).map(|c| -c),
        ..Facts::default()
    }
}

/// CUDA failures that are not allocation failures: the message names what went wrong.
const CUDA_FAULTS: [&str; 11] = [
    "illegal memory access was encountered",
    "cudaErrorIllegalAddress",
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "device-side assert triggered",
    "The NVIDIA driver on your system is too old",
    "CUDA driver version is insufficient for CUDA runtime version",
    "no kernel image is available for execution on the device",
    "unspecified launch failure",
    "misaligned address",
    "uncorrectable ECC error encountered",
    "CUDA error: invalid device ordinal",
];

fn is_nccl_fault(l: &str) -> bool {
    // `Cuda failure 1 'invalid argument'`: NCCL's CUDACHECK on any other error.
    l.contains("Cuda failure") && !l.contains("out of memory")
}

fn fault_facts(l: &str) -> Facts {
    Facts {
        device: ordinal_after(l, "cuda:").or_else(|| ordinal_after(l, "GPU=")),
        ..Facts::default()
    }
}

/// Every recognised pattern, most specific first.
pub static PATTERNS: [Pattern; 34] = [
    Pattern {
        id: "torch-cuda-oom",
        framework: Framework::PyTorch,
        versions: "0.4 to 2.x (1.x: `(GPU 0; T total capacity; …)`; before 1.4 `S cached`; \
                   2.x: `GPU 0 has a total capacity of T of which F is free`; 2.1 `capacty`)",
        stream: Stream::Stderr,
        example: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU \
                  0 has a total capacity of 4.00 GiB of which 2.35 GiB is free.",
        source: "https://github.com/pytorch/pytorch/blob/main/c10/cuda/CUDACachingAllocator.cpp",
        kind: RunErrorKind::CudaOom,
        keys: &["CUDA out of memory", "HIP out of memory", "OutOfMemoryError"],
        matches: is_torch_oom,
        extracts: "requested, device, total, free, this process's use, PyTorch's allocated \
                   and reserved-unallocated bytes, the per-process cap (`X allowed`), other \
                   processes' use (record::stderr::OomDetail)",
        extract: torch_facts,
    },
    Pattern {
        id: "torch-cuda-driver-oom",
        framework: Framework::PyTorch,
        versions: "2.1+ (expandable segments / cuMem path)",
        stream: Stream::Stderr,
        example: "RuntimeError: CUDA driver error: out of memory",
        source: "https://github.com/pytorch/pytorch/blob/main/c10/cuda/driver_api.h",
        kind: RunErrorKind::CudaErrorOom,
        keys: &["CUDA driver error: out of memory"],
        matches: |l| l.contains("CUDA driver error: out of memory"),
        extracts: "nothing beyond the failure",
        extract: none,
    },
    Pattern {
        id: "cuda-runtime-oom",
        framework: Framework::CudaRuntime,
        versions: "any (PyTorch `CUDA error: out of memory`, pre-1.0 `cuda runtime error (2)`, \
                   TensorFlow's stream executor, RAPIDS `cudaErrorMemoryAllocation`)",
        stream: Stream::Stderr,
        example: "failed to allocate 17.79G (19104890880 bytes) from device: \
                  CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        source: "https://github.com/philip-huang/PIXOR/issues/31",
        kind: RunErrorKind::CudaErrorOom,
        keys: &[
            "CUDA error: out of memory",
            "CUDA_ERROR_OUT_OF_MEMORY",
            "cuda runtime error (2) : out of memory",
            "cudaErrorMemoryAllocation",
            "hipErrorOutOfMemory",
        ],
        matches: is_runtime_oom,
        extracts: "requested (TensorFlow's `(N bytes)`), device (`cuda:N`)",
        extract: bytes_in_parens,
    },
    Pattern {
        id: "cuda-unknown-error",
        framework: Framework::CudaRuntime,
        versions: "any",
        stream: Stream::Stderr,
        example: "RuntimeError: CUDA error: unknown error",
        source: "shared/FAILURES.md #5 (WeClone on vLLM)",
        kind: RunErrorKind::CudaUnknownError,
        keys: &["CUDA error: unknown error"],
        matches: |_| true,
        extracts: "device (`cuda:N`)",
        extract: cuda_ordinal,
    },
    Pattern {
        id: "nccl-cuda-oom",
        framework: Framework::Nccl,
        versions: "2.x (`Cuda failure 'out of memory'`; 2.19+ `Cuda failure 2 'out of memory'`, \
                   CUCHECK in src/include/checks.h; `Failed to CUDA calloc N bytes`, \
                   src/include/alloc.h; XLA's `Last NCCL warning(error) log entry`)",
        stream: Stream::Stderr,
        example: "ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA \
                  calloc 6291456 bytes",
        source: "https://github.com/NVIDIA/nccl/issues/1235",
        kind: RunErrorKind::NcclOom,
        keys: &["Cuda failure", "CUDA calloc"],
        matches: is_nccl_oom,
        extracts: "requested (calloc bytes), device (NCCL's `[cudaDev]`)",
        extract: nccl_facts,
    },
    Pattern {
        id: "cublas-alloc-failed",
        framework: Framework::CudaLibraries,
        versions: "any (PyTorch `when calling cublasCreate(handle)`, TensorFlow `failed to \
                   create cublas handle`)",
        stream: Stream::Stderr,
        example: "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling \
                  `cublasCreate(handle)`",
        source: "https://github.com/QwenLM/Qwen3/issues/873",
        kind: RunErrorKind::CublasAllocFailed,
        keys: &["CUBLAS_STATUS_ALLOC_FAILED"],
        matches: |_| true,
        extracts: "device (`cuda:N`)",
        extract: cuda_ordinal,
    },
    Pattern {
        id: "cudnn-alloc-failed",
        framework: Framework::CudaLibraries,
        versions: "cuDNN 7 to 9",
        stream: Stream::Stderr,
        example: "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        source: "https://docs.nvidia.com/deeplearning/cudnn/latest/api/cudnn-graph-library.html",
        kind: RunErrorKind::CudnnAllocFailed,
        keys: &["CUDNN_STATUS_ALLOC_FAILED"],
        matches: |_| true,
        extracts: "device (`cuda:N`)",
        extract: cuda_ordinal,
    },
    Pattern {
        id: "xla-resource-exhausted",
        framework: Framework::Jax,
        versions: "jaxlib 0.1.x `Resource exhausted: Failed to allocate request for 32.00MiB \
                   (33554432B) on device ordinal 0`; PJRT `RESOURCE_EXHAUSTED: Failed to \
                   allocate request for 47.08GiB` / `105.47 MiB`; `Out of memory while trying \
                   to allocate N bytes`; `Out of memory allocating N bytes`",
        stream: Stream::Stderr,
        example: "RuntimeError: Resource exhausted: Failed to allocate request for 32.00MiB \
                  (33554432B) on device ordinal 0",
        source: "https://github.com/kingoflolz/mesh-transformer-jax/issues/66",
        kind: RunErrorKind::JaxOom,
        keys: &[
            "Failed to allocate request for",
            "Out of memory while trying to allocate",
            "Out of memory allocating",
        ],
        matches: is_jax,
        extracts: "requested (exact `(NB)` when printed, either size spelling), device \
                   (`device ordinal N`)",
        extract: jax_request,
    },
    Pattern {
        id: "tf-bfc-oom",
        framework: Framework::TensorFlow,
        versions: "1.x `ResourceExhaustedError (see above for traceback): OOM when allocating \
                   tensor with shape[…]`, `Resource exhausted: OOM when allocating tensor …`; \
                   2.x the same with `and type float on …device:GPU:0 by allocator GPU_0_bfc`",
        stream: Stream::Stderr,
        example: "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when \
                  allocating tensor with shape[8,64,256,256] and type float on \
                  /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
        source: "https://github.com/miemie2013/Keras-YOLOv4/issues/39",
        kind: RunErrorKind::TfOom,
        keys: &["OOM when allocating"],
        matches: |_| true,
        extracts: "requested (shape x dtype size), device (`device:GPU:N`)",
        extract: tf_facts,
    },
    Pattern {
        id: "tf-eager-failed-to-allocate",
        framework: Framework::TensorFlow,
        versions: "2.x eager (`ResourceExhaustedError: failed to allocate memory [Op:…]`)",
        stream: Stream::Stderr,
        example: "ResourceExhaustedError: failed to allocate memory [Op:AddV2]",
        source: "https://github.com/faustomorales/keras-ocr/issues/195",
        kind: RunErrorKind::TfOom,
        keys: &["failed to allocate memory"],
        matches: |l| l.contains("ResourceExhaustedError") || l.contains("RESOURCE_EXHAUSTED"),
        extracts: "nothing beyond the failure",
        extract: none,
    },
    Pattern {
        id: "vllm-free-memory",
        framework: Framework::Vllm,
        versions: "0.6+ (V0 and V1 start-up check)",
        stream: Stream::Stdout,
        example: "ValueError: Free memory on device cuda:0 (19.77/22.05 GiB) on startup is less \
                  than desired GPU memory utilization (0.9, 19.84 GiB).",
        source: "https://github.com/vllm-project/vllm/blob/main/vllm/worker/worker.py",
        kind: RunErrorKind::VllmFreeMemory,
        keys: &["less than desired GPU memory utilization"],
        matches: |_| true,
        extracts: "requested (the claim), device (`cuda:N`)",
        extract: vllm_free_memory,
    },
    Pattern {
        id: "vllm-no-cache-blocks",
        framework: Framework::Vllm,
        versions: "0.2 to 0.6 (V0)",
        stream: Stream::Stdout,
        example: "ValueError: No available memory for the cache blocks. Try increasing \
                  `gpu_memory_utilization` when initializing the engine.",
        source: "https://github.com/vllm-project/vllm/blob/v0.5.0/vllm/worker/worker.py",
        kind: RunErrorKind::VllmNoCacheBlocks,
        keys: &["No available memory for the cache blocks"],
        matches: |_| true,
        extracts: "nothing beyond the failure",
        extract: none,
    },
    Pattern {
        id: "vllm-max-seq-len-kv",
        framework: Framework::Vllm,
        versions: "0.2+ (V0)",
        stream: Stream::Stdout,
        example: "ValueError: The model's max seq len (32768) is larger than the maximum number \
                  of tokens that can be stored in KV cache (7344).",
        source: "https://github.com/vllm-project/vllm/issues/2418",
        kind: RunErrorKind::VllmKvCache,
        keys: &["maximum number of tokens that can be stored in KV cache"],
        matches: |_| true,
        extracts: "nothing in bytes (token counts)",
        extract: none,
    },
    Pattern {
        id: "vllm-v1-kv-needed",
        framework: Framework::Vllm,
        versions: "V1 engine (`models's` in early releases, `model's` later)",
        stream: Stream::Stdout,
        example: "ValueError: To serve at least one request with the models's max seq len \
                  (262144), (24.0 GiB KV cache is needed, which is larger than the available \
                  KV cache memory (3.18 GiB).",
        source: "https://github.com/vllm-project/vllm/issues/34076",
        kind: RunErrorKind::VllmKvCache,
        keys: &["KV cache is needed"],
        matches: |l| l.contains("To serve at least one request with the model"),
        extracts: "requested (the KV cache needed)",
        extract: vllm_kv_needed,
    },
    Pattern {
        id: "sglang-not-enough-memory",
        framework: Framework::Sglang,
        versions: "0.1+ (model_runner: the KV cache pool does not fit after the weights)",
        stream: Stream::Stderr,
        example: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        source: "https://github.com/sgl-project/sglang/issues/4330",
        kind: RunErrorKind::SglangNoMemory,
        keys: &["Please try to increase --mem-fraction-static"],
        matches: |l| l.contains("Not enough memory"),
        extracts: "nothing beyond the failure",
        extract: none,
    },
    Pattern {
        id: "paddle-oom",
        framework: Framework::PaddlePaddle,
        versions: "1.6 to 3.x (`ResourceExhaustedError:` then `Out of memory error on GPU N. \
                   Cannot allocate X memory on GPU N, [A memory has been allocated and] \
                   available memory is only F.`)",
        stream: Stream::Stderr,
        example: "Out of memory error on GPU 0. Cannot allocate 25.002197MB memory on GPU 0, \
                  available memory is only 15.187500MB.",
        source: "https://github.com/PaddlePaddle/PaddleOCR/issues/1505",
        kind: RunErrorKind::PaddleOom,
        keys: &["Out of memory error on GPU"],
        matches: |_| true,
        extracts: "requested (`Cannot allocate X`), device (`on GPU N`), free (`available \
                   memory is only F`)",
        extract: paddle_facts,
    },
    Pattern {
        id: "tgi-prefill-oom",
        framework: Framework::Tgi,
        versions: "0.9+ (flash_causal_lm warm-up; the router repeats it as `Server error:`)",
        stream: Stream::Stderr,
        example: "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to \
                  decrease `--max-batch-prefill-tokens`",
        source: "https://github.com/huggingface/text-generation-inference/issues/1067",
        kind: RunErrorKind::TgiOom,
        keys: &["Not enough memory to handle"],
        matches: |l| l.contains("prefill tokens"),
        extracts: "nothing in bytes (a token count)",
        extract: none,
    },
    Pattern {
        id: "torch-exceeds-allowed",
        framework: Framework::PyTorch,
        versions: "1.x caching allocator under a per-process memory fraction (TGI prints it \
                   in its warm-up panic)",
        stream: Stream::Stderr,
        example: "thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on \
                  device 0 would exceed allowed memory. (out of memory)",
        source: "https://github.com/huggingface/text-generation-inference/issues/563",
        kind: RunErrorKind::CudaErrorOom,
        keys: &["would exceed allowed memory"],
        matches: |l| l.contains("Allocation on device"),
        extracts: "device (`Allocation on device N`)",
        extract: allowed_facts,
    },
    Pattern {
        id: "tensorrt-llm-runtime-oom",
        framework: Framework::TensorRtLlm,
        versions: "0.7+ (`[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(…): out \
                   of memory (…/tllmBuffers.h:N)`, ipcUtils.cpp)",
        stream: Stream::Stderr,
        example: "RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in \
                  ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory \
                  (/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:118)",
        source: "https://github.com/NVIDIA/TensorRT-LLM/issues/1556",
        kind: RunErrorKind::TensorRtOom,
        keys: &["[TensorRT-LLM][ERROR] CUDA runtime error in"],
        matches: is_trtllm_runtime_oom,
        extracts: "nothing beyond the failure",
        extract: none,
    },
    Pattern {
        id: "tensorrt-llm-builder-oom",
        framework: Framework::TensorRtLlm,
        versions: "0.x (TensorRT's allocator messages behind the `[TensorRT-LLM]` prefix)",
        stream: Stream::Stderr,
        example: "[TensorRT-LLM][ERROR] [deserialize.cpp::load::572] Error Code 2: OutOfMemory \
                  (Requested size was 69568823808 bytes.)",
        source: "https://github.com/guidance-ai/llgtrt/issues/7",
        kind: RunErrorKind::TensorRtOom,
        keys: &["[TensorRT-LLM]"],
        matches: is_trt_oom,
        extracts: "requested (`Requested size was N bytes`, `Requested amount of GPU memory \
                   (N bytes)`)",
        extract: trt_facts,
    },
    Pattern {
        id: "onnxruntime-bfc-arena",
        framework: Framework::OnnxRuntime,
        versions: "1.x (core/framework/bfc_arena.cc `BFCArena::AllocateRawInternal`)",
        stream: Stream::Stderr,
        example: "Status Message: D:\\a\\_work\\1\\s\\onnxruntime\\core\\framework\\bfc_arena.cc:330 \
                  onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for \
                  requested buffer of size 285081600",
        source: "https://github.com/DayBreak-u/chineseocr_lite/issues/355",
        kind: RunErrorKind::OnnxRuntimeOom,
        keys: &["Failed to allocate memory for requested buffer of size"],
        matches: |_| true,
        extracts: "requested (`requested buffer of size N`)",
        extract: ort_facts,
    },
    Pattern {
        id: "mxnet-cuda-malloc",
        framework: Framework::Mxnet,
        versions: "1.x (`src/storage/./pooled_storage_manager.h:N: cudaMalloc failed: out of \
                   memory`; 1.6+ `cudaMalloc retry failed: out of memory`)",
        stream: Stream::Stderr,
        example: "MXNetError: cudaMalloc retry failed: out of memory",
        source: "https://github.com/deepinsight/insightface/issues/1341",
        kind: RunErrorKind::MxnetOom,
        keys: &["cudaMalloc retry failed", "storage_manager"],
        matches: is_mxnet_oom,
        extracts: "nothing beyond the failure",
        extract: none,
    },
    Pattern {
        id: "ggml-cuda-malloc",
        framework: Framework::LlamaCpp,
        versions: "llama.cpp since the ggml-backend allocator (2024); Ollama prints it in its \
                   server log before its Go panic",
        stream: Stream::Stderr,
        example: "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device \
                  0: cudaMalloc failed: out of memory",
        source: "https://github.com/ggml-org/llama.cpp/issues/20431",
        kind: RunErrorKind::GgmlOom,
        keys: &["cudaMalloc failed: out of memory"],
        matches: |_| true,
        extracts: "requested (`allocating X MiB`), device (`on device N`)",
        extract: ggml_facts,
    },
    Pattern {
        id: "ggml-buffer",
        framework: Framework::LlamaCpp,
        versions: "llama.cpp / ik_llama.cpp / Ollama (`failed to allocate CUDA0 buffer of size \
                   N`, `unable to allocate CUDA0 buffer`)",
        stream: Stream::Stderr,
        example: "alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624",
        source: "https://github.com/ggml-org/llama.cpp/issues/20431",
        kind: RunErrorKind::GgmlOom,
        keys: &["to allocate CUDA", "to allocate ROCm"],
        matches: is_ggml_buffer,
        extracts: "requested (`buffer of size N`), device (`CUDAN`)",
        extract: ggml_facts,
    },
    Pattern {
        id: "tensorrt-cuda-runtime-oom",
        framework: Framework::TensorRt,
        versions: "7.x `Cuda Error in allocate: 2 (out of memory)`; 8.x/10.x `Error Code 1: Cuda \
                   Runtime (out of memory)`, `Error Code 2: OutOfMemory (Requested size was N \
                   bytes.)`",
        stream: Stream::Stderr,
        example: "[E] [virtualMemoryBuffer.cpp::resizePhysical::154] Error Code 2: OutOfMemory \
                  (Requested size was 16581132288 bytes.)",
        source: "https://github.com/NVIDIA/TensorRT/issues/4254",
        kind: RunErrorKind::TensorRtOom,
        keys: &[
            "(out of memory)",
            "Error Code 2: OutOfMemory",
            "Requested amount of GPU memory",
        ],
        matches: is_trt_oom,
        extracts: "requested (`Requested size was N bytes`)",
        extract: trt_facts,
    },
    Pattern {
        id: "recovering-oom",
        framework: Framework::Recovering,
        versions: "fairseq, metaseq (their trainers catch the OOM, skip the batch and go on)",
        stream: Stream::Stderr,
        example: "2020-11-05 19:30:05 | WARNING | fairseq.trainer | attempting to recover from \
                  OOM in forward/backward pass",
        source: "https://github.com/facebookresearch/fairseq/issues/2857",
        kind: RunErrorKind::FrameworkOom,
        keys: &["attempting to recover from OOM"],
        matches: |_| true,
        extracts: "nothing beyond the failure",
        extract: none,
    },
    Pattern {
        id: "dataloader-worker-killed",
        framework: Framework::PyTorch,
        versions: "1.x, 2.x",
        stream: Stream::Stderr,
        example: "RuntimeError: DataLoader worker (pid 1817) is killed by signal: Killed.",
        source: "https://github.com/pytorch/pytorch/issues/8976",
        kind: RunErrorKind::WorkerKilled,
        keys: &[" is killed by signal: "],
        matches: |l| l.contains("DataLoader worker"),
        extracts: "the signal (by the name Python's strsignal gives it)",
        extract: worker_signal,
    },
    Pattern {
        id: "nccl-watchdog-timeout",
        framework: Framework::PyTorch,
        versions: "1.12+ (ProcessGroupNCCL)",
        stream: Stream::Stderr,
        example: "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, \
                  OpType=ALLREDUCE) ran for 1800000 milliseconds before timing out.",
        source: "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
        kind: RunErrorKind::NcclWatchdog,
        keys: &["Watchdog caught collective operation timeout"],
        matches: |_| true,
        extracts: "nothing beyond the failure",
        extract: none,
    },
    Pattern {
        id: "torchrun-failed-exitcode",
        framework: Framework::Torchrun,
        versions: "1.9+ (torch/distributed/elastic/multiprocessing/api.py)",
        stream: Stream::Stderr,
        example: "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) \
                  local_rank: 3 (pid: 812917) of binary: /usr/bin/python",
        source: "https://github.com/hpcaitech/ColossalAI/issues/3514",
        kind: RunErrorKind::ChildExit,
        keys: &["failed (exitcode:"],
        matches: |l| l.contains("local_rank"),
        extracts: "the rank's exit code (negative: the signal)",
        extract: torchrun_failed,
    },
    Pattern {
        id: "torchrun-signal-received",
        framework: Framework::Torchrun,
        versions: "1.9+ (the `traceback` row of the ChildFailedError table)",
        stream: Stream::Stderr,
        example: "  traceback : Signal 9 (SIGKILL) received by PID 14750",
        source: "https://github.com/lzhxmu/CPPO/issues/6",
        kind: RunErrorKind::ChildExit,
        keys: &["received by PID"],
        matches: |l| l.contains("ignal "),
        extracts: "the signal",
        extract: signal_received,
    },
    Pattern {
        id: "torchrun-child-failed",
        framework: Framework::Torchrun,
        versions: "1.9+",
        stream: Stream::Stderr,
        example: "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        source: "https://github.com/pytorch/pytorch/blob/main/torch/distributed/elastic/multiprocessing/errors/__init__.py",
        kind: RunErrorKind::ChildFailed,
        keys: &["ChildFailedError"],
        matches: |l| !l.contains("raise ChildFailedError"),
        extracts: "opens the failure table (read as a block)",
        extract: none,
    },
    Pattern {
        id: "nccl-cuda-failure",
        framework: Framework::Nccl,
        versions: "2.x (CUDACHECK on any CUDA error other than out of memory)",
        stream: Stream::Stderr,
        example: "n176-080-198:2657296:2658232 [0] include/alloc.h:102 NCCL WARN Cuda failure 1 \
                  'invalid argument'",
        source: "https://github.com/NVIDIA/nccl/issues/1283",
        kind: RunErrorKind::CudaFault,
        keys: &["Cuda failure"],
        matches: is_nccl_fault,
        extracts: "device (NCCL's `[cudaDev]`)",
        extract: nccl_facts,
    },
    Pattern {
        id: "cuda-library-fault",
        framework: Framework::CudaLibraries,
        versions: "cuBLAS, cuDNN, cuSOLVER, cuFFT statuses other than allocation failure \
                   (PyTorch `CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling …`, \
                   `cuDNN error: CUDNN_STATUS_EXECUTION_FAILED`, `cusolver error: \
                   CUSOLVER_STATUS_EXECUTION_FAILED`; CNTK `CUBLAS failure 13`)",
        stream: Stream::Stderr,
        example: "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling \
                  `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, \
                  ldc)`",
        source: "https://github.com/jadore801120/attention-is-all-you-need-pytorch/issues/193",
        kind: RunErrorKind::CudaFault,
        keys: &LIBRARY_FAULTS,
        matches: |_| true,
        extracts: "device (`cuda:N`, `GPU=N`)",
        extract: fault_facts,
    },
    Pattern {
        id: "cuda-fault",
        framework: Framework::CudaRuntime,
        versions: "any (illegal address, device-side assert, launch failure, ECC, driver too \
                   old, no kernel image, invalid ordinal)",
        stream: Stream::Stderr,
        example: "RuntimeError: CUDA error: an illegal memory access was encountered",
        source: "https://github.com/VITA-Group/TEGNAS/issues/19",
        kind: RunErrorKind::CudaFault,
        keys: &CUDA_FAULTS,
        matches: |_| true,
        extracts: "device (`cuda:N`, `GPU=N`)",
        extract: fault_facts,
    },
];
