//! `vramdoc run -- CMD` (issue 10): start the user's own command, record every device's
//! memory and the usage of its whole process tree through the shared
//! [`Recorder`](crate::recorder::Recorder), pass its stdin/stdout/stderr through (stderr is
//! also read for out-of-memory lines and a redacted tail), take markers from
//! `$VRAMDOC_MARKERS`, forward signals, then ask `diagnose::timeline` for findings and write
//! the report. The exit status is the command's own (128+N for signal N); vramdoc's own
//! failures are 125, 126 (not executable) and 127 (not found), as GNU `timeout`.
//! `vramdoc mark TEXT` writes one marker line.

use super::Session;
use crate::cli::{GlobalArgs, MarkArgs, RunArgs};
use crate::diagnose::{
    self, ErrorEvent, ErrorKind, JobExit, RecordedDevice, RecordedProcess, Recording,
    TimelineThresholds,
};
use crate::exit::{CodedError, CANNOT_EXECUTE, NOT_FOUND, RUN_FAILED};
use crate::gpu::DeviceInfo;
use crate::recorder::stderr::{ParsedError, StderrWatcher};
use crate::recorder::tree::TreeProcess;
use crate::recorder::{Recorded, Recorder, RecorderConfig, StreamDevice, StreamLine};
use crate::report::write::{render, Format};
use crate::report::{
    DeviceMinFree, DevicePeak, Finding, ProcessPeak, Report, ReportKind, RunError, RunExit,
    RunProcess, RunResult, Severity, SCHEMA_VERSION,
};
use crate::sampler::SamplerConfig;
use crate::units::format_bytes;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The environment variable naming the marker file.
pub const MARKERS_ENV: &str = "VRAMDOC_MARKERS";
/// How long vramdoc keeps recording after the command exits, so memory that is (or is not)
/// returned shows on the timeline (`held-after-exit` waits 500 ms).
pub const SETTLE: Duration = Duration::from_millis(750);
/// Main-loop tick: markers, stderr events, reaping, forwarded signals.
const TICK: Duration = Duration::from_millis(50);

/// Whether an argv is a `vramdoc run` invocation (global flags skipped): its usage errors
/// exit 125.
pub fn is_run_invocation<I: IntoIterator<Item = String>>(args: I) -> bool {
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--sim" | "--backend" => {
                it.next();
            }
            _ if a.starts_with("--sim=") || a.starts_with("--backend=") => {}
            other => return other == "run",
        }
    }
    false
}

/// `vramdoc mark TEXT…`: append one line to `$VRAMDOC_MARKERS`.
pub fn mark(args: &MarkArgs) -> Result<i32> {
    let path = std::env::var_os(MARKERS_ENV)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            crate::exit::UsageError(format!(
                "{MARKERS_ENV} is not set: `vramdoc mark` works inside a command started by \
                 `vramdoc run -- CMD`"
            ))
        })?;
    let text = args.text.join(" ").replace(['\n', '\r'], " ");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(|e| {
            crate::exit::UsageError(format!(
                "{}: {e} (set by `vramdoc run` in {MARKERS_ENV})",
                Path::new(&path).display()
            ))
        })?;
    // One write, so concurrent markers from several processes never interleave.
    f.write_all(format!("{text}\n").as_bytes())
        .with_context(|| format!("writing {}", Path::new(&path).display()))?;
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

// ---- signals ------------------------------------------------------------------------------

