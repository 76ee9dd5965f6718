//! Job shapes for `vramdoc run` and replays: healthy jobs that must raise nothing at
//! warn/error, and failures that must be named with their right cause and no wrong one.
//!
//! Three kinds of case, each with its source cited beside it:
//! - live: a workload (tests/it/corpus/workload.py, ctypes over the simulated libcuda.so) run
//!   under `vramdoc run` on a simulated box; the report's findings are scored;
//! - recorded: a timeline too long (minutes to hours) or too fast for a test to run live,
//!   built sample by sample as the recorder takes them and fed to
//!   `vramdoc::diagnose::fingerprints`;
//! - replay: every variant of the five built-in scenarios (`vramdoc replay --all`), on a
//!   16 GiB and a 141 GiB box.
//!
//! `corpus::run::job_shapes` prints the confusion matrix and fails on any false warn/error
//! or missed cause: `scripts/test --test it corpus::run -- --nocapture`.

use super::{assert_clean, findings_of, Outcome};
use crate::common::{fresh_box, simgpu_lib_dir, vramdoc, KillOnDrop};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Stdio;
use vramdoc::diagnose::{
    fingerprints, ErrorEvent, ErrorKind, JobExit, RecordedDevice, RecordedProcess, Recording,
    TimelineThresholds,
};
use vramdoc::model::{DeviceSeries, Marker, ProcessSample, Timeline};

const WORKLOAD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/corpus/workload.py");
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

const OOM: &str = "out-of-memory";
const GROWTH: &str = "growth-without-release";
const FRAG: &str = "fragmentation";
const WATCHDOG: &str = "collective-timeout";
const HOST_OOM: &str = "host-oom-kill";

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
    let mut cmd = vramdoc();
    cmd.env("LD_LIBRARY_PATH", simgpu_lib_dir());
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
        actions: &[
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
        ],
        env: &[],
        expected: &[OOM, FRAG],
    },
    Live {
        case: "fragmentation with expandable_segments already set",
        source: "pytorch/pytorch#173049 (advice printed even when enabled)",
        spec: "24GiB",
        actions: &[
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
        ],
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
        case: "Java OutOfMemoryError beside a GPU job",
        source: "issue 15 (never Java's java.lang.OutOfMemoryError)",
        spec: "24GiB",
        actions: &["ctx:0", "alloc:50%@w", "sleep:600", "say:java", "exit:1"],
        env: &[],
        expected: &[],
    },
];

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
    out
}

// ----------------------------------------------------------------------------------------
// Recorded: timelines too long or too fast to run live, sampled as the recorder samples.

/// A recorded job: usage changes of processes on devices, sampled every `period` ms (device
/// memory) and `proc_period` ms (per-process lists, 0-byte entries included).
struct Shape {
    totals: Vec<u64>,
    period: f64,
    proc_period: f64,
    end: f64,
    /// (t, pid, device, new usage): `None` usage is a 0-byte peer listing.
    changes: Vec<(f64, u32, u32, Option<u64>)>,
    /// The job's processes, with their exit times.
    tree: Vec<(u32, Option<f64>)>,
    markers: Vec<Marker>,
    errors: Vec<ErrorEvent>,
    exit: Option<JobExit>,
    /// Allocator and driver noise: readings wobble by up to this many bytes.
    jitter: u64,
}

impl Shape {
    fn new(totals: &[u64], end: f64, period: f64) -> Shape {
        Shape {
            totals: totals.to_vec(),
            period,
            proc_period: (period * 5.0).max(250.0),
            end,
            changes: Vec::new(),
            tree: vec![(10, None)],
            markers: Vec::new(),
            errors: Vec::new(),
            exit: Some(JobExit::Code(0)),
            jitter: 0,
        }
    }

    fn set(&mut self, t: f64, pid: u32, dev: u32, used: u64) -> &mut Self {
        self.changes.push((t, pid, dev, Some(used)));
        self
    }

    fn peer(&mut self, t: f64, pid: u32, dev: u32) -> &mut Self {
        self.changes.push((t, pid, dev, None));
        self
    }

    fn error(&mut self, t: f64, kind: ErrorKind, line: &str, requested: Option<u64>) {
        self.errors.push(ErrorEvent {
            t_ms: t,
            kind,
            device: None,
            pid: None,
            line: line.into(),
            requested_bytes: requested,
        });
    }

