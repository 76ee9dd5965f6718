//! Watching a user's own command on the session's GPUs: the engine of `vramdoc run`, of
//! `vramdoc replay -- CMD` (a user's reproduction replayed as a scenario, [`variants`]) and of
//! `vramdoc whatif -- CMD` (fit by execution on simulated cards, [`fit`]). It starts the
//! command through the job supervisor (`job`) with the session's box in its environment,
//! records it, decides the findings (`diagnose`), joins `--torch-memory`'s snapshot
//! (`explain::inject`) and returns the report with the command's own exit status. It writes
//! no file and prints nothing: the caller's sink does.

pub mod fit;
pub mod variants;

use crate::diagnose;
use crate::explain::inject::{InjectError, Injection};
use crate::gpu::GpuError;
use crate::job::{self, JobError, JobSpec};
use crate::model::{Body, Report};
use crate::record::sampler::SamplerConfig;
use crate::session::{OpenError, Session};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// What to watch and how.
pub struct WatchOptions {
    /// The command and its arguments, as the OS gave them (empty with `attach`).
    pub argv: Vec<OsString>,
    /// Record processes that run already (`--pid`, `--cgroup`, `--container`).
    pub attach: Option<job::attach::Target>,
    pub cadence: SamplerConfig,
    /// Where to stream the samples (opened by the caller's sink checks), and its name.
    pub samples: Option<(std::fs::File, String)>,
    pub kill_after: Option<Duration>,
    pub duration: Option<Duration>,
    pub live: bool,
    pub pty: bool,
    pub stdout_to_stderr: bool,
    /// `--torch-memory`: PyTorch's allocator history is recorded with this many entries at
    /// most, and its snapshot joined with the findings.
    pub torch_memory: Option<u64>,
    /// Where the caller keeps that snapshot (the report names it).
    pub torch_kept_as: Option<PathBuf>,
    /// The kubelet's pod log directory, for pod names.
    pub pod_log_dir: PathBuf,
    /// Set in the job's environment after the session's (a fix variant's `NAME=VALUE`).
    pub extra_env: Vec<(OsString, OsString)>,
    /// Who tells the user when the box's driver is older than the job's runtime wants
    /// (`vramdoc run`).
    pub told: &'static str,
}

impl WatchOptions {
    /// A command watched with `run`'s defaults, its output passed through on stderr.
    pub fn command(argv: Vec<OsString>, cadence: SamplerConfig, told: &'static str) -> Self {
        WatchOptions {
            argv,
            attach: None,
            cadence,
            samples: None,
            kill_after: None,
            duration: None,
            live: false,
            pty: false,
            stdout_to_stderr: true,
            torch_memory: None,
            torch_kept_as: None,
            pod_log_dir: PathBuf::from(crate::host::kubelet::DEFAULT_POD_LOG_DIR),
            extra_env: Vec::new(),
            told,
        }
    }
}

/// A watched command.
pub struct Watched {
    /// `Body::Run`.
    pub report: Report,
    /// The command's own exit status (128+N for signal N).
    pub status: i32,
    /// The job's output, still draining to vramdoc's stderr.
    pub output: Option<job::stderr::Output>,
    /// The newest allocator snapshot the job dumped (`--torch-memory`), for the caller to
    /// keep; it lives until `Watched` is dropped.
    pub torch_snapshot: Option<PathBuf>,
    /// Holds the injection's directory (and the snapshot) until dropped.
    _torch: Option<Injection>,
}

/// Why a command could not be watched.
#[derive(Debug, Error)]
pub enum WatchError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Vantage(#[from] crate::exit::UsageError),
    #[error(transparent)]
    Torch(#[from] InjectError),
    #[error(transparent)]
    Job(#[from] JobError),
}

impl WatchError {
    /// `vramdoc run`'s exit status for it (as GNU `timeout`: 127, 126, else 125).
    pub fn status(&self) -> i32 {
        match self {
            WatchError::Job(e) => e.status(),
            _ => crate::exit::RUN_FAILED,
        }
    }
}

/// Watch one command (or attach) on the session's GPUs until it ends.
pub fn watch(session: &Session, opts: WatchOptions) -> Result<Watched, WatchError> {
    let monitor = session.monitor()?;
    let devices = crate::record::mig::recorded_devices(&monitor.devices()?);
    let environment = crate::inventory::environment(monitor.as_ref(), session.sim_spec())?;
    let vantage = crate::inventory::vantage_here(&environment, monitor.as_ref())?;
    let command = match &opts.attach {
        Some(t) => job::attach::command_of(t),
        // Arguments that are not UTF-8 are passed as they are and shown escaped (`\xff`).
        None => crate::redact::redact_args(&crate::term::escape_args(&opts.argv)),
    };
    // The hook's directory in this user's private one, which outlives the run: no path the
    // job inherits can be made again by another user (issue 39 item 3).
    let torch = match opts.torch_memory {
        Some(n) => {
            let parent = job::attach::user_dir().map_err(JobError::from)?;
            Some(Injection::prepare(n, &parent)?)
        }
        None => None,
    };
    let (samples, samples_name) = match opts.samples {
        Some((f, name)) => (Some(f), Some(name)),
        None => (None, None),
    };
    let env = (session.backend.job_env_told(opts.told).into_iter())
        .chain(
            torch
                .iter()
                .flat_map(|t| t.env(std::env::var_os("PYTHONPATH"))),
        )
        .chain(opts.extra_env)
        .collect();
    let spec = JobSpec {
        argv: opts.argv,
        shown: command.clone(),
        cadence: opts.cadence,
        samples,
        attach: opts.attach,
        kill_after: opts.kill_after,
        duration: opts.duration,
        live: opts.live,
        pty: opts.pty,
        stdout_to_stderr: opts.stdout_to_stderr,
        env,
    };
    let cadence_us = (
        opts.cadence.period.as_micros() as u64,
        opts.cadence
            .process_period
            .unwrap_or(opts.cadence.period)
            .as_micros() as u64,
    );
    let mut ran = job::run(spec, monitor, &devices)?;
    let (output, status) = (ran.output.take(), ran.exit.status());
    let findings = diagnose::fingerprints_seen_from(&ran.recorded.recording, &vantage);
    let mut result =
        job::summary::run_result(command, cadence_us, ran, &devices, findings, samples_name);
    result.vantage = Some(vantage);
    let torch_snapshot = torch.as_ref().and_then(Injection::snapshot);
    if let Some(snapshot) = &torch_snapshot {
        crate::explain::inject::join(&mut result, snapshot, opts.torch_kept_as.as_deref());
    }
    crate::pods::name_pods(
        result.processes.iter_mut().filter_map(|p| p.pod.as_mut()),
        &opts.pod_log_dir,
    );
    Ok(Watched {
        report: Report::new(environment, Body::Run(result)),
        status,
        output,
        torch_snapshot,
        _torch: torch,
    })
}

/// The snapshot's bytes, at most `explain`'s size limit (to keep beside the report).
pub fn snapshot_bytes(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let (file, meta) =
        crate::input::open_regular(path).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut bytes = Vec::with_capacity(meta.len().min(crate::explain::DEFAULT_MAX_BYTES) as usize);
    file.take(crate::explain::DEFAULT_MAX_BYTES)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}
