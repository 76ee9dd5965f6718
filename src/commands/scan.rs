//! `vramdoc scan` (issue 3): flags → the scan engine ([`crate::scan`]) → the report, printed
//! as a table ([`crate::report::terminal::scan`]), `--json` or `--markdown`; `--out FILE`
//! through the one writer; `--prom FILE` for node_exporter; `--fail-on LEVEL` → exit 1.

use super::Session;
use crate::cli::ScanArgs;
use crate::inventory;
use crate::report::sink::{Outputs, Sink};
use crate::report::terminal;
use crate::report::write::{render, Format};
use crate::scan::ScanConfig;
use anyhow::Result;

pub fn run(session: &Session, args: &ScanArgs) -> Result<i32> {
    let sink = Sink::new(Outputs {
        also: args.prom.iter().map(|p| ("--prom", p.as_path())).collect(),
        ..super::outputs(&args.output, args.fail_on)
    })?;
    if let Some(p) = &args.prom {
        check_prom_path(p)?;
    }
    let started = std::time::Instant::now();
    let vantage = inventory::establish_vantage()?;
    let read = super::session::guarded_monitor(session).and_then(|monitor| {
        let cfg = ScanConfig {
            sim_spec: session.sim_spec(),
            vantage,
            thresholds: args.pods.thresholds(),
            pods: args.pods.config(),
            lists: if args.all_lists {
                inventory::ProcessLists::All
            } else {
                inventory::ProcessLists::AsNeeded
            },
        };
        let report = crate::scan::scan(monitor.as_ref(), &cfg)?;
        Ok((monitor, report))
    });
    let (monitor, report) = match read {
        Ok(r) => r,
        Err(e) => {
            // The textfile collector would keep exporting the last file: replace it with a
            // failed collection, so `vramdoc_collect_success 0` alerts instead.
            if let Some(path) = &args.prom {
                write_failed_prom(&sink, path, session, started)?;
            }
            return Err(e);
        }
    };
    if let Some(path) = &args.prom {
        let collection = crate::report::prom::Collection {
            success: true,
            duration_seconds: started.elapsed().as_secs_f64(),
            timestamp_seconds: report.created_unix_ms as f64 / 1000.0,
            backend: monitor.backend().to_string(),
            hostname: None,
        };
        let opts = crate::report::prom::PromOptions {
            per_process: args.per_process,
        };
        let text = crate::report::prom::render(report.scan(), &collection, opts)?;
        // Always replaced: the textfile collector reads the latest file, written atomically.
        sink.replace(path, text.as_bytes())?;
    }

    sink.emit(&report)?;
    if sink.json() {
        sink.print_json(&report)?;
    } else {
        let text = if args.markdown {
            String::from_utf8_lossy(&render(&report, Format::Markdown)?).into_owned()
        } else {
            terminal::scan::render(&report, terminal::Options::default())
        };
        crate::term::write_stdout(crate::term::clean_text(&text).as_bytes())?;
    }
    let findings = report.scan().map_or(&[][..], |s| &s.findings[..]);
    Ok(sink.status(crate::exit::OK, findings))
}

/// `--prom` after a failed read of the machine: `vramdoc_collect_success 0` and the exporter's
/// own series, written as a successful one would be.
fn write_failed_prom(
    sink: &Sink,
    path: &std::path::Path,
    session: &Session,
    started: std::time::Instant,
) -> Result<()> {
    let collection = crate::report::prom::Collection {
        success: false,
        duration_seconds: started.elapsed().as_secs_f64(),
        timestamp_seconds: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        backend: match session.backend.kind {
            crate::backend::BackendKind::Real => "nvml".into(),
            crate::backend::BackendKind::Sim => "sim".into(),
        },
        hostname: None,
    };
    let text = crate::report::prom::render(None, &collection, Default::default())?;
    sink.replace(path, text.as_bytes())?;
    Ok(())
}

/// node_exporter's textfile collector reads `*.prom` files only; the directory must exist
/// (checked before the scan, not after it).
fn check_prom_path(path: &std::path::Path) -> Result<(), crate::exit::UsageError> {
    if path.extension().and_then(|e| e.to_str()) != Some("prom") {
        return Err(crate::exit::UsageError(format!(
            "--prom {}: name the file *.prom (node_exporter's textfile collector reads only those)",
            path.display()
        )));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(crate::exit::UsageError(format!(
            "--prom {}: {} is not a directory",
            path.display(),
            dir.display()
        )));
    }
    Ok(())
}