    fn oom(&mut self, t: f64, requested: u64) {
        let line = format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {:.2} GiB.",
            requested as f64 / GIB as f64
        );
        self.error(t, ErrorKind::OutOfMemory, &line, Some(requested));
        self.exit = Some(JobExit::Code(1));
    }

    fn build(&self) -> Recording {
        let mut changes = self.changes.clone();
        for (pid, exit) in &self.tree {
            if let Some(t) = exit {
                for d in 0..self.totals.len() as u32 {
                    changes.push((*t, *pid, d, Some(0)));
                }
            }
        }
        changes.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut usage: BTreeMap<(u32, u32), Option<u64>> = BTreeMap::new();
        let mut series: Vec<Vec<(f64, u64)>> = vec![Vec::new(); self.totals.len()];
        let mut procs = Vec::new();
        let (mut k, mut t, mut next_proc) = (0, 0.0, 0.0);
        while t <= self.end {
            while k < changes.len() && changes[k].0 <= t {
                let (_, pid, dev, used) = changes[k];
                usage.insert((pid, dev), used);
                k += 1;
            }
            for (d, s) in series.iter_mut().enumerate() {
                let held: u64 = usage
                    .iter()
                    .filter(|((_, dv), _)| *dv as usize == d)
                    .filter_map(|(_, u)| *u)
                    .sum();
                let wobble = if self.jitter > 0 {
                    (t as u64).wrapping_mul(2_654_435_761) % self.jitter
                } else {
                    0
                };
                s.push((t, (held + wobble).min(self.totals[d])));
            }
            if t >= next_proc {
                next_proc += self.proc_period;
                for ((pid, dev), u) in &usage {
                    if u.is_none_or(|u| u > 0) {
                        procs.push(ProcessSample {
                            t_ms: t,
                            device: *dev,
                            pid: *pid,
                            used: Some(u.unwrap_or(0)),
                        });
                    }
                }
            }
            t += self.period;
        }
        let tree: Vec<u32> = self.tree.iter().map(|(p, _)| *p).collect();
        let mut pids: Vec<u32> = self.changes.iter().map(|c| c.1).collect();
        pids.sort_unstable();
        pids.dedup();
        Recording {
            devices: (0..self.totals.len() as u32)
                .map(|i| RecordedDevice {
                    index: i,
                    uuid: format!("GPU-{i:08x}-corp-0000-0000-000000000000"),
                    name: "Recorded GPU".into(),
                    total: self.totals[i as usize],
                })
                .collect(),
            timeline: Timeline {
                devices: series
                    .into_iter()
                    .enumerate()
                    .map(|(i, samples)| DeviceSeries {
                        device: i as u32,
                        total: self.totals[i],
                        samples,
                    })
                    .collect(),
                markers: self.markers.clone(),
                processes: procs,
                gaps: Vec::new(),
            },
            processes: pids
                .iter()
                .map(|pid| RecordedProcess {
                    pid: *pid,
                    name: Some(format!("python{pid}")),
                    first_seen_ms: 0.0,
                    exit_ms: self.tree.iter().find(|(p, _)| p == pid).and_then(|x| x.1),
                    cuda_visible_devices: None,
                    cuda_device_order: None,
                    nvidia_visible_devices: None,
                    pytorch_cuda_alloc_conf: None,
                    in_tree: tree.contains(pid),
                })
                .collect(),
            errors: self.errors.clone(),
            end_ms: self.end,
            exit: self.exit,
        }
    }

    fn outcome(&self, case: &str, source: &str, expected: &[&str]) -> Outcome {
        let found = fingerprints(&self.build(), &TimelineThresholds::default())
            .into_iter()
            .map(|f| (f.id, f.severity.as_str().to_string()))
            .collect();
        Outcome::new(case, source, expected, found)
    }
}

fn frac(total: u64, f: f64) -> u64 {
    (total as f64 * f) as u64
}

/// Context, then weights loaded over `ms`, on every device of `pids`.
fn load(s: &mut Shape, pid: u32, dev: u32, weights: u64, ms: f64) -> u64 {
    s.set(200.0, pid, dev, 500 * MIB);
    let n = 20;
    for i in 1..=n {
        let t = 1000.0 + ms * i as f64 / n as f64;
        s.set(t, pid, dev, 500 * MIB + weights * i / n);
    }
    500 * MIB + weights
}

