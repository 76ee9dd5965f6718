//! The sampler: background threads that read GPU state through a [`Monitor`] while a run
//! goes on. The memory thread reads the memory of every device at a fixed period (default
//! 5 ms, 1 ms supported); a separate process thread reads the per-process lists of only the
//! devices that matter, on its own slower cadence (default 250 ms): on real drivers that
//! query takes ~4.5 ms and holds a driver lock, so it never runs inside the memory loop.
//! Where either thread has no data (a round later than twice its period, a failed query)
//! the sampler records a [`SamplingGap`]. [`Sampler::start_with`] also hands every complete
//! memory round to a callback as it is taken (`run` streams it to its JSONL file). Times are milliseconds since a shared start
//! instant, so samples line up with the step markers the replay engine records.

use crate::gpu::Monitor;
use crate::report::{DeviceSeries, ProcessSample, SamplingGap};
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
    pub period: Duration,
    /// Per-process lists, on their own thread; `None`: never.
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

/// What a sampler collected.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub devices: Vec<DeviceSeries>,
    pub processes: Vec<ProcessSample>,
    /// Memory rounds taken.
    pub rounds: u64,
    /// Queries that failed (device lost, ...); the sampler keeps going.
    pub errors: u64,
    /// Process-list rounds taken (on the process thread).
    pub process_rounds: u64,
    /// Where the timeline has no data, in time order.
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
pub(crate) struct StopSignal {
    stopped: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl StopSignal {
    pub(crate) fn is_set(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    pub(crate) fn set(&self) {
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

/// Called by the memory thread after each complete round: `(t_ms, used bytes per device)`.
pub type OnRound = Box<dyn FnMut(f64, &[u64]) + Send>;

/// Running sampler threads.
pub struct Sampler {
    stop: Arc<StopSignal>,
    handle: Option<JoinHandle<Samples>>,
    process_handle: Option<JoinHandle<ProcessOut>>,
}

fn ms_since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1000.0
}

impl Sampler {
    /// Start sampling `devices` (physical index, total bytes) through `monitor`: memory of
    /// every one, process lists of every one.
    pub fn start(
        monitor: Box<dyn Monitor>,
        devices: Vec<(u32, u64)>,
        t0: Instant,
        cfg: SamplerConfig,
    ) -> Sampler {
        let process_devices = devices.iter().map(|(d, _)| *d).collect();
        Sampler::start_for(monitor, devices, process_devices, t0, cfg)
    }

    /// Like [`Sampler::start`], with process lists read only on `process_devices` (the
    /// devices that matter for the run; each list costs ~4.5 ms on real drivers).
    pub fn start_for(
        monitor: Box<dyn Monitor>,
        devices: Vec<(u32, u64)>,
        process_devices: Vec<u32>,
        t0: Instant,
        cfg: SamplerConfig,
    ) -> Sampler {
        Sampler::start_with(monitor, devices, process_devices, t0, cfg, None)
    }

    /// Like [`Sampler::start_for`], calling `on_round` on the memory thread after every
    /// complete memory round with its time (ms since `t0`) and the used bytes of every
    /// device in `devices` order (a round where a query failed is not passed on). The
    /// callback runs inside the sampling loop: it must be quick and never block for long.
    pub fn start_with(
        monitor: Box<dyn Monitor>,
        devices: Vec<(u32, u64)>,
        process_devices: Vec<u32>,
        t0: Instant,
        cfg: SamplerConfig,
        on_round: Option<OnRound>,
    ) -> Sampler {
        let monitor: Arc<dyn Monitor> = Arc::from(monitor);
        let stop = Arc::new(StopSignal::default());
        let process_handle = match cfg.process_period {
            Some(pp) if !process_devices.is_empty() => {
                let (m, flag) = (monitor.clone(), stop.clone());
                std::thread::Builder::new()
                    .name("vramdoc-processes".into())
                    .spawn(move || process_loop(m.as_ref(), &process_devices, t0, pp, &flag))
                    .ok()
            }
            _ => None,
        };
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("vramdoc-sampler".into())
            .spawn(move || memory_loop(monitor.as_ref(), &devices, t0, cfg.period, &flag, on_round))
            .ok();
        Sampler {
            stop,
            handle,
            process_handle,
        }
    }

    /// Stop the threads and return what they collected.
    pub fn stop(mut self) -> Samples {
        self.stop.set();
        let mut out = self
            .handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if let Some(p) = self.process_handle.take().and_then(|h| h.join().ok()) {
            out.processes = p.samples;
            out.process_rounds = p.rounds;
            out.errors += p.errors;
            out.gaps.extend(p.gaps);
        }
        out.gaps.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        out
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.set();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        if let Some(h) = self.process_handle.take() {
            let _ = h.join();
        }
    }
}

/// Gaps of one sampling thread: late rounds, and failed queries per device (consecutive
/// failures of one device merge into one gap, so a lost device is one entry, not thousands).
struct Gaps {
    kind: &'static str,
    limit_ms: f64,
    last_round: Option<f64>,
    /// Last good sample per device.
    last_ok: BTreeMap<u32, f64>,
    open: BTreeMap<u32, SamplingGap>,
    done: Vec<SamplingGap>,
}

impl Gaps {
    fn new(kind: &'static str, period: Duration) -> Gaps {
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
    fn round(&mut self, t: f64) {
        if let Some(prev) = self.last_round {
            if t - prev > self.limit_ms {
                let missed = ((t - prev) / (self.limit_ms / 2.0)).floor().max(2.0) as u64 - 1;
                match self.done.last_mut() {
                    // Consecutive late rounds merge into one gap.
                    Some(g) if g.device.is_none() && g.reason == "late" && g.end_ms == prev => {
                        g.end_ms = t;
                        g.count += missed;
                    }
                    _ => self.done.push(SamplingGap {
                        kind: self.kind.into(),
                        device: None,
                        start_ms: prev,
                        end_ms: t,
                        count: missed,
                        reason: "late".into(),
                    }),
                }
            }
        }
        self.last_round = Some(t);
    }

    fn ok(&mut self, device: u32, t: f64) {
        self.last_ok.insert(device, t);
        if let Some(mut g) = self.open.remove(&device) {
            g.end_ms = t;
            self.done.push(g);
        }
    }

    /// A failed query; the error is formatted only when it opens a gap (a lost device fails
    /// every round).
    fn failed(&mut self, device: u32, t: f64, error: &dyn std::fmt::Display) {
        let start = self.last_ok.get(&device).copied().unwrap_or(t);
        let g = self.open.entry(device).or_insert_with(|| SamplingGap {
            kind: self.kind.into(),
            device: Some(device),
            start_ms: start,
            end_ms: t,
            count: 0,
            reason: error
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
        });
        g.end_ms = t;
        g.count += 1;
    }

    fn finish(mut self, t: f64) -> Vec<SamplingGap> {
        for (_, mut g) in std::mem::take(&mut self.open) {
            g.end_ms = t;
            self.done.push(g);
        }
        self.done
    }
}

/// Sleep until `next` (or return at once when behind: missed ticks are skipped, not burst).
/// Sleeps on the stop signal, so `stop()` returns at once even with a long period.
pub(crate) fn pace(next: &mut Instant, period: Duration, stop: &StopSignal) {
    *next += period;
    let now = Instant::now();
    if *next <= now {
        *next = now;
        return;
    }
    stop.wait_until(*next);
}

fn memory_loop(
    monitor: &dyn Monitor,
    devices: &[(u32, u64)],
    t0: Instant,
    period: Duration,
    stop: &StopSignal,
    mut on_round: Option<OnRound>,
) -> Samples {
    let mut out = Samples {
        devices: devices
            .iter()
            .map(|(d, total)| DeviceSeries {
                device: *d,
                total: *total,
                samples: Vec::new(),
            })
            .collect(),
        ..Samples::default()
    };
    let period = period.max(Duration::from_micros(100));
    let mut gaps = Gaps::new("memory", period);
    let mut next = Instant::now();
    let mut used: Vec<u64> = Vec::with_capacity(devices.len());
    loop {
        // One more round after stop: the series ends with the state at the end of the run
        // (a device lost in the last moments shows as a gap, not as nothing).
        let last = stop.is_set();
        let t_round = ms_since(t0);
        gaps.round(t_round);
        used.clear();
        let mut complete = true;
        for series in out.devices.iter_mut() {
            match monitor.memory(series.device) {
                Ok(m) => {
                    let t = ms_since(t0);
                    series.samples.push((t, m.used));
                    gaps.ok(series.device, t);
                    used.push(m.used);
                }
                Err(e) => {
                    out.errors += 1;
                    complete = false;
                    gaps.failed(series.device, ms_since(t0), &e);
                }
            }
        }
        out.rounds += 1;
        if let (Some(f), true) = (on_round.as_mut(), complete) {
            f(t_round, &used);
        }
        if last {
            break;
        }
        pace(&mut next, period, stop);
    }
    out.gaps = gaps.finish(ms_since(t0));
    out
}

struct ProcessOut {
    samples: Vec<ProcessSample>,
    rounds: u64,
    errors: u64,
    gaps: Vec<SamplingGap>,
}

fn process_loop(
    monitor: &dyn Monitor,
    devices: &[u32],
    t0: Instant,
    period: Duration,
    stop: &StopSignal,
) -> ProcessOut {
    let period = period.max(Duration::from_millis(1));
    let mut out = ProcessOut {
        samples: Vec::new(),
        rounds: 0,
        errors: 0,
        gaps: Vec::new(),
    };
    let mut gaps = Gaps::new("processes", period);
    let mut next = Instant::now();
    while !stop.is_set() {
        gaps.round(ms_since(t0));
        for d in devices {
            match monitor.processes(*d) {
                Ok(list) => {
                    let t = ms_since(t0);
                    gaps.ok(*d, t);
                    out.samples.extend(list.into_iter().map(|p| ProcessSample {
                        t_ms: t,
                        device: *d,
                        pid: p.pid,
                        used: p.used,
                    }));
                }
                Err(e) => {
                    out.errors += 1;
                    gaps.failed(*d, ms_since(t0), &e);
                }
            }
        }
        out.rounds += 1;
        pace(&mut next, period, stop);
    }
    out.gaps = gaps.finish(ms_since(t0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::{SimDriver, SimMonitor};
    use crate::gpu::Driver;
    use vramdoc_sim::{InitOptions, SimBox, SimProcess};

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

    #[test]
    fn stop_ends_a_sampler_with_an_hour_long_period_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "1x16GiB", &InitOptions::default()).unwrap();
        let s = Sampler::start(
            Box::new(SimMonitor::new(sim)),
            vec![(0, 16 << 30)],
            Instant::now(),
            SamplerConfig {
                period: Duration::from_secs(3600),
                process_period: Some(Duration::from_secs(3600)),
            },
        );
        std::thread::sleep(Duration::from_millis(50));
        let got = s.stop();
        // The first round, then the closing round taken at stop (not an hour later).
        assert_eq!(got.rounds, 2);
        assert_eq!(got.process_rounds, 1);
        assert_eq!(got.devices[0].samples.len(), 2);
    }

    #[test]
    fn on_round_sees_every_complete_round_as_it_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "2x16GiB", &InitOptions::default()).unwrap();
        type Rounds = Vec<(f64, Vec<u64>)>;
        let seen: Arc<Mutex<Rounds>> = Arc::default();
        let sink = seen.clone();
        let s = Sampler::start_with(
            Box::new(SimMonitor::new(sim)),
            vec![(0, 16 << 30), (1, 16 << 30)],
            vec![],
            Instant::now(),
            SamplerConfig {
                period: Duration::from_millis(2),
                process_period: None,
            },
            Some(Box::new(move |t, used: &[u64]| {
                sink.lock().unwrap().push((t, used.to_vec()))
            })),
        );
        std::thread::sleep(Duration::from_millis(30));
        let got = s.stop();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len() as u64, got.rounds);
        assert!(seen.iter().all(|(_, u)| u.len() == 2));
        assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(got.devices[0].samples.len(), seen.len());
    }

    #[test]
    fn samples_every_device_and_sees_a_pulse() {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "2x16GiB", &InitOptions::default()).unwrap();
        let mon = SimMonitor::new(sim.clone());
        let t0 = Instant::now();
        let devices = vec![(0, 16 << 30), (1, 16 << 30)];
        let s = Sampler::start(
            Box::new(mon),
            devices,
            t0,
            SamplerConfig {
                period: Duration::from_millis(1),
                process_period: Some(Duration::from_millis(10)),
            },
        );
        std::thread::sleep(Duration::from_millis(20));
        let mut drv = SimDriver::new(SimProcess::new(sim, None));
        let ctx = drv.create_context(1).unwrap();
        let a = drv.alloc(ctx, 1 << 30).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        drv.free(a).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let got = s.stop();
        assert_eq!(got.devices.len(), 2);
        assert!(got.rounds >= 5, "rounds {}", got.rounds);
        let (_, peak1) = got.peak(1).unwrap();
        assert!(peak1 >= 1 << 30, "peak {peak1}");
        assert_eq!(got.peak(0).unwrap().1, 0);
        let me = std::process::id();
        assert!(got.processes.iter().any(|p| p.pid == me && p.device == 1));
        assert!(got.processes.iter().all(|p| p.device == 1));
    }

