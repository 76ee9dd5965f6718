//! The table checks itself: every example is recognised as its own entry, every entry is
//! sourced, ids are unique; then lines of each family copied from the issues cited beside
//! them, with the numbers they state, and lines that must not be recognised.

use super::*;
use std::collections::BTreeSet;

const MIB: u64 = 1 << 20;

#[test]
fn every_example_is_recognised_as_its_own_entry() {
    for p in table::PATTERNS.iter() {
        let m = recognise(p.example).unwrap_or_else(|| panic!("{}: example not recognised", p.id));
        assert_eq!(
            m.pattern.id, p.id,
            "{}: example taken by {}",
            p.id, m.pattern.id
        );
        assert_eq!(m.pattern.kind, p.kind);
    }
}

#[test]
fn every_entry_is_sourced_and_unique() {
    let mut ids = BTreeSet::new();
    for p in table::PATTERNS.iter() {
        assert!(ids.insert(p.id), "duplicate id {}", p.id);
        assert!(
            p.source.starts_with("https://") || p.source.starts_with("shared/"),
            "{}: source {:?}",
            p.id,
            p.source
        );
        assert!(!p.keys.is_empty() && !p.versions.is_empty() && !p.extracts.is_empty());
        assert!(pattern(p.id).is_some());
        let _ = (p.framework.name(), p.stream);
    }
}

/// (source, line, pattern id, device, requested bytes)
type Row = (
    &'static str,
    &'static str,
    &'static str,
    Option<u32>,
    Option<u64>,
);

#[test]
fn lines_of_every_family() {
    let rows: [Row; 16] = [
        (
            "zzw922cn/Automatic_Speech_Recognition#78",
            "W tensorflow/core/framework/op_kernel.cc:1202] OP_REQUIRES failed at \
             tile_ops.cc:123 : Resource exhausted: OOM when allocating tensor with \
             shape[16,1,892800,8,4,2,2] and type float on \
             /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            "tf-bfc-oom",
            Some(0),
            Some(16 * 892_800 * 8 * 4 * 2 * 2 * 4),
        ),
        (
            "santi-pdp/segan#42 (TF 1.x, no dtype)",
            "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with \
             shape[100,4096,32]",
            "tf-bfc-oom",
            None,
            None,
        ),
        (
            "google-deepmind/deepmind-research#102",
            "RuntimeError: Resource exhausted: Failed to allocate request for 30.12GiB \
             (32341200016B) on device ordinal 0",
            "xla-resource-exhausted",
            Some(0),
            Some(32_341_200_016),
        ),
        (
            "issue 26 (PJRT, size without a space, no exact count)",
            "RESOURCE_EXHAUSTED: Failed to allocate request for 47.08GiB",
            "xla-resource-exhausted",
            None,
            Some((47.08 * (1u64 << 30) as f64).round() as u64),
        ),
        (
            "issue 26 (PJRT, size with a space)",
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate \
             request for 105.47 MiB on device ordinal 0",
            "xla-resource-exhausted",
            Some(0),
            Some((105.47 * MIB as f64).round() as u64),
        ),
        (
            "NVIDIA/nccl#1235",
            "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of \
             memory'",
            "nccl-cuda-oom",
            Some(3),
            None,
        ),
        (
            "openxla/xla#7201 (NCCL 2.19+ error number)",
            "NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled cuda \
             error (run with NCCL_DEBUG=INFO for details). Last NCCL warning(error) log entry \
             (may be unrelated) 'Cuda failure 2 'out of memory''.",
            "nccl-cuda-oom",
            None,
            None,
        ),
        (
            "ggml-org/llama.cpp#11476",
            "deep-seek-1  | ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9866.00 MiB \
             on device 1: cudaMalloc failed: out of memory",
            "ggml-cuda-malloc",
            Some(1),
            Some(9866 * MIB),
        ),
        (
            "ggml-org/llama.cpp#16725 (ROCm)",
            "ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 14822711296",
            "ggml-buffer",
            Some(0),
            Some(14_822_711_296),
        ),
        (
            "ollama/ollama#8447",
            "ollama  | llama_model_load: error loading model: unable to allocate CUDA0 buffer",
            "ggml-buffer",
            Some(0),
            None,
        ),
        (
            "NVIDIA/TensorRT#4258",
            "[11/22/2024-13:40:47] [W] [TRT] Requested amount of GPU memory (15485030400 bytes) \
             could not be allocated. There may not be enough free memory for allocation to \
             succeed.",
            "tensorrt-cuda-runtime-oom",
            None,
            Some(15_485_030_400),
        ),
        (
            "microsoft/onnxruntime#10770 (TensorRT 7)",
            "[2022-03-04 13:39:28 ERROR] ../rtSafe/safeRuntime.cpp (25) - Cuda Error in \
             allocate: 2 (out of memory)",
            "tensorrt-cuda-runtime-oom",
            None,
            None,
        ),
        (
            "philip-huang/PIXOR#31 (TensorFlow stream executor)",
            "failed to allocate 17.79G (19104890880 bytes) from device: \
             CUDA_ERROR_OUT_OF_MEMORY: out of memory",
            "cuda-runtime-oom",
            None,
            Some(19_104_890_880),
        ),
        (
            "hpcaitech/ColossalAI#3514",
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) \
             local_rank: 3 (pid: 812917) of binary: /usr/bin/python",
            "torchrun-failed-exitcode",
            None,
            None,
        ),
        (
            "vllm-project/vllm#20170 (watchdog thread, not a timeout)",
            "[rank2]:[E626 23:10:17.921506443 ProcessGroupNCCL.cpp:1896] [PG ID 2 PG GUID 3 \
             Rank 2] Process group watchdog thread terminated with exception: CUDA error: an \
             illegal memory access was encountered",
            "cuda-fault",
            None,
            None,
        ),
        (
            "lllyasviel/Fooocus#1313",
            "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
            "cuda-fault",
            None,
            None,
        ),
    ];
    for (source, line, id, device, requested) in rows {
        let m = recognise(line).unwrap_or_else(|| panic!("{source}: not recognised"));
        assert_eq!(m.pattern.id, id, "{source}");
        assert_eq!(m.facts.device, device, "{source}: device");
        assert_eq!(m.facts.requested, requested, "{source}: requested");
    }
    let m = recognise("  exitcode  : -9 (pid: 1)");
    assert!(m.is_none(), "the table row is read by the watcher's block");
    let m = recognise("traceback : signal 9 (SIGKILL) received by PID 36071").unwrap();
    assert_eq!(m.facts.exit_code, Some(-9));
    let m = recognise(
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) \
                       local_rank: 0 (pid: 1622990) of binary: /bin/python",
    )
    .unwrap();
    assert_eq!(m.facts.exit_code, Some(1));
}

