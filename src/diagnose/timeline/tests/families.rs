//! Issue 26: every family's failure named with its own fix, severity following the outcome
//! (a recovered OOM is a warning), PyTorch's details (the per-process cap, "this process has
//! 0 bytes", a small cache on a full GPU), and CUDA failures that are not memory failures.

use super::*;

fn oom_job(lines: &[&str], exit: i32) -> Job {
    let mut j = Job::new(&[24 * G], 12_000.0);
    j.proc_(10, None, Some(11_000.0));
    j.ramp(500.0, 3000.0, 10, 0, 0, gib(21.5));
    for (i, l) in lines.iter().enumerate() {
        let p = crate::record::stderr::parse_line(l).expect("a recognised line");
        j.errors.push(ErrorEvent {
            t_ms: 9_000.0 + i as f64 * 100.0,
            kind: p.error_kind(),
            device: p.device,
            pid: None,
            line: p.line,
            requested_bytes: p.requested,
            facts: None,
        });
    }
    j.exit = Some(JobExit::Code(exit));
    j
}

const FAIRSEQ: &str = "| WARNING: ran out of memory with exception: CUDA out of memory. Tried to \
                       allocate 20.00 MiB (GPU 0; 7.93 GiB total capacity; 7.20 GiB already \
                       allocated; 17.56 MiB free; 46.25 MiB cached);";

#[test]
fn an_oom_the_job_recovered_from_is_a_warning_with_the_count() {
    // facebookresearch/fairseq#869: the batch is skipped and training goes on.
    let j = oom_job(&[FAIRSEQ, FAIRSEQ], 0);
    let f = find(&j.build(), ids::OUT_OF_MEMORY);
    assert_eq!(f.severity, Severity::Warn);
    assert!(
        f.title.starts_with("2 out-of-memory errors recovered from"),
        "{}",
        f.title
    );
    assert!(f
        .evidence
        .iter()
        .any(|e| e.label == "recoveries" && e.value == "2"));
    // The same lines in a job that then failed: an error.
    let j = oom_job(&[FAIRSEQ], 1);
    assert_eq!(
        find(&j.build(), ids::OUT_OF_MEMORY).severity,
        Severity::Error
    );
}

#[test]
fn a_few_mib_of_cache_next_to_a_similar_request_on_a_full_gpu_is_not_fragmentation() {
    // fairseq#869 (pre-1.4 `cached` is the unallocated part itself): 46 MiB spare, 20 MiB asked.
    let j = oom_job(&[FAIRSEQ], 1);
    assert_eq!(j.ids(), vec![ids::OUT_OF_MEMORY.to_string()]);
    let f = find(&j.build(), ids::OUT_OF_MEMORY);
    assert!(
        f.evidence.iter().any(
            |e| e.label.starts_with("reserved by PyTorch but unallocated")
                && e.value.starts_with("46")
        ),
        "{:?}",
        f.evidence
    );
    // facebookresearch/fairseq#2867 (1.4+): 204 MiB spare on a 10.92 GiB card, 28 MiB asked.
    let j = oom_job(
        &[
            "RuntimeError: CUDA out of memory. Tried to allocate 28.00 MiB (GPU 1; 10.92 GiB \
           total capacity; 10.13 GiB already allocated; 13.38 MiB free; 10.33 GiB reserved in \
           total by PyTorch)",
        ],
        1,
    );
    assert_eq!(j.ids(), vec![ids::OUT_OF_MEMORY.to_string()]);
    // carolchenyx/MGFN.#35: 2.30 GiB spare on a 6 GiB card, 1.70 GiB asked: fragmentation.
    let j = oom_job(
        &[
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 \
           has a total capacty of 6.00 GiB of which 0 bytes is free. Of the allocated memory \
           2.93 GiB is allocated by PyTorch, and 2.30 GiB is reserved by PyTorch but \
           unallocated.",
        ],
        1,
    );
    let f = find(&j.build(), ids::FRAGMENTATION);
    assert!(f.fix.contains("PYTORCH_ALLOC_CONF"), "{}", f.fix);
    assert!(f.fix.contains("183387"), "{}", f.fix);
}

#[test]
fn the_per_process_cap_is_the_cause_not_the_gpu() {
    // The 1.x wording with `X allowed;` (c10/cuda/CUDACachingAllocator.cpp, set by
    // torch.cuda.set_per_process_memory_fraction; pytorch/pytorch#111729).
    let j = oom_job(
        &[
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 200.00 MiB (GPU \
           0; 11.76 GiB total capacity; 4.65 GiB already allocated; 6.82 GiB free; 4.77 GiB \
           allowed; 4.74 GiB reserved in total by PyTorch)",
        ],
        1,
    );
    let f = find(&j.build(), ids::OUT_OF_MEMORY);
    assert!(
        f.title.contains("per-process cap (4.7") && f.title.contains("allowed)"),
        "{}",
        f.title
    );
    assert!(
        f.fix.contains("set_per_process_memory_fraction"),
        "{}",
        f.fix
    );
    assert!(has(&f, "allowed by the per-process cap"));
}

