//! `vramdoc run -- CMD` (issue 10), as glue: flags → the job supervisor (`job/`, which
//! starts the user's own command and feeds the shared recorder) → the findings
//! `diagnose/` decides on the recording → the report (its terminal summary rendered by
//! `report::terminal::run`, files, JUnit, job summary) → the exit status: the command's own
//! (128+N for signal N); vramdoc's own failures are 125, 126 (not executable) and 127 (not
//! found), as GNU `timeout`. `vramdoc mark TEXT` writes one marker line.

use super::Session;
use crate::cli::{Cli, GlobalArgs, MarkArgs, RunArgs};
use crate::diagnose::{self, TimelineThresholds};
use crate::exit::{CodedError, RUN_FAILED};
use crate::job::{self, JobSpec};
use crate::model::{Finding, Report, ReportKind, RunResult, Severity, SCHEMA_VERSION};
use crate::record::sampler::SamplerConfig;
use crate::report::write::{render, Format};
use anyhow::{Context, Result};
use std::io::Write;
use std::time::Duration;

pub use crate::job::markers::MARKERS_ENV;
pub use crate::job::SETTLE;

/// The exit status of a command line clap refused: `vramdoc run`'s usage errors exit 125
/// (never a status the command could have), every other command's 2. Which subcommand it
/// was is what clap itself matched, read leniently.
pub fn usage_error_status<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matched = <Cli as clap::CommandFactory>::command()
        .ignore_errors(true)
        .try_get_matches_from(args);
    match matched.as_ref().ok().and_then(|m| m.subcommand_name()) {
        Some("run") => RUN_FAILED,
        _ => crate::exit::USAGE,
    }
}

/// `vramdoc mark TEXT…`: append one line to `$VRAMDOC_MARKERS`, or with `--pid` to the
/// marker file of the recording attached to that process.
pub fn mark(args: &MarkArgs) -> Result<i32> {
    if let Some(pid) = args.pid {
        job::attach::mark(pid, &args.text.join(" ")).map_err(|e| match e {
            job::attach::AttachError::Io { .. } => anyhow::Error::new(e),
            other => crate::exit::UsageError(other.to_string()).into(),
        })?;
        return Ok(crate::exit::OK);
    }
    job::markers::mark(&args.text.join(" ")).map_err(|e| match e {
        job::markers::MarkError::Write { .. } => anyhow::Error::new(e),
        other => crate::exit::UsageError(other.to_string()).into(),
    })?;
    Ok(crate::exit::OK)
}

fn coded(code: i32, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(CodedError {
        code,
        message: message.into(),
    })
}

/// `vramdoc run`: every failure of vramdoc itself exits 125 (126/127 for the command).
pub fn run(global: &GlobalArgs, args: &RunArgs) -> Result<i32> {
    record(global, args).map_err(|e| {
        if e.chain().any(|c| c.downcast_ref::<CodedError>().is_some()) {
            e
        } else {
            coded(RUN_FAILED, format!("{e:#}"))
        }
    })
}