#[test]
fn lines_that_are_not_failures_are_not_recognised() {
    for l in [
        // Compile-time advice printed under every CUDA error (ggml-org, vllm-project/vllm#20170).
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the \
         stacktrace below might be incorrect.",
        // llama.cpp: pinned host memory, not the GPU's (ggml-org/llama.cpp#9629).
        "ggml_cuda_host_malloc: failed to allocate 1900,00 MiB of pinned memory: invalid argument",
        "llama_kv_cache_init:      CUDA0 KV buffer size =   379.23 MiB",
        "Hint: If you want to see a list of allocated tensors when OOM happens, add \
         report_tensor_allocations_upon_oom to RunOptions for current allocation info.",
        "    raise ChildFailedError(",
        "time=2025-02-04T16:56:25.304Z level=INFO source=sched.go:730 msg=\"new model will fit \
         in available VRAM, loading\" required=\"23.4 GiB\"",
        "INFO 01-11 15:51:18 llm_engine.py:275] # GPU blocks: 229, # CPU blocks: 512",
        "NCCL INFO Channel 00/1 : 0[0] -> 2[2] via P2P/CUMEM",
        "Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space",
        // TensorFlow retrying a region smaller (talmolab/sleap#2142), and its BFC allocator's
        // own "not a failure" (tensorflow/tensorflow#23953).
        "2025-03-17 17:48:09.854267: I tensorflow/stream_executor/cuda/cuda_driver.cc:739] \
         failed to allocate 2.12G (2282521344 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out \
         of memory",
        "2018-11-25 19:04:59.501703: W tensorflow/core/common_runtime/bfc_allocator.cc:215] \
         Allocator (GPU_0_bfc) ran out of memory trying to allocate 217.69MiB. The caller \
         indicates that this is not a failure, but may mean that there could be performance \
         gains if more memory were available.",
    ] {
        assert!(recognise(l).is_none(), "{l}");
    }
}

/// Issue 39 item 5: a size past 64 bits was recorded as 18446744073709551615.
#[test]
fn sizes_past_64_bits_are_left_out_not_saturated() {
    use super::extract::{size_at, size_token};
    assert_eq!(size_at("99999999999999999999999999 GiB"), None);
    assert_eq!(size_token("99999999999999999999999999GiB"), None);
    assert_eq!(
        size_at("16777215.99 TiB"),
        Some((16777215.99f64 * (1u64 << 40) as f64).round() as u64)
    );
    assert_eq!(size_at("-2.00 GiB"), None);
}

/// (source, line, pattern id, framework, device, requested)
type FamilyRow = (
    &'static str,
    &'static str,
    &'static str,
    Framework,
    Option<u32>,
    Option<u64>,
);

