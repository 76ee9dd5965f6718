//! One variant, driven: the worker's events turned into step records, markers, boundary
//! readings and the typed failure, all fed to the [`Recorder`]. The worker only feeds
//! events; what was expected of it is judged afterwards ([`super::outcome`]).

use super::child::WorkerChild;
use super::clock::ms;
use super::identity::WorkerIdentity;
use super::neighbours::Neighbours;
use super::protocol::{Timed, WorkerEvent, WorkerInput};
use super::{Observer, ReplayError, ReplayOptions};
use crate::gpu::DeviceInfo;
use crate::job::process::Exit;
use crate::model::{Marker, MarkerKind, StepError, StepErrorKind, StepRecord, StepStatus};
use crate::record::{ErrorKind, Recorder};
use crate::scenario::{Scenario, VariantPlan as Plan};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// How the scenario's devices map onto this machine's.
pub(super) struct View {
    /// Position in `devices` of each CUDA ordinal the worker sees.
    pub(super) ordinals: Vec<u32>,
    /// The worker's `CUDA_VISIBLE_DEVICES`: its devices pinned by UUID.
    pub(super) pinned: String,
    /// Physical index of each CUDA ordinal the worker sees.
    pub(super) physical: Vec<u32>,
    /// What named fractions of `[sizes]` refer to: the smallest total among the devices
    /// the worker sees as its ordinals 0..scn.devices (docs/scenarios.md, "Sizes").
    pub(super) smallest: u64,
}

impl View {
    pub(super) fn new(scn: &Scenario, plan: &Plan, devices: &[DeviceInfo]) -> View {
        // `devices` already reflect the parent's CUDA_VISIBLE_DEVICES (the command selects
        // them); the scenario's own value indexes them.
        let visible = plan.env.get("CUDA_VISIBLE_DEVICES").cloned();
        let (ordinals, pinned) = super::pin_by_uuid(visible.as_deref(), devices);
        let smallest = ordinals
            .iter()
            .take(scn.devices.max(1) as usize)
            .filter_map(|p| devices.get(*p as usize))
            .map(|d| d.memory.total)
            .min()
            .unwrap_or(0);
        let physical = ordinals
            .iter()
            .filter_map(|p| devices.get(*p as usize).map(|d| d.index))
            .collect();
        View {
            ordinals,
            pinned,
            physical,
            smallest,
        }
    }

    /// Where the worker works: the first devices it sees, as many as the scenario needs
    /// (their process lists are read; slow, a driver lock).
    pub(super) fn worker_devices(&self, scn: &Scenario) -> Vec<u32> {
        self.physical
            .iter()
            .take(scn.devices.max(1) as usize)
            .copied()
            .collect()
    }
}

/// The typed failure of a variant: what the rules read, never parsed out of its message.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: ErrorKind,
    /// Physical device (the worker's ordinal mapped), when the error names one.
    pub device: Option<u32>,
    pub requested: Option<u64>,
}

/// What the worker did, once it is gone.
pub(super) struct Outcome {
    /// Every device's memory before the worker started.
    pub(super) baseline: Vec<u64>,
    pub(super) records: Vec<StepRecord>,
    pub(super) error: Option<StepError>,
    pub(super) failure: Option<Failure>,
    pub(super) completed: bool,
    pub(super) interrupted: bool,
    pub(super) worker_pid: Option<u32>,
    pub(super) ident: WorkerIdentity,
    pub(super) held_share: BTreeMap<String, f64>,
    pub(super) context_positions: Vec<(u32, usize)>,
}

/// The worker's run of the plan, as the monitor saw it.
pub(super) struct WorkerRun<'a> {
    plan: &'a Plan,
    devices: &'a [DeviceInfo],
    view: &'a View,
    recorder: &'a Recorder,
    t0: Instant,
    t0_mono: u64,
    baseline: Vec<u64>,
    pub(super) records: Vec<StepRecord>,
    pub(super) error: Option<StepError>,
    pub(super) failure: Option<Failure>,
    pub(super) completed: bool,
    pub(super) interrupted: bool,
    timed_out: bool,
    pub(super) worker_pid: Option<u32>,
    pub(super) ident: WorkerIdentity,
    /// The worker's footprint after a step (by step id) in device fractions.
    pub(super) held_share: BTreeMap<String, f64>,
    /// Positions of the devices the worker reported contexts on (by UUID).
    pub(super) context_positions: Vec<(u32, usize)>,
    prev_mine: Vec<u64>,
    /// The last successful reading of each device (a failed one keeps the one before).
    last_used: Vec<u64>,
}