/// A signal sent to vramdoc alone (kill, a scheduler), to forward to the command.
static FORWARD: AtomicI32 = AtomicI32::new(0);
/// A signal vramdoc saw at all (a terminal's Ctrl-C reaches the command by itself).
static SEEN: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // Only atomics here (async-signal-safe). si_code <= 0: sent by a process (kill, tkill,
    // sigqueue); > 0 (SI_KERNEL): the terminal, which signalled the command's group already.
    let from_process = info.is_null() || unsafe { (*info).si_code } <= 0;
    if from_process {
        FORWARD.store(sig, Ordering::SeqCst);
    }
    SEEN.store(sig, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a plain sigaction with a handler that only touches atomics.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// `SIGKILL`, `SIGTERM`, … for a signal number.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

// ---- markers --------------------------------------------------------------------------------

/// The marker file, tailed: complete lines appended since the last poll.
struct MarkerTail {
    file: std::fs::File,
    partial: Vec<u8>,
}

impl MarkerTail {
    fn poll(&mut self) -> Vec<String> {
        let mut buf = Vec::new();
        let _ = self.file.read_to_end(&mut buf);
        if buf.is_empty() {
            return Vec::new();
        }
        self.partial.extend_from_slice(&buf);
        let mut lines = Vec::new();
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            let text = marker_text(&String::from_utf8_lossy(&line));
            if !text.is_empty() {
                lines.push(text);
            }
        }
        // A writer that never ends its line does not grow memory without bound.
        if self.partial.len() > 4096 {
            self.partial.clear();
        }
        lines
    }
}

/// A marker line as shown: cleaned, redacted, at most 200 characters.
fn marker_text(line: &str) -> String {
    let clean = crate::report::text::clean(line.trim());
    crate::redact::redact_text(clean.trim())
        .chars()
        .take(200)
        .collect()
}

/// `release` for a line whose first word is `release` (drives `not-released`), else `marker`.
pub fn marker_kind(text: &str) -> &'static str {
    let first = text.split_whitespace().next().unwrap_or("");
    if first.eq_ignore_ascii_case("release") || first.eq_ignore_ascii_case("release:") {
        diagnose::timeline::marker_kinds::RELEASE
    } else {
        "marker"
    }
}

// ---- stderr -------------------------------------------------------------------------------

fn spawn_stderr_reader(
    mut pipe: std::process::ChildStderr,
    watcher: Arc<Mutex<StderrWatcher>>,
    tx: mpsc::Sender<(f64, ParsedError)>,
    t0: Instant,
) {
    let _ = std::thread::Builder::new()
        .name("vramdoc-stderr".into())
        .spawn(move || {
            let mut buf = [0u8; 8192];
            let mut line: Vec<u8> = Vec::new();
            let take = |line: &mut Vec<u8>| {
                if line.is_empty() {
                    return;
                }
                let text = String::from_utf8_lossy(line).into_owned();
                line.clear();
                let found = watcher
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .line(&text);
                if let Some(f) = found {
                    let _ = tx.send((t0.elapsed().as_secs_f64() * 1000.0, f));
                }
            };
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                // Pass through first: the user sees the command's stderr as it comes.
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(&buf[..n]).and_then(|_| err.flush());
                drop(err);
                for b in &buf[..n] {
                    match b {
                        b'\n' | b'\r' => take(&mut line),
                        _ if line.len() < 64 * 1024 => line.push(*b),
                        _ => {}
                    }
                }
            }
            take(&mut line);
        });
}

// ---- the run ------------------------------------------------------------------------------

fn open_samples(path: &Path, force: bool) -> Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true);
    if force {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    o.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!(
                "{} already exists; pass --force to overwrite it",
                path.display()
            )
        } else {
            anyhow::anyhow!("{}: {e}", path.display())
        }
    })
}

struct Outcome {
    status: i32,
    exit: RunExit,
    job_exit: JobExit,
    end_ms: f64,
}

fn decode_status(raw: libc::c_int) -> Outcome {
    if libc::WIFSIGNALED(raw) {
        let sig = libc::WTERMSIG(raw);
        Outcome {
            status: 128 + sig,
            exit: RunExit {
                status: 128 + sig,
                code: None,
                signal: Some(sig),
                signal_name: Some(signal_name(sig)),
            },
            job_exit: JobExit::Signal(sig),
            end_ms: 0.0,
        }
    } else {
        let code = libc::WEXITSTATUS(raw);
        Outcome {
            status: code,
            exit: RunExit {
                status: code,
                code: Some(code),
                signal: None,
                signal_name: None,
            },
            job_exit: JobExit::Code(code),
            end_ms: 0.0,
        }
    }
}