/// Issue 37's families, each on a line copied from the issue cited beside it: the pattern,
/// its framework and the numbers the line states.
#[test]
fn lines_of_the_runtimes_issue_37_adds() {
    let rows: [FamilyRow; 11] = [
        (
            "PaddlePaddle/Paddle#42228 (2.x)",
            "Out of memory error on GPU 0. Cannot allocate 98.000244MB memory on GPU 0, \
             6.000000GB memory has been allocated and available memory is only 0.000000B.",
            "paddle-oom",
            Framework::PaddlePaddle,
            Some(0),
            Some(98_000_244),
        ),
        (
            "huggingface/text-generation-inference#1164 (the router's echo)",
            "ERROR warmup{max_input_length=64 max_prefill_tokens=256}:warmup: \
             text_generation_client: router/client/src/lib.rs:33: Server error: Not enough \
             memory to handle 256 prefill tokens. You need to decrease",
            "tgi-prefill-oom",
            Framework::Tgi,
            None,
            None,
        ),
        (
            "NVIDIA/TensorRT-LLM#1060",
            "RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in error: out of memory \
             (/home/jenkins/agent/workspace/LLM/main/L0_PostMerge/tensorrt_llm/cpp/\
             tensorrt_llm/runtime/ipcUtils.cpp:48)",
            "tensorrt-llm-runtime-oom",
            Framework::TensorRtLlm,
            None,
            None,
        ),
        (
            "guidance-ai/llgtrt#7",
            "[TensorRT-LLM][ERROR] [defaultAllocator.cpp::allocate::31] Error Code 1: Cuda \
             Runtime (out of memory)",
            "tensorrt-llm-builder-oom",
            Framework::TensorRtLlm,
            None,
            None,
        ),
        (
            "microsoft/onnxruntime#16307",
            "Non-zero status code returned while running ReduceSum node. \
             onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for \
             requested buffer of size 939524096",
            "onnxruntime-bfc-arena",
            Framework::OnnxRuntime,
            None,
            Some(939_524_096),
        ),
        (
            "apache/mxnet#675 (1.x, before the retry)",
            "`mxnet.base.MXNetError: [11:18:15] src/storage/./pooled_storage_manager.h:157: \
             cudaMalloc failed: out of memory",
            "mxnet-cuda-malloc",
            Framework::Mxnet,
            None,
            None,
        ),
        (
            "ROCm/TheRock#1054 (PyTorch on ROCm)",
            "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 16.00 GiB. GPU 0 has \
             a total capacity of 15.24 GiB of which 15.09 GiB is free.",
            "torch-cuda-oom",
            Framework::PyTorch,
            Some(0),
            Some(16 << 30),
        ),
        (
            "microsoft/CNTK#379",
            "CUBLAS failure 13: CUBLAS_STATUS_EXECUTION_FAILED ; GPU=1 ; hostname=rg404.bbn.com",
            "cuda-library-fault",
            Framework::CudaLibraries,
            Some(1),
            None,
        ),
        (
            "GeneZC/ASGCN#19",
            "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
            "cuda-library-fault",
            Framework::CudaLibraries,
            None,
            None,
        ),
        (
            "pytorch/pytorch#70669",
            "RuntimeError: cusolver error: CUSOLVER_STATUS_EXECUTION_FAILED, when calling \
             `cusolverDnXgeqrf( handle, params, m, n, CUDA_R_32F, reinterpret_cast<void*>(A), \
             lda)`",
            "cuda-library-fault",
            Framework::CudaLibraries,
            None,
            None,
        ),
        (
            "huggingface/text-generation-inference#563",
            "thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on \
             device 0 would exceed allowed memory. (out of memory)\\nCurrently allocated     : \
             16.08 GiB\\nRequested               : 4.83 GiB",
            "torch-exceeds-allowed",
            Framework::PyTorch,
            Some(0),
            None,
        ),
    ];
    for (src, line, id, fw, device, requested) in rows {
        let m = recognise(line).unwrap_or_else(|| panic!("{src}: not recognised: {line}"));
        assert_eq!(m.pattern.id, id, "{src}");
        assert_eq!(m.pattern.framework, fw, "{src}");
        assert_eq!(m.facts.device, device, "{src}");
        assert_eq!(m.facts.requested, requested, "{src}");
    }
    // PaddlePaddle states the free memory: kept.
    let m = recognise(
        "Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0, available \
         memory is only 416.625000MB.",
    )
    .unwrap();
    assert_eq!(m.facts.free, Some(416_625_000));
}

/// Lines of these runtimes that are not failures, and the libraries' `INTERNAL_ERROR`
/// statuses (an allocation failure in disguise, rwth-i6/returnn#1465): never `cuda-error`.
#[test]
fn issue_37_lines_that_are_not_failures_are_not_recognised() {
    for l in [
        "2022-01-07 07:17:51.913839024 [I:onnxruntime:log, bfc_arena.cc:306 \
         AllocateRawInternal] Extending BFCArena for Cuda. bin_num:9 (requested) num_bytes: \
         160000 (actual) rounded_bytes:160000",
        "onnx runtime error 2: not enough space: expected 318080, got 314240",
        "Please check whether there is any other process using GPU 0.",
        "2024-11-13T19:54:24Z INFO text_generation_launcher: Setting max batch total tokens \
         to 30816",
        "[TensorRT-LLM][INFO] Loaded engine size: 68370 MiB",
        "RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR",
    ] {
        assert!(recognise(l).is_none(), "{l}");
    }
}
