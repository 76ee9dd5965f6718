//! Collection for `vramdoc serve`: one scan through the scan engine, rendered as the
//! Prometheus exposition ([`crate::report::prom`]), kept in [`Latest`] for the HTTP side; and
//! the [`Collector`] thread that repeats it every interval.

use crate::gpu::Monitor;
use crate::model::ScanResult;
use crate::report::prom::{self, Collection, PromOptions};
use crate::scan::ScanConfig;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The last exposition, shared between the collector and the server.
#[derive(Debug, Default)]
pub struct Latest(Mutex<Arc<Vec<u8>>>);

impl Latest {
    pub fn new(body: Vec<u8>) -> Latest {
        Latest(Mutex::new(Arc::new(body)))
    }
    /// The current exposition (a cheap shared copy).
    pub fn get(&self) -> Arc<Vec<u8>> {
        match self.0.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
    pub fn set(&self, body: Vec<u8>) {
        let body = Arc::new(body);
        match self.0.lock() {
            Ok(mut g) => *g = body,
            Err(poisoned) => *poisoned.into_inner() = body,
        }
    }
}

/// What one collection needs besides the monitor: the scan's, and what to export.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    pub scan: ScanConfig,
    pub options: PromOptions,
}

/// The result of one collection: the scan (if any), and the error of a failed one.
#[derive(Debug, Clone)]
pub struct Collected {
    pub scan: Option<ScanResult>,
    pub error: Option<String>,
}

/// Read the machine once through `monitor` and diagnose it, as `vramdoc scan` does. One bad
/// GPU does not fail a collection: the monitor reports it with a status (lost, no
/// permission), which the diagnosis turns into a finding while the other GPUs keep their
/// metrics. Any error of the whole read is a failed collection without findings.
pub fn collect(monitor: &dyn Monitor, cfg: &CollectConfig) -> Collected {
    match crate::scan::scan(monitor, &cfg.scan) {
        Ok(report) => Collected {
            scan: report.scan,
            error: None,
        },
        Err(e) => Collected {
            scan: None,
            error: Some(e.to_string()),
        },
    }
}

/// One collection, rendered: returns the exposition and the collection's error, if any.
pub fn collect_exposition(monitor: &dyn Monitor, cfg: &CollectConfig) -> (Vec<u8>, Option<String>) {
    let start = Instant::now();
    let c = collect(monitor, cfg);
    let meta = Collection {
        success: c.error.is_none(),
        duration_seconds: start.elapsed().as_secs_f64(),
        timestamp_seconds: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
        backend: monitor.backend().to_string(),
    };
    match prom::render(c.scan.as_ref(), &meta, cfg.options) {
        Ok(text) => (text.into_bytes(), c.error),
        // Rendering fails only on an inconsistent metric definition; say so in the body.
        Err(e) => (
            format!("# {e}\nvramdoc_collect_success 0\n").into_bytes(),
            Some(e.to_string()),
        ),
    }
}

/// The collector thread: collects every `interval` into `latest` until stopped.
pub struct Collector {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<()>,
}

impl Collector {
    /// Start collecting every `interval` (the first collection after one interval: run
    /// [`collect_exposition`] once before, so the first scrape has data, and pass its error
    /// as `first_error`). `on_change` is told when the collection error changes: the new
    /// error, or `None` when collections succeed again.
    pub fn start(
        monitor: Box<dyn Monitor>,
        cfg: CollectConfig,
        interval: Duration,
        latest: Arc<Latest>,
        first_error: Option<String>,
        on_change: impl Fn(Option<&str>) + Send + 'static,
    ) -> std::io::Result<Collector> {
        let (stop, rx) = mpsc::channel::<()>();
        let mut last = first_error;
        let handle = std::thread::Builder::new()
            .name("vramdoc-collect".into())
            .spawn(move || loop {
                match rx.recv_timeout(interval) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let (body, err) = collect_exposition(monitor.as_ref(), &cfg);
                latest.set(body);
                if err != last {
                    on_change(err.as_deref());
                    last = err;
                }
            })?;
        Ok(Collector { stop, handle })
    }

    /// Stop after the collection in progress, if any.
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.handle.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::Thresholds;
    use crate::inventory::PidNamespace;

    #[test]
    fn a_lost_gpu_is_a_finding_and_the_others_keep_their_metrics() {
        use crate::backend::sim::SimMonitor;
        use vramdoc_sim::{Faults, InitOptions, SimBox};
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "3x16GiB", &InitOptions::default()).unwrap();
        let monitor = SimMonitor::new(sim.clone());
        let cfg = CollectConfig {
            scan: ScanConfig {
                sim_spec: None,
                pid_namespace: PidNamespace {
                    host: true,
                    reason: "test".into(),
                },
                thresholds: Thresholds::default(),
                pods: Default::default(),
            },
            options: PromOptions::default(),
        };
        let ok = collect(&monitor, &cfg);
        assert!(ok.error.is_none(), "{:?}", ok.error);
        assert_eq!(ok.scan.map(|s| s.devices.len()), Some(3));
        sim.set_faults(&Faults {
            lost_devices: vec![1],
            ..Faults::default()
        })
        .unwrap();
        // The monitor answers for every device; the lost one carries its status. The
        // collection itself succeeds: the lost GPU is a finding, the others keep their data.
        let later = collect(&monitor, &cfg);
        assert!(later.error.is_none(), "{:?}", later.error);
        let scan = later.scan.unwrap();
        let idx: Vec<u32> = scan.devices.iter().map(|d| d.index).collect();
        assert_eq!(idx, vec![0, 1, 2]);
        assert_eq!(scan.devices[1].status, crate::gpu::DeviceStatus::Lost);
        let headroom: Vec<u32> = scan.headroom.iter().map(|h| h.device).collect();
        assert_eq!(headroom, vec![0, 2]);
        assert_eq!(scan.findings[0].id, "device-lost");
        assert_eq!(scan.findings[0].devices, vec![1]);
    }
}
