//! `growth-without-release`: usage ratchets up at successive plateaus and never returns.

use super::prelude::*;

/// `growth-without-release`: on a device of the job, usage ratchets up at successive
/// plateaus and never returns, ending in an out-of-memory error (the failing allocation is
/// the last ratchet; when its size is known, it alone would have fit on top of the first
/// plateau) or near full while still growing.
pub(super) fn growth_without_release(cx: &Prepared, explained: &BTreeSet<u32>) -> Vec<Finding> {
    let th = cx.th;
    let mut out = Vec::new();
    for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
        if explained.contains(&d.index) || d.total == 0 {
            continue;
        }
        let levels = phase_levels(&d.samples, &cx.marker_times, d.step / 4);
        let oom = cx
            .ooms()
            .find(|e| cx.error_device(e) == Some(d.index) && e.t_ms >= d.samples[0].0);
        let mut hit: Option<(Chain, Option<&ErrorEvent>)> = None;
        if let Some(e) = oom {
            let n = levels.partition_point(|(t, _)| *t < e.t_ms);
            if let Some(c) = chains(&levels[..n], d.step).pop() {
                let fits = match (c.ratchets.first(), e.requested_bytes) {
                    (Some(r), Some(req)) => r.to.saturating_add(req) <= d.total,
                    _ => true,
                };
                // The failure must come as the next step of the growth, not long after it
                // stopped (a job that grew in its first minute and failed an hour later).
                let mut prev = levels[c.first].0;
                let mut widest = 0.0f64;
                for r in &c.ratchets {
                    widest = widest.max(r.t - prev);
                    prev = r.t;
                }
                let fresh = e.t_ms - prev <= (4.0 * widest).max(th.growth_stale_ms);
                if c.ratchets.len() + 1 >= th.growth_min_ratchets
                    && c.ratchets.len() >= 2
                    && fits
                    && fresh
                {
                    hit = Some((c, Some(e)));
                }
            }
        } else {
            let full = (th.near_full_fraction * d.total as f64) as u64;
            hit = chains(&levels, d.step)
                .into_iter()
                .find(|c| {
                    let (Some(a), Some(b)) = (c.ratchets.first(), c.ratchets.last()) else {
                        return false;
                    };
                    c.ratchets.len() >= th.growth_min_ratchets
                        && c.top >= full
                        && c.end_t - b.t <= b.t - a.t
                })
                .map(|c| (c, None));
        }
        let Some((c, e)) = hit else {
            continue;
        };
        let mut evidence: Vec<Evidence> = uuid_ev(d).into_iter().collect();
        evidence.push(ev_bytes("before the growth", c.ratchets[0].from));
        for (k, r) in c.ratchets.iter().enumerate() {
            let mut label = format!("plateau {} from {}", k + 1, fmt_t(r.t));
            if let Some(p) = cx.phase_at(r.t) {
                label.push_str(&format!(" ({p})"));
            }
            evidence.push(ev_bytes(label, r.to));
        }
        evidence.push(ev(
            "returned below an earlier plateau",
            "never (no drop of a step or more)",
        ));
        evidence.push(ev_bytes("a step is at least", d.step));
        let title = match e {
            Some(e) => {
                evidence.push(ev(
                    "ended in",
                    format!("out of memory at {}", fmt_t(e.t_ms)),
                ));
                if let Some(req) = e.requested_bytes {
                    evidence.push(ev_bytes("the failed allocation asked for", req));
                    evidence.push(ev(
                        "alone it would fit",
                        format!(
                            "{} (first plateau) + {} <= {} total",
                            format_bytes(c.ratchets[0].to),
                            format_bytes(req),
                            format_bytes(d.total)
                        ),
                    ));
                }
                format!(
                    "GPU {}: usage ratcheted up {} times without release ({} to {}), then out of \
                     memory",
                    d.index,
                    c.ratchets.len(),
                    format_bytes(c.ratchets[0].from),
                    format_bytes(c.top)
                )
            }
            None => {
                evidence.push(ev(
                    "ended",
                    format!(
                        "near full: {:.1}% of {}",
                        d.pct(c.top),
                        format_bytes(d.total)
                    ),
                ));
                format!(
                    "GPU {}: usage ratcheted up {} times without release, to {:.1}% of total",
                    d.index,
                    c.ratchets.len(),
                    d.pct(c.top)
                )
            }
        };
        out.push(Finding {
            id: ids::GROWTH_WITHOUT_RELEASE.into(),
            severity: if e.is_some() {
                Severity::Error
            } else {
                Severity::Warn
            },
            title,
            devices: vec![d.index],
            pid: cx.top_holder_at(d.index, c.end_t).map(|(p, _)| p),
            evidence,
            fix: fixes::GROWTH_WITHOUT_RELEASE.into(),
        });
    }
    out
}
