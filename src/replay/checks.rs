//! Expectations checked on a finished variant: each gives a [`CheckResult`] with the numbers
//! behind it. Fractions written in a check refer to the checked device (for footprints, each
//! device's share of its own total, summed); named sizes of `[sizes]` are the same bytes the
//! worker allocated for them (a fraction of the smallest of the scenario's devices); `ctx`
//! units to the context cost measured during the run on that device.

use crate::model::{CheckResult, StepError, StepErrorKind, StepRecord, StepStatus};
use crate::scenario::{Expectation, SizeSpec};
use crate::units::format_bytes;

/// A context's cost when none was measured: the top of the usual 300–600 MiB band.
pub const FALLBACK_CONTEXT: u64 = 600 * crate::units::MIB;

/// What the checks look at.
pub struct Facts<'a> {
    /// Step ids in the order this variant ran them.
    pub plan_ids: Vec<String>,
    pub records: &'a [StepRecord],
    pub error: Option<&'a StepError>,
    pub completed: bool,
    /// Per physical device.
    pub totals: Vec<u64>,
    pub baseline: Vec<u64>,
    pub context_cost: Vec<Option<u64>>,
    pub worker_max: Vec<u64>,
    pub peaks: Vec<u64>,
    /// Devices the scenario needs (0..n).
    pub needed: u32,
    /// The smallest total among the scenario's devices: what named fractions refer to.
    pub smallest: u64,
    /// The worker's footprint after a step (by step id) in device fractions: the sum over
    /// devices of what it holds there over that device's total. On GPUs of one size this is
    /// the footprint over GPU 0's total; on mixed GPUs it keeps fractional sizes comparable.
    pub held_share: std::collections::BTreeMap<String, f64>,
}

impl Facts<'_> {
    fn ctx(&self, device: u32) -> u64 {
        self.context_cost
            .get(device as usize)
            .copied()
            .flatten()
            .or_else(|| self.context_cost.iter().flatten().max().copied())
            .unwrap_or(FALLBACK_CONTEXT)
    }

    fn total(&self, device: u32) -> u64 {
        self.totals.get(device as usize).copied().unwrap_or(0)
    }

    fn resolve(&self, s: &SizeSpec, device: u32) -> u64 {
        s.resolve(self.total(device), self.smallest, self.ctx(device))
    }

    fn pct(&self, bytes: u64, device: u32) -> String {
        let t = self.total(device);
        if t == 0 {
            format_bytes(bytes)
        } else {
            format!(
                "{} ({:.1}%)",
                format_bytes(bytes),
                bytes as f64 * 100.0 / t as f64
            )
        }
    }

    fn record(&self, id: &str) -> Option<&StepRecord> {
        self.records.iter().find(|r| r.id == id)
    }
}

fn bounds_text(min: &Option<SizeSpec>, max: &Option<SizeSpec>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("between {} and {}", a.describe(), b.describe()),
        (Some(a), None) => format!("at least {}", a.describe()),
        (None, Some(b)) => format!("at most {}", b.describe()),
        (None, None) => "any amount".into(),
    }
}

fn within(f: &Facts, v: u64, device: u32, min: &Option<SizeSpec>, max: &Option<SizeSpec>) -> bool {
    min.as_ref().is_none_or(|m| v >= f.resolve(m, device))
        && max.as_ref().is_none_or(|m| v <= f.resolve(m, device))
}

