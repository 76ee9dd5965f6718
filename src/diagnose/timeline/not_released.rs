//! `not-released`: memory still held after a `release` marker.

use super::prelude::*;

/// Settling time after a release marker (bounded by the next marker).
pub(super) const RELEASE_SETTLE_MS: f64 = 2000.0;

/// `not-released`: after a `release` marker, every device the job used still holds more
/// than [`TimelineThresholds::residual_min`] (and `residual_fraction` of total) above its
/// pre-job level. One finding, for the first such marker.
pub(super) fn not_released(cx: &Prepared) -> Vec<Finding> {
    let th = cx.th;
    let mut releases: Vec<&Marker> = cx
        .rec
        .judged_markers()
        .into_iter()
        .filter(|m| m.kind == MarkerKind::Release)
        .collect();
    releases.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    let has_proc = cx.tree_has_samples();
    for m in releases {
        let t = m.t_ms;
        let next = cx
            .marker_times
            .iter()
            .copied()
            .find(|x| *x > t)
            .unwrap_or(f64::INFINITY)
            .min(t + RELEASE_SETTLE_MS);
        let mut rows: Vec<(&Dev, u64, u64, Option<u64>)> = Vec::new();
        let mut all = true;
        for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
            if m.device.is_some_and(|x| x != d.index) {
                continue;
            }
            let threshold = th
                .residual_min
                .max((th.residual_fraction * d.total as f64) as u64);
            // Participating: the job held more than a context there before the release.
            let participated = if has_proc {
                cx.tree.iter().any(|pid| {
                    cx.procs
                        .get(pid)
                        .and_then(|m| m.get(&d.index))
                        .is_some_and(|s| {
                            s.iter()
                                .take_while(|(ts, _)| *ts <= t)
                                .any(|(_, u)| u.is_some_and(|u| u > th.context_sized_max))
                        })
                })
            } else {
                let n = d.samples.partition_point(|(ts, _)| *ts <= t);
                d.samples[..n].iter().map(|p| p.1).max().unwrap_or(0)
                    >= d.baseline.saturating_add(threshold)
            };
            if !participated {
                continue;
            }
            let lo = d.samples.partition_point(|(ts, _)| *ts < t);
            let hi = d.samples.partition_point(|(ts, _)| *ts <= next);
            let after = d.samples[lo..hi]
                .iter()
                .map(|p| p.1)
                .min()
                .or_else(|| d.level_at(t))
                .unwrap_or(0);
            let residual = after.saturating_sub(d.baseline);
            let held = cx.tree_usage_at(d.index, next.min(cx.rec.end_ms.max(t)));
            let counted = residual >= threshold && held.is_none_or(|h| h >= threshold);
            all &= counted;
            rows.push((d, residual, threshold, held));
        }
        if rows.is_empty() || !all {
            continue;
        }
        let mut evidence = vec![ev("release marker", format!("{} at {}", m.label, fmt_t(t)))];
        for (d, residual, _, held) in &rows {
            evidence.extend(uuid_ev(d));
            evidence.push(ev_bytes(
                format!("GPU {}: still held above the pre-job level", d.index),
                *residual,
            ));
            if let Some(h) = held {
                evidence.push(ev_bytes(
                    format!("GPU {}: held by the job's processes", d.index),
                    *h,
                ));
            }
        }
        let hi = rows.iter().map(|r| r.1).max().unwrap_or(0);
        let lo = rows.iter().map(|r| r.1).min().unwrap_or(0);
        if rows.len() > 1 && hi > 0 {
            evidence.push(ev(
                "spread between devices",
                format!(
                    "{:.1}% of the largest",
                    (hi - lo) as f64 * 100.0 / hi as f64
                ),
            ));
        }
        evidence.push(ev_bytes(
            "residual counts from",
            rows.iter().map(|r| r.2).min().unwrap_or(0),
        ));
        let devices: Vec<u32> = rows.iter().map(|r| r.0.index).collect();
        return vec![Finding {
            id: ids::NOT_RELEASED.into(),
            severity: Severity::Warn,
            title: format!(
                "After the release at {}, GPU {} still hold{} {} above the pre-job level",
                fmt_t(t),
                super::evidence::gpus(&devices),
                if devices.len() == 1 { "s" } else { "" },
                if rows.len() == 1 || hi == lo {
                    format_bytes(hi)
                } else {
                    format!("{} to {}", format_bytes(lo), format_bytes(hi))
                }
            ),
            devices,
            pid: None,
            evidence,
            fix: fixes::NOT_RELEASED.into(),
        }];
    }
    Vec::new()
}
