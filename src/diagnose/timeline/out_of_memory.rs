//! `out-of-memory`: the first allocation failure, named with the framework that reported it
//! (the recogniser's table), its numbers, and the fix of that family; a warning when the job
//! recovered and exited 0.

use super::prelude::*;
use crate::model::RunErrorKind;
use crate::record::recognise::{Framework, LineFacts};

/// The kind the recogniser gave the line (the event's own kind is the timeline's).
fn e_kind_of(facts: &LineFacts) -> Option<RunErrorKind> {
    facts.pattern.map(|p| p.kind.clone())
}

/// The fix text for an out-of-memory error of the family the recogniser named (PyTorch's
/// per-process cap when the line states one).
fn family_fix(facts: &LineFacts, capped: bool) -> String {
    if capped {
        return fixes::OOM_FRACTION_CAP.into();
    }
    let kv = facts
        .pattern
        .is_some_and(|p| p.kind == RunErrorKind::VllmKvCache);
    match facts.pattern.map(|p| p.framework) {
        Some(Framework::TensorFlow) => fixes::OOM_TENSORFLOW.into(),
        Some(Framework::Jax) => fixes::OOM_JAX.into(),
        Some(Framework::Nccl) => fixes::OOM_NCCL.into(),
        Some(Framework::LlamaCpp) => fixes::OOM_LLAMA_CPP.into(),
        Some(Framework::TensorRt | Framework::TensorRtLlm) => fixes::OOM_TENSORRT.into(),
        Some(Framework::PaddlePaddle) => fixes::OOM_PADDLE.into(),
        Some(Framework::Tgi) => fixes::OOM_TGI.into(),
        Some(Framework::OnnxRuntime) => fixes::OOM_ONNXRUNTIME.into(),
        Some(Framework::Mxnet) => fixes::OOM_MXNET.into(),
        Some(Framework::Vllm) if kv => fixes::OOM_VLLM_KV.into(),
        Some(Framework::Sglang) => fixes::OOM_SGLANG.into(),
        _ => fixes::OUT_OF_MEMORY.into(),
    }
}

