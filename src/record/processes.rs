//! The one process-list path of a recording, for `run` and `replay` alike: on the recorder's
//! process thread (never the memory loop: a list costs ~4.5 ms and holds a driver lock on
//! real drivers), every `process_period`, the lists of the devices that matter. A failed
//! query or a round later than twice the period is a [`SamplingGap`] of kind `processes`
//! (consecutive failures of one device merge into one gap).

use super::lanes::Lanes;
use super::sampler::{ms_since, Gaps};
use crate::gpu::GpuProcess;
use crate::model::{GapKind, SamplingGap};
use std::time::{Duration, Instant};

/// Gap kind of the process thread.
pub const GAP_KIND: GapKind = GapKind::Processes;

/// The lists read in one round: `(device, when it was read, entries)` for every device whose
/// query succeeded.
pub type Lists = Vec<(u32, f64, Vec<GpuProcess>)>;

/// State of the process-list rounds.
pub struct ProcessLists {
    devices: Vec<u32>,
    gaps: Gaps,
    /// Rounds taken.
    pub rounds: u64,
    /// Queries that failed.
    pub errors: u64,
}

impl ProcessLists {
    /// Lists of `devices` (physical indices), a round every `period`.
    pub fn new(devices: Vec<u32>, period: Duration) -> ProcessLists {
        ProcessLists {
            devices,
            gaps: Gaps::new(GAP_KIND, period.max(Duration::from_millis(1))),
            rounds: 0,
            errors: 0,
        }
    }

    /// One round now: its time (ms since `t0`, when it started) and the lists read. The
    /// devices are asked in parallel through `lanes`; a device that fails or hangs is a gap
    /// of its own.
    pub fn round(&mut self, lanes: &Lanes, t0: Instant) -> (f64, Lists) {
        let t_round = ms_since(t0);
        self.gaps.round(t_round);
        let pending: Vec<_> = self.devices.iter().map(|d| lanes.processes(*d)).collect();
        let mut lists = Vec::with_capacity(self.devices.len());
        for (d, p) in self.devices.iter().zip(pending) {
            match p.wait() {
                Ok(list) => {
                    let t = ms_since(t0);
                    self.gaps.ok(*d, t);
                    lists.push((*d, t, list));
                }
                Err(e) => {
                    self.errors += 1;
                    self.gaps.failed(*d, ms_since(t0), &e);
                }
            }
        }
        self.rounds += 1;
        (t_round, lists)
    }

    /// The gaps, closed at `t_ms`.
    pub fn finish(self, t_ms: f64) -> Vec<SamplingGap> {
        self.gaps.finish(t_ms)
    }
}
