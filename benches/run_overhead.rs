//! `vramdoc run` numbers (prints them; run `cargo bench --bench run_overhead`):
//! 1. recorder CPU per sample: a [`Recorder`] with the process tree on, at a 1 ms memory
//!    period and a 50 ms tracker period, for 2 s (getrusage of this process);
//! 2. the overhead on a wrapped job at the default cadence: `vramdoc run -- sleep 10`, CPU
//!    time of vramdoc itself (wait4's rusage) over its wall time, as % of one core
//!    (goal ≤ 1 %), without and with `--samples` (every memory sample streamed as JSONL);
//! 3. the time to diagnose a one-hour recording at the default cadence (100 ms memory, 500 ms
//!    process lists; goal ≤ 1 s).

use std::time::{Duration, Instant};
use vramdoc::backend::sim::SimMonitor;
use vramdoc::diagnose::{self, TimelineThresholds};
use vramdoc::gpu::Monitor;
use vramdoc::model::{DeviceSeries, Marker, ProcessSample, Timeline};
use vramdoc::record::sampler::SamplerConfig;
use vramdoc::record::{JobEnd, RecordedDevice, RecordedProcess, Recording};
use vramdoc::record::{Recorder, RecorderConfig};
use vramdoc::units::GIB;
use vramdoc_sim::{InitOptions, SimBox};

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills a plain struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn recorder_cost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = SimBox::create(dir.path(), "2x80GiB", &InitOptions::default()).expect("box");
    let mon = SimMonitor::new(sim.clone());
    let devices = mon.devices().expect("devices");
    let window = Duration::from_secs(2);
    let cpu0 = cpu_time();
    let rec = Recorder::start(
        Box::new(mon),
        &devices,
        Instant::now(),
        RecorderConfig {
            tree: Some(vramdoc::record::tree::Scope::descendants(std::process::id())),
            round_readings: true,
            sink: Some(Box::new(std::io::sink())),
            ..RecorderConfig::new(SamplerConfig {
                period: Duration::from_millis(1),
                process_period: Some(Duration::from_millis(50)),
            })
        },
    );
    std::thread::sleep(window);
    let got = rec.finish(JobEnd {
        end_ms: 0.0,
        exit: None,
    });
    let cpu = cpu_time() - cpu0;
    let rounds = got.rounds.max(1);
    let tracker_rounds = (window.as_millis() / 50) as f64;
    println!(
        "recorder, 2 devices, memory every 1 ms + tree/process lists every 50 ms: {} memory \
         rounds in {:.1} s, CPU {:.1} ms = {:.1} µs per memory round (tracker rounds \
         included, ~{tracker_rounds:.0} of them)",
        got.rounds,
        window.as_secs_f64(),
        cpu.as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e6 / rounds as f64
    );
}

// Reaped with wait4 below, which std's Child cannot do (it would lose the rusage).
#[allow(clippy::zombie_processes)]
fn wrapped_overhead(seconds: u32, stream: bool) {
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let dir = tempfile::tempdir().expect("tempdir");
    let samples = dir.path().join("samples.jsonl");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--sim", "2x80GiB", "run"]);
    if stream {
        cmd.arg("--samples").arg(&samples);
    }
    let start = Instant::now();
    let child = cmd
        .args(["--", "sleep", &seconds.to_string()])
        .env_remove("VRAMDOC_SIM_DIR")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run vramdoc");
    let mut status = 0;
    // SAFETY: wait4 on our own child with out pointers we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    let wall = start.elapsed();
    let cpu = tv(ru.ru_utime) + tv(ru.ru_stime);
    println!(
        "vramdoc run{} -- sleep {seconds} (default cadence, --sim 2x80GiB): wall {:.2} s, \
         vramdoc CPU {:.0} ms = {:.2} % of one core (goal <= 1 %)",
        if stream { " --samples s.jsonl" } else { "" },
        wall.as_secs_f64(),
        cpu.as_secs_f64() * 1e3,
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
    );
}

fn one_hour_recording() -> Recording {
    let hour_ms = 3_600_000u32;
    let devices: Vec<RecordedDevice> = (0..2)
        .map(|i| RecordedDevice {
            index: i,
            uuid: format!("GPU-{i}"),
            name: "bench".into(),
            total: 80 * GIB,
            minor: None,
            label: None,
        })
        .collect();
    // Steady training: a load, then a sawtooth of activations, every 100 ms.
    let series = |d: u32| DeviceSeries {
        device: d,
        total: 80 * GIB,
        samples: (0..hour_ms / 100)
            .map(|i| {
                let t = i as f64 * 100.0;
                let used = if t < 5_000.0 {
                    (t / 5_000.0 * 30.0 * GIB as f64) as u64
                } else {
                    30 * GIB + (i % 50) as u64 * (GIB / 10)
                };
                (t, used)
            })
            .collect(),
    };
    let mut processes = Vec::new();
    for i in 0..hour_ms / 500 {
        for d in 0..2 {
            processes.push(ProcessSample {
                t_ms: i as f64 * 500.0,
                device: d,
                pid: 1000 + d,
                used: Some(30 * GIB),
            });
        }
    }
    let markers = (0..60)
        .map(|m| Marker {
            t_ms: m as f64 * 60_000.0,
            kind: "marker".into(),
            label: format!("epoch {m}"),
            device: None,
        })
        .collect();
    Recording {
        rules_only: Default::default(),
        devices,
        timeline: Timeline {
            devices: vec![series(0), series(1)],
            markers,
            processes,
            gaps: Vec::new(),
        },
        processes: (0..2)
            .map(|d| RecordedProcess {
                name: Some("python".into()),
                exit_ms: Some(hour_ms as f64),
                cuda_visible_devices: Some(d.to_string()),
                ..RecordedProcess::seen(1000 + d, 0.0, true)
            })
            .collect(),
        errors: Vec::new(),
        end_ms: hour_ms as f64,
        exit: Some(diagnose::JobExit::Code(0)),
        device_file_holders: Vec::new(),
    }
}

fn diagnose_hour() {
    let rec = one_hour_recording();
    let th = TimelineThresholds::default();
    let start = Instant::now();
    let findings = diagnose::fingerprints(&rec, &th);
    let took = start.elapsed();
    println!(
        "diagnose a one-hour recording (2 devices x 36,000 samples, 14,400 process samples, 60 \
         markers): {:.1} ms, {} finding(s) (goal <= 1 s)",
        took.as_secs_f64() * 1e3,
        findings.len()
    );
}

fn main() {
    recorder_cost();
    wrapped_overhead(10, false);
    wrapped_overhead(10, true);
    diagnose_hour();
}