/// A staircase after the load: one held step per `tempo` ms, then the next step fails.
fn staircase(total: u64, steps: &[f64], tempo: f64, period: f64) -> Shape {
    let start = 8000.0;
    let end = start + tempo * (steps.len() as f64 + 1.0) + 3000.0;
    let mut s = Shape::new(&[total], end, period);
    let mut level = load(&mut s, 10, 0, frac(total, 0.3), 4000.0);
    for (k, f) in steps.iter().enumerate() {
        level += frac(total, *f);
        s.set(start + tempo * k as f64, 10, 0, level);
    }
    let next = frac(total, steps.last().copied().unwrap_or(0.1) * 1.2);
    s.oom(start + tempo * steps.len() as f64 + 10.0, next);
    s.tree = vec![(10, Some(start + tempo * steps.len() as f64 + 500.0))];
    s
}

/// Training at `fill` for `ms`: load, a first iteration the cache keeps, flat steps.
fn training(total: u64, fill: f64, ms: f64, period: f64) -> Shape {
    let mut s = Shape::new(&[total], ms + 5000.0, period);
    let w = load(&mut s, 10, 0, frac(total, fill * 0.6), 5000.0);
    s.set(8000.0, 10, 0, w + frac(total, fill * 0.25));
    s.set(9500.0, 10, 0, frac(total, fill));
    s.jitter = 64 * MIB;
    s.tree = vec![(10, Some(ms))];
    s
}

