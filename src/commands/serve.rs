//! `vramdoc serve` (issues 11, 18): the Prometheus exporter's command edge: flags, the node
//! name, the collector thread (which opens NVML, and again after a loss) and the HTTP server
//! (`crate::serve`), and a clean stop (exit 0) on SIGTERM, SIGHUP or Ctrl-C at any moment,
//! the first collection included (the process's one signal handler,
//! `commands::handle_interrupts_gracefully`).

use crate::backend::BackendKind;
use crate::cli::ServeArgs;
use crate::exit::EnvironmentError;
use crate::inventory;
use crate::report::prom::PromOptions;
use crate::scan::ScanConfig;
use crate::serve::{
    self, CollectConfig, Collector, CollectorOptions, HealthPolicy, Latest, Server, ServerConfig,
    FAILURES_BEFORE_REINIT,
};
use anyhow::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Session;

/// Longest the first collection may take before the server starts anyway (exporting
/// `vramdoc_collect_success 0` until a collection finishes).
const FIRST_COLLECTION_WAIT: Duration = Duration::from_secs(15);

/// Longest a stop waits for a collection in progress.
const STOP_WAIT: Duration = Duration::from_secs(2);

pub fn run(session: &Session, args: &ServeArgs) -> Result<i32> {
    // First: a signal at any later moment (the first collection included) is a clean stop.
    let stop = super::handle_interrupts_gracefully();
    // --listen and --interval are parsed and bounded by their flags (crate::cli).
    let (addr, interval) = (args.listen, args.interval);
    // Before anything starts: a web configuration that does not read is a usage error.
    let web = serve::webconfig::WebConfig::open_flag(args.web_config_file.as_deref())
        .map_err(|e| crate::exit::UsageError(format!("--web.config.file {e}")))?;
    let cfg = CollectConfig {
        scan: ScanConfig {
            sim_spec: session.sim_spec(),
            vantage: inventory::establish_vantage()?,
            thresholds: args.pods.thresholds(),
            pods: args.pods.config(),
            lists: Default::default(),
        },
        options: PromOptions {
            per_process: args.per_process,
        },
        hostname: Some(serve::node_name(args.node_name.as_deref())),
    };
    let backend = session.backend.clone();
    let opts = CollectorOptions {
        interval,
        release_between: args.release_between,
        reinit_after: FAILURES_BEFORE_REINIT,
        backend: match backend.kind {
            BackendKind::Real => "nvml",
            BackendKind::Sim => "sim",
        },
    };
    let policy = HealthPolicy {
        fail_after: FAILURES_BEFORE_REINIT,
        // Three intervals and the NVML start limit: a collection stuck in the driver.
        stale_after: Some(interval * 3 + super::NVML_START_LIMIT + Duration::from_secs(30)),
    };
    let first = serve::failed_exposition(opts.backend, "no collection yet".into(), &cfg);
    let latest = Arc::new(Latest::with_health(first, policy));
    let opening = Arc::new(AtomicBool::new(false));
    let observer = incident_observer(args, &backend, &cfg, interval, &latest)?;
    let collector = Collector::start_observed(
        Box::new(move || super::open_monitor(&backend, &opening).map_err(|e| format!("{e:#}"))),
        cfg,
        opts,
        latest.clone(),
        |e| match e {
            Some(e) => crate::term::eprint_line(&format!(
                "vramdoc serve: collection failed (still serving): {e}"
            )),
            None => crate::term::eprint_line("vramdoc serve: collection succeeds"),
        },
        observer,
    )
    .map_err(|e| EnvironmentError(format!("starting the collector: {e}")))?;

    // The first collection before the first scrape, so no scrape sees an empty exporter;
    // bounded, and a signal meanwhile stops at once (the collector is left to the exit).
    if !wait_first(&latest, &stop) {
        crate::term::eprint_line("vramdoc serve: stopping");
        return Ok(crate::exit::OK);
    }
    let tls = web.as_ref().is_some_and(|w| w.serves_tls());
    let server = Server::start(addr, latest.clone(), ServerConfig::default().with_web(web))
        .map_err(|e| EnvironmentError(format!("cannot listen on {addr}: {e}")))?;
    let local = server.local_addr();
    if !local.ip().is_loopback() {
        crate::term::eprint_line(&format!(
            "vramdoc serve: note: listening beyond this host ({local})"
        ));
    }
    // Tests and scripts read the bound address (with --listen 127.0.0.1:0) from this line.
    crate::term::eprint_line(&format!(
        "vramdoc serve: listening on {}://{local}/metrics (collection every {})",
        if tls { "https" } else { "http" },
        crate::units::format_duration(interval)
    ));

    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    crate::term::eprint_line("vramdoc serve: stopping");
    server.shutdown();
    collector.stop(STOP_WAIT);
    Ok(crate::exit::OK)
}

/// The flight recorder (`--incidents DIR`) as the collector's observer: records every
/// collection, publishes the incident list for `GET /incidents`, returns its series.
fn incident_observer(
    args: &ServeArgs,
    backend: &crate::backend::Backend,
    cfg: &CollectConfig,
    interval: Duration,
    latest: &Arc<Latest>,
) -> Result<Option<serve::collect::Observer>> {
    let f = &args.incidents;
    let Some(dir) = &f.incidents else {
        return Ok(None);
    };
    let kernel_log = match &f.kernel_log {
        Some(p) if p.as_os_str() == "none" => None,
        Some(p) => Some(p.clone()),
        None => Some(
            backend
                .default_kernel_log()
                .unwrap_or_else(|| crate::incidents::DEFAULT_KERNEL_LOG.into()),
        ),
    };
    let mut rec = crate::incidents::Incidents::new(crate::incidents::IncidentsConfig {
        dir: dir.clone(),
        max_count: f.incidents_max_count as usize,
        max_bytes: f.incidents_max_bytes,
        history: f.incidents_history,
        pod_log_dir: args.pods.pod_log_dir.clone(),
        kernel_log,
        period: interval,
        node: cfg.hostname.clone(),
        per_minute: crate::incidents::DEFAULT_PER_MINUTE,
    })
    .map_err(|e| EnvironmentError(format!("--incidents: {e}")))?;
    if let Some(why) = &rec.kernel_note {
        crate::term::eprint_line(&format!(
            "vramdoc serve: note: the kernel log is not read ({why}): Xid and OOM-killer lines make no incident"
        ));
    }
    latest.set_incidents(rec.listing());
    let latest = latest.clone();
    let hostname = cfg.hostname.clone();
    Ok(Some(Box::new(move |scan| {
        for e in rec.observe(scan, crate::incidents::now_unix()) {
            crate::term::eprint_line(&format!("vramdoc serve: writing an incident: {e}"));
        }
        latest.set_incidents(rec.listing());
        rec.exposition(hostname.as_deref()).into_bytes()
    })))
}

/// Wait for the first collection (at most [`FIRST_COLLECTION_WAIT`]); `false` when a
/// signal came first.
fn wait_first(latest: &Latest, stop: &AtomicBool) -> bool {
    let until = Instant::now() + FIRST_COLLECTION_WAIT;
    while latest.collections() == 0 && Instant::now() < until {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !stop.load(Ordering::SeqCst)
}
