//! `fragmentation`: an out-of-memory error while PyTorch held at least the request reserved
//! but unallocated (pytorch/pytorch#29554).

use super::out_of_memory::detail_evidence;
use super::prelude::*;

/// `fragmentation`: the first out-of-memory error whose PyTorch line states a
/// reserved-but-unallocated amount at least the size of the failed request (a non-zero one):
/// the memory was there, in blocks that could not serve it. The fix suggests
/// `expandable_segments:True` only where the job's `PYTORCH_CUDA_ALLOC_CONF` does not already
/// set it (pytorch/pytorch#173049).
pub(super) fn fragmentation(cx: &Prepared) -> Vec<Finding> {
    let Some((e, d, req, spare)) = cx.ooms().find_map(|e| {
        let d = oom_detail(e)?;
        let req = d.requested.or(e.requested_bytes)?;
        let spare = d.reserved_unallocated?;
        (req > 0 && spare >= req).then_some((e, d, req, spare))
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
    evidence.push(ev("error line", e.line.clone()));
    let mut fix = fixes::FRAGMENTATION.to_string();
    fix.push_str(if conf.is_some_and(expandable_on) {
        fixes::FRAGMENTATION_ALREADY_EXPANDABLE
    } else {
        fixes::FRAGMENTATION_EXPANDABLE
    });
    vec![Finding {
        id: ids::FRAGMENTATION.into(),
        severity: Severity::Error,
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
