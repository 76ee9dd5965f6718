//! A user's own reproduction replayed as a scenario: `vramdoc replay --expect FINGERPRINT
//! [--fix ARGS]... -- CMD...`. The command as given is the `bug` variant, which must show
//! every expected fingerprint; each `--fix` is a fix variant (the same command with
//! `NAME=VALUE` words set in its environment and the other words appended to its
//! arguments), which must exit 0 with none of them. Each variant is watched on the
//! session's GPUs by [`super::watch`] and becomes a [`VariantRun`], so replay's table, JSON
//! and JUnit report it as they report a scenario file's variants.
//!
//! The command comes from the command line only, never from a file: a scenario file arrives
//! with a ticket and may not run anything.

use super::{watch, WatchError, WatchOptions};
use crate::model::{
    CheckResult, Finding, MarkerKind, Severity, StepError, StepErrorKind, VariantRun, Verdict,
};
use crate::record::sampler::SamplerConfig;
use crate::session::Session;
use std::ffi::OsString;

/// One fix variant: what `--fix` said, split.
#[derive(Debug, Clone, PartialEq)]
pub struct Fix {
    /// As written (`CUDA_VISIBLE_DEVICES=1`, `--fixed`).
    pub text: String,
    pub env: Vec<(OsString, OsString)>,
    pub args: Vec<OsString>,
}

/// Why a `--fix` value cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FixError {
    #[error("--fix {0:?}: unbalanced quotes (write it as a shell would split it, e.g. --fix '--batch 8')")]
    Quotes(String),
    #[error("--fix {0:?}: empty (write the arguments the fixed run adds, or NAME=VALUE for its environment)")]
    Empty(String),
}

impl Fix {
    /// Split as a POSIX shell would; leading `NAME=VALUE` words are the environment (as
    /// `env(1)` reads them), the rest are appended to the command's arguments.
    pub fn parse(text: &str) -> Result<Fix, FixError> {
        let words = shlex::split(text).ok_or_else(|| FixError::Quotes(text.to_string()))?;
        if words.is_empty() {
            return Err(FixError::Empty(text.to_string()));
        }
        let mut env = Vec::new();
        let mut rest = words.into_iter().peekable();
        while let Some((name, value)) = rest.peek().and_then(|w| env_word(w)) {
            env.push((OsString::from(name), OsString::from(value)));
            rest.next();
        }
        Ok(Fix {
            text: text.to_string(),
            env,
            args: rest.map(OsString::from).collect(),
        })
    }
}

