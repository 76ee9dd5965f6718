//! The recorder on a simulated box: one process-list path with gaps, readings at markers,
//! and the recording the rules take.

use super::*;
use crate::backend::sim::{SimDriver, SimMonitor};
use crate::gpu::Driver;
use crate::gpu::{CallCounts, GpuProcess, MemoryInfo, ProcessKind, Versions};
use crate::model::{GapKind, GapReason};
use policy::ListPolicy;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Condvar;
use std::time::Duration;
use vramdoc_sim::{InitOptions, SimBox, SimProcess};

/// The longest a test waits for an event of the recorder's threads: a guard against a hang,
/// never a speed the test expects.
pub(crate) const GUARD: Duration = Duration::from_secs(30);

/// Polls `f` until it gives a value and returns it; fails naming `what` after [`GUARD`].
pub(crate) fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < GUARD,
            "timed out after {GUARD:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Process-list rounds the recorder's process thread has completed, and the queries of
/// them that failed.
fn list_rounds(rec: &Recorder) -> (u64, u64) {
    let lists = rec.lists.as_ref().expect("a recorder with process lists");
    let l = lists.lock().unwrap();
    (l.rounds, l.errors)
}

/// The sampler's latest round (recorded-device order; `None`: no answer).
fn latest(rec: &Recorder) -> Vec<Option<u64>> {
    rec.latest.lock().unwrap().clone()
}

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
    // This process on both GPUs: GPU 0's lists would show it, were they read.
    let ctx0 = drv.create_context(0).unwrap();
    drv.alloc(ctx0, 1 << 20).unwrap();
    let ctx = drv.create_context(1).unwrap();
    let a = drv.alloc(ctx, 1 << 30).unwrap();
    // Held until a whole process round began after the allocation (the one in progress
    // may have read before it) and the sampler read it.
    let (after, _) = list_rounds(&rec);
    until("a process round begun after the allocation", || {
        (list_rounds(&rec).0 >= after + 2).then_some(())
    });
    until("the sampler's reading of the allocation", || {
        (latest(&rec)[1] >= Some(1 << 30)).then_some(())
    });
    drv.free(a).unwrap();
    let got = rec.finish(END);
    let me = std::process::id();
    assert!(got
        .recording
        .timeline
        .processes
        .iter()
        .any(|p| p.pid == me && p.device == 1));
    assert!(
        got.recording
            .timeline
            .processes
            .iter()
            .all(|p| p.device == 1),
        "GPU 0's lists were read: {:?}",
        got.recording.timeline.processes
    );
    assert!(got.peaks[1].peak_used >= 1 << 30);
    // A PID the lists showed is a neighbour of the recording (no tree, none fed).
    assert!(got
        .recording
        .processes
        .iter()
        .any(|p| p.pid == me && !p.in_tree));
}

/// A gate a test keeps shut: process lists wait at it (a driver holding its lock) until the
/// test opens it, or at most [`GUARD`] (so a recorder that waits for them ends the test
/// with a failure, not a hang).
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    /// Process-list calls that reached the gate.
    waited: AtomicU64,
}

