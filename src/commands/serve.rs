//! `vramdoc serve` (issue 11): the Prometheus exporter's command edge: flags, the first
//! collection, the collector thread and the HTTP server (`crate::serve`), and a clean stop
//! on SIGTERM, SIGHUP or Ctrl-C (the process's one signal handler, `commands::interrupt_flag`).

use super::Session;
use crate::cli::ServeArgs;
use crate::exit::EnvironmentError;
use crate::inventory;
use crate::report::prom::PromOptions;
use crate::scan::ScanConfig;
use crate::serve::{self, CollectConfig, Collector, Latest, Server, ServerConfig};
use anyhow::Result;
use std::sync::Arc;
use std::time::Duration;

pub fn run(session: &Session, args: &ServeArgs) -> Result<i32> {
    // --listen and --interval are parsed and bounded by their flags (crate::cli).
    let (addr, interval) = (args.listen, args.interval);
    let cfg = CollectConfig {
        scan: ScanConfig {
            sim_spec: session.sim_spec(),
            pid_namespace: inventory::detect_pid_namespace()?,
            thresholds: args.pods.thresholds(),
            pods: args.pods.config(),
        },
        options: PromOptions {
            per_process: args.per_process,
        },
    };
    let monitor = session.monitor()?;

    // The first collection before the first scrape, so no scrape sees an empty exporter.
    let (body, err) = serve::collect_exposition(monitor.as_ref(), &cfg);
    if let Some(e) = &err {
        crate::term::eprint_line(&format!(
            "vramdoc serve: collection failed (still serving): {e}"
        ));
    }
    let latest = Arc::new(Latest::new(body));
    let server = Server::start(addr, latest.clone(), ServerConfig::default())
        .map_err(|e| EnvironmentError(format!("cannot listen on {addr}: {e}")))?;

    // SIGINT, SIGTERM and SIGHUP set this flag (the one handler of the process); a stop is
    // noticed within 100 ms.
    let stop = super::handle_interrupts_gracefully();

    let collector = Collector::start(monitor, cfg, interval, latest, err, |e| match e {
        Some(e) => crate::term::eprint_line(&format!(
            "vramdoc serve: collection failed (still serving): {e}"
        )),
        None => crate::term::eprint_line("vramdoc serve: collection succeeds again"),
    })
    .map_err(|e| EnvironmentError(format!("starting the collector: {e}")))?;
    let local = server.local_addr();
    if !local.ip().is_loopback() {
        crate::term::eprint_line(&format!(
            "vramdoc serve: note: listening beyond this host ({local})"
        ));
    }
    // Tests and scripts read the bound address (with --listen 127.0.0.1:0) from this line.
    crate::term::eprint_line(&format!(
        "vramdoc serve: listening on http://{local}/metrics (collection every {})",
        crate::units::format_duration(interval)
    ));

    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    crate::term::eprint_line("vramdoc serve: stopping");
    server.shutdown();
    collector.stop();
    Ok(crate::exit::OK)
}
