//! `vramdoc run -- CMD` (issue 10), as glue: flags → the job supervisor (`job/`, which
//! starts the user's own command and feeds the shared recorder) → the findings
//! `diagnose/` decides on the recording → the report (its terminal summary rendered by
//! `report::terminal::run`, files, JUnit, job summary) → the exit status: the command's own
//! (128+N for signal N); vramdoc's own failures are 125, 126 (not executable) and 127 (not
//! found), as GNU `timeout`. `vramdoc mark TEXT` writes one marker line.

use crate::cli::{GlobalArgs, RunArgs};
use crate::exit::{CodedError, RUN_FAILED};
use crate::job;
use crate::model::{Report, RunResult};
use crate::record::sampler::SamplerConfig;
use crate::report::sink::{Outputs, Sink};
use crate::watch::{self, WatchOptions};
use anyhow::{Context, Result};
use std::io::Write;
use std::time::Duration;

pub use crate::job::markers::MARKERS_ENV;
pub use crate::job::SETTLE;

pub use crate::cli::usage_error_status;

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
    // No two outputs are one file (a report would be lost, issue 19).
    // The kept allocator snapshot beside the report (issue 27).
    let kept = (args.torch_memory)
        .then(|| crate::explain::inject::kept_path(&args.output.out))
        .flatten();
    let sink = Sink::new(Outputs {
        files: [
            ("--junit", &args.junit),
            ("--scenario-out", &args.scenario_out),
        ]
        .into_iter()
        .filter_map(|(flag, p)| Some((flag, p.as_deref()?)))
        .chain(kept.as_deref().map(|p| ("--torch-memory", p)))
        .collect(),
        also: args
            .samples
            .iter()
            .map(|p| ("--samples", p.as_path()))
            .collect(),
        ..super::outputs(&args.output, args.fail_on)
    })?;
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
    let session = super::session::open(global)?;
    let samples = (args.samples.as_ref())
        .map(|p| job::open_samples(p, sink.force()).map(|f| (f, p.display().to_string())))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let watched = watch::watch(
        &session,
        WatchOptions {
            argv: args.command.clone(),
            attach,
            cadence: SamplerConfig {
                period,
                process_period: Some(process_period),
            },
            samples,
            kill_after: args.kill_after,
            duration: args.duration,
            live: args.live,
            pty: !args.no_pty,
            stdout_to_stderr: args.output.json,
            torch_memory: args.torch_memory.then_some(args.torch_memory_entries),
            torch_kept_as: kept.clone(),
            pod_log_dir: args.pod_log_dir.clone(),
            extra_env: Vec::new(),
            told: "vramdoc run",
        },
    )
    .map_err(|e| coded(e.status(), e.to_string()))?;
    if let (Some(snapshot), Some(path)) = (&watched.torch_snapshot, &kept) {
        let bytes = watch::snapshot_bytes(snapshot)
            .map_err(|e| anyhow::anyhow!("{}: {e}", snapshot.display()))?;
        sink.file(path, &bytes)?;
    }
    finish(
        &watched.report,
        args,
        &sink,
        watched.status,
        watched.output.as_ref(),
    )
}

/// Print, write the reports, and decide the exit status.
fn finish(
    report: &Report,
    args: &RunArgs,
    sink: &Sink,
    status: i32,
    output: Option<&job::stderr::Output>,
) -> Result<i32> {
    let Some(run) = report.run() else {
        return Ok(RUN_FAILED);
    };
    // The job's output first: the summary follows its last line.
    if let Some(o) = output {
        o.wait_drained();
    }
    // Command lines, error lines and paths come from the job: made terminal-safe there.
    let text = crate::report::terminal::run::render(report, sink.out());
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
    drop(err);
    sink.emit(report)?;
    if let Some(path) = &args.scenario_out {
        // issue 16: docs/repro.md. A run that cannot be converted still has its report.
        match crate::repro::scenario_of_run(report) {
            Ok(c) => {
                sink.file(path, c.toml.as_bytes())?;
                crate::term::eprint_line(&c.said(&path.display().to_string()));
            }
            Err(e) => crate::term::eprint_line(&format!("vramdoc run: no scenario written: {e}")),
        }
    }
    write_ci_outputs(report, run, args, sink)?;
    // The job's own stdout went to stderr (`JobSpec::stdout_to_stderr`): stdout is the JSON.
    // A closed pipe ends quietly; another write error is reported (crate::term).
    sink.print_json(report)?;
    Ok(sink.status(status, &run.findings))
}

/// `--junit FILE` (one test case for the run), and the GitHub job summary when
/// `GITHUB_STEP_SUMMARY` is set.
fn write_ci_outputs(report: &Report, run: &RunResult, args: &RunArgs, sink: &Sink) -> Result<()> {
    let html = sink.html();
    if let Some(path) = &args.junit {
        let name: String = crate::term::one_line(&run.command.join(" "))
            .chars()
            .take(200)
            .collect();
        let case = crate::report::junit::run_case(
            &name,
            crate::report::junit::run_failure(run, args.fail_on),
            Duration::from_millis(run.duration_ms),
            html.as_deref(),
        );
        let xml = crate::report::junit::render_cases("vramdoc.run", std::slice::from_ref(&case))?;
        sink.file(path, xml.as_bytes())
            .with_context(|| "writing the JUnit report")?;
    }
    sink.job_summary(report, "vramdoc run");
    Ok(())
}
