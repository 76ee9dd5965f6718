//! The replay engine: runs one variant of a scenario as a worker child process (so its PID,
//! environment and crash are real) next to its neighbour processes, while the [`Sampler`]
//! reads memory in the background; then checks the variant's expectations on the timeline.
//! The monitor never runs workload code itself: an OOM or a kill ends the worker only.

pub mod checks;
pub mod fingerprint;
pub mod protocol;
pub mod worker;

use crate::backend::{self, BackendKind};
use crate::gpu::{DeviceInfo, GpuError, Monitor};
use crate::recorder::{Recorder, RecorderConfig};
use crate::report::{DevicePeak, Marker, StepError, StepRecord, Timeline, VariantRun, Verdict};
use crate::sampler::SamplerConfig;
use crate::scenario::{Op, Scenario, Step, Variant, VariantKind};
use protocol::{Timed, WorkerEvent, WorkerInput};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Errors that stop a replay as a whole (environment problems: exit 3).
#[derive(Debug, Error)]
pub enum ReplayError {
    #[error("starting {what}: {source}")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("the worker could not open the GPU driver: {0}")]
    WorkerEnvironment(String),
}

/// How to run replays.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub backend: BackendKind,
    pub sampler: SamplerConfig,
    /// The vramdoc binary (workers and neighbours are `vramdoc __worker`).
    pub exe: PathBuf,
    /// Set by Ctrl-C: stop the worker, keep what was recorded.
    pub interrupted: Arc<AtomicBool>,
    /// A worker that reports nothing for this long (a hung step, a hung driver call) is
    /// killed and its step ends with status `timeout`.
    pub step_timeout: Duration,
}

/// Default for [`ReplayOptions::step_timeout`] (`--step-timeout`).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// Progress callbacks (the command shows them with indicatif).
pub trait Observer {
    fn variant_started(&mut self, _scenario: &str, _variant: &str, _steps: usize) {}
    fn worker_started(&mut self, _pid: u32) {}
    fn step_started(&mut self, _index: usize, _label: &str) {}
    fn variant_finished(&mut self, _run: &VariantRun) {}
}

/// An observer that shows nothing.
pub struct Quiet;
impl Observer for Quiet {}

fn backend_arg(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Sim => "sim",
        BackendKind::Real => "real",
    }
}

/// A child `vramdoc __worker` with its event stream.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Result<protocol::Timed, String>>,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    fn spawn(
        opts: &ReplayOptions,
        env: &[(String, Option<String>)],
        input: &WorkerInput,
        what: &str,
    ) -> Result<Proc, ReplayError> {
        let mut cmd = Command::new(&opts.exe);
        cmd.arg("--backend")
            .arg(backend_arg(opts.backend))
            .arg("__worker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            match v {
                // The parser refuses these already; a plan built in code is held to the same
                // allow-list (docs/security.md).
                Some(_)
                    if crate::scenario::parse::env_refusal(k).is_some()
                        && k != "CUDA_VISIBLE_DEVICES" => {}
                Some(v) => {
                    cmd.env(k, v);
                }
                None => {
                    cmd.env_remove(k);
                }
            };
        }
        // Its own process group: a terminal's Ctrl-C reaches the monitor, which stops the
        // worker itself and records that it did.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // If the monitor dies (even by SIGKILL), the child dies too and its memory is freed.
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|source| ReplayError::Spawn {
            what: what.to_string(),
            source,
        })?;
        let mut stdin = child.stdin.take();
        if let Some(s) = stdin.as_mut() {
            let line = serde_json::to_string(input).unwrap_or_default();
            let _ = writeln!(s, "{line}").and_then(|_| s.flush());
        }
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    let ev = protocol::parse_event(&line).ok_or(line);
                    if tx.send(ev).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut err) = child.stderr.take() {
            let buf = stderr.clone();
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = err.read_to_string(&mut s);
                if let Ok(mut b) = buf.lock() {
                    *b = s;
                }
            });
        }
        Ok(Proc {
            child,
            stdin,
            events: rx,
            stderr,
        })
    }

    fn ack(&mut self) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = writeln!(s).and_then(|_| s.flush());
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Whether the process is still running (not exited, not a zombie).
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Close stdin, give the process `grace` to exit, then kill it; reap it.
    fn finish(mut self, grace: Duration) {
        self.stdin.take();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn stderr_tail(&self) -> String {
        let s = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        let s = s.trim();
        let tail: String = s
            .chars()
            .rev()
            .take(300)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        tail.replace('\n', " ")
    }
}

