//! `overcommit`: one claim leaves free memory near zero and a failure follows.

use super::prelude::*;

/// A failure of dynamic work inside an over-committed budget: an allocation failure, or the
/// driver error it shows up as (`CUDA error: unknown error`, WeClone). Kills are not: SIGKILL
/// without an out-of-memory line is the host's OOM killer, SIGABRT the NCCL watchdog or an
/// assertion (`host-oom-kill`, `collective-timeout`); a stop asked for is no failure.
pub(super) fn is_failure(kind: &ErrorKind) -> bool {
    matches!(kind, ErrorKind::OutOfMemory | ErrorKind::DriverError)
}

/// `overcommit`: one claim of about utilisation x total — a single phase's rise of at least
/// `claim_min_fraction` of total that comes after the job's load (not the load itself) with at
/// most one step between (smaller than the claim), so never the last step of a staircase — leaves free memory near zero with one process of the job holding at least
/// `budget_holder_fraction` of the device, and an allocation failure or driver error follows
/// in later work (after the claim settled into a phase) while the claim is still held.
pub(super) fn overcommit(cx: &Prepared, double: &[Finding]) -> Vec<Finding> {
    let th = cx.th;
    let has_proc = cx.tree_has_samples();
    let mut out = Vec::new();
    for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
        if d.total == 0 {
            continue;
        }
        let total = d.total as f64;
        let levels = phase_levels(&d.samples, &cx.marker_times, d.step / 4);
        let mut hit = None;
        for i in 1..levels.len() {
            let (t0, l0) = levels[i - 1];
            let (t1, l1) = levels[i];
            let claim = l1.saturating_sub(l0);
            let free = d.total.saturating_sub(l1);
            if (claim as f64) < th.claim_min_fraction * total
                || free as f64 > th.near_zero_free_fraction * total
                || ends_a_staircase(&levels[..=i], d.step, th.context_sized_max, claim)
            {
                continue;
            }
            // The rise ended in a failure of its own (a load that ran out of memory, whose
            // error line is a phase boundary too): no claim that settled.
            if (cx.rec.errors.iter()).any(|e| {
                is_failure(&e.kind)
                    && e.t_ms > t0
                    && e.t_ms <= t1
                    && e.device.is_none_or(|x| x == d.index)
            }) {
                continue;
            }
            // A failure in later work, once the claim had settled into a phase (a plateau or
            // a marker; a failure while usage is still climbing is that work's own), while
            // the claim is still held.
            let Some(e) = cx.rec.errors.iter().find(|e| {
                e.t_ms >= t1
                    && is_failure(&e.kind)
                    && e.device.is_none_or(|x| x == d.index)
                    && levels
                        .iter()
                        .filter(|(t, _)| *t > t1 && *t < e.t_ms)
                        .all(|(_, l)| l.saturating_add(d.step) > l1)
            }) else {
                continue;
            };
            // Who holds the budget: per-process lists lag the device reading, so the
            // largest holder from the claim up to the failure.
            let holder = if has_proc {
                [t1, e.t_ms]
                    .iter()
                    .filter_map(|t| cx.top_holder_fine_at(d.index, *t))
                    .max_by_key(|(pid, u)| (*u, u32::MAX - *pid))
            } else {
                None
            };
            let held = match holder {
                Some((_, h)) => h,
                None if has_proc => 0,
                None => l1.saturating_sub(d.baseline),
            };
            if (held as f64) < th.budget_holder_fraction * total {
                continue;
            }
            if let Some((pid, _)) = holder {
                if double
                    .iter()
                    .any(|f| f.pid == Some(pid) && f.devices.contains(&d.index))
                {
                    continue;
                }
            }
            hit = Some((t1, l0, l1, claim, free, holder, held, e));
            break;
        }
        let Some((t1, l0, l1, claim, free, holder, held, e)) = hit else {
            continue;
        };
        let util = held as f64 / total;
        // The neighbours: what the GPU held before the job, and what other processes added
        // since (their lists), up to the claim.
        let neighbours = d.baseline.saturating_add(cx.others_growth(d, t1));
        let mut evidence: Vec<Evidence> = uuid_ev(d).into_iter().collect();
        evidence.push(ev_bytes(format!("one claim at {}", fmt_t(t1)), claim));
        if let Some(p) = cx.phase_at(t1) {
            evidence.push(ev("during", p));
        }
        evidence.push(ev_bytes("used before the claim", l0));
        evidence.push(ev_bytes("used after the claim", l1));
        evidence.push(ev_bytes("free after the claim", free));
        evidence.push(ev_bytes(
            match holder {
                Some((pid, _)) => format!("{} then held ({util:.2} x total)", cx.who(pid)),
                None => format!("the job then held ({util:.2} x total)"),
            },
            held,
        ));
        evidence.push(ev(
            "then failed",
            format!("at {}: {}", fmt_t(e.t_ms), e.line),
        ));
        out.push(Finding {
            id: ids::OVERCOMMIT.into(),
            severity: Severity::Error,
            title: format!(
                "GPU {}: one claim of {} left {} free ({:.2} x total held), then the job failed",
                d.name,
                format_bytes(claim),
                format_bytes(free),
                util
            ),
            devices: vec![d.index],
            pid: holder.map(|(p, _)| p),
            evidence,
            fix: format!(
                "{}{}",
                fixes::OVERCOMMIT,
                plan_hint(
                    d.total,
                    neighbours,
                    th.context_reserve,
                    l1.saturating_sub(neighbours)
                )
            ),
        });
    }
    out
}

