//! Job shapes for `vramdoc run` and replays: healthy jobs that must raise nothing at
//! warn/error, and failures that must be named with their right cause and no wrong one.
//!
//! Three kinds of case, each with its source cited beside it:
//! - live: a workload (tests/it/corpus/workload.py, ctypes over the simulated libcuda.so) run
//!   under `vramdoc run` on a simulated box; the report's findings are scored;
//! - recorded (run/recorded.rs): a timeline too long (minutes to hours) or too fast for a test
//!   to run live, built sample by sample as the recorder takes them and fed to
//!   `vramdoc::diagnose::fingerprints`;
//! - replay: every variant of the five built-in scenarios (`vramdoc replay --all`), on a
//!   16 GiB and a 141 GiB box.
//!
//! `corpus::run::job_shapes` prints the confusion matrix and fails on any false warn/error
//! or missed cause: `scripts/test --test it corpus::run -- --nocapture`.

mod recorded;

use super::{assert_clean, findings_of, Outcome};
use crate::common::{fresh_box, simgpu_lib_dir, vramdoc, KillOnDrop};
use serde_json::Value;
use std::process::Stdio;

const WORKLOAD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/corpus/workload.py");
const GIB: u64 = 1 << 30;
/// A PyTorch-like caching allocator left with reserved but unallocated blocks (a, c freed
/// between live b and w) that together, not alone, hold the last request.
const FRAGMENTED: &[&str] = &[
    "ctx:0",
    "torch",
    "alloc:45%@w",
    "alloc:12%@a",
    "alloc:12%@b",
    "alloc:12%@c",
    "free:a",
    "free:c",
    "sleep:800",
    "alloc:20%@x",
];
const MIB: u64 = 1 << 20;

const OOM: &str = "out-of-memory";
const GROWTH: &str = "growth-without-release";
const FRAG: &str = "fragmentation";
const WATCHDOG: &str = "collective-timeout";
const HOST_OOM: &str = "host-oom-kill";
const HELD_BY_DESCRIPTOR: &str = "held-by-descriptor";

// ----------------------------------------------------------------------------------------
// Live: workloads under `vramdoc run`.

struct Live {
    case: &'static str,
    source: &'static str,
    spec: &'static str,
    actions: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    expected: &'static [&'static str],
}

/// `vramdoc run` of the workload on `spec` (or on the box `dir`), its report.
fn run_workload(spec: &str, dir: Option<&std::path::Path>, c: &Live) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run.json");
    // The job's (and vramdoc's) temporary directory, checked empty afterwards: a run leaves
    // nothing behind (issue 39 item 7: the `ddp` mode left its `mkdtemp`).
    let job_tmp = tmp.path().join("tmp");
    std::fs::create_dir(&job_tmp).unwrap();
    let mut cmd = vramdoc();
    cmd.env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .env("TMPDIR", &job_tmp);
    match dir {
        Some(d) => cmd.env("VRAMDOC_SIM_DIR", d),
        None => cmd.args(["--sim", spec]),
    };
    cmd.args([
        "run",
        "--period",
        "10ms",
        "--process-period",
        "100ms",
        "--out",
    ])
    .arg(&out)
    .arg("--")
    .args(["python3", WORKLOAD])
    .args(c.actions)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    for (k, v) in c.env {
        cmd.env(k, v);
    }
    let status = cmd.status().expect("run vramdoc");
    let left: Vec<String> = std::fs::read_dir(&job_tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "{}: left in TMPDIR: {left:?}", c.case);
    let bytes = std::fs::read(&out).unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{}: no report ({e}); vramdoc exited {status}; actions {:?}",
            c.case, c.actions
        )
    })
}

fn live_outcome(c: &Live, report: &Value) -> Outcome {
    Outcome::new(c.case, c.source, c.expected, findings_of(&report["run"]))
}

