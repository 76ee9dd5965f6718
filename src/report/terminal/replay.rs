//! `vramdoc replay` in the terminal: the summary table of every variant run (verdict,
//! outcome, peak per GPU, checks) and, below it, why each unexpected one failed.

use super::{clip, table, Options};
use crate::model::{VariantRun, Verdict};

/// The word for a verdict in the terminal (`UNEXPECTED` shouts).
pub fn verdict_str(v: Verdict) -> &'static str {
    match v {
        Verdict::Reproduced => "reproduced",
        Verdict::Fixed => "fixed",
        Verdict::Unexpected => "UNEXPECTED",
        Verdict::Skipped => "skipped",
    }
}

/// How a run ended, in a few words: `completed`, `OOM at STEP`, `KIND at STEP`, or why it
/// was skipped.
pub fn outcome(run: &VariantRun) -> String {
    match (&run.error, run.verdict) {
        (_, Verdict::Skipped) => run.reason.clone().unwrap_or_default(),
        (Some(e), _) if e.kind == crate::model::StepErrorKind::OutOfMemory => {
            format!("OOM at {}", e.step_label)
        }
        (Some(e), _) => format!("{} at {}", e.kind, e.step_label),
        (None, _) => "completed".into(),
    }
}

/// The peak of each GPU as a share of its memory, e.g. `0:97% 1:2%`.
pub fn peaks(run: &VariantRun) -> String {
    run.peaks
        .iter()
        .map(|p| {
            let pct = if p.total > 0 {
                p.peak_used as f64 * 100.0 / p.total as f64
            } else {
                0.0
            };
            format!("{}:{pct:.0}%", p.device)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The summary table of `runs`, then one line per failed check of each unexpected run (or
/// its reason, when every check passed). No trailing newline.
pub fn summary(runs: &[VariantRun], opts: Options) -> String {
    let clean = crate::term::clean;
    let mut t = table(
        vec![
            "scenario", "variant", "verdict", "outcome", "peak/GPU", "checks",
        ],
        opts.width,
    );
    for r in runs {
        let passed = r.checks.iter().filter(|c| c.passed).count();
        t.add_row(vec![
            clean(&r.scenario),
            clean(&r.variant),
            verdict_str(r.verdict).to_string(),
            clean(&outcome(r)),
            peaks(r),
            format!("{passed}/{}", r.checks.len()),
        ]);
    }
    let mut out = t.to_string();
    for r in runs.iter().filter(|r| r.verdict == Verdict::Unexpected) {
        for c in r.checks.iter().filter(|c| !c.passed) {
            let line = format!(
                "{}/{}: expected {}; {}",
                r.scenario, r.variant, c.expectation, c.detail
            );
            out.push('\n');
            out.push_str(&clip(&clean(&line), opts.width));
        }
        if let Some(reason) = &r.reason {
            if r.checks.iter().all(|c| c.passed) {
                out.push('\n');
                out.push_str(&clip(
                    &clean(&format!("{}/{}: {reason}", r.scenario, r.variant)),
                    opts.width,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CheckResult, DevicePeak, StepError, Timeline};

    fn run(verdict: Verdict) -> VariantRun {
        VariantRun {
            scenario: "multi-size-oom".into(),
            variant: "bug".into(),
            source: "test".into(),
            verdict,
            reason: None,
            checks: vec![
                CheckResult {
                    expectation: "an out-of-memory error".into(),
                    passed: true,
                    detail: "at step 4".into(),
                },
                CheckResult {
                    expectation: format!("memory returns \u{1b}[31m{}", "x".repeat(200)),
                    passed: verdict != Verdict::Unexpected,
                    detail: "it did not".into(),
                },
            ],
            worker_pid: Some(7),
            error: Some(StepError {
                step: 4,
                step_label: "render 1360x1536".into(),
                kind: "out-of-memory".into(),
                message: "out of memory".into(),
                t_ms: 1180.0,
            }),
            peaks: vec![DevicePeak {
                device: 0,
                total: 1000,
                peak_used: 966,
                t_ms: 1.0,
            }],
            timeline: Timeline::default(),
            duration_ms: 1300,
            findings: vec![],
            steps: vec![],
        }
    }

    #[test]
    fn summary_names_each_run_and_why_an_unexpected_one_failed() {
        let text = summary(
            &[run(Verdict::Reproduced), run(Verdict::Unexpected)],
            Options::default(),
        );
        assert!(text.contains("reproduced"), "{text}");
        assert!(text.contains("UNEXPECTED"), "{text}");
        assert!(text.contains("OOM at render 1360x1536"), "{text}");
        assert!(text.contains("0:97%"), "{text}");
        assert!(text.contains("1/2"), "{text}");
        let why = text.lines().last().unwrap();
        assert!(
            why.starts_with("multi-size-oom/bug: expected memory returns"),
            "{why}"
        );
        assert!(why.ends_with('…') && why.chars().count() == 100, "{why}");
        assert!(
            !text.contains('\u{1b}'),
            "escape sequences are shown, not sent"
        );
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{line}");
        }
    }
}