/// `PR_SET_PDEATHSIG`: the kernel sends SIGKILL to the child when the thread that spawned it
/// exits. If the parent is already gone by the time the child runs (the race between fork
/// and prctl), the child exits at once.
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and _exit are async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
}

fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1000.0
}

/// A run that did not happen.
pub fn skipped(scn: &Scenario, variant: &Variant, reason: String) -> VariantRun {
    VariantRun {
        scenario: scn.id.clone(),
        variant: variant.name.clone(),
        source: scn.source.clone(),
        verdict: Verdict::Skipped,
        reason: Some(reason),
        checks: Vec::new(),
        worker_pid: None,
        error: None,
        peaks: Vec::new(),
        timeline: Timeline::default(),
        duration_ms: 0,
        steps: Vec::new(),
    }
}

/// Memory and the given process's usage on every device, now.
fn snapshot(
    monitor: &dyn Monitor,
    devices: &[DeviceInfo],
    pid: Option<u32>,
) -> (Vec<u64>, Vec<u64>) {
    let mut used = Vec::new();
    let mut mine = Vec::new();
    for d in devices {
        used.push(monitor.memory(d.index).map(|m| m.used).unwrap_or(0));
        let w = match pid {
            Some(pid) => monitor
                .processes(d.index)
                .ok()
                .and_then(|l| l.into_iter().find(|p| p.pid == pid))
                .and_then(|p| p.used)
                .unwrap_or(0),
            None => 0,
        };
        mine.push(w);
    }
    (used, mine)
}

/// Position in `devices` of each CUDA ordinal a process given `CUDA_VISIBLE_DEVICES=env`
/// (indices into `devices`, or UUIDs) will see, and the value that pins exactly those
/// devices by UUID. CUDA accepts UUIDs in `CUDA_VISIBLE_DEVICES`; pinning by UUID means the
/// process's ordinal `k` is `devices[view[k]]` whatever order CUDA enumerates devices in
/// (fastest first unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`) and whichever devices are absent.
/// A value that selects nothing is passed on as is (the scenario wants no device).
pub fn pin_by_uuid(env: Option<&str>, devices: &[DeviceInfo]) -> (Vec<u32>, String) {
    let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
    let view = crate::gpu::visible::visible_devices(env, &uuids);
    if view.is_empty() {
        return (view, env.unwrap_or_default().to_string());
    }
    let pinned: Vec<&str> = view.iter().map(|p| uuids[*p as usize].as_str()).collect();
    let joined = pinned.join(",");
    (view, joined)
}

/// Which PID NVML lists for the worker. In the host PID namespace it is the worker's own
/// PID; in a container NVML still reports host PIDs, so the worker's `NSpid` says it when
/// this /proc shows the outer namespace; otherwise the worker is recognised on the devices
/// it reported contexts on, as the one process that appeared there after it started.
#[derive(Debug, Default)]
struct WorkerIdentity {
    /// PID as NVML lists it, once known.
    nvml: Option<u32>,
    /// How `nvml` was found (for the report's marker).
    how: Option<String>,
    /// NVML PIDs present on the devices before the worker started (neighbours, others).
    before: std::collections::BTreeSet<u32>,
}

impl WorkerIdentity {
    /// Try to find the worker in NVML's lists: it is the one process, not there before it
    /// started, listed on every device it reported a context on (on any device when it
    /// reported none, e.g. a driver that cannot name a device's UUID).
    fn resolve(&mut self, monitor: &dyn Monitor, positions: &[usize], devices: &[DeviceInfo]) {
        if self.nvml.is_some() {
            return;
        }
        let mut candidates: Option<std::collections::BTreeSet<u32>> = None;
        let all: Vec<usize> = (0..devices.len()).collect();
        let (look, every) = if positions.is_empty() {
            (all.as_slice(), false)
        } else {
            (positions, true)
        };
        for p in look {
            let Some(d) = devices.get(*p) else { continue };
            let Ok(list) = monitor.processes(d.index) else {
                return;
            };
            let here: std::collections::BTreeSet<u32> = list
                .iter()
                .map(|p| p.pid)
                .filter(|pid| !self.before.contains(pid))
                .collect();
            candidates = Some(match candidates {
                None => here,
                Some(c) if every => c.intersection(&here).copied().collect(),
                Some(c) => c.union(&here).copied().collect(),
            });
        }
        if let Some(c) = candidates {
            if c.len() == 1 {
                self.nvml = c.into_iter().next();
                self.how = Some("the one new process on the devices it has contexts on".into());
            }
        }
    }
}

