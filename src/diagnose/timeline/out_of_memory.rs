//! `out-of-memory`: the first allocation failure.

use super::prelude::*;

/// `out-of-memory`: the first allocation failure, where (phase), on which device, free
/// memory at that moment, the parsed error line and every number it states (the title says
/// when other processes held more than the failing one).
pub(super) fn out_of_memory(cx: &Prepared) -> Vec<Finding> {
    let mut ooms = cx.ooms();
    let Some(e) = ooms.next() else {
        return Vec::new();
    };
    let more = ooms.count();
    let device = cx.error_device(e);
    let dev = device.and_then(|d| cx.dev(d));
    let mut evidence = vec![ev("when", fmt_t(e.t_ms))];
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
                evidence.push(ev_bytes("held by the job's processes (last listing)", job));
                evidence.push(ev_bytes(
                    "held by other processes and the driver (used - the job's)",
                    used.saturating_sub(job),
                ));
            }
            title = format!(
                "Out of memory on GPU {} at {} ({} free of {})",
                d.index,
                fmt_t(e.t_ms),
                format_bytes(free),
                format_bytes(d.total)
            );
        }
    }
    if let Some(r) = e.requested_bytes {
        evidence.push(ev_bytes("the failed allocation asked for", r));
    }
    if let Some(d) = oom_detail(e) {
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
    vec![Finding {
        id: ids::OUT_OF_MEMORY.into(),
        severity: Severity::Error,
        title,
        devices: device.into_iter().collect(),
        pid: e.pid,
        evidence,
        fix: fixes::OUT_OF_MEMORY.into(),
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
    push(
        "other processes (total - free - in use by this process)",
        d.other_processes(),
    );
    for (pid, b) in &d.listed_processes {
        out.push(ev_bytes(format!("process {pid} in use (as listed)"), *b));
    }
    out
}
