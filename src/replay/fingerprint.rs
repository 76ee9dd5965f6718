//! Replays prove the fingerprints: the recorder's [`Recording`] of a finished variant (its
//! timeline, per-step readings of the worker, its typed error, release points) is given to
//! the timeline engine in `diagnose::timeline`, which says which fingerprints it shows. The scenario's
//! `fingerprint` must fire on its bug variant and stay silent on every fix variant; the
//! outcome is one more [`CheckResult`] of the variant. Nothing here decides a finding.

use super::Failure;
use crate::diagnose::{fingerprints, TimelineThresholds};
use crate::model::{CheckResult, Finding, StepError, StepErrorKind, StepRecord};
use crate::record::{ErrorEvent, Recording};
use crate::scenario::{Expectation, Scenario, VariantKind};

/// Steps after which a scenario expects memory to be released: the `after` of its
/// `residual` checks (in any variant, so bug and fix are read at the same points).
pub fn release_steps(scn: &Scenario) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in &scn.variants {
        for e in &v.expect {
            if let Expectation::Residual { after, .. } = e {
                if !out.contains(after) {
                    out.push(after.clone());
                }
            }
        }
    }
    out
}

/// The variant's failure as the rules read it (`None` for an interruption), from its typed
/// [`Failure`]: the error's message is for people and never read back. The failure happened
/// during its step; the monitor hears of it a little later, when the dying worker may
/// already have returned its memory. The rules read the state at the error's time: it is
/// the last reading before the failing step (the previous step's end, where the lockstep
/// worker waited, alive, for its acknowledgement).
pub fn error_event(
    e: &StepError,
    failure: &Failure,
    pid: Option<u32>,
    steps: &[StepRecord],
) -> Option<ErrorEvent> {
    if e.kind == StepErrorKind::Interrupted {
        return None;
    }
    let failing = steps
        .iter()
        .rposition(|r| r.index == e.step && r.status.failure() == Some(&e.kind));
    let before = failing.and_then(|i| {
        let prev = i.checked_sub(1).and_then(|p| steps[p].end_ms);
        prev.map(|t| t + 0.001).or(Some(steps[i].start_ms))
    });
    Some(ErrorEvent {
        t_ms: before.map_or(e.t_ms, |t| e.t_ms.min(t)),
        kind: failure.kind.clone(),
        device: failure.device,
        pid,
        line: format!("{}: {}", e.step_label, e.message),
        requested_bytes: failure.requested,
        facts: None,
    })
}

/// The fingerprint check of a variant (`None` when the scenario names no fingerprint), with
/// every finding the engine raised.
pub fn check(
    scn: &Scenario,
    kind: VariantKind,
    rec: &Recording,
) -> Option<(CheckResult, Vec<Finding>)> {
    let fp = scn.fingerprint.as_deref()?;
    let findings = fingerprints(rec, &TimelineThresholds::default());
    let fired: Vec<&Finding> = findings.iter().filter(|f| f.id == fp).collect();
    let others: Vec<&str> = findings
        .iter()
        .filter(|f| f.id != fp)
        .map(|f| f.id.as_str())
        .collect();
    let mut detail = match fired.first() {
        Some(f) => format!("fired: {}", f.title),
        None => "silent".to_string(),
    };
    if !others.is_empty() {
        detail.push_str(&format!("; also: {}", others.join(", ")));
    }
    let result = match kind {
        VariantKind::Bug => CheckResult {
            expectation: format!("the {fp} fingerprint fires"),
            passed: !fired.is_empty(),
            detail,
        },
        VariantKind::Fix => CheckResult {
            expectation: format!("the {fp} fingerprint stays silent"),
            passed: fired.is_empty(),
            detail,
        },
    };
    Some((result, findings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ErrorKind;

    fn step(index: usize, id: &str, start: f64, end: f64, status: &str) -> StepRecord {
        StepRecord {
            index,
            id: id.into(),
            label: id.into(),
            op: "alloc".into(),
            start_ms: start,
            end_ms: Some(end),
            status: status.into(),
            bytes: None,
            used_after: Vec::new(),
            worker_after: Vec::new(),
            held_after: 0,
            peak_used: Vec::new(),
        }
    }

    fn oom(message: &str) -> StepError {
        StepError {
            step: 2,
            step_label: "tune-b".into(),
            kind: StepErrorKind::OutOfMemory,
            message: message.into(),
            t_ms: 9.0,
        }
    }

    /// The monitor hears of the OOM only after the dying worker's memory is gone: the event
    /// is placed at the last reading before the failing step.
    #[test]
    fn a_late_error_reads_the_state_before_the_failing_step() {
        let steps = vec![
            step(0, "load", 1.0, 2.0, "ok"),
            step(1, "tune-a", 3.0, 4.0, "ok"),
            step(2, "tune-b", 8.0, 9.0, "out-of-memory"),
        ];
        let f = Failure {
            kind: ErrorKind::OutOfMemory,
            device: Some(1),
            requested: Some(4_682_940_416),
        };
        let ev = error_event(&oom("x"), &f, Some(42), &steps).unwrap();
        assert_eq!(ev.t_ms, 4.001);
        assert_eq!(
            (ev.kind, ev.device, ev.requested_bytes, ev.pid),
            (
                ErrorKind::OutOfMemory,
                Some(1),
                Some(4_682_940_416),
                Some(42)
            )
        );
        let stop = StepError {
            kind: StepErrorKind::Interrupted,
            ..oom("stopped")
        };
        assert!(error_event(&stop, &f, None, &steps).is_none());
    }

    /// Issue 14: what the rules read comes from the typed failure, so rewording an error's
    /// `#[error(..)]` text (here: a message naming another device and size, and one naming
    /// none) changes nothing a fingerprint sees.
    #[test]
    fn the_error_text_never_changes_what_the_rules_read() {
        let steps = vec![step(2, "tune-b", 8.0, 9.0, "out-of-memory")];
        let f = Failure {
            kind: ErrorKind::OutOfMemory,
            device: Some(0),
            requested: Some(12),
        };
        let messages = [
            "out of memory on device 0: requested 12 bytes (3 bytes free)",
            "out of memory on device 7: requested 999 bytes",
            "la mémoire est pleine",
        ];
        let read: Vec<_> = messages
            .iter()
            .map(|m| {
                let ev = error_event(&oom(m), &f, Some(7), &steps).unwrap();
                (ev.t_ms, ev.kind, ev.device, ev.requested_bytes, ev.pid)
            })
            .collect();
        assert!(read.windows(2).all(|w| w[0] == w[1]), "{read:?}");
        assert_eq!(read[0].2, Some(0));
        assert_eq!(read[0].3, Some(12));
    }
}
