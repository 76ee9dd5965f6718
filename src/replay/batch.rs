//! A batch of replays: every chosen variant of every scenario, in order, on the GPUs the
//! session may use. Owns the GPU choice (the parent's `CUDA_VISIBLE_DEVICES`, devices whose
//! memory cannot be read left out and read again before each variant), the refusal of GPUs
//! other processes hold (unless forced), skipping a variant that needs more GPUs than are
//! usable, and stopping early (a signal, or the machine failing under the replay) with the
//! variants already finished kept. `vramdoc replay` and `vramdoc whatif` both run this.

use super::{run_variant, skipped, Observer, ReplayError, ReplayOptions};
use crate::gpu::{DeviceInfo, GpuError, Monitor};
use crate::model::{Environment, VariantRun};
use crate::scenario::Scenario;
use std::sync::atomic::Ordering;
use thiserror::Error;

/// What to replay.
#[derive(Debug, Clone)]
pub struct Batch {
    pub scenarios: Vec<Scenario>,
    /// Only this variant of each scenario (`--variant`); every variant when `None`.
    pub variant: Option<String>,
    /// Replay on GPUs other processes hold memory on (`--force`).
    pub force: bool,
    /// The parent's `CUDA_VISIBLE_DEVICES`: which GPUs the replay may use.
    pub cuda_visible: Option<String>,
}

/// Why a batch could not start (environment problems: exit 3).
#[derive(Debug, Error)]
pub enum BatchError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("CUDA_VISIBLE_DEVICES={0:?} leaves no visible GPU (CUDA reports no device); unset it or list device indices or UUIDs, e.g. 0,1")]
    NothingVisible(String),
    #[error("{0}: a replay would disturb their work and their memory would distort its numbers; stop them, use a free box (e.g. --sim 2x24GiB), or pass --force")]
    Busy(String),
}

/// A finished (or stopped) batch.
#[derive(Debug)]
pub struct Batched {
    pub runs: Vec<VariantRun>,
    /// Where it ran, described after the last variant (before the first if the machine
    /// could no longer be read).
    pub environment: Environment,
    /// A signal stopped it.
    pub interrupted: bool,
    /// The machine failed under it (device lost, box removed): the runs before are kept.
    pub fatal: Option<ReplayError>,
}

/// The devices a replay may use, in the order scenario device numbers name them: every
/// device NVML lists (or those `cuda_visible` selects, as NVML indices or UUIDs) whose
/// memory can be read now, with current memory; and the devices left out, with why. One
/// bad GPU never ends a replay: it is left out.
fn usable_devices(
    monitor: &dyn Monitor,
    all: &[DeviceInfo],
    cuda_visible: Option<&str>,
) -> (Vec<DeviceInfo>, Vec<(u32, String)>) {
    let uuids: Vec<String> = all.iter().map(|d| d.uuid.clone()).collect();
    let selected = crate::gpu::visible::visible_devices(cuda_visible, &uuids);
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for pos in selected {
        let Some(d) = all.get(pos as usize) else {
            continue;
        };
        match monitor.memory(d.index) {
            Ok(m) => {
                let mut d = d.clone();
                d.memory = m;
                ok.push(d);
            }
            Err(e) => bad.push((d.index, e.to_string())),
        }
    }
    (ok, bad)
}

/// `GPU i is in use by PID p (name), ...` for each device another process holds memory on.
fn busy_devices(monitor: &dyn Monitor, devices: &[DeviceInfo]) -> Vec<String> {
    let me = std::process::id();
    let mut out = Vec::new();
    for d in devices {
        let Ok(list) = monitor.processes(d.index) else {
            continue;
        };
        let who: Vec<String> = list
            .iter()
            .filter(|p| p.pid != me)
            .map(|p| {
                let name = crate::host::comm(p.pid)
                    .map(|n| format!(" ({})", crate::term::escape_bytes(n.trim_ascii())))
                    .unwrap_or_default();
                format!("PID {}{name}", p.pid)
            })
            .collect();
        if !who.is_empty() {
            out.push(format!("GPU {} is in use by {}", d.index, who.join(", ")));
        }
    }
    out
}

/// Why a variant needing `needs` GPUs cannot run on `usable` of them.
fn too_few(needs: u32, usable: usize, unusable: &[(u32, String)]) -> String {
    if unusable.is_empty() {
        return format!("needs {needs} GPUs, this machine has {usable}");
    }
    let bad: Vec<String> = unusable
        .iter()
        .map(|(i, why)| format!("GPU {i}: {why}"))
        .collect();
    format!("needs {needs} GPUs, {usable} usable ({})", bad.join("; "))
}

/// Replay `batch` over `monitor` (the session's; `sim_spec` for the report's environment).
/// Each GPU left out is reported to `warn` once, before the first variant.
pub fn run_batch(
    monitor: &dyn Monitor,
    sim_spec: Option<String>,
    batch: &Batch,
    opts: &ReplayOptions,
    observer: &mut dyn Observer,
    warn: &mut dyn FnMut(String),
) -> Result<Batched, BatchError> {
    let all_devices = monitor.devices()?;
    let cvd = batch.cuda_visible.as_deref();
    // CUDA reads CUDA_VISIBLE_DEVICES up to its first bad entry; one that hides every GPU
    // would make each variant fail in a confusing way. Same check on every backend.
    if let Some(cvd) = cvd {
        let uuids: Vec<String> = all_devices.iter().map(|d| d.uuid.clone()).collect();
        if crate::gpu::visible::visible_devices(Some(cvd), &uuids).is_empty() {
            return Err(BatchError::NothingVisible(crate::term::clean(cvd)));
        }
    }
    let (devices, unusable) = usable_devices(monitor, &all_devices, cvd);
    let most = batch.scenarios.iter().map(|s| s.devices as usize).max();
    if !batch.force {
        let busy = busy_devices(monitor, &devices[..most.unwrap_or(0).min(devices.len())]);
        if !busy.is_empty() {
            return Err(BatchError::Busy(crate::term::clean(&busy.join("; "))));
        }
    }
    for (index, why) in &unusable {
        warn(format!("GPU {index} is not used: {why}"));
    }
    // Described now too: if the machine fails mid-replay the report still has its header.
    let environment_at_start = crate::inventory::environment(monitor, sim_spec.clone())?;
    let mut fatal = None;
    let mut runs = Vec::new();
    'outer: for s in &batch.scenarios {
        let variants = s
            .variants
            .iter()
            .filter(|v| batch.variant.as_ref().is_none_or(|want| &v.name == want));
        for v in variants {
            if opts.interrupted.load(Ordering::SeqCst) {
                break 'outer;
            }
            // Devices can fall off the bus between variants: read them again each time.
            let (devices, unusable) = usable_devices(monitor, &all_devices, cvd);
            if s.devices as usize > devices.len() {
                let run = skipped(s, v, too_few(s.devices, devices.len(), &unusable));
                observer.variant_skipped(&run);
                runs.push(run);
                continue;
            }
            match run_variant(s, v, &devices, opts, observer) {
                Ok(run) => runs.push(run),
                // The machine failed under us (device lost, box removed): stop, but keep
                // the variants already finished.
                Err(e) => {
                    fatal = Some(e);
                    break 'outer;
                }
            }
        }
    }
    let environment =
        crate::inventory::environment(monitor, sim_spec).unwrap_or(environment_at_start);
    Ok(Batched {
        runs,
        environment,
        interrupted: opts.interrupted.load(Ordering::SeqCst),
        fatal,
    })
}
