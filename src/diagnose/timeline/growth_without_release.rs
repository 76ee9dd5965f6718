//! `growth-without-release`: the job's usage ratchets up phase after phase and never returns.

use super::prelude::*;

/// What the rule found on one device.
struct Hit<'e> {
    chain: Chain,
    /// Index of the first step after the set-up (context, load) in `chain.ratchets`.
    steps_from: usize,
    oom: Option<&'e ErrorEvent>,
    /// The failing allocation is the staircase's next step.
    next_step: bool,
}

/// `growth-without-release`: a true ratchet. On a device of the job, the job's own usage
/// (the device less other processes' per-process memory where listed) steps up at
/// successive phases after its set-up (the CUDA context and the load are not growth) without
/// ever dropping back a step. It fires when:
/// - an out-of-memory error ends a staircase of at least `growth_min_ratchets` steps after
///   the load, the failing allocation counting as a step when it looks like the next one (at
///   least half the largest earlier step, and no more than the memory grown since the load,
///   which earlier phases kept); at least two steps must precede it, the request alone must
///   fit on top of the load, and the failure must follow the last step without a long stall
///   (`growth_stale_ms`, or 4 times the widest gap between steps): `error`;
/// - or, with no error, `growth_min_ratchets` steps after the load reach `near_full_fraction`
///   of total and usage is still climbing (the last plateau is no longer than the growth):
///   `warn`, a cause that will bite.
///
/// Not: a plain batch too big after the load (one rise, then the failure), NCCL buffers
/// (NVIDIA/nccl#864, #1685) or optimizer state added on the first steps (one or two rises,
/// then a failure unlike them), a neighbour's growth on a shared GPU (not the job's series).
pub(super) fn growth_without_release(cx: &Prepared, explained: &BTreeSet<u32>) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
        if explained.contains(&d.index) || d.total == 0 {
            continue;
        }
        let own = cx.job_points(d.index);
        let series: &[(f64, u64)] = own.as_deref().unwrap_or(&d.samples);
        if series.is_empty() {
            continue;
        }
        let levels = phase_levels(series, &cx.marker_times, d.step / 4);
        let Some(hit) = find_hit(cx, d, &levels) else {
            continue;
        };
        out.push(finding(cx, d, hit, own.is_some()));
    }
    out
}

fn find_hit<'e>(cx: &'e Prepared, d: &Dev, levels: &[(f64, u64)]) -> Option<Hit<'e>> {
    let th = cx.th;
    let oom = cx
        .ooms()
        .find(|e| cx.error_device(e) == Some(d.index) && e.t_ms >= d.samples[0].0);
    if let Some(e) = oom {
        let n = levels.partition_point(|(t, _)| *t < e.t_ms);
        let c = chains(&levels[..n], d.step).pop()?;
        let from = load_end(&c, th.context_sized_max);
        let steps = &c.ratchets[from..];
        if steps.is_empty() {
            return None;
        }
        let load = c.ratchets[from - 1];
        let req = e.requested_bytes;
        // The request alone fits on top of the load (device level then: neighbours count).
        let load_used = d.level_at(load.t).unwrap_or(load.to).max(load.to);
        if req.is_some_and(|r| load_used.saturating_add(r) > d.total) {
            return None;
        }
        let largest = steps.iter().map(|r| r.to - r.from).max().unwrap_or(0);
        let next_step = req.is_some_and(|r| r.saturating_mul(2) >= largest);
        let enough = if steps.len() >= 2 {
            steps.len() + usize::from(next_step) >= th.growth_min_ratchets
        } else {
            // One step after the load, then the failure (OneDiff dies at the second size):
            // only where markers say the failure is a later phase of the same work — the
            // request at least the step it repeats, in a phase marked after it. Unmarked, one
            // rise then a failure is as likely NCCL buffers then a too-big batch.
            let last = steps[0];
            let marked = cx
                .rec
                .judged_markers()
                .into_iter()
                .any(|m| is_phase(&m.kind) && m.t_ms > last.t && m.t_ms <= e.t_ms)
                && cx
                    .rec
                    .judged_markers()
                    .into_iter()
                    .any(|m| is_phase(&m.kind) && m.t_ms > load.t && m.t_ms <= last.t);
            marked && req.is_some_and(|r| r >= last.to - last.from) && th.growth_min_ratchets <= 3
        };
        if !enough {
            return None;
        }
        // The failure comes as the next step of the growth, not long after it stopped (a job
        // that grew in its first minute and failed an hour later).
        let mut prev = load.t;
        let mut widest = 0.0f64;
        for r in steps {
            widest = widest.max(r.t - prev);
            prev = r.t;
        }
        if e.t_ms - prev > (4.0 * widest).max(th.growth_stale_ms) {
            return None;
        }
        if !job_grew(cx, d.index, load.t, e.t_ms, c.top.saturating_sub(load.to)) {
            return None;
        }
        return Some(Hit {
            chain: c,
            steps_from: from,
            oom: Some(e),
            next_step,
        });
    }
    let full = (th.near_full_fraction * d.total as f64) as u64;
    chains(levels, d.step).into_iter().find_map(|c| {
        let from = load_end(&c, th.context_sized_max);
        let steps = &c.ratchets[from..];
        let (a, b) = (steps.first()?, steps.last()?);
        // Near full counts the device (neighbours included): what the next step will meet.
        let top_used = d.level_at(c.end_t).unwrap_or(c.top).max(c.top);
        (steps.len() >= th.growth_min_ratchets
            && top_used >= full
            && c.end_t - b.t <= b.t - a.t
            && job_grew(cx, d.index, a.t, c.end_t, c.top.saturating_sub(a.from)))
        .then_some(Hit {
            chain: c,
            steps_from: from,
            oom: None,
            next_step: false,
        })
    })
}