#[test]
fn this_process_has_0_bytes_does_not_make_the_jobs_memory_others() {
    // modelscope/ms-swift#5943.
    let j = oom_job(
        &["[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.63 GiB. GPU 3 \
           has a total capacity of 79.11 GiB of which 2.61 GiB is free. Including non-PyTorch \
           memory, this process has 0 bytes memory in use. Of the allocated memory 48.16 GiB is \
           allocated by PyTorch, with 50.00 MiB allocated in private pools (e.g., CUDA Graphs), \
           and 3.48 GiB is reserved by PyTorch but unallocated."],
        1,
    );
    let f = find(&j.build(), ids::OUT_OF_MEMORY);
    assert!(!f.title.contains("other processes held"), "{}", f.title);
    assert!(!has(&f, "other processes (total - free"));
    assert!(has(&f, "this process has 0 bytes memory in use"));
}

#[test]
fn each_family_gets_its_own_fix() {
    // vLLM's KV cache on a GPU nothing else uses: raising the utilisation is safe.
    let j = oom_job(
        &[
            "ValueError: The model's max seq len (32768) is larger than the maximum number of \
           tokens that can be stored in KV cache (7344).",
        ],
        1,
    );
    let f = find(&j.build(), ids::OUT_OF_MEMORY);
    assert!(f.fix.contains("is safe here"), "{}", f.fix);
    // The plan that fits: the length the cache held (issue 35).
    assert!(
        f.fix
            .contains("`vramdoc plan vllm MODEL_DIR --max-model-len 7344`"),
        "{}",
        f.fix
    );
    // vLLM's start-up check refused: the utilisation that passes it.
    let j = oom_job(
        &[
            "ValueError: Free memory on device cuda:0 (1.53/22.05 GiB) on startup is less than \
           desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or \
           reduce GPU memory used by other processes.",
        ],
        1,
    );
    let f = find(&j.build(), ids::OUT_OF_MEMORY);
    assert!(
        f.fix
            .contains("`vramdoc plan vllm MODEL_DIR --gpu-memory-utilization 0.06`"),
        "{}",
        f.fix
    );
    for (line, words) in [
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating \
             tensor with shape[8,64,256,256] and type float on \
             /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            "allow_growth",
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while \
             trying to allocate 7406166528 bytes.",
            "XLA_PYTHON_CLIENT_MEM_FRACTION",
        ),
        (
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9866.00 MiB on device 0: \
             cudaMalloc failed: out of memory",
            "--n-gpu-layers",
        ),
        (
            "ValueError: The model's max seq len (32768) is larger than the maximum number of \
             tokens that can be stored in KV cache (7344).",
            "--max-model-len",
        ),
        (
            "[E] [defaultAllocator.cpp::allocate::31] Error Code 1: Cuda Runtime (out of memory)",
            "workspace",
        ),
        (
            "ng30903:3063028:3066152 [0] include/alloc.h:185 NCCL WARN Failed to CUDA calloc \
             6291456 bytes",
            "NCCL_BUFFSIZE",
        ),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            "--mem-fraction-static",
        ),
    ] {
        let j = oom_job(&[line], 1);
        let f = find(&j.build(), ids::OUT_OF_MEMORY);
        assert!(f.fix.contains(words), "{line}: {}", f.fix);
        assert!(has(&f, "recognised as"), "{line}");
    }
}

#[test]
fn cuda_failures_that_are_not_memory_are_said_to_be_so() {
    let j = oom_job(
        &["RuntimeError: CUDA error: an illegal memory access was encountered"],
        1,
    );
    assert_eq!(j.ids(), vec![ids::CUDA_ERROR.to_string()]);
    let f = find(&j.build(), ids::CUDA_ERROR);
    assert_eq!(f.severity, Severity::Error);
    assert!(f.title.contains("not a memory failure"), "{}", f.title);
    assert!(f.fix.contains("CUDA_LAUNCH_BLOCKING=1"), "{}", f.fix);
    // A warning printed by a job that then ran (on the CPU) and exited 0: info only.
    let j = oom_job(
        &[
            "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old \
           (found version 11000).",
        ],
        0,
    );
    assert_eq!(find(&j.build(), ids::CUDA_ERROR).severity, Severity::Info);
    // Beside an out-of-memory error, the OOM is the finding.
    let j = oom_job(
        &[
            "RuntimeError: CUDA error: out of memory",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ],
        1,
    );
    assert_eq!(j.ids(), vec![ids::OUT_OF_MEMORY.to_string()]);
}
