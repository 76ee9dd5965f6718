//! `vramdoc preflight` as gauges of `vramdoc serve` (issue 18): for every GPU, whether a job
//! starting on it now would pass `vramdoc preflight --gpus N` ([`crate::preflight::judge`] on
//! the collection's report, no `--need`), and its problems by kind. Rendered as its own
//! exposition block, appended to the scan's ([`crate::report::prom`]).

use crate::model::Report;
use crate::preflight::{self, Selection};
use crate::report::prom::{registry, PromError};
use prometheus::{Encoder, GaugeVec, Opts, TextEncoder};

/// The problem kinds exported (0 when absent); `not-enough-free` needs `--need`, which
/// serve does not have.
pub const KINDS: &[&str] = &[
    "foreign-process",
    "unknown-usage",
    "process-lists-unreadable",
    "dead-process-memory",
    "device-unavailable",
];

/// The preflight gauges for every GPU of `report` (empty when it read none), with the
/// `hostname` label when given.
pub fn render(report: &Report, hostname: Option<&str>) -> Result<String, PromError> {
    let Some(scan) = report.scan() else {
        return Ok(String::new());
    };
    if scan.devices.is_empty() {
        return Ok(String::new());
    }
    let devices: Vec<u32> = scan.devices.iter().map(|d| d.index).collect();
    let verdict = preflight::judge(
        report,
        Selection {
            devices,
            source: "all GPUs".into(),
        },
        None,
    );
    let reg = registry(hostname)?;
    let ok = GaugeVec::new(
        Opts::new(
            "vramdoc_preflight_ok",
            "1 if a job starting on this GPU now would pass `vramdoc preflight` (no process \
             holds memory on it, no dead process's memory, the driver answers), else 0",
        ),
        &["gpu", "uuid"],
    )?;
    let problems = GaugeVec::new(
        Opts::new(
            "vramdoc_preflight_problems",
            "Reasons `vramdoc preflight` would refuse this GPU now, by kind",
        ),
        &["gpu", "uuid", "kind"],
    )?;
    reg.register(Box::new(ok.clone()))?;
    reg.register(Box::new(problems.clone()))?;
    for d in &scan.devices {
        let gpu = d.label();
        let mine: Vec<&preflight::Problem> = verdict
            .problems
            .iter()
            .filter(|p| p.device == d.index)
            .collect();
        ok.with_label_values(&[gpu.as_str(), d.uuid.as_str()])
            .set(if mine.is_empty() { 1.0 } else { 0.0 });
        for kind in KINDS {
            let n = mine.iter().filter(|p| p.kind == *kind).count();
            problems
                .with_label_values(&[gpu.as_str(), d.uuid.as_str(), kind])
                .set(n as f64);
        }
    }
    let mut buf = Vec::new();
    TextEncoder::new().encode(&reg.gather(), &mut buf)?;
    String::from_utf8(buf).map_err(|e| PromError::from(prometheus::Error::Msg(e.to_string())))
}
