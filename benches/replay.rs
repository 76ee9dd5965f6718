//! Replay and sampler numbers (prints them; run `cargo bench --bench replay`):
//! 1. wall time of all five built-in replays with every variant on `--sim` boxes;
//! 2. CPU cost of the sampler at a 1 ms period (getrusage of this process over a fixed
//!    window, sampler running vs idle), with and without real-driver-like NVML latencies;
//! 3. whether a 5 ms allocation pulse is captured at 1 ms and 5 ms periods.

use std::process::Command;
use std::time::{Duration, Instant};
use vramdoc::backend::sim::{SimDriver, SimMonitor};
use vramdoc::gpu::Driver;
use vramdoc::gpu::Monitor;
use vramdoc::record::sampler::{Sampler, SamplerConfig};
use vramdoc::record::{JobEnd, Recorder, RecorderConfig};
use vramdoc::units::GIB;
use vramdoc_sim::{Faults, InitOptions, SimBox, SimProcess};

const ALL: [&str; 5] = [
    "stray-cuda0",
    "multi-size-oom",
    "sharded-release",
    "double-load",
    "overcommit",
];

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills a plain struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn new_box(spec: &str) -> (tempfile::TempDir, SimBox) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = SimBox::create(dir.path(), spec, &InitOptions::default()).expect("box");
    (dir, sim)
}

fn replays(spec: &str, period: &str) {
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let start = Instant::now();
    let out = Command::new(exe)
        .args(["--sim", spec, "replay"])
        .args(ALL)
        .args(["--period", period, "--json"])
        .env_remove("VRAMDOC_SIM_DIR")
        .output()
        .expect("run vramdoc");
    let wall = start.elapsed();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let runs = report["replay"]["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    println!(
        "replay all 5 scenarios, {} variants, --sim {spec}, period {period}: {:.0} ms wall (exit {})",
        runs.len(),
        wall.as_secs_f64() * 1000.0,
        out.status.code().unwrap_or(-1)
    );
    for r in &runs {
        let samples: usize = r["timeline"]["devices"]
            .as_array()
            .map(|d| {
                d.iter()
                    .map(|s| s["samples"].as_array().map_or(0, |a| a.len()))
                    .sum()
            })
            .unwrap_or(0);
        println!(
            "  {:<16} {:<26} {:<11} {:>5} ms {:>6} samples",
            r["scenario"].as_str().unwrap_or(""),
            r["variant"].as_str().unwrap_or(""),
            r["verdict"].as_str().unwrap_or(""),
            r["duration_ms"],
            samples
        );
    }
}

fn sampler_cost(label: &str, faults: Faults, process_period: Option<Duration>) {
    let (_dir, sim) = new_box("2x24GiB");
    sim.set_faults(&faults).expect("faults");
    let window = Duration::from_secs(2);
    let c0 = cpu_time();
    std::thread::sleep(window);
    let idle = cpu_time() - c0;

    let mon = SimMonitor::new(sim);
    let devices = mon.devices().expect("devices");
    let cfg = SamplerConfig {
        period: Duration::from_millis(1),
        process_period,
    };
    let c0 = cpu_time();
    // The recorder: memory on the sampler thread, process lists on its own thread.
    let rec = Recorder::start(
        Box::new(mon),
        &devices,
        Instant::now(),
        RecorderConfig::new(cfg),
    );
    std::thread::sleep(window);
    let got = rec.finish(JobEnd {
        end_ms: 0.0,
        exit: None,
    });
    let busy = cpu_time() - c0;
    let cost = busy.saturating_sub(idle);
    println!(
        "sampler 1 ms period, 2 GPUs, {label}: {:.1}% of one core ({:.0} ms CPU over {:.0} ms; idle {:.1} ms), {} rounds = {:.0}/s, {} process samples",
        cost.as_secs_f64() * 100.0 / window.as_secs_f64(),
        busy.as_secs_f64() * 1000.0,
        window.as_secs_f64() * 1000.0,
        idle.as_secs_f64() * 1000.0,
        got.rounds,
        got.rounds as f64 / window.as_secs_f64(),
        got.recording.timeline.processes.len()
    );
}

fn pulses(period: Duration) {
    let (_dir, sim) = new_box("24GiB");
    let mut drv = SimDriver::new(SimProcess::new(sim.clone(), None));
    let ctx = drv.create_context(0).expect("context");
    let t0 = Instant::now();
    let s = Sampler::start(
        std::sync::Arc::new(SimMonitor::new(sim)),
        vec![(0, 24 * GIB)],
        t0,
        period,
        None,
    );
    let n = 20;
    let mut windows = Vec::new();
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(20));
        let a = drv.alloc(ctx, GIB).expect("alloc");
        let start = t0.elapsed().as_secs_f64() * 1000.0;
        std::thread::sleep(Duration::from_millis(5));
        let end = t0.elapsed().as_secs_f64() * 1000.0;
        drv.free(a).expect("free");
        windows.push((start, end));
    }
    let got = s.stop();
    let series = &got.devices[0].samples;
    let seen = windows
        .iter()
        .filter(|(a, b)| {
            series
                .iter()
                .any(|(t, used)| *t >= *a && *t <= *b && *used >= GIB)
        })
        .count();
    println!(
        "5 ms allocation pulse (1 GiB) at a {:?} period: captured {seen}/{n}",
        period
    );
}

fn main() {
    replays("2xt4", "5ms");
    replays("2xh200", "1ms");
    sampler_cost("memory only", Faults::default(), None);
    sampler_cost(
        "+ process lists every 50 ms",
        Faults::default(),
        Some(Duration::from_millis(50)),
    );
    sampler_cost(
        "real-driver latencies (12 us memory, 4.5 ms processes / 50 ms)",
        Faults {
            nvml_memory_latency_us: 12,
            nvml_process_latency_us: 4500,
            ..Faults::default()
        },
        Some(Duration::from_millis(50)),
    );
    pulses(Duration::from_millis(1));
    pulses(Duration::from_millis(5));
}
