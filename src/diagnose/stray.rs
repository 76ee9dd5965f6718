//! The stray-context decision for one process, shared by the scan rule
//! ([`super::scan::stray_context`], on one snapshot) and the timeline's
//! ([`super::timeline`], on the per-device peaks of a recording): a process on a physical
//! device outside its `CUDA_VISIBLE_DEVICES`, or a context-sized footprint on one device
//! while its main work is on another (OneDiff).

use super::devset::{device_set, DeviceSet, GpuRef};
use super::evidence::{ev, ev_bytes, gpus, who};
use super::fixes;
use super::ids;
use super::usage::{is_peer_listing, known};
use crate::inventory::{GpuEnv, CVD_UNKNOWN, CVD_UNSET};
use crate::model::{Finding, ProcessInfo, Severity};
use crate::units::format_bytes;

/// The stray-context rule for one process and one view of its usage per device: scan's
/// snapshot, or the per-device peaks of a recorded timeline ([`super::timeline`]), which
/// then adds its own evidence (UUIDs, times). `gpus`: UUID, name and minor by physical
/// index; `env`: what else decides its GPUs (its device files and cgroup, Slurm's GPUs,
/// `NVIDIA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`), when known: its device set
/// ([`super::devset`]).
pub(crate) fn stray_context_of(
    p: &ProcessInfo,
    env: Option<&GpuEnv>,
    gpus_info: &[GpuRef],
    context_sized_max: u64,
    main_work_min: u64,
) -> Option<Finding> {
    let cvd = p.cuda_visible_devices.as_str();
    // MIG instance UUIDs name slices, not GPUs: the mapping cannot be checked here.
    let mig = cvd.to_ascii_uppercase().contains("MIG-");
    let nvd = env.and_then(|e| e.nvidia_visible_devices.as_deref());
    let cvd_known = cvd != CVD_UNKNOWN && !mig && (cvd != CVD_UNSET || nvd.is_some());
    // (a) outside CUDA_VISIBLE_DEVICES (within the GPUs mounted into its container).
    let on: Vec<u32> = p.devices.iter().map(|u| u.device).collect();
    let set = if cvd_known {
        device_set(cvd, env, gpus_info, p.container.is_some(), &on).ok()
    } else {
        None
    };
    if let Some(DeviceSet { allowed, basis }) = set {
        let outside: Vec<&crate::model::ProcessDeviceUsage> = p
            .devices
            .iter()
            .filter(|u| !is_peer_listing(u) && !allowed.contains(&u.device))
            .collect();
        if !outside.is_empty() {
            let devs: Vec<u32> = outside.iter().map(|u| u.device).collect();
            let mut evidence = vec![ev("CUDA_VISIBLE_DEVICES", cvd)];
            if let Some(v) = nvd {
                evidence.push(ev("NVIDIA_VISIBLE_DEVICES (its container's GPUs)", v));
            }
            if let Some(o) = env.and_then(|e| e.cuda_device_order.as_deref()) {
                evidence.push(ev("CUDA_DEVICE_ORDER", o));
            }
            evidence.extend(basis.into_iter().map(|(l, v)| ev(l, v)));
            evidence.push(ev(
                "physical GPUs it can see",
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    gpus(&allowed)
                },
            ));
            for u in p.devices.iter().filter(|u| !is_peer_listing(u)) {
                let label = format!("used on GPU {}", u.device);
                evidence.push(match u.used {
                    Some(b) => ev_bytes(label, b),
                    None => ev(label, "not available"),
                });
            }
            let held: u64 = outside.iter().filter_map(|u| u.used).sum();
            return Some(Finding {
                id: ids::STRAY_CONTEXT.into(),
                severity: Severity::Warn,
                title: format!(
                    "{} holds {} on GPU {} outside its CUDA_VISIBLE_DEVICES={cvd}",
                    who(p),
                    format_bytes(held),
                    gpus(&devs)
                ),
                devices: devs,
                pid: Some(p.pid),
                evidence,
                fix: fixes::STRAY_CONTEXT.into(),
            });
        }
    }
    // (b) context-sized footprint beside the main work (OneDiff pattern).
    let k: Vec<(u32, u64)> = known(p).into_iter().filter(|(_, b)| *b > 0).collect();
    if k.len() < 2 {
        return None;
    }
    let &(main_dev, main_used) = k.iter().max_by_key(|(d, b)| (*b, u32::MAX - *d))?;
    if main_used <= main_work_min {
        return None;
    }
    let stray: Vec<(u32, u64)> = k
        .iter()
        .copied()
        .filter(|(d, b)| *d != main_dev && *b <= context_sized_max)
        .collect();
    if stray.is_empty() {
        return None;
    }
    let devs: Vec<u32> = stray.iter().map(|(d, _)| *d).collect();
    let mut evidence = vec![ev_bytes(format!("main work on GPU {main_dev}"), main_used)];
    for (d, b) in &stray {
        evidence.push(ev_bytes(format!("context-sized footprint on GPU {d}"), *b));
    }
    evidence.push(ev_bytes("context-sized means at most", context_sized_max));
    evidence.push(ev("CUDA_VISIBLE_DEVICES", cvd));
    let stray_total: u64 = stray.iter().map(|(_, b)| *b).sum();
    Some(Finding {
        id: ids::STRAY_CONTEXT.into(),
        severity: Severity::Warn,
        title: format!(
            "{} has a stray {} context on GPU {} while its work is on GPU {main_dev}",
            who(p),
            format_bytes(stray_total),
            gpus(&devs)
        ),
        devices: devs,
        pid: Some(p.pid),
        evidence,
        fix: fixes::STRAY_CONTEXT.into(),
    })
}
