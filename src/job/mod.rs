//! The job supervisor behind `vramdoc run -- CMD`: starts the user's own command (vramdoc a
//! child subreaper, so the whole tree stays visible, and in a process group of its own, as
//! GNU `timeout`), passes its stdin through and its stdout and stderr through a process of
//! their own ([`pump`], which survives vramdoc) whose copy is read for error lines and the
//! tail ([`stderr`]), takes
//! markers from `$VRAMDOC_MARKERS` ([`markers`]), forwards signals sent to vramdoc to the
//! job's process group and to its processes outside it ([`signals`]), reaps, and feeds all of
//! it to the [`Recorder`]: the job only feeds events, the recorder builds the recording.
//! Which processes are the job's beyond its tree is the recorder's [`Scope`] (built by
//! `job_scope`); after the command ends, [`outlived`] ends what still holds memory
//! (`--kill-after`); [`attach`] records processes that already run (`--pid`, `--cgroup`,
//! `--container`); [`live`] draws the one-line status (`--live`). [`process`] holds the
//! helpers replay's workers share.

pub mod attach;
pub mod live;
pub mod markers;
pub mod outlived;
pub mod process;
pub mod pty;
pub mod pump;
pub mod signals;
pub mod splice;
pub mod stderr;
pub mod summary;

use crate::gpu::{DeviceInfo, Monitor};
use crate::model::{Marker, MarkerKind, RunError, RunErrorKind};
use crate::record::sampler::SamplerConfig;
use crate::record::tree::Scope;
use crate::record::{
    ErrorEvent, ErrorKind, JobEnd, JobExit, Recorded, Recorder, RecorderConfig, StreamDevice,
    StreamLine,
};
use markers::{marker_kind, MarkerTail, MARKERS_ENV};
use process::Exit;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long vramdoc keeps recording after the command exits, so memory that is (or is not)
/// returned shows on the timeline (`held-after-exit` waits 500 ms).
pub const SETTLE: Duration = Duration::from_millis(750);
/// Main-loop tick: markers, stderr events, reaping, forwarded signals.
const TICK: Duration = Duration::from_millis(50);
/// After the command ended and [`SETTLE`] passed, how long the copy of its output may stay
/// quiet before vramdoc stops waiting for its end (a background process holds the pipes).
const OUTPUT_QUIET: Duration = Duration::from_millis(1000);

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
    #[error("{0}")]
    Attach(#[from] attach::AttachError),
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
    /// The command and its arguments, as the OS gave them (not necessarily UTF-8).
    pub argv: Vec<std::ffi::OsString>,
    /// The command line as reports show it (redacted).
    pub shown: Vec<String>,
    pub cadence: SamplerConfig,
    /// Where to stream the samples as JSON lines.
    pub samples: Option<std::fs::File>,
    /// Record processes that run already instead of starting `argv` (`--pid`, `--cgroup`,
    /// `--container`).
    pub attach: Option<attach::Target>,
    /// After the command ends, end its processes still holding GPU memory: SIGTERM, then
    /// SIGKILL this much later (`--kill-after`).
    pub kill_after: Option<Duration>,
    /// Stop recording after this long (`--duration`; attach mode).
    pub duration: Option<Duration>,
    /// Draw the one-line live status on a terminal (`--live`).
    pub live: bool,
    /// The job's stdout (stderr) is a pseudo-terminal when vramdoc's is a terminal (off
    /// with `--no-pty`: pipes).
    pub pty: bool,
    /// The job's stdout goes to vramdoc's stderr (`run --json`: vramdoc's stdout carries the
    /// JSON report only; docs/run.md "Output").
    pub stdout_to_stderr: bool,
    /// Set in the job's own environment, over vramdoc's (the session's simulated box;
    /// `run --torch-memory`: its `PYTHONPATH`).
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
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
    /// Attached to processes vramdoc did not start (what, as `pid 4242 (python3)`): `exit`
    /// is not theirs.
    pub attached: Option<String>,
    /// The job's output on its way to the terminal: wait for it before printing
    /// ([`stderr::Output::wait_drained`]).
    pub output: Option<stderr::Output>,
}

