//! The job supervisor behind `vramdoc run -- CMD`: starts the user's own command (vramdoc a
//! child subreaper, so the whole tree stays visible), passes its stdin/stdout through and
//! tees its stderr ([`stderr`]), takes markers from `$VRAMDOC_MARKERS` ([`markers`]),
//! forwards signals sent to vramdoc ([`signals`]), reaps, and feeds all of it to the
//! [`Recorder`]: the job only feeds events, the recorder builds the recording.
//! [`process`] holds the helpers replay's workers share.

pub mod markers;
pub mod process;
pub mod signals;
pub mod stderr;
pub mod summary;

use crate::gpu::{DeviceInfo, Monitor};
use crate::model::{MarkerKind, RunError, RunErrorKind};
use crate::record::sampler::SamplerConfig;
use crate::record::stderr::{ParsedError, StderrWatcher};
use crate::record::{
    ErrorEvent, ErrorKind, JobEnd, JobExit, Recorded, Recorder, RecorderConfig, StreamDevice,
    StreamLine,
};
use markers::{marker_kind, MarkerTail, MARKERS_ENV};
use process::Exit;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long vramdoc keeps recording after the command exits, so memory that is (or is not)
/// returned shows on the timeline (`held-after-exit` waits 500 ms).
pub const SETTLE: Duration = Duration::from_millis(750);
/// Main-loop tick: markers, stderr events, reaping, forwarded signals.
const TICK: Duration = Duration::from_millis(50);

/// Why the job did not run.
#[derive(Debug, Error)]
pub enum JobError {
    #[error("no command given: write `vramdoc run -- CMD ARGS…`")]
    NoCommand,
    #[error("{0}: command not found")]
    NotFound(String),
    #[error("{program}: cannot execute: {source}")]
    CannotExecute {
        program: String,
        source: std::io::Error,
    },
    #[error("starting {program}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

impl JobError {
    /// The exit status `vramdoc run` gives it (as GNU `timeout`: 127 not found, 126 not
    /// executable, 125 any other failure of vramdoc itself).
    pub fn status(&self) -> i32 {
        match self {
            JobError::NotFound(_) => crate::exit::NOT_FOUND,
            JobError::CannotExecute { .. } => crate::exit::CANNOT_EXECUTE,
            _ => crate::exit::RUN_FAILED,
        }
    }