const LIVE: &[Live] = &[
    Live {
        case: "steady training, caching allocator at 60%",
        source: "PyTorch CUDA semantics: freed blocks stay reserved by the caching allocator \
                 (pytorch.org/docs/stable/notes/cuda.html)",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:35%@w",
            "alloc:20%@a",
            "free:a",
            "alloc:20%@a",
            "free:a",
            "alloc:20%@a",
            "free:a",
            "sleep:1500",
            "alloc:20%@a",
            "free:a",
            "exit:0",
        ],
        env: &[],
        expected: &[],
    },
    Live {
        case: "steady training, caching allocator at 95%",
        source: "as above; a cache grown to near full is the steady state (issue 15)",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:55%@w",
            "alloc:37%@a",
            "free:a",
            "alloc:37%@a",
            "free:a",
            "sleep:1500",
            "alloc:30%@a",
            "free:a",
            "alloc:37%@a",
            "free:a",
            "exit:0",
        ],
        env: &[],
        expected: &[],
    },
    Live {
        case: "warm-up growth then plateau",
        source: "cuDNN autotuning / variable first batches grow the cache, then it is reused \
                 (pytorch/pytorch#35901)",
        spec: "rtx3090",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:30%@w",
            "alloc:10%@a",
            "free:a",
            "sleep:300",
            "alloc:18%@a",
            "free:a",
            "sleep:300",
            "alloc:25%@a",
            "free:a",
            "sleep:300",
            "alloc:25%@a",
            "free:a",
            "alloc:12%@a",
            "free:a",
            "sleep:1500",
            "alloc:25%@a",
            "free:a",
            "exit:0",
        ],
        env: &[],
        expected: &[],
    },
    Live {
        case: "eval/train cycles with empty_cache",
        source: "torch.cuda.empty_cache() between phases returns the cache \
                 (pytorch.org/docs/stable/notes/cuda.html)",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "torch",
            "mark:train",
            "alloc:30%@w",
            "alloc:40%@a",
            "free:a",
            "sleep:400",
            "mark:eval",
            "empty_cache",
            "alloc:15%@e",
            "free:e",
            "sleep:400",
            "mark:train",
            "empty_cache",
            "alloc:40%@a",
            "free:a",
            "sleep:400",
            "mark:eval",
            "empty_cache",
            "alloc:15%@e",
            "free:e",
            "sleep:400",
            "exit:0",
        ],
        env: &[],
        expected: &[],
    },
    Live {
        case: "DDP on 2 GPUs, 0-byte peer listings",
        source: "pytorch/pytorch#64130 (every rank listed on every GPU with 0 MiB)",
        spec: "2x24GiB",
        actions: &["ddp:2:45%:30%:1500", "exit:0"],
        env: &[],
        expected: &[],
    },
    Live {
        case: "DDP on 8 GPUs, 0-byte peer listings",
        source: "pytorch/pytorch#64130; Lightning-AI/pytorch-lightning#4828",
        spec: "8xh100",
        actions: &["ddp:8:40%:35%:2000", "exit:0"],
        env: &[],
        expected: &[],
    },
    Live {
        case: "a model split over 4 GPUs in one process",
        source: "device_map=\"auto\" (huggingface accelerate big-model inference): one copy, \
                 split; shared FAILURES.md #4 is the doubled form",
        spec: "4xl4",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:30%@w0",
            "ctx:1",
            "alloc:30%@w1",
            "ctx:2",
            "alloc:30%@w2",
            "ctx:3",
            "alloc:25%@w3",
            "alloc:10%@a",
            "free:a",
            "sleep:1500",
            "exit:0",
        ],
        env: &[],
        expected: &[],
    },
    Live {
        case: "vLLM start at 0.9 that serves and exits",
        source: "vLLM claims gpu_memory_utilization x total up front (docs.vllm.ai, \
                 conserving_memory); shared FAILURES.md #5 is its failing form",
        spec: "l4",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:35%@w",
            "alloc:5%@p",
            "free:p",
            "empty_cache",
            "claim:0.9",
            "sleep:300",
            "alloc:2%@g",
            "free:g",
            "alloc:2%@g",
            "free:g",
            "sleep:1200",
            "alloc:2%@g",
            "free:g",
            "exit:0",
        ],
        env: &[],
        expected: &[],
    },
    Live {
        case: "first-step OOM with NCCL buffers",
        source: "NVIDIA/nccl#864 (communicators' buffers, GBs), NVIDIA/nccl#1685",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:50%@w",
            "sleep:1200",
            "raw",
            "alloc:7%@nccl",
            "torch",
            "sleep:1200",
            "alloc:8%@a",
            "alloc:8%@a",
            "alloc:8%@a",
            "alloc:8%@a",
            "alloc:8%@a",
            "alloc:8%@a",
        ],
        env: &[],
        expected: &[OOM],
    },
    Live {
        case: "batch too big after load",
        source: "issue 15 (a plain batch too big read as growth-without-release)",
        spec: "rtx4090",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:45%@w",
            "sleep:1200",
            "alloc:20%@a",
            "alloc:20%@a",
            "alloc:20%@a",
        ],
        env: &[],
        expected: &[OOM],
    },
    Live {
        case: "multi-size staircase ending in OOM, 300 ms phases",
        source: "shared FAILURES.md #2 (OneDiff multi-size OOM)",
        spec: "40GiB",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:30%@w",
            "sleep:400",
            "alloc:9%@s1",
            "free:s1",
            "sleep:300",
            "alloc:11%@s2",
            "free:s2",
            "sleep:300",
            "alloc:13%@s3",
            "free:s3",
            "sleep:300",
            "alloc:15%@s4",
            "free:s4",
            "sleep:300",
            "alloc:25%@s5",
        ],
        env: &[],
        // Through PyTorch's cache the earlier sizes' blocks are reserved but unallocated,
        // more than the request: fragmentation too ("cached and fragmented", FAILURES.md #2).
        expected: &[OOM, GROWTH, FRAG],
    },
    Live {
        case: "multi-size staircase ending in OOM, 2 s phases, marked",
        source: "shared FAILURES.md #2; `vramdoc mark` per size",
        spec: "a100",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:40%@w",
            "sleep:1000",
            "mark:1024x1024",
            "alloc:20%@s1",
            "free:s1",
            "sleep:2000",
            "mark:1024x1152",
            "alloc:23%@s2",
            "free:s2",
            "sleep:2000",
            "mark:1360x1536",
            "alloc:31%@s3",
        ],
        env: &[],
        // Through PyTorch's cache the earlier sizes' blocks are reserved but unallocated,
        // more than the request: fragmentation too ("cached and fragmented", FAILURES.md #2).
        expected: &[OOM, GROWTH, FRAG],
    },
    Live {
        case: "single spike OOM",
        source: "issue 15 (a single spike must be out-of-memory only)",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:40%@w",
            "alloc:10%@a",
            "free:a",
            "sleep:1500",
            "alloc:70%@spike",
        ],
        env: &[],
        expected: &[OOM],
    },
    Live {
        case: "fragmentation: reserved-unallocated covers the request",
        source: "pytorch/pytorch#29554; the numbers PyTorch 2.x prints (murong-xu/CADS#4)",
        spec: "24GiB",
        actions: FRAGMENTED,
        env: &[],
        expected: &[OOM, FRAG],
    },
    Live {
        case: "fragmentation with expandable_segments already set",
        source: "pytorch/pytorch#173049 (advice printed even when enabled)",
        spec: "24GiB",
        actions: FRAGMENTED,
        env: &[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")],
        expected: &[OOM, FRAG],
    },
    Live {
        case: "NCCL watchdog abort at high fill",
        source: "hiyouga/LlamaFactory#7396; huggingface/picotron_tutorial#6 (exitcode -6)",
        spec: "h100",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:60%@w",
            "alloc:30%@a",
            "free:a",
            "sleep:1500",
            "say:watchdog",
            "abort",
        ],
        env: &[],
        expected: &[WATCHDOG],
    },
    Live {
        case: "host OOM kill at high fill",
        source: "deepspeedai/DeepSpeed#4239 (-9: host RAM); xxayt/MGSV#2",
        spec: "h100",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:62%@w",
            "alloc:30%@a",
            "free:a",
            "sleep:1500",
            "kill9",
        ],
        env: &[],
        expected: &[HOST_OOM],
    },
    Live {
        case: "DataLoader worker killed by the OOM killer",
        source: "pytorch/pytorch#8976 (`DataLoader worker (pid N) is killed by signal: Killed.`)",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:70%@w",
            "alloc:20%@a",
            "free:a",
            "sleep:1200",
            "say:dataloader-killed",
            "exit:1",
        ],
        env: &[],
        expected: &[HOST_OOM],
    },
    Live {
        case: "NCCL 'Cuda failure out of memory'",
        source: "NVIDIA/TensorRT-LLM#1670; NVIDIA/nccl#1235",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "alloc:90%@w",
            "sleep:600",
            "say:nccl-oom",
            "exit:1",
        ],
        env: &[],
        expected: &[OOM],
    },
    Live {
        case: "cuBLAS handle allocation failure",
        source: "QwenLM/Qwen3#873",
        spec: "24GiB",
        actions: &["ctx:0", "alloc:93%@w", "sleep:600", "say:cublas", "exit:1"],
        env: &[],
        expected: &[OOM],
    },
    Live {
        case: "JAX RESOURCE_EXHAUSTED",
        source: "google-deepmind/alphafold#1023; sokrypton/ColabFold#65",
        spec: "24GiB",
        actions: &["ctx:0", "alloc:75%@w", "sleep:600", "say:jax-oom", "exit:1"],
        env: &[],
        expected: &[OOM],
    },
    Live {
        case: "vLLM V1 KV-cache start-up error",
        source: "vllm-project/vllm#34076",
        spec: "24GiB",
        actions: &["ctx:0", "alloc:60%@w", "sleep:600", "say:vllm-kv", "exit:1"],
        env: &[],
        expected: &[OOM],
    },
    Live {
        case: "DataLoader worker forked after CUDA init keeps the exited main process's memory",
        source: "pytorch/pytorch#5736 (memory not released after killing the main process; \
                 `lsof /dev/nvidia0` finds the DataLoader worker); NVIDIA/Megatron-LM#3684 \
                 (workers keep /dev/nvidia* descriptors after fork; `fuser -v /dev/nvidia*`); \
                 apache/mxnet#4242 (nvidia-smi lists the dead parent)",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:40%@w",
            "fork:8000",
            "sleep:300",
            "exit:0",
        ],
        env: &[],
        expected: &[HELD_BY_DESCRIPTOR],
    },
    Live {
        case: "DataLoader worker forked after CUDA init, joined before exit",
        source: "pytorch/pytorch#5736 (benign form: workers that end with the main process)",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:40%@w",
            "fork:200",
            "sleep:800",
            "exit:0",
        ],
        env: &[],
        expected: &[],
    },
    Live {
        case: "worker forked before CUDA init outlives the main process",
        source: "NVIDIA/Megatron-LM#3684 (a worker without /dev/nvidia* descriptors does not \
                 keep the memory: it returns when the rank exits)",
        spec: "24GiB",
        actions: &[
            "fork:6000",
            "ctx:0",
            "torch",
            "alloc:40%@w",
            "sleep:500",
            "exit:0",
        ],
        env: &[],
        expected: &[],
    },
    Live {
        case: "Java OutOfMemoryError beside a GPU job",
        source: "issue 15 (never Java's java.lang.OutOfMemoryError)",
        spec: "24GiB",
        actions: &["ctx:0", "alloc:50%@w", "sleep:600", "say:java", "exit:1"],
        env: &[],
        expected: &[],
    },
];