    #[test]
    fn process_lists_never_stall_the_memory_loop() {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "2x16GiB", &InitOptions::default()).unwrap();
        // A process-list query that takes 150 ms (a driver holding its lock).
        sim.set_faults(&vramdoc_sim::Faults {
            nvml_process_latency_us: 150_000,
            ..Default::default()
        })
        .unwrap();
        let t0 = Instant::now();
        let s = Sampler::start_for(
            Box::new(SimMonitor::new(sim)),
            vec![(0, 16 << 30), (1, 16 << 30)],
            vec![1],
            t0,
            SamplerConfig {
                period: Duration::from_millis(1),
                process_period: Some(Duration::from_millis(10)),
            },
        );
        std::thread::sleep(Duration::from_millis(400));
        let got = s.stop();
        assert!(got.process_rounds >= 1);
        // Memory samples were taken while the first process query was in flight
        // (from about t=0 to t=150 ms).
        let during = got.devices[0]
            .samples
            .iter()
            .filter(|(t, _)| *t > 20.0 && *t < 130.0)
            .count();
        assert!(during > 0, "memory loop stalled behind the process query");
        // The slow query makes the process rounds late: recorded as gaps of that thread.
        assert!(
            got.gaps
                .iter()
                .any(|g| g.kind == "processes" && g.reason == "late" && g.device.is_none()),
            "{:?}",
            got.gaps
        );
    }

    #[test]
    fn failed_queries_become_one_gap_per_device() {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "2x16GiB", &InitOptions::default()).unwrap();
        let s = Sampler::start(
            Box::new(SimMonitor::new(sim.clone())),
            vec![(0, 16 << 30), (1, 16 << 30)],
            Instant::now(),
            SamplerConfig {
                period: Duration::from_millis(1),
                process_period: Some(Duration::from_millis(5)),
            },
        );
        std::thread::sleep(Duration::from_millis(30));
        sim.set_faults(&vramdoc_sim::Faults {
            lost_devices: vec![1],
            ..Default::default()
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(60));
        let got = s.stop();
        assert!(got.errors > 0);
        for kind in ["memory", "processes"] {
            let lost: Vec<_> = got
                .gaps
                .iter()
                .filter(|g| g.kind == kind && g.device == Some(1))
                .collect();
            assert_eq!(lost.len(), 1, "{kind}: {:?}", got.gaps);
            assert!(lost[0].count >= 1 && lost[0].end_ms >= lost[0].start_ms);
            assert!(lost[0].reason.contains("lost"), "{}", lost[0].reason);
        }
        assert!(!got.gaps.iter().any(|g| g.device == Some(0)));
    }
}
