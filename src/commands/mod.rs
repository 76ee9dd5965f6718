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
pub mod plan;
pub mod preflight;
pub mod replay;
mod replay_script;
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
use crate::report::sink::Outputs;
use anyhow::Result;

/// The sink's view of the output flags every report command shares (`--json`, `--out`,
/// `--force`) and its `--fail-on`; a command adds its other files.
pub(crate) fn outputs(
    o: &crate::cli::OutputArgs,
    fail_on: Option<crate::model::Severity>,
) -> Outputs<'_> {
    Outputs {
        out: &o.out,
        json: o.json,
        force: o.force,
        fail_on,
        ..Outputs::default()
    }
}

/// A replay report (of scenario files or of a user's command) through the sink: `--out`,
/// `--junit`, the job summary, then on stdout the JSON or the summary table (`interrupted`:
/// said under the table). Write failures are usage errors, as they always were.
pub(crate) fn emit_replay(
    report: &crate::model::Report,
    sink: &crate::report::sink::Sink,
    junit: Option<&std::path::Path>,
    interrupted: bool,
) -> Result<()> {
    use crate::exit::UsageError;
    use crate::report::terminal;
    sink.emit(report)
        .map_err(|e| UsageError(format!("writing the report: {e}")))?;
    if let Some(path) = junit {
        let xml = crate::report::junit::render_replay(report, sink.html().as_deref())?;
        sink.file(path, xml.as_bytes())
            .map_err(|e| UsageError(format!("writing the JUnit report: {e}")))?;
    }
    sink.job_summary(report, "replay");
    if sink.json() {
        return Ok(sink.print_json(report)?);
    }
    let runs = report.replay().map_or(&[][..], |r| &r.runs[..]);
    crate::term::print(&terminal::replay::summary(
        runs,
        terminal::Options::default(),
    ))?;
    if interrupted {
        crate::term::print("interrupted: results above are partial")?;
    }
    Ok(())
}

pub use session::{open_monitor, Session, NVML_START_LIMIT};

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
        Command::Plan(cmd) => {
            let session = session::open(&cli.global)?;
            plan::run(&session, &cmd)
        }
        Command::Scan(args) => {
            let session = session::open(&cli.global)?;
            scan::run(&session, &args)
        }
        Command::Replay(args) => {
            // `--sim recorded`: the box the scenario files were recorded on.
            let global = scenario::resolve_sim(&cli.global, &args.scenarios)?;
            let session = session::open(&global)?;
            if args.command.is_empty() {
                replay::run(&session, &args)
            } else {
                replay_script::run(&session, &args)
            }
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
            // The hidden `vramdoc __worker` entry: the workload side of a replay.
            let (mut input, mut out) = (std::io::stdin().lock(), std::io::stdout().lock());
            Ok(crate::replay::worker::run_worker(
                &session.backend,
                &mut input,
                &mut out,
            ))
        }
    }
}
