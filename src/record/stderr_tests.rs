//! The error-line parser on lines copied from the issues cited beside each (table-driven),
//! the torchrun exit table, and the bounded, redacted tail.

use super::*;
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn gib(x: f64) -> u64 {
    (x * GIB as f64).round() as u64
}

fn mib(x: f64) -> u64 {
    (x * MIB as f64).round() as u64
}

/// (source, line, kind, device, requested)
type Row = (
    &'static str,
    &'static str,
    RunErrorKind,
    Option<u32>,
    Option<u64>,
);

#[test]
fn recognised_lines_table() {
    let rows: Vec<Row> = vec![
        (
            "pytorch/pytorch#59778 (1.x)",
            "RuntimeError: CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB \
             total capacity; 781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved \
             in total by PyTorch)",
            RunErrorKind::CudaOom,
            Some(0),
            Some(gib(2.26)),
        ),
        (
            "pytorch/pytorch#16417 (1.x, `cached`)",
            "RuntimeError: CUDA out of memory. Tried to allocate 1024.00 KiB (GPU 3; 11.17 \
             GiB total capacity; 10.90 GiB already allocated; 576.00 KiB free; 30.96 MiB cached)",
            RunErrorKind::CudaOom,
            Some(3),
            Some(MIB),
        ),
        (
            "murong-xu/CADS#4 (2.x)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has \
             a total capacity of 31.47 GiB of which 12.73 GiB is free. Including non-PyTorch \
             memory, this process has 18.73 GiB memory in use. Of the allocated memory 9.08 GiB \
             is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but unallocated. If \
             reserved but unallocated memory is large try setting \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
             documentation for Memory Management  \
             (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            RunErrorKind::CudaOom,
            Some(0),
            Some(gib(22.78)),
        ),
        (
            "PyTorch 2.1 (`capacty` typo, as users pasted it)",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB. GPU \
             0 has a total capacty of 14.75 GiB of which 11.06 MiB is free. Process 3258 has \
             14.73 GiB memory in use. Of the allocated memory 14.04 GiB is allocated by PyTorch, \
             and 509.85 MiB is reserved by PyTorch but unallocated.",
            RunErrorKind::CudaOom,
            Some(0),
            Some(mib(224.0)),
        ),
        (
            "driver",
            "RuntimeError: CUDA error: out of memory",
            RunErrorKind::CudaErrorOom,
            None,
            None,
        ),
        (
            "shared FAILURES.md #5 (WeClone on vLLM)",
            "RuntimeError: CUDA error: unknown error",
            RunErrorKind::CudaUnknownError,
            None,
            None,
        ),
        (
            "NVIDIA/TensorRT-LLM#1670",
            "VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'",
            RunErrorKind::NcclOom,
            Some(2),
            None,
        ),
        (
            "NVIDIA/nccl#1235",
            "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of \
             memory'",
            RunErrorKind::NcclOom,
            Some(3),
            None,
        ),
        (
            "QwenLM/Qwen3#873",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling \
             `cublasCreate(handle)`",
            RunErrorKind::CublasAllocFailed,
            None,
            None,
        ),
        (
            "tensorflow/tensorflow#7072",
            "E c:\\tf_jenkins\\stream_executor\\cuda\\cuda_blas.cc:372] failed to create cublas \
             handle: CUBLAS_STATUS_ALLOC_FAILED",
            RunErrorKind::CublasAllocFailed,
            None,
            None,
        ),
        (
            "google-deepmind/alphafold#1023",
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while \
             trying to allocate 7406166528 bytes.",
            RunErrorKind::JaxOom,
            None,
            Some(7_406_166_528),
        ),
        (
            "jax-ml/jax#4994 (older jaxlib)",
            "RuntimeError: Resource exhausted: Out of memory while trying to allocate 24 bytes.",
            RunErrorKind::JaxOom,
            None,
            Some(24),
        ),
        (
            "vllm-project/vllm#34076 (V1, `models's`)",
            "(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the \
             models's max seq len (262144), (24.0 GiB KV cache is needed, which is larger than \
             the available KV cache memory (3.18 GiB). Based on the available memory, the \
             estimated maximum model length is 34736. Try increasing `gpu_memory_utilization` \
             or decreasing `max_model_len` when initializing the engine.",
            RunErrorKind::VllmKvCache,
            None,
            Some(gib(24.0)),
        ),
        (
            "SergiioB/intel-arc-pro-b70-inference-cookbook#4 (V1, `model's`)",
            "(EngineCore pid=316) ValueError: To serve at least one request with the model's max \
             seq len (100000), (4.26 GiB KV cache is needed, which is larger than the available \
             KV cache memory (4.25 GiB).",
            RunErrorKind::VllmKvCache,
            None,
            Some(gib(4.26)),
        ),
        (
            "vllm-project/vllm#2418 (V0)",
            "ValueError: The model's max seq len (4096) is larger than the maximum number of \
             tokens that can be stored in KV cache (3664). Try increasing \
             `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
            RunErrorKind::VllmKvCache,
            None,
            None,
        ),
        (
            "vllm-project/vllm#20305",
            "ValueError: Free memory on device (59.32/79.15 GiB) on startup is less than \
             desired GPU memory utilization (0.9, 71.24 GiB). Decrease GPU memory utilization \
             or reduce GPU memory used by other processes.",
            RunErrorKind::VllmFreeMemory,
            None,
            Some(gib(71.24)),
        ),
        (
            "kvcached#29",
            "free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than desired \
             GPU memory utilization (0.9, 19.84 GiB)",
            RunErrorKind::VllmFreeMemory,
            Some(1),
            Some(gib(19.84)),
        ),
        (
            "vllm V0 profile",
            "ValueError: No available memory for the cache blocks. Try increasing \
             `gpu_memory_utilization` when initializing the engine.",
            RunErrorKind::VllmNoCacheBlocks,
            None,
            None,
        ),
        (
            "hiyouga/LlamaFactory#7396",
            "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught \
             collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, \
             NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 \
             milliseconds before timing out.",
            RunErrorKind::NcclWatchdog,
            None,
            None,
        ),
    ];
    for (src, line, kind, device, requested) in rows {
        let e = parse_line(line).unwrap_or_else(|| panic!("{src}: not recognised"));
        // The watcher's pre-filter lets every recognised line through.
        assert_eq!(StderrWatcher::new().line(line).as_ref(), Some(&e), "{src}");
        assert_eq!(e.kind, kind, "{src}");
        assert_eq!(e.device, device, "{src}");
        assert_eq!(e.requested, requested, "{src}");
        assert!(e.line.chars().count() <= LINE_CHARS, "{src}");
        // The kept line parses to the same numbers (the diagnosis re-reads it).
        assert_eq!(
            parse_line(&e.line).map(|k| (k.kind, k.detail)),
            Some((e.kind.clone(), e.detail.clone())),
            "{src}"
        );
        let oom = kind.is_out_of_memory();
        assert_eq!(e.error_kind() == ErrorKind::OutOfMemory, oom, "{src}");
    }
}

#[test]
fn lines_that_are_not_gpu_memory_failures() {
    for l in [
        // Java's heap, not a GPU (never an out-of-memory finding).
        "Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space",
        "java.lang.OutOfMemoryError: GC overhead limit exceeded",
        "MemoryError",
        "epoch 3: loss 0.25",
        "NCCL INFO Channel 00/1 : 0[0] -> 2[2] via P2P/CUMEM",
        "",
    ] {
        assert!(parse_line(l).is_none(), "{l}");
    }
    // pytorch/pytorch#8976, pytorch/pytorch#4507.
    for (l, signal) in [
        (
            "RuntimeError: DataLoader worker (pid 1817) is killed by signal: Killed. ",
            Some(9),
        ),
        (
            "RuntimeError: DataLoader worker (pid 23616) is killed by signal: Terminated.",
            Some(15),
        ),
        (
            "RuntimeError: DataLoader worker (pid 25902) is killed by signal: Segmentation fault",
            Some(11),
        ),
        (
            "DataLoader worker (pid 7) is killed by signal: Unknown signal 99.",
            None,
        ),
    ] {
        let e = parse_line(l).unwrap();
        assert_eq!(e.kind, RunErrorKind::WorkerKilled, "{l}");
        assert_eq!(
            e.error_kind(),
            signal.map_or(ErrorKind::Other, |signal| ErrorKind::KilledBySignal {
                signal
            }),
            "{l}"
        );
    }
    let w =
        parse_line("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(...)").unwrap();
    assert_eq!(w.error_kind(), ErrorKind::CollectiveTimeout);
    // Where the timeline marks them: only allocation failures as `oom`.
    use crate::model::MarkerKind;
    assert_eq!(w.kind.marker(), MarkerKind::Error);
    assert_eq!(RunErrorKind::WorkerKilled.marker(), MarkerKind::Error);
    assert_eq!(RunErrorKind::JaxOom.marker(), MarkerKind::Oom);
}

#[test]
fn pytorch_2x_numbers_in_full() {
    // murong-xu/CADS#4: 9.35 GiB reserved-unallocated < 22.78 GiB requested.
    let l = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has \
             a total capacity of 31.47 GiB of which 12.73 GiB is free. Including non-PyTorch \
             memory, this process has 18.73 GiB memory in use. Of the allocated memory 9.08 GiB \
             is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but unallocated. If \
             reserved but unallocated memory is large try setting \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";
    let e = parse_line(l).unwrap();
    let d = e.detail.clone().unwrap();
    assert_eq!(d.requested, Some(gib(22.78)));
    assert_eq!(d.total, Some(gib(31.47)));
    assert_eq!(d.free, Some(gib(12.73)));
    assert_eq!(d.process_in_use, Some(gib(18.73)));
    assert_eq!(d.allocated, Some(gib(9.08)));
    assert_eq!(d.reserved_unallocated, Some(gib(9.35)));
    assert_eq!(d.non_pytorch(), Some(gib(18.73) - gib(9.08) - gib(9.35)));
    assert_eq!(
        d.other_processes(),
        Some(gib(31.47) - gib(12.73) - gib(18.73))
    );
    assert!(
        !e.line.contains("If reserved"),
        "PyTorch's advice is dropped"
    );

    // kaito-project/kaito#976: private pools, a `Process N has` entry, no `this process`.
    let l = "ERROR 04-01 23:46:56 [engine.py:160] torch.OutOfMemoryError: CUDA out of memory. \
             Tried to allocate 546.00 MiB. GPU 0 has a total capacity of 15.77 GiB of which \
             514.19 MiB is free. Process 562167 has 15.25 GiB memory in use. Of the allocated \
             memory 13.73 GiB is allocated by PyTorch, with 46.00 MiB allocated in private pools \
             (e.g., CUDA Graphs), and 736.86 MiB is reserved by PyTorch but unallocated.";
    let d = parse_line(l).unwrap().detail.unwrap();
    assert_eq!(d.listed_processes, vec![(562167, gib(15.25))]);
    assert_eq!(d.allocated, Some(gib(13.73)));
    assert_eq!(d.reserved_unallocated, Some(mib(736.86)));
    assert_eq!((d.process_in_use, d.non_pytorch()), (None, None));

    // pytorch/pytorch#126766: a truncated message keeps what it has.
    let e = parse_line("OutOfMemoryError: CUDA out of memory. Tried to allocate 3725.29 GiB. GPU")
        .unwrap();
    assert_eq!(e.requested, Some(gib(3725.29)));
    assert_eq!(e.device, None);
}

#[test]
fn pytorch_1x_numbers() {
    let l = "RuntimeError: CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB \
             total capacity; 781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved \
             in total by PyTorch) If reserved memory is >> allocated memory try setting \
             max_split_size_mb to avoid fragmentation.";
    let e = parse_line(l).unwrap();
    let d = e.detail.unwrap();
    assert_eq!(d.total, Some(gib(6.0)));
    assert_eq!(d.free, Some(gib(3.03)));
    assert_eq!(d.allocated, Some(mib(781.59)));
    assert_eq!(d.reserved_unallocated, Some(gib(1.24) - mib(781.59)));
    assert_eq!(d.process_in_use, None);
    assert!(!e.line.contains("max_split_size_mb"));
}

#[test]
fn a_long_pytorch_line_keeps_its_numbers_within_the_cut() {
    let procs: String = (0..6)
        .map(|i| format!("Process {} has 1.00 GiB memory in use. ", 100 + i))
        .collect();
    let l = format!(
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU \
         3 has a total capacity of 79.15 GiB of which 5.75 MiB is free. {procs}Including \
         non-PyTorch memory, this process has 73.14 GiB memory in use. Of the allocated memory \
         70.50 GiB is allocated by PyTorch, and 1.12 GiB is reserved by PyTorch but unallocated. \
         If reserved but unallocated memory is large try setting \
         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
         documentation for Memory Management  \
         (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    );
    let e = parse_line(&l).unwrap();
    let again = oom_detail(&e.line).unwrap();
    assert_eq!(again.reserved_unallocated, Some(gib(1.12)));
    assert_eq!(again.process_in_use, Some(gib(73.14)));
    // The other processes' entries go last: the cut drops those first.
    let full = oom_detail(&l).unwrap();
    assert_eq!(full.listed_processes.len(), 6);
    assert!(full.listed_processes.starts_with(&again.listed_processes));
    assert_eq!(e.device, Some(3));
}

#[test]
fn torchrun_exit_table() {
    let table = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n\
============================================================\n\
train.py FAILED\n\
------------------------------------------------------------\n\
Failures:\n\
  <NO_OTHER_FAILURES>\n\
------------------------------------------------------------\n\
Root Cause (first observed failure):\n\
[0]:\n\
  time      : 2024-05-04_12:00:00\n\
  host      : node1\n\
  rank      : 1 (local_rank: 1)\n\
  exitcode  : -9 (pid: 4242)\n\
  error_file: <N/A>\n\
  traceback : Signal 9 (SIGKILL) received by PID 4242\n\
============================================================";
    let mut w = StderrWatcher::new();
    let found: Vec<ParsedError> = table.lines().filter_map(|l| w.line(l)).collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].kind, RunErrorKind::ChildFailed);
    assert_eq!(found[1].kind, RunErrorKind::ChildExit);
    assert_eq!(
        found[1].error_kind(),
        ErrorKind::KilledBySignal { signal: 9 }
    );
    assert_eq!(found[0].error_kind(), ErrorKind::Other);
    assert_eq!(found[1].line, "torchrun rank 1: exitcode -9 (pid 4242)");
    assert!(w.line("exitcode  : 3").is_none(), "outside a table");
}

