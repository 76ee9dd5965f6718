//! `out-of-memory`: the first allocation failure.

use super::prelude::*;

/// `out-of-memory`: the first allocation failure, where (phase), on which device, free
/// memory at that moment and the parsed error line.
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