/// Run `spec` on `devices`, recording through `monitor`, until the command ends and
/// [`SETTLE`] has passed.
pub fn run(
    mut spec: JobSpec,
    monitor: Box<dyn Monitor>,
    devices: &[DeviceInfo],
) -> Result<JobRun, JobError> {
    if let Some(target) = spec.attach.take() {
        return attach::run(target, spec, monitor, devices);
    }
    let Some(program) = spec.argv.first().cloned() else {
        return Err(JobError::NoCommand);
    };
    let program_shown = {
        use std::os::unix::ffi::OsStrExt;
        crate::term::escape_bytes(program.as_bytes())
    };
    let io = |what| move |source| JobError::Io { what, source };
    let marker_dir = tempfile::Builder::new()
        .prefix("vramdoc-run-")
        .tempdir()
        .map_err(io("creating the marker directory"))?;
    let marker_path = marker_dir.path().join("markers");
    std::fs::write(&marker_path, b"").map_err(io("creating the marker file"))?;
    let markers = Arc::new(Mutex::new(
        MarkerTail::open(&marker_path).map_err(io("opening the marker file"))?,
    ));
    // vramdoc's child, not the job's (left out of the tree by its PID), reaped before
    // `run` returns ([`stderr::Output::wait_drained`]).
    let mut pump = pump::start(marker_dir.path(), spec.pty, spec.stdout_to_stderr)
        .map_err(io("starting the output pump"))?;
    let pump_pid = pump.pid;
    pty::follow_window_size(std::mem::take(&mut pump.winsize));

    // Orphaned grandchildren stay in the tree: they are re-parented to vramdoc.
    process::become_subreaper();
    // Signals sent to vramdoc are forwarded to the command; the report is still written.
    signals::handle(signals::Mode::Forward);
    // The job's own process group (vramdoc's, which the command inherits): a forwarded
    // signal reaches all of it. The caller's group gets the terminal back on drop.
    let group = process::own_group();

    let t0 = Instant::now();
    let scope = Scope {
        helpers: vec![pump_pid],
        ..job_scope(&marker_path)
    };
    let mut cfg = recorder_config(&mut spec, devices, scope);
    // The marker file is read on the sampler thread before each round's readings: a marker
    // is stamped in the readings' clock, after the reading before it was written.
    let (tx, rx) = mpsc::channel();
    cfg.before_round = Some({
        let (tail, tx) = (markers.clone(), tx.clone());
        Box::new(move |t: f64| {
            let (_, texts) = tail.lock().unwrap_or_else(|e| e.into_inner()).poll_at(t);
            for text in texts {
                let _ = tx.send((t, stderr::Seen::Marker(text)));
            }
        })
    });
    let recorder = Recorder::start(monitor, devices, t0, cfg);
    let mut live = live::Live::new(spec.live, devices.iter().map(|d| d.index).collect());
    // The pre-job level.
    let pre = recorder.reading();

    let mut cmd = Command::new(&program);
    cmd.args(&spec.argv[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::from(pump.stdout))
        .stderr(Stdio::from(pump.stderr))
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env(MARKERS_ENV, &marker_path);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            drop(recorder.finish(JobEnd {
                end_ms: 0.0,
                exit: None,
            }));
            // The pump's streams have no writer left: it ends at once; reaped here.
            drop(cmd);
            drop((pump.copy, pump.control));
            process::wait_helper(pump_pid, true);
            return Err(JobError::spawn(&program_shown, e));
        }
    };
    let pid = child.id();
    // The job's from spawn, whether or not a round sees it alive (issue 37 item 6).
    recorder.spawned(pid);
    recorder.mark(
        MarkerKind::Start,
        &format!("command started (pid {pid})"),
        None,
    );
    drop(cmd); // closes vramdoc's copies of the job's write ends
    let mut output =
        stderr::Output::start(pump.copy, pump.control, tx, t0, markers.clone()).with_pump(pump_pid);
    drop(child); // reaped by `process::reap`, never by std

    let mut feed = Feed {
        recorder: &recorder,
        devices,
        markers: &markers,
        lines: rx,
        errors: Vec::new(),
        poll: false,
    };
    // Short naps first: a command that ends at once is reaped at once, not a tick later.
    let mut nap = Duration::from_millis(1);
    let exit = loop {
        forward_signals(&recorder, group.pgid);
        feed.take();
        live.tick(&recorder);
        // Each ended member's last name is read from its zombie (issue 39: a name it
        // exec'd to after the last round).
        if let Some(exit) = process::reap_each(pid, |p| recorder.ending(p)) {
            break exit;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(TICK);
    };
    let end_ms = recorder.t_ms();
    recorder.reaped(pid, end_ms);
    // What is left in the pipes is read at once, whatever the terminal's speed.
    output.command_ended();
    let (kind, label) = match exit {
        Exit::Signal(sig) => (
            MarkerKind::Killed,
            format!("command killed by {}", signals::signal_name(sig)),
        ),
        Exit::Code(c) => (MarkerKind::Exit, format!("command exited {c}")),
    };
    recorder.mark(kind, &label, None);
    // Keep recording a moment: is the memory returned? Not when it is already, with no
    // process of the job left: nothing of the job can change any more.
    let settled = pre.is_some_and(|pre| recorder.nothing_left(&pre));
    if settled {
        feed.take();
    } else {
        feed.settle(SETTLE, &mut live);
    }
    // What still holds memory: ended with --kill-after, else a finding.
    recorder.note_device_file_holders();
    recorder.round();
    if let Some(grace) = spec.kill_after {
        if outlived::end_holders(&recorder, grace, &mut feed, &mut live) {
            feed.settle(SETTLE, &mut live);
        }
    }
    live.clear();
    // The copy to its end (the last lines, the out-of-memory line), unless a background
    // process of the job keeps the pipes open and quiet.
    output.wait_complete(OUTPUT_QUIET);
    feed.drain();
    let mut errors = std::mem::take(&mut feed.errors);
    recorder.note_device_file_holders();
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
                facts: None,
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
    let stderr_tail = output.stderr_tail();
    drop(group);
    Ok(JobRun {
        pid,
        exit,
        end_ms,
        recorded,
        errors,
        stderr_tail,
        attached: None,
        output: Some(output),
    })
}

