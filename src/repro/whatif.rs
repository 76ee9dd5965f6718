//! What-if: the outcome of a scenario's `bug` variant replayed on each of several simulated
//! boxes (does the failure reproduce, does the workload fit, the peak and headroom of each
//! GPU; the model's `WhatIf`), and the smallest box it fits on. Pure: [`super::schedule`]
//! runs the replays.

use crate::model::{BoxOutcome, GpuOutcome, Report, StepStatus, Verdict, WhatIf};

impl GpuOutcome {
    /// Each GPU's row from the peaks of a run or replay on the box of `report`: the peak, and
    /// the headroom left at it (total − reserved − peak).
    pub fn of_peaks(peaks: &[crate::model::DevicePeak], report: &Report) -> Vec<GpuOutcome> {
        (peaks.iter())
            .map(|p| {
                let info = (report.environment.devices.iter()).find(|d| d.index == p.device);
                let reserved = info.map_or(0, |d| d.memory.reserved);
                GpuOutcome {
                    index: p.device,
                    name: info.map(|d| d.name.clone()).unwrap_or_default(),
                    total: p.total,
                    peak: p.peak_used,
                    headroom: p.total.saturating_sub(reserved).saturating_sub(p.peak_used),
                }
            })
            .collect()
    }
}

impl BoxOutcome {
    /// A box whose replay did not produce a report.
    pub fn failed(spec: &str, why: &str) -> BoxOutcome {
        BoxOutcome {
            spec: spec.to_string(),
            verdict: "failed".into(),
            reproduces: false,
            fits: false,
            failed_step: None,
            note: Some(crate::term::one_line(why).chars().take(300).collect()),
            error: None,
            gpus: Vec::new(),
        }
    }

    /// A box from the report of `replay --variant bug` on it.
    pub fn from_report(spec: &str, report: &Report) -> BoxOutcome {
        let Some(run) = report.replay().and_then(|r| r.runs.first()) else {
            return BoxOutcome::failed(spec, "the replay reported no variant");
        };
        let verdict = match run.verdict {
            Verdict::Reproduced => "reproduced",
            Verdict::Fixed => "fixed",
            Verdict::Unexpected => "unexpected",
            Verdict::Skipped => "skipped",
        };
        let ran = run.verdict != Verdict::Skipped;
        let fits = ran
            && run.error.is_none()
            && !run.steps.is_empty()
            && run.steps.iter().all(|s| s.status == StepStatus::Ok);
        let gpus = GpuOutcome::of_peaks(&run.peaks, report);
        BoxOutcome {
            spec: spec.to_string(),
            verdict: verdict.into(),
            reproduces: run.verdict == Verdict::Reproduced,
            fits,
            failed_step: run.error.as_ref().map(|e| e.step_label.clone()),
            // Why it was skipped; an unexpected verdict's failed checks are the table's
            // `reproduces` and `fits` already.
            note: run.reason.clone().filter(|_| !ran),
            error: None,
            gpus,
        }
    }

    fn memory(&self) -> (u64, usize) {
        (
            self.gpus
                .iter()
                .map(|g| g.total)
                .fold(0u64, u64::saturating_add),
            self.gpus.len(),
        )
    }
}

/// The table's model: boxes in the order asked, and the smallest fitting one.
pub fn what_if(scenario: &str, boxes: Vec<BoxOutcome>) -> WhatIf {
    let smallest_fit = boxes
        .iter()
        .filter(|b| b.fits)
        .min_by_key(|b| b.memory())
        .map(|b| b.spec.clone());
    WhatIf {
        scenario: scenario.to_string(),
        command: None,
        boxes,
        smallest_fit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::GIB;

    fn b(spec: &str, fits: bool, totals: &[u64]) -> BoxOutcome {
        BoxOutcome {
            spec: spec.into(),
            verdict: if fits { "unexpected" } else { "reproduced" }.into(),
            reproduces: !fits,
            fits,
            failed_step: None,
            note: None,
            error: None,
            gpus: totals
                .iter()
                .enumerate()
                .map(|(i, t)| GpuOutcome {
                    index: i as u32,
                    name: String::new(),
                    total: *t,
                    peak: 0,
                    headroom: *t,
                })
                .collect(),
        }
    }

    #[test]
    fn the_smallest_fitting_box_is_the_one_with_least_memory() {
        let w = what_if(
            "repro",
            vec![
                b("t4", false, &[15 * GIB]),
                b("2xh100", true, &[80 * GIB, 80 * GIB]),
                b("a100-80gb", true, &[80 * GIB]),
                b("l4", true, &[22 * GIB]),
            ],
        );
        assert_eq!(w.smallest_fit.as_deref(), Some("l4"));
        let none = what_if("repro", vec![b("t4", false, &[15 * GIB])]);
        assert_eq!(none.smallest_fit, None);
    }
}