fn record(global: &GlobalArgs, args: &RunArgs) -> Result<i32> {
    // Everything that can be checked is checked before the command starts.
    // The periods are typed and bounded by clap (`cli::duration_within`). The sampler sleeps
    // on a signal `stop` wakes, so a long period never delays the end.
    let (period, process_period) = (args.period, args.process_period);
    crate::report::write::check_outputs(&args.out, args.force)?;
    if let Some(j) = &args.junit {
        crate::report::write::check_output_file(j, args.force)?;
    }
    if let Some(s) = &args.scenario_out {
        crate::report::write::check_output_file(s, args.force)?; // issue 16
    }
    if let Some(k) = args
        .torch_memory
        .then(|| super::explain::kept_path(&args.out))
        .flatten()
    {
        crate::report::write::check_output_file(&k, args.force)?; // issue 27
    }
    // No two outputs are one file (a report would be lost, issue 19).
    let mut outputs = super::outputs("--out", &args.out);
    outputs.extend(args.samples.as_deref().map(|p| ("--samples", p)));
    outputs.extend(args.junit.as_deref().map(|p| ("--junit", p)));
    outputs.extend(args.scenario_out.as_deref().map(|p| ("--scenario-out", p)));
    crate::report::write::check_distinct(&outputs)?;
    let attach =
        (args.pid.is_some() || args.cgroup.is_some() || args.container.is_some()).then(|| {
            job::attach::Target {
                pid: args.pid,
                cgroup: args.cgroup.clone(),
                container: args.container.clone(),
            }
        });
    if args.command.is_empty() && attach.is_none() {
        anyhow::bail!(job::JobError::NoCommand);
    }
    let session = Session::new(global)?;
    let monitor = session.monitor()?;
    let devices = monitor.devices()?;
    let environment = crate::inventory::environment(monitor.as_ref(), session.sim_spec())?;
    let samples = match &args.samples {
        Some(p) => Some(job::open_samples(p, args.force).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let command = match &attach {
        Some(t) => job::attach::command_of(t),
        // Arguments that are not UTF-8 are passed as they are and shown escaped (`\xff`).
        None => crate::redact::redact_args(&crate::term::escape_args(&args.command)),
    };
    let torch = args
        .torch_memory
        .then(|| crate::explain::inject::Injection::prepare(args.torch_memory_entries))
        .transpose()?;
    let spec = JobSpec {
        argv: args.command.clone(),
        shown: command.clone(),
        cadence: SamplerConfig {
            period,
            process_period: Some(process_period),
        },
        samples,
        attach,
        kill_after: args.kill_after,
        duration: args.duration,
        live: args.live,
        pty: !args.no_pty,
        env: torch
            .as_ref()
            .map_or_else(Vec::new, |t| t.env(std::env::var_os("PYTHONPATH"))),
    };
    let mut ran =
        job::run(spec, monitor, &devices).map_err(|e| coded(e.status(), e.to_string()))?;
    let output = ran.output.take();
    let status = ran.exit.status();
    let findings = diagnose::fingerprints(&ran.recorded.recording, &TimelineThresholds::default());
    let mut result = job::summary::run_result(
        command,
        (period.as_micros() as u64, process_period.as_micros() as u64),
        ran,
        &devices,
        findings,
        args.samples.as_ref().map(|p| p.display().to_string()),
    );
    if let Some(t) = &torch {
        super::explain::join_run(t, &mut result, &args.out, args.force)?;
    }
    crate::pods::name_pods(
        result.processes.iter_mut().filter_map(|p| p.pod.as_mut()),
        &args.pod_log_dir,
    );
    let report = Report {
        schema_version: SCHEMA_VERSION,
        kind: ReportKind::Run,
        environment,
        command: crate::model::command_line(),
        created_unix_ms: crate::model::now_unix_ms(),
        scan: None,
        replay: None,
        run: Some(result),
    };
    finish(&report, args, status, output.as_ref())
}

/// Print, write the reports, and decide the exit status.
fn finish(
    report: &Report,
    args: &RunArgs,
    status: i32,
    output: Option<&job::stderr::Output>,
) -> Result<i32> {
    let Some(run) = report.run.as_ref() else {
        return Ok(RUN_FAILED);
    };
    // The job's output first: the summary follows its last line.
    if let Some(o) = output {
        o.wait_drained();
    }
    // Command lines, error lines and paths come from the job: made terminal-safe.
    let text = crate::term::clean_text(&crate::report::terminal::run::render(run, &args.out));
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
    drop(err);
    crate::report::write::write_reports(report, &args.out, args.force)?;
    if let Some(path) = &args.scenario_out {
        super::scenario::scenario_out(report, path, args.force)?; // issue 16: docs/repro.md
    }
    write_ci_outputs(report, run, args)?;
    if args.json {
        let bytes = render(report, Format::Json)?;
        // A closed pipe ends quietly; another write error is reported (crate::term).
        crate::term::write_stdout(&bytes)?;
    }
    Ok(exit_status(status, &run.findings, args.fail_on))
}

/// Why the run is a failed test case: the command's status, else the findings at or above
/// `--fail-on`; `None` when it passed. `(message, evidence)`. Pure.
pub fn junit_failure(run: &RunResult, fail_on: Option<Severity>) -> Option<(String, String)> {
    use crate::report::text::severity_word;
    use crate::term::one_line;
    let mut evidence = String::new();
    for e in &run.errors {
        let line: String = one_line(&e.line).chars().take(300).collect();
        evidence.push_str(&format!("{} at {:.0} ms: {line}\n", e.kind, e.t_ms));
    }
    let over: Vec<&Finding> = run
        .findings
        .iter()
        .filter(|f| fail_on.is_some_and(|l| f.severity >= l))
        .collect();
    for f in &run.findings {
        evidence.push_str(&format!(
            "{} {}: {}\n",
            severity_word(f.severity),
            f.id,
            one_line(&f.title)
        ));
        for ev in &f.evidence {
            evidence.push_str(&format!(
                "  {}: {}\n",
                one_line(&ev.label),
                one_line(&ev.value)
            ));
        }
        if !f.fix.is_empty() {
            evidence.push_str(&format!("  fix: {}\n", one_line(&f.fix)));
        }
    }
    if !run.stderr_tail.is_empty() {
        evidence.push_str("stderr (last lines, redacted):\n");
        for l in &run.stderr_tail {
            evidence.push_str(&format!("  {}\n", one_line(l)));
        }
    }
    let message = if run.exit.status != 0 {
        match (&run.exit.signal_name, run.exit.code) {
            (Some(sig), _) => format!("the command was killed by {sig}"),
            (None, Some(c)) => format!("the command exited {c}"),
            _ => format!("the command ended with status {}", run.exit.status),
        }
    } else if let (Some(level), false) = (fail_on, over.is_empty()) {
        let ids: Vec<&str> = over.iter().map(|f| f.id.as_str()).collect();
        format!(
            "finding{} at or above --fail-on {}: {}",
            if ids.len() == 1 { "" } else { "s" },
            severity_word(level).to_ascii_lowercase(),
            ids.join(", ")
        )
    } else {
        return None;
    };
    Some((message, evidence))
}

/// `--junit FILE` (one test case for the run), and the GitHub job summary when
/// `GITHUB_STEP_SUMMARY` is set.
fn write_ci_outputs(report: &Report, run: &RunResult, args: &RunArgs) -> Result<()> {
    let html = super::out_with_ext(&args.out, &["html", "htm"]);
    if let Some(path) = &args.junit {
        let name: String = crate::term::one_line(&run.command.join(" "))
            .chars()
            .take(200)
            .collect();
        let case = crate::report::junit::run_case(
            &name,
            junit_failure(run, args.fail_on),
            Duration::from_millis(run.duration_ms),
            html.as_deref(),
        );
        let xml = crate::report::junit::render_cases("vramdoc.run", std::slice::from_ref(&case))?;
        crate::report::write::write_atomic(path, xml.as_bytes(), args.force)
            .with_context(|| "writing the JUnit report")?;
    }
    super::append_job_summary(report, &args.out, html, "vramdoc run");
    Ok(())
}

/// The command's status, with `--fail-on` turning a 0 into 1.
pub fn exit_status(status: i32, findings: &[Finding], fail_on: Option<Severity>) -> i32 {
    let worst = findings.iter().map(|f| f.severity).max();
    match (status, fail_on, worst) {
        (0, Some(level), Some(w)) if w >= level => crate::exit::FINDINGS,
        _ => status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_errors_of_run_are_recognised_from_what_clap_matched() {
        assert_eq!(
            usage_error_status(["vramdoc", "run", "--nope", "--", "x"]),
            125
        );
        assert_eq!(
            usage_error_status(["vramdoc", "--sim", "h100", "run", "--period"]),
            125
        );
        assert_eq!(usage_error_status(["vramdoc", "--backend=sim", "run"]), 125);
        // A duration clap's value parser refuses (out of range, or not a duration).
        for period in ["61s", "fast"] {
            let args = ["vramdoc", "run", "--period", period, "--", "true"];
            assert_eq!(usage_error_status(args), 125, "{period}");
        }
        assert_eq!(
            usage_error_status(["vramdoc", "replay", "all", "--period", "2s"]),
            2
        );
        assert_eq!(usage_error_status(["vramdoc", "scan", "--nope"]), 2);
        assert_eq!(usage_error_status(["vramdoc", "--sim", "run"]), 2);
        assert_eq!(usage_error_status(["vramdoc"]), 2);
    }

    #[test]
    fn fail_on_turns_a_clean_exit_into_1() {
        let f = Finding {
            id: "x".into(),
            severity: Severity::Warn,
            title: "t".into(),
            devices: vec![],
            pid: None,
            evidence: vec![],
            fix: String::new(),
        };
        assert_eq!(
            exit_status(0, std::slice::from_ref(&f), Some(Severity::Warn)),
            1
        );
        assert_eq!(
            exit_status(0, std::slice::from_ref(&f), Some(Severity::Error)),
            0
        );
        assert_eq!(
            exit_status(3, std::slice::from_ref(&f), Some(Severity::Info)),
            3
        );
        assert_eq!(exit_status(0, &[], Some(Severity::Info)), 0);
    }
}