/// Run one variant of a scenario. `monitor` reads memory at step boundaries; the sampler
/// thread opens its own monitor of the same kind.
pub fn run_variant(
    scn: &Scenario,
    variant: &Variant,
    monitor: &dyn Monitor,
    devices: &[DeviceInfo],
    opts: &ReplayOptions,
    observer: &mut dyn Observer,
) -> Result<VariantRun, ReplayError> {
    let plan = scn.plan(variant);
    let t0 = Instant::now();
    let t0_mono = protocol::mono_ns();
    let started = Instant::now();
    let mut markers: Vec<Marker> = Vec::new();
    observer.variant_started(&scn.id, &variant.name, plan.steps.len());

    // `devices` already reflect the parent's CUDA_VISIBLE_DEVICES (the command selects
    // them); the scenario's own value indexes them.
    let visible = plan.env.get("CUDA_VISIBLE_DEVICES").cloned();
    let (ordinals, pinned) = pin_by_uuid(visible.as_deref(), devices);
    // What named fractions of `[sizes]` refer to: the smallest total among the devices the
    // worker sees as its ordinals 0..scn.devices (docs/scenarios.md, "Sizes").
    let smallest = ordinals
        .iter()
        .take(scn.devices.max(1) as usize)
        .filter_map(|p| devices.get(*p as usize))
        .map(|d| d.memory.total)
        .min()
        .unwrap_or(0);

    // Neighbours first: they hold memory for the whole variant.
    let mut neighbours = Vec::new();
    let mut neighbour_failure = None;
    for n in &scn.neighbours {
        let input = WorkerInput {
            steps: vec![Step {
                id: "hold".into(),
                label: n.label.clone(),
                op: Op::Alloc {
                    tag: "held".into(),
                    device: 0,
                    // A named fraction: of `smallest_total`, as for the worker.
                    size: n.size,
                    allocator: None,
                    group: None,
                    fill: true,
                },
                only: Vec::new(),
            }],
            lockstep: false,
            hold: true,
            smallest_total: smallest,
        };
        // Pinned by UUID: scenario device k is `devices[k]`, whatever CUDA's order.
        let pin = devices
            .get(n.device as usize)
            .map(|d| d.uuid.clone())
            .unwrap_or_else(|| n.device.to_string());
        let env = vec![("CUDA_VISIBLE_DEVICES".to_string(), Some(pin))];
        let p = Proc::spawn(opts, &env, &input, "a neighbour process")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match p.events.recv_timeout(Duration::from_millis(50)) {
                Ok(Ok(Timed {
                    ev: WorkerEvent::Ready,
                    ..
                })) => break,
                Ok(Ok(Timed {
                    ev: WorkerEvent::Failed { kind, message, .. },
                    ..
                })) => {
                    if kind == "environment" {
                        p.finish(Duration::from_millis(100));
                        return Err(ReplayError::WorkerEnvironment(message));
                    }
                    neighbour_failure =
                        Some(format!("{} could not hold its memory: {message}", n.label));
                    break;
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout)
                    if Instant::now() < deadline && !opts.interrupted.load(Ordering::SeqCst) => {}
                Err(_) => {
                    neighbour_failure =
                        Some(format!("{} did not start: {}", n.label, p.stderr_tail()));
                    break;
                }
            }
        }
        markers.push(Marker {
            t_ms: ms(t0),
            kind: "neighbour".into(),
            label: format!("{} holds {}", n.label, n.size.describe()),
            device: Some(n.device),
        });
        neighbours.push(p);
        if neighbour_failure.is_some() {
            break;
        }
    }

    let totals: Vec<u64> = devices.iter().map(|d| d.memory.total).collect();
    let (baseline, _) = snapshot(monitor, devices, None);

    // The worker's environment: the parent's, with the variant's on top, and its devices
    // pinned by UUID (scenario device k is `devices[k]`).
    let mut env: Vec<(String, Option<String>)> = plan
        .env
        .iter()
        .filter(|(k, _)| k.as_str() != "CUDA_VISIBLE_DEVICES")
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect();
    env.push(("CUDA_VISIBLE_DEVICES".into(), Some(pinned.clone())));

    // Memory of every device; process lists (slow, a driver lock) only where the worker
    // works: the first devices it sees, as many as the scenario needs.
    let sampler_monitor = backend::open_monitor(opts.backend)?;
    let recorder = Recorder::start(
        sampler_monitor,
        None,
        devices,
        t0,
        RecorderConfig {
            process_devices: Some(
                ordinals
                    .iter()
                    .take(scn.devices.max(1) as usize)
                    .filter_map(|p| devices.get(*p as usize).map(|d| d.index))
                    .collect(),
            ),
            ..RecorderConfig::sampler_only(opts.sampler)
        },
    );

    let mut records: Vec<StepRecord> = Vec::new();
    recorder.point(ms(t0), baseline.clone());
    let mut error: Option<StepError> = None;
    let mut completed = false;
    let mut interrupted = false;
    let mut worker_pid = None;
    let mut ident = WorkerIdentity::default();
    let mut held_share: std::collections::BTreeMap<String, f64> = Default::default();
    // Positions of the devices the worker reported contexts on (by UUID).
    let mut context_positions: Vec<(u32, usize)> = Vec::new();

    if let Some(reason) = neighbour_failure.clone() {
        error = Some(StepError {
            step: 0,
            step_label: "neighbours".into(),
            kind: "error".into(),
            message: reason,
            t_ms: ms(t0),
        });
    } else {
        let input = WorkerInput {
            steps: plan.steps.clone(),
            lockstep: true,
            hold: false,
            smallest_total: smallest,
        };
        let host_ns = crate::inventory::detect_pid_namespace()
            .map(|ns| ns.host)
            .unwrap_or(true);
        // Outside the host PID namespace the worker may have to be recognised as the one new
        // process in NVML's lists: note who is there before it starts (slow lists, read only
        // when needed).
        if !host_ns {
            for d in devices {
                if let Ok(list) = monitor.processes(d.index) {
                    ident.before.extend(list.iter().map(|p| p.pid));
                }
            }
        }
        let mut w = Proc::spawn(opts, &env, &input, "the worker")?;
        worker_pid = Some(w.child.id());
        if host_ns {
            ident.nvml = worker_pid;
        }
        observer.worker_started(w.child.id());
        markers.push(Marker {
            t_ms: ms(t0),
            kind: "worker".into(),
            label: format!("worker pid {} started", w.child.id()),
            device: None,
        });
        let mut prev_mine: Vec<u64> = vec![0; devices.len()];
        let mut last_progress = Instant::now();
        let mut timed_out = false;
        loop {
            if opts.interrupted.load(Ordering::SeqCst) {
                interrupted = true;
                w.kill();
                break;
            }
            let (ev, sent) = match w.events.recv_timeout(Duration::from_millis(20)) {
                Ok(Ok(Timed { ev, mono_ns })) => (ev, mono_ns),
                Ok(Err(_unparsed)) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    if last_progress.elapsed() >= opts.step_timeout {
                        timed_out = true;
                        w.kill();
                        break;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            last_progress = Instant::now();
            // When the event happened (the worker's stamp), never later than now: markers and
            // step times use it, readings keep the time they were taken.
            let now = ms(t0);
            let at = sent
                .and_then(|n| n.checked_sub(t0_mono))
                .map_or(now, |n| (n as f64 / 1e6).min(now));
            match ev {
                WorkerEvent::Hello { pid, nspid, .. } => {
                    worker_pid = Some(pid);
                    if ident.nvml.is_none() && nspid.len() > 1 {
                        ident.nvml = nspid.first().copied();
                        ident.how = Some("its NSpid in /proc".into());
                    }
                }
                WorkerEvent::Start { step } => {
                    let Some(s) = plan.steps.get(step) else {
                        continue;
                    };
                    let t = at;
                    // A reading at every step boundary: short steps show on the chart. Events
                    // can be handled after the worker died (a fast OOM): a reading taken then
                    // shows its memory already returned, so it counts only if the worker is
                    // still alive after it was taken.
                    let reading = snapshot(monitor, devices, None).0;
                    if w.alive() {
                        recorder.point(ms(t0), reading);
                    }
                    observer.step_started(step, &s.label);
                    markers.push(Marker {
                        t_ms: t,
                        kind: "step".into(),
                        label: format!("{}: {}", s.id, s.label),
                        device: None,
                    });
                    records.push(StepRecord {
                        index: step,
                        id: s.id.clone(),
                        label: s.label.clone(),
                        op: s.op.name().into(),
                        start_ms: t,
                        end_ms: None,
                        status: "running".into(),
                        bytes: None,
                        used_after: Vec::new(),
                        worker_after: Vec::new(),
                        held_after: 0,
                        peak_used: Vec::new(),
                    });
                }
                WorkerEvent::End {
                    step,
                    bytes,
                    held,
                    contexts,
                    held_on,
                    ..
                } => {
                    context_positions = contexts
                        .iter()
                        .filter_map(|(o, uuid)| {
                            devices
                                .iter()
                                .position(|d| &d.uuid == uuid)
                                .map(|p| (*o, p))
                        })
                        .collect();
                    if ident.nvml.is_none() {
                        let positions: Vec<usize> =
                            context_positions.iter().map(|(_, p)| *p).collect();
                        ident.resolve(monitor, &positions, devices);
                        if let Some(pid) = ident.nvml {
                            markers.push(Marker {
                                t_ms: ms(t0),
                                kind: "worker".into(),
                                label: format!(
                                    "NVML lists the worker as PID {pid} (found by {})",
                                    ident.how.as_deref().unwrap_or("its PID")
                                ),
                                device: None,
                            });
                        }
                    }
                    let (used, mine) = snapshot(monitor, devices, ident.nvml);
                    let t = at;
                    // Lockstep: the worker waits for our acknowledgement after `end`, so this
                    // reading is the state when the step ended, if the worker still lives.
                    if w.alive() {
                        recorder.point(t, used.clone());
                    }
                    if let Some(r) = records.iter_mut().rev().find(|r| r.index == step) {
                        r.end_ms = Some(t);
                        r.status = "ok".into();
                        r.bytes = bytes;
                        r.used_after = used;
                        r.worker_after = mine.clone();
                        r.held_after = held;
                    }
                    prev_mine = mine;
                    // The footprint in device fractions: each device's share of its total.
                    let share: Option<f64> = held_on
                        .iter()
                        .map(|(o, b)| {
                            let pos = context_positions
                                .iter()
                                .find(|(co, _)| co == o)
                                .map(|(_, p)| *p)
                                .or_else(|| ordinals.get(*o as usize).map(|p| *p as usize))?;
                            let total = devices.get(pos)?.memory.total;
                            (total > 0).then(|| *b as f64 / total as f64)
                        })
                        .sum();
                    if let (Some(share), Some(s)) = (share, plan.steps.get(step)) {
                        held_share.insert(s.id.clone(), share);
                    }
                    w.ack();
                }
                WorkerEvent::Failed {
                    step,
                    kind,
                    message,
                } => {
                    if kind == "environment" {
                        w.finish(Duration::from_millis(500));
                        drop(recorder);
                        for n in neighbours {
                            n.finish(Duration::from_millis(500));
                        }
                        return Err(ReplayError::WorkerEnvironment(message));
                    }
                    let (used, mine) = snapshot(monitor, devices, ident.nvml);
                    recorder.point(ms(t0), used.clone());
                    let t = at;
                    let label = plan
                        .steps
                        .get(step)
                        .map(|s| s.id.clone())
                        .unwrap_or_default();
                    if let Some(r) = records.iter_mut().rev().find(|r| r.index == step) {
                        r.end_ms = Some(t);
                        r.status = kind.clone();
                        r.used_after = used;
                        r.worker_after = if mine.iter().any(|m| *m > 0) {
                            mine
                        } else {
                            prev_mine.clone()
                        };
                    }
                    let marker_kind = if kind == "out-of-memory" {
                        "oom"
                    } else {
                        "error"
                    };
                    error = Some(step_failure(
                        &mut markers,
                        marker_kind,
                        StepError {
                            step,
                            step_label: label,
                            kind,
                            message,
                            t_ms: t,
                        },
                    ));
                }
                WorkerEvent::Done => completed = true,
                WorkerEvent::Ready => {}
            }
        }
        let status = w.child.wait();
        let t = ms(t0);
        if error.is_none() && !completed {
            let (kind, message) = if interrupted {
                (
                    "interrupted".to_string(),
                    "stopped by Ctrl-C; results are partial".to_string(),
                )
            } else if timed_out {
                (
                    "timeout".to_string(),
                    format!(
                        "no answer from the worker for {:?} (--step-timeout); it was killed",
                        opts.step_timeout
                    ),
                )
            } else {
                match status
                    .as_ref()
                    .ok()
                    .and_then(std::os::unix::process::ExitStatusExt::signal)
                {
                    Some(sig) => (
                        "killed".to_string(),
                        format!("worker killed by signal {sig}"),
                    ),
                    None => (
                        "error".to_string(),
                        format!(
                            "worker exited ({}) without finishing: {}",
                            status.as_ref().map(|s| s.to_string()).unwrap_or_default(),
                            w.stderr_tail()
                        ),
                    ),
                }
            };
            let running = records.iter_mut().rev().find(|r| r.status == "running");
            let (step, label) = match running {
                Some(r) => {
                    r.status = kind.clone();
                    r.end_ms = Some(t);
                    (r.index, r.id.clone())
                }
                // Between steps (its last step ended and was acknowledged): the step it was
                // about to run; before any step: its start.
                None => match plan
                    .steps
                    .get(records.len())
                    .filter(|_| !records.is_empty())
                {
                    Some(next) => (records.len(), next.id.clone()),
                    None => (records.len(), "worker start".to_string()),
                },
            };
            let marker_kind = kind.clone();
            error = Some(step_failure(
                &mut markers,
                &marker_kind,
                StepError {
                    step,
                    step_label: label,
                    kind,
                    message,
                    t_ms: t,
                },
            ));
        }
        w.finish(Duration::from_millis(200));
    }

    // One last reading after the worker is gone.
    let (used_end, _) = snapshot(monitor, devices, None);
    let t_end = ms(t0);
    recorder.point(t_end, used_end);
    markers.push(Marker {
        t_ms: t_end,
        kind: "end".into(),
        label: "worker gone".into(),
        device: None,
    });
    // Timeline: the recorder's series with the step-boundary readings merged in.
    let recorded = recorder.finish();
    for n in neighbours {
        n.finish(Duration::from_millis(500));
    }
    let series = recorded.timeline.devices;
    let samples = crate::sampler::Samples {
        processes: recorded.timeline.processes,
        gaps: recorded.timeline.gaps,
        ..Default::default()
    };
    let peaks: Vec<DevicePeak> = recorded.peaks;
    // Peak per step: samples from its start to its end.
    for r in records.iter_mut() {
        let end = r.end_ms.unwrap_or(f64::INFINITY);
        r.peak_used = series
            .iter()
            .map(|s| {
                s.samples
                    .iter()
                    .filter(|(t, _)| *t >= r.start_ms && *t <= end)
                    .map(|(_, u)| *u)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
    }

    // The worker's own usage per device: the most it held in any reading.
    let mut worker_max = vec![0u64; devices.len()];
    for r in &records {
        for (i, v) in r.worker_after.iter().enumerate() {
            worker_max[i] = worker_max[i].max(*v);
        }
    }
    if let Some(pid) = ident.nvml {
        for p in samples.processes.iter().filter(|p| p.pid == pid) {
            if let Some(i) = devices.iter().position(|d| d.index == p.device) {
                worker_max[i] = worker_max[i].max(p.used.unwrap_or(0));
            }
        }
    }
    // Context cost per device: the worker's growth across its `context` steps.
    let mut context_cost: Vec<Option<u64>> = vec![None; devices.len()];
    let mut prev = vec![0u64; devices.len()];
    for r in &records {
        if r.worker_after.len() == devices.len() {
            if r.op == "context" && r.status == "ok" {
                if let Op::Context { device } = &plan.steps[r.index].op {
                    // The device the worker itself named by UUID; else the pinned view.
                    let by_uuid = context_positions
                        .iter()
                        .find(|(o, _)| o == device)
                        .map(|(_, p)| *p);
                    let pos =
                        by_uuid.or_else(|| ordinals.get(*device as usize).map(|p| *p as usize));
                    if let Some(p) = pos {
                        let delta = r.worker_after[p].saturating_sub(prev[p]);
                        if delta > 0 && context_cost[p].is_none() {
                            context_cost[p] = Some(delta);
                        }
                    }
                }
            }
            prev.clone_from(&r.worker_after);
        }
    }

    let facts = checks::Facts {
        plan_ids: plan.steps.iter().map(|s| s.id.clone()).collect(),
        records: &records,
        error: error.as_ref(),
        completed,
        totals,
        baseline,
        context_cost,
        worker_max,
        peaks: peaks.iter().map(|p| p.peak_used).collect(),
        needed: scn.devices,
        smallest,
        held_share,
    };
    let results: Vec<_> = variant
        .expect
        .iter()
        .map(|e| checks::evaluate(e, &facts))
        .collect();
    let all_passed = results.iter().all(|c| c.passed);
    let verdict = match (all_passed && !interrupted, variant.kind) {
        (true, VariantKind::Bug) => Verdict::Reproduced,
        (true, VariantKind::Fix) => Verdict::Fixed,
        (false, _) => Verdict::Unexpected,
    };
    let reason = if interrupted {
        Some("interrupted (Ctrl-C): partial results".to_string())
    } else if let Some(e) = error.as_ref().filter(|e| e.kind != "out-of-memory") {
        Some(format!("{} at {}: {}", e.kind, e.step_label, e.message))
    } else if !all_passed {
        results
            .iter()
            .find(|c| !c.passed)
            .map(|c| format!("expected {}: {}", c.expectation, c.detail))
    } else {
        None
    };
    let mut run = VariantRun {
        scenario: scn.id.clone(),
        variant: variant.name.clone(),
        source: scn.source.clone(),
        verdict,
        reason,
        checks: results,
        worker_pid,
        error,
        peaks,
        timeline: Timeline {
            devices: series,
            markers,
            processes: samples.processes,
            gaps: samples.gaps,
        },
        duration_ms: started.elapsed().as_millis() as u64,
        steps: records,
    };
    // The engine reads physical indices and the worker's real CUDA_VISIBLE_DEVICES (its
    // devices pinned by UUID), not positions among the usable devices.
    let physical: Vec<u32> = ordinals
        .iter()
        .filter_map(|p| devices.get(*p as usize).map(|d| d.index))
        .collect();
    apply_fingerprint(scn, variant, &mut run, devices, Some(&pinned), &physical);
    observer.variant_finished(&run);
    Ok(run)
}

/// The scenario's fingerprint, checked on the finished variant by the timeline engine
/// (see [`fingerprint`]): one more check; a failing one makes the verdict `unexpected`.
fn apply_fingerprint(
    scn: &Scenario,
    variant: &Variant,
    run: &mut VariantRun,
    devices: &[DeviceInfo],
    visible: Option<&str>,
    ordinals: &[u32],
) {
    if scn.fingerprint.is_none() || run.verdict == Verdict::Skipped {
        return;
    }
    let rec = fingerprint::recording(
        run,
        devices,
        visible,
        ordinals,
        &fingerprint::release_steps(scn),
    );
    let Some((check, _findings)) = fingerprint::check(scn, variant.kind, &rec) else {
        return;
    };
    if !check.passed && run.verdict != Verdict::Unexpected {
        run.verdict = Verdict::Unexpected;
        if run.reason.is_none() {
            run.reason = Some(format!("expected {}: {}", check.expectation, check.detail));
        }
    }
    run.checks.push(check);
}

/// Record a failed step: a timeline marker of `marker_kind` labelled with the step and the
/// message, and the error itself (returned).
fn step_failure(markers: &mut Vec<Marker>, marker_kind: &str, e: StepError) -> StepError {
    markers.push(Marker {
        t_ms: e.t_ms,
        kind: marker_kind.to_string(),
        label: format!("{}: {}", e.step_label, e.message),
        device: None,
    });
    e
}
