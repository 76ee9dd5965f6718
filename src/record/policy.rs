//! Which process lists a round reads: the observer's cost. On real drivers one list costs
//! ~4.5 ms under the driver's global lock (MangoHud PR #2104: 4491 µs median for
//! `nvmlDeviceGetGraphicsRunningProcesses`, 11.6 µs for `nvmlDeviceGetMemoryInfo`), so
//! reading the three lists of 8 GPUs every 500 ms holds the lock about a fifth of the time.
//! [`ListPolicy::OnChange`] reads a list only where it can have changed:
//!
//! - the compute list of a device whose used memory moved by at least
//!   [`OnChange::moved_min`] since its last compute list (a process that takes 256 MiB moves
//!   it), of every device when the job's tree gained or lost a process (seen cheaply in
//!   /proc), and of every device at least every [`OnChange::full_every`];
//! - the graphics and MPS lists when a move is not explained by the compute list that
//!   followed it, and at least every [`OnChange::others_every`].
//!
//! A process holding ≥ 256 MiB is therefore listed one process period after the memory
//! sampler sees it (the move), whatever the full-refresh periods. What can be missed until
//! the next full refresh: a process that takes memory while another frees the same amount
//! within one process period (no net move).

use crate::gpu::{GpuProcess, ProcessKind};
use std::collections::BTreeMap;
use std::time::Duration;

/// How often process lists are read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ListPolicy {
    /// Every list of every device, every process period (replays: short, and every
    /// per-process sample feeds the rules).
    Every,
    /// Only where a list can have changed (`run`).
    OnChange(OnChange),
}

/// The thresholds of [`ListPolicy::OnChange`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OnChange {
    /// A device whose used memory moved this much since its last compute list is listed.
    pub moved_min: u64,
    /// Every compute list at least this often.
    pub full_every: Duration,
    /// Every graphics and MPS list at least this often.
    pub others_every: Duration,
}

impl Default for OnChange {
    fn default() -> Self {
        OnChange {
            moved_min: 64 << 20,
            full_every: Duration::from_secs(10),
            others_every: Duration::from_secs(30),
        }
    }
}

/// What one round reads on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Want {
    pub compute: bool,
    /// Graphics and MPS.
    pub others: bool,
}

#[derive(Debug, Clone, Default)]
struct DeviceState {
    /// Used bytes when the compute list was last read (`None`: unknown then), and when (ms).
    compute: Option<(Option<u64>, f64)>,
    /// When the graphics and MPS lists were last read (ms).
    others: Option<f64>,
    /// Sum of the compute list's usage at its last read.
    compute_sum: u64,
    /// A move was seen: check whether the compute list explains it.
    explain: Option<u64>,
}

/// The policy's memory of what it read, per device.
#[derive(Debug, Clone)]
pub struct Planner {
    policy: ListPolicy,
    devices: BTreeMap<u32, DeviceState>,
}

impl Planner {
    pub fn new(policy: ListPolicy) -> Planner {
        Planner {
            policy,
            devices: BTreeMap::new(),
        }
    }

    pub fn policy(&self) -> ListPolicy {
        self.policy
    }

    /// What to read on `device` at `t_ms`, with its used memory now (`None`: unknown) and
    /// whether the job's tree changed since the last round. `force`: every list.
    pub fn want(
        &mut self,
        device: u32,
        t_ms: f64,
        used: Option<u64>,
        tree_changed: bool,
        force: bool,
    ) -> Want {
        let ListPolicy::OnChange(p) = self.policy else {
            return Want {
                compute: true,
                others: true,
            };
        };
        let st = self.devices.entry(device).or_default();
        let full_ms = p.full_every.as_secs_f64() * 1000.0;
        let others_ms = p.others_every.as_secs_f64() * 1000.0;
        // A list read before the first reading: the first reading is its baseline.
        if let (Some((at @ None, _)), Some(_)) = (st.compute.as_mut(), used) {
            *at = used;
        }
        let moved = match (st.compute, used) {
            (Some((Some(at), _)), Some(now)) => now.abs_diff(at) >= p.moved_min,
            _ => false,
        };
        let stale = st.compute.is_none_or(|(_, t)| t_ms - t >= full_ms);
        let compute = force || tree_changed || moved || stale;
        if moved {
            st.explain = used;
        }
        let others = force || st.others.is_none_or(|t| t_ms - t >= others_ms);
        Want { compute, others }
    }

