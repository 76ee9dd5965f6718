//! The bounds and sizes of a conversion (steps, quanta, contexts, neighbours, devices), in
//! one place below both [`super::convert`] and [`super::picture`], which read them.

use crate::units::{GIB, MIB};

/// Most steps a converted scenario has (marker steps and the failed allocation included).
/// A longer recording is coalesced: the quantum doubles until the steps fit.
pub const MAX_STEPS: usize = 1000;
/// Most marker (phase) steps kept; the last ones, where the failure is, are kept.
pub const MAX_MARKER_STEPS: usize = 200;
/// Smallest level change that becomes a step (and at least 1/512 of the GPU's total).
pub const MIN_QUANTUM: u64 = 64 * MIB;
/// A context, when the recording does not show one alone: what the simulated driver's
/// default profile charges (real drivers: 300–600 MiB).
pub const DEFAULT_CONTEXT: u64 = 448 * MIB;
/// A first footprint at or below this is a context alone.
pub(super) const CONTEXT_SIZED_MAX: u64 = GIB;
/// How late `vramdoc run` may read a marker line after the job wrote it (its tail polls
/// every 50 ms); a marker is placed this much, plus one memory period, before its reading,
/// so the level change the job made right after marking falls in the marker's phase.
pub const MARKER_LAG_MS: f64 = 50.0;
/// Longest pause kept after a release marker (the timeline rules judge a release within
/// 2 s of its marker).
pub const MAX_SETTLE_MS: f64 = 2500.0;
/// Peaks must agree within one step of the timeline rules: this, or 2 % of the total.
pub const PEAK_STEP_MIN: u64 = 256 * MIB;
/// Most GPUs a recording may have (a scenario's limit): checked before any work.
pub const MAX_DEVICES: usize = 64;
/// Most neighbours per GPU: the largest other processes each, the rest merged into one.
pub const MAX_NEIGHBOURS_PER_GPU: usize = 8;
/// Largest quantum tried: above every reading (readings are capped at 1 PiB), so a
/// conversion at it has no level steps left and the step count is bounded by markers and
/// contexts alone; the coalescing loop ends there.
pub(super) const MAX_QUANTUM: u64 = 1 << 51;
