//! Recorded job shapes: timelines too long (minutes to hours) or too fast to run live, built
//! sample by sample as the recorder takes them (device memory every `period`, per-process
//! lists every `proc_period`, 0-byte peer entries included) and fed to
//! `vramdoc::diagnose::fingerprints`.

use super::{GIB, GROWTH, HELD_BY_DESCRIPTOR, HOST_OOM, MIB, OOM, WATCHDOG};
use crate::corpus::Outcome;
use std::collections::BTreeMap;
use vramdoc::diagnose::{
    fingerprints, DeviceFileHolder, ErrorEvent, ErrorKind, JobExit, RecordedDevice,
    RecordedProcess, Recording, TimelineThresholds,
};
use vramdoc::model::{DeviceSeries, Marker, ProcessSample, Timeline};

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
    /// When the command ended, when before the recording's end (`run` records on after it).
    command_end: Option<f64>,
    /// (t, device, bytes): from `t` on, memory counted in the device's used but listed for no
    /// process (an exited creator's context kept by a worker, where NVML lists nobody).
    unlisted: Vec<(f64, u32, u64)>,
    /// The job's processes seen holding the driver's device files after the command.
    holders: Vec<DeviceFileHolder>,
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
            command_end: None,
            unlisted: Vec::new(),
            holders: Vec::new(),
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
            facts: None,
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
                let unlisted = self
                    .unlisted
                    .iter()
                    .rfind(|(at, dv, _)| *at <= t && *dv as usize == d)
                    .map_or(0, |u| u.2);
                let held: u64 = usage
                    .iter()
                    .filter(|((_, dv), _)| *dv as usize == d)
                    .filter_map(|(_, u)| *u)
                    .sum::<u64>()
                    + unlisted;
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
        pids.extend(self.holders.iter().map(|h| h.pid));
        pids.sort_unstable();
        pids.dedup();
        Recording {
            rules_only: Default::default(),
            devices: (0..self.totals.len() as u32)
                .map(|i| RecordedDevice {
                    index: i,
                    uuid: format!("GPU-{i:08x}-corp-0000-0000-000000000000"),
                    name: "Recorded GPU".into(),
                    total: self.totals[i as usize],
                    minor: None,
                    label: None,
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
                    name: Some(format!("python{pid}")),
                    exit_ms: self.tree.iter().find(|(p, _)| p == pid).and_then(|x| x.1),
                    ..RecordedProcess::seen(*pid, 0.0, tree.contains(pid))
                })
                .collect(),
            errors: self.errors.clone(),
            end_ms: self.command_end.unwrap_or(self.end),
            exit: self.exit,
            device_file_holders: self.holders.clone(),
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

/// The command (PID 10) holds 40 % of an H100 and is stopped at 60 s; its DataLoader worker
/// (PID 11, forked after CUDA init) runs on. `kept`: the worker holds the device files and
/// the memory stays, listed for nobody (NVML in a container on a translating driver);
/// otherwise the worker never touched CUDA and the memory returns.
fn worker_after_the_main_process(kept: bool) -> Shape {
    let total = 80 * GIB;
    let mut s = Shape::new(&[total], 62_000.0, 100.0);
    let held = load(&mut s, 10, 0, frac(total, 0.4), 3000.0);
    s.tree = vec![(10, Some(60_000.0)), (11, None)];
    s.command_end = Some(60_000.0);
    s.exit = Some(JobExit::Signal(15));
    if kept {
        s.unlisted.push((60_000.0, 0, held));
        for t in [60_750.0, 61_900.0] {
            s.holders.push(DeviceFileHolder {
                pid: 11,
                t_ms: t,
                nodes: vec!["/dev/nvidia0".into(), "/dev/nvidiactl".into()],
                devices: vec![0],
                context: Some(true),
            });
        }
    }
    s
}

pub(super) fn recorded_outcomes() -> Vec<Outcome> {
    let mut out = Vec::new();
    out.push(worker_after_the_main_process(true).outcome(
        "worker keeps the stopped main process's memory, NVML lists nobody",
        "PaddlePaddle/PaddleOCR#2074 (main process killed: memory used, no process shown; \
         `fuser -v /dev/nvidia*` finds the workers); NVIDIA/Megatron-LM#3684",
        &[HELD_BY_DESCRIPTOR],
    ));
    out.push(worker_after_the_main_process(false).outcome(
        "worker without CUDA outlives the stopped main process, memory returned",
        "NVIDIA/Megatron-LM#3684 (a worker without /dev/nvidia* descriptors keeps nothing)",
        &[],
    ));
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
