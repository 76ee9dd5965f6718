//! The one process-list path of a recording, for `run` and `replay` alike: on the recorder's
//! process thread (never the memory loop: a list costs ~4.5 ms and holds a driver lock on
//! real drivers), every `process_period`, the lists of the devices that matter — all of
//! them, or only those that can have changed ([`super::policy`]). Lists go through the
//! recording's lanes, every device at once. A failed or hung query, or a round later than
//! twice the period, is a [`SamplingGap`] of kind `processes` (consecutive failures of one
//! device merge into one gap). What a round gives per device is the device's current view:
//! the latest compute, graphics and MPS entries merged by PID, so a `C+G` process (in the
//! compute and the graphics list, with the same memory) is one entry, counted once.

use super::policy::{ListPolicy, Planner, Want};
use super::sampler::{ms_since, Gaps};
use crate::gpu::lanes::{Lanes, Pending};
use crate::gpu::{GpuProcess, ProcessKind};
use crate::model::{GapKind, SamplingGap};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Gap kind of the process thread.
pub const GAP_KIND: GapKind = GapKind::Processes;

/// The lists read in one round: `(device, when it was read, entries)` for every device whose
/// lists were read and answered; one entry per PID.
pub type Lists = Vec<(u32, f64, Vec<GpuProcess>)>;

/// What a round knows: the used memory of each device now (`None`: unknown), whether the
/// job's tree changed since the last round, and whether every list must be read.
pub struct RoundInput<'a> {
    pub used: &'a dyn Fn(u32) -> Option<u64>,
    pub tree_changed: bool,
    pub force: bool,
}

/// State of the process-list rounds.
pub struct ProcessLists {
    devices: Vec<u32>,
    gaps: Gaps,
    planner: Planner,
    /// Latest entries per device, by (PID, list).
    current: BTreeMap<u32, BTreeMap<(u32, ProcessKind), Option<u64>>>,
    /// Rounds taken.
    pub rounds: u64,
    /// Queries that failed.
    pub errors: u64,
    /// NVML list calls made (one per list and device).
    pub list_calls: u64,
}

const OTHERS: [ProcessKind; 2] = [ProcessKind::Graphics, ProcessKind::Mps];

impl ProcessLists {
    /// Lists of `devices` (physical indices), a round every `period`, every list each time.
    pub fn new(devices: Vec<u32>, period: Duration) -> ProcessLists {
        ProcessLists::with_policy(devices, period, ListPolicy::Every)
    }

    /// Lists of `devices`, a round every `period`, read as `policy` says.
    pub fn with_policy(devices: Vec<u32>, period: Duration, policy: ListPolicy) -> ProcessLists {
        ProcessLists {
            devices,
            gaps: Gaps::new(GAP_KIND, period.max(Duration::from_millis(1))),
            planner: Planner::new(policy),
            current: BTreeMap::new(),
            rounds: 0,
            errors: 0,
            list_calls: 0,
        }
    }