impl<'a> WorkerRun<'a> {
    pub(super) fn new(
        plan: &'a Plan,
        devices: &'a [DeviceInfo],
        view: &'a View,
        recorder: &'a Recorder,
        t0: Instant,
        t0_mono: u64,
    ) -> WorkerRun<'a> {
        let first = recorder.memory_now_at();
        let baseline: Vec<u64> = first.used().iter().map(|u| u.unwrap_or(0)).collect();
        recorder.keep(&first);
        WorkerRun {
            last_used: baseline.clone(),
            plan,
            devices,
            view,
            recorder,
            t0,
            t0_mono,
            baseline,
            records: Vec::new(),
            error: None,
            failure: None,
            completed: false,
            interrupted: false,
            timed_out: false,
            worker_pid: None,
            ident: WorkerIdentity::default(),
            held_share: BTreeMap::new(),
            context_positions: Vec::new(),
            prev_mine: vec![0; devices.len()],
        }
    }

    /// A reading as bytes per device: a device whose query failed keeps its last known level.
    fn known(&mut self, reading: &[Option<u64>]) -> Vec<u64> {
        for (last, r) in self.last_used.iter_mut().zip(reading) {
            if let Some(u) = r {
                *last = *u;
            }
        }
        self.last_used.clone()
    }

    /// What it did.
    pub(super) fn into_outcome(self) -> Outcome {
        Outcome {
            baseline: self.baseline,
            records: self.records,
            error: self.error,
            failure: self.failure,
            completed: self.completed,
            interrupted: self.interrupted,
            worker_pid: self.worker_pid,
            ident: self.ident,
            held_share: self.held_share,
            context_positions: self.context_positions,
        }
    }

    /// A failure before the worker ran (a neighbour could not hold its memory).
    pub(super) fn fail_before_start(&mut self, reason: String) {
        self.error = Some(StepError {
            step: 0,
            step_label: "neighbours".into(),
            kind: StepErrorKind::Error,
            message: reason,
            t_ms: ms(self.t0),
        });
        self.failure = Some(Failure {
            kind: ErrorKind::Other,
            device: None,
            requested: None,
        });
    }

    /// Start the worker on the plan and follow it to its end.
    /// Neighbours with a `from` or `until` start and stop between two lockstep steps.
    pub(super) fn drive(
        &mut self,
        opts: &ReplayOptions,
        env: &[(String, Option<String>)],
        (scn, neighbours): (&Scenario, &mut Neighbours),
        observer: &mut dyn Observer,
    ) -> Result<(), ReplayError> {
        let input = WorkerInput {
            steps: self.plan.steps.clone(),
            lockstep: true,
            hold: false,
            smallest_total: self.view.smallest,
        };
        let host_ns = opts.pid_namespace.host;
        // Outside the host PID namespace the worker may have to be recognised as the one new
        // process in NVML's lists: note who is there before it starts (slow lists, read only
        // when needed).
        if !host_ns {
            for d in self.devices {
                if let Ok(list) = self.recorder.monitor().processes(d.index) {
                    self.ident.before.extend(list.iter().map(|p| p.pid));
                }
            }
        }
        let mut w = WorkerChild::spawn(opts, env, &input, "the worker")?;
        self.worker_pid = Some(w.pid());
        if host_ns {
            self.ident.nvml = self.worker_pid;
        }
        observer.worker_started(w.pid());
        self.recorder.marker(Marker {
            t_ms: ms(self.t0),
            kind: MarkerKind::Worker,
            label: format!("worker pid {} started", w.pid()),
            device: None,
        });
        let mut last_progress = Instant::now();
        loop {
            if opts.interrupted.load(Ordering::SeqCst) {
                self.interrupted = true;
                w.kill();
                break;
            }
            let (ev, sent) = match w.events.recv_timeout(Duration::from_millis(20)) {
                Ok(Ok(Timed { ev, mono_ns })) => (ev, mono_ns),
                Ok(Err(_unparsed)) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    if last_progress.elapsed() >= opts.step_timeout {
                        self.timed_out = true;
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
            let now = ms(self.t0);
            let at = sent
                .and_then(|n| n.checked_sub(self.t0_mono))
                .map_or(now, |n| (n as f64 / 1e6).min(now));
            match ev {
                WorkerEvent::Hello { pid, nspid, .. } => {
                    self.worker_pid = Some(pid);
                    if self.ident.nvml.is_none() && nspid.len() > 1 {
                        self.ident.nvml = nspid.first().copied();
                        self.ident.how = Some("its NSpid in /proc".into());
                    }
                }
                WorkerEvent::Start { step } => self.on_start(&mut w, step, at, observer),
                WorkerEvent::End {
                    step,
                    bytes,
                    held,
                    contexts,
                    held_on,
                    ..
                } => {
                    self.on_end(&mut w, step, at, bytes, held, &contexts, &held_on);
                    let rec = self.recorder;
                    let staged =
                        neighbours.between(step, scn, self.devices, opts, &mut |m| rec.marker(m));
                    if let Err(e) = staged {
                        w.finish(Duration::from_millis(500));
                        return Err(e);
                    }
                    w.ack();
                }
                WorkerEvent::Failed {
                    step,
                    kind,
                    message,
                    device,
                    requested,
                } => {
                    if kind == StepErrorKind::Environment {
                        w.finish(Duration::from_millis(500));
                        return Err(ReplayError::WorkerEnvironment(message));
                    }
                    self.on_failed(step, at, kind, message, device, requested);
                }
                WorkerEvent::Done => self.completed = true,
                WorkerEvent::Ready => {}
            }
        }
        let exit = w.child.wait().map(Exit::from);
        if self.error.is_none() && !self.completed {
            let message = w.stderr_tail();
            self.on_gone(exit, opts.step_timeout, message);
        }
        w.finish(Duration::from_millis(200));
        Ok(())
    }

    fn on_start(&mut self, w: &mut WorkerChild, step: usize, at: f64, obs: &mut dyn Observer) {
        let Some(s) = self.plan.steps.get(step) else {
            return;
        };
        // A reading at every step boundary: short steps show on the chart. Events can be
        // handled after the worker died (a fast OOM): a reading taken then shows its memory
        // already returned, so it counts only if the worker is still alive after it was
        // taken. Each device's value is stamped when its call ran: the step's action races
        // with it, and a reading from before the action stamped after the action's end would
        // undo the step.
        let reading = self.recorder.memory_now_at();
        if w.alive() {
            self.recorder.keep(&reading);
        }
        obs.step_started(step, &s.label);
        self.recorder.marker(Marker {
            t_ms: at,
            kind: MarkerKind::Step,
            label: format!("{}: {}", s.id, s.label),
            device: None,
        });
        self.records.push(StepRecord {
            index: step,
            id: s.id.clone(),
            label: s.label.clone(),
            op: s.op.name().into(),
            start_ms: at,
            end_ms: None,
            status: StepStatus::Running,
            bytes: None,
            used_after: Vec::new(),
            worker_after: Vec::new(),
            held_after: 0,
            peak_used: Vec::new(),
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn on_end(
        &mut self,
        w: &mut WorkerChild,
        step: usize,
        at: f64,
        bytes: Option<u64>,
        held: u64,
        contexts: &[(u32, String)],
        held_on: &[(u32, u64)],
    ) {
        self.context_positions = contexts
            .iter()
            .filter_map(|(o, uuid)| {
                self.devices
                    .iter()
                    .position(|d| &d.uuid == uuid)
                    .map(|p| (*o, p))
            })
            .collect();
        self.find_worker_in_nvml();
        let reading = self.recorder.memory_now();
        let mine = self.recorder.usage_of(self.ident.nvml);
        // Lockstep: the worker waits for our acknowledgement after `end`, so this reading
        // is the state when the step ended, if the worker still lives.
        if w.alive() {
            self.recorder.point(at, reading.clone());
        }
        let used = self.known(&reading);
        if let Some(r) = self.records.iter_mut().rev().find(|r| r.index == step) {
            r.end_ms = Some(at);
            r.status = StepStatus::Ok;
            r.bytes = bytes;
            r.used_after = used;
            r.worker_after = mine.clone();
            r.held_after = held;
        }
        self.prev_mine = mine;
        // The footprint in device fractions: each device's share of its total.
        let share: Option<f64> = held_on
            .iter()
            .map(|(o, b)| {
                let pos = self
                    .context_positions
                    .iter()
                    .find(|(co, _)| co == o)
                    .map(|(_, p)| *p)
                    .or_else(|| self.view.ordinals.get(*o as usize).map(|p| *p as usize))?;
                let total = self.devices.get(pos)?.memory.total;
                (total > 0).then(|| *b as f64 / total as f64)
            })
            .sum();
        if let (Some(share), Some(s)) = (share, self.plan.steps.get(step)) {
            self.held_share.insert(s.id.clone(), share);
        }
    }

    /// Outside the host PID namespace: find the worker in NVML's lists once it has contexts.
    fn find_worker_in_nvml(&mut self) {
        if self.ident.nvml.is_some() {
            return;
        }
        let positions: Vec<usize> = self.context_positions.iter().map(|(_, p)| *p).collect();
        self.ident
            .resolve(self.recorder.monitor(), &positions, self.devices);
        if let Some(pid) = self.ident.nvml {
            self.recorder.marker(Marker {
                t_ms: ms(self.t0),
                kind: MarkerKind::Worker,
                label: format!(
                    "NVML lists the worker as PID {pid} (found by {})",
                    self.ident.how.as_deref().unwrap_or("its PID")
                ),
                device: None,
            });
        }
    }

    fn on_failed(
        &mut self,
        step: usize,
        at: f64,
        kind: StepErrorKind,
        message: String,
        device: Option<u32>,
        requested: Option<u64>,
    ) {
        let taken = self.recorder.memory_now_at();
        let mine = self.recorder.usage_of(self.ident.nvml);
        self.recorder.keep(&taken);
        let used = self.known(&taken.used());
        let label = self
            .plan
            .steps
            .get(step)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        if let Some(r) = self.records.iter_mut().rev().find(|r| r.index == step) {
            r.end_ms = Some(at);
            r.status = StepStatus::Failed(kind.clone());
            r.used_after = used;
            r.worker_after = if mine.iter().any(|m| *m > 0) {
                mine
            } else {
                self.prev_mine.clone()
            };
        }
        let marker = if kind == StepErrorKind::OutOfMemory {
            MarkerKind::Oom
        } else {
            MarkerKind::Error
        };
        self.failure = Some(Failure {
            kind: match kind {
                StepErrorKind::OutOfMemory => ErrorKind::OutOfMemory,
                StepErrorKind::DeviceLost => ErrorKind::DriverError,
                _ => ErrorKind::Other,
            },
            device: device.and_then(|o| self.view.physical.get(o as usize).copied()),
            requested,
        });
        self.step_failure(
            marker,
            StepError {
                step,
                step_label: label,
                kind,
                message,
                t_ms: at,
            },
        );
    }

    /// The worker ended without finishing and without saying why: interrupted, timed out,
    /// killed, or exited.
    fn on_gone(&mut self, exit: std::io::Result<Exit>, step_timeout: Duration, stderr: String) {
        let t = ms(self.t0);
        let (kind, message, failure) = if self.interrupted {
            (
                StepErrorKind::Interrupted,
                "stopped by Ctrl-C; results are partial".to_string(),
                None,
            )
        } else if self.timed_out {
            (
                StepErrorKind::Timeout,
                format!("no answer from the worker for {step_timeout:?} (--step-timeout); it was killed"),
                Some(ErrorKind::Other),
            )
        } else {
            match exit {
                Ok(Exit::Signal(sig)) => (
                    StepErrorKind::Killed,
                    format!("worker killed by signal {sig}"),
                    Some(ErrorKind::KilledBySignal { signal: sig }),
                ),
                other => (
                    StepErrorKind::Error,
                    format!(
                        "worker exited ({}) without finishing: {stderr}",
                        match other {
                            Ok(Exit::Code(c)) => format!("exit status: {c}"),
                            _ => String::new(),
                        }
                    ),
                    Some(ErrorKind::Other),
                ),
            }
        };
        let running = self
            .records
            .iter_mut()
            .rev()
            .find(|r| r.status == StepStatus::Running);
        let (step, label) = match running {
            Some(r) => {
                r.status = StepStatus::Failed(kind.clone());
                r.end_ms = Some(t);
                (r.index, r.id.clone())
            }
            // Between steps (its last step ended and was acknowledged): the step it was
            // about to run; before any step: its start.
            None => match self
                .plan
                .steps
                .get(self.records.len())
                .filter(|_| !self.records.is_empty())
            {
                Some(next) => (self.records.len(), next.id.clone()),
                None => (self.records.len(), "worker start".to_string()),
            },
        };
        self.failure = failure.map(|kind| Failure {
            kind,
            device: None,
            requested: None,
        });
        let marker = MarkerKind::from(kind.as_str());
        self.step_failure(
            marker,
            StepError {
                step,
                step_label: label,
                kind,
                message,
                t_ms: t,
            },
        );
    }

    /// Record a failed step: a timeline marker labelled with the step and the message, and
    /// the error itself.
    fn step_failure(&mut self, marker: MarkerKind, e: StepError) {
        self.recorder.marker(Marker {
            t_ms: e.t_ms,
            kind: marker,
            label: format!("{}: {}", e.step_label, e.message),
            device: None,
        });
        self.error = Some(e);
    }
}