/// Which processes are the command's: its descendants (vramdoc is a subreaper, so
/// orphans stay), a container it starts (a new container cgroup), and any process whose
/// environment carries the job's marker file (passed on by `srun`, container runtimes that
/// pass the caller's environment, `docker run -e`) or, when vramdoc runs inside a Slurm step,
/// that step.
fn job_scope(marker_path: &std::path::Path) -> Scope {
    let mut env = vec![vec![(
        MARKERS_ENV.to_string(),
        marker_path.to_string_lossy().into_owned(),
    )]];
    if let Some(step) = slurm_step() {
        env.push(step);
    }
    Scope {
        new_containers: true,
        container_clients: container_clients(),
        env,
        ..Scope::descendants(std::process::id())
    }
}

/// The container CLIs whose containers are the job's (docs/run.md): `docker`, `podman`,
/// `nerdctl`, `ctr`, plus the `comm` names in `$VRAMDOC_CONTAINER_CLIENTS` (comma-separated,
/// for a wrapper of your own).
pub const CONTAINER_CLIENTS_ENV: &str = "VRAMDOC_CONTAINER_CLIENTS";

fn container_clients() -> Vec<String> {
    let mut v: Vec<String> = ["docker", "podman", "nerdctl", "ctr"]
        .map(String::from)
        .to_vec();
    if let Ok(extra) = std::env::var(CONTAINER_CLIENTS_ENV) {
        v.extend(
            extra
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(|c| c.chars().take(15).collect()),
        );
    }
    v
}