/// Reap every exited child (vramdoc is a subreaper: orphaned descendants become its
/// children); the command's status when it is among them.
fn reap(child: libc::pid_t) -> Option<libc::c_int> {
    let mut found = None;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid with a valid out pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == child {
            found = Some(status);
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

fn record(global: &GlobalArgs, args: &RunArgs) -> Result<i32> {
    // Everything that can be checked is checked before the command starts.
    let period = crate::cli::parse_duration(&args.period)?;
    let process_period = crate::cli::parse_duration(&args.process_period)?;
    // The sampler sleeps on a signal `stop` wakes, so a long period never delays the end.
    if !(Duration::from_millis(1)..=Duration::from_secs(60)).contains(&period)
        || !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&process_period)
    {
        anyhow::bail!(
            "--period must be between 1ms and 60s, --process-period between 10ms and 60s"
        );
    }
    crate::report::write::check_outputs(&args.out, args.force)?;
    if let Some(j) = &args.junit {
        crate::report::write::check_output_file(j, args.force)?;
    }
    let Some(program) = args.command.first() else {
        anyhow::bail!("no command given: write `vramdoc run -- CMD ARGS…`");
    };
    let session = Session::new(global)?;
    let monitor = session.monitor()?;
    let devices = monitor.devices()?;
    let environment = crate::report::environment::collect(monitor.as_ref(), session.sim_spec())?;
    let sampler_monitor = session.monitor()?;
    let samples_file = match &args.samples {
        Some(p) => Some(open_samples(p, args.force)?),
        None => None,
    };
    let marker_dir = tempfile::Builder::new()
        .prefix("vramdoc-run-")
        .tempdir()
        .context("creating the marker directory")?;
    let marker_path = marker_dir.path().join("markers");
    std::fs::write(&marker_path, b"").context("creating the marker file")?;
    let mut markers = MarkerTail {
        file: std::fs::File::open(&marker_path).context("opening the marker file")?,
        partial: Vec::new(),
    };
    let command = crate::redact::redact_args(&args.command);

    // Orphaned grandchildren stay in the tree: they are re-parented to vramdoc.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    // run ends cleanly on a signal itself (it forwards it and writes its report), as
    // replay and serve do: the shared handler must not exit. Its own sigaction then takes
    // over SIGINT/SIGTERM/SIGHUP because it needs `si_code` (a terminal's Ctrl-C, already
    // delivered to the command's process group, vs a `kill` to forward), which the shared
    // handler does not see.
    super::handle_interrupts_gracefully();
    install_signal_handlers();

    let header = StreamLine::Header {
        version: crate::recorder::STREAM_VERSION,
        created_unix_ms: crate::report::environment::now_unix_ms(),
        devices: devices
            .iter()
            .map(|d| StreamDevice {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                total: d.memory.total,
            })
            .collect(),
        command: command.clone(),
        period_us: period.as_micros() as u64,
        process_period_us: process_period.as_micros() as u64,
    };
    let t0 = Instant::now();
    let recorder = Recorder::start(
        sampler_monitor,
        Some(monitor),
        &devices,
        t0,
        RecorderConfig {
            sampler: SamplerConfig {
                period,
                process_period: None,
            },
            tree_root: Some(std::process::id()),
            track_period: Some(process_period),
            sink: samples_file.map(|f| Box::new(f) as Box<dyn Write + Send>),
            header: Some(header),
            process_devices: None,
        },
    );
    // The pre-job level.
    recorder.reading();

    let mut cmd = Command::new(program);
    cmd.args(&args.command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .env(MARKERS_ENV, &marker_path);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            drop(recorder.finish());
            let shown = crate::report::text::clean(program);
            return Err(match (e.kind(), e.raw_os_error()) {
                (std::io::ErrorKind::NotFound, _) => {
                    coded(NOT_FOUND, format!("{shown}: command not found"))
                }
                (std::io::ErrorKind::PermissionDenied, _) => {
                    coded(CANNOT_EXECUTE, format!("{shown}: cannot execute: {e}"))
                }
                (_, Some(libc::ENOEXEC)) => {
                    coded(CANNOT_EXECUTE, format!("{shown}: cannot execute: {e}"))
                }
                _ => coded(RUN_FAILED, format!("starting {shown}: {e}")),
            });
        }
    };
    let child_pid = child.id() as libc::pid_t;
    recorder.mark("start", &format!("command started (pid {child_pid})"), None);
    let watcher = Arc::new(Mutex::new(StderrWatcher::new()));
    let (tx, rx) = mpsc::channel();
    if let Some(pipe) = child.stderr.take() {
        spawn_stderr_reader(pipe, watcher.clone(), tx, t0);
    }
    drop(child); // reaped by `reap`, never by std

    let mut errors: Vec<(f64, ParsedError)> = Vec::new();
    let mut take_events = |recorder: &Recorder, markers: &mut MarkerTail| {
        for text in markers.poll() {
            recorder.mark(marker_kind(&text), &text, None);
        }
        while let Ok((t, e)) = rx.try_recv() {
            let kind = if e.kind == "child-failed" || e.kind == "child-exit" {
                "error"
            } else {
                "oom"
            };
            let device = e.device.and_then(|o| physical(o, &devices));
            recorder.mark(kind, &e.line, device);
            recorder.stream(&StreamLine::Error {
                t_ms: t,
                kind: e.kind.to_string(),
                device,
                requested: e.requested,
                line: e.line.clone(),
            });
            errors.push((t, e));
        }
    };
    let raw = loop {
        let fwd = FORWARD.swap(0, Ordering::SeqCst);
        if fwd != 0 {
            // SAFETY: kill with a PID we started and have not reaped.
            unsafe { libc::kill(child_pid, fwd) };
            recorder.mark("signal", &format!("{} forwarded", signal_name(fwd)), None);
        }
        let seen = SEEN.swap(0, Ordering::SeqCst);
        if seen != 0 && seen != fwd {
            recorder.mark(
                "signal",
                &format!("{} from the terminal", signal_name(seen)),
                None,
            );
        }
        take_events(&recorder, &mut markers);
        if let Some(raw) = reap(child_pid) {
            break raw;
        }
        std::thread::sleep(TICK);
    };
    let mut outcome = decode_status(raw);
    outcome.end_ms = recorder.t_ms();
    let exit_label = match (&outcome.exit.signal_name, outcome.exit.code) {
        (Some(sig), _) => format!("command killed by {sig}"),
        (None, Some(c)) => format!("command exited {c}"),
        _ => "command ended".to_string(),
    };
    let exit_kind = if outcome.exit.signal.is_some() {
        "killed"
    } else {
        "exit"
    };
    recorder.mark(exit_kind, &exit_label, None);
    // Keep recording a moment: is the memory returned?
    let settle_end = Instant::now() + SETTLE;
    while Instant::now() < settle_end {
        take_events(&recorder, &mut markers);
        reap(child_pid);
        std::thread::sleep(TICK);
    }
    take_events(&recorder, &mut markers);
    recorder.round();
    let t_end = recorder.t_ms();
    recorder.stream(&StreamLine::End {
        t_ms: t_end,
        status: outcome.status,
    });
    let rec = recorder.finish();
    let tail = watcher.lock().map(|w| w.tail()).unwrap_or_default();

    let built = build(
        &devices,
        &rec,
        &errors,
        &outcome,
        child_pid as u32,
        &TimelineThresholds::default(),
    );
    let result = RunResult {
        command: command.clone(),
        period_us: period.as_micros() as u64,
        process_period_us: process_period.as_micros() as u64,
        duration_ms: outcome.end_ms.max(0.0) as u64,
        exit: outcome.exit.clone(),
        peaks: rec.peaks.clone(),
        tree_peaks: built.tree_peaks,
        min_free: built.min_free,
        processes: built.processes,
        errors: built.errors,
        findings: built.findings,
        timeline: rec.timeline,
        stderr_tail: tail,
        samples_file: args.samples.as_ref().map(|p| p.display().to_string()),
    };
    let report = Report {
        schema_version: SCHEMA_VERSION,
        kind: ReportKind::Run,
        environment,
        command: crate::report::environment::command_line(),
        created_unix_ms: crate::report::environment::now_unix_ms(),
        scan: None,
        replay: None,
        run: Some(result),
    };
    finish(&report, args, outcome.status)
}

