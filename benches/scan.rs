//! Bench: one `vramdoc scan` (inventory + diagnosis) on a simulated box of 8 devices x 32
//! compute processes, with real-driver NVML latencies injected (12 us per memory query,
//! 4.5 ms per process-list query). Prints numbers; the only assertion is the scan's shape.
//!
//! 1. In-process (`backend::sim`): wall time and the monitor's queries by kind.
//! 2. The real path, nvml-wrapper over crates/simgpu's libnvidia-ml.so.1 (in a child process
//!    of this bench, which loads it by name): wall time of one scan (inventory + diagnosis), the NVML calls it
//!    made as the box counts them per client (what `vramdoc sim status --calls` shows), and
//!    the time spent inside those calls (as the simulated library served them, its own work
//!    included), and the wall time against both that and the sum of the calls' injected
//!    latencies — once reading the lists scan needs (the compute list of each GPU), once with
//!    `--all-lists` (all three).
//! 3. The whole command (`vramdoc --backend real scan --json`, this build's binary) on an idle
//!    machine and beside two busy loops: median wall against the NVML time it needs, and its
//!    NVML calls per scan by entry point.
//!
//! Run: `VRAMDOC_SIMGPU_DIR=$(scripts/test --simgpu-dir) cargo bench --bench scan`.

mod common;
#[path = "../tests/it/common/simgpu.rs"]
mod simgpu;

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use vramdoc::backend::sim::SimMonitor;
use vramdoc::gpu::Monitor;
use vramdoc::inventory::{self, PidNamespace, ProcessLists};
use vramdoc::units::format_bytes;

const DEVICES: u32 = 8;
const PROCESSES: usize = 32;
const ITERATIONS: usize = 10;
const MEMORY_MS: f64 = 0.012;
const LIST_MS: f64 = 4.5;
/// Set in the child that scans over the simulated library: `all` or `needed`.
const CHILD_VAR: &str = "VRAMDOC_SCAN_BENCH_LISTS";

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pidns() -> vramdoc::model::Vantage {
    vramdoc::model::Vantage::new(
        PidNamespace {
            host: true,
            reason: "bench".into(),
        },
        None,
    )
}

fn main() {
    if let Ok(which) = std::env::var(CHILD_VAR) {
        real_child(&which);
        return;
    }
    let staged = common::stage_box(DEVICES, PROCESSES);
    in_process(&staged);
    println!();
    let libs = simgpu::lib_dir();
    println!("real path: nvml-wrapper over crates/simgpu, {ITERATIONS} scans per mode");
    for which in ["needed", "all"] {
        let child = Command::new(std::env::current_exe().expect("this bench"))
            .env(CHILD_VAR, which)
            .env("VRAMDOC_SIM_DIR", staged.sim.dir())
            .env("LD_LIBRARY_PATH", libs)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the bench's child");
        let pid = child.id();
        let out = child.wait_with_output().expect("child");
        assert!(out.status.success(), "the child failed");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let value = |key: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .expect("the child's numbers")
        };
        let (median_ms, in_nvml_ms) = (value("median_ms "), value("in_nvml_ms "));
        let (mut lists, mut memory, mut all) = (0u64, 0u64, 0u64);
        for c in vramdoc_sim::calls::read_all(staged.sim.dir())
            .expect("call counters")
            .iter()
            .filter(|c| c.pid == pid)
        {
            for (name, n) in &c.calls {
                if name.contains("RunningProcess") {
                    lists += n;
                }
                if name.starts_with("nvmlDeviceGetMemoryInfo") {
                    memory += n;
                }
                all += n;
            }
        }
        let per = |n: u64| n as f64 / ITERATIONS as f64;
        let needed = per(lists) * LIST_MS + per(memory) * MEMORY_MS;
        println!(
            "  {}: process-list calls per scan {:.1}, memory calls {:.1}, all NVML calls {:.1}",
            if which == "all" {
                "--all-lists"
            } else {
                "default    "
            },
            per(lists),
            per(memory),
            per(all)
        );
        println!(
            "    median wall {median_ms:.2} ms; inside the NVML calls {in_nvml_ms:.2} ms \
             (wall / that = {:.3}); the calls' injected latencies {needed:.2} ms \
             (wall / that = {:.3})",
            median_ms / in_nvml_ms,
            median_ms / needed
        );
    }
    println!();
    whole_command(&staged, libs);
    drop(staged);
}

