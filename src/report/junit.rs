//! JUnit XML for CI systems, through the `quick-junit` crate (what cargo-nextest uses): a pure
//! function from the report model to bytes. One test case per replayed variant
//! ([`variant_case`]); `unexpected` is a failure whose element text holds the evidence,
//! `skipped` is skipped, `reproduced` and `fixed` pass. [`run_case`] builds the test case of a
//! single run (for `vramdoc run`). Written to disk only by `report::write`.

use crate::model::{Report, RunResult, Severity, VariantRun, Verdict};
use crate::report::text;
use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
#[error("building the JUnit report: {0}")]
pub struct JunitError(String);

/// How one test case ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseOutcome {
    Passed,
    /// `message`: one line (the `message` attribute); `evidence`: the element text.
    Failed {
        message: String,
        evidence: String,
    },
    Skipped {
        reason: String,
    },
}

/// One test case, independent of the XML crate.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// Grouping shown by CI systems (`vramdoc.replay.<scenario>`).
    pub classname: String,
    pub name: String,
    pub outcome: CaseOutcome,
    pub duration: Duration,
    /// Free text shown next to the case (verdict, report path).
    pub system_out: Option<String>,
}

fn report_line(html_report: Option<&str>) -> String {
    match html_report {
        Some(p) => format!("\nFull report (memory chart per device): {p}"),
        None => String::new(),
    }
}

/// The test case of one replayed variant. `html_report`: path of the HTML report written by
/// the same command, referenced in the case's text.
pub fn variant_case(run: &VariantRun, html_report: Option<&str>) -> Case {
    let verdict = super::text::verdict_word(run.verdict);
    let outcome = match run.verdict {
        Verdict::Reproduced | Verdict::Fixed => CaseOutcome::Passed,
        Verdict::Skipped => CaseOutcome::Skipped {
            reason: run.reason.clone().unwrap_or_else(|| "not run".into()),
        },
        Verdict::Unexpected => {
            let failed: Vec<_> = run.checks.iter().filter(|c| !c.passed).collect();
            let message = match (failed.first(), &run.reason) {
                (Some(c), _) => format!("expected {}", c.expectation),
                (None, Some(r)) => r.clone(),
                (None, None) => "the variant did not behave as its expectations say".into(),
            };
            let mut evidence = String::new();
            for c in &failed {
                evidence.push_str(&format!(
                    "expected {}\n  observed: {}\n",
                    c.expectation, c.detail
                ));
            }
            if let Some(r) = &run.reason {
                evidence.push_str(&format!("reason: {r}\n"));
            }
            if let Some(e) = &run.error {
                evidence.push_str(&format!(
                    "worker error: {} at step {} ({}) after {:.1} ms: {}\n",
                    e.kind, e.step, e.step_label, e.t_ms, e.message
                ));
            }
            for p in &run.peaks {
                evidence.push_str(&format!(
                    "peak used on GPU {}: {} of {} bytes\n",
                    p.device, p.peak_used, p.total
                ));
            }
            evidence.push_str(&report_line(html_report));
            CaseOutcome::Failed {
                message,
                evidence: evidence.trim_end().to_string(),
            }
        }
    };
    let passed = run.checks.iter().filter(|c| c.passed).count();
    let system_out = format!(
        "verdict: {verdict}; checks passed: {passed}/{}; source: {}{}",
        run.checks.len(),
        run.source,
        report_line(html_report)
    );
    Case {
        classname: format!("vramdoc.replay.{}", run.scenario),
        name: format!("{}/{}", run.scenario, run.variant),
        outcome,
        duration: Duration::from_millis(run.duration_ms),
        system_out: Some(system_out),
    }
}

/// Why a run is a failed test case: the command's status, else the findings at or above
/// `fail_on`; `None` when it passed. `(message, evidence)`: the error lines, every finding
/// ([`text::finding_text`]) and the stderr tail. Pure.
pub fn run_failure(run: &RunResult, fail_on: Option<Severity>) -> Option<(String, String)> {
    use crate::term::one_line;
    let mut evidence = String::new();
    for e in &run.errors {
        let line: String = one_line(&e.line).chars().take(300).collect();
        evidence.push_str(&format!("{} at {:.0} ms: {line}\n", e.kind, e.t_ms));
    }
    for f in &run.findings {
        let t = text::finding_text(f);
        evidence.push_str(&format!("{}\n", t.head));
        for l in &t.lines {
            evidence.push_str(&format!("  {l}\n"));
        }
    }
    if !run.stderr_tail.is_empty() {
        evidence.push_str("stderr (last lines, redacted):\n");
        for l in &run.stderr_tail {
            evidence.push_str(&format!("  {}\n", one_line(l)));
        }
    }
    let over: Vec<&str> = run
        .findings
        .iter()
        .filter(|f| fail_on.is_some_and(|l| f.severity >= l))
        .map(|f| f.id.as_str())
        .collect();
    let message = if run.exit.status != 0 {
        match (&run.exit.signal_name, run.exit.code) {
            (Some(sig), _) => format!("the command was killed by {sig}"),
            (None, Some(c)) => format!("the command exited {c}"),
            _ => format!("the command ended with status {}", run.exit.status),
        }
    } else if let (Some(level), false) = (fail_on, over.is_empty()) {
        format!(
            "finding{} at or above --fail-on {}: {}",
            if over.len() == 1 { "" } else { "s" },
            text::severity_word(level).to_ascii_lowercase(),
            over.join(", ")
        )
    } else {
        return None;
    };
    Some((message, evidence))
}