/// The `gpu_memory_utilization` a vLLM server can claim on a GPU of `total` bytes beside
/// neighbours holding `others`, its own CUDA context (`context`) being there when vLLM
/// checks: the one convention (`diagnose::vllm_utilization`), and below the share its claim
/// took (`claimed`: the GPU's level after the claim less the neighbours), since a budget of
/// that share already left too little beside it. `None` where no budget fits.
pub(super) fn fitting_utilisation(
    total: u64,
    others: u64,
    context: u64,
    claimed: u64,
) -> Option<f64> {
    let free = total.saturating_sub(others).saturating_sub(context);
    let fits = crate::diagnose::vllm_utilization::fitting_hundredths(total, free);
    // The largest hundredth strictly below the claimed share.
    let t = total.max(1) as u128;
    let below = ((claimed.min(total) as u128 * 100).div_ceil(t) as u64).saturating_sub(1);
    let h = fits.min(below);
    (h > 0).then(|| h as f64 / 100.0)
}

/// The sentence naming the plan that fits beside the neighbours (docs/plan.md, issue 35).
fn plan_hint(total: u64, others: u64, context: u64, claimed: u64) -> String {
    let beside = format!(
        "{} of the GPU's {}",
        format_bytes(others),
        format_bytes(total)
    );
    match fitting_utilisation(total, others, context, claimed) {
        Some(u) => format!(
            " For a vLLM server, beside the {beside} that the other processes hold: `vramdoc \
             plan vllm MODEL_DIR --gpu-memory-utilization {u:.2}` (with the server's other \
             flags) checks on this GPU that a budget of that share starts (the largest whose \
             ceil(U x total) fits beside them and the server's own CUDA context, below the \
             share that failed) and suggests the length that fits (docs/plan.md)."
        ),
        None => format!(
            " The other processes hold {beside}: no vLLM budget fits beside them; free the \
             GPU, then `vramdoc plan vllm MODEL_DIR` (docs/plan.md)."
        ),
    }
}

/// Whether the last rise of `levels` is something other than one claim after the load: the
/// load itself (the chain's first rise past its context: weights, or a job that grabs
/// everything at once), or the last step of a staircase (in its chain, two or more steps came
/// after the load before it, or what they added is at least the claim).
fn ends_a_staircase(levels: &[(f64, u64)], step: u64, context_max: u64, claim: u64) -> bool {
    let Some(c) = chains(levels, step).pop() else {
        return true;
    };
    let Some((_, before)) = c.ratchets.split_last() else {
        return true;
    };
    let prior = Chain {
        ratchets: before.to_vec(),
        ..c.clone()
    };
    let from = load_end(&prior, context_max);
    let loaded = before.first().is_some_and(|first| {
        before[..from]
            .iter()
            .any(|r| r.to - first.from > context_max)
    });
    if !loaded {
        return true;
    }
    let steps = &before[from..];
    let added: u64 = steps.iter().map(|r| r.to.saturating_sub(r.from)).sum();
    steps.len() >= 2 || (!steps.is_empty() && added >= claim)
}
