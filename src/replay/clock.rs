//! The monitor's clocks, below every part of the engine that stamps an event: milliseconds
//! on a variant's timeline, and the monotonic clock the worker's events are stamped with.

use std::time::Instant;

/// Milliseconds since `t0`: a time on the variant's timeline.
pub(super) fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1000.0
}

/// The monitor's clock now, to place the worker's stamped events on its timeline.
pub(super) fn mono_now() -> u64 {
    super::protocol::mono_ns()
}