/// vramdoc's own Slurm step, `SLURM_JOB_ID` and `SLURM_STEP_ID`, when it runs in one.
pub fn slurm_step() -> Option<Vec<(String, String)>> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    Some(vec![
        ("SLURM_JOB_ID".to_string(), get("SLURM_JOB_ID")?),
        ("SLURM_STEP_ID".to_string(), get("SLURM_STEP_ID")?),
    ])
}

fn recorder_config(spec: &mut JobSpec, devices: &[DeviceInfo], scope: Scope) -> RecorderConfig {
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
        hostname: crate::host::hostname().ok().filter(|h| !h.is_empty()),
    };
    RecorderConfig {
        tree: Some(scope),
        round_readings: true,
        sink: spec
            .samples
            .take()
            .map(|f| Box::new(f) as Box<dyn Write + Send>),
        header: Some(header),
        ..RecorderConfig::new(spec.cadence)
    }
}

/// Forward the signals another process sent vramdoc to the job: its process group `pgid`
/// (vramdoc's own, whose copy vramdoc drops) and each of its processes outside that group
/// (a `setsid` child, a container its runtime started); note a terminal's, which reached
/// the group already.
fn forward_signals(recorder: &Recorder, pgid: u32) {
    for r in signals::take_received() {
        let name = signals::signal_name(r.signal);
        if r.from_terminal {
            recorder.mark(
                MarkerKind::Signal,
                &format!("{name} from the terminal"),
                None,
            );
            continue;
        }
        process::send_group(pgid, r.signal);
        let outside: Vec<u32> = recorder
            .live_members()
            .into_iter()
            .filter(ours_to_signal)
            .filter(|m| process::group_of(m.pid).is_some_and(|g| g != pgid))
            .filter(|m| crate::host::is_alive(m.pid, m.start_time))
            .map(|m| m.pid)
            .collect();
        for pid in &outside {
            process::send(*pid, r.signal);
        }
        let also = match outside.len() {
            0 => String::new(),
            n => format!(" and {n} of its processes outside it"),
        };
        recorder.mark(
            MarkerKind::Signal,
            &format!("{name} forwarded to the job's process group{also}"),
            None,
        );
    }
}

/// Whether vramdoc may signal a process of the job (forwarded signals, `--kill-after`):
/// the command's descendants and processes carrying its marker file are certainly its own.
/// A container found only through its new cgroup, or a process of the same Slurm step (the
/// step's other tasks may be another vramdoc's), could be a neighbour's: those are
/// recorded, never signalled (container CLIs pass signals on to their containers
/// themselves, `docker run`'s `--sig-proxy`).
pub fn ours_to_signal(m: &crate::record::tree::TreeProcess) -> bool {
    match m.via.as_deref() {
        None => true,
        Some(v) => v.starts_with(&format!("environment {MARKERS_ENV}")),
    }
}

/// What the loop feeds the recorder: marker lines and recognised stderr lines.
pub struct Feed<'a> {
    recorder: &'a Recorder,
    devices: &'a [DeviceInfo],
    markers: &'a Mutex<MarkerTail>,
    lines: mpsc::Receiver<(f64, stderr::Seen)>,
    errors: Vec<RunError>,
    /// Whether [`Feed::take`] reads the marker file itself (attach); `run`'s sampler does.
    pub poll: bool,
}