/// The test case of one single run (for `vramdoc run`): `failure` is `None` when the run
/// passed, else `(one-line message, evidence)`.
pub fn run_case(
    name: &str,
    failure: Option<(String, String)>,
    duration: Duration,
    html_report: Option<&str>,
) -> Case {
    let outcome = match failure {
        None => CaseOutcome::Passed,
        Some((message, evidence)) => CaseOutcome::Failed {
            message,
            evidence: format!("{evidence}{}", report_line(html_report)),
        },
    };
    Case {
        classname: "vramdoc.run".into(),
        name: name.to_string(),
        outcome,
        duration,
        system_out: html_report.map(|p| format!("Full report: {p}")),
    }
}

/// A JUnit document with one suite named `suite` holding `cases`.
pub fn render_cases(suite: &str, cases: &[Case]) -> Result<String, JunitError> {
    let mut ts = TestSuite::new(suite);
    let mut total = Duration::ZERO;
    for c in cases {
        let status = match &c.outcome {
            CaseOutcome::Passed => TestCaseStatus::success(),
            CaseOutcome::Failed { message, evidence } => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(message.as_str())
                    .set_type("unexpected")
                    .set_description(evidence.as_str());
                s
            }
            CaseOutcome::Skipped { reason } => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(reason.as_str());
                s
            }
        };
        let mut tc = TestCase::new(c.name.as_str(), status);
        tc.set_classname(c.classname.as_str()).set_time(c.duration);
        if let Some(o) = &c.system_out {
            tc.set_system_out(o.as_str());
        }
        total += c.duration;
        ts.add_test_case(tc);
    }
    ts.set_time(total);
    let mut report = quick_junit::Report::new("vramdoc");
    report.set_time(total).add_test_suite(ts);
    report.to_string().map_err(|e| JunitError(e.to_string()))
}

/// JUnit for a replay report: one test case per variant, in run order.
pub fn render_replay(report: &Report, html_report: Option<&str>) -> Result<String, JunitError> {
    let runs = report.replay().map(|r| r.runs.as_slice()).unwrap_or(&[]);
    let cases: Vec<Case> = runs.iter().map(|r| variant_case(r, html_report)).collect();
    render_cases("vramdoc replay", &cases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CheckResult, Timeline};

    fn run(verdict: Verdict) -> VariantRun {
        VariantRun {
            scenario: "stray-cuda0".into(),
            variant: "bug".into(),
            source: "OneDiff <script>&".into(),
            verdict,
            reason: (verdict == Verdict::Skipped).then(|| "needs 2 GPUs".into()),
            checks: vec![CheckResult {
                expectation: "context on GPU 0 only".into(),
                passed: verdict != Verdict::Unexpected,
                detail: "GPU 1 gained 448 MiB <&>".into(),
            }],
            worker_pid: None,
            error: None,
            peaks: vec![],
            timeline: Timeline::default(),
            duration_ms: 1500,
            steps: vec![],
            findings: vec![],
        }
    }

    #[test]
    fn verdicts_map_to_junit_statuses_with_escaped_evidence() {
        let cases: Vec<Case> = [Verdict::Reproduced, Verdict::Unexpected, Verdict::Skipped]
            .into_iter()
            .map(|v| variant_case(&run(v), Some("out/r.html")))
            .collect();
        let xml = render_cases("vramdoc replay", &cases).unwrap();
        let parsed = quick_junit::Report::deserialize_from_str(&xml).unwrap();
        assert_eq!(parsed.tests, 3);
        assert_eq!(parsed.failures, 1);
        assert!(xml.contains("<skipped message=\"needs 2 GPUs\""), "{xml}");
        assert!(xml.contains("GPU 1 gained 448 MiB &lt;&amp;&gt;"), "{xml}");
        assert!(xml.contains("out/r.html"));
        assert!(xml.contains("classname=\"vramdoc.replay.stray-cuda0\""));
        assert!(xml.contains("time=\"1.500\""), "{xml}");
    }

    #[test]
    fn single_run_case() {
        let ok = run_case("my-job", None, Duration::from_secs(2), None);
        assert_eq!(ok.outcome, CaseOutcome::Passed);
        let bad = run_case(
            "my-job",
            Some(("OOM".into(), "step 3".into())),
            Duration::from_secs(2),
            Some("r.html"),
        );
        let xml = render_cases("vramdoc run", &[bad]).unwrap();
        assert!(xml.contains("<failure message=\"OOM\""), "{xml}");
        assert!(xml.contains("step 3\nFull report (memory chart per device): r.html"));
    }
}