impl Gate {
    fn pass(&self) {
        self.waited.fetch_add(1, Ordering::SeqCst);
        let open = self.open.lock().unwrap();
        let _ = self
            .cv
            .wait_timeout_while(open, GUARD, |open| !*open)
            .unwrap();
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    fn is_shut(&self) -> bool {
        !*self.open.lock().unwrap()
    }
}

/// The box's monitor with its process lists behind a [`Gate`], counting memory queries and
/// noting when the latest one returned.
struct Gated {
    inner: SimMonitor,
    gate: Arc<Gate>,
    /// This device's memory queries wait at the gate too.
    gate_memory_of: Option<u32>,
    memory_calls: Arc<AtomicU64>,
    memory_returned: Arc<Mutex<Option<Instant>>>,
    /// When each device's latest memory query returned, and how many have.
    returned_by_device: Arc<Mutex<BTreeMap<u32, (Instant, u64)>>>,
}

impl Gated {
    fn new(sim: SimBox, gate: Arc<Gate>) -> Gated {
        Gated {
            inner: SimMonitor::new(sim),
            gate,
            gate_memory_of: None,
            memory_calls: Arc::default(),
            memory_returned: Arc::default(),
            returned_by_device: Arc::default(),
        }
    }
}

impl crate::gpu::Monitor for Gated {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn versions(&self) -> crate::gpu::Result<Versions> {
        self.inner.versions()
    }
    fn devices(&self) -> crate::gpu::Result<Vec<DeviceInfo>> {
        self.inner.devices()
    }
    fn memory(&self, index: u32) -> crate::gpu::Result<MemoryInfo> {
        self.memory_calls.fetch_add(1, Ordering::SeqCst);
        if self.gate_memory_of == Some(index) {
            self.gate.pass();
        }
        let m = self.inner.memory(index);
        let now = Instant::now();
        *self.memory_returned.lock().unwrap() = Some(now);
        let mut by = self.returned_by_device.lock().unwrap();
        let n = by.get(&index).map_or(0, |(_, n)| *n);
        by.insert(index, (now, n + 1));
        m
    }
    fn processes(&self, index: u32) -> crate::gpu::Result<Vec<GpuProcess>> {
        self.gate.pass();
        self.inner.processes(index)
    }
    fn process_list(&self, index: u32, kind: ProcessKind) -> crate::gpu::Result<Vec<GpuProcess>> {
        self.gate.pass();
        self.inner.process_list(index, kind)
    }
    fn call_counts(&self) -> CallCounts {
        self.inner.call_counts()
    }
}

/// While a process list is stuck in the driver, the memory loop keeps reading and a marker
/// is taken; the stuck round is a late gap of the process thread.
#[test]
fn process_lists_never_stall_the_memory_loop_and_late_rounds_are_gaps() {
    let (_dir, sim, devices) = sim_box("2x16GiB");
    let gate = Arc::new(Gate::default());
    let monitor = Gated::new(sim, gate.clone());
    let memory_calls = monitor.memory_calls.clone();
    let rec = Recorder::start(
        Box::new(monitor),
        &devices,
        Instant::now(),
        RecorderConfig {
            process_devices: Some(vec![1]),
            list_policy: ListPolicy::Every,
            ..RecorderConfig::new(cadence(1, 10))
        },
    );
    until("the first process list to wait at the gate", || {
        (gate.waited.load(Ordering::SeqCst) >= 1).then_some(())
    });
    let stuck_ms = rec.t_ms();
    // Three memory rounds (two GPUs each) while the list is stuck.
    let before = memory_calls.load(Ordering::SeqCst);
    until("memory rounds while the list is stuck", || {
        (memory_calls.load(Ordering::SeqCst) >= before + 6).then_some(())
    });
    // A marker is not held up by the stuck list either.
    let t_mark = rec.mark(MarkerKind::Marker, "mid-query", None);
    assert!(gate.is_shut(), "the marker waited for the stuck list");
    // The stuck round lasts past twice its period (what makes it late).
    until("the stuck round to outlast two periods", || {
        (rec.t_ms() > stuck_ms + 30.0).then_some(())
    });
    let opened_ms = rec.t_ms();
    gate.open();
    // The round after the stuck one has begun (and ended): it is what sees the lateness.
    until("a process round after the stuck one", || {
        (list_rounds(&rec).0 >= 2).then_some(())
    });
    let got = rec.finish(END);
    let during = got.recording.timeline.devices[0]
        .samples
        .iter()
        .filter(|(t, _)| *t > stuck_ms && *t < opened_ms && *t != t_mark)
        .count();
    assert!(during > 0, "memory loop stalled behind the process query");
    assert!(
        got.recording
            .timeline
            .gaps
            .iter()
            .any(|g| g.kind == processes::GAP_KIND
                && g.reason == GapReason::Late
                && g.device.is_none()),
        "{:?}",
        got.recording.timeline.gaps
    );
}

/// A recorder over `monitor` whose sampler reads once, at the start, and never again in a
/// test's time (no process lists): the next memory calls are the test's own. Returns once
/// that first round is done.
fn after_one_round(monitor: Gated, devices: &[DeviceInfo], t0: Instant) -> Recorder {
    let rec = Recorder::start(
        Box::new(monitor),
        devices,
        t0,
        RecorderConfig::new(SamplerConfig {
            period: Duration::from_secs(3600),
            process_period: None,
        }),
    );
    until("the sampler's first round", || {
        latest(&rec).iter().all(Option::is_some).then_some(())
    });
    rec
}

/// A reading handed over late (a loaded machine) is stamped when its calls ran: before the
/// last of them returned, never when the caller got the answer.
#[test]
fn memory_now_at_is_stamped_when_the_calls_ran() {
    let (_dir, sim, devices) = sim_box("2x16GiB");
    let gate = Arc::new(Gate::default());
    gate.open();
    let monitor = Gated::new(sim, gate);
    let returned = monitor.memory_returned.clone();
    let t0 = Instant::now();
    let rec = after_one_round(monitor, &devices, t0);
    let r = rec.memory_now_at();
    let last_returned = returned.lock().unwrap().expect("memory was read");
    assert!(r.used().iter().all(Option::is_some), "{r:?}");
    for (t, _) in r.devices.iter().flatten() {
        assert!(
            *t <= last_returned.duration_since(t0).as_secs_f64() * 1000.0,
            "stamped after its calls returned: {t} ms"
        );
    }
    rec.finish(END);
}

/// One device's lane starts late (its previous memory query is still in the driver): each
/// device's value keeps the time its own call ran, so the early device's value is never
/// placed after a change it did not see.
#[test]
fn each_device_of_a_reading_keeps_the_time_its_call_ran() {
    let (_dir, sim, devices) = sim_box("2x16GiB");
    let gate = Arc::new(Gate::default());
    gate.open();
    let mut monitor = Gated::new(sim.clone(), gate.clone());
    monitor.gate_memory_of = Some(1);
    let returned = monitor.returned_by_device.clone();
    let t0 = Instant::now();
    let rec = Arc::new(after_one_round(monitor, &devices, t0));
    // A reading whose query of device 1 is held in the driver.
    *gate.open.lock().unwrap() = false;
    let waited = gate.waited.load(Ordering::SeqCst);
    let held = {
        let rec = rec.clone();
        std::thread::spawn(move || rec.memory_now_at())
    };
    until("device 1's query in the driver", || {
        (gate.waited.load(Ordering::SeqCst) > waited).then_some(())
    });
    let dev0_reads =
        |r: &Mutex<BTreeMap<u32, (Instant, u64)>>| r.lock().unwrap().get(&0).map_or(0, |(_, n)| *n);
    let before = dev0_reads(&returned);
    // The reading under test: device 0's lane answers now, device 1's waits its turn.
    let reading = {
        let rec = rec.clone();
        std::thread::spawn(move || rec.memory_now_at())
    };
    until("device 0 read", || {
        (dev0_reads(&returned) > before).then_some(())
    });
    // Something changes on device 0 after its value was read; then device 1's lane goes on.
    let mut drv = SimDriver::new(SimProcess::new(sim, None));
    let ctx = drv.create_context(0).unwrap();
    let later = Instant::now();
    drv.alloc(ctx, 1 << 30).unwrap();
    gate.open();
    let r = reading.join().unwrap();
    held.join().unwrap();
    let ms = |i: Instant| i.duration_since(t0).as_secs_f64() * 1000.0;
    let (t_dev0, _) = r.devices[0].expect("device 0 answered");
    let (t_dev1, _) = r.devices[1].expect("device 1 answered");
    assert!(t_dev0 < ms(later), "device 0 read before the change: {r:?}");
    assert!(t_dev1 > ms(later), "device 1's query ran after it: {r:?}");
    assert_eq!(r.first(), t_dev0);
    let rec = Arc::into_inner(rec).expect("the threads are done");
    rec.keep(&r);
    let got = rec.finish(END);
    let series = &got.recording.timeline.devices[0].samples;
    assert!(
        series.iter().any(|(t, _)| *t == t_dev0),
        "device 0's value is kept at its own time: {series:?}"
    );
    assert!(
        !series.iter().any(|(t, _)| *t == t_dev1),
        "and not at device 1's: {series:?}"
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
    until("both GPUs read and a process round", || {
        (latest(&rec).iter().all(Option::is_some) && list_rounds(&rec).0 >= 1).then_some(())
    });
    sim.set_faults(&vramdoc_sim::Faults {
        lost_devices: vec![1],
        ..Default::default()
    })
    .unwrap();
    // A memory round and a process round after the loss, each reading GPU 0 as well.
    until(
        "a memory round where GPU 0 answers and GPU 1 does not",
        || {
            let l = latest(&rec);
            (l[0].is_some() && l[1].is_none()).then_some(())
        },
    );
    let (rounds, _) = list_rounds(&rec);
    until(
        "a failed list of GPU 1, and a process round after it",
        || {
            let (r, errors) = list_rounds(&rec);
            (errors >= 1 && r > rounds).then_some(())
        },
    );
    let got = rec.finish(END);
    assert!(got.errors > 0);
    for kind in [GapKind::Memory, processes::GAP_KIND] {
        let lost: Vec<_> = got
            .recording
            .timeline
            .gaps
            .iter()
            .filter(|g| g.kind == kind && g.device == Some(1))
            .collect();
        assert_eq!(lost.len(), 1, "{kind}: {:?}", got.recording.timeline.gaps);
        assert!(
            matches!(&lost[0].reason, GapReason::Failed(e) if e.contains("lost")),
            "{}",
            lost[0].reason
        );
    }
    assert!(!got
        .recording
        .timeline
        .gaps
        .iter()
        .any(|g| g.device == Some(0)));
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
        facts: None,
    });
    let got = rec.finish(JobEnd {
        end_ms: t + 2.0,
        exit: Some(JobExit::Code(1)),
    });
    // The marker's reading is on the chart although the period is an hour.
    assert!(got.recording.timeline.devices[0]
        .samples
        .iter()
        .any(|(ts, u)| *ts == t && *u >= 2 << 30));
    assert_eq!(got.recording.timeline.markers.len(), 1);
    assert!(got.recording.timeline.processes.iter().all(|p| p.pid != 42));
    let r = &got.recording;
    assert_eq!(r.judged_markers().len(), 2);
    assert!(r
        .rules_only
        .markers
        .iter()
        .any(|m| m.kind == MarkerKind::StepEnd));
    assert!(r.judged_processes().any(|p| p.pid == 42));
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
            got.recording
                .timeline
                .processes
                .iter()
                .any(|p| p.pid == me && p.device == device && p.used >= Some(256 << 20)),
            "the 1 s holder on GPU {device} was not listed: {:?}",
            got.recording.timeline.processes
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