/// `out-of-memory`: the first allocation failure, where (phase), on which device, free
/// memory at that moment, the parsed error line and every number it states (the title says
/// when other processes held more than the failing one).
pub(super) fn out_of_memory(cx: &Prepared) -> Vec<Finding> {
    let mut ooms = cx.ooms();
    let Some(e) = ooms.next() else {
        return Vec::new();
    };
    let more = ooms.count();
    // The job went on and finished: every error was recovered from.
    let recovered = cx.rec.exit == Some(JobExit::Code(0));
    let device = cx.error_device(e);
    let dev = device.and_then(|d| cx.dev(d));
    let mut evidence = vec![ev("when", fmt_t(e.t_ms))];
    // What other processes held on the device then (`None`: not known).
    let mut others_then: Option<(u64, u64)> = None;
    if let Some(p) = cx.phase_at(e.t_ms) {
        evidence.push(ev("during", p));
    }
    let mut title = format!("Out of memory at {}", fmt_t(e.t_ms));
    if let Some(d) = dev {
        evidence.push(ev(
            "device",
            if e.device.is_some() {
                d.label()
            } else {
                format!(
                    "{} (not named by the error: the job's GPU with least free)",
                    d.label()
                )
            },
        ));
        if let Some(used) = d.level_at(e.t_ms) {
            let free = d.total.saturating_sub(used);
            evidence.push(ev_bytes("total", d.total));
            evidence.push(ev_bytes("used at that moment", used));
            evidence.push(ev_bytes("free at that moment", free));
            // Per-process lists lag the device: the job's holding at its last listing.
            if let Some(job) = cx.tree_usage_at(d.index, e.t_ms) {
                others_then = Some((used.saturating_sub(job), d.total));
                evidence.push(ev_bytes("held by the job's processes (last listing)", job));
                evidence.push(ev_bytes(
                    "held by other processes and the driver (used - the job's)",
                    used.saturating_sub(job),
                ));
            }
            title = format!(
                "Out of memory on GPU {} at {} ({} free of {})",
                d.name,
                fmt_t(e.t_ms),
                format_bytes(free),
                format_bytes(d.total)
            );
        }
    }
    if let Some(r) = e.requested_bytes {
        evidence.push(ev_bytes("the failed allocation asked for", r));
    }
    let facts = e.facts();
    if let Some(p) = facts.pattern {
        evidence.push(ev(
            "recognised as",
            format!("{} ({}; {})", p.framework.name(), p.id, p.source),
        ));
    }
    if let Some((limit, in_use)) = facts.bfc {
        evidence.push(ev_bytes("TensorFlow's allocator limit (BFC Limit)", limit));
        if let Some(u) = in_use {
            evidence.push(ev_bytes("in use by TensorFlow's allocator (BFC InUse)", u));
        }
    }
    let detail = oom_detail(e);
    let cap = detail.as_ref().and_then(|d| d.allowed);
    if let Some(d) = detail {
        evidence.extend(detail_evidence(&d));
        // Say so in one line when others held more than the failing process did.
        if let (Some(others), Some(own)) = (d.other_processes(), d.process_in_use) {
            if others > own && others >= d.total.unwrap_or(0) / 4 {
                title.push_str(&format!(
                    "; other processes held {}, this process {}",
                    format_bytes(others),
                    format_bytes(own)
                ));
            }
        }
    }
    if let Some(pid) = e.pid {
        evidence.push(ev("process", cx.who(pid)));
    }
    evidence.push(ev("error line", e.line.clone()));
    if more > 0 {
        evidence.push(ev("further out-of-memory errors", more.to_string()));
    }
    if let Some(c) = cap {
        title.push_str(&format!(
            ": PyTorch's per-process cap ({} allowed) was reached, not the GPU",
            format_bytes(c)
        ));
    }
    let mut fix = family_fix(&facts, cap.is_some());
    if matches!(
        e_kind_of(&facts),
        Some(RunErrorKind::VllmKvCache | RunErrorKind::VllmNoCacheBlocks)
    ) {
        // Raising the utilisation is safe only where nothing else uses the GPU.
        match others_then {
            Some((others, total)) if others.saturating_mul(20) <= total => {
                fix.push_str(&format!(
                    " Other processes held {} of this GPU then: raising \
                     --gpu-memory-utilization is safe here.",
                    format_bytes(others)
                ));
            }
            Some((others, _)) => fix.push_str(&format!(
                " Other processes held {} of this GPU then: do not raise \
                 --gpu-memory-utilization; lower --max-model-len or free the GPU.",
                format_bytes(others)
            )),
            None => {}
        }
    }
    // A vLLM start-up that failed for memory: the plan command with the flags its line says fit.
    if let Some(hint) = e_kind_of(&facts)
        .as_ref()
        .and_then(|k| super::vllm_plan::plan_hint(&e.line, k))
    {
        fix.push_str(&hint);
    }
    let severity = if recovered {
        evidence.push(ev("recoveries", (more + 1).to_string()));
        evidence.push(ev("job", "finished with exit status 0"));
        title = format!(
            "{} out-of-memory error{} recovered from; the job finished (exit 0). First: {}",
            more + 1,
            if more == 0 { "" } else { "s" },
            title
        );
        fix = format!("{} {}", fixes::OOM_RECOVERED, fix);
        Severity::Warn
    } else {
        Severity::Error
    };
    vec![Finding {
        id: ids::OUT_OF_MEMORY.into(),
        severity,
        title,
        devices: device.into_iter().collect(),
        pid: e.pid,
        evidence,
        fix,
    }]
}

/// The numbers a PyTorch out-of-memory line states, as evidence.
pub(super) fn detail_evidence(d: &crate::record::stderr::OomDetail) -> Vec<Evidence> {
    let mut out = Vec::new();
    let mut push = |label: &str, v: Option<u64>| {
        if let Some(v) = v {
            out.push(ev_bytes(label, v));
        }
    };
    push("total, as the process saw it", d.total);
    push("free, as the error states", d.free);
    push(
        "in use by this process (PyTorch's and not)",
        d.process_in_use,
    );
    push("allocated by PyTorch (live tensors)", d.allocated);
    push(
        "reserved by PyTorch but unallocated (fragmentation)",
        d.reserved_unallocated,
    );
    push("non-PyTorch memory of this process", d.non_pytorch());
    push("allowed by the per-process cap", d.allowed);
    push(
        "other processes (total - free - in use by this process)",
        d.other_processes(),
    );
    if d.process_in_use == Some(0) {
        out.push(ev(
            "this process has 0 bytes memory in use",
            "the driver could not attribute memory to the process (as in some containers): \
             the job's own memory is not counted as other processes'",
        ));
    }
    for (pid, b) in &d.listed_processes {
        out.push(ev_bytes(format!("process {pid} in use (as listed)"), *b));
    }
    out
}