#[test]
fn tail_is_bounded_cut_and_redacted() {
    let mut w = StderrWatcher::new();
    for i in 0..100 {
        w.line(&format!("line {i}"));
    }
    w.line(&"x".repeat(2000));
    w.line("connecting with --token=hunter2hunter2 \x1b[31m");
    let t = w.tail();
    assert_eq!(t.len(), TAIL_LINES);
    assert_eq!(t[0], "line 62");
    assert_eq!(t[TAIL_LINES - 2].len(), LINE_CHARS);
    assert!(
        !t[TAIL_LINES - 1].contains("hunter2"),
        "{}",
        t[TAIL_LINES - 1]
    );
    assert!(!t[TAIL_LINES - 1].contains('\x1b'));
}

proptest::proptest! {
    /// Any line, any bytes: the parser answers (or not) and never panics; what it keeps is
    /// one line within the cut.
    #[test]
    fn any_line_parses_without_panic(
        l in "(CUDA out of memory\\. Tried to allocate |GPU 0 has a total capac|Process |this process has |of which |is killed by signal: |DataLoader worker|NCCL WARN Cuda failure 'out of memory'|RESOURCE_EXHAUSTED: Out of memory while trying to allocate |[0-9. ]{0,8}(GiB|MiB|bytes)?|\\PC{0,12}){0,12}"
    ) {
        if let Some(e) = parse_line(&l) {
            proptest::prop_assert!(e.line.chars().count() <= LINE_CHARS);
            proptest::prop_assert!(!e.line.contains('\n'));
        }
        let _ = oom_detail(&l);
    }
}