/// Print, write the reports, and decide the exit status.
fn finish(report: &Report, args: &RunArgs, status: i32) -> Result<i32> {
    let Some(run) = report.run.as_ref() else {
        return Ok(RUN_FAILED);
    };
    // Command lines, error lines and paths come from the job: made terminal-safe.
    let text = crate::term::clean_text(&summary(run, &args.out));
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
    drop(err);
    crate::report::write::write_reports(report, &args.out, args.force)?;
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
    use crate::report::text::{clean, severity_word};
    let mut evidence = String::new();
    for e in &run.errors {
        let line: String = clean(&e.line).chars().take(300).collect();
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
            clean(&f.title)
        ));
        for ev in &f.evidence {
            evidence.push_str(&format!("  {}: {}\n", clean(&ev.label), clean(&ev.value)));
        }
        if !f.fix.is_empty() {
            evidence.push_str(&format!("  fix: {}\n", clean(&f.fix)));
        }
    }
    if !run.stderr_tail.is_empty() {
        evidence.push_str("stderr (last lines, redacted):\n");
        for l in &run.stderr_tail {
            evidence.push_str(&format!("  {}\n", clean(l)));
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
        let name: String = crate::report::text::clean(&run.command.join(" "))
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

/// What is derived from a recording: the engine's input, its findings and the report's
/// per-process and per-device numbers. Pure.
pub struct Built {
    pub recording: Recording,
    pub findings: Vec<Finding>,
    pub processes: Vec<RunProcess>,
    pub tree_peaks: Vec<DevicePeak>,
    pub min_free: Vec<DeviceMinFree>,
    pub errors: Vec<RunError>,
}

fn error_kind(kind: &str, line: &str) -> ErrorKind {
    match kind {
        "cuda-oom"
        | "cuda-error-oom"
        | "vllm-free-memory"
        | "vllm-no-cache-blocks"
        | "vllm-kv-cache" => ErrorKind::OutOfMemory,
        "child-exit" => {
            // `exitcode -9`: killed by signal 9.
            let code: Option<i32> = line
                .split("exitcode ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|c| c.parse().ok());
            match code {
                Some(c) if c < 0 => ErrorKind::KilledBySignal { signal: -c },
                _ => ErrorKind::Other,
            }
        }
        _ => ErrorKind::Other,
    }
}

fn build(
    devices: &[DeviceInfo],
    rec: &Recorded,
    parsed: &[(f64, ParsedError)],
    outcome: &Outcome,
    child: u32,
    th: &TimelineThresholds,
) -> Built {
    let tree_pids: std::collections::HashSet<u32> = rec.tree.iter().map(|t| t.pid).collect();
    let uuid = |d: u32| {
        devices
            .iter()
            .find(|x| x.index == d)
            .map(|x| x.uuid.clone())
            .unwrap_or_default()
    };
    let mut errors: Vec<RunError> = parsed
        .iter()
        .map(|(t, e)| RunError {
            t_ms: *t,
            kind: e.kind.to_string(),
            device: e.device.and_then(|o| physical(o, devices)),
            requested: e.requested,
            line: e.line.clone(),
        })
        .collect();
    if let Some(sig) = outcome.exit.signal {
        errors.push(RunError {
            t_ms: outcome.end_ms,
            kind: "killed".into(),
            device: None,
            requested: None,
            line: format!("command (pid {child}) killed by {}", signal_name(sig)),
        });
    }
    let events: Vec<ErrorEvent> = errors
        .iter()
        .map(|e| ErrorEvent {
            t_ms: e.t_ms,
            kind: if e.kind == "killed" {
                ErrorKind::KilledBySignal {
                    signal: outcome.exit.signal.unwrap_or(0),
                }
            } else {
                error_kind(&e.kind, &e.line)
            },
            device: e.device,
            pid: (e.kind == "killed").then_some(child),
            line: e.line.clone(),
            requested_bytes: e.requested,
        })
        .collect();

    // Processes: the tree, then every other PID the process lists showed (neighbours).
    let mut recorded: Vec<RecordedProcess> = rec
        .tree
        .iter()
        .map(|t: &TreeProcess| RecordedProcess {
            pid: t.pid,
            name: t.name.clone(),
            first_seen_ms: t.start_ms,
            exit_ms: t.end_ms,
            cuda_visible_devices: t.env("CUDA_VISIBLE_DEVICES"),
            cuda_device_order: t.env("CUDA_DEVICE_ORDER"),
            nvidia_visible_devices: t.env("NVIDIA_VISIBLE_DEVICES"),
            in_tree: true,
        })
        .collect();
    let mut others: BTreeMap<u32, f64> = BTreeMap::new();
    for p in &rec.timeline.processes {
        if !tree_pids.contains(&p.pid) {
            let e = others.entry(p.pid).or_insert(p.t_ms);
            *e = e.min(p.t_ms);
        }
    }
    for (pid, first) in others {
        recorded.push(RecordedProcess {
            pid,
            name: None,
            first_seen_ms: first,
            exit_ms: None,
            cuda_visible_devices: None,
            cuda_device_order: None,
            nvidia_visible_devices: None,
            in_tree: false,
        });
    }
    let recording = Recording {
        devices: devices.iter().map(RecordedDevice::from).collect(),
        timeline: rec.timeline.clone(),
        processes: recorded,
        errors: events,
        end_ms: outcome.end_ms,
        exit: Some(outcome.job_exit),
    };
    let findings = diagnose::fingerprints(&recording, th);

    // Per-process peaks and the tree's sum per device.
    let mut peak: BTreeMap<(u32, u32), (Option<u64>, f64)> = BTreeMap::new();
    let mut sums: BTreeMap<(u32, u64), (f64, u64)> = BTreeMap::new();
    for p in rec
        .timeline
        .processes
        .iter()
        .filter(|p| tree_pids.contains(&p.pid))
    {
        let e = peak.entry((p.pid, p.device)).or_insert((p.used, p.t_ms));
        if p.used > e.0 {
            *e = (p.used, p.t_ms);
        }
        let s = sums
            .entry((p.device, p.t_ms.to_bits()))
            .or_insert((p.t_ms, 0));
        s.1 += p.used.unwrap_or(0);
    }
    let processes = rec
        .tree
        .iter()
        .map(|t| RunProcess {
            pid: t.pid,
            ppid: t.ppid,
            nspid: t.nspid.clone(),
            name: t.name.clone(),
            cmdline: t.cmdline.clone(),
            start_ms: t.start_ms,
            end_ms: t.end_ms,
            devices: peak
                .range((t.pid, 0)..=(t.pid, u32::MAX))
                .map(|((_, d), (used, at))| ProcessPeak {
                    device: *d,
                    uuid: uuid(*d),
                    peak: *used,
                    t_ms: *at,
                })
                .collect(),
        })
        .collect();
    let tree_peaks = devices
        .iter()
        .map(|d| {
            let (t_ms, peak_used) = sums
                .iter()
                .filter(|((dev, _), _)| *dev == d.index)
                .map(|(_, v)| *v)
                .max_by_key(|(_, v)| *v)
                .unwrap_or((0.0, 0));
            DevicePeak {
                device: d.index,
                total: d.memory.total,
                peak_used,
                t_ms,
            }
        })
        .collect();
    let min_free = rec
        .timeline
        .devices
        .iter()
        .map(|s| {
            let reserved = devices
                .iter()
                .find(|d| d.index == s.device)
                .map_or(0, |d| d.memory.reserved);
            let free = |used: u64| s.total.saturating_sub(reserved).saturating_sub(used);
            let (t_ms, min_free) = s
                .samples
                .iter()
                .filter(|(t, _)| *t <= outcome.end_ms)
                .map(|(t, u)| (*t, free(*u)))
                .min_by_key(|(_, f)| *f)
                .unwrap_or((0.0, free(0)));
            DeviceMinFree {
                device: s.device,
                uuid: uuid(s.device),
                total: s.total,
                min_free,
                t_ms,
            }
        })
        .collect();
    Built {
        recording,
        findings,
        processes,
        tree_peaks,
        min_free,
        errors,
    }
}

/// The summary vramdoc prints on stderr when the command ends (lines fit 100 columns).
fn summary(run: &RunResult, out: &[PathBuf]) -> String {
    use crate::report::text::{clean, format_ms, percent};
    let mut s = String::new();
    let how = match (&run.exit.signal_name, run.exit.code) {
        (Some(sig), _) => format!("was killed by {sig} (status {})", run.exit.status),
        (None, Some(c)) => format!("exited {c}"),
        _ => format!("ended ({})", run.exit.status),
    };
    let cmd: String = clean(&run.command.join(" ")).chars().take(50).collect();
    s.push_str(&format!(
        "\nvramdoc: `{cmd}` {how} after {}; {} process{} in its tree\n",
        format_ms(run.duration_ms as f64),
        run.processes.len(),
        if run.processes.len() == 1 { "" } else { "es" }
    ));
    for p in &run.peaks {
        let tree = run
            .tree_peaks
            .iter()
            .find(|t| t.device == p.device)
            .map_or(0, |t| t.peak_used);
        let free = run
            .min_free
            .iter()
            .find(|f| f.device == p.device)
            .map_or(0, |f| f.min_free);
        s.push_str(&format!(
            "  GPU {}: peak {} of {} ({}); the job's processes {}; lowest free {}\n",
            p.device,
            format_bytes(p.peak_used),
            format_bytes(p.total),
            percent(p.peak_used, p.total),
            format_bytes(tree),
            format_bytes(free)
        ));
    }
    for e in &run.errors {
        let line: String = e.line.chars().take(80).collect();
        s.push_str(&format!("  {} at {}: {line}\n", e.kind, format_ms(e.t_ms)));
    }
    if run.findings.is_empty() {
        s.push_str("  no findings\n");
    }
    for f in &run.findings {
        s.push_str(&format!(
            "  {} {}: {}\n",
            crate::report::text::severity_word(f.severity),
            f.id,
            clean(&f.title)
        ));
    }
    for p in out {
        s.push_str(&format!("  report: {}\n", p.display()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_invocations_are_recognised_past_global_flags() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(is_run_invocation(v(&["vramdoc", "run", "--", "x"])));
        assert!(is_run_invocation(v(&["vramdoc", "--sim", "h100", "run"])));
        assert!(is_run_invocation(v(&["vramdoc", "--backend=sim", "run"])));
        assert!(!is_run_invocation(v(&["vramdoc", "scan"])));
        assert!(!is_run_invocation(v(&["vramdoc"])));
    }

    #[test]
    fn release_markers_and_exit_status() {
        assert_eq!(marker_kind("release model"), "release");
        assert_eq!(marker_kind("Release: shards"), "release");
        assert_eq!(marker_kind("released"), "marker");
        assert_eq!(marker_kind("load model"), "marker");
        assert_eq!(
            marker_text("  load\x1b[31m --token=abcdefgh123  "),
            "load [31m --token=«redacted»"
        );
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
        assert_eq!(signal_name(9), "SIGKILL");
    }
}