/// The job is a shell script: its training process is killed by SIGKILL and the shell exits
/// 137 (128 + 9), as `python train.py; exit $?` does.
fn shell_137_case() -> Outcome {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run.json");
    let script = format!(
        "python3 {WORKLOAD} ctx:0 torch alloc:60%@w alloc:30%@a free:a sleep:1200 kill9; exit $?"
    );
    let status = vramdoc()
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .args(["--sim", "a100", "run", "--period", "10ms", "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run vramdoc");
    assert_eq!(
        status.code(),
        Some(137),
        "the shell's status passes through"
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(&out).unwrap_or_default()).expect("report");
    Outcome::new(
        "host OOM kill under a shell (exit 137)",
        "deepspeedai/DeepSpeed#4239; a shell reports a child killed by SIGKILL as 128 + 9",
        &[HOST_OOM],
        findings_of(&report["run"]),
    )
}

/// A neighbour outside the job's tree ratchets up on the job's GPU; the job then fails to
/// allocate. Its own usage never grew: out-of-memory only (issue 15).
fn neighbour_case() -> Outcome {
    let c = Live {
        case: "a neighbour growing on the job's GPU",
        source: "issue 15 (a neighbour's growth on a shared GPU is not the job's)",
        spec: "24GiB",
        actions: &[
            "ctx:0",
            "torch",
            "alloc:30%@w",
            "alloc:10%@a",
            "free:a",
            "sleep:4500",
            "alloc:20%@x",
        ],
        env: &[],
        expected: &[OOM],
    };
    let dir = fresh_box(c.spec);
    let neighbour = std::process::Command::new("python3")
        .arg(WORKLOAD)
        .args([
            "ctx:0",
            "sleep:800",
            "alloc:9%",
            "sleep:700",
            "alloc:9%",
            "sleep:700",
            "alloc:9%",
            "sleep:700",
            "alloc:9%",
            "sleep:700",
            "alloc:9%",
            "sleep:60000",
        ])
        .env("VRAMDOC_SIM_DIR", dir.path())
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the neighbour");
    let _neighbour = KillOnDrop(neighbour);
    let report = run_workload(c.spec, Some(dir.path()), &c);
    live_outcome(&c, &report)
}

/// Run the live cases, a few at a time.
fn live_outcomes() -> Vec<Outcome> {
    let mut out = Vec::new();
    for chunk in LIVE.chunks(3) {
        let got: Vec<Outcome> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk
                .iter()
                .map(|c| s.spawn(move || live_outcome(c, &run_workload(c.spec, None, c))))
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("a live case panicked"))
                .collect()
        });
        out.extend(got);
    }
    out.push(neighbour_case());
    out.push(shell_137_case());
    out
}

