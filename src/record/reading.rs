//! A reading of every device's memory at a boundary, each device's value with the time its
//! own call ran ([`super::Recorder::memory_now_at`], [`super::Recorder::keep`]).

/// A reading of every device (device order), each with when its call ran
/// ([`Recorder::memory_now_at`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// `(ms since the start, used bytes)` per device; `None`: the query failed or passed
    /// its deadline (no reading, never 0 bytes).
    pub devices: Vec<Option<(f64, u64)>>,
    /// When it was asked for (ms since the start): its time where no device answered.
    pub(super) asked: f64,
}

impl Reading {
    /// Used bytes per device.
    pub fn used(&self) -> Vec<Option<u64>> {
        self.devices.iter().map(|d| d.map(|(_, u)| u)).collect()
    }

    /// When the first of its calls ran (when it was asked for, where none answered).
    pub fn first(&self) -> f64 {
        self.devices
            .iter()
            .flatten()
            .map(|(t, _)| *t)
            .reduce(f64::min)
            .unwrap_or(self.asked)
    }
}
