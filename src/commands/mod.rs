//! Subcommands, one file each. This is the command edge: errors are `anyhow` here and are
//! mapped to exit codes in `crate::exit`. [`Session`] resolves which GPU backend to use.

pub mod incidents;
pub mod list;
pub mod packaging;
pub mod preflight;
pub mod replay;
pub mod report;
pub mod run;
pub mod scan;
pub mod scenario;
pub mod serve;
pub mod sim;
pub mod whatif;

use crate::backend::{self, BackendKind};
use crate::cli::{BackendArg, Cli, Command, GlobalArgs};
use crate::gpu::{self, Driver, Monitor};
use anyhow::Result;
use std::path::PathBuf;
use vramdoc_sim::{InitOptions, SimBox, SIM_DIR_ENV};

/// Longest a command waits for NVML to open and list the GPUs.
pub const NVML_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where commands get their GPU from: the backend kind, and a private box for `--sim`.
pub struct Session {
    pub backend: BackendKind,
    /// The private box made for `--sim SPEC`, removed when the session ends.
    pub private_box: Option<tempfile::TempDir>,
}

impl Session {
    /// Resolve `--sim` / `--backend` / `VRAMDOC_SIM_DIR`. With `--sim`, a fresh box is created
    /// and `VRAMDOC_SIM_DIR` is set for this process and its children.
    pub fn new(global: &GlobalArgs) -> Result<Session> {
        let mut private_box = None;
        if let Some(spec) = &global.sim {
            vramdoc_sim::parse_spec(spec)?;
            let dir = tempfile::Builder::new()
                .prefix("vramdoc-sim-")
                .tempdir()
                .map_err(|e| {
                    crate::exit::EnvironmentError(format!(
                        "creating a private simulated box in {}: {e} (set TMPDIR to a writable directory)",
                        std::env::temp_dir().display()
                    ))
                })?;
            SimBox::create(dir.path(), spec, &InitOptions::default())?;
            // Removed on drop; on SIGINT/SIGTERM/SIGHUP by the handler (`job::signals`).
            crate::job::signals::remove_on_exit(dir.path().to_path_buf());
            // Single-threaded here: set before any thread or child starts.
            std::env::set_var(SIM_DIR_ENV, dir.path());
            private_box = Some(dir);
        }
        let sim_env = std::env::var_os(SIM_DIR_ENV).is_some_and(|v| !v.is_empty());
        let backend = match global.backend {
            BackendArg::Sim => BackendKind::Sim,
            BackendArg::Real => BackendKind::Real,
            BackendArg::Auto if sim_env => BackendKind::Sim,
            BackendArg::Auto => BackendKind::Real,
        };
        Ok(Session {
            backend,
            private_box,
        })
    }

    /// The simulated box's spec, for reports (`None` on the real backends).
    pub fn sim_spec(&self) -> Option<String> {
        match self.backend {
            BackendKind::Sim => SimBox::from_env().ok().map(|b| b.config().spec.clone()),
            BackendKind::Real => None,
        }
    }

    /// The monitor, on a machine with at least one GPU (none: exit 3). Opened and asked for
    /// the GPUs on a thread of its own: a driver that does not answer within
    /// [`NVML_START_LIMIT`] (a GPU in a bad state, a call stuck in D state) is an
    /// environment error saying what to check (exit 3; `run`: 125), never a hang.
    pub fn monitor(&self) -> Result<Box<dyn Monitor>> {
        open_monitor(self.backend, &Default::default())
    }

    pub fn driver(&self) -> Result<Box<dyn Driver>> {
        Ok(backend::open_driver(self.backend)?)
    }
}

/// [`Session::monitor`] for a backend kind, from any thread (serve's collector opens NVML
/// again after a loss). `opening` is set while an open runs: an open that did not return
/// within [`NVML_START_LIMIT`] keeps it set until it does, and a new open meanwhile fails at
/// once instead of leaving one more thread stuck in the driver.
pub fn open_monitor(
    kind: BackendKind,
    opening: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<Box<dyn Monitor>> {
    use std::sync::atomic::Ordering;
    if opening.swap(true, Ordering::SeqCst) {
        return Err(crate::exit::EnvironmentError(
            "NVML is still opening: an earlier nvmlInit has not returned (look for Xid \
             messages in `dmesg` and processes in D state)"
                .into(),
        )
        .into());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let done = opening.clone();
    let spawned = std::thread::Builder::new()
        .name("vramdoc-nvml-open".into())
        .spawn(move || {
            let opened = backend::open_monitor(kind).and_then(|m| {
                let devices = m.devices()?;
                Ok((m, devices))
            });
            done.store(false, Ordering::SeqCst);
            let _ = tx.send(opened);
        });
    if let Err(e) = spawned {
        opening.store(false, Ordering::SeqCst);
        return Err(e.into());
    }
    let Ok(opened) = rx.recv_timeout(NVML_START_LIMIT) else {
        return Err(crate::exit::EnvironmentError(format!(
            "NVML did not answer within {} s: a GPU or its driver is in a bad state (look for \
             Xid messages in `dmesg` and processes in D state; `nvidia-smi` hangs too); \
             drain the node or reset the GPU",
            NVML_START_LIMIT.as_secs()
        ))
        .into());
    };
    let (m, devices) = opened?;
    if devices.is_empty() {
        return Err(gpu::GpuError::NoDevice(
            "the driver reports 0 GPUs (check the container's GPU access, e.g. NVIDIA_VISIBLE_DEVICES)".into(),
        )
        .into());
    }
    Ok(m)
}

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

/// `(flag, path)` for each path of a repeated output flag, for
/// [`crate::report::write::check_distinct`].
fn outputs<'a>(
    flag: &'a str,
    paths: &'a [std::path::PathBuf],
) -> Vec<(&'a str, &'a std::path::Path)> {
    paths.iter().map(|p| (flag, p.as_path())).collect()
}

/// Run a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Sim(cmd) => sim::run(&cli.global, cmd),
        Command::List(args) => list::run(&args),
        Command::Preflight(args) => {
            let session = Session::new(&cli.global)?;
            preflight::run(&session, &args)
        }
        Command::Scan(args) => {
            let session = Session::new(&cli.global)?;
            scan::run(&session, &args)
        }
        Command::Replay(args) => {
            // `--sim recorded`: the box the scenario files were recorded on.
            let global = scenario::resolve_sim(&cli.global, &args.scenarios)?;
            let session = Session::new(&global)?;
            replay::run(&session, &args)
        }
        Command::Scenario(cmd) => scenario::run(&cmd),
        Command::Whatif(args) => whatif::run(&args),
        Command::Incidents(cmd) => incidents::run(&cmd),
        Command::Report(args) => report::run(&args),
        Command::Serve(args) => {
            let session = Session::new(&cli.global)?;
            serve::run(&session, &args)
        }
        Command::Completions(args) => packaging::completions(args.shell),
        Command::Man => packaging::man(),
        Command::Run(args) => run::run(&cli.global, &args),
        Command::Mark(args) => run::mark(&args),
        Command::Pump(args) => Ok(crate::job::pump::main(args.marker_dir.as_deref())),
        Command::Worker => {
            let session = Session::new(&cli.global)?;
            Ok(replay::worker(&session))
        }
    }
}
