//! Fit by execution: `vramdoc whatif --on t4,l4,a100-80gb -- CMD...` runs the user's own
//! command on a fresh simulated box of each spec, one box after another (the job supervisor
//! owns the process's signals and children), and says where it fits: the peak per GPU, and
//! where it does not, the job's own error line (PyTorch's `torch.OutOfMemoryError` with its
//! numbers). The verdict is the real allocator's, not a formula's: the command ran.

use super::{watch, WatchOptions};
use crate::backend::BoxSpec;
use crate::model::{BoxOutcome, GpuOutcome, Report};
use crate::record::sampler::SamplerConfig;
use crate::session::{PrivateBox, Session};
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What to run where.
pub struct FitPlan {
    pub argv: Vec<OsString>,
    pub specs: Vec<BoxSpec>,
    pub cadence: SamplerConfig,
    /// Set by a signal: no further box starts (the running job gets the signal itself).
    pub interrupted: Arc<AtomicBool>,
}

/// Every box of `plan`, in order; `started` and `done` are told of each.
pub fn fit_on_boxes(
    plan: &FitPlan,
    started: &mut dyn FnMut(&BoxSpec),
    done: &mut dyn FnMut(&BoxOutcome),
) -> Vec<BoxOutcome> {
    let mut out = Vec::new();
    for spec in &plan.specs {
        if plan.interrupted.load(Ordering::SeqCst) {
            break;
        }
        started(spec);
        let outcome = one_box(plan, spec);
        done(&outcome);
        out.push(outcome);
    }
    out
}

/// The driver a spec without `@DRIVER` gets here: the newest branch the simulator models
/// (R580, CUDA 13.0), whose driver API the CUDA runtime of today's PyPI PyTorch (13.x) runs
/// on; an older default would stop the user's job at "driver too old" on every box.
pub const NEWEST_DRIVER: &str = "580";

/// `spec`, on [`NEWEST_DRIVER`] unless it names its own.
fn with_driver(spec: &BoxSpec) -> Result<BoxSpec, String> {
    if spec.as_str().contains('@') {
        return Ok(spec.clone());
    }
    BoxSpec::parse(&format!("{}@{NEWEST_DRIVER}", spec.as_str())).map_err(|e| e.to_string())
}

fn one_box(plan: &FitPlan, spec: &BoxSpec) -> BoxOutcome {
    let private =
        match with_driver(spec).and_then(|s| PrivateBox::create(&s).map_err(|e| e.to_string())) {
            Ok(b) => b,
            Err(e) => return BoxOutcome::failed(spec.as_str(), &e),
        };
    let session = Session {
        backend: private.backend(),
        private_box: Some(private),
    };
    let opts = WatchOptions::command(plan.argv.clone(), plan.cadence, "vramdoc whatif");
    match watch(&session, opts) {
        Ok(w) => {
            if let Some(o) = &w.output {
                o.wait_drained();
            }
            from_run(spec.as_str(), &w.report, w.status)
        }
        Err(e) => BoxOutcome::failed(spec.as_str(), &e.to_string()),
    }
}

/// A box's row from the run report of the command on it. Pure.
pub fn from_run(spec: &str, report: &Report, status: i32) -> BoxOutcome {
    let Some(run) = report.run() else {
        return BoxOutcome::failed(spec, "the run reported nothing");
    };
    let oom = (run.errors.iter()).find(|e| e.kind.is_out_of_memory());
    let fits = status == 0 && oom.is_none();
    let (verdict, error) = match (oom, fits) {
        (Some(e), _) => ("out-of-memory", Some(e.line.clone())),
        (None, true) => ("fits", None),
        (None, false) => {
            let last = run.stderr_tail.last().cloned().unwrap_or_default();
            let why = match (&run.exit.signal_name, run.exit.code) {
                (Some(s), _) => format!("killed by {s}"),
                (_, Some(c)) => format!("exit {c}"),
                _ => format!("status {status}"),
            };
            (
                "error",
                Some(if last.is_empty() {
                    why
                } else {
                    format!("{why}: {last}")
                }),
            )
        }
    };
    let gpus = GpuOutcome::of_peaks(&run.peaks, report);
    BoxOutcome {
        spec: spec.to_string(),
        verdict: verdict.into(),
        reproduces: !fits,
        fits,
        failed_step: None,
        note: None,
        error: error.map(|l| crate::term::one_line(&l).chars().take(300).collect()),
        gpus,
    }
}
