//! Collection for `vramdoc serve`: one scan through the scan engine, rendered as the
//! Prometheus exposition ([`crate::report::prom`]), kept in [`Latest`] for the HTTP side; and
//! the [`Collector`] thread that repeats it every interval.

use crate::diagnose::LastReading;
use crate::gpu::Monitor;
use crate::model::ScanResult;
use crate::report::prom::{self, Collection, PromOptions};
use crate::scan::ScanConfig;
use std::collections::BTreeMap;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// When `/healthz` says the exporter is unhealthy (docs/fleet.md, "Surviving real nodes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthPolicy {
    /// Unhealthy once this many collections in a row failed (and healthy again at the next
    /// success).
    pub fail_after: u32,
    /// Unhealthy when no collection finished for this long (a collection stuck in the
    /// driver); `None`: never.
    pub stale_after: Option<Duration>,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            fail_after: FAILURES_BEFORE_REINIT,
            stale_after: None,
        }
    }
}

/// Consecutive failed collections after which NVML is shut down and initialised again, and
/// `/healthz` answers 503 (docs/fleet.md).
pub const FAILURES_BEFORE_REINIT: u32 = 3;

#[derive(Debug)]
struct HealthState {
    policy: HealthPolicy,
    /// Collections finished, and how many of the last ones failed in a row.
    collections: u64,
    failures: u32,
    last_error: Option<String>,
    /// When the last collection finished (or the exporter started).
    last_finished: Instant,
}

/// The last exposition, shared between the collector and the server, and how collections
/// are going (for `/healthz`).
#[derive(Debug)]
pub struct Latest {
    body: Mutex<Arc<Vec<u8>>>,
    health: Mutex<HealthState>,
    /// The incident list `GET /incidents` answers (`None`: incidents are off).
    incidents: Mutex<Option<Arc<Vec<u8>>>>,
}

