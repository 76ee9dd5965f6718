//! Memory over time, shared by replay and `run`: device series, markers, per-process
//! samples, sampling gaps, peaks.

use super::{GapKind, GapReason, MarkerKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One entry of a per-process list, sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessSample {
    pub t_ms: f64,
    pub device: u32,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DevicePeak {
    pub device: u32,
    pub total: u64,
    pub peak_used: u64,
    /// Milliseconds since the variant started.
    pub t_ms: f64,
}

/// Memory over time with step markers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Timeline {
    pub devices: Vec<DeviceSeries>,
    pub markers: Vec<Marker>,
    /// Per-process lists, sampled on a slower cadence (added for replay; optional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessSample>,
    /// Where the sampler has no data: rounds later than twice the period, failed queries
    /// (added for issue 8; optional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<SamplingGap>,
}

/// A stretch of time the timeline has no samples for, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SamplingGap {
    /// `memory` (the fast loop) or `processes` (the per-process lists).
    pub kind: GapKind,
    /// Physical device whose query failed; absent for a late round (every device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// Milliseconds since the run started: the last good sample before the gap.
    pub start_ms: f64,
    /// Milliseconds since the run started: the first good sample after it (or the end).
    pub end_ms: f64,
    /// Rounds missed or failed queries merged into this gap.
    pub count: u64,
    /// `late` (a round later than twice the period) or the query's error, one line.
    pub reason: GapReason,
}

/// Samples of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceSeries {
    pub device: u32,
    pub total: u64,
    /// `[t_ms, used_bytes]` pairs, in time order.
    pub samples: Vec<(f64, u64)>,
}

/// A labelled point in time (step start, OOM, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Marker {
    pub t_ms: f64,
    /// `step`, `oom`, `error`, `killed`, `end`.
    pub kind: MarkerKind,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
}