/// `NAME=VALUE` where NAME is a shell variable name.
fn env_word(w: &str) -> Option<(&str, &str)> {
    let (name, value) = w.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    ((first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
    .then_some((name, value))
}

/// A command's id in reports: `script:` and the file name of its script (the first argument
/// ending in `.py` or `.sh`), else of its program.
pub fn script_id(argv: &[OsString]) -> String {
    let program = (argv.iter().map(|a| a.to_string_lossy()))
        .find(|a| a.ends_with(".py") || a.ends_with(".sh"))
        .or_else(|| argv.first().map(|a| a.to_string_lossy()))
        .unwrap_or_default();
    let name = std::path::Path::new(program.as_ref())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("script:{}", crate::term::clean(&name))
}

/// The reproduction: the command, what its bug shows, and its fixes.
pub struct Reproduction {
    pub argv: Vec<OsString>,
    /// Fingerprint ids (`diagnose::ids::FINGERPRINTS`), checked by the caller.
    pub expect: Vec<String>,
    pub fixes: Vec<Fix>,
    pub cadence: SamplerConfig,
}

impl Reproduction {
    /// The scenario id reports give it: `script:` and the program's file name.
    pub fn id(&self) -> String {
        script_id(&self.argv)
    }

    /// Variant names in order: `bug`, then `fix` (or `fix-1`, `fix-2`, … when several).
    pub fn variant_names(&self) -> Vec<String> {
        let mut names = vec!["bug".to_string()];
        match self.fixes.len() {
            0 => {}
            1 => names.push("fix".into()),
            n => names.extend((1..=n).map(|i| format!("fix-{i}"))),
        }
        names
    }
}

/// Told as each variant starts and ends.
pub trait Progress {
    fn started(&mut self, variant: &str, shown: &str);
    fn finished(&mut self, run: &VariantRun);
}

/// Watch the bug and every fix, in order, on the session's GPUs.
pub fn replay(
    session: &Session,
    repro: &Reproduction,
    progress: &mut dyn Progress,
) -> Result<Vec<VariantRun>, WatchError> {
    let id = repro.id();
    let names = repro.variant_names();
    let mut runs = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let fix = k.checked_sub(1).map(|i| &repro.fixes[i]);
        let mut argv = repro.argv.clone();
        let mut opts = WatchOptions::command(Vec::new(), repro.cadence, "vramdoc replay");
        if let Some(f) = fix {
            argv.extend(f.args.iter().cloned());
            opts.extra_env = f.env.clone();
        }
        let shown = crate::redact::redact_args(&crate::term::escape_args(&argv)).join(" ");
        progress.started(name, &shown);
        opts.argv = argv;
        let watched = watch(session, opts)?;
        if let Some(o) = &watched.output {
            o.wait_drained();
        }
        let Some(run) = watched.report.run() else {
            continue;
        };
        let out = variant_run(&id, name, &shown, fix.is_some(), repro, run, watched.status);
        progress.finished(&out);
        runs.push(out);
    }
    Ok(runs)
}

/// The variant's checks and verdict from its run.
fn variant_run(
    id: &str,
    name: &str,
    shown: &str,
    is_fix: bool,
    repro: &Reproduction,
    run: &crate::model::RunResult,
    status: i32,
) -> VariantRun {
    let fired = |fp: &str| run.findings.iter().find(|f| f.id == fp);
    let others = |fp: &str| -> String {
        let o: Vec<&str> = (run.findings.iter())
            .filter(|f| f.id != fp && f.severity >= Severity::Warn)
            .map(|f| f.id.as_str())
            .collect();
        if o.is_empty() {
            String::new()
        } else {
            format!("; also: {}", o.join(", "))
        }
    };
    let mut checks: Vec<CheckResult> = repro
        .expect
        .iter()
        .map(|fp| {
            let detail = match fired(fp) {
                Some(f) => format!("fired: {}{}", crate::term::clean(&f.title), others(fp)),
                None => format!("silent{}", others(fp)),
            };
            if is_fix {
                CheckResult {
                    expectation: format!("the {fp} fingerprint stays silent"),
                    passed: fired(fp).is_none(),
                    detail,
                }
            } else {
                CheckResult {
                    expectation: format!("the {fp} fingerprint fires"),
                    passed: fired(fp).is_some(),
                    detail,
                }
            }
        })
        .collect();
    if is_fix {
        checks.push(CheckResult {
            expectation: "the command exits 0".into(),
            passed: status == 0,
            detail: exit_detail(run),
        });
    }
    let ok = checks.iter().all(|c| c.passed);
    let verdict = match (ok, is_fix) {
        (false, _) => Verdict::Unexpected,
        (true, false) => Verdict::Reproduced,
        (true, true) => Verdict::Fixed,
    };
    let reason = (!ok).then(|| {
        let failed: Vec<&str> = (checks.iter())
            .filter(|c| !c.passed)
            .map(|c| c.expectation.as_str())
            .collect();
        format!("not as expected: {}", failed.join("; "))
    });
    let mut findings: Vec<Finding> = run.findings.clone();
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    VariantRun {
        scenario: id.to_string(),
        variant: name.to_string(),
        source: crate::term::clean(shown),
        verdict,
        reason,
        checks,
        worker_pid: run.processes.first().map(|p| p.pid),
        error: step_error(run, status),
        peaks: run.peaks.clone(),
        timeline: run.timeline.clone(),
        duration_ms: run.duration_ms,
        steps: Vec::new(),
        findings,
    }
}

/// How the command failed, for the table's outcome: its out-of-memory line at the phase the
/// job's last marker before it names, else its exit.
fn step_error(run: &crate::model::RunResult, status: i32) -> Option<StepError> {
    if let Some(e) = run.errors.iter().find(|e| e.kind.is_out_of_memory()) {
        let phase = (run.timeline.markers.iter())
            .rfind(|m| m.kind == MarkerKind::Marker && m.t_ms <= e.t_ms)
            .map_or_else(|| "the command".to_string(), |m| m.label.clone());
        return Some(StepError {
            step: 0,
            step_label: crate::term::clean(&phase),
            kind: StepErrorKind::OutOfMemory,
            message: e.line.clone(),
            t_ms: e.t_ms,
        });
    }
    (status != 0).then(|| StepError {
        step: 0,
        step_label: exit_detail(run),
        kind: if run.exit.signal.is_some() {
            StepErrorKind::Killed
        } else {
            StepErrorKind::Error
        },
        message: run.stderr_tail.last().cloned().unwrap_or_default(),
        t_ms: run.duration_ms as f64,
    })
}

fn exit_detail(run: &crate::model::RunResult) -> String {
    let e = &run.exit;
    match (&e.signal_name, e.code) {
        (Some(s), _) => format!("killed by {s}"),
        (None, Some(c)) => format!("exit {c}"),
        (None, None) => format!("status {}", e.status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fix_splits_like_a_shell_with_leading_assignments_as_environment() {
        let f = Fix::parse("CUDA_VISIBLE_DEVICES=1 A_B=x --fixed 'two words'").unwrap();
        assert_eq!(
            f.env,
            vec![
                ("CUDA_VISIBLE_DEVICES".into(), "1".into()),
                ("A_B".into(), "x".into())
            ]
        );
        assert_eq!(
            f.args,
            vec![OsString::from("--fixed"), OsString::from("two words")]
        );
        // An assignment after an argument is an argument; `1X=y` is no variable name.
        let f = Fix::parse("--lr=3 X=1").unwrap();
        assert!(f.env.is_empty());
        assert_eq!(f.args.len(), 2);
        assert!(Fix::parse("1X=y").unwrap().env.is_empty());
        assert!(matches!(Fix::parse("'open"), Err(FixError::Quotes(_))));
        assert!(matches!(Fix::parse("  "), Err(FixError::Empty(_))));
    }

    #[test]
    fn variants_are_named_bug_then_fix_or_numbered_fixes() {
        let mut r = Reproduction {
            argv: vec!["python".into(), "/tmp/x/repro.py".into()],
            expect: vec!["stray-context".into()],
            fixes: vec![],
            cadence: SamplerConfig {
                period: std::time::Duration::from_millis(5),
                process_period: None,
            },
        };
        assert_eq!(r.id(), "script:repro.py");
        assert_eq!(r.variant_names(), vec!["bug"]);
        r.fixes.push(Fix::parse("--fixed").unwrap());
        assert_eq!(r.variant_names(), vec!["bug", "fix"]);
        r.fixes.push(Fix::parse("X=1").unwrap());
        assert_eq!(r.variant_names(), vec!["bug", "fix-1", "fix-2"]);
    }
}
