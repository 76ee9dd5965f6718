//! The memory sampler: a background thread that reads the memory of every device through a
//! [`Monitor`] at a fixed period (default 5 ms, 1 ms supported) while a run goes on, and hands
//! every complete round to a callback as it is taken (`run` streams it to its JSONL file).
//! Process lists are not read here: they cost ~4.5 ms and hold a driver lock on real drivers,
//! so the recorder reads them on its own thread and slower cadence ([`super::processes`]).
//! Where the thread has no data (a round later than twice its period, a failed query) it
//! records a [`SamplingGap`] ([`Gaps`], shared with the process thread). Queries go through
//! the recording's [`Lanes`] (one worker per device, with a deadline), all devices at once:
//! a hung or failing GPU is a gap on that GPU only, and the others' readings go on. Times are
//! milliseconds since a shared start instant, so samples line up with the markers.

use super::bounded::SeriesBuilder;
use super::{lock_series, Series};
use crate::gpu::lanes::Lanes;
use crate::gpu::Monitor;
use crate::model::{DeviceSeries, GapKind, GapReason, SamplingGap};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default memory sampling period.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(5);
/// Default per-process sampling period.
pub const DEFAULT_PROCESS_PERIOD: Duration = Duration::from_millis(250);

/// How often to sample.
#[derive(Debug, Clone, Copy)]
pub struct SamplerConfig {
    /// Memory of every device.
    pub period: Duration,
    /// Per-process lists, on the recorder's process thread; `None`: never.
    pub process_period: Option<Duration>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            period: DEFAULT_PERIOD,
            process_period: Some(DEFAULT_PROCESS_PERIOD),
        }
    }
}

/// What the memory sampler collected.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub devices: Vec<DeviceSeries>,
    /// Memory rounds taken.
    pub rounds: u64,
    /// Queries that failed (device lost, ...); the sampler keeps going.
    pub errors: u64,
    /// Where the series have no data, in time order.
    pub gaps: Vec<SamplingGap>,
}

impl Samples {
    /// Peak used bytes of a device and when, over all samples.
    pub fn peak(&self, device: u32) -> Option<(f64, u64)> {
        self.devices
            .iter()
            .find(|d| d.device == device)?
            .samples
            .iter()
            .copied()
            .max_by_key(|(_, used)| *used)
    }
}