    fn spawn(program: &str, e: std::io::Error) -> JobError {
        let program = crate::term::one_line(program);
        match (e.kind(), e.raw_os_error()) {
            (std::io::ErrorKind::NotFound, _) => JobError::NotFound(program),
            (std::io::ErrorKind::PermissionDenied, _) | (_, Some(libc::ENOEXEC)) => {
                JobError::CannotExecute { program, source: e }
            }
            _ => JobError::Start { program, source: e },
        }
    }
}

/// What to run and how to record it.
pub struct JobSpec {
    /// The command and its arguments, as given.
    pub argv: Vec<String>,
    /// The command line as reports show it (redacted).
    pub shown: Vec<String>,
    pub cadence: SamplerConfig,
    /// Where to stream the samples as JSON lines.
    pub samples: Option<std::fs::File>,
}

/// A finished job.
pub struct JobRun {
    pub pid: u32,
    pub exit: Exit,
    /// When the command ended, ms since it started.
    pub end_ms: f64,
    pub recorded: Recorded,
    /// The error lines its stderr showed (and its death by signal), for the report.
    pub errors: Vec<RunError>,
    /// The last lines of its stderr (redacted).
    pub stderr_tail: Vec<String>,
}

/// Run `spec` on `devices`, recording through `monitor`, until the command ends and
/// [`SETTLE`] has passed.
pub fn run(
    mut spec: JobSpec,
    monitor: Box<dyn Monitor>,
    devices: &[DeviceInfo],
) -> Result<JobRun, JobError> {
    let Some(program) = spec.argv.first().cloned() else {
        return Err(JobError::NoCommand);
    };
    let io = |what| move |source| JobError::Io { what, source };
    let marker_dir = tempfile::Builder::new()
        .prefix("vramdoc-run-")
        .tempdir()
        .map_err(io("creating the marker directory"))?;
    let marker_path = marker_dir.path().join("markers");
    std::fs::write(&marker_path, b"").map_err(io("creating the marker file"))?;
    let mut markers = MarkerTail::open(&marker_path).map_err(io("opening the marker file"))?;

    // Orphaned grandchildren stay in the tree: they are re-parented to vramdoc.
    process::become_subreaper();
    // Signals sent to vramdoc are forwarded to the command; the report is still written.
    signals::handle(signals::Mode::Forward);

    let t0 = Instant::now();
    let recorder = Recorder::start(monitor, devices, t0, recorder_config(&mut spec, devices));
    // The pre-job level.
    recorder.reading();

    let mut cmd = Command::new(&program);
    cmd.args(&spec.argv[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .env(MARKERS_ENV, &marker_path);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            drop(recorder.finish(JobEnd {
                end_ms: 0.0,
                exit: None,
            }));
            return Err(JobError::spawn(&program, e));
        }
    };
    let pid = child.id();
    recorder.mark(
        MarkerKind::Start,
        &format!("command started (pid {pid})"),
        None,
    );
    let watcher = Arc::new(Mutex::new(StderrWatcher::new()));
    let (tx, rx) = mpsc::channel();
    if let Some(pipe) = child.stderr.take() {
        stderr::tee(pipe, watcher.clone(), tx, t0);
    }
    drop(child); // reaped by `process::reap`, never by std

    let mut feed = Feed {
        recorder: &recorder,
        devices,
        markers: &mut markers,
        lines: rx,
        errors: Vec::new(),
    };
    let exit = loop {
        forward_signals(&recorder, pid);
        feed.take();
        if let Some(exit) = process::reap(pid) {
            break exit;
        }
        std::thread::sleep(TICK);
    };
    let end_ms = recorder.t_ms();
    let (kind, label) = match exit {
        Exit::Signal(sig) => (
            MarkerKind::Killed,
            format!("command killed by {}", signals::signal_name(sig)),
        ),
        Exit::Code(c) => (MarkerKind::Exit, format!("command exited {c}")),
    };
    recorder.mark(kind, &label, None);
    // Keep recording a moment: is the memory returned?
    let settle_end = Instant::now() + SETTLE;
    while Instant::now() < settle_end {
        feed.take();
        process::reap(pid);
        std::thread::sleep(TICK);
    }
    feed.take();
    let mut errors = std::mem::take(&mut feed.errors);
    recorder.round();
    recorder.stream(&StreamLine::End {
        t_ms: recorder.t_ms(),
        status: exit.status(),
    });
    let job_exit = match exit {
        Exit::Signal(sig) => {
            let line = format!(
                "command (pid {pid}) killed by {}",
                signals::signal_name(sig)
            );
            recorder.error(ErrorEvent {
                t_ms: end_ms,
                kind: ErrorKind::KilledBySignal { signal: sig },
                device: None,
                pid: Some(pid),
                line: line.clone(),
                requested_bytes: None,
            });
            errors.push(RunError {
                t_ms: end_ms,
                kind: RunErrorKind::Killed,
                device: None,
                requested: None,
                line,
            });
            JobExit::Signal(sig)
        }
        Exit::Code(c) => JobExit::Code(c),
    };
    let recorded = recorder.finish(JobEnd {
        end_ms,
        exit: Some(job_exit),
    });
    let stderr_tail = watcher.lock().map(|w| w.tail()).unwrap_or_default();
    Ok(JobRun {
        pid,
        exit,
        end_ms,
        recorded,
        errors,
        stderr_tail,
    })
}

fn recorder_config(spec: &mut JobSpec, devices: &[DeviceInfo]) -> RecorderConfig {
    let header = StreamLine::Header {
        version: crate::record::STREAM_VERSION,
        created_unix_ms: crate::model::now_unix_ms(),
        devices: devices
            .iter()
            .map(|d| StreamDevice {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                total: d.memory.total,
            })
            .collect(),
        command: spec.shown.clone(),
        period_us: spec.cadence.period.as_micros() as u64,
        process_period_us: spec
            .cadence
            .process_period
            .map_or(0, |p| p.as_micros() as u64),
    };
    RecorderConfig {
        tree_root: Some(std::process::id()),
        round_readings: true,
        sink: spec
            .samples
            .take()
            .map(|f| Box::new(f) as Box<dyn Write + Send>),
        header: Some(header),
        ..RecorderConfig::new(spec.cadence)
    }
}

/// Forward the signals another process sent vramdoc to the command; note a terminal's.
fn forward_signals(recorder: &Recorder, pid: u32) {
    for r in signals::take_received() {
        let name = signals::signal_name(r.signal);
        if r.from_terminal {
            recorder.mark(
                MarkerKind::Signal,
                &format!("{name} from the terminal"),
                None,
            );
        } else {
            process::send(pid, r.signal);
            recorder.mark(MarkerKind::Signal, &format!("{name} forwarded"), None);
        }
    }
}

/// What the loop feeds the recorder: marker lines and recognised stderr lines.
struct Feed<'a> {
    recorder: &'a Recorder,
    devices: &'a [DeviceInfo],
    markers: &'a mut MarkerTail,
    lines: mpsc::Receiver<(f64, ParsedError)>,
    errors: Vec<RunError>,
}

impl Feed<'_> {
    fn take(&mut self) {
        for text in self.markers.poll() {
            self.recorder.mark(marker_kind(&text), &text, None);
        }
        while let Ok((t, e)) = self.lines.try_recv() {
            let device = e.device.and_then(|o| {
                // The printer's own variables (`record::devmap`); vramdoc's as a last resort.
                let printer = self.recorder.error_device(&e.line, o);
                printer.or_else(|| physical(o, self.devices))
            });
            let marker = match e.kind {
                RunErrorKind::ChildFailed | RunErrorKind::ChildExit => MarkerKind::Error,
                _ => MarkerKind::Oom,
            };
            self.recorder.mark(marker, &e.line, device);
            self.recorder.stream(&StreamLine::Error {
                t_ms: t,
                kind: e.kind.clone(),
                device,
                requested: e.requested,
                line: e.line.clone(),
            });
            self.recorder.error(ErrorEvent {
                t_ms: t,
                kind: e.error_kind(),
                device,
                pid: None,
                line: e.line.clone(),
                requested_bytes: e.requested,
            });
            self.errors.push(RunError {
                t_ms: t,
                kind: e.kind,
                device,
                requested: e.requested,
                line: e.line,
            });
        }
    }
}

/// Physical index of a CUDA ordinal as the command numbers devices (its
/// `CUDA_VISIBLE_DEVICES`, inherited from vramdoc).
fn physical(ordinal: u32, devices: &[DeviceInfo]) -> Option<u32> {
    let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
    let env = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    crate::gpu::visible::visible_devices(env.as_deref(), &uuids)
        .get(ordinal as usize)
        .copied()
}

/// Where the samples go, checked before the command starts: a new file, or with `force` a
/// truncated one.
pub fn open_samples(path: &std::path::Path, force: bool) -> Result<std::fs::File, String> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true);
    if force {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    o.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "{} already exists; pass --force to overwrite it",
                path.display()
            )
        } else {
            format!("{}: {e}", path.display())
        }
    })
}
