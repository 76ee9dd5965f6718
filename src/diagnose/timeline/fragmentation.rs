//! `fragmentation`: an out-of-memory error while PyTorch held at least the request reserved
//! but unallocated (pytorch/pytorch#29554), and a share of the GPU worth defragmenting: a few
//! MiB of cache next to a similar request on a full GPU is not the cause (issue 26).

use super::out_of_memory::detail_evidence;
use super::prelude::*;

/// Reserved-but-unallocated memory below this share of the device is not named as the cause
/// (a full GPU's cache holds that much anyway). 2 %.
pub(super) const FRAGMENTATION_MIN_FRACTION: f64 = 0.02;
/// ... nor below this, whatever the device: 256 MiB.
pub(super) const FRAGMENTATION_MIN_BYTES: u64 = 256 << 20;

/// `fragmentation`: the first out-of-memory error whose PyTorch line states a
/// reserved-but-unallocated amount at least the size of the failed request (a non-zero one):
/// the memory was there, in blocks that could not serve it. The fix suggests
/// `expandable_segments:True` only where the job's `PYTORCH_CUDA_ALLOC_CONF` does not already
/// set it (pytorch/pytorch#173049). The spare cache must also be at least
/// [`FRAGMENTATION_MIN_BYTES`] and [`FRAGMENTATION_MIN_FRACTION`] of the device (when its
/// total is known): below that the GPU is simply full. A warning when the job exited 0.
pub(super) fn fragmentation(cx: &Prepared) -> Vec<Finding> {
    let Some((e, d, req, spare)) = cx.ooms().find_map(|e| {
        let d = oom_detail(e)?;
        let req = d.requested.or(e.requested_bytes)?;
        let spare = d.reserved_unallocated?;
        let total = d
            .total
            .or_else(|| cx.error_device(e).and_then(|i| cx.dev(i)).map(|v| v.total));
        let worth = spare >= FRAGMENTATION_MIN_BYTES
            && total.is_none_or(|t| spare as f64 >= FRAGMENTATION_MIN_FRACTION * t as f64);
        (req > 0 && spare >= req && worth).then_some((e, d, req, spare))
    }) else {
        return Vec::new();
    };
    let device = cx.error_device(e);
    let conf = cx.alloc_conf(e);
    let mut evidence = vec![
        ev("when", fmt_t(e.t_ms)),
        ev_bytes("the failed allocation asked for", req),
        ev_bytes("reserved by PyTorch but unallocated", spare),
    ];
    evidence.extend(
        detail_evidence(&d)
            .into_iter()
            .filter(|x| !x.label.starts_with("reserved by PyTorch")),
    );
    evidence.push(ev(
        "PYTORCH_CUDA_ALLOC_CONF",
        conf.unwrap_or("(not seen set in the job's environment)"),
    ));
    if let Some(new) = cx.alloc_conf_new_name() {
        evidence.push(ev("PYTORCH_ALLOC_CONF", new));
    }
    evidence.push(ev("error line", e.line.clone()));
    let mut fix = fixes::FRAGMENTATION.to_string();
    let on = conf.is_some_and(expandable_on);
    fix.push_str(if on {
        fixes::FRAGMENTATION_ALREADY_EXPANDABLE
    } else {
        fixes::FRAGMENTATION_EXPANDABLE
    });
    if !on {
        fix.push_str(fixes::TORCH_ALLOC_CONF_NAMES);
    }
    let severity = if cx.rec.exit == Some(JobExit::Code(0)) {
        Severity::Warn
    } else {
        Severity::Error
    };
    vec![Finding {
        id: ids::FRAGMENTATION.into(),
        severity,
        title: format!(
            "Out of memory{} with {} reserved but unallocated by PyTorch, more than the {} asked \
             for: fragmentation",
            device.map_or(String::new(), |d| format!(" on GPU {d}")),
            format_bytes(spare),
            format_bytes(req)
        ),
        devices: device.into_iter().collect(),
        pid: e.pid,
        evidence,
        fix,
    }]
}
