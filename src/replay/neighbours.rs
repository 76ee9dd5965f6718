//! The scenario's neighbour processes: each a `vramdoc __worker` holding one allocation on
//! its device, started before the worker, or just before the step its `from` names and
//! stopped just after the step its `until` names (a recorded neighbour that came and went,
//! docs/scenarios.md), between two lockstep steps of the worker.

use super::child::WorkerChild;
use super::clock::ms;
use super::protocol::{Timed, WorkerEvent, WorkerInput};
use super::{ReplayError, ReplayOptions};
use crate::gpu::DeviceInfo;
use crate::model::{Marker, MarkerKind, StepErrorKind};
use crate::scenario::{Op, Scenario, Step, VariantPlan as Plan};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// The scenario's neighbours: those running, and when the others start and stop.
pub(super) struct Neighbours {
    /// Running ones, by their index in the scenario.
    children: Vec<(usize, WorkerChild)>,
    /// When each started or stopped holding its memory.
    pub(super) markers: Vec<Marker>,
    /// Why one could not hold its memory before the worker started (the variant does not
    /// run).
    pub(super) failure: Option<String>,
    /// Neighbours to start just before plan step k, and to stop just after it.
    starts: BTreeMap<usize, Vec<usize>>,
    stops: BTreeMap<usize, Vec<usize>>,
    smallest: u64,
    t0: Instant,
}

impl Neighbours {
    /// Release every running one's memory and reap them.
    pub(super) fn finish(self) {
        for (_, n) in self.children {
            n.finish(Duration::from_millis(500));
        }
    }

    /// Between plan step `step` (ended) and the next: stop those whose `until` it was, start
    /// those whose `from` the next is. Markers for each go to `marker`. A neighbour that
    /// cannot hold its memory now is a marker, not a failure: the worker goes on.
    pub(super) fn between(
        &mut self,
        step: usize,
        scn: &Scenario,
        devices: &[DeviceInfo],
        opts: &ReplayOptions,
        marker: &mut dyn FnMut(Marker),
    ) -> Result<(), ReplayError> {
        for i in self.stops.remove(&step).unwrap_or_default() {
            if let Some(k) = self.children.iter().position(|(j, _)| *j == i) {
                let (_, child) = self.children.remove(k);
                // Closing stdin ends its hold; reaped before the next step, so the driver
                // has freed its memory (a dead process holds none) whatever the load.
                child.finish(Duration::from_millis(500));
                if let Some(n) = scn.neighbours.get(i) {
                    marker(Marker {
                        t_ms: ms(self.t0),
                        kind: MarkerKind::Neighbour,
                        label: format!("{} stopped", n.label),
                        device: Some(n.device),
                    });
                }
            }
        }
        for i in self.starts.remove(&(step + 1)).unwrap_or_default() {
            let (child, m, failure) = start_one(scn, i, devices, self.smallest, opts, self.t0)?;
            self.children.push((i, child));
            marker(match failure {
                Some(why) => Marker { label: why, ..m },
                None => m,
            });
        }
        Ok(())
    }
}

/// Position in the scenario's steps of each plan step.
fn plan_positions(scn: &Scenario, plan: &Plan) -> Vec<usize> {
    let pos: BTreeMap<&str, usize> = scn
        .steps
        .iter()
        .enumerate()
        .map(|(k, s)| (s.id.as_str(), k))
        .collect();
    plan.steps
        .iter()
        .map(|s| pos.get(s.id.as_str()).copied().unwrap_or(usize::MAX))
        .collect()
}

/// Start the neighbours that hold memory from before the worker; schedule the others:
/// started before the first plan step at or after `from`, stopped after the last plan step
/// at or before `until` (a variant that skips the named step moves it to the next one).
pub(super) fn start_neighbours(
    scn: &Scenario,
    plan: &Plan,
    devices: &[DeviceInfo],
    smallest: u64,
    opts: &ReplayOptions,
    t0: Instant,
) -> Result<Neighbours, ReplayError> {
    let at = plan_positions(scn, plan);
    let pos = |id: &str| scn.steps.iter().position(|s| s.id == id);
    let mut out = Neighbours {
        children: Vec::new(),
        markers: Vec::new(),
        failure: None,
        starts: BTreeMap::new(),
        stops: BTreeMap::new(),
        smallest,
        t0,
    };
    for (i, n) in scn.neighbours.iter().enumerate() {
        let start = match n.from.as_deref().map(pos) {
            None => Some(0),
            Some(None) => None,
            Some(Some(f)) => at.iter().position(|p| *p >= f && *p != usize::MAX),
        };
        let Some(start) = start else { continue };
        if let Some(u) = n.until.as_deref().and_then(pos) {
            if let Some(k) = at.iter().rposition(|p| *p <= u) {
                out.stops.entry(k).or_default().push(i);
            }
        }
        if start > 0 {
            out.starts.entry(start).or_default().push(i);
            continue;
        }
        let (child, marker, failure) = start_one(scn, i, devices, smallest, opts, t0)?;
        out.children.push((i, child));
        out.markers.push(marker);
        if failure.is_some() {
            out.failure = failure;
            return Ok(out);
        }
    }
    Ok(out)
}

/// Start neighbour `i` and wait until it holds its memory: the child, its marker, and why
/// it could not hold it, if it could not.
fn start_one(
    scn: &Scenario,
    i: usize,
    devices: &[DeviceInfo],
    smallest: u64,
    opts: &ReplayOptions,
    t0: Instant,
) -> Result<(WorkerChild, Marker, Option<String>), ReplayError> {
    let n = &scn.neighbours[i];
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
    let p = WorkerChild::spawn(opts, &env, &input, "a neighbour process")?;
    let failure = wait_ready(&p, opts, &n.label)?;
    let marker = Marker {
        t_ms: ms(t0),
        kind: MarkerKind::Neighbour,
        label: format!("{} holds {}", n.label, n.size.describe()),
        device: Some(n.device),
    };
    Ok((p, marker, failure))
}

/// Wait for a neighbour's `ready`; why it failed, if it did.
fn wait_ready(
    p: &WorkerChild,
    opts: &ReplayOptions,
    label: &str,
) -> Result<Option<String>, ReplayError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match p.events.recv_timeout(Duration::from_millis(50)) {
            Ok(Ok(Timed {
                ev: WorkerEvent::Ready,
                ..
            })) => return Ok(None),
            Ok(Ok(Timed {
                ev: WorkerEvent::Failed { kind, message, .. },
                ..
            })) => {
                if kind == StepErrorKind::Environment {
                    return Err(ReplayError::WorkerEnvironment(message));
                }
                return Ok(Some(format!(
                    "{label} could not hold its memory: {message}"
                )));
            }
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout)
                if Instant::now() < deadline && !opts.interrupted.load(Ordering::SeqCst) => {}
            Err(_) => return Ok(Some(format!("{label} did not start: {}", p.stderr_tail()))),
        }
    }
}
