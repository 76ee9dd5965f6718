//! Low headroom over time: what one snapshot cannot tell. `serve` keeps a short history of
//! each GPU's free memory and claimants across collections ([`HeadroomTrend`]); a GPU low
//! on free memory whose free memory **fell** within the window (by at least a context,
//! [`Thresholds::context_reserve`]), or that gained a **new claimant** (a process holding
//! more than a context, [`Thresholds::context_sized_max`]) within it, gets its
//! `low-headroom` finding raised to warn. A steady state — two engines at fixed budgets for
//! hours, time-sliced pods — stays info ([`super::low_headroom`]). Pure: the caller passes
//! the time of each collection.

use super::evidence::{ev, ev_bytes};
use super::{ids, Thresholds};
use crate::model::{ScanResult, Severity};
use crate::units::format_bytes;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// How long a change keeps a low GPU at warn, and how far back changes are looked for.
pub const DEFAULT_WINDOW_S: f64 = 30.0 * 60.0;

/// One collection's view of one GPU.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    t: f64,
    free: u64,
    claimants: BTreeSet<u32>,
}

/// Per GPU (by UUID, so a renumbering never mixes two GPUs' histories), the samples of the
/// last window.
#[derive(Debug, Clone)]
pub struct HeadroomTrend {
    window_s: f64,
    history: BTreeMap<String, VecDeque<Sample>>,
}

impl Default for HeadroomTrend {
    fn default() -> Self {
        HeadroomTrend::new(DEFAULT_WINDOW_S)
    }
}

/// What changed on one GPU within the window.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Free memory fell from `from` to `to` over `over_s` seconds.
    Fell { from: u64, to: u64, over_s: f64 },
    /// These claimants were not claimants at the start of the window.
    NewClaimants(Vec<u32>),
}

impl HeadroomTrend {
    pub fn new(window_s: f64) -> HeadroomTrend {
        HeadroomTrend {
            window_s,
            history: BTreeMap::new(),
        }
    }