/// Where the job's processes are listed with their usage on `device`, whether what they hold
/// grew by at least half of `grown` from `from` to `to`: growth on the device that the job's
/// own listing does not show is someone else's (a neighbour NVML does not list, in a
/// container without the host's PID namespace). Lists lag the device by up to a period; the
/// half allows for it. No listed numbers for the job: true (the device is all there is).
fn job_grew(cx: &Prepared, device: u32, from: f64, to: f64, grown: u64) -> bool {
    match (cx.tree_usage_at(device, from), cx.tree_usage_at(device, to)) {
        (Some(a), Some(b)) => b.saturating_sub(a).saturating_mul(2) >= grown,
        _ => true,
    }
}

/// FAILURES.md §2's fix, then what PyTorch's caching allocator offers: `empty_cache()` between
/// sizes, and `expandable_segments` unless the job's environment already sets it.
fn growth_fix(cx: &Prepared, oom: Option<&ErrorEvent>) -> String {
    let conf = match oom {
        Some(e) => cx.alloc_conf(e),
        None => cx
            .rec
            .processes
            .iter()
            .filter(|p| p.in_tree)
            .find_map(|p| p.pytorch_cuda_alloc_conf.as_deref()),
    };
    let mut fix = fixes::GROWTH_WITHOUT_RELEASE.to_string();
    fix.push_str(if conf.is_some_and(expandable_on) {
        fixes::GROWTH_TORCH_EXPANDABLE_ON
    } else {
        fixes::GROWTH_TORCH
    });
    fix
}

/// A marker that starts a phase of work (a replay step, `vramdoc mark`).
fn is_phase(kind: &MarkerKind) -> bool {
    matches!(kind, MarkerKind::Step | MarkerKind::Marker)
}

fn finding(cx: &Prepared, d: &Dev, hit: Hit, own: bool) -> Finding {
    let c = &hit.chain;
    let steps = &c.ratchets[hit.steps_from..];
    let load = c.ratchets[hit.steps_from - 1];
    let mut evidence: Vec<Evidence> = uuid_ev(d).into_iter().collect();
    evidence.push(ev(
        "series",
        if own {
            "the device less other processes' per-process memory (the job's own)"
        } else {
            "the whole device (no per-process memory for the job)"
        },
    ));
    evidence.push(ev_bytes(
        format!("after the load, at {}", fmt_t(load.t)),
        load.to,
    ));
    for (k, r) in steps.iter().enumerate() {
        let mut label = format!("step {} from {}", k + 1, fmt_t(r.t));
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
    let n = steps.len();
    let (from, top) = (load.to, c.top);
    let title = match hit.oom {
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
                        "{} (after the load) + {} <= {} total",
                        format_bytes(from),
                        format_bytes(req),
                        format_bytes(d.total)
                    ),
                ));
                if hit.next_step {
                    evidence.push(ev_bytes(
                        "held from earlier phases since the load",
                        top.saturating_sub(from),
                    ));
                }
            }
            format!(
                "GPU {}: the job's usage stepped up {n} times after its load without release \
                 ({} to {}), then out of memory",
                d.name,
                format_bytes(from),
                format_bytes(top)
            )
        }
        None => {
            evidence.push(ev(
                "ended",
                format!(
                    "near full and still climbing: {:.1}% of {}",
                    d.pct(d.level_at(c.end_t).unwrap_or(top).max(top)),
                    format_bytes(d.total)
                ),
            ));
            format!(
                "GPU {}: the job's usage stepped up {n} times after its load without release, \
                 to {:.1}% of total",
                d.name,
                d.pct(top)
            )
        }
    };
    Finding {
        id: ids::GROWTH_WITHOUT_RELEASE.into(),
        severity: if hit.oom.is_some() {
            Severity::Error
        } else {
            Severity::Warn
        },
        title,
        devices: vec![d.index],
        pid: cx.top_holder_at(d.index, c.end_t).map(|(p, _)| p),
        evidence,
        fix: growth_fix(cx, hit.oom),
    }
}
