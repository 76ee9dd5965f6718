//! The one output sink of a command: every file a command writes (the `--out` reports in the
//! format each extension names, JUnit, `--scenario-out`, the kept allocator snapshot, the
//! `--prom` textfile, the GitHub job summary) goes through a [`Sink`], and `--json` and
//! `--fail-on` are applied here. A sink is built from the command's output flags and checks
//! every target once, before any work ([`Sink::new`]: known formats, no file given twice or
//! under two flags, directories writable, nothing overwritten without `--force`); then the
//! command runs its engine and hands the report to [`Sink::emit`]. Files are written through
//! [`super::write`], atomically.

use super::write::{self, WriteError};
use crate::model::{Finding, Report, Severity};
use std::path::{Path, PathBuf};

/// A command's outputs as its flags name them.
#[derive(Debug, Default)]
pub struct Outputs<'a> {
    /// `--out FILE` (repeatable): the report, in the format of each extension.
    pub out: &'a [PathBuf],
    /// `--json`: the report on standard output.
    pub json: bool,
    /// `--force`: replace files that exist.
    pub force: bool,
    /// `--fail-on LEVEL`: exit 1 when a finding is at or above it.
    pub fail_on: Option<Severity>,
    /// The other files the command writes through the sink (`("--junit", path)`,
    /// `--scenario-out`, the kept snapshot): checked as outputs.
    pub files: Vec<(&'a str, &'a Path)>,
    /// Files opened or always replaced (`--samples`, `--prom`): only kept distinct from the
    /// others (their own checks are their owners').
    pub also: Vec<(&'a str, &'a Path)>,
}

/// Where a command's outputs go, every target checked.
#[derive(Debug, Clone)]
pub struct Sink {
    out: Vec<PathBuf>,
    json: bool,
    force: bool,
    fail_on: Option<Severity>,
}

impl Sink {
    /// Check every target once, before any work is done ([`write::check_targets`]).
    pub fn new(outputs: Outputs) -> Result<Sink, WriteError> {
        write::check_targets(outputs.out, &outputs.files, &outputs.also, outputs.force)?;
        Ok(Sink {
            out: outputs.out.to_vec(),
            json: outputs.json,
            force: outputs.force,
            fail_on: outputs.fail_on,
        })
    }

    /// The `--out` paths.
    pub fn out(&self) -> &[PathBuf] {
        &self.out
    }

    /// Whether `--json` asked for the report on standard output.
    pub fn json(&self) -> bool {
        self.json
    }

    /// Whether `--force` was given.
    pub fn force(&self) -> bool {
        self.force
    }

    /// The report to every `--out` file, each in the format its extension names.
    pub fn emit(&self, report: &Report) -> Result<(), WriteError> {
        write::write_reports(report, &self.out, self.force)
    }

    /// `--json`: the report on standard output (nothing without it).
    pub fn print_json(&self, report: &Report) -> Result<(), crate::term::OutputError> {
        if !self.json {
            return Ok(());
        }
        crate::term::print_json(&String::from_utf8_lossy(&super::json::render(report)))
    }

    /// One of the checked [`Outputs::files`] (JUnit, a scenario, the kept snapshot), written
    /// atomically, replaced only with `--force`.
    pub fn file(&self, path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
        write::write_atomic(path, bytes, self.force)
    }

    /// A file that is always replaced (the textfile collector reads the latest `--prom`).
    pub fn replace(&self, path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
        write::write_atomic(path, bytes, true)
    }

    /// The `--out` path with one of `exts` (any case), for pointers from CI outputs (JUnit,
    /// job summaries) to the full report.
    pub fn out_with_ext(&self, exts: &[&str]) -> Option<String> {
        self.out
            .iter()
            .find(|p| {
                p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| exts.contains(&e.to_ascii_lowercase().as_str()))
            })
            .map(|p| p.display().to_string())
    }

    /// The `--out` HTML report, where JUnit and job summaries point.
    pub fn html(&self) -> Option<String> {
        self.out_with_ext(&["html", "htm"])
    }

    /// Append the report's Markdown to the GitHub job summary when `GITHUB_STEP_SUMMARY` is
    /// set, pointing to the full report (the HTML, else the `--out` Markdown or JSON). The
    /// summary is a courtesy: failing to write it is one stderr line (prefixed `who`), never a
    /// changed result.
    pub fn job_summary(&self, report: &Report, who: &str) {
        let env = super::step_summary::STEP_SUMMARY_ENV;
        let Some(path) = std::env::var_os(env).filter(|v| !v.is_empty()) else {
            return;
        };
        let full = self
            .html()
            .or_else(|| self.out_with_ext(&["md", "markdown", "json"]));
        let md = super::markdown::render(report);
        match write::append_step_summary(&PathBuf::from(path), &md, full.as_deref()) {
            Ok(true) => {}
            Ok(false) => crate::term::eprint_line(&format!(
                "{who}: {env} is full (1 MiB); summary not appended"
            )),
            Err(e) => crate::term::eprint_line(&format!("{who}: job summary not written: {e}")),
        }
    }

    /// The exit status under `--fail-on`: `status`, or [`crate::exit::FINDINGS`] where it is 0
    /// and a finding is at or above the level.
    pub fn status(&self, status: i32, findings: &[Finding]) -> i32 {
        crate::model::status_with_fail_on(status, findings, self.fail_on)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_is_checked_when_the_sink_is_built() {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("r.json");
        let junit = dir.path().join("j.xml");
        std::fs::write(&junit, "old").unwrap();
        let out = [report.clone()];
        let exists = Sink::new(Outputs {
            out: &out,
            files: vec![("--junit", junit.as_path())],
            ..Default::default()
        });
        assert!(
            matches!(exists, Err(WriteError::Exists { .. })),
            "{exists:?}"
        );
        let same = Sink::new(Outputs {
            out: &out,
            files: vec![("--junit", report.as_path())],
            force: true,
            ..Default::default()
        });
        assert!(matches!(same, Err(WriteError::SameFile { .. })), "{same:?}");
        let bad = [dir.path().join("r.txt2")];
        let unknown = Sink::new(Outputs {
            out: &bad,
            ..Default::default()
        });
        assert!(matches!(unknown, Err(WriteError::UnknownExtension { .. })));
    }

    #[test]
    fn fail_on_is_applied_once_to_a_clean_status() {
        let sink = Sink::new(Outputs {
            fail_on: Some(Severity::Warn),
            ..Default::default()
        })
        .unwrap();
        let warn = Finding {
            id: "x".into(),
            severity: Severity::Warn,
            title: String::new(),
            devices: vec![],
            pid: None,
            evidence: vec![],
            fix: String::new(),
        };
        assert_eq!(
            sink.status(0, std::slice::from_ref(&warn)),
            crate::exit::FINDINGS
        );
        assert_eq!(sink.status(3, std::slice::from_ref(&warn)), 3);
        assert_eq!(sink.status(0, &[]), 0);
    }
}
