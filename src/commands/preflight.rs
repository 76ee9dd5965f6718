//! `vramdoc preflight` (issue 18): flags → the scan engine → [`crate::preflight::judge`] on
//! the GPUs the job was given → one line (or `--json`) → exit 0 ok, 1 problem, 2 unknown
//! (the GPU list cannot be resolved), 3 environment. A Slurm prolog and a Node Problem
//! Detector custom plugin run it as it is (docs/fleet.md).

use super::Session;
use crate::cli::PreflightArgs;
use crate::exit::UsageError;
use crate::inventory;
use crate::preflight::{self, Selection, GPU_SOURCES};
use crate::scan::ScanConfig;
use anyhow::Result;

pub fn run(session: &Session, args: &PreflightArgs) -> Result<i32> {
    // Every NVML call under the per-GPU deadline: a hung GPU is a problem, not a hang.
    let monitor = super::session::guarded_monitor(session)?;
    let cfg = ScanConfig::with_defaults(session.sim_spec(), inventory::establish_vantage()?);
    let report = crate::scan::scan(monitor.as_ref(), &cfg)?;
    let uuids: Vec<String> = report
        .environment
        .devices
        .iter()
        .map(|d| d.uuid.clone())
        .collect();
    let (selection, list) = select(args, &report.environment.devices, &uuids)?;
    let mut ctx = preflight::job_context(&selection, list.as_deref(), |k| std::env::var(k).ok());
    ctx.strict_graphics = args.strict_graphics;
    if args.shared {
        ctx.shared = Some("--shared".into());
    }
    let mut verdict = preflight::apply_context(
        preflight::judge(&report, selection.clone(), args.need),
        &ctx,
    );
    // A previous job's processes may still be tearing down: look again within the grace.
    let until = std::time::Instant::now() + args.grace;
    while preflight::may_clear(&verdict) && std::time::Instant::now() < until {
        std::thread::sleep(GRACE_STEP.min(until - std::time::Instant::now()));
        let again = crate::scan::scan(monitor.as_ref(), &cfg)?;
        verdict =
            preflight::apply_context(preflight::judge(&again, selection.clone(), args.need), &ctx);
    }
    if args.json {
        crate::term::print_json(&serde_json::to_string_pretty(&verdict)?)?;
    } else {
        crate::term::print(&verdict.line())?;
    }
    Ok(if verdict.ok() {
        crate::exit::OK
    } else {
        crate::exit::FINDINGS
    })
}

/// How often the grace looks again.
const GRACE_STEP: std::time::Duration = std::time::Duration::from_millis(200);

/// `--gpus`, else the first of [`GPU_SOURCES`] set in the environment, else every GPU; and
/// the list's text.
fn select(
    args: &PreflightArgs,
    devices: &[crate::gpu::DeviceInfo],
    uuids: &[String],
) -> Result<(Selection, Option<String>), UsageError> {
    let given = match &args.gpus {
        Some(v) => Some(("--gpus".to_string(), v.clone())),
        None => GPU_SOURCES.iter().find_map(|k| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .map(|v| (k.to_string(), v))
        }),
    };
    match given {
        Some((source, value)) => {
            let sel = if source.starts_with("SLURM_") {
                preflight::resolve_slurm(&source, &value, devices, uuids)
            } else {
                preflight::resolve(&source, &value, uuids)
            };
            sel.map(|s| (s, Some(value)))
        }
        .map_err(|e| UsageError(format!("preflight: {e}"))),
        None => Ok((
            Selection {
                devices: (0..uuids.len() as u32).collect(),
                source: preflight::ALL_GPUS.into(),
            },
            None,
        )),
    }
}
