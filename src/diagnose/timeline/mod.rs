//! Timeline fingerprints: pure functions from a [`Recording`] (device memory samples,
//! per-process per-device samples, markers, process starts and exits, errors, the job's end)
//! to [`Finding`]s with evidence and the documented fix text. `vramdoc run` builds a
//! recording from the user's job, the replay engine from each variant; both ask this module
//! which of the known failures the timeline shows. No I/O. Finding ids and thresholds are
//! documented in docs/findings.md.

mod double_load;
mod fragmentation;
mod gpu_lost;
mod growth_without_release;
mod held_after_exit;
mod held_by_descriptor;
mod levels;
mod monitor_hang;
mod not_gpu_memory;
mod not_released;
mod out_of_memory;
mod outlived;
mod overcommit;
mod prepare;
mod stray_context;
mod vantage;
mod vllm_plan;

use super::evidence;
use super::{fixes, ids};
use crate::model::Finding;
use crate::units::{GIB, MIB};
use prepare::Prepared;
use std::collections::BTreeSet;
#[cfg(test)]
use {
    crate::inventory::CVD_UNSET,
    crate::model::{ProcessDeviceUsage, ProcessInfo, Severity, Timeline},
    std::collections::BTreeMap,
};

/// What every rule file imports: the prepared views, levels and the evidence helpers.
mod prelude {
    pub(super) use super::evidence::{ev, ev_bytes};
    pub(super) use super::levels::{chains, load_end, phase_levels, Chain};
    pub(super) use super::prepare::{
        expandable_on, fmt_t, oom_detail, uuid_ev, Dev, Prepared, ProcSeries,
    };
    pub(super) use super::{fixes, ids, ErrorEvent, ErrorKind, JobExit, RecordedProcess};
    pub(super) use crate::model::{Evidence, Finding, Marker, MarkerKind, Severity};
    pub(super) use crate::units::format_bytes;
    pub(super) use std::collections::{BTreeMap, BTreeSet};
}

pub use crate::record::recording::{
    DeviceFileHolder, ErrorEvent, ErrorKind, JobExit, RecordedDevice, RecordedProcess, Recording,
};

/// Every threshold the timeline rules use; defaults documented per field and in
/// docs/findings.md.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineThresholds {
    /// A footprint at or below this is "context-sized" (stray-context). Default 1 GiB.
    pub context_sized_max: u64,
    /// The main work must exceed this for a small footprint elsewhere to be stray. 1 GiB.
    pub main_work_min: u64,
    /// A level change smaller than this and than `step_fraction` of total is noise. 256 MiB.
    pub step_min: u64,
    /// A level change smaller than this fraction of total is noise. Default 0.02.
    pub step_fraction: f64,
    /// Ratchets (rises without a release, the failing allocation counting as one) for
    /// `growth-without-release`. Default 3.
    pub growth_min_ratchets: usize,
    /// "Near full": used at or above this fraction of total. Default 0.95.
    pub near_full_fraction: f64,
    /// An OOM this long after the last ratchet (and more than 4 times the widest gap
    /// between ratchets) does not end the growth. Default 5 min.
    pub growth_stale_ms: f64,
    /// Residual above the pre-job level after a release marker, at least this (and
    /// `residual_fraction` of total) for `not-released`. Default 1 GiB.
    pub residual_min: u64,
    /// Default 0.05.
    pub residual_fraction: f64,
    /// Smallest load counted by `double-load`, as a fraction of the device. Default 0.10.
    pub load_min_fraction: f64,
    /// Two loads are "about the same size" when they differ by at most this. Default 0.10.
    pub load_tolerance: f64,
    /// Smallest single claim for `overcommit`, fraction of total. Default 0.20.
    pub claim_min_fraction: f64,
    /// The claiming process then holds at least this fraction of total. Default 0.80.
    pub budget_holder_fraction: f64,
    /// "Free memory near zero": at most this fraction of total. Default 0.10.
    pub near_zero_free_fraction: f64,
    /// Memory still used above the pre-job level this long after the job's last process
    /// exited is `held-after-exit`. Default 500 ms.
    pub exit_grace_ms: f64,
    /// ... when above this. Default 256 MiB.
    pub held_min: u64,
    /// Memory a new process needs for its own CUDA context: kept back from what the
    /// neighbours leave when the over-commit fix suggests a vLLM utilisation. 512 MiB, as
    /// scan's `Thresholds::context_reserve`.
    pub context_reserve: u64,
}

impl Default for TimelineThresholds {
    fn default() -> Self {
        TimelineThresholds {
            context_sized_max: GIB,
            main_work_min: GIB,
            step_min: 256 * MIB,
            step_fraction: 0.02,
            growth_min_ratchets: 3,
            near_full_fraction: 0.95,
            growth_stale_ms: 300_000.0,
            residual_min: GIB,
            residual_fraction: 0.05,
            load_min_fraction: 0.10,
            load_tolerance: 0.10,
            claim_min_fraction: 0.20,
            budget_holder_fraction: 0.80,
            near_zero_free_fraction: 0.10,
            exit_grace_ms: 500.0,
            held_min: 256 * MIB,
            context_reserve: 512 * MIB,
        }
    }
}

/// Every fingerprint the recording shows, most severe first (stable within a severity:
/// rule order, then device / PID). Linear in the number of samples.
pub fn fingerprints(rec: &Recording, th: &TimelineThresholds) -> Vec<Finding> {
    let cx = Prepared::new(rec, th);
    let mut out = Vec::new();
    out.extend(out_of_memory::out_of_memory(&cx));
    out.extend(fragmentation::fragmentation(&cx));
    out.extend(stray_context::stray_context(&cx));
    let double = double_load::double_load(&cx);
    // One diagnosis per device: a double load, or one over-committed claim, explains the
    // growth on its device. Overcommit is never the last step of a staircase (see
    // overcommit.rs), so a staircase is always left to growth-without-release.
    let mut explained: BTreeSet<u32> = double.iter().flat_map(|f| f.devices.clone()).collect();
    let over = overcommit::overcommit(&cx, &double);
    explained.extend(over.iter().flat_map(|f| f.devices.clone()));
    out.extend(growth_without_release::growth_without_release(
        &cx, &explained,
    ));
    out.extend(not_released::not_released(&cx));
    out.extend(double);
    out.extend(over);
    out.extend(held_after_exit::held_after_exit(&cx));
    out.extend(outlived::outlived_command(&cx));
    out.extend(held_by_descriptor::held_by_descriptor(&cx));
    out.extend(not_gpu_memory::collective_timeout(&cx));
    out.extend(not_gpu_memory::host_oom_kill(&cx));
    out.extend(not_gpu_memory::cuda_error(&cx));
    out.extend(monitor_hang::monitor_hang(&cx));
    out.extend(gpu_lost::gpu_lost(&cx));
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// [`fingerprints`] with default thresholds, as far as `vantage` (where the recorder stood)
/// supports them ([`vantage::within_vantage`]): `vramdoc run`.
pub fn fingerprints_seen_from(rec: &Recording, vantage: &crate::model::Vantage) -> Vec<Finding> {
    let th = TimelineThresholds::default();
    vantage::within_vantage(rec, &th, vantage, fingerprints(rec, &th))
}

#[cfg(test)]
mod tests;