impl Default for Latest {
    fn default() -> Self {
        Latest::new(Vec::new())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Latest {
    pub fn new(body: Vec<u8>) -> Latest {
        Latest::with_health(body, HealthPolicy::default())
    }
    pub fn with_health(body: Vec<u8>, policy: HealthPolicy) -> Latest {
        Latest {
            body: Mutex::new(Arc::new(body)),
            health: Mutex::new(HealthState {
                policy,
                collections: 0,
                failures: 0,
                last_error: None,
                last_finished: Instant::now(),
            }),
            incidents: Mutex::new(None),
        }
    }
    /// The incident list (JSON), when the flight recorder is on.
    pub fn incidents(&self) -> Option<Arc<Vec<u8>>> {
        lock(&self.incidents).clone()
    }
    pub fn set_incidents(&self, list: Vec<u8>) {
        *lock(&self.incidents) = Some(Arc::new(list));
    }
    /// The current exposition (a cheap shared copy).
    pub fn get(&self) -> Arc<Vec<u8>> {
        lock(&self.body).clone()
    }
    pub fn set(&self, body: Vec<u8>) {
        *lock(&self.body) = Arc::new(body);
    }
    /// Count one finished collection and its error, if any.
    pub fn record(&self, error: Option<&str>) {
        let mut h = lock(&self.health);
        h.collections += 1;
        h.last_finished = Instant::now();
        match error {
            Some(e) => {
                h.failures = h.failures.saturating_add(1);
                h.last_error = Some(e.to_string());
            }
            None => {
                h.failures = 0;
                h.last_error = None;
            }
        }
    }
    /// Collections finished so far.
    pub fn collections(&self) -> u64 {
        lock(&self.health).collections
    }
    /// `Ok` while collections succeed; else why not (the body of `/healthz`'s 503).
    pub fn health(&self) -> Result<(), String> {
        let h = lock(&self.health);
        if h.failures >= h.policy.fail_after.max(1) {
            return Err(format!(
                "unhealthy: the last {} collections failed: {}",
                h.failures,
                h.last_error.as_deref().unwrap_or("unknown error")
            ));
        }
        if let Some(stale) = h.policy.stale_after {
            let since = h.last_finished.elapsed();
            if since > stale {
                return Err(format!(
                    "unhealthy: no collection finished in {} s (a driver call does not return)",
                    since.as_secs()
                ));
            }
        }
        Ok(())
    }
}

/// What one collection needs besides the monitor: the scan's, and what to export.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    pub scan: ScanConfig,
    pub options: PromOptions,
    /// The node's name, the `hostname` label of every series (`None`: no such label).
    pub hostname: Option<String>,
}

/// The result of one collection: the scan (if any), and the error of a failed one.
#[derive(Debug, Clone)]
pub struct Collected {
    pub scan: Option<ScanResult>,
    pub error: Option<String>,
    /// The preflight gauges' exposition block (`super::preflight_gauge`), empty without a
    /// scan.
    pub preflight: String,
}

/// Read the machine once through `monitor` and diagnose it, as `vramdoc scan` does. One bad
/// GPU does not fail a collection: the monitor reports it with a status (lost, no
/// permission), which the diagnosis turns into a finding while the other GPUs keep their
/// metrics. Any error of the whole read is a failed collection without findings.
pub fn collect(monitor: &dyn Monitor, cfg: &CollectConfig) -> Collected {
    match crate::scan::scan(monitor, &cfg.scan) {
        Ok(report) => match super::preflight_gauge::render(&report, cfg.hostname.as_deref()) {
            Ok(preflight) => Collected {
                scan: report.into_scan(),
                error: None,
                preflight,
            },
            Err(e) => Collected {
                scan: report.into_scan(),
                error: Some(e.to_string()),
                preflight: String::new(),
            },
        },
        Err(e) => Collected {
            scan: None,
            error: Some(e.to_string()),
            preflight: String::new(),
        },
    }
}

/// Add each lost GPU's last reading from earlier collections to its `gpu-lost` finding
/// (`diagnose::add_last_readings`), then remember this collection's good readings, at `now`
/// (Unix seconds).
pub fn carry_last_readings(c: &mut Collected, readings: &mut BTreeMap<u32, LastReading>, now: f64) {
    let Some(scan) = c.scan.as_mut() else {
        return;
    };
    crate::diagnose::add_last_readings(&mut scan.findings, readings);
    for d in scan
        .devices
        .iter()
        .filter(|d| d.status == crate::gpu::DeviceStatus::Ok)
    {
        let r = LastReading {
            t_unix: now,
            used: d.memory.used,
            total: d.memory.total,
        };
        readings.insert(d.index, r);
    }
}

/// Raise each `low-headroom` finding of a GPU whose free memory fell, or that gained a
/// claimant, within the trend's window to warn (`diagnose::headroom_trend`), then remember
/// this collection, taken at `now` (Unix seconds).
pub fn carry_headroom_trend(
    c: &mut Collected,
    trend: &mut crate::diagnose::headroom_trend::HeadroomTrend,
    now: f64,
    th: &crate::diagnose::Thresholds,
) {
    if let Some(scan) = c.scan.as_mut() {
        trend.apply(scan, now, th);
    }
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Render one collection's exposition; returns it and the collection's error, if any.
fn exposition(
    c: Collected,
    backend: &str,
    started: Instant,
    cfg: &CollectConfig,
) -> (Vec<u8>, Option<String>) {
    let meta = Collection {
        success: c.error.is_none(),
        duration_seconds: started.elapsed().as_secs_f64(),
        timestamp_seconds: now_unix(),
        backend: backend.to_string(),
        hostname: cfg.hostname.clone(),
    };
    match prom::render(c.scan.as_ref(), &meta, cfg.options) {
        Ok(text) => {
            let mut body = text.into_bytes();
            body.extend_from_slice(c.preflight.as_bytes());
            (body, c.error)
        }
        // Rendering fails only on an inconsistent metric definition; say so in the body.
        Err(e) => (
            format!("# {e}\nvramdoc_collect_success 0\n").into_bytes(),
            Some(e.to_string()),
        ),
    }
}

/// One collection, rendered: returns the exposition and the collection's error, if any.
pub fn collect_exposition(monitor: &dyn Monitor, cfg: &CollectConfig) -> (Vec<u8>, Option<String>) {
    let start = Instant::now();
    let c = collect(monitor, cfg);
    exposition(c, monitor.backend(), start, cfg)
}

/// The exposition of a collection that could not read the machine at all (NVML not loaded
/// or not initialised): `vramdoc_collect_success 0` and the exporter's own series.
pub fn failed_exposition(backend: &str, error: String, cfg: &CollectConfig) -> Vec<u8> {
    let c = Collected {
        scan: None,
        error: Some(error),
        preflight: String::new(),
    };
    exposition(c, backend, Instant::now(), cfg).0
}

/// Told of every collection's scan (`None`: the collection failed) after it is made; returns
/// series to append to the exposition (the flight recorder, `crate::incidents`).
pub type Observer = Box<dyn FnMut(Option<&ScanResult>) -> Vec<u8> + Send>;

/// Opens the GPU monitor (NVML) for the collector, again after a loss.
pub type OpenMonitor = Box<dyn FnMut() -> Result<Box<dyn Monitor>, String> + Send>;

/// How the [`Collector`] keeps its monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectorOptions {
    pub interval: Duration,
    /// Shut the monitor (NVML) down after every collection and open it again for the next.
    pub release_between: bool,
    /// Failed collections in a row after which the monitor is closed and opened again.
    pub reinit_after: u32,
    /// The backend label while no monitor could be opened (`nvml`, `sim`).
    pub backend: &'static str,
}

/// The collector thread: collects at once, then every `interval`, into `latest` until
/// stopped.
pub struct Collector {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<()>,
}

impl Collector {
    /// Start collecting. The monitor is opened by `open` when needed: at the first
    /// collection, after [`CollectorOptions::reinit_after`] failed collections in a row,
    /// and for every collection with [`CollectorOptions::release_between`]. A collection
    /// without a monitor (it could not be opened) exports `vramdoc_collect_success 0`.
    /// `on_change` is told when the collection error changes: the new error, or `None`
    /// when collections succeed again.
    pub fn start(
        open: OpenMonitor,
        cfg: CollectConfig,
        opts: CollectorOptions,
        latest: Arc<Latest>,
        on_change: impl Fn(Option<&str>) + Send + 'static,
    ) -> std::io::Result<Collector> {
        Collector::start_observed(open, cfg, opts, latest, on_change, None)
    }

