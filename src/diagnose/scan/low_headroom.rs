//! `low-headroom` from one snapshot: steady fills are info, two claimants out of room warn.

use super::prelude::*;

/// Low headroom per device, from one snapshot. A GPU kept nearly full is usually a steady
/// state: one engine or caching allocator at its configured fill (vLLM claims
/// `gpu_memory_utilization` × total at start, 0.92 by default today, 0.90 in older releases), or several at fixed budgets
/// (two engines at 0.45 each, time-sliced pods): info, with the arithmetic for whoever wants
/// to add a process. One snapshot cannot tell growth from a steady state, so it warns only
/// when the GPU is out of room: two or more independent claimants, each holding more than a
/// context ([`Thresholds::context_sized_max`]), and less free than a new context needs
/// ([`Thresholds::context_reserve`]) — the over-committed shape (FAILURES.md §5). A change
/// over time (free memory falling, a new claimant) is warned about where there is a time
/// axis: `serve` ([`crate::diagnose::headroom_trend`]). Never error: nothing has failed yet. Info
/// also when the largest safe `gpu_memory_utilization` is below vLLM's default. Evidence
/// carries the headroom arithmetic and the largest holder.
pub fn low_headroom(inv: &Inventory, headroom: &[Headroom], th: &Thresholds) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in inv.devices().iter().filter(|d| d.is_counted()) {
        let Some(h) = headroom.iter().find(|h| h.device == d.index) else {
            continue;
        };
        let m = d.memory;
        let pct = |b: u64| {
            if m.total == 0 {
                0.0
            } else {
                b as f64 * 100.0 / m.total as f64
            }
        };
        let claimants: Vec<(&ProcessInfo, u64)> = inv
            .processes
            .iter()
            .filter_map(|p| p.usage_on(d.index).and_then(|u| u.used).map(|b| (p, b)))
            .filter(|(_, b)| *b > th.context_sized_max)
            .collect();
        let low =
            m.free < th.context_reserve || (m.free as f64) < th.low_free_fraction * m.total as f64;
        let (severity, title) = if low && claimants.len() >= 2 && m.free < th.context_reserve {
            (
                Severity::Warn,
                format!(
                    "GPU {}: {} processes share it with {} free ({:.1}%) of {}: the next \
                     allocation of any of them can fail",
                    d.label(),
                    claimants.len(),
                    format_bytes(m.free),
                    pct(m.free),
                    format_bytes(m.total)
                ),
            )
        } else if low && claimants.len() >= 2 {
            (
                Severity::Info,
                format!(
                    "GPU {}: {} processes share it with {} free ({:.1}%) of {}: steady \
                     fixed budgets are normal (e.g. two engines at gpu_memory_utilization \
                     0.45); little room for another process",
                    d.index,
                    claimants.len(),
                    format_bytes(m.free),
                    pct(m.free),
                    format_bytes(m.total)
                ),
            )
        } else if low {
            (
                Severity::Info,
                format!(
                    "GPU {} is at a steady fill: {} free ({:.1}%) of {}{} (normal for an \
                     engine or a caching allocator at its configured fill; no room for \
                     another process)",
                    d.label(),
                    format_bytes(m.free),
                    pct(m.free),
                    format_bytes(m.total),
                    match claimants.as_slice() {
                        [(p, _)] => format!(", held by {}", who(p)),
                        _ => String::new(),
                    }
                ),
            )
        } else if h.max_gpu_memory_utilization < th.vllm_default_utilization {
            (
                Severity::Info,
                format!(
                    "GPU {}: a new vLLM engine needs gpu_memory_utilization <= {:.2} \
                     (default {:.2} does not fit)",
                    d.label(),
                    h.max_gpu_memory_utilization,
                    th.vllm_default_utilization
                ),
            )
        } else {
            continue;
        };
        let mut evidence = vec![
            ev_bytes("total", m.total),
            ev_bytes("reserved", m.reserved),
            ev_bytes("used", m.used),
            ev_bytes("free", m.free),
        ];
        // The largest holder: a budget-sized one is the WeClone pattern.
        let top = inv
            .processes
            .iter()
            .filter_map(|p| p.usage_on(d.index).and_then(|u| u.used).map(|b| (p, b)))
            .max_by_key(|(p, b)| (*b, u32::MAX - p.pid));
        if let Some((p, b)) = top {
            let frac = if m.total == 0 {
                0.0
            } else {
                b as f64 / m.total as f64
            };
            let mut label = format!("largest holder {} ({:.2} x total)", who(p), frac);
            if frac >= th.budget_holder_fraction {
                label.push_str(", a utilization-sized budget");
            }
            evidence.push(ev_bytes(label, b));
        }
        evidence.push(ev(
            "largest safe gpu_memory_utilization",
            format!("{:.2} = {}", h.max_gpu_memory_utilization, h.arithmetic),
        ));
        out.push(Finding {
            id: ids::LOW_HEADROOM.into(),
            severity,
            title,
            devices: vec![d.index],
            pid: None,
            evidence,
            fix: fixes::LOW_HEADROOM.into(),
        });
    }
    out
}