fn recorded_outcomes() -> Vec<Outcome> {
    let mut out = Vec::new();
    let h100 = 80 * GIB;
    let g24 = 24 * GIB;
    // Multi-size staircases of many step sizes and tempos ending in OOM.
    for (steps, tempo, period) in [
        (
            vec![0.04, 0.07, 0.05, 0.09, 0.06, 0.08, 0.1],
            90_000.0,
            1000.0,
        ),
        (vec![0.05; 10], 400.0, 5.0),
        (vec![0.12, 0.15, 0.18], 20_000.0, 100.0),
        (
            vec![0.02, 0.03, 0.02, 0.04, 0.03, 0.05, 0.04, 0.06, 0.05, 0.07],
            600.0,
            5.0,
        ),
    ] {
        let case = format!("staircase of {} steps every {tempo} ms", steps.len());
        let s = staircase(g24, &steps, tempo, period);
        out.push(s.outcome(
            &case,
            "shared FAILURES.md #2 (OneDiff multi-size OOM)",
            &[OOM, GROWTH],
        ));
    }
    // Faster than a plateau can be told from a ramp (100 ms per size): marked phases.
    let mut s = staircase(g24, &[0.06, 0.04, 0.07, 0.05, 0.08, 0.06], 100.0, 5.0);
    for k in 0..7 {
        s.markers.push(Marker {
            t_ms: 8000.0 + 100.0 * k as f64 - 1.0,
            kind: "marker".into(),
            label: format!("size {k}"),
            device: None,
        });
    }
    out.push(s.outcome(
        "staircase of 6 marked steps every 100 ms",
        "shared FAILURES.md #2; `vramdoc mark` per size",
        &[OOM, GROWTH],
    ));
    // Steady training for an hour, at 60% and 95%, with allocator noise.
    for fill in [0.6, 0.95] {
        let s = training(h100, fill, 3_600_000.0, 1000.0);
        out.push(s.outcome(
            &format!("steady training at {:.0}% for an hour", fill * 100.0),
            "PyTorch caching allocator (pytorch.org/docs/stable/notes/cuda.html)",
            &[],
        ));
    }
    // Warm-up growth (four larger batches), then a 30-minute plateau at 96%.
    let mut s = training(h100, 0.5, 1_800_000.0, 1000.0);
    for (k, f) in [0.62, 0.74, 0.86, 0.96].iter().enumerate() {
        s.set(20_000.0 + 15_000.0 * k as f64, 10, 0, frac(h100, *f));
    }
    out.push(s.outcome(
        "warm-up growth then a plateau at 96%",
        "pytorch/pytorch#35901 (the cache grows with the first shapes, then is reused)",
        &[],
    ));
    // Eval/train cycles with empty_cache, every five minutes for an hour.
    let mut s = training(g24, 0.5, 3_600_000.0, 1000.0);
    let w = frac(g24, 0.3);
    for k in 0..12 {
        let at = 60_000.0 + 300_000.0 * k as f64;
        s.set(at, 10, 0, w + frac(g24, 0.55));
        s.set(at + 200_000.0, 10, 0, w);
        s.set(at + 210_000.0, 10, 0, w + frac(g24, 0.15));
    }
    out.push(s.outcome(
        "eval/train cycles with empty_cache for an hour",
        "torch.cuda.empty_cache() between phases (pytorch.org/docs/stable/notes/cuda.html)",
        &[],
    ));
    // vLLM at 0.95 serving for an hour: activations come and go inside the budget.
    let mut s = Shape::new(&[h100], 3_605_000.0, 1000.0);
    let w = load(&mut s, 10, 0, frac(h100, 0.4), 6000.0);
    s.set(9000.0, 10, 0, w + frac(h100, 0.04));
    s.set(10_000.0, 10, 0, w);
    s.set(12_000.0, 10, 0, frac(h100, 0.95));
    for k in 0..600 {
        let at = 20_000.0 + 5000.0 * k as f64;
        s.set(at, 10, 0, frac(h100, 0.95) + 300 * MIB);
        s.set(at + 2000.0, 10, 0, frac(h100, 0.95));
    }
    s.tree = vec![(10, Some(3_100_000.0))];
    out.push(s.outcome(
        "vLLM at 0.95 serving for an hour",
        "vLLM gpu_memory_utilization (docs.vllm.ai, conserving_memory)",
        &[],
    ));
    // DDP on 8 GPUs for 30 minutes: every rank listed on every GPU with 0 bytes.
    let mut s = Shape::new(&[h100; 8], 1_800_000.0, 1000.0);
    s.tree = (0..8).map(|r| (100 + r, Some(1_790_000.0))).collect();
    for r in 0..8u32 {
        load(&mut s, 100 + r, r, frac(h100, 0.5), 5000.0);
        s.set(9000.0, 100 + r, r, frac(h100, 0.9));
        for peer in (0..8u32).filter(|p| *p != r) {
            s.peer(7000.0, 100 + r, peer);
        }
    }
    out.push(s.outcome(
        "DDP on 8 GPUs with 0-byte peer listings, 30 minutes",
        "pytorch/pytorch#64130",
        &[],
    ));
    // A neighbour (listed, not in the tree) grows on the job's GPU; the job fails, or not.
    for fails in [true, false] {
        let mut s = training(g24, 0.4, 600_000.0, 500.0);
        for k in 0..7 {
            s.set(
                60_000.0 + 40_000.0 * k as f64,
                99,
                0,
                frac(g24, 0.08) * (k + 1),
            );
        }
        let expected: &[&str] = if fails {
            s.oom(400_000.0, 2 * GIB);
            &[OOM]
        } else {
            &[]
        };
        out.push(s.outcome(
            if fails {
                "a neighbour grows on the job's GPU, the job then OOMs"
            } else {
                "a neighbour grows to 96% beside a steady job"
            },
            "issue 15 (a neighbour's growth on a shared GPU is not the job's)",
            expected,
        ));
    }
    // Watchdog abort after two hours at 93%; the host's OOM killer after 40 minutes at 96%.
    let mut s = training(h100, 0.93, 7_300_000.0, 2000.0);
    s.error(
        7_200_000.0,
        ErrorKind::CollectiveTimeout,
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96120, \
         OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800087 milliseconds before timing out.",
        None,
    );
    s.error(
        7_200_500.0,
        ErrorKind::KilledBySignal { signal: 6 },
        "torchrun rank 3: exitcode -6 (pid 4242)",
        None,
    );
    s.exit = Some(JobExit::Code(1));
    out.push(s.outcome(
        "NCCL watchdog abort after two hours at 93%",
        "pytorch/pytorch#118369; hiyouga/LlamaFactory#7396",
        &[WATCHDOG],
    ));
    let mut s = training(h100, 0.96, 2_460_000.0, 1000.0);
    s.error(
        2_400_000.0,
        ErrorKind::KilledBySignal { signal: 9 },
        "command (pid 10) killed by SIGKILL",
        None,
    );
    s.exit = Some(JobExit::Signal(9));
    out.push(s.outcome(
        "host OOM kill after 40 minutes at 96%",
        "deepspeedai/DeepSpeed#4239 (-9 is the host running out of memory)",
        &[HOST_OOM],
    ));
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
    outcomes.extend(recorded_outcomes());
    for spec in ["2x16GiB", "2xh200"] {
        outcomes.extend(replay_outcomes(spec));
    }
    assert_clean("run (vramdoc run, replays)", &outcomes);
}
