//! Timeline fingerprints: pure functions from a [`Recording`] (device memory samples,
//! per-process per-device samples, markers, process starts and exits, errors, the job's end)
//! to [`Finding`]s with evidence and the documented fix text. `vramdoc run` builds a
//! recording from the user's job, the replay engine from each variant; both ask this module
//! which of the known failures the timeline shows. No I/O. Finding ids and thresholds are
//! documented in docs/findings.md.

use crate::report::{Finding, Timeline};
use crate::units::{GIB, MIB};
use serde::{Deserialize, Serialize};

/// Marker kinds the engine reads (other kinds are shown but not interpreted).
pub mod marker_kinds {
    /// The job says everything it loaded has been released (drives `not-released`).
    pub const RELEASE: &str = "release";
}

/// One GPU of the recording (NVML physical index).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedDevice {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub total: u64,
}

/// One process seen during the recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedProcess {
    pub pid: u32,
    /// `comm` or a short name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Milliseconds since the recording started.
    pub first_seen_ms: f64,
    /// When it exited (`None`: still running at the end, or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_ms: Option<f64>,
    /// Its `CUDA_VISIBLE_DEVICES` (`None`: unset or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_visible_devices: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_device_order: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_visible_devices: Option<String>,
    /// Part of the job (the recorded process tree, or the replay worker); other processes
    /// are neighbours, counted in device totals only.
    pub in_tree: bool,
}

/// What kind of error the job hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ErrorKind {
    /// An allocation failed (`CUDA out of memory`, `torch.OutOfMemoryError`, ...).
    OutOfMemory,
    /// Another CUDA / driver error (`CUDA error: unknown error`, device lost, ...).
    DriverError,
    /// A process of the job was killed by a signal (the OOM killer: 9).
    KilledBySignal { signal: i32 },
    /// Anything else worth placing on the timeline.
    Other,
}

/// An error the job hit, as parsed from its output or the worker's events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEvent {
    /// Milliseconds since the recording started.
    pub t_ms: f64,
    #[serde(flatten)]
    pub kind: ErrorKind,
    /// Physical device, when the error names one (`GPU 0`, `cuda:1` mapped already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// The process that printed it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The line as printed, already redacted.
    pub line: String,
    /// Bytes the failed allocation asked for (`Tried to allocate 2.00 GiB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_bytes: Option<u64>,
}

/// How the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobExit {
    Code(i32),
    Signal(i32),
}

/// Everything a recorded job (or a replayed variant) gives the engine.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Recording {
    pub devices: Vec<RecordedDevice>,
    /// Device series `[t_ms, used]`, markers (`step`, `marker`, `release`, `oom`, `error`,
    /// `end`, ...), per-process samples.
    pub timeline: Timeline,
    pub processes: Vec<RecordedProcess>,
    pub errors: Vec<ErrorEvent>,
    /// When the job ended (ms since the recording started).
    pub end_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<JobExit>,
}

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
            residual_min: GIB,
            residual_fraction: 0.05,
            load_min_fraction: 0.10,
            load_tolerance: 0.10,
            claim_min_fraction: 0.20,
            budget_holder_fraction: 0.80,
            near_zero_free_fraction: 0.10,
            exit_grace_ms: 500.0,
            held_min: 256 * MIB,
        }
    }
}

/// Every fingerprint the recording shows, most severe first.
pub fn fingerprints(rec: &Recording, th: &TimelineThresholds) -> Vec<Finding> {
    let _ = (rec, th);
    Vec::new()
}