impl Feed<'_> {
    /// Keep feeding (and reaping orphans) for `how_long`.
    pub fn settle(&mut self, how_long: Duration, live: &mut live::Live) {
        let end = Instant::now() + how_long;
        while Instant::now() < end {
            self.take();
            live.tick(self.recorder);
            process::reap_each(0, |p| self.recorder.ending(p));
            std::thread::sleep(TICK);
        }
    }

    /// Everything that waits: the marker file to its end (a signal stops it: vramdoc never
    /// ignores SIGTERM for long), the lines; then the count of markers over the cap.
    pub fn drain(&mut self) {
        self.take();
        self.poll_markers();
        while self.tail().more() && !signals::pending() {
            self.poll_markers();
        }
        self.take();
        let dropped = self.tail().dropped();
        if dropped > 0 {
            self.recorder.mark(
                MarkerKind::Marker,
                &format!(
                    "{dropped} markers dropped (vramdoc records the first {} of a run)",
                    markers::MAX_MARKERS
                ),
                None,
            );
        }
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, MarkerTail> {
        self.markers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the output thread saw (markers it read before an error line, stamped then, and
    /// the lines), then the markers written since.
    pub fn take(&mut self) {
        while let Ok((t, seen)) = self.lines.try_recv() {
            let e = match seen {
                stderr::Seen::Marker(text) => {
                    self.recorder.marker(Marker {
                        t_ms: t,
                        kind: marker_kind(&text),
                        label: text,
                        device: None,
                    });
                    continue;
                }
                stderr::Seen::Line(e) => e,
            };
            let device = e.device.and_then(|o| {
                // The printer's own variables (`record::devmap`); vramdoc's as a last resort.
                let printer = self.recorder.error_device(&e.line, o);
                printer.or_else(|| physical(o, self.devices))
            });
            self.recorder.mark(e.kind.marker(), &e.line, device);
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
                facts: Some(crate::record::recognise::LineFacts::of(&e.line)),
            });
            self.errors.push(RunError {
                t_ms: t,
                kind: e.kind,
                device,
                requested: e.requested,
                line: e.line,
            });
        }
        if self.poll {
            self.poll_markers();
        }
    }

    /// The markers written since the last read, at the earliest time they can have been
    /// written.
    fn poll_markers(&mut self) {
        let (t, texts) = self.tail().poll_at(self.recorder.t_ms());
        for text in texts {
            self.recorder.marker(Marker {
                t_ms: t,
                kind: marker_kind(&text),
                label: text,
                device: None,
            });
        }
    }
}

/// Physical index of a CUDA ordinal as the command numbers devices (its
/// `CUDA_VISIBLE_DEVICES`, inherited from vramdoc).
fn physical(ordinal: u32, devices: &[DeviceInfo]) -> Option<u32> {
    let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
    let env = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let ids: Vec<(u32, &str)> = devices.iter().map(|d| (d.index, d.uuid.as_str())).collect();
    if let Some(m) = crate::record::mig::ordinal(ordinal, env.as_deref(), &ids) {
        return m;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_descendants_and_marker_carriers_are_signalled() {
        let tp = |via: Option<&str>| crate::record::tree::TreeProcess {
            via: via.map(String::from),
            ..crate::record::tree::TreeProcess::bare(1)
        };
        assert!(ours_to_signal(&tp(None)));
        assert!(ours_to_signal(&tp(Some("environment VRAMDOC_MARKERS"))));
        assert!(!ours_to_signal(&tp(Some("cgroup /docker/0123"))));
        assert!(!ours_to_signal(&tp(Some("Slurm step 12.0"))));
        assert!(!ours_to_signal(&tp(Some("attached"))));
    }

    #[test]
    fn the_command_s_scope_joins_new_containers_and_its_marker_file() {
        let scope = job_scope(std::path::Path::new("/tmp/vramdoc-run-x/markers"));
        assert_eq!(scope.root, std::process::id());
        assert!(scope.new_containers && !scope.include_root);
        assert!(scope.container_clients.iter().any(|c| c == "docker"));
        assert_eq!(
            scope.env[0],
            [(
                MARKERS_ENV.to_string(),
                "/tmp/vramdoc-run-x/markers".to_string()
            )]
        );
    }
}
