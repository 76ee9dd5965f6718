//! `duplicate-copy`: one process with large near-equal footprints on two or more GPUs.

use super::prelude::*;
use crate::diagnose::usage::known;

/// Possible duplicate copy (CogVLM): one process with large, near-equal footprints on two or
/// more devices. Info only: tensor-parallel workers look the same.
pub fn duplicate_copy(inv: &Inventory, th: &Thresholds) -> Vec<Finding> {
    let mut out = Vec::new();
    for p in &inv.processes {
        let large: Vec<(u32, u64)> = known(p)
            .into_iter()
            .filter(|(_, b)| *b >= th.duplicate_min)
            .collect();
        if large.len() < 2 {
            continue;
        }
        let max = large.iter().map(|(_, b)| *b).max().unwrap_or(0);
        let min = large.iter().map(|(_, b)| *b).min().unwrap_or(0);
        if max == 0 {
            continue;
        }
        let spread = (max - min) as f64 / max as f64;
        if spread > th.duplicate_tolerance {
            continue;
        }
        let devs: Vec<u32> = large.iter().map(|(d, _)| *d).collect();
        let total: u64 = large.iter().map(|(_, b)| *b).sum();
        let mut evidence: Vec<Evidence> = large
            .iter()
            .map(|(d, b)| ev_bytes(format!("used on GPU {d}"), *b))
            .collect();
        evidence.push(ev_bytes("total across these GPUs", total));
        evidence.push(ev(
            "spread (max - min) / max",
            format!(
                "{:.1}% (near-equal: <= {:.0}%)",
                spread * 100.0,
                th.duplicate_tolerance * 100.0
            ),
        ));
        out.push(Finding {
            id: ids::DUPLICATE_COPY.into(),
            severity: Severity::Info,
            title: format!(
                "{} holds near-equal {} on GPUs {} ({} in all): possibly one model loaded twice",
                who(p),
                format_bytes(max),
                gpus(&devs),
                format_bytes(total)
            ),
            devices: devs,
            pid: Some(p.pid),
            evidence,
            fix: fixes::DUPLICATE_COPY.into(),
        });
    }
    out
}