/// A private key printed over several lines (a debug dump of a config, `cat key.pem` in a
/// launch script) reaches the tail as redacted lines only; lines after it are kept again,
/// and an unterminated header does not swallow the rest of the log.
#[test]
fn a_private_key_over_several_lines_never_reaches_the_tail() {
    let mut w = StderrWatcher::new();
    let lines = [
        "loading credentials",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
        "QyNTUxOQAAACDx4SecretKeyBodyLine2xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxAAAA",
        "-----END OPENSSH PRIVATE KEY-----",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ];
    let mut found = Vec::new();
    for l in lines {
        found.extend(w.line(l));
    }
    let tail = w.tail().join("\n");
    assert!(!tail.contains("b3BlbnNzaC1rZXkt"), "{tail}");
    assert!(!tail.contains("SecretKeyBody"), "{tail}");
    assert!(tail.contains("loading credentials"), "{tail}");
    assert_eq!(found.len(), 1, "the OOM line after the key is still read");
    assert!(tail.ends_with("Tried to allocate 2.00 GiB"), "{tail}");

    let mut w = StderrWatcher::new();
    w.line("-----BEGIN RSA PRIVATE KEY-----");
    for i in 0..300 {
        w.line(&format!("log line {i}"));
    }
    assert!(
        w.tail().iter().any(|l| l == "log line 299"),
        "kept again after the cap"
    );
}

