//! The recorder on a simulated box: one process-list path with gaps, readings at markers,
//! and the recording the rules take.

use super::*;
use crate::backend::sim::{SimDriver, SimMonitor};
use crate::gpu::Driver;
use crate::model::{GapKind, GapReason};
use policy::ListPolicy;
use std::time::Duration;
use vramdoc_sim::{InitOptions, SimBox, SimProcess};

fn sim_box(spec: &str) -> (tempfile::TempDir, SimBox, Vec<DeviceInfo>) {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimBox::create(dir.path(), spec, &InitOptions::default()).unwrap();
    let devices = SimMonitor::new(sim.clone()).devices().unwrap();
    (dir, sim, devices)
}

fn cadence(period_ms: u64, process_ms: u64) -> SamplerConfig {
    SamplerConfig {
        period: Duration::from_millis(period_ms),
        process_period: Some(Duration::from_millis(process_ms)),
    }
}

/// A recorder on a 16 GiB box whose periodic readings never come (memory every hour, no
/// process rounds): only marks and boundaries read; and a driver on the box.
fn marks_only_recorder() -> (tempfile::TempDir, Recorder, SimDriver) {
    let (dir, sim, devices) = sim_box("1x16GiB");
    let rec = on_box(
        &sim,
        &devices,
        RecorderConfig::new(SamplerConfig {
            period: Duration::from_secs(3600),
            process_period: None,
        }),
    );
    (dir, rec, SimDriver::new(SimProcess::new(sim, None)))
}

/// A recorder of `devices` on the box `sim`, started now with `config`.
fn on_box(sim: &SimBox, devices: &[DeviceInfo], config: RecorderConfig) -> Recorder {
    Recorder::start(
        Box::new(SimMonitor::new(sim.clone())),
        devices,
        Instant::now(),
        config,
    )
}

const END: JobEnd = JobEnd {
    end_ms: 0.0,
    exit: None,
};

#[test]
fn process_lists_are_read_only_on_the_devices_that_matter() {
    let (_dir, sim, devices) = sim_box("2x16GiB");
    let rec = on_box(
        &sim,
        &devices,
        RecorderConfig {
            process_devices: Some(vec![1]),
            list_policy: ListPolicy::Every,
            ..RecorderConfig::new(cadence(1, 10))
        },
    );
    let mut drv = SimDriver::new(SimProcess::new(sim, None));
    let ctx = drv.create_context(1).unwrap();
    let a = drv.alloc(ctx, 1 << 30).unwrap();
    std::thread::sleep(Duration::from_millis(40));
    drv.free(a).unwrap();
    let got = rec.finish(END);
    let me = std::process::id();
    assert!(got
        .timeline
        .processes
        .iter()
        .any(|p| p.pid == me && p.device == 1));
    assert!(got.timeline.processes.iter().all(|p| p.device == 1));
    assert!(got.peaks[1].peak_used >= 1 << 30);
    // A PID the lists showed is a neighbour of the recording (no tree, none fed).
    assert!(got
        .recording
        .processes
        .iter()
        .any(|p| p.pid == me && !p.in_tree));
}

#[test]
fn process_lists_never_stall_the_memory_loop_and_late_rounds_are_gaps() {
    let (_dir, sim, devices) = sim_box("2x16GiB");
    // Process lists that take 150 ms a round (a driver holding its lock): three lists of
    // 50 ms each, one call per list as over NVML.
    sim.set_faults(&vramdoc_sim::Faults {
        nvml_process_latency_us: 50_000,
        ..Default::default()
    })
    .unwrap();
    let rec = on_box(
        &sim,
        &devices,
        RecorderConfig {
            process_devices: Some(vec![1]),
            list_policy: ListPolicy::Every,
            ..RecorderConfig::new(cadence(1, 10))
        },
    );
    std::thread::sleep(Duration::from_millis(400));
    // A marker is not held up by the slow query either.
    let asked = Instant::now();
    rec.mark(MarkerKind::Marker, "mid-query", None);
    assert!(asked.elapsed() < Duration::from_millis(100));
    let got = rec.finish(END);
    let during = got.timeline.devices[0]
        .samples
        .iter()
        .filter(|(t, _)| *t > 20.0 && *t < 130.0)
        .count();
    assert!(during > 0, "memory loop stalled behind the process query");
    assert!(
        got.timeline
            .gaps
            .iter()
            .any(|g| g.kind == processes::GAP_KIND
                && g.reason == GapReason::Late
                && g.device.is_none()),
        "{:?}",
        got.timeline.gaps
    );
}

