//! After the worker: what it did is fed to the recorder for the rules (step ends, release
//! points, its usage at each boundary, itself as the job's process, its typed failure), the
//! recording is finished, and the variant is judged — per-step peaks, the worker's own
//! footprint and context cost for the expectations ([`super::checks`]), the verdict, and the
//! scenario's fingerprint on the recording ([`super::fingerprint`]).

use super::fingerprint;
use super::variant::{Outcome, View};
use crate::model::{MarkerKind, StepErrorKind, StepStatus, Timeline, VariantRun, Verdict};
use crate::record::{ErrorKind, JobEnd, JobExit, Recorded, RecordedProcess, Recorder};
use crate::scenario::{Op, Scenario, Variant, VariantKind, VariantPlan};

/// Feed the recorder what the rules read besides the timeline; how the job ended.
pub(super) fn feed_recording(
    scn: &Scenario,
    worker: &Outcome,
    recorder: &Recorder,
    view: &View,
    end_ms: f64,
) -> JobEnd {
    let release_after = fingerprint::release_steps(scn);
    // Every step's end is a phase boundary (its memory was read there; the next step's start
    // marker can come a little after its first allocation). Release points: the end of each
    // named step that completed.
    for r in &worker.records {
        let Some(t) = r.end_ms else { continue };
        recorder.boundary(
            t,
            MarkerKind::StepEnd,
            format!("{} ended ({})", r.id, r.status),
        );
        if release_after.contains(&r.id) && r.status == StepStatus::Ok {
            recorder.boundary(t, MarkerKind::Release, format!("{}: {}", r.id, r.label));
        }
    }
    if let Some(pid) = worker.worker_pid {
        // The worker's own usage read at every step boundary.
        for r in &worker.records {
            if let Some(t) = r.end_ms {
                recorder.boundary_usage(t, pid, &r.worker_after);
            }
        }
        recorder.process(RecordedProcess {
            name: Some("vramdoc __worker".into()),
            exit_ms: Some(end_ms),
            cuda_visible_devices: Some(view.pinned.clone()),
            ..RecordedProcess::seen(pid, 0.0, true)
        });
    }
    let event = match (&worker.error, &worker.failure) {
        (Some(e), Some(f)) => fingerprint::error_event(e, f, worker.worker_pid, &worker.records),
        _ => None,
    };
    let exit = event.as_ref().and_then(|e| match e.kind {
        ErrorKind::KilledBySignal { signal } => Some(JobExit::Signal(signal)),
        _ => None,
    });
    if let Some(e) = event {
        recorder.error(e);
    }
    JobEnd { end_ms, exit }
}

/// The finished variant: checks, verdict and fingerprint.
pub(super) fn judge(
    scn: &Scenario,
    variant: &Variant,
    plan: &VariantPlan,
    view: &View,
    worker: Outcome,
    recorded: Recorded,
) -> VariantRun {
    let devices = recorded.recording.devices.clone();
    let Outcome {
        baseline,
        mut records,
        error,
        completed,
        interrupted,
        worker_pid,
        ident,
        held_share,
        context_positions,
        ..
    } = worker;
    let view_ordinals: Vec<usize> = view.ordinals.iter().map(|p| *p as usize).collect();
    let timeline: Timeline = recorded.recording.timeline.clone();
    // Peak per step: samples from its start to its end.
    for r in records.iter_mut() {
        let end = r.end_ms.unwrap_or(f64::INFINITY);
        r.peak_used = timeline
            .devices
            .iter()
            .map(|s| {
                s.samples
                    .iter()
                    .filter(|(t, _)| *t >= r.start_ms && *t <= end)
                    .map(|(_, u)| *u)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
    }
    // The worker's own usage per device: the most it held in any reading.
    let mut worker_max = vec![0u64; devices.len()];
    for r in &records {
        for (i, v) in r.worker_after.iter().enumerate() {
            if let Some(m) = worker_max.get_mut(i) {
                *m = (*m).max(*v);
            }
        }
    }
    if let Some(pid) = ident.nvml {
        for p in timeline.processes.iter().filter(|p| p.pid == pid) {
            if let Some(i) = devices.iter().position(|d| d.index == p.device) {
                worker_max[i] = worker_max[i].max(p.used.unwrap_or(0));
            }
        }
    }
    // Context cost per device: the worker's growth across its `context` steps.
    let mut context_cost: Vec<Option<u64>> = vec![None; devices.len()];
    let mut prev = vec![0u64; devices.len()];
    for r in &records {
        if r.worker_after.len() != devices.len() {
            continue;
        }
        if let (Op::Context { device }, StepStatus::Ok) = (&plan.steps[r.index].op, &r.status) {
            // The device the worker itself named by UUID; else the pinned view.
            let by_uuid = context_positions
                .iter()
                .find(|(o, _)| o == device)
                .map(|(_, p)| *p);
            let pos = by_uuid.or_else(|| view_ordinals.get(*device as usize).copied());
            if let Some(p) = pos {
                let delta = r.worker_after[p].saturating_sub(prev[p]);
                if delta > 0 && context_cost[p].is_none() {
                    context_cost[p] = Some(delta);
                }
            }
        }
        prev.clone_from(&r.worker_after);
    }
    let facts = super::checks::Facts {
        plan_ids: plan.steps.iter().map(|s| s.id.clone()).collect(),
        records: &records,
        error: error.as_ref(),
        completed,
        totals: devices.iter().map(|d| d.total).collect(),
        baseline,
        context_cost,
        worker_max,
        peaks: recorded.peaks.iter().map(|p| p.peak_used).collect(),
        needed: scn.devices,
        smallest: view.smallest,
        held_share,
    };
    let mut checks: Vec<_> = variant
        .expect
        .iter()
        .map(|e| super::checks::evaluate(e, &facts))
        .collect();
    let all_passed = checks.iter().all(|c| c.passed);
    let mut verdict = match (all_passed && !interrupted, variant.kind) {
        (true, VariantKind::Bug) => Verdict::Reproduced,
        (true, VariantKind::Fix) => Verdict::Fixed,
        (false, _) => Verdict::Unexpected,
    };
    let mut reason = if interrupted {
        Some("interrupted (Ctrl-C): partial results".to_string())
    } else if let Some(e) = error
        .as_ref()
        .filter(|e| e.kind != StepErrorKind::OutOfMemory)
    {
        Some(format!("{} at {}: {}", e.kind, e.step_label, e.message))
    } else if !all_passed {
        checks
            .iter()
            .find(|c| !c.passed)
            .map(|c| format!("expected {}: {}", c.expectation, c.detail))
    } else {
        None
    };
    // The scenario's fingerprint, checked on the recording: one more check; a failing one
    // makes the verdict `unexpected`.
    let mut findings = Vec::new();
    if let Some((check, all)) = fingerprint::check(scn, variant.kind, &recorded.recording) {
        findings = all;
        if !check.passed && verdict != Verdict::Unexpected {
            verdict = Verdict::Unexpected;
            if reason.is_none() {
                reason = Some(format!("expected {}: {}", check.expectation, check.detail));
            }
        }
        checks.push(check);
    }
    VariantRun {
        scenario: scn.id.clone(),
        variant: variant.name.clone(),
        source: scn.source.clone(),
        verdict,
        reason,
        checks,
        worker_pid,
        error,
        peaks: recorded.peaks,
        timeline,
        // Set by the caller, who knows when the variant started.
        duration_ms: 0,
        steps: records,
        findings,
    }
}
