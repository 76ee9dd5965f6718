//! Bench: the timeline fingerprints on a one-hour recording at the default cadence of
//! `vramdoc run` (memory every 5 ms, process lists every 250 ms) of an 8-GPU torchrun job:
//! 8 ranks, one per GPU, each loading, training with a saw-tooth of activations and a marker
//! per step, ranks 1-7 with a stray context on GPU 0, a release marker, then an OOM.
//! Prints the recording's size and the time to diagnose it (goal: at most 1 s).
//! Run: `cargo bench --bench diagnose_timeline`.

use std::time::Instant;
use vramdoc::diagnose::{
    fingerprints, ErrorEvent, ErrorKind, JobExit, RecordedDevice, RecordedProcess, Recording,
    TimelineThresholds,
};
use vramdoc::model::{DeviceSeries, Marker, ProcessSample, Timeline};
use vramdoc::units::{GIB, MIB};

const DEVICES: u32 = 8;
const HOUR_MS: u64 = 3_600_000;
const PERIOD_MS: u64 = 5;
const PROCESS_PERIOD_MS: u64 = 250;
const STEP_MS: u64 = 1000;
const TOTAL: u64 = 80 * GIB;
const RUNS: usize = 5;

/// What rank `r` holds on its own GPU at `t` (ms).
fn rank_usage(r: u32, t: u64) -> u64 {
    let ctx = 500 * MIB;
    let weights = 30 * GIB + r as u64 * 64 * MIB;
    if t < 2000 {
        ctx
    } else if t < 30_000 {
        // Loading: a ramp over 28 s.
        ctx + weights * (t - 2000) / 28_000
    } else {
        // Training: optimizer state, then activations that come and go every step.
        let act = if t % STEP_MS < 600 { 6 * GIB } else { 0 };
        ctx + weights + 20 * GIB + act + (t % 7) * MIB
    }
}

fn recording() -> Recording {
    let pids: Vec<u32> = (0..DEVICES).map(|r| 4000 + r).collect();
    let mut devices = Vec::new();
    let mut processes = Vec::new();
    for d in 0..DEVICES {
        let mut samples = Vec::with_capacity((HOUR_MS / PERIOD_MS + 1) as usize);
        let mut t = 0;
        while t <= HOUR_MS {
            let mut used = rank_usage(d, t);
            if d == 0 && t >= 40_000 {
                used += (DEVICES as u64 - 1) * 500 * MIB; // the other ranks' stray contexts
            }
            samples.push((t as f64, used.min(TOTAL)));
            t += PERIOD_MS;
        }
        devices.push(DeviceSeries {
            device: d,
            total: TOTAL,
            samples,
        });
    }
    let mut t = 0;
    while t <= HOUR_MS {
        for (r, pid) in pids.iter().enumerate() {
            processes.push(ProcessSample {
                t_ms: t as f64,
                device: r as u32,
                pid: *pid,
                used: Some(rank_usage(r as u32, t)),
            });
            if r > 0 && t >= 40_000 {
                processes.push(ProcessSample {
                    t_ms: t as f64,
                    device: 0,
                    pid: *pid,
                    used: Some(500 * MIB),
                });
            }
        }
        t += PROCESS_PERIOD_MS;
    }
    let mut markers: Vec<Marker> = (30..HOUR_MS / STEP_MS)
        .map(|s| Marker {
            t_ms: (s * STEP_MS) as f64,
            kind: "marker".into(),
            label: format!("step {s}"),
            device: None,
        })
        .collect();
    markers.push(Marker {
        t_ms: (HOUR_MS - 60_000) as f64,
        kind: "release".into(),
        label: "del model".into(),
        device: None,
    });
    Recording {
        rules_only: Default::default(),
        devices: (0..DEVICES)
            .map(|i| RecordedDevice {
                index: i,
                uuid: format!("GPU-{i:08x}-0000-0000-0000-000000000000"),
                name: "NVIDIA H100 80GB HBM3".into(),
                total: TOTAL,
                minor: None,
                label: None,
            })
            .collect(),
        timeline: Timeline {
            devices,
            markers,
            processes,
            gaps: Vec::new(),
        },
        processes: pids
            .iter()
            .map(|pid| RecordedProcess {
                name: Some("python".into()),
                ..RecordedProcess::seen(*pid, 0.0, true)
            })
            .collect(),
        errors: vec![ErrorEvent {
            t_ms: (HOUR_MS - 1000) as f64,
            kind: ErrorKind::OutOfMemory,
            device: None,
            pid: Some(pids[0]),
            line: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB".into(),
            requested_bytes: Some(2 * GIB),
            facts: None,
        }],
        end_ms: HOUR_MS as f64,
        exit: Some(JobExit::Code(1)),
        device_file_holders: Vec::new(),
    }
}

fn main() {
    let t = Instant::now();
    let rec = recording();
    let built = t.elapsed();
    let mem: usize = rec.timeline.devices.iter().map(|d| d.samples.len()).sum();
    println!(
        "recording: 1 h, {DEVICES} GPUs, {mem} memory samples ({} per GPU, every {PERIOD_MS} ms), \
         {} process samples (every {PROCESS_PERIOD_MS} ms), {} markers; built in {:.2?}",
        rec.timeline.devices[0].samples.len(),
        rec.timeline.processes.len(),
        rec.timeline.markers.len(),
        built
    );
    let th = TimelineThresholds::default();
    let mut best = f64::INFINITY;
    let mut ids = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let found = fingerprints(&rec, &th);
        best = best.min(t.elapsed().as_secs_f64());
        ids = found.into_iter().map(|f| f.id).collect();
    }
    println!("findings: {}", ids.join(", "));
    println!(
        "diagnose a one-hour recording: {:.1} ms (best of {RUNS}; goal <= 1000 ms) -> {}",
        best * 1000.0,
        if best <= 1.0 { "ok" } else { "OVER GOAL" }
    );
}