#[test]
fn nccl_last_error_block_is_read_as_one_error() {
    // pytorch/pytorch#170045 (NCCLUtils.cpp prints NCCL's last error on the lines after).
    let mut w = StderrWatcher::new();
    let lines = [
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/\
         NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL \
         version 2.26.2",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "Last error:",
        "Cuda failure 2 'out of memory'",
    ];
    let found: Vec<ParsedError> = lines.iter().filter_map(|l| w.line(l)).collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, RunErrorKind::NcclOom);
    assert!(
        found[0].line.contains("DistBackendError"),
        "{}",
        found[0].line
    );
    assert!(
        found[0].line.contains("Last error: Cuda failure 2"),
        "{}",
        found[0].line
    );
    // nccl#1410: every line prefixed by the rank; another CUDA error is not memory.
    let mut w = StderrWatcher::new();
    let found: Vec<ParsedError> = [
        "[rank7]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:275, \
         unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        "[rank7]: ncclUnhandledCudaError: Call to CUDA function failed.",
        "[rank7]: Last error:",
        "[rank7]: Cuda failure 1 'invalid argument'",
    ]
    .iter()
    .filter_map(|l| w.line(l))
    .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].error_kind(), ErrorKind::CudaFault);
    // On one line (the exception's message as one string), the calloc size is kept.
    let mut w = StderrWatcher::new();
    let e = w
        .line(
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, \
             unhandled cuda error, NCCL version 2.19.3 ncclUnhandledCudaError: Call to CUDA \
             function failed. Last error: Failed to CUDA calloc 10485760 bytes",
        )
        .unwrap();
    assert_eq!(
        (e.kind, e.requested),
        (RunErrorKind::NcclOom, Some(10_485_760))
    );
    // The block is bounded: a `Last error:` far after it is not read as its end.
    let mut w = StderrWatcher::new();
    w.line("ncclUnhandledCudaError: Call to CUDA function failed.");
    for _ in 0..10 {
        assert!(w.line("step 1 loss 0.5").is_none());
    }
    assert!(w.line("Last error:").is_none());
    assert!(w.line("all good").is_none());
}

