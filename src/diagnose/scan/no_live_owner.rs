//! `no-live-owner`: used memory no live listed process accounts for, or exited PIDs NVML
//! still lists; split by what explains it ([`super::unattributed`]), seen from where vramdoc
//! stands ([`super::vantage`]), with who holds the device files ([`super::holders`]).

use super::accounting::{live_sum, unattributed_allowance};
use super::prelude::*;

/// Memory with no live owner, per device: `used` (NVML v2, already without `reserved`) minus
/// what live listed processes hold, above [`Thresholds::unattributed_min`]; or, in the host
/// PID namespace (or a container under a translating driver), NVML-listed PIDs that do not
/// exist. Under host PIDs in a container, invisible PIDs are not taken for dead (see
/// [`super::vantage::invisible_processes`]).
pub fn no_live_owner(inv: &Inventory, th: &Thresholds) -> Vec<Finding> {
    let host = inv.invisible_is_dead();
    let details = &inv.details;
    let mut out = Vec::new();
    for d in inv.devices().iter().filter(|d| d.is_counted()) {
        // Without this device's process lists there is nothing to compare with.
        if details.list_errors.contains_key(&d.index) {
            continue;
        }
        let on_dev: Vec<(&ProcessInfo, Option<u64>)> = inv
            .processes
            .iter()
            .filter_map(|p| p.usage_on(d.index).map(|u| (p, u.used)))
            .collect();
        // A PID that does not exist is dead where the lists hold only this namespace's
        // processes (`Inventory::invisible_is_dead`); under host PIDs in a container it may
        // be a live host process.
        let is_live = |p: &ProcessInfo| p.visible || !host;
        let dead: Vec<(&ProcessInfo, Option<u64>)> = on_dev
            .iter()
            .copied()
            .filter(|(p, _)| !is_live(p))
            .collect();
        let (live_sum, live_known) = live_sum(d, &inv.processes, host);
        let orphaned = d.memory.used.saturating_sub(live_sum);
        // WSL / WDDM: no process is ever listed; an empty list says nothing about owners.
        let no_data = on_dev.is_empty() && details.per_process_unavailable.is_some();
        // A device whose memory query is not supported (GB10) reports no `used` to compare.
        let bytes_rule = live_known
            && !no_data
            && d.memory_unknown.is_none()
            && orphaned > unattributed_allowance(d, th);
        if !bytes_rule && dead.is_empty() {
            continue;
        }
        // Outside the host namespace, a driver that lists only this namespace's processes.
        if let Some(f) = super::vantage::unlisted_here(inv, d, live_sum, orphaned, th)
            .filter(|_| bytes_rule && dead.is_empty())
        {
            out.push(f);
            continue;
        }
        // Exited PIDs listed in a container under a translating driver: their bytes are lost,
        // the rest is other tenants' (info), as `unattributed::split` divides it.
        let outside = super::unattributed::split(inv, d).map_or(0, |s| s.outside_namespace);
        let orphaned = if dead.is_empty() {
            orphaned
        } else {
            orphaned - outside.min(orphaned)
        };
        if !dead.is_empty() && outside > unattributed_allowance(d, th) {
            out.extend(super::vantage::unlisted_here(inv, d, live_sum, outside, th));
        }
        let mut evidence = vec![
            ev_bytes(
                format!("used on GPU {} (NVML v2, without reserved)", d.label()),
                d.memory.used,
            ),
            ev_bytes("held by live processes", live_sum),
        ];
        if live_known {
            evidence.push(ev_bytes("no live owner", orphaned));
        } else {
            evidence.push(ev(
                "no live owner",
                "unknown (per-process usage not available)",
            ));
        }
        for (p, u) in &dead {
            let mut label = format!("PID {} listed by NVML, does not exist", p.pid);
            if let Some(pod) = &p.pod {
                label.push_str(&format!(" (last seen in {})", pod.describe()));
            }
            evidence.push(match u {
                Some(b) => ev_bytes(label, *b),
                None => ev(label, "not available"),
            });
        }
        evidence.push(ev_bytes("threshold", th.unattributed_min));
        evidence.extend(owner_pods_evidence(inv, d.index));
        // Who keeps the memory alive: processes NVML does not list as live owners that hold
        // this GPU's device files (or only the control files) with a CUDA context mapped;
        // NVML clients and system monitors are listed as not holders (`super::holders`).
        let device_holders = super::holders::of_device(inv, d);
        evidence.extend(device_holders.evidence());
        let holders = device_holders.named;
        // Managed memory of a live listed process, or a coherent-memory GPU's unreclaimed
        // pages (with no exited PID listed and no other holder): information, not lost
        // memory (`unattributed::split`, which the metric uses too).
        let allowance = unattributed_allowance(d, th);
        if let Some(f) = super::unattributed::explained_finding(inv, d, &evidence, allowance) {
            out.push(f);
            continue;
        }
        evidence.extend(super::unattributed::managed_evidence(inv, d, true));
        let held_by = match holders.as_slice() {
            [] => String::new(),
            [h] => format!(
                "; held open by PID {}{}",
                h.pid,
                h.name
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ),
            many => format!("; held open by {} processes", many.len()),
        };
        let title = if live_known {
            format!(
                "GPU {}: {} used with no live owner{}{held_by}",
                d.label(),
                format_bytes(orphaned),
                if dead.is_empty() {
                    String::new()
                } else {
                    format!(" ({} exited PID(s) still listed)", dead.len())
                }
            )
        } else {
            format!(
                "GPU {}: {} exited PID(s) still listed by NVML",
                d.label(),
                dead.len()
            )
        };
        out.push(Finding {
            id: ids::NO_LIVE_OWNER.into(),
            severity: Severity::Error,
            title,
            devices: vec![d.index],
            pid: match (dead.as_slice(), holders.as_slice()) {
                ([one], _) => Some(one.0.pid),
                ([], [h]) => Some(h.pid),
                _ => None,
            },
            evidence,
            fix: fixes::NO_LIVE_OWNER.into(),
        });
    }
    out
}
