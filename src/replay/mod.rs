//! The replay engine: runs one variant of a scenario as a worker child process (so its PID,
//! environment and crash are real) next to its neighbour processes ([`child`]), while the
//! shared [`Recorder`] records memory and process lists; the worker's events only feed the
//! recorder ([`variant`]). Then the variant's expectations are checked on what was recorded
//! ([`outcome`], [`checks`]) and its fingerprint on the recording the recorder built
//! ([`fingerprint`]). The monitor never runs workload code itself: an OOM or a kill ends the
//! worker only.

pub mod batch;
pub mod checks;
mod child;
mod clock;
pub mod fingerprint;
mod identity;
mod neighbours;
mod outcome;
pub mod protocol;
mod variant;
pub mod worker;

use crate::backend::{self, Backend};
use crate::gpu::{DeviceInfo, GpuError};
use crate::model::{Timeline, VariantRun, Verdict};
use crate::record::sampler::SamplerConfig;
use crate::record::{Recorder, RecorderConfig};
use crate::scenario::{Scenario, Variant};
use clock::ms;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;
use variant::{View, WorkerRun};

pub use variant::Failure;

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
    /// The session's backend and box (passed to workers in their own environment).
    pub backend: Backend,
    pub sampler: SamplerConfig,
    /// The vramdoc binary (workers and neighbours are `vramdoc __worker`).
    pub exe: PathBuf,
    /// Set by Ctrl-C: stop the worker, keep what was recorded.
    pub interrupted: Arc<AtomicBool>,
    /// A worker that reports nothing for this long (a hung step, a hung driver call) is
    /// killed and its step ends with status `timeout`.
    pub step_timeout: Duration,
    /// The PID namespace vramdoc runs in, established once by the command (its vantage,
    /// [`crate::inventory::establish_vantage`]): outside the host's, the worker is found in
    /// NVML's lists as the one new process instead of by its PID.
    pub pid_namespace: crate::model::PidNamespace,
}

/// Default for [`ReplayOptions::step_timeout`] (`--step-timeout`).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// Progress callbacks (the command shows them with indicatif).
pub trait Observer {
    fn variant_started(&mut self, _scenario: &str, _variant: &str, _steps: usize) {}
    fn worker_started(&mut self, _pid: u32) {}
    fn step_started(&mut self, _index: usize, _label: &str) {}
    fn variant_finished(&mut self, _run: &VariantRun) {}
    /// A variant that did not run (too few usable GPUs): `run` says why.
    fn variant_skipped(&mut self, _run: &VariantRun) {}
}

/// An observer that shows nothing.
pub struct Quiet;
impl Observer for Quiet {}

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
        findings: Vec::new(),
    }
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

/// Run one variant of a scenario on `devices`, recording through a monitor of its own.
pub fn run_variant(
    scn: &Scenario,
    variant: &Variant,
    devices: &[DeviceInfo],
    opts: &ReplayOptions,
    observer: &mut dyn Observer,
) -> Result<VariantRun, ReplayError> {
    let plan = scn.plan(variant);
    let t0 = Instant::now();
    let t0_mono = clock::mono_now();
    observer.variant_started(&scn.id, &variant.name, plan.steps.len());
    let view = View::new(scn, &plan, devices);

    // Neighbours first (those with a `from` start later, between two steps).
    let mut neighbours =
        neighbours::start_neighbours(scn, &plan, devices, view.smallest, opts, t0)?;
    // Memory of every device; process lists only where the worker works.
    let monitor = match backend::open_monitor(&opts.backend) {
        Ok(m) => m,
        Err(e) => {
            neighbours.finish();
            return Err(e.into());
        }
    };
    let recorder = Recorder::start(
        monitor,
        devices,
        t0,
        RecorderConfig {
            process_devices: Some(view.worker_devices(scn)),
            // Short, and every per-process sample feeds the rules: every list each round.
            list_policy: crate::record::policy::ListPolicy::Every,
            resolution: None,
            before_round: None,
            ..RecorderConfig::new(opts.sampler)
        },
    );
    for m in &neighbours.markers {
        recorder.marker(m.clone());
    }
    // The baseline (every device before the worker) is its first reading.
    let mut worker = WorkerRun::new(&plan, devices, &view, &recorder, t0, t0_mono);
    match neighbours.failure.clone() {
        Some(reason) => worker.fail_before_start(reason),
        None => {
            let staged = (scn, &mut neighbours);
            if let Err(e) = worker.drive(opts, &worker_env(&plan, &view), staged, observer) {
                drop(worker);
                drop(recorder);
                neighbours.finish();
                return Err(e);
            }
        }
    }

    // One last reading after the worker is gone.
    let t_end = ms(t0);
    recorder.point(t_end, recorder.memory_now());
    recorder.marker(crate::model::Marker {
        t_ms: t_end,
        kind: crate::model::MarkerKind::End,
        label: "worker gone".into(),
        device: None,
    });
    let done = worker.into_outcome();
    let end = outcome::feed_recording(scn, &done, &recorder, &view, t_end);
    let recorded = recorder.finish(end);
    neighbours.finish();
    let mut run = outcome::judge(scn, variant, &plan, &view, done, recorded);
    run.duration_ms = t0.elapsed().as_millis() as u64;
    observer.variant_finished(&run);
    Ok(run)
}

/// The worker's environment: the parent's, with the variant's on top, and its devices
/// pinned by UUID (scenario device k is `devices[k]`).
fn worker_env(plan: &crate::scenario::VariantPlan, view: &View) -> Vec<(String, Option<String>)> {
    let mut env: Vec<(String, Option<String>)> = plan
        .env
        .iter()
        .filter(|(k, _)| k.as_str() != "CUDA_VISIBLE_DEVICES")
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect();
    env.push(("CUDA_VISIBLE_DEVICES".into(), Some(view.pinned.clone())));
    env
}