/// Per scan, NVML calls by entry point over the children `pids` of this bench.
fn calls_of(staged: &common::Staged, pids: &[u32]) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for c in vramdoc_sim::calls::read_all(staged.sim.dir())
        .expect("call counters")
        .iter()
        .filter(|c| pids.contains(&c.pid))
    {
        for (name, n) in &c.calls {
            *out.entry(name.clone()).or_default() += n;
        }
    }
    out
}

/// The whole command as a user runs it (`vramdoc --backend real scan --json`, the release
/// binary, over the simulated library), on an idle machine and with two busy loops beside
/// it: median wall time against the NVML time its calls need (lists x 4.5 ms + memory x
/// 12 us; the simulated driver serves one client's lists one at a time, as under the real
/// driver's lock), and its NVML calls per scan by entry point (each once per GPU, or once).
fn whole_command(staged: &common::Staged, libs: &std::path::Path) {
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    println!("whole command: `vramdoc --backend real scan --json`, {ITERATIONS} runs per load");
    for busy in [0usize, 2] {
        let mut spinners: Vec<_> = (0..busy)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .expect("spawn a busy loop")
            })
            .collect();
        let mut walls = Vec::new();
        let mut pids = Vec::new();
        for _ in 0..ITERATIONS {
            let t0 = Instant::now();
            let child = Command::new(exe)
                .args(["--backend", "real", "scan", "--json"])
                .env("VRAMDOC_SIM_DIR", staged.sim.dir())
                .env("LD_LIBRARY_PATH", libs)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn vramdoc");
            pids.push(child.id());
            let out = child.wait_with_output().expect("vramdoc scan");
            walls.push(t0.elapsed());
            // 0: no findings; 1: findings (the staged box raises some); anything else failed.
            assert!(
                matches!(out.status.code(), Some(0 | 1)),
                "vramdoc scan failed: {:?}",
                out.status
            );
        }
        for s in &mut spinners {
            let _ = s.kill();
            let _ = s.wait();
        }
        walls.sort();
        let calls = calls_of(staged, &pids);
        let per = |n: u64| n as f64 / ITERATIONS as f64;
        let lists: u64 = calls
            .iter()
            .filter(|(k, _)| k.contains("RunningProcess"))
            .map(|(_, n)| n)
            .sum();
        let memory: u64 = calls
            .iter()
            .filter(|(k, _)| k.starts_with("nvmlDeviceGetMemoryInfo"))
            .map(|(_, n)| n)
            .sum();
        let needed = per(lists) * LIST_MS + per(memory) * MEMORY_MS;
        let median = ms(walls[walls.len() / 2]);
        println!(
            "  {busy} busy loops: median wall {median:.1} ms (min {:.1}, max {:.1}); NVML time \
             needed {needed:.1} ms; wall / needed = {:.2} (goal <= 1.2; the wall includes \
             the process start)",
            ms(walls[0]),
            ms(walls[walls.len() - 1]),
            median / needed
        );
        if busy == 0 {
            let line: Vec<String> = calls
                .iter()
                .map(|(k, n)| format!("{} {:.1}", k.trim_start_matches("nvml"), per(*n)))
                .collect();
            println!("    NVML calls per scan: {}", line.join(", "));
        }
    }
}

/// The child: `ITERATIONS` scans through NVML by name (the simulated library), printing the
/// median wall time.
fn real_child(which: &str) {
    let monitor = Timed {
        inner: vramdoc::gpu::nvml::NvmlMonitor::open().expect("open the simulated NVML"),
        spent: Mutex::new(Duration::ZERO),
    };
    let lists = if which == "all" {
        ProcessLists::All
    } else {
        ProcessLists::AsNeeded
    };
    let th = vramdoc::diagnose::Thresholds::default();
    let mut walls = Vec::new();
    for _ in 0..ITERATIONS {
        *monitor.spent.lock().unwrap_or_else(|e| e.into_inner()) = Duration::ZERO;
        let t0 = Instant::now();
        let inv = inventory::collect(&monitor, None, pidns(), lists).expect("scan");
        let _ = vramdoc::diagnose::diagnose(&inv, &th);
        let wall = t0.elapsed();
        let spent = *monitor.spent.lock().unwrap_or_else(|e| e.into_inner());
        walls.push((wall, spent));
        assert_eq!(inv.processes.len(), PROCESSES);
    }
    walls.sort();
    let (wall, spent) = walls[walls.len() / 2];
    println!("median_ms {}", ms(wall));
    println!("in_nvml_ms {}", ms(spent));
}