#[test]
fn failed_process_lists_become_one_gap_per_device() {
    let (_dir, sim, devices) = sim_box("2x16GiB");
    let rec = on_box(
        &sim,
        &devices,
        RecorderConfig {
            list_policy: ListPolicy::Every,
            ..RecorderConfig::new(cadence(1, 5))
        },
    );
    std::thread::sleep(Duration::from_millis(30));
    sim.set_faults(&vramdoc_sim::Faults {
        lost_devices: vec![1],
        ..Default::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(60));
    let got = rec.finish(END);
    assert!(got.errors > 0);
    for kind in [GapKind::Memory, processes::GAP_KIND] {
        let lost: Vec<_> = got
            .timeline
            .gaps
            .iter()
            .filter(|g| g.kind == kind && g.device == Some(1))
            .collect();
        assert_eq!(lost.len(), 1, "{kind}: {:?}", got.timeline.gaps);
        assert!(
            matches!(&lost[0].reason, GapReason::Failed(e) if e.contains("lost")),
            "{}",
            lost[0].reason
        );
    }
    assert!(!got.timeline.gaps.iter().any(|g| g.device == Some(0)));
}

#[test]
fn markers_read_memory_and_boundaries_reach_only_the_recording() {
    let (_dir, rec, mut drv) = marks_only_recorder();
    let ctx = drv.create_context(0).unwrap();
    drv.alloc(ctx, 2 << 30).unwrap();
    let t = rec.mark(MarkerKind::Step, "load", None);
    rec.boundary(t + 1.0, MarkerKind::StepEnd, "load ended (ok)".into());
    rec.boundary_usage(t + 1.0, 42, &[2 << 30]);
    rec.process(RecordedProcess {
        name: Some("worker".into()),
        exit_ms: Some(t + 2.0),
        ..RecordedProcess::seen(42, 0.0, true)
    });
    rec.error(ErrorEvent {
        t_ms: t,
        kind: ErrorKind::OutOfMemory,
        device: Some(0),
        pid: Some(42),
        line: "oom".into(),
        requested_bytes: Some(1),
    });
    let got = rec.finish(JobEnd {
        end_ms: t + 2.0,
        exit: Some(JobExit::Code(1)),
    });
    // The marker's reading is on the chart although the period is an hour.
    assert!(got.timeline.devices[0]
        .samples
        .iter()
        .any(|(ts, u)| *ts == t && *u >= 2 << 30));
    assert_eq!(got.timeline.markers.len(), 1);
    assert!(got.timeline.processes.iter().all(|p| p.pid != 42));
    let r = &got.recording;
    assert_eq!(r.timeline.markers.len(), 2);
    assert!(r
        .timeline
        .markers
        .iter()
        .any(|m| m.kind == MarkerKind::StepEnd));
    assert!(r.timeline.processes.iter().any(|p| p.pid == 42));
    assert_eq!(r.processes.len(), 1);
    assert_eq!(r.errors.len(), 1);
    assert_eq!((r.end_ms, r.exit), (t + 2.0, Some(JobExit::Code(1))));
    assert_eq!(r.devices[0].total, 16 << 30);
}

/// With the default cadence (memory every 100 ms, a process round every 500 ms) and lists
/// read only where they can have changed: few list calls in steady state, and every process
/// that holds 256 MiB for 1 s is still listed with its memory.
#[test]
fn lists_on_change_stay_cheap_and_still_catch_a_256_mib_holder_of_one_second() {
    let (_dir, sim, devices) = sim_box("4x16GiB");
    let monitor = SimMonitor::new(sim.clone());
    let rec = Recorder::start(
        Box::new(monitor),
        &devices,
        Instant::now(),
        RecorderConfig::new(SamplerConfig {
            period: Duration::from_millis(100),
            process_period: Some(Duration::from_millis(500)),
        }),
    );
    // Steady state: after the first round, nothing moves.
    std::thread::sleep(Duration::from_millis(2600));
    let steady = rec.monitor().call_counts().processes;
    // The first round reads 3 lists on each of 4 devices; then nothing for 10 s.
    assert!(steady <= 12, "{steady} list calls in 2.6 s of steady state");
    let me = std::process::id();
    let mut drv = SimDriver::new(SimProcess::new(sim, None));
    for device in [2u32, 0] {
        let ctx = drv.create_context(device).unwrap();
        let a = drv.alloc(ctx, 256 << 20).unwrap();
        std::thread::sleep(Duration::from_millis(1000));
        drv.free(a).unwrap();
        drv.destroy_context(ctx).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    let got = rec.finish(END);
    for device in [2u32, 0] {
        assert!(
            got.timeline
                .processes
                .iter()
                .any(|p| p.pid == me && p.device == device && p.used >= Some(256 << 20)),
            "the 1 s holder on GPU {device} was not listed: {:?}",
            got.timeline.processes
        );
    }
}

#[test]
fn peaks_since_reads_only_the_new_readings() {
    let (_dir, rec, mut drv) = marks_only_recorder();
    let ctx = drv.create_context(0).unwrap();
    let a = drv.alloc(ctx, 2 << 30).unwrap();
    rec.mark(MarkerKind::Marker, "loaded", None);
    let (peaks, n) = rec.peaks_since(0);
    assert_eq!(n, 1);
    assert!(peaks[0] >= 2 << 30);
    drv.free(a).unwrap();
    rec.mark(MarkerKind::Marker, "freed", None);
    let (peaks, n2) = rec.peaks_since(n);
    assert_eq!(n2, 2);
    assert!(
        peaks[0] < 2 << 30,
        "only the reading after the free: {}",
        peaks[0]
    );
}