/// Check one expectation.
pub fn evaluate(e: &Expectation, f: &Facts) -> CheckResult {
    let outcome = || match f.error {
        Some(err) => format!(
            "stopped at step {} ({}): {}",
            err.step_label, err.kind, err.message
        ),
        None if f.completed => format!("all {} steps ran", f.plan_ids.len()),
        None => "the worker stopped without an error event".into(),
    };
    match e {
        Expectation::Completes => CheckResult {
            expectation: "the workload completes".into(),
            passed: f.completed && f.error.is_none(),
            detail: outcome(),
        },
        Expectation::Oom {
            at_or_after,
            before,
        } => {
            let index =
                |id: &Option<String>| id.as_ref().map(|s| f.plan_ids.iter().position(|p| p == s));
            let mut text = "out of memory".to_string();
            if let Some(a) = at_or_after {
                text.push_str(&format!(" at or after step {a}"));
            }
            if let Some(b) = before {
                text.push_str(&format!(" and before step {b}"));
            }
            let (lo, hi) = (index(at_or_after), index(before));
            if matches!(lo, Some(None)) || matches!(hi, Some(None)) {
                return CheckResult {
                    expectation: text,
                    passed: false,
                    detail: "a step named here is not part of this variant".into(),
                };
            }
            let passed = match f.error {
                Some(err) if err.kind == StepErrorKind::OutOfMemory => {
                    lo.flatten().is_none_or(|l| err.step >= l)
                        && hi.flatten().is_none_or(|h| err.step < h)
                }
                _ => false,
            };
            CheckResult {
                expectation: text,
                passed,
                detail: outcome(),
            }
        }
        Expectation::WorkerOnDevice { device, min, max } => {
            let v = f.worker_max.get(*device as usize).copied().unwrap_or(0);
            CheckResult {
                expectation: format!("the worker holds {} on GPU {device}", bounds_text(min, max)),
                passed: within(f, v, *device, min, max),
                detail: format!(
                    "worker held at most {} on GPU {device} (one context = {})",
                    f.pct(v, *device),
                    format_bytes(f.ctx(*device))
                ),
            }
        }
        Expectation::Residual {
            after,
            devices,
            min,
            max,
            spread,
        } => {
            let devs: Vec<u32> = if devices.is_empty() {
                (0..f.needed).collect()
            } else {
                devices.clone()
            };
            let mut text = format!("after {after}, each GPU keeps {}", bounds_text(min, max));
            if let Some(s) = spread {
                text.push_str(&format!(", within {} of each other", s.describe()));
            }
            let Some(rec) = f.record(after).filter(|r| r.status == StepStatus::Ok) else {
                return CheckResult {
                    expectation: text,
                    passed: false,
                    detail: format!("step {after} did not complete; {}", outcome()),
                };
            };
            let residual: Vec<(u32, u64)> = devs
                .iter()
                .map(|d| {
                    let i = *d as usize;
                    let used = rec.used_after.get(i).copied().unwrap_or(0);
                    (
                        *d,
                        used.saturating_sub(f.baseline.get(i).copied().unwrap_or(0)),
                    )
                })
                .collect();
            let mut passed = residual.iter().all(|(d, v)| within(f, *v, *d, min, max));
            if let Some(s) = spread {
                let hi = residual.iter().map(|(_, v)| *v).max().unwrap_or(0);
                let lo = residual.iter().map(|(_, v)| *v).min().unwrap_or(0);
                let smallest = devs
                    .iter()
                    .min_by_key(|d| f.total(**d))
                    .copied()
                    .unwrap_or(0);
                // The GPUs agree in bytes (within the spread, a percentage of the smallest, as
                // equal shards of a named size do); or, for a percentage, in share: residuals
                // beyond each device's own context (a fixed cost) as fractions of each
                // device, as per-device fractions do on GPUs of different sizes.
                let bytes_agree = hi - lo <= f.resolve(s, smallest);
                let shares_agree = || {
                    let SizeSpec::Fraction(frac) = s else {
                        return false;
                    };
                    let fr = residual.iter().map(|(d, v)| {
                        v.saturating_sub(f.ctx(*d)) as f64 / f.total(*d).max(1) as f64
                    });
                    let hi = fr.clone().fold(f64::MIN, f64::max);
                    let lo = fr.fold(f64::MAX, f64::min);
                    hi - lo <= *frac + 1e-9
                };
                passed &= bytes_agree || shares_agree();
            }
            let detail = residual
                .iter()
                .map(|(d, v)| format!("GPU {d}: {}", f.pct(*v, *d)))
                .collect::<Vec<_>>()
                .join(", ");
            CheckResult {
                expectation: text,
                passed,
                detail: format!(
                    "residual {detail}; one context = {}",
                    format_bytes(f.ctx(devs.first().copied().unwrap_or(0)))
                ),
            }
        }
        Expectation::Peak { device, min, max } => {
            let v = f.peaks.get(*device as usize).copied().unwrap_or(0);
            CheckResult {
                expectation: format!("peak used on GPU {device} is {}", bounds_text(min, max)),
                passed: within(f, v, *device, min, max),
                detail: format!("peak {}", f.pct(v, *device)),
            }
        }
        Expectation::Footprint { at, min, max } => {
            let text = format!(
                "after {at}, the worker's allocations total {}",
                bounds_text(min, max)
            );
            let frac = |s: &Option<SizeSpec>| match s {
                None => Some(None),
                Some(SizeSpec::Fraction(x)) => Some(Some(*x)),
                Some(_) => None,
            };
            let fractions = (min.is_some() || max.is_some())
                .then(|| frac(min).zip(frac(max)))
                .flatten();
            match f.record(at).filter(|r| r.status == StepStatus::Ok) {
                Some(rec) => match (fractions, f.held_share.get(at)) {
                    (Some((lo, hi)), Some(share)) => CheckResult {
                        expectation: text,
                        passed: lo.is_none_or(|l| *share >= l - 1e-9)
                            && hi.is_none_or(|h| *share <= h + 1e-9),
                        detail: format!(
                            "footprint {} across all GPUs = {:.1}% of one GPU (each GPU's \
                             share of its own total, summed)",
                            format_bytes(rec.held_after),
                            share * 100.0
                        ),
                    },
                    _ => CheckResult {
                        expectation: text,
                        passed: within(f, rec.held_after, 0, min, max),
                        detail: format!(
                            "footprint {} across all GPUs (% of GPU 0)",
                            f.pct(rec.held_after, 0)
                        ),
                    },
                },
                None => CheckResult {
                    expectation: text,
                    passed: false,
                    detail: format!("step {at} did not complete; {}", outcome()),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{GIB, MIB};

    fn rec(id: &str, index: usize, used: Vec<u64>, held: u64) -> StepRecord {
        StepRecord {
            index,
            id: id.into(),
            label: id.into(),
            op: "alloc".into(),
            start_ms: 0.0,
            end_ms: Some(1.0),
            status: "ok".into(),
            bytes: None,
            used_after: used,
            worker_after: Vec::new(),
            held_after: held,
            peak_used: Vec::new(),
        }
    }

    fn facts<'a>(records: &'a [StepRecord], error: Option<&'a StepError>) -> Facts<'a> {
        Facts {
            plan_ids: vec!["a".into(), "b".into(), "c".into()],
            records,
            error,
            completed: error.is_none(),
            totals: vec![10 * GIB, 10 * GIB],
            baseline: vec![GIB, GIB],
            context_cost: vec![Some(448 * MIB), None],
            worker_max: vec![500 * MIB, 0],
            peaks: vec![9 * GIB, GIB],
            needed: 2,
            smallest: 10 * GIB,
            held_share: Default::default(),
        }
    }

    fn oom_at(step: usize) -> StepError {
        StepError {
            step,
            step_label: "x".into(),
            kind: "out-of-memory".into(),
            message: "out of memory".into(),
            t_ms: 0.0,
        }
    }

    #[test]
    fn oom_range_is_checked_by_plan_position() {
        let e = oom_at(1);
        let f = facts(&[], Some(&e));
        let exp = |a: Option<&str>, b: Option<&str>| Expectation::Oom {
            at_or_after: a.map(String::from),
            before: b.map(String::from),
        };
        assert!(evaluate(&exp(Some("b"), Some("c")), &f).passed);
        assert!(!evaluate(&exp(Some("c"), None), &f).passed);
        assert!(!evaluate(&exp(None, Some("b")), &f).passed);
        assert!(!evaluate(&exp(Some("zz"), None), &f).passed);
        assert!(!evaluate(&Expectation::Completes, &f).passed);
        let f = facts(&[], None);
        assert!(!evaluate(&exp(None, None), &f).passed);
        assert!(evaluate(&Expectation::Completes, &f).passed);
    }

    #[test]
    fn residual_spread_and_context_units() {
        let recs = [rec("a", 0, vec![GIB + 448 * MIB, GIB + 448 * MIB], 0)];
        let f = facts(&recs, None);
        let r = |min, max, spread| Expectation::Residual {
            after: "a".into(),
            devices: Vec::new(),
            min,
            max,
            spread,
        };
        assert!(evaluate(&r(None, Some(SizeSpec::Contexts(1.0)), None), &f).passed);
        assert!(!evaluate(&r(None, Some(SizeSpec::Contexts(0.5)), None), &f).passed);
        let uneven = [rec("a", 0, vec![3 * GIB, 2 * GIB], 0)];
        let f = facts(&uneven, None);
        assert!(
            !evaluate(
                &r(
                    Some(SizeSpec::Fraction(0.05)),
                    None,
                    Some(SizeSpec::Fraction(0.05))
                ),
                &f
            )
            .passed
        );
        assert!(
            evaluate(
                &r(
                    Some(SizeSpec::Fraction(0.05)),
                    None,
                    Some(SizeSpec::Fraction(0.2))
                ),
                &f
            )
            .passed
        );
        // A step that did not run fails the check instead of passing silently.
        let f = facts(&[], None);
        assert!(!evaluate(&r(None, None, None), &f).passed);
    }

    #[test]
    fn device_bounds_footprint_and_fallback_context() {
        let recs = [rec("b", 1, vec![0, 0], 4 * GIB)];
        let f = facts(&recs, None);
        let w = |device, min, max| Expectation::WorkerOnDevice { device, min, max };
        assert!(evaluate(&w(0, Some(SizeSpec::Contexts(1.0)), None), &f).passed);
        assert!(evaluate(&w(1, None, Some(SizeSpec::Bytes(0))), &f).passed);
        // GPU 1 has no measured context: the largest measured one is used.
        assert_eq!(f.ctx(1), 448 * MIB);
        let peak = Expectation::Peak {
            device: 0,
            min: Some(SizeSpec::Fraction(0.9)),
            max: None,
        };
        assert!(evaluate(&peak, &f).passed);
        let fp = |min: f64, max: f64| Expectation::Footprint {
            at: "b".into(),
            min: Some(SizeSpec::Fraction(min)),
            max: Some(SizeSpec::Fraction(max)),
        };
        assert!(evaluate(&fp(0.39, 0.41), &f).passed);
        assert!(!evaluate(&fp(0.5, 0.6), &f).passed);
    }

    #[test]
    fn named_fractions_are_bytes_of_the_smallest_device_on_a_mixed_box() {
        // A 16 GiB and an 80 GiB GPU; `model = "50%"` is 8 GiB wherever it lives. The worker
        // held the model twice (16 GiB); its per-device shares (e.g. 75% + 10%) say nothing
        // about how many copies that is.
        let recs = [rec("b", 1, vec![0, 0], 16 * GIB)];
        let mut f = facts(&recs, None);
        f.totals = vec![16 * GIB, 80 * GIB];
        f.smallest = 16 * GIB;
        f.held_share.insert("b".into(), 0.85);
        let fp = |min: f64, max: f64| Expectation::Footprint {
            at: "b".into(),
            min: Some(SizeSpec::FractionOfSmallest(min)),
            max: Some(SizeSpec::FractionOfSmallest(max)),
        };
        // 1.9*model .. 2.1*model
        assert!(evaluate(&fp(0.95, 1.05), &f).passed);
        // 0.9*model .. 1.1*model
        assert!(!evaluate(&fp(0.45, 0.55), &f).passed);
        assert_eq!(
            SizeSpec::FractionOfSmallest(0.5).resolve(80 * GIB, 16 * GIB, 0),
            8 * GIB
        );
    }

    #[test]
    fn residual_spread_accepts_equal_bytes_or_equal_shares_on_a_mixed_box() {
        // 16 GiB and 80 GiB GPUs, each starting from 1 GiB in use; one context = 448 MiB.
        let check = |after: Vec<u64>| {
            let recs = [rec("a", 0, after, 0)];
            let mut f = facts(&recs, None);
            f.totals = vec![16 * GIB, 80 * GIB];
            f.smallest = 16 * GIB;
            f.context_cost = vec![Some(448 * MIB), Some(448 * MIB)];
            let e = Expectation::Residual {
                after: "a".into(),
                devices: Vec::new(),
                min: None,
                max: None,
                spread: Some(SizeSpec::Fraction(0.02)),
            };
            evaluate(&e, &f).passed
        };
        let ctx = 448 * MIB;
        // Equal shards of a named size: 5 GiB each (31% and 6% of the devices).
        assert!(check(vec![6 * GIB, 6 * GIB]));
        // Equal shares: 10% of each device beyond its context.
        let share = |t: u64| GIB + ctx + t / 10;
        assert!(check(vec![share(16 * GIB), share(80 * GIB)]));
        // Neither: 5 GiB against 7 GiB.
        assert!(!check(vec![6 * GIB, 8 * GIB]));
    }
}
