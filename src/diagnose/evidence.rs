//! The evidence helpers every diagnosis rule shares (scan rules, the allocation audit, the
//! timeline fingerprints): an [`Evidence`] line with or without bytes, how a process and a
//! list of GPUs are named, and the pods behind a GPU's memory. Below `rules` and `pods`, so
//! neither imports the other.

use crate::inventory::Inventory;
use crate::model::{Evidence, ProcessInfo};
use crate::pods::device_of_id;
use crate::units::format_bytes;

pub(crate) fn ev_bytes(label: impl Into<String>, bytes: u64) -> Evidence {
    Evidence {
        label: label.into(),
        value: format_bytes(bytes),
        bytes: Some(bytes),
    }
}

pub(crate) fn ev(label: impl Into<String>, value: impl Into<String>) -> Evidence {
    Evidence {
        label: label.into(),
        value: value.into(),
        bytes: None,
    }
}

pub(crate) fn who(p: &ProcessInfo) -> String {
    match &p.name {
        Some(n) => format!("PID {} ({n})", p.pid),
        None => format!("PID {}", p.pid),
    }
}

pub(crate) fn gpus(list: &[u32]) -> String {
    let v: Vec<String> = list.iter().map(|d| d.to_string()).collect();
    v.join(", ")
}

/// Evidence for memory with no live owner on GPU `device`: the pods whose processes held
/// memory there in this scan, and the containers the kubelet allocated that GPU to — the pod
/// a dead process's memory most likely belongs to (an exclusive allocation names one).
pub(crate) fn owner_pods_evidence(inv: &Inventory, device: u32) -> Vec<Evidence> {
    let devices = inv.devices();
    let mut out = Vec::new();
    let allocated: Vec<String> = inv
        .details
        .pod_allocations
        .iter()
        .filter(|a| {
            a.device_ids
                .iter()
                .any(|i| device_of_id(i, devices) == Some(device))
        })
        .map(|a| format!("{}/{} (container {})", a.namespace, a.pod, a.container))
        .collect();
    if !allocated.is_empty() {
        out.push(ev(
            format!("GPU {device} allocated by the kubelet to"),
            allocated.join(", "),
        ));
    }
    out
}
