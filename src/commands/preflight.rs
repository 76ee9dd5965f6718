//! `vramdoc preflight` (issue 18): flags → the scan engine → [`crate::preflight::judge`] on
//! the GPUs the job was given → one line (or `--json`) → exit 0 ok, 1 problem, 2 unknown
//! (the GPU list cannot be resolved), 3 environment. A Slurm prolog and a Node Problem
//! Detector custom plugin run it as it is (docs/fleet.md).

use super::Session;
use crate::cli::PreflightArgs;
use crate::diagnose::Thresholds;
use crate::exit::UsageError;
use crate::inventory;
use crate::preflight::{self, Selection, GPU_SOURCES};
use crate::scan::ScanConfig;
use anyhow::Result;

pub fn run(session: &Session, args: &PreflightArgs) -> Result<i32> {
    // Every NVML call under the per-GPU deadline: a hung GPU is a problem, not a hang.
    let monitor = crate::record::lanes::Deadlined::boxed(session.monitor()?);
    let cfg = ScanConfig {
        sim_spec: session.sim_spec(),
        pid_namespace: inventory::detect_pid_namespace()?,
        thresholds: Thresholds::default(),
        pods: Default::default(),
        lists: Default::default(),
    };
    let report = crate::scan::scan(monitor.as_ref(), &cfg)?;
    let uuids: Vec<String> = report
        .environment
        .devices
        .iter()
        .map(|d| d.uuid.clone())
        .collect();
    let selection = select(args, &uuids)?;
    let verdict = preflight::judge(&report, selection, args.need);
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

/// `--gpus`, else the first of [`GPU_SOURCES`] set in the environment, else every GPU.
fn select(args: &PreflightArgs, uuids: &[String]) -> Result<Selection, UsageError> {
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
        Some((source, value)) => preflight::resolve(&source, &value, uuids)
            .map_err(|e| UsageError(format!("preflight: {e}"))),
        None => Ok(Selection {
            devices: (0..uuids.len() as u32).collect(),
            source: "all GPUs".into(),
        }),
    }
}
