//! `vramdoc plan vllm MODEL_DIR` (issue 35): flags → the model directory (headers only) →
//! the scan engine on the session's GPUs → [`crate::plan::plan_vllm`] → the plan (table or
//! `--json`) → exit 0 starts, 1 does not, 2 bad flags or model directory, 3 environment.

use super::Session;
use crate::cli::{KvCacheDtype, PlanCommand, VllmPlanArgs};
use crate::exit::UsageError;
use crate::inventory;
use crate::plan::{self, VllmOptions};
use crate::scan::ScanConfig;
use anyhow::Result;

pub fn run(session: &Session, cmd: &PlanCommand) -> Result<i32> {
    match cmd {
        PlanCommand::Vllm(args) => vllm(session, args),
    }
}

fn vllm(session: &Session, args: &VllmPlanArgs) -> Result<i32> {
    let version =
        plan::Version::parse(&args.vllm_version).map_err(|e| UsageError(format!("plan: {e}")))?;
    // The model first: a bad directory is refused before the GPUs are looked at.
    let model = plan::model::read(&args.model_dir).map_err(|e| UsageError(format!("plan: {e}")))?;
    let monitor = super::session::guarded_monitor(session)?;
    let cfg = ScanConfig::with_defaults(session.sim_spec(), inventory::establish_vantage()?);
    let report = crate::scan::scan(monitor.as_ref(), &cfg)?;
    let gpus = select(args, &report)?;
    let opts = VllmOptions {
        vllm_version: version.label(),
        tensor_parallel_size: args.tp,
        pipeline_parallel_size: args.pp,
        max_model_len: args.max_model_len,
        gpu_memory_utilization: args
            .gpu_memory_utilization
            .unwrap_or_else(|| version.default_utilization()),
        kv_cache_dtype: match args.kv_cache_dtype {
            KvCacheDtype::Auto => "auto".into(),
            KvCacheDtype::Fp8 => "fp8".into(),
        },
        max_num_seqs: args.max_num_seqs,
        max_num_batched_tokens: args.max_num_batched_tokens,
        enforce_eager: args.enforce_eager,
        version,
    };
    let p = plan::plan_vllm(&report, &gpus, &model, &opts)
        .map_err(|e| UsageError(format!("plan: {e}")))?;
    if args.json {
        crate::term::print_json(&serde_json::to_string_pretty(&p)?)?;
    } else {
        crate::term::print(&crate::report::terminal::plan::render(&p))?;
    }
    Ok(if p.starts {
        crate::exit::OK
    } else {
        crate::exit::FINDINGS
    })
}

/// `--gpus`, else `CUDA_VISIBLE_DEVICES` (what vLLM itself would use), else every GPU; in
/// the order given (vLLM's rank order).
fn select(args: &VllmPlanArgs, report: &crate::model::Report) -> Result<Vec<u32>, UsageError> {
    let uuids: Vec<String> = report
        .environment
        .devices
        .iter()
        .map(|d| d.uuid.clone())
        .collect();
    let given = match &args.gpus {
        Some(v) => Some(("--gpus".to_string(), v.clone())),
        None => std::env::var("CUDA_VISIBLE_DEVICES")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| ("CUDA_VISIBLE_DEVICES".to_string(), v)),
    };
    match given {
        Some((source, value)) => crate::preflight::resolve(&source, &value, &uuids)
            .map(|s| s.devices)
            .map_err(|e| UsageError(format!("plan: {e}"))),
        None => Ok(report.devices().iter().map(|d| d.index).collect()),
    }
}