    /// One round now: its time (ms since `t0`, when it started) and the lists read.
    pub fn round(&mut self, lanes: &Lanes, t0: Instant, input: &RoundInput) -> (f64, Lists) {
        let t_round = ms_since(t0);
        self.gaps.round(t_round);
        let every = matches!(self.planner_policy(), ListPolicy::Every);
        // Ask every device at once.
        let mut asked: Vec<(u32, Option<u64>, Want, Asked)> = Vec::new();
        for &d in &self.devices {
            let used = (input.used)(d);
            let want = self
                .planner
                .want(d, t_round, used, input.tree_changed, input.force);
            let ask = if every {
                self.list_calls += 3;
                Asked::All(lanes.processes_at(d))
            } else {
                let mut kinds = Vec::new();
                if want.compute {
                    kinds.push(ProcessKind::Compute);
                }
                if want.others {
                    kinds.extend(OTHERS);
                }
                if kinds.is_empty() {
                    continue;
                }
                self.list_calls += kinds.len() as u64;
                Asked::Some(
                    kinds
                        .into_iter()
                        .map(|k| (k, lanes.process_list_at(d, k)))
                        .collect(),
                )
            };
            asked.push((d, used, want, ask));
        }
        let mut lists = Vec::with_capacity(asked.len());
        for (d, used, mut want, ask) in asked {
            let mut read: Vec<(ProcessKind, Vec<GpuProcess>)> = Vec::new();
            let mut failed = None;
            // When the first of this device's calls ran: the lists say what was true from
            // then on, so they are stamped then, never when a loaded machine got round to
            // reading the answer (a stale list stamped late would override the newer
            // readings taken in between: issue 29 item 16).
            let mut ran: Option<Instant> = None;
            let mut first = |at: Instant| {
                ran = Some(ran.map_or(at, |r: Instant| r.min(at)));
            };
            match ask {
                Asked::All(p) => match p.wait() {
                    Ok((at, list)) => {
                        first(at);
                        for k in [
                            ProcessKind::Compute,
                            ProcessKind::Graphics,
                            ProcessKind::Mps,
                        ] {
                            read.push((k, list.iter().filter(|p| p.kind == k).cloned().collect()));
                        }
                    }
                    Err(e) => failed = Some(e.to_string()),
                },
                Asked::Some(pending) => {
                    for (k, p) in pending {
                        match p.wait() {
                            Ok((at, list)) => {
                                first(at);
                                read.push((k, list));
                            }
                            Err(e) => failed = Some(e.to_string()),
                        }
                    }
                }
            }
            // A move the compute list does not explain: the other lists at once.
            if failed.is_none() && !every {
                let compute = read
                    .iter()
                    .find(|(k, _)| *k == ProcessKind::Compute)
                    .map(|(_, l)| l.as_slice());
                if self.planner.read(d, t_round, used, want, compute) {
                    want.others = true;
                    self.list_calls += OTHERS.len() as u64;
                    let pending: Vec<_> = OTHERS
                        .iter()
                        .map(|k| (*k, lanes.process_list_at(d, *k)))
                        .collect();
                    for (k, p) in pending {
                        match p.wait() {
                            Ok((_, list)) => read.push((k, list)),
                            Err(e) => failed = Some(e.to_string()),
                        }
                    }
                    self.planner.read(d, t_round, used, want, None);
                }
            }
            let t = ms_since(t0);
            let t_list = ran.map_or(t, |r| {
                r.saturating_duration_since(t0).as_secs_f64() * 1000.0
            });
            if let Some(e) = failed {
                self.errors += 1;
                self.gaps.failed(d, t, &e);
                continue;
            }
            self.gaps.ok(d, t);
            let cur = self.current.entry(d).or_default();
            for (k, list) in read {
                cur.retain(|(_, kind), _| *kind != k);
                for p in list {
                    cur.insert((p.pid, k), p.used);
                }
            }
            lists.push((d, t_list, merged(cur)));
        }
        self.rounds += 1;
        (t_round, lists)
    }

    fn planner_policy(&self) -> ListPolicy {
        self.planner.policy()
    }

    /// The gaps, closed at `t_ms`.
    pub fn finish(self, t_ms: f64) -> Vec<SamplingGap> {
        self.gaps.finish(t_ms)
    }
}

/// A list, answered with when its call ran.
type Timed = Pending<(Instant, Vec<GpuProcess>)>;

/// Lists asked for.
enum Asked {
    /// Every list in one call.
    All(Timed),
    Some(Vec<(ProcessKind, Timed)>),
}

/// One entry per PID: a process in several lists (`C+G`) holds the same memory in each, so
/// it counts once (the largest figure; compute named first).
fn merged(cur: &BTreeMap<(u32, ProcessKind), Option<u64>>) -> Vec<GpuProcess> {
    let mut out: Vec<GpuProcess> = Vec::new();
    for (&(pid, kind), &used) in cur {
        match out.last_mut() {
            Some(p) if p.pid == pid => {
                p.used = match (p.used, used) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                if kind == ProcessKind::Compute {
                    p.kind = kind;
                }
            }
            _ => out.push(GpuProcess { pid, used, kind }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_in_two_lists_is_one_entry() {
        let mut cur = BTreeMap::new();
        cur.insert((7, ProcessKind::Compute), Some(100));
        cur.insert((7, ProcessKind::Graphics), Some(100));
        cur.insert((9, ProcessKind::Graphics), Some(5));
        let m = merged(&cur);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].used, Some(100));
        assert_eq!(m[0].kind, ProcessKind::Compute);
        assert_eq!(m.iter().filter_map(|p| p.used).sum::<u64>(), 105);
    }
}