#[test]
fn torchrun_rank_failures_outside_the_table() {
    // hpcaitech/ColossalAI#3514, lzhxmu/CPPO#6.
    let e = parse_line(
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 \
         (pid: 812917) of binary: /data/bin/python",
    )
    .unwrap();
    assert_eq!(e.error_kind(), ErrorKind::KilledBySignal { signal: 9 });
    let e = parse_line("  traceback : Signal 9 (SIGKILL) received by PID 14750").unwrap();
    assert_eq!(e.error_kind(), ErrorKind::KilledBySignal { signal: 9 });
    let e = parse_line("  traceback : Signal 6 (SIGABRT) received by PID 14750").unwrap();
    assert_eq!(e.error_kind(), ErrorKind::KilledBySignal { signal: 6 });
    let e = parse_line(
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 \
         (pid: 1622990) of binary: /bin/python",
    )
    .unwrap();
    assert_eq!(e.error_kind(), ErrorKind::Other);
    assert!(parse_line("    raise ChildFailedError(").is_none());
}

#[test]
fn pre_1_4_cached_is_the_unallocated_part() {
    // facebookresearch/fairseq#869; THCCachingAllocator printed `amount_cached -
    // amount_allocated` as `cached` (pytorch v1.0 c10/cuda/CUDACachingAllocator.cpp).
    let d = oom_detail(
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.93 GiB total capacity; 7.20 \
         GiB already allocated; 17.56 MiB free; 46.25 MiB cached)",
    )
    .unwrap();
    assert_eq!(d.reserved_unallocated, Some(mib(46.25)));
    assert_eq!(d.allocated, Some(gib(7.20)));
}

