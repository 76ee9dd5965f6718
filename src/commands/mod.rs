//! Subcommands, one file each. This is the command edge: errors are `anyhow` here and are
//! mapped to exit codes in `crate::exit`. [`Session`] resolves which GPU backend to use.

pub mod list;
pub mod replay;
pub mod report;
pub mod run;
pub mod scan;
pub mod sim;

use crate::cli::{BackendArg, Cli, Command, GlobalArgs};
use crate::gpu::{self, BackendKind, Driver, Monitor};
use crate::sim::{InitOptions, SimBox, SIM_DIR_ENV};
use anyhow::{Context, Result};

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
            crate::sim::parse_spec(spec)?;
            let dir = tempfile::Builder::new()
                .prefix("vramdoc-sim-")
                .tempdir()
                .context("creating a private simulated box")?;
            SimBox::create(dir.path(), spec, &InitOptions::default())?;
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

    pub fn monitor(&self) -> Result<Box<dyn Monitor>> {
        Ok(gpu::open_monitor(self.backend)?)
    }

    pub fn driver(&self) -> Result<Box<dyn Driver>> {
        Ok(gpu::open_driver(self.backend)?)
    }
}

/// Run a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Sim(cmd) => sim::run(&cli.global, cmd),
        Command::List(args) => list::run(&args),
        Command::Scan(args) => {
            let session = Session::new(&cli.global)?;
            scan::run(&session, &args)
        }
        Command::Replay(args) => {
            let session = Session::new(&cli.global)?;
            replay::run(&session, &args)
        }
        Command::Report(args) => report::run(&args),
        Command::Run(args) => run::run(&cli.global, &args),
        Command::Mark(args) => run::mark(&args),
        Command::Worker => {
            let session = Session::new(&cli.global)?;
            Ok(replay::worker(&session))
        }
    }
}
