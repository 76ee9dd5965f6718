//! `stray-context` over time: scan's rule on the most each process of the job held.

use super::prelude::*;
use crate::diagnose::devset::GpuRef;
use crate::inventory::{CVD_UNKNOWN, CVD_UNSET};
use crate::model::{ProcessDeviceUsage, ProcessInfo};

/// `stray-context`, over time: scan's rule ([`crate::diagnose::stray::stray_context_of`]) applied to
/// the most each process of the job held on each device during the recording.
pub(super) fn stray_context(cx: &Prepared) -> Vec<Finding> {
    // UUIDs, names and minors by physical index (CUDA_VISIBLE_DEVICES maps onto positions
    // in this list).
    let n = cx
        .rec
        .devices
        .iter()
        .map(|d| d.index)
        .chain(cx.devs.iter().map(|d| d.index))
        .max()
        .map_or(0, |m| m as usize + 1)
        .min(1024);
    let mut gpus_info = vec![GpuRef::default(); n];
    for d in &cx.rec.devices {
        if let Some(u) = gpus_info.get_mut(d.index as usize) {
            *u = GpuRef {
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                minor: d.minor,
            };
        }
    }
    let mut out = Vec::new();
    for rp in cx.rec.processes.iter().filter(|p| p.in_tree) {
        let Some(per_dev) = cx.procs.get(&rp.pid) else {
            continue;
        };
        let mut peaks: Vec<ProcessDeviceUsage> = Vec::new();
        let mut seen: Vec<(u32, f64, f64)> = Vec::new();
        for (d, s) in per_dev {
            let held: Vec<&(f64, Option<u64>)> =
                s.iter().filter(|(_, u)| u.is_some_and(|u| u > 0)).collect();
            let peak = s.iter().filter_map(|(_, u)| *u).max();
            if held.is_empty() && peak.is_some() {
                continue; // listed with 0 only (or after exit): not on this device.
            }
            if let (Some(a), Some(b)) = (held.first(), held.last()) {
                seen.push((*d, a.0, b.0));
            }
            peaks.push(ProcessDeviceUsage {
                device: *d,
                used: peak,
                lists: Vec::new(),
            });
        }
        let raw_cvd = rp.cuda_visible_devices.as_deref();
        let ambiguous = raw_cvd.is_some_and(|c| {
            crate::diagnose::visibility::index_order_ambiguous(
                c,
                rp.gpu_env.cuda_device_order.as_deref(),
                cx.rec.devices.iter().map(|d| d.name.as_str()),
            )
        });
        let cvd = match raw_cvd {
            Some(c) if !ambiguous => c.to_string(),
            Some(_) => CVD_UNKNOWN.to_string(),
            None => CVD_UNSET.to_string(),
        };
        let view = ProcessInfo {
            pid: rp.pid,
            visible: true,
            user: None,
            name: rp.name.clone(),
            cmdline: None,
            cuda_visible_devices: cvd,
            container: None,
            pod: None,
            devices: peaks,
        };
        let Some(mut f) = crate::diagnose::stray::stray_context_of(
            &view,
            Some(&rp.gpu_env),
            &gpus_info,
            cx.th.context_sized_max,
            cx.th.main_work_min,
        ) else {
            continue;
        };
        f.title.push_str(" (peak over the recording)");
        if ambiguous {
            f.evidence.push(ev(
                "CUDA_VISIBLE_DEVICES (not used: CUDA_DEVICE_ORDER is not PCI_BUS_ID on a \
                 mixed box)",
                raw_cvd.unwrap_or_default(),
            ));
        }
        for d in f.devices.clone() {
            if let Some(dv) = cx.dev(d) {
                f.evidence.extend(uuid_ev(dv));
            }
            if let Some((_, a, b)) = seen.iter().find(|(x, _, _)| *x == d) {
                f.evidence.push(ev(
                    format!("held on GPU {d}"),
                    format!(
                        "from {} to {} ({} in all)",
                        fmt_t(*a),
                        fmt_t(*b),
                        fmt_t(b - a)
                    ),
                ));
            }
        }
        // Branch (a) of the rule already shows it ("... (its container's GPUs)").
        let shown = f
            .evidence
            .iter()
            .any(|e| e.label.starts_with("NVIDIA_VISIBLE_DEVICES"));
        if let (Some(n), false) = (&rp.gpu_env.nvidia_visible_devices, shown) {
            f.evidence.push(ev("NVIDIA_VISIBLE_DEVICES", n.clone()));
        }
        out.push(f);
    }
    out
}
