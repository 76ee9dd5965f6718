//! The sampler: a background thread that reads the memory of every device through a
//! [`Monitor`] at a fixed period (default 5 ms, 1 ms supported) and the per-process lists on
//! a slower cadence (default 50 ms; on real drivers that query takes ~4.5 ms and holds a
//! driver lock). Times are milliseconds since a shared start instant, so samples line up
//! with the step markers the replay engine records.

use crate::gpu::Monitor;
use crate::report::{DeviceSeries, ProcessSample};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default memory sampling period.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(5);
/// Default per-process sampling period.
pub const DEFAULT_PROCESS_PERIOD: Duration = Duration::from_millis(50);

/// How often to sample.
#[derive(Debug, Clone, Copy)]
pub struct SamplerConfig {
    pub period: Duration,
    /// Per-process lists; `None`: never.
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

/// A running sampler thread.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Samples>>,
}

fn ms_since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1000.0
}

impl Sampler {
    /// Start sampling `devices` (physical index, total bytes) through `monitor`.
    pub fn start(
        monitor: Box<dyn Monitor>,
        devices: Vec<(u32, u64)>,
        t0: Instant,
        cfg: SamplerConfig,
    ) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("vramdoc-sampler".into())
            .spawn(move || sample_loop(monitor.as_ref(), &devices, t0, cfg, &flag))
            .ok();
        Sampler { stop, handle }
    }

    /// Stop the thread and return what it collected.
    pub fn stop(mut self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn sample_loop(
    monitor: &dyn Monitor,
    devices: &[(u32, u64)],
    t0: Instant,
    cfg: SamplerConfig,
    stop: &AtomicBool,
) -> Samples {
    let mut out = Samples {
        devices: devices
            .iter()
            .map(|(d, total)| crate::report::DeviceSeries {
                device: *d,
                total: *total,
                samples: Vec::new(),
            })
            .collect(),
        ..Samples::default()
    };
    let period = cfg.period.max(Duration::from_micros(100));
    let mut next = Instant::now();
    let mut next_proc = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        for series in out.devices.iter_mut() {
            match monitor.memory(series.device) {
                Ok(m) => series.samples.push((ms_since(t0), m.used)),
                Err(_) => out.errors += 1,
            }
        }
        out.rounds += 1;
        if let Some(pp) = cfg.process_period {
            if Instant::now() >= next_proc {
                for (d, _) in devices {
                    match monitor.processes(*d) {
                        Ok(list) => {
                            let t = ms_since(t0);
                            out.processes
                                .extend(list.into_iter().map(|p| ProcessSample {
                                    t_ms: t,
                                    device: *d,
                                    pid: p.pid,
                                    used: p.used,
                                }))
                        }
                        Err(_) => out.errors += 1,
                    }
                }
                next_proc += pp;
                if next_proc < Instant::now() {
                    next_proc = Instant::now() + pp;
                }
            }
        }
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Behind schedule (slow queries): skip missed ticks rather than burst.
            next = now;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::sim::{SimDriver, SimMonitor};
    use crate::gpu::Driver;
    use crate::sim::{InitOptions, SimBox, SimProcess};

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
}
