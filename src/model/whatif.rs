//! What `vramdoc whatif` found: per simulated box, whether a scenario's bug reproduces,
//! whether it fits, each GPU's peak and headroom; and the smallest box it fits on. Decided in
//! `repro::whatif` (a scenario replayed) or `watch::fit` (the user's command run on each box),
//! rendered by `report::terminal::whatif`.

use serde::{Deserialize, Serialize};

/// One GPU of a box after the replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuOutcome {
    pub index: u32,
    pub name: String,
    pub total: u64,
    /// Peak used bytes while the variant ran (every process).
    pub peak: u64,
    /// Free bytes at that peak (`total - reserved - peak`).
    pub headroom: u64,
}

/// One box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxOutcome {
    /// The box spec (`t4`, `2xh100`).
    pub spec: String,
    /// `reproduced`, `unexpected`, `skipped`, or `failed` (the replay did not run).
    pub verdict: String,
    /// The bug variant's expectations (the recorded OOM, peaks, fingerprint) all held.
    pub reproduces: bool,
    /// Every step ran, the recorded failed allocation included.
    pub fits: bool,
    /// The step that ran out of memory, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
    /// Why it was skipped or did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Fit by execution (`whatif -- CMD`): the job's own error line where it did not fit
    /// (PyTorch's `torch.OutOfMemoryError`, redacted, one line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub gpus: Vec<GpuOutcome>,
}

/// Every box, and the smallest that fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    pub scenario: String,
    /// Fit by execution: the command that ran on each box (redacted); absent for a scenario.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub boxes: Vec<BoxOutcome>,
    /// The fitting box with the least memory in total (fewest GPUs on a tie).
    pub smallest_fit: Option<String>,
}