fn in_process(staged: &common::Staged) {
    let (spec, sim) = (&staged.spec, &staged.sim);
    let th = vramdoc::diagnose::Thresholds::default();
    let mut walls = Vec::new();
    let mut last = None;
    for _ in 0..ITERATIONS {
        let monitor = SimMonitor::new(sim.clone());
        let t0 = Instant::now();
        let inv = inventory::collect(
            &monitor,
            Some(spec.clone()),
            pidns(),
            ProcessLists::AsNeeded,
        )
        .expect("scan");
        let t_collect = t0.elapsed();
        let (findings, headroom) = vramdoc::diagnose::diagnose(&inv, &th);
        let wall = t0.elapsed();
        let counts = monitor.call_counts();
        assert_eq!(inv.processes.len(), PROCESSES);
        assert!(inv
            .processes
            .iter()
            .all(|p| p.devices.len() == DEVICES as usize));
        assert_eq!(headroom.len(), DEVICES as usize);
        walls.push(wall);
        last = Some((
            counts,
            t_collect,
            wall,
            findings.len(),
            inv.devices()[0].memory.used,
        ));
    }
    walls.sort();
    let (counts, t_collect, wall, n_findings, used0) = last.expect("ran");
    println!("scan bench: {DEVICES} devices x {PROCESSES} processes ({spec}), {ITERATIONS} scans");
    println!("  injected NVML latency: 12 us per memory query, 4.5 ms per process-list query");
    println!("in-process (backend::sim):");
    println!(
        "  wall per scan: min {:.2} ms, median {:.2} ms, max {:.2} ms",
        ms(walls[0]),
        ms(walls[walls.len() / 2]),
        ms(walls[walls.len() - 1])
    );
    println!(
        "  last scan: collect {:.2} ms (NVML + /proc), diagnose {:.3} ms",
        ms(t_collect),
        ms(wall - t_collect)
    );
    println!(
        "  floor from the compute lists' latency alone: {DEVICES} x 4.5 ms = {:.1} ms",
        DEVICES as f64 * LIST_MS
    );
    println!(
        "  monitor queries per scan: devices() {} (memory of all {DEVICES} devices inside), \
         memory(i) {}, process-list reads {}",
        counts.inventory, counts.memory, counts.processes
    );
    println!(
        "  findings: {n_findings}; GPU 0 used: {}",
        format_bytes(used0)
    );
}

/// A monitor that adds up the time spent inside its NVML calls.
struct Timed<M> {
    inner: M,
    spent: Mutex<Duration>,
}

impl<M: Monitor> Timed<M> {
    fn time<T>(&self, f: impl FnOnce(&M) -> T) -> T {
        let t0 = Instant::now();
        let out = f(&self.inner);
        *self.spent.lock().unwrap_or_else(|e| e.into_inner()) += t0.elapsed();
        out
    }
}

impl<M: Monitor> Monitor for Timed<M> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn versions(&self) -> vramdoc::gpu::Result<vramdoc::gpu::Versions> {
        self.time(|m| m.versions())
    }
    fn devices(&self) -> vramdoc::gpu::Result<Vec<vramdoc::gpu::DeviceInfo>> {
        self.time(|m| m.devices())
    }
    fn memory(&self, index: u32) -> vramdoc::gpu::Result<vramdoc::gpu::MemoryInfo> {
        self.time(|m| m.memory(index))
    }
    fn processes(&self, index: u32) -> vramdoc::gpu::Result<Vec<vramdoc::gpu::GpuProcess>> {
        self.time(|m| m.processes(index))
    }
    fn process_list(
        &self,
        index: u32,
        kind: vramdoc::gpu::ProcessKind,
    ) -> vramdoc::gpu::Result<Vec<vramdoc::gpu::GpuProcess>> {
        self.time(|m| m.process_list(index, kind))
    }
    fn call_counts(&self) -> vramdoc::gpu::CallCounts {
        self.inner.call_counts()
    }
    fn cuda_speed(&self, index: u32) -> Option<(i32, i32, i32)> {
        self.time(|m| m.cuda_speed(index))
    }
    fn device_nodes(&self) -> Vec<std::path::PathBuf> {
        self.inner.device_nodes()
    }
}