    /// [`Collector::start`], telling `observer` of every collection's scan.
    pub fn start_observed(
        mut open: OpenMonitor,
        cfg: CollectConfig,
        opts: CollectorOptions,
        latest: Arc<Latest>,
        on_change: impl Fn(Option<&str>) + Send + 'static,
        mut observer: Option<Observer>,
    ) -> std::io::Result<Collector> {
        let (stop, rx) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("vramdoc-collect".into())
            .spawn(move || {
                let mut monitor: Option<Box<dyn Monitor>> = None;
                let mut failures = 0u32;
                let mut last: Option<String> = None;
                let mut readings: BTreeMap<u32, LastReading> = BTreeMap::new();
                let mut trend = crate::diagnose::headroom_trend::HeadroomTrend::default();
                loop {
                    let mut open_error = None;
                    if monitor.is_none() {
                        match open() {
                            // Every call under the per-GPU deadline: a hung GPU is a
                            // gap and a finding, never a stuck collection.
                            Ok(m) => monitor = Some(crate::gpu::lanes::Deadlined::boxed(m)),
                            Err(e) => open_error = Some(e),
                        }
                    }
                    let (body, err) = match &monitor {
                        Some(m) => {
                            let start = Instant::now();
                            let mut c = collect(m.as_ref(), &cfg);
                            carry_last_readings(&mut c, &mut readings, now_unix());
                            let th = &cfg.scan.thresholds;
                            carry_headroom_trend(&mut c, &mut trend, now_unix(), th);
                            let extra = observer.as_mut().map(|o| o(c.scan.as_ref()));
                            let (mut body, err) = exposition(c, m.backend(), start, &cfg);
                            body.extend(extra.unwrap_or_default());
                            (body, err)
                        }
                        None => {
                            let e = format!(
                                "opening {}: {}",
                                opts.backend,
                                open_error.unwrap_or_else(|| "unknown error".into())
                            );
                            let mut body = failed_exposition(opts.backend, e.clone(), &cfg);
                            if let Some(o) = observer.as_mut() {
                                body.extend(o(None));
                            }
                            (body, Some(e))
                        }
                    };
                    failures = if err.is_some() {
                        failures.saturating_add(1)
                    } else {
                        0
                    };
                    // Closing drops the session (nvmlShutdown): a lost one is replaced by
                    // a new one at the next collection.
                    if opts.release_between
                        || (failures > 0 && failures.is_multiple_of(opts.reinit_after.max(1)))
                    {
                        monitor = None;
                    }
                    latest.set(body);
                    latest.record(err.as_deref());
                    if err != last {
                        on_change(err.as_deref());
                        last = err;
                    }
                    match rx.recv_timeout(opts.interval) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            })?;
        Ok(Collector { stop, handle })
    }

    /// Stop after the collection in progress, if any, waiting at most `within` for it (a
    /// collection stuck in the driver is left behind).
    pub fn stop(self, within: Duration) {
        let _ = self.stop.send(());
        let until = Instant::now() + within;
        while !self.handle.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if self.handle.is_finished() {
            let _ = self.handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::Thresholds;
    use crate::inventory::PidNamespace;

    /// Collection in the host PID namespace with default thresholds and options.
    fn host_config(hostname: Option<String>) -> CollectConfig {
        CollectConfig {
            scan: ScanConfig {
                sim_spec: None,
                vantage: crate::model::Vantage::new(
                    PidNamespace {
                        host: true,
                        reason: "test".into(),
                    },
                    None,
                ),
                thresholds: Thresholds::default(),
                pods: Default::default(),
                lists: Default::default(),
            },
            options: PromOptions::default(),
            hostname,
        }
    }

    #[test]
    fn a_lost_gpu_is_a_finding_and_the_others_keep_their_metrics() {
        use crate::backend::sim::SimMonitor;
        use vramdoc_sim::{Faults, InitOptions, SimBox};
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "3x16GiB", &InitOptions::default()).unwrap();
        let monitor = SimMonitor::new(sim.clone());
        let cfg = host_config(None);
        let mut readings = BTreeMap::new();
        let mut ok = collect(&monitor, &cfg);
        carry_last_readings(&mut ok, &mut readings, 1_800_000_000.0);
        assert!(ok.error.is_none(), "{:?}", ok.error);
        assert_eq!(ok.scan.map(|s| s.devices.len()), Some(3));
        sim.set_faults(&Faults {
            lost_devices: vec![1],
            ..Faults::default()
        })
        .unwrap();
        // The monitor answers for every device; the lost one carries its status. The
        // collection itself succeeds: the lost GPU is a finding, the others keep their data.
        let mut later = collect(&monitor, &cfg);
        carry_last_readings(&mut later, &mut readings, 1_800_000_010.0);
        assert!(later.error.is_none(), "{:?}", later.error);
        let scan = later.scan.unwrap();
        let idx: Vec<u32> = scan.devices.iter().map(|d| d.index).collect();
        assert_eq!(idx, vec![0, 1, 2]);
        assert_eq!(scan.devices[1].status, crate::gpu::DeviceStatus::Lost);
        let headroom: Vec<u32> = scan.headroom.iter().map(|h| h.device).collect();
        assert_eq!(headroom, vec![0, 2]);
        assert_eq!(scan.findings[0].id, "gpu-lost");
        assert_eq!(scan.findings[0].devices, vec![1]);
        // Serve remembers the lost GPU's reading from the collection before: its time.
        let at: Vec<&str> = scan.findings[0]
            .evidence
            .iter()
            .filter(|e| e.label == "last reading at")
            .map(|e| e.value.as_str())
            .collect();
        assert_eq!(at, ["2027-01-15T08:00:00Z"]);
        assert_eq!(readings[&1].t_unix, 1_800_000_000.0);
        assert_eq!(readings[&0].t_unix, 1_800_000_010.0);
    }

    #[test]
    fn health_fails_after_the_grace_and_recovers_at_the_next_success() {
        let latest = Latest::with_health(
            Vec::new(),
            HealthPolicy {
                fail_after: 3,
                stale_after: None,
            },
        );
        assert!(latest.health().is_ok(), "healthy before any collection");
        latest.record(Some("NVML_ERROR_UNKNOWN"));
        latest.record(Some("NVML_ERROR_UNKNOWN"));
        assert!(latest.health().is_ok(), "within the grace");
        latest.record(Some("NVML_ERROR_UNKNOWN"));
        let why = latest.health().unwrap_err();
        assert!(
            why.contains("last 3 collections failed: NVML_ERROR_UNKNOWN"),
            "{why}"
        );
        latest.record(None);
        assert!(latest.health().is_ok());
        assert_eq!(latest.collections(), 4);
        let stale = Latest::with_health(
            Vec::new(),
            HealthPolicy {
                fail_after: 3,
                stale_after: Some(Duration::ZERO),
            },
        );
        std::thread::sleep(Duration::from_millis(5));
        assert!(stale
            .health()
            .unwrap_err()
            .contains("no collection finished"));
    }

    #[test]
    fn the_collector_serves_failures_until_nvml_opens_and_reopens_it_when_told() {
        use crate::backend::sim::SimMonitor;
        use std::sync::atomic::{AtomicU32, Ordering};
        use vramdoc_sim::{InitOptions, SimBox};
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "t4", &InitOptions::default()).unwrap();
        let cfg = host_config(Some("n1".into()));
        for release_between in [false, true] {
            let opens = Arc::new(AtomicU32::new(0));
            let (o, s) = (opens.clone(), sim.clone());
            // The first two opens fail (NVML not there yet), later ones work.
            let open: OpenMonitor = Box::new(move || {
                if o.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err("libnvidia-ml.so.1: cannot open shared object file".into())
                } else {
                    Ok(Box::new(SimMonitor::new(s.clone())) as Box<dyn Monitor>)
                }
            });
            let latest = Arc::new(Latest::new(Vec::new()));
            let opts = CollectorOptions {
                interval: Duration::from_millis(100),
                release_between,
                reinit_after: 3,
                backend: "nvml",
            };
            let c = Collector::start(open, cfg.clone(), opts, latest.clone(), |_| {}).unwrap();
            let until = Instant::now() + Duration::from_secs(20);
            while latest.collections() < 6 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            c.stop(Duration::from_secs(5));
            let text = String::from_utf8(latest.get().to_vec()).unwrap();
            assert!(
                text.contains("vramdoc_collect_success{hostname=\"n1\"} 1"),
                "{text}"
            );
            let n = opens.load(Ordering::SeqCst) as u64;
            let collections = latest.collections();
            if release_between {
                assert_eq!(n, collections, "one open per collection");
            } else {
                assert_eq!(n, 3, "opened until it worked, then kept");
            }
        }
    }
}
