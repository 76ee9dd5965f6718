//! What-if's scheduling: a scenario's `bug` variant replayed on each of several fresh
//! private boxes, in this process, as many boxes at once as asked. Each box is a value (a
//! `replay::PrivateBox`) handed to the replay engine, never a process-wide variable; its
//! workers are the engine's own children, stopped and reaped when a signal sets
//! [`Plan::interrupted`] (and killed by the kernel if vramdoc dies), and its directory is
//! removed when the row is done, after its workers.
//! Each finished replay becomes a row ([`BoxOutcome::from_report`]).

use crate::backend::{self, BoxSpec};
use crate::model::{Body, BoxOutcome, ReplayResult, Report};
use crate::record::sampler::{SamplerConfig, DEFAULT_PROCESS_PERIOD};
use crate::replay::batch::{run_batch, Batch};
use crate::replay::{Quiet, ReplayOptions, DEFAULT_STEP_TIMEOUT};
use crate::scenario::Scenario;
use crate::session::PrivateBox;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Memory sampling period of each replay (`vramdoc replay`'s default `--period`).
const PERIOD: Duration = Duration::from_millis(5);

/// What to replay where.
pub struct Plan {
    /// Has a `bug` variant (checked by the caller).
    pub scenario: Scenario,
    pub specs: Vec<BoxSpec>,
    /// Boxes replayed at once (at least 1).
    pub jobs: usize,
    /// The vramdoc binary (the replay's workers are `vramdoc __worker`).
    pub exe: PathBuf,
    /// Set by a signal: each running replay stops its workers, no further box starts.
    pub interrupted: Arc<AtomicBool>,
}

/// Replay the bug variant on one fresh box of `spec`.
fn one_box(plan: &Plan, spec: &BoxSpec) -> BoxOutcome {
    let failed = |why: String| BoxOutcome::failed(spec.as_str(), &why);
    let private = match PrivateBox::create(spec) {
        Ok(b) => b,
        Err(e) => return failed(e.to_string()),
    };
    let backend = private.backend();
    let monitor = match backend::open_monitor(&backend) {
        Ok(m) => m,
        Err(e) => return failed(e.to_string()),
    };
    let batch = Batch {
        scenarios: vec![plan.scenario.clone()],
        variant: Some("bug".into()),
        // A fresh box of its own: nothing else can be on it.
        force: true,
        cuda_visible: None,
    };
    let opts = ReplayOptions {
        backend: backend.clone(),
        sampler: SamplerConfig {
            period: PERIOD,
            process_period: Some(DEFAULT_PROCESS_PERIOD.max(PERIOD)),
        },
        exe: plan.exe.clone(),
        interrupted: plan.interrupted.clone(),
        step_timeout: DEFAULT_STEP_TIMEOUT,
        // Once per box; a VRAMDOC_PIDNS that says neither counts as the host, as before.
        pid_namespace: crate::inventory::detect_pid_namespace().unwrap_or_else(|e| {
            crate::model::PidNamespace {
                host: true,
                reason: e.to_string(),
            }
        }),
    };
    let sim_spec = backend.sim_spec();
    let done = run_batch(
        monitor.as_ref(),
        sim_spec,
        &batch,
        &opts,
        &mut Quiet,
        &mut |_| {},
    );
    match done {
        Ok(done) => match done.fatal {
            Some(e) => failed(format!("the replay stopped: {e}")),
            None => {
                let body = Body::Replay(ReplayResult {
                    period_us: PERIOD.as_micros() as u64,
                    runs: done.runs,
                });
                BoxOutcome::from_report(spec.as_str(), &Report::new(done.environment, body))
            }
        },
        Err(e) => failed(e.to_string()),
    }
}

/// Every box of `plan`, `plan.jobs` at a time; `done` is told of each row as it finishes.
/// Rows come back in the order of `plan.specs`.
pub fn replay_on_boxes(plan: &Plan, done: &(dyn Fn(&BoxOutcome) + Sync)) -> Vec<BoxOutcome> {
    let queue: Mutex<VecDeque<(usize, &BoxSpec)>> =
        Mutex::new(plan.specs.iter().enumerate().collect());
    let results: Mutex<Vec<Option<BoxOutcome>>> = Mutex::new(vec![None; plan.specs.len()]);
    std::thread::scope(|s| {
        for _ in 0..plan.jobs.clamp(1, plan.specs.len().max(1)) {
            s.spawn(|| loop {
                if plan.interrupted.load(Ordering::SeqCst) {
                    break;
                }
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                let Some((i, spec)) = next else { break };
                let outcome = one_box(plan, spec);
                done(&outcome);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(outcome);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .zip(&plan.specs)
        .map(|(o, spec)| o.unwrap_or_else(|| BoxOutcome::failed(spec.as_str(), "not replayed")))
        .collect()
}