// ----------------------------------------------------------------------------------------
// Replays: the five built-in scenarios, bug and fix variants.

/// What each replay variant must raise at warn/error (shared FAILURES.md #1-#5).
fn replay_expected(scenario: &str, variant: &str) -> Vec<&'static str> {
    if variant != "bug" {
        return Vec::new();
    }
    match scenario {
        "stray-cuda0" => vec!["stray-context"],
        "multi-size-oom" => vec![GROWTH, OOM],
        "sharded-release" => vec!["not-released", OOM],
        "double-load" => vec!["double-load", OOM],
        "overcommit" => vec!["overcommit", OOM],
        other => panic!("a scenario the corpus does not know: {other}"),
    }
}

fn replay_outcomes(spec: &str) -> Vec<Outcome> {
    let out = vramdoc()
        .args(["--sim", spec, "replay", "--all", "--json"])
        .stderr(Stdio::null())
        .output()
        .expect("run vramdoc replay");
    let report: Value = serde_json::from_slice(&out.stdout).expect("replay JSON");
    let runs = report["replay"]["runs"].as_array().expect("runs");
    assert!(runs.len() >= 10, "every variant of the five scenarios ran");
    runs.iter()
        .map(|r| {
            let (scn, var) = (
                r["scenario"].as_str().unwrap_or(""),
                r["variant"].as_str().unwrap_or(""),
            );
            Outcome::new(
                &format!("replay {scn}/{var} on {spec}"),
                r["source"].as_str().unwrap_or(""),
                &replay_expected(scn, var),
                findings_of(r),
            )
        })
        .collect()
}

#[test]
fn job_shapes() {
    let mut outcomes = live_outcomes();
    outcomes.extend(recorded::recorded_outcomes());
    for spec in ["2x16GiB", "2xh200"] {
        outcomes.extend(replay_outcomes(spec));
    }
    assert_clean("run (vramdoc run, replays)", &outcomes);
}