    /// Record `scan` taken at `now` (seconds) and raise to warn each `low-headroom` finding
    /// of a GPU low on free memory that changed within the window (evidence says how).
    /// Findings are sorted most severe first again.
    pub fn apply(&mut self, scan: &mut ScanResult, now: f64, th: &Thresholds) {
        let mut changes: BTreeMap<u32, Vec<Change>> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for d in scan
            .devices
            .iter()
            // Per device by UUID: a MIG instance has its own; a GPU in MIG mode (its
            // instances' sum) has no trend of its own.
            .filter(|d| d.is_counted() && d.memory_unknown.is_none())
        {
            seen.insert(d.uuid.clone());
            let claimants: BTreeSet<u32> = scan
                .processes
                .iter()
                .filter(|p| {
                    p.usage_on(d.index)
                        .and_then(|u| u.used)
                        .is_some_and(|b| b > th.context_sized_max)
                })
                .map(|p| p.pid)
                .collect();
            let hist = self.history.entry(d.uuid.clone()).or_default();
            while hist.front().is_some_and(|s| now - s.t > self.window_s) {
                hist.pop_front();
            }
            let m = d.memory;
            let low = m.free < th.context_reserve
                || (m.free as f64) < th.low_free_fraction * m.total as f64;
            let mut found = Vec::new();
            if low {
                if let Some(top) = hist.iter().max_by_key(|s| s.free) {
                    if top.free.saturating_sub(m.free) >= th.context_reserve {
                        found.push(Change::Fell {
                            from: top.free,
                            to: m.free,
                            over_s: now - top.t,
                        });
                    }
                }
                if let Some(first) = hist.front() {
                    let new: Vec<u32> = claimants.difference(&first.claimants).copied().collect();
                    if !new.is_empty() {
                        found.push(Change::NewClaimants(new));
                    }
                }
            }
            hist.push_back(Sample {
                t: now,
                free: m.free,
                claimants,
            });
            if !found.is_empty() {
                changes.insert(d.index, found);
            }
        }
        // GPUs gone from the inventory take their history with them.
        self.history.retain(|uuid, _| seen.contains(uuid));
        for f in scan
            .findings
            .iter_mut()
            .filter(|f| f.id == ids::LOW_HEADROOM)
        {
            let Some(found) = f.devices.first().and_then(|d| changes.get(d)) else {
                continue;
            };
            f.severity = Severity::Warn;
            let mut what = Vec::new();
            for c in found {
                match c {
                    Change::Fell { from, to, over_s } => {
                        f.evidence.push(ev_bytes(
                            format!("free {:.0} min ago (the most in the window)", over_s / 60.0),
                            *from,
                        ));
                        what.push(format!(
                            "free memory fell from {} to {}",
                            format_bytes(*from),
                            format_bytes(*to)
                        ));
                    }
                    Change::NewClaimants(pids) => {
                        let list: Vec<String> = pids.iter().map(|p| format!("PID {p}")).collect();
                        f.evidence
                            .push(ev("new claimants in the window", list.join(", ")));
                        what.push(format!("new claimant {}", list.join(", ")));
                    }
                }
            }
            f.title = format!(
                "{} — changed within {:.0} min: {}",
                f.title,
                self.window_s / 60.0,
                what.join("; ")
            );
        }
        scan.findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::tests::{inv_with, proc_};
    use crate::inventory::CVD_UNSET;
    use crate::units::{GIB, MIB};

    const TOTAL: u64 = 24 * GIB;
    const RESERVED: u64 = 256 * MIB;

    /// A scan of one 24 GiB GPU shared by processes holding `held` each (PIDs from 10).
    fn scan_of(held: &[u64]) -> ScanResult {
        let procs = held
            .iter()
            .enumerate()
            .map(|(i, b)| proc_(10 + i as u32, CVD_UNSET, &[(0, Some(*b))]))
            .collect();
        let inv = inv_with(1, procs, &[], true);
        let report = crate::scan::build_report(&inv, &Thresholds::default());
        report.into_scan().expect("a scan")
    }

    fn low_headroom(s: &ScanResult) -> Severity {
        s.findings
            .iter()
            .find(|f| f.id == ids::LOW_HEADROOM)
            .expect("low-headroom")
            .severity
    }

    /// Two engines at gpu_memory_utilization 0.45 each: 1.2 GiB free of 24 GiB.
    const BUDGET: u64 = TOTAL / 100 * 45;

    /// A GPU in MIG mode (device 0) with two instances (1, 2): a second claimant joining
    /// instance 1 warns on that instance; the parent, whose free memory is the instances'
    /// sum, has no trend and no finding.
    #[test]
    fn the_trend_is_per_mig_instance_never_the_parent() {
        use crate::gpu::{MigInfo, MigInstanceInfo};
        let th = Thresholds::default();
        let mut trend = HeadroomTrend::new(600.0);
        let scan = |held: &[u64]| {
            let procs = held
                .iter()
                .enumerate()
                .map(|(i, b)| proc_(10 + i as u32, CVD_UNSET, &[(1, Some(*b))]))
                .collect();
            let mut inv = inv_with(3, procs, &[], true);
            let devs = &mut inv.environment.devices;
            for gi in 1..3u32 {
                devs[gi as usize].mig = Some(MigInfo::Instance(MigInstanceInfo {
                    parent: 0,
                    parent_uuid: devs[0].uuid.clone(),
                    gi: Some(gi),
                    ci: Some(0),
                    profile: "3g.40gb".into(),
                }));
            }
            devs[0].mig = Some(MigInfo::Parent);
            devs[0].memory.total = 2 * TOTAL;
            devs[0].memory.used = devs[1].memory.used;
            devs[0].memory.free = 2 * TOTAL - 2 * RESERVED - devs[1].memory.used;
            let report = crate::scan::build_report(&inv, &Thresholds::default());
            report.into_scan().expect("a scan")
        };
        let mut s = scan(&[BUDGET * 2 - GIB]);
        trend.apply(&mut s, 0.0, &th);
        let mut s = scan(&[BUDGET, BUDGET]);
        trend.apply(&mut s, 60.0, &th);
        let f = s
            .findings
            .iter()
            .find(|f| f.id == ids::LOW_HEADROOM)
            .expect("low-headroom on the instance");
        assert_eq!(f.severity, Severity::Warn, "{}", f.title);
        assert_eq!(f.devices, vec![1]);
        assert!(
            s.findings.iter().all(|f| !f.devices.contains(&0)),
            "{:?}",
            s.findings
        );
        assert_eq!(trend.history.len(), 2, "the instances only");
    }

    #[test]
    fn a_steady_fixed_budget_state_stays_info_for_hours() {
        let th = Thresholds::default();
        let mut trend = HeadroomTrend::default();
        for minute in 0..(6 * 60) {
            let mut s = scan_of(&[BUDGET, BUDGET]);
            trend.apply(&mut s, minute as f64 * 60.0, &th);
            assert_eq!(low_headroom(&s), Severity::Info, "minute {minute}");
        }
        const { assert!(TOTAL - RESERVED - 2 * BUDGET < TOTAL / 10) };
    }

    #[test]
    fn free_memory_falling_or_a_new_claimant_warns_then_settles() {
        let th = Thresholds::default();
        let mut trend = HeadroomTrend::new(600.0);
        // One engine alone, then a second claimant joins: warn.
        let mut s = scan_of(&[BUDGET * 2 - GIB]);
        trend.apply(&mut s, 0.0, &th);
        let mut s = scan_of(&[BUDGET, BUDGET]);
        trend.apply(&mut s, 60.0, &th);
        let f = s
            .findings
            .iter()
            .find(|f| f.id == ids::LOW_HEADROOM)
            .unwrap();
        assert_eq!(f.severity, Severity::Warn, "{}", f.title);
        assert!(f.title.contains("new claimant PID 11"), "{}", f.title);
        // Steady past the window: info again.
        for minute in 2..=12 {
            let mut s = scan_of(&[BUDGET, BUDGET]);
            trend.apply(&mut s, minute as f64 * 60.0, &th);
            if minute == 12 {
                assert_eq!(low_headroom(&s), Severity::Info);
            }
        }
        // Growth: one of them grows by 1 GiB; free memory falls by more than a context.
        let mut s = scan_of(&[BUDGET, BUDGET + 900 * MIB]);
        trend.apply(&mut s, 13.0 * 60.0, &th);
        let f = s
            .findings
            .iter()
            .find(|f| f.id == ids::LOW_HEADROOM)
            .unwrap();
        assert_eq!(f.severity, Severity::Warn, "{}", f.title);
        assert!(f.title.contains("free memory fell"), "{}", f.title);
        // A first collection has no history: the snapshot's decision stands.
        let mut fresh = HeadroomTrend::default();
        let mut s = scan_of(&[BUDGET, BUDGET + 900 * MIB]);
        fresh.apply(&mut s, 0.0, &th);
        assert_eq!(low_headroom(&s), Severity::Info);
    }
}