#[test]
fn tensorflow_bfc_stats_go_with_the_next_oom() {
    // zzw922cn/Automatic_Speech_Recognition#78.
    let mut w = StderrWatcher::new();
    let lines = [
        "2018-06-08 17:26:00.908082: I tensorflow/core/common_runtime/bfc_allocator.cc:680] Stats: ",
        "Limit:                 10625279591",
        "InUse:                  7350513920",
        "MaxInUse:               7464792320",
        "2018-06-08 17:26:00.908130: W tensorflow/core/framework/op_kernel.cc:1202] OP_REQUIRES \
         failed at tile_ops.cc:123 : Resource exhausted: OOM when allocating tensor with \
         shape[16,1,892800,8,4,2,2] and type float on \
         /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    ];
    let found: Vec<ParsedError> = lines.iter().filter_map(|l| w.line(l)).collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        recognise::bfc_stats(&found[0].line),
        Some((10_625_279_591, Some(7_350_513_920)))
    );
    assert_eq!(found[0].kind, RunErrorKind::TfOom);
    assert_eq!(found[0].device, Some(0));
}

/// A failure line hard-wrapped at a fixed width (a terminal's capture, a CI log viewer's
/// download) is read once from its two halves; the halves alone recognise nothing.
#[test]
fn a_line_hard_wrapped_at_a_fixed_width_is_read_once() {
    // ggml-org/llama.cpp#20431's line, split in the middle of its phrase.
    let whole = "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device \
                 0: cudaMalloc failed: out of memory";
    let (a, b) = whole.split_at(whole.find("failed").unwrap_or(0));
    assert!(
        parse_line(a).is_none() && parse_line(b).is_none(),
        "{a} | {b}"
    );
    let mut w = StderrWatcher::new();
    let mut got: Vec<ParsedError> = Vec::new();
    for l in ["loading model", a, b, "next line", "and another one"] {
        got.extend(w.line(l));
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].kind, RunErrorKind::GgmlOom);
    assert_eq!(got[0].requested, Some(mib(144_817.04)));
    assert_eq!(got[0].device, Some(0));
    // The tail keeps both lines as printed.
    assert_eq!(w.tail().len(), 5);
}

/// A line that is recognised on its own is never joined with the next one, a joined pair
/// is never joined again, and a short line (not at a wrap width) is not joined at all.
#[test]
fn joining_is_bounded_and_never_reads_a_line_twice() {
    let oom = "RuntimeError: CUDA error: out of memory on a line long enough to be wrapped ok";
    assert!(oom.chars().count() >= WRAP_MIN_CHARS);
    let mut w = StderrWatcher::new();
    let mut n = 0;
    for l in [oom, "CUDA error: out of memory", oom] {
        n += usize::from(w.line(l).is_some());
    }
    assert_eq!(n, 3, "each line once");
    // Short first half: not a wrapped line, so not joined.
    let mut w = StderrWatcher::new();
    assert!(w.line("RuntimeError: CUDA error: out of").is_none());
    assert!(w.line(" memory").is_none());
    // Three lines of one phrase: only two are ever joined.
    let head = format!("{}CUDA error: out", "x".repeat(WRAP_MIN_CHARS));
    let mut w = StderrWatcher::new();
    assert!(w.line(&head).is_none());
    let e = w.line(" of memory").expect("the two halves");
    assert_eq!(e.kind, RunErrorKind::CudaErrorOom);
    assert!(
        w.line(" of memory").is_none(),
        "the consumed half is not joined again"
    );
}
