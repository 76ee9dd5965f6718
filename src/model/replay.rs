//! What `vramdoc replay` did: one [`VariantRun`] per variant, with its steps and checks.

use super::{DevicePeak, Finding, StepErrorKind, StepStatus, Timeline};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What `vramdoc replay` did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplayResult {
    /// Memory sampling period, microseconds.
    pub period_us: u64,
    pub runs: Vec<VariantRun>,
}

/// Outcome of one variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// A bug variant showed the failure it documents.
    Reproduced,
    /// A fix variant completed within its expectations.
    Fixed,
    /// The variant did not behave as its expectations say.
    Unexpected,
    /// Not run (e.g. the box has too few devices).
    Skipped,
}

/// One expectation checked on the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckResult {
    /// What was expected, in words.
    pub expectation: String,
    pub passed: bool,
    /// The numbers behind it.
    pub detail: String,
}

/// One variant of one scenario, run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VariantRun {
    pub scenario: String,
    pub variant: String,
    /// Upstream source of the failure (project and symptom).
    pub source: String,
    pub verdict: Verdict,
    /// Why skipped / what went wrong, one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub checks: Vec<CheckResult>,
    /// Worker process id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pid: Option<u32>,
    /// Out-of-memory or other error the worker hit, with the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<StepError>,
    /// Peak used bytes per device over the run.
    pub peaks: Vec<DevicePeak>,
    pub timeline: Timeline,
    /// Wall time of the variant, milliseconds.
    pub duration_ms: u64,
    /// Each step the worker started, with memory at its end (added for replay; optional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
    /// Every timeline finding the variant's recording shows, most severe first (the
    /// scenario's fingerprint and any other; added for issue 15; optional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
}

/// One step of a variant as the monitor saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepRecord {
    pub index: usize,
    pub id: String,
    pub label: String,
    /// The scenario op (`alloc`, `free`, `context`, ...).
    pub op: String,
    /// Milliseconds since the variant started.
    pub start_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    /// `ok`, `out-of-memory`, `device-lost`, `error`, `killed`, `interrupted`.
    pub status: StepStatus,
    /// Bytes the step asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Used bytes of every device (index = physical device) when the step ended.
    #[serde(default)]
    pub used_after: Vec<u64>,
    /// The worker's own usage on every device when the step ended (process list).
    #[serde(default)]
    pub worker_after: Vec<u64>,
    /// Bytes the worker held through allocations (live, cached, group-owned), all devices.
    #[serde(default)]
    pub held_after: u64,
    /// Peak used bytes of every device while the step ran.
    #[serde(default)]
    pub peak_used: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepError {
    pub step: usize,
    pub step_label: String,
    /// `out-of-memory`, `killed`, `device-lost`, `error`.
    pub kind: StepErrorKind,
    pub message: String,
    /// Milliseconds since the variant started.
    pub t_ms: f64,
}
