//! What the timeline fingerprints can conclude from where the recorder stood (issue 25). In a
//! container without `hostPID`, a driver from 535.113 on lists only that namespace's
//! processes: another tenant's memory is in the device's `used` and in no list, so rules that
//! read device totals less the listed neighbours (growth, not-released, held-after-exit,
//! overcommit) cannot tell the job's memory from a neighbour's on a GPU where unlisted memory
//! was seen; and from 535.113 to 560 the job's own entries carry 0 bytes, so rules that read
//! its per-process bytes cannot decide either. Such findings are kept at info, saying why
//! (docs/findings.md, "What each rule needs").

use super::evidence::{ev, ev_bytes};
use super::prepare::{proc_level_at, Prepared};
use super::{ids, Recording, TimelineThresholds};
use crate::model::vantage::ListView;
use crate::model::{Finding, Severity, Vantage};
use std::collections::BTreeMap;

/// Rules that read device totals, less the neighbours that are listed.
const DEVICE_TOTAL_RULES: &[&str] = &[
    ids::GROWTH_WITHOUT_RELEASE,
    ids::NOT_RELEASED,
    ids::HELD_AFTER_EXIT,
    ids::OVERCOMMIT,
];

/// Rules that read the job's per-process bytes.
const PER_PROCESS_RULES: &[&str] = &[ids::STRAY_CONTEXT, ids::DOUBLE_LOAD, ids::OUTLIVED_COMMAND];

/// `findings` of `rec` as far as `vantage` supports them: the ones it cannot decide lowered
/// to info with the reason. Unchanged in the host namespace and under host-PID drivers.
pub fn within_vantage(
    rec: &Recording,
    th: &TimelineThresholds,
    vantage: &Vantage,
    mut findings: Vec<Finding>,
) -> Vec<Finding> {
    // A job process listed with bytes: the lists carry usage, whatever the version says.
    let own_usage = rec
        .timeline
        .processes
        .iter()
        .any(|s| s.used.is_some_and(|b| b > 0));
    let zero_usage = match vantage.view_seen(false, own_usage) {
        ListView::OwnNamespaceOnly { zero_usage } => zero_usage,
        _ => return findings,
    };
    let unlisted = unlisted_peaks(&Prepared::new(rec, th));
    for f in findings.iter_mut().filter(|f| f.severity > Severity::Info) {
        let per_process = zero_usage && PER_PROCESS_RULES.contains(&f.id.as_str());
        let seen: Vec<(u32, u64)> = unlisted
            .iter()
            .filter(|(d, _)| f.devices.is_empty() || f.devices.contains(d))
            .map(|(d, b)| (*d, *b))
            .collect();
        let totals = DEVICE_TOTAL_RULES.contains(&f.id.as_str()) && !seen.is_empty();
        if !per_process && !totals {
            continue;
        }
        f.severity = Severity::Info;
        f.title = format!("Undecidable from this PID namespace: {}", f.title);
        for (d, b) in &seen {
            f.evidence.push(ev_bytes(
                format!("most used on GPU {d} by no process listed here"),
                *b,
            ));
        }
        f.evidence.push(ev(
            "vantage",
            format!("{} ({})", vantage.line(), vantage.pid_namespace.reason),
        ));
        f.evidence.push(ev(
            "why it is not decided here",
            if per_process {
                "this driver (535.113 to 560) lists the job's processes with 0 bytes: their \
                 usage is unknown. Record on the host or with hostPID to decide"
            } else {
                "the driver lists only this PID namespace's processes: another tenant's \
                 memory on this GPU cannot be told from the job's. Record on the host or \
                 with hostPID to decide"
            },
        ));
    }
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    findings
}

/// Per device, the most memory no listed process accounted for at a process-list reading
/// (the device's level then less every listed process's), where above the device's noise
/// step (at least 256 MiB). Devices without any list reading count with all their memory.
fn unlisted_peaks(cx: &Prepared) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for d in &cx.devs {
        let series: Vec<_> = cx.procs.values().filter_map(|m| m.get(&d.index)).collect();
        let mut times: Vec<f64> = series.iter().flat_map(|s| s.iter().map(|p| p.0)).collect();
        if times.is_empty() {
            times = d.samples.iter().map(|p| p.0).collect();
        }
        let peak = times
            .iter()
            .filter_map(|&t| {
                let used = d.level_at(t)?;
                let listed: u64 = series
                    .iter()
                    .filter_map(|s| proc_level_at(s, t))
                    .fold(0, u64::saturating_add);
                Some(used.saturating_sub(listed))
            })
            .max()
            .unwrap_or(0);
        if peak > d.step.max(256 << 20) {
            out.insert(d.index, peak);
        }
    }
    out
}