/// The stop request the sampling threads sleep on: [`StopSignal::wait_until`] returns as
/// soon as [`StopSignal::set`] is called, whatever the period (no polling).
#[derive(Default)]
pub(super) struct StopSignal {
    stopped: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl StopSignal {
    pub(super) fn is_set(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    pub(super) fn set(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        // Taken after the store: a waiter either saw the flag or is waiting and is woken.
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }

    /// Sleep until `deadline` or until stopped; whether stopped.
    fn wait_until(&self, deadline: Instant) -> bool {
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.is_set() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = match self.cv.wait_timeout(g, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

/// Called by the memory thread after each round where at least one device answered:
/// `(t_ms, used bytes per device, `None` where that device gave no reading)`.
pub type OnRound = Box<dyn FnMut(f64, &[Option<u64>]) + Send>;

/// Called on the sampler thread at the start of every round, before its readings, with the
/// round's time: what must be stamped in the same clock as the readings and before them
/// (`run` reads the job's marker file here, so the level at a marker is the reading taken
/// before the marker was written).
pub type BeforeRound = Box<dyn FnMut(f64) + Send>;

/// The sampler thread's callbacks.
#[derive(Default)]
pub struct Hooks {
    pub before: Option<BeforeRound>,
    pub after: Option<OnRound>,
}

/// The latest reading of every device (sampler order; `None`: none yet, or a gap).
pub type Latest = Arc<Mutex<Vec<Option<u64>>>>;

/// A running memory sampler.
pub struct Sampler {
    stop: Arc<StopSignal>,
    latest: Latest,
    series: Series,
    totals: Vec<(u32, u64)>,
    handle: Option<JoinHandle<Samples>>,
}

pub(super) fn ms_since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1000.0
}

impl Sampler {
    /// Start sampling the memory of `devices` (physical index, total bytes) through
    /// `monitor` every `period`, calling `on_round` on the sampler thread after every
    /// complete round with its time (ms since `t0`) and the used bytes of every device in
    /// `devices` order (`None` for a device whose query failed or hung; a round where no
    /// device answered is not passed on). The callback runs inside the sampling loop: it
    /// must be quick and never block for long.
    pub fn start(
        monitor: Arc<dyn Monitor>,
        devices: Vec<(u32, u64)>,
        t0: Instant,
        period: Duration,
        on_round: Option<OnRound>,
    ) -> Sampler {
        let lanes = Arc::new(Lanes::new(monitor));
        let series = Arc::new(Mutex::new(
            devices.iter().map(|_| SeriesBuilder::unbounded()).collect(),
        ));
        let hooks = Hooks {
            before: None,
            after: on_round,
        };
        Sampler::start_with(lanes, series, devices, t0, period, hooks)
    }

    /// [`Sampler::start`] through the recording's own lanes, into its own series (one
    /// builder per device, in `devices` order): then [`Sampler::stop`] returns no series.
    pub(super) fn start_with(
        lanes: Arc<Lanes>,
        series: Series,
        devices: Vec<(u32, u64)>,
        t0: Instant,
        period: Duration,
        hooks: Hooks,
    ) -> Sampler {
        let pacer = every(period);
        Sampler::start_paced(lanes, series, devices, t0, period, hooks, pacer)
    }

    /// [`Sampler::start_with`] taking its rounds when `pacer` returns (the recording's:
    /// every `period`; the tests': when the test says), `period` only bounding a round as
    /// late.
    fn start_paced(
        lanes: Arc<Lanes>,
        series: Series,
        devices: Vec<(u32, u64)>,
        t0: Instant,
        period: Duration,
        hooks: Hooks,
        pacer: Pacer,
    ) -> Sampler {
        let stop = Arc::new(StopSignal::default());
        let flag = stop.clone();
        let latest: Latest = Arc::new(Mutex::new(vec![None; devices.len()]));
        let (to, into) = (latest.clone(), series.clone());
        let totals = devices.clone();
        let handle = std::thread::Builder::new()
            .name("vramdoc-sampler".into())
            .spawn(move || {
                let cx = LoopCx {
                    lanes: &lanes,
                    devices: &devices,
                    latest: &to,
                    series: &into,
                };
                memory_loop(&cx, t0, period, &flag, hooks, pacer)
            })
            .ok();
        Sampler {
            stop,
            latest,
            series,
            totals,
            handle,
        }
    }

    /// The latest reading of every device, updated each round.
    pub fn latest(&self) -> Latest {
        self.latest.clone()
    }

    /// Stop the thread (after one closing round) and return what it collected.
    pub fn stop(mut self) -> Samples {
        self.stop.set();
        let mut out = self
            .handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        out.gaps.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        // Series of its own (not a recorder's): returned here.
        let series = std::mem::take(&mut self.series);
        if let Ok(m) = Arc::try_unwrap(series) {
            let builders = m.into_inner().unwrap_or_else(|e| e.into_inner());
            out.devices = self
                .totals
                .iter()
                .zip(builders)
                .map(|((d, total), b)| DeviceSeries {
                    device: *d,
                    total: *total,
                    samples: b.finish(),
                })
                .collect();
        }
        out
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.set();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Gaps of one sampling thread: late rounds, and failed queries per device (consecutive
/// failures of one device merge into one gap, so a lost device is one entry, not thousands).
pub(super) struct Gaps {
    kind: GapKind,
    limit_ms: f64,
    last_round: Option<f64>,
    /// Last good sample per device.
    last_ok: BTreeMap<u32, f64>,
    open: BTreeMap<u32, SamplingGap>,
    done: Vec<SamplingGap>,
}

impl Gaps {
    pub(super) fn new(kind: GapKind, period: Duration) -> Gaps {
        Gaps {
            kind,
            limit_ms: 2.0 * period.as_secs_f64() * 1000.0,
            last_round: None,
            last_ok: BTreeMap::new(),
            open: BTreeMap::new(),
            done: Vec::new(),
        }
    }

    /// A round starts at `t`: record it as late when more than twice the period passed.
    pub(super) fn round(&mut self, t: f64) {
        if let Some(prev) = self.last_round {
            if t - prev > self.limit_ms {
                let missed = ((t - prev) / (self.limit_ms / 2.0)).floor().max(2.0) as u64 - 1;
                match self.done.last_mut() {
                    // Consecutive late rounds merge into one gap.
                    Some(g)
                        if g.device.is_none()
                            && g.reason == GapReason::Late
                            && g.end_ms == prev =>
                    {
                        g.end_ms = t;
                        g.count += missed;
                    }
                    _ => self.done.push(SamplingGap {
                        kind: self.kind.clone(),
                        device: None,
                        start_ms: prev,
                        end_ms: t,
                        count: missed,
                        reason: GapReason::Late,
                    }),
                }
            }
        }
        self.last_round = Some(t);
    }

    pub(super) fn ok(&mut self, device: u32, t: f64) {
        self.last_ok.insert(device, t);
        if let Some(mut g) = self.open.remove(&device) {
            g.end_ms = t;
            self.done.push(g);
        }
    }

    /// A failed query; the error is formatted only when it opens a gap (a lost device fails
    /// every round).
    pub(super) fn failed(&mut self, device: u32, t: f64, error: &dyn std::fmt::Display) {
        let start = self.last_ok.get(&device).copied().unwrap_or(t);
        let g = self.open.entry(device).or_insert_with(|| SamplingGap {
            kind: self.kind.clone(),
            device: Some(device),
            start_ms: start,
            end_ms: t,
            count: 0,
            reason: GapReason::Failed(
                error
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            ),
        });
        g.end_ms = t;
        g.count += 1;
    }

    pub(super) fn finish(mut self, t: f64) -> Vec<SamplingGap> {
        for (_, mut g) in std::mem::take(&mut self.open) {
            g.end_ms = t;
            self.done.push(g);
        }
        self.done
    }
}

/// Sleep until `next` (or return at once when behind: missed ticks are skipped, not burst).
/// Sleeps on the stop signal, so `stop()` returns at once even with a long period.
pub(super) fn pace(next: &mut Instant, period: Duration, stop: &StopSignal) {
    *next += period;
    let now = Instant::now();
    if *next <= now {
        *next = now;
        return;
    }
    stop.wait_until(*next);
}

/// Waits until the memory loop's next round, returning at once when stopped: every period
/// in a recording ([`every`]); in the tests, a clock the test drives.
type Pacer = Box<dyn FnMut(&StopSignal) + Send>;

/// A round every `period` from now ([`pace`]).
fn every(period: Duration) -> Pacer {
    let period = period.max(MIN_PERIOD);
    let mut next = Instant::now();
    Box::new(move |stop| pace(&mut next, period, stop))
}

/// The shortest period the memory loop keeps.
const MIN_PERIOD: Duration = Duration::from_micros(100);

/// What the memory loop reads through and writes to.
struct LoopCx<'a> {
    lanes: &'a Lanes,
    devices: &'a [(u32, u64)],
    latest: &'a Mutex<Vec<Option<u64>>>,
    series: &'a Mutex<Vec<SeriesBuilder>>,
}

fn memory_loop(
    cx: &LoopCx,
    t0: Instant,
    period: Duration,
    stop: &StopSignal,
    hooks: Hooks,
    mut pacer: Pacer,
) -> Samples {
    let Hooks {
        mut before,
        after: mut on_round,
    } = hooks;
    let (lanes, devices) = (cx.lanes, cx.devices);
    let mut out = Samples::default();
    let indices: Vec<u32> = devices.iter().map(|(d, _)| *d).collect();
    let mut gaps = Gaps::new(GapKind::Memory, period.max(MIN_PERIOD));
    let mut used: Vec<Option<u64>> = Vec::with_capacity(devices.len());
    loop {
        // One more round after stop: the series ends with the state at the end of the run
        // (a device lost in the last moments shows as a gap, not as nothing).
        let last = stop.is_set();
        let t_round = ms_since(t0);
        if let Some(b) = before.as_mut() {
            b(t_round);
        }
        gaps.round(t_round);
        used.clear();
        // Each reading is stamped when its call ran on its lane, not when the round began.
        let mut stamps: Vec<f64> = Vec::with_capacity(devices.len());
        let answers = lanes.memory_all_at(&indices);
        for (device, answer) in indices.iter().zip(answers) {
            match answer {
                Ok((ran, m)) => {
                    let at =
                        (ran.saturating_duration_since(t0).as_secs_f64() * 1000.0).max(t_round);
                    // A gap that follows starts at this reading, as it is stored.
                    gaps.ok(*device, at);
                    used.push(Some(m.used));
                    stamps.push(at);
                }
                Err(e) => {
                    out.errors += 1;
                    gaps.failed(*device, t_round, &e);
                    used.push(None);
                    stamps.push(t_round);
                }
            }
        }
        for ((b, u), at) in lock_series(cx.series).iter_mut().zip(&used).zip(&stamps) {
            if let Some(u) = u {
                b.push(*at, *u);
            }
        }
        let t_round = stamps.iter().copied().fold(t_round, f64::max);
        out.rounds += 1;
        cx.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone_from(&used);
        if let (Some(f), true) = (on_round.as_mut(), used.iter().any(Option::is_some)) {
            f(t_round, &used);
        }
        if last {
            break;
        }
        pacer(stop);
    }
    out.gaps = gaps.finish(ms_since(t0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::{SimDriver, SimMonitor};
    use crate::gpu::Driver;
    use crate::record::tests::{until, GUARD};
    use std::sync::mpsc;
    use vramdoc_sim::{InitOptions, SimBox, SimProcess};

    fn sim_box(spec: &str) -> (tempfile::TempDir, SimBox) {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), spec, &InitOptions::default()).unwrap();
        (dir, sim)
    }

    /// Lanes on `sim` whose deadline is the tests' guard: on a loaded machine a slow answer
    /// is still an answer (the deadline itself is tested in `lanes`).
    fn patient_lanes(sim: &SimBox) -> Arc<Lanes> {
        Arc::new(Lanes::with_deadline(
            Arc::new(SimMonitor::new(sim.clone())),
            GUARD,
        ))
    }

    /// Series of the sampler's own (returned by [`Sampler::stop`]).
    fn own_series(devices: usize) -> Series {
        Arc::new(Mutex::new(
            (0..devices).map(|_| SeriesBuilder::unbounded()).collect(),
        ))
    }

    /// A sampler of both GPUs of a 2x16GiB box on a clock the test drives: its first round
    /// is taken when [`stepped`] returns, then one round per [`Stepped::step`], and the
    /// closing one at [`Stepped::stop`]. Its period (an hour) only says when a round is late:
    /// none is.
    struct Stepped {
        // Dropped before the sampler (declaration order): a test that fails midway never
        // leaves the sampler's thread waiting for a step it will not get.
        go: mpsc::Sender<()>,
        taken: mpsc::Receiver<()>,
        sampler: Sampler,
    }

    fn stepped(sim: &SimBox, on_round: Option<OnRound>) -> Stepped {
        let (go, steps) = mpsc::channel::<()>();
        let (took, taken) = mpsc::channel::<()>();
        let pacer: Pacer = Box::new(move |stop: &StopSignal| {
            // The round before this wait is complete.
            let _ = took.send(());
            if steps.recv().is_err() {
                // No more steps: only the stop (and its closing round) is left.
                while !stop.wait_until(Instant::now() + Duration::from_secs(3600)) {}
            }
        });
        let devices = vec![(0, 16 << 30), (1, 16 << 30)];
        let sampler = Sampler::start_paced(
            patient_lanes(sim),
            own_series(devices.len()),
            devices,
            Instant::now(),
            Duration::from_secs(3600),
            Hooks {
                before: None,
                after: on_round,
            },
            pacer,
        );
        let s = Stepped { go, taken, sampler };
        s.taken();
        s
    }

    impl Stepped {
        fn taken(&self) {
            self.taken
                .recv_timeout(GUARD)
                .expect("the sampler to take its round");
        }

        /// One round, taken when this returns.
        fn step(&self) {
            self.go.send(()).expect("the sampler's thread is running");
            self.taken();
        }

        fn stop(self) -> Samples {
            let Stepped { go, taken, sampler } = self;
            drop((go, taken));
            sampler.stop()
        }
    }

    #[test]
    fn the_stop_signal_wakes_a_sleeper_before_its_deadline() {
        let stop = Arc::new(StopSignal::default());
        assert!(
            !stop.wait_until(Instant::now()),
            "a passed deadline returns"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let sleeper = std::thread::spawn(move || {
            let woken = s2.wait_until(Instant::now() + Duration::from_secs(3600));
            let _ = tx.send(woken);
        });
        stop.set();
        // An hour-long sleep ended by `set`: the thread says it was stopped, not timed out.
        assert!(rx.recv().unwrap());
        sleeper.join().unwrap();
        assert!(stop.wait_until(Instant::now() + Duration::from_secs(3600)));
    }

    /// A loop behind its ticks takes one round at once and starts counting again from now:
    /// the missed ticks are skipped, not taken in a burst.
    #[test]
    fn pace_skips_missed_ticks_instead_of_bursting() {
        let stop = StopSignal::default();
        let period = Duration::from_millis(1);
        let before = Instant::now();
        // Ten ticks behind (the machine's uptime is longer than 10 ms).
        let mut next = before - 10 * period;
        pace(&mut next, period, &stop);
        assert!(
            next >= before,
            "counting from now, not from the missed tick"
        );
    }

    #[test]
    fn stop_ends_a_sampler_with_an_hour_long_period_at_once() {
        let (_dir, sim) = sim_box("1x16GiB");
        let s = Sampler::start_with(
            patient_lanes(&sim),
            own_series(1),
            vec![(0, 16 << 30)],
            Instant::now(),
            Duration::from_secs(3600),
            Hooks::default(),
        );
        let latest = s.latest();
        until("the first round", || {
            latest.lock().unwrap()[0].is_some().then_some(())
        });
        // The stop returns long before the hour (on its own thread: a sleeper that stop
        // did not wake fails after the guard instead of hanging the suite).
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(s.stop()));
        let got = rx
            .recv_timeout(GUARD)
            .expect("stop to end the hour-long sleep");
        // The first round, then the closing round taken at stop (not an hour later).
        assert_eq!(got.rounds, 2);
        assert_eq!(got.devices[0].samples.len(), 2);
    }

    #[test]
    fn on_round_sees_every_complete_round_as_it_is_taken() {
        let (_dir, sim) = sim_box("2x16GiB");
        type Rounds = Vec<(f64, Vec<u64>)>;
        let seen: Arc<Mutex<Rounds>> = Arc::default();
        let sink = seen.clone();
        let s = stepped(
            &sim,
            Some(Box::new(move |t, used: &[Option<u64>]| {
                let used = used.iter().map(|u| u.unwrap()).collect();
                sink.lock().unwrap().push((t, used))
            })),
        );
        for _ in 0..3 {
            s.step();
        }
        let got = s.stop();
        let seen = seen.lock().unwrap();
        // The first round, three steps, the closing round: each passed on.
        assert_eq!(got.rounds, 5);
        assert_eq!(seen.len(), 5);
        assert!(seen.iter().all(|(_, u)| u.len() == 2));
        assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(got.devices[0].samples.len(), seen.len());
    }

    /// Every round reads every device, and the round taken while an allocation is held
    /// shows it (the rounds are the test's: before, during and after the pulse).
    #[test]
    fn samples_every_device_and_sees_a_pulse() {
        let (_dir, sim) = sim_box("2x16GiB");
        let s = stepped(&sim, None);
        let mut drv = SimDriver::new(SimProcess::new(sim, None));
        let ctx = drv.create_context(1).unwrap();
        let a = drv.alloc(ctx, 1 << 30).unwrap();
        s.step();
        drv.free(a).unwrap();
        s.step();
        let got = s.stop();
        assert_eq!(got.rounds, 4, "first, two steps, closing");
        assert_eq!(got.devices.len(), 2);
        for d in &got.devices {
            assert_eq!(d.samples.len(), 4, "GPU {}: {:?}", d.device, d.samples);
        }
        let used1: Vec<u64> = got.devices[1].samples.iter().map(|(_, u)| *u).collect();
        assert!(used1[1] >= 1 << 30, "the pulse: {used1:?}");
        assert!(
            used1[0] < 1 << 30 && used1[2] < 1 << 30 && used1[3] < 1 << 30,
            "only the pulse: {used1:?}"
        );
        assert_eq!(got.peak(0).unwrap().1, 0);
    }

    #[test]
    fn failed_queries_become_one_gap_per_device() {
        let (_dir, sim) = sim_box("2x16GiB");
        let s = stepped(&sim, None);
        sim.set_faults(&vramdoc_sim::Faults {
            lost_devices: vec![1],
            ..Default::default()
        })
        .unwrap();
        s.step();
        s.step();
        let got = s.stop();
        // The first round answered; the two steps and the closing round failed on GPU 1.
        assert_eq!(got.errors, 3, "{:?}", got.gaps);
        let lost: Vec<_> = got.gaps.iter().filter(|g| g.device == Some(1)).collect();
        assert_eq!(lost.len(), 1, "{:?}", got.gaps);
        assert_eq!(lost[0].kind, GapKind::Memory);
        assert_eq!(lost[0].count, 3, "one gap for three failures");
        assert!(lost[0].end_ms >= lost[0].start_ms);
        assert!(
            matches!(&lost[0].reason, GapReason::Failed(e) if e.contains("lost")),
            "{}",
            lost[0].reason
        );
        // GPU 0 was read in every one of those rounds, and answered.
        assert_eq!(got.devices[0].samples.len(), 4);
        assert!(!got.gaps.iter().any(|g| g.device == Some(0)));
        // The gap starts at GPU 1's last reading as the series stores it: each reading is
        // stamped when its own call ran on its lane, after the round began, and a gap that
        // began at the round's start came before the only reading there was, so `gpu-lost`
        // found none before it ("last reading: none", a CI failure under load).
        let readings = &got.devices[1].samples;
        assert_eq!(
            readings.len(),
            1,
            "only the first round answered: {readings:?}"
        );
        assert_eq!(lost[0].start_ms, readings[0].0, "{:?}", got.gaps);
    }
}