    /// The lists read on `device` at `t_ms` (what `want` asked), with the used memory the
    /// decision saw; says whether the graphics and MPS lists should follow at once (a move
    /// the compute list does not explain).
    pub fn read(
        &mut self,
        device: u32,
        t_ms: f64,
        used: Option<u64>,
        want: Want,
        compute: Option<&[GpuProcess]>,
    ) -> bool {
        let ListPolicy::OnChange(p) = self.policy else {
            return false;
        };
        let st = self.devices.entry(device).or_default();
        if want.others {
            st.others = Some(t_ms);
        }
        let Some(list) = compute.filter(|_| want.compute) else {
            return false;
        };
        let sum: u64 = list
            .iter()
            .filter(|p| p.kind == ProcessKind::Compute)
            .filter_map(|p| p.used)
            .sum();
        let before = st.compute.and_then(|(u, _)| u);
        let follow = match (st.explain.take(), before) {
            (Some(now), Some(at)) if !want.others => {
                let device_move = now as i128 - at as i128;
                let list_move = sum as i128 - st.compute_sum as i128;
                (device_move - list_move).unsigned_abs() >= p.moved_min as u128
            }
            _ => false,
        };
        st.compute_sum = sum;
        st.compute = Some((used.or(before), t_ms));
        follow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn compute(pid: u32, used: u64) -> GpuProcess {
        GpuProcess {
            pid,
            used: Some(used),
            kind: ProcessKind::Compute,
        }
    }

    #[test]
    fn every_reads_everything() {
        let mut p = Planner::new(ListPolicy::Every);
        let w = p.want(0, 0.0, Some(0), false, false);
        assert!(w.compute && w.others);
    }

    #[test]
    fn on_change_lists_moves_tree_changes_and_stale_devices_only() {
        let mut p = Planner::new(ListPolicy::OnChange(OnChange::default()));
        // First round: everything.
        let w = p.want(0, 0.0, Some(0), false, false);
        assert!(w.compute && w.others);
        assert!(!p.read(0, 0.0, Some(0), w, Some(&[])));
        // Steady: nothing for 10 s.
        let w = p.want(0, 500.0, Some(10 * MIB), false, false);
        assert_eq!(w, Want::default());
        // A move of 256 MiB: the compute list, explained by it.
        let w = p.want(0, 1000.0, Some(256 * MIB), false, false);
        assert!(w.compute && !w.others);
        assert!(!p.read(
            0,
            1000.0,
            Some(256 * MIB),
            w,
            Some(&[compute(7, 256 * MIB)])
        ));
        // A move the compute list does not show: the other lists follow.
        let w = p.want(0, 1500.0, Some(768 * MIB), false, false);
        assert!(w.compute);
        assert!(p.read(
            0,
            1500.0,
            Some(768 * MIB),
            w,
            Some(&[compute(7, 256 * MIB)])
        ));
        // A tree change: listed without a move.
        let w = p.want(0, 2000.0, Some(768 * MIB), true, false);
        assert!(w.compute && !w.others);
        p.read(0, 2000.0, Some(768 * MIB), w, Some(&[]));
        // Stale after 10 s; the others after 30 s.
        assert_eq!(
            p.want(0, 9000.0, Some(768 * MIB), false, false),
            Want::default()
        );
        let w = p.want(0, 12_000.0, Some(768 * MIB), false, false);
        assert!(w.compute && !w.others);
        p.read(0, 12_000.0, Some(768 * MIB), w, Some(&[]));
        let w = p.want(0, 30_000.0, Some(768 * MIB), false, false);
        assert!(w.compute && w.others);
    }
}
