//! Subcommands, one file each. This is the command edge: errors are `anyhow` here and are
//! mapped to exit codes in `crate::exit`. [`Session`] resolves which GPU backend to use, as
//! a value engines are given.

pub mod explain;
pub mod incidents;
pub mod list;
/// `vramdoc sim ...` in a build without the simulator: refused, saying so.
#[cfg(not(feature = "sim"))]
pub mod no_sim;
pub mod packaging;
pub mod preflight;
pub mod replay;
pub mod report;
pub mod run;
pub mod scan;
pub mod scenario;
pub mod serve;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(not(feature = "sim"))]
pub use no_sim as sim;
pub mod whatif;

mod mark;
mod session;

use crate::cli::{Cli, Command};
use anyhow::Result;
use std::path::PathBuf;

pub use session::{open_monitor, Session, NVML_START_LIMIT};

/// The `--out` path with one of `exts` (any case), for pointers from CI outputs (JUnit, job
/// summaries) to the full report.
pub(crate) fn out_with_ext(out: &[PathBuf], exts: &[&str]) -> Option<String> {
    out.iter()
        .find(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| exts.contains(&e.to_ascii_lowercase().as_str()))
        })
        .map(|p| p.display().to_string())
}

/// Append the report's Markdown to the GitHub job summary when `GITHUB_STEP_SUMMARY` is set,
/// pointing to the full report (`html`, else the `--out` Markdown or JSON). The summary is a
/// courtesy: failing to write it is one stderr line (prefixed `who`), never a changed result.
pub(crate) fn append_job_summary(
    report: &crate::model::Report,
    out: &[PathBuf],
    html: Option<String>,
    who: &str,
) {
    let env = crate::report::step_summary::STEP_SUMMARY_ENV;
    let Some(path) = std::env::var_os(env).filter(|v| !v.is_empty()) else {
        return;
    };
    let full = html.or_else(|| out_with_ext(out, &["md", "markdown", "json"]));
    let md = crate::report::markdown::render(report);
    match crate::report::write::append_step_summary(&PathBuf::from(path), &md, full.as_deref()) {
        Ok(true) => {}
        Ok(false) => crate::term::eprint_line(&format!(
            "{who}: {env} is full (1 MiB); summary not appended"
        )),
        Err(e) => crate::term::eprint_line(&format!("{who}: job summary not written: {e}")),
    }
}

/// The flag SIGINT, SIGTERM and SIGHUP set (the process's one handler, `job::signals`). A
/// command that has not called [`handle_interrupts_gracefully`] is ended by the signal at
/// once: its private box removed, one line on stderr, exit 1.
pub fn interrupt_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    crate::job::signals::interrupt_flag()
}

/// For a command that stops cleanly on a signal itself (and writes what it has): the flag
/// to poll.
pub fn handle_interrupts_gracefully() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    crate::job::signals::handle_gracefully()
}

/// Run a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Sim(cmd) => sim::run(&cli.global, cmd),
        Command::List(args) => list::run(&args),
        Command::Preflight(args) => {
            let session = session::open(&cli.global)?;
            preflight::run(&session, &args)
        }
        Command::Scan(args) => {
            let session = session::open(&cli.global)?;
            scan::run(&session, &args)
        }
        Command::Replay(args) => {
            // `--sim recorded`: the box the scenario files were recorded on.
            let global = scenario::resolve_sim(&cli.global, &args.scenarios)?;
            let session = session::open(&global)?;
            replay::run(&session, &args)
        }
        Command::Scenario(cmd) => scenario::run(&cmd),
        Command::Whatif(args) => whatif::run(&args),
        Command::Incidents(cmd) => incidents::run(&cmd),
        Command::Report(args) => report::run(&args),
        Command::Explain(args) => explain::run(&args),
        Command::Serve(args) => {
            let session = session::open(&cli.global)?;
            serve::run(&session, &args)
        }
        Command::Completions(args) => packaging::completions(args.shell),
        Command::Man => packaging::man(),
        Command::Run(args) => run::run(&cli.global, &args),
        Command::Mark(args) => mark::mark(&args),
        Command::Pump(args) => Ok(crate::job::pump::main(args.marker_dir.as_deref())),
        Command::Worker => {
            let session = session::open(&cli.global)?;
            Ok(replay::worker(&session))
        }
    }
}
