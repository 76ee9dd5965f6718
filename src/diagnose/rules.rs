//! The scan rules, one function each. Every rule is pure: inventory in, findings out.

use super::devset::{device_set, DeviceSet, GpuRef};
pub(crate) use super::visibility::index_order_ambiguous;

use super::evidence::{ev, ev_bytes, gpus, owner_pods_evidence, who};
use super::{fixes, ids, Thresholds};
use crate::gpu::DeviceInfo;
use crate::inventory::{GpuEnv, Inventory, CVD_UNKNOWN, CVD_UNSET};
use crate::model::{Evidence, Finding, Headroom, ProcessInfo, Severity};
use crate::units::format_bytes;

/// A 0-byte entry: NVML lists a process on every GPU whose memory it maps, with 0 bytes,
/// once NCCL (or any CUDA IPC / peer access) maps peer memory — every DDP rank shows on
/// every GPU of the job (pytorch/pytorch#64130). It is not a context of that process there.
pub(crate) fn is_peer_listing(u: &crate::model::ProcessDeviceUsage) -> bool {
    u.used == Some(0)
}

/// `(device, bytes)` for every device where the process's usage is known.
pub(super) fn known(p: &ProcessInfo) -> Vec<(u32, u64)> {
    p.devices
        .iter()
        .filter_map(|u| u.used.map(|b| (u.device, b)))
        .collect()
}

/// Stray contexts: a process on a physical device outside its `CUDA_VISIBLE_DEVICES`, or a
/// context-sized footprint on one device while its main work is on another (OneDiff).
/// At most one finding per process.
pub fn stray_context(inv: &Inventory, th: &Thresholds) -> Vec<Finding> {
    let gpus_info: Vec<GpuRef> = inv.devices().iter().map(GpuRef::of).collect();
    inv.processes
        .iter()
        .filter_map(|p| {
            stray_context_of(
                p,
                inv.details.gpu_env.get(&p.pid),
                &gpus_info,
                th.context_sized_max,
                th.main_work_min,
            )
        })
        .collect()
}

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

/// Memory with no live owner, per device: `used` (NVML v2, already without `reserved`) minus
/// what live listed processes hold, above [`Thresholds::unattributed_min`]; or, in the host
/// PID namespace (or a container under a translating driver), NVML-listed PIDs that do not
/// exist. Under host PIDs in a container, invisible PIDs are not taken for dead (see
/// [`invisible_processes`]).
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

/// Used bytes that may have no listed owner without being lost: [`Thresholds::unattributed_min`],
/// plus, where the driver reports no `reserved` (NVML v1 on drivers before R510, where
/// `used` includes the driver's own reservation: nvml.h, `nvmlMemory_v2_t`), an allowance
/// for that reservation (2 % of total, at least 512 MiB).
fn unattributed_allowance(d: &DeviceInfo, th: &Thresholds) -> u64 {
    if d.memory.reserved > 0 {
        th.unattributed_min
    } else {
        th.unattributed_min + (d.memory.total / 50).max(512 << 20)
    }
}

/// System daemons and GPU monitors that keep the driver's device files open by design
/// (persistence daemon, DCGM host engine and exporter, the Kubernetes device plugin and
/// feature discovery, exporters, `nvidia-smi`, interactive monitors, vramdoc itself). Names
/// as the kernel's 15-byte `comm` shows them.
pub(crate) fn is_system_monitor(name: &str) -> bool {
    const KNOWN: &[&str] = &[
        "nvidia-persistenced",
        "nv-hostengine",
        "dcgm-exporter",
        "dcgmi",
        "nvidia-device-plugin",
        "gpu-feature-discovery",
        "nvidia_gpu_exporter",
        "nvidia-smi",
        "nvitop",
        "gpustat",
        "nvtop",
        "nvidia-dcgm",
    ];
    let n = name.trim();
    KNOWN.iter().any(|k| {
        let comm = &k[..k.len().min(15)];
        n == *k || n == comm
    })
}

/// Processes whose per-device usage NVML reports as "not available".
pub fn usage_unavailable(inv: &Inventory) -> Vec<Finding> {
    let mut pairs: Vec<String> = Vec::new();
    let mut devs: Vec<u32> = Vec::new();
    for p in &inv.processes {
        for u in p.devices.iter().filter(|u| u.used.is_none()) {
            pairs.push(format!("PID {} on GPU {}", p.pid, u.device));
            devs.push(u.device);
        }
    }
    if let Some((zero, on, why)) = super::vantage::zero_usage_entries(inv) {
        pairs.extend(zero);
        devs.extend(on);
        pairs.push(why);
    }
    if let Some(why) = &inv.details.per_process_unavailable {
        for d in inv.devices().iter().filter(|d| d.is_counted()) {
            let listed = inv.processes.iter().any(|p| p.usage_on(d.index).is_some());
            if !listed && d.memory.used > 0 {
                pairs.push(format!(
                    "GPU {}: {} used, no process listed",
                    d.index,
                    format_bytes(d.memory.used)
                ));
                devs.push(d.index);
            }
        }
        if !pairs.is_empty() {
            pairs.push(why.clone());
        }
    }
    if pairs.is_empty() {
        return Vec::new();
    }
    devs.sort_unstable();
    devs.dedup();
    vec![Finding {
        id: ids::USAGE_UNAVAILABLE.into(),
        severity: Severity::Info,
        title: format!(
            "Attribution incomplete: NVML reports no per-process memory for {} entries",
            pairs.len()
        ),
        devices: devs,
        pid: None,
        evidence: vec![ev("not available", pairs.join(", "))],
        fix: fixes::USAGE_UNAVAILABLE.into(),
    }]
}

/// Room for a new vLLM-style engine on every device: its budget `u x total` must fit in
/// `total - used_by_others - reserved - context_reserve`.
pub fn headroom(inv: &Inventory, th: &Thresholds) -> Vec<Headroom> {
    inv.devices()
        .iter()
        .filter(|d| d.is_counted() && d.memory_unknown.is_none())
        .map(|d| device_headroom(d, th))
        .collect()
}

pub fn device_headroom(d: &DeviceInfo, th: &Thresholds) -> Headroom {
    let m = d.memory;
    let available = m
        .total
        .saturating_sub(m.used)
        .saturating_sub(m.reserved)
        .saturating_sub(th.context_reserve);
    let ratio = if m.total == 0 {
        0.0
    } else {
        available as f64 / m.total as f64
    };
    // Rounded down to 0.01 (integer arithmetic, so 0.62999 never becomes 0.63).
    let hundredths = if m.total == 0 {
        0
    } else {
        ((available as u128 * 100) / m.total as u128) as u64
    };
    let max = hundredths as f64 / 100.0;
    let arithmetic = format!(
        "({} total - {} used - {} reserved - {} context) / {} total = {:.4} -> {:.2}",
        format_bytes(m.total),
        format_bytes(m.used),
        format_bytes(m.reserved),
        format_bytes(th.context_reserve),
        format_bytes(m.total),
        ratio,
        max
    );
    Headroom {
        device: d.index,
        total: m.total,
        reserved: m.reserved,
        used_by_others: m.used,
        context_reserve: th.context_reserve,
        available,
        max_gpu_memory_utilization: max,
        arithmetic,
    }
}

/// Low headroom per device, from one snapshot. A GPU kept nearly full is usually a steady
/// state: one engine or caching allocator at its configured fill (vLLM claims
/// `gpu_memory_utilization` × total at start, 0.9 by default), or several at fixed budgets
/// (two engines at 0.45 each, time-sliced pods): info, with the arithmetic for whoever wants
/// to add a process. One snapshot cannot tell growth from a steady state, so it warns only
/// when the GPU is out of room: two or more independent claimants, each holding more than a
/// context ([`Thresholds::context_sized_max`]), and less free than a new context needs
/// ([`Thresholds::context_reserve`]) — the over-committed shape (FAILURES.md §5). A change
/// over time (free memory falling, a new claimant) is warned about where there is a time
/// axis: `serve` ([`super::headroom_trend`]). Never error: nothing has failed yet. Info
/// also when the largest safe `gpu_memory_utilization` is below vLLM's default. Evidence
/// carries the headroom arithmetic and the largest holder.
pub fn low_headroom(inv: &Inventory, headroom: &[Headroom], th: &Thresholds) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in inv.devices().iter().filter(|d| d.is_counted()) {
        let Some(h) = headroom.iter().find(|h| h.device == d.index) else {
            continue;
        };
        let m = d.memory;
        let pct = |b: u64| {
            if m.total == 0 {
                0.0
            } else {
                b as f64 * 100.0 / m.total as f64
            }
        };
        let claimants: Vec<(&ProcessInfo, u64)> = inv
            .processes
            .iter()
            .filter_map(|p| p.usage_on(d.index).and_then(|u| u.used).map(|b| (p, b)))
            .filter(|(_, b)| *b > th.context_sized_max)
            .collect();
        let low =
            m.free < th.context_reserve || (m.free as f64) < th.low_free_fraction * m.total as f64;
        let (severity, title) = if low && claimants.len() >= 2 && m.free < th.context_reserve {
            (
                Severity::Warn,
                format!(
                    "GPU {}: {} processes share it with {} free ({:.1}%) of {}: the next \
                     allocation of any of them can fail",
                    d.label(),
                    claimants.len(),
                    format_bytes(m.free),
                    pct(m.free),
                    format_bytes(m.total)
                ),
            )
        } else if low && claimants.len() >= 2 {
            (
                Severity::Info,
                format!(
                    "GPU {}: {} processes share it with {} free ({:.1}%) of {}: steady \
                     fixed budgets are normal (e.g. two engines at gpu_memory_utilization \
                     0.45); little room for another process",
                    d.index,
                    claimants.len(),
                    format_bytes(m.free),
                    pct(m.free),
                    format_bytes(m.total)
                ),
            )
        } else if low {
            (
                Severity::Info,
                format!(
                    "GPU {} is at a steady fill: {} free ({:.1}%) of {}{} (normal for an \
                     engine or a caching allocator at its configured fill; no room for \
                     another process)",
                    d.label(),
                    format_bytes(m.free),
                    pct(m.free),
                    format_bytes(m.total),
                    match claimants.as_slice() {
                        [(p, _)] => format!(", held by {}", who(p)),
                        _ => String::new(),
                    }
                ),
            )
        } else if h.max_gpu_memory_utilization < th.vllm_default_utilization {
            (
                Severity::Info,
                format!(
                    "GPU {}: a new vLLM engine needs gpu_memory_utilization <= {:.2} \
                     (default {:.2} does not fit)",
                    d.label(),
                    h.max_gpu_memory_utilization,
                    th.vllm_default_utilization
                ),
            )
        } else {
            continue;
        };
        let mut evidence = vec![
            ev_bytes("total", m.total),
            ev_bytes("reserved", m.reserved),
            ev_bytes("used", m.used),
            ev_bytes("free", m.free),
        ];
        // The largest holder: a budget-sized one is the WeClone pattern.
        let top = inv
            .processes
            .iter()
            .filter_map(|p| p.usage_on(d.index).and_then(|u| u.used).map(|b| (p, b)))
            .max_by_key(|(p, b)| (*b, u32::MAX - p.pid));
        if let Some((p, b)) = top {
            let frac = if m.total == 0 {
                0.0
            } else {
                b as f64 / m.total as f64
            };
            let mut label = format!("largest holder {} ({:.2} x total)", who(p), frac);
            if frac >= th.budget_holder_fraction {
                label.push_str(", a utilization-sized budget");
            }
            evidence.push(ev_bytes(label, b));
        }
        evidence.push(ev(
            "largest safe gpu_memory_utilization",
            format!("{:.2} = {}", h.max_gpu_memory_utilization, h.arithmetic),
        ));
        out.push(Finding {
            id: ids::LOW_HEADROOM.into(),
            severity,
            title,
            devices: vec![d.index],
            pid: None,
            evidence,
            fix: fixes::LOW_HEADROOM.into(),
        });
    }
    out
}

/// Possible duplicate copy (CogVLM): one process with large, near-equal footprints on two or
/// more devices. Info only: tensor-parallel workers look the same.
pub fn duplicate_copy(inv: &Inventory, th: &Thresholds) -> Vec<Finding> {
    let mut out = Vec::new();
    for p in &inv.processes {
        let large: Vec<(u32, u64)> = known(p)
            .into_iter()
            .filter(|(_, b)| *b >= th.duplicate_min)
            .collect();
        if large.len() < 2 {
            continue;
        }
        let max = large.iter().map(|(_, b)| *b).max().unwrap_or(0);
        let min = large.iter().map(|(_, b)| *b).min().unwrap_or(0);
        if max == 0 {
            continue;
        }
        let spread = (max - min) as f64 / max as f64;
        if spread > th.duplicate_tolerance {
            continue;
        }
        let devs: Vec<u32> = large.iter().map(|(d, _)| *d).collect();
        let total: u64 = large.iter().map(|(_, b)| *b).sum();
        let mut evidence: Vec<Evidence> = large
            .iter()
            .map(|(d, b)| ev_bytes(format!("used on GPU {d}"), *b))
            .collect();
        evidence.push(ev_bytes("total across these GPUs", total));
        evidence.push(ev(
            "spread (max - min) / max",
            format!(
                "{:.1}% (near-equal: <= {:.0}%)",
                spread * 100.0,
                th.duplicate_tolerance * 100.0
            ),
        ));
        out.push(Finding {
            id: ids::DUPLICATE_COPY.into(),
            severity: Severity::Info,
            title: format!(
                "{} holds near-equal {} on GPUs {} ({} in all): possibly one model loaded twice",
                who(p),
                format_bytes(max),
                gpus(&devs),
                format_bytes(total)
            ),
            devices: devs,
            pid: Some(p.pid),
            evidence,
            fix: fixes::DUPLICATE_COPY.into(),
        });
    }
    out
}

/// Devices the driver would not answer for (lost, no permission, other errors), and devices
/// whose process lists could not be read: each gets a finding, and every other device is
/// still reported.
pub fn device_unavailable(inv: &Inventory) -> Vec<Finding> {
    use crate::gpu::DeviceStatus;
    let mut out = Vec::new();
    for d in inv.devices() {
        if super::mig::refused_parent_with_instances(inv, d) {
            continue;
        }
        let (severity, what) = match &d.status {
            DeviceStatus::Ok => {
                let Some(err) = inv.details.list_errors.get(&d.index) else {
                    continue;
                };
                (
                    Severity::Warn,
                    format!("its process lists could not be read: {err}"),
                )
            }
            DeviceStatus::Lost => (
                Severity::Error,
                "lost: fallen off the bus (NVML_ERROR_GPU_IS_LOST)".to_string(),
            ),
            DeviceStatus::NoPermission => (
                Severity::Warn,
                "no permission to query it (NVML_ERROR_NO_PERMISSION)".to_string(),
            ),
            DeviceStatus::Error { message } => (Severity::Warn, format!("driver error: {message}")),
        };
        // A lost device may not even say its name.
        let name = if d.name.is_empty() {
            String::new()
        } else {
            format!(" ({})", d.name)
        };
        let mut evidence: Vec<Evidence> = [("UUID", &d.uuid), ("PCI bus", &d.pci_bus_id)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| ev(k, v.clone()))
            .collect();
        evidence.push(ev("status", what.clone()));
        // A lost GPU has its own id (the exporter's alert rules key on it); every other
        // unusable state is `device-unavailable`.
        let (id, fix, title) = if d.status == DeviceStatus::Lost {
            (
                ids::GPU_LOST,
                fixes::GPU_LOST,
                format!(
                    "GPU {}{name} is lost: fallen off the bus (NVML_ERROR_GPU_IS_LOST, Xid 79)",
                    d.index
                ),
            )
        } else {
            (
                ids::DEVICE_UNAVAILABLE,
                fixes::DEVICE_UNAVAILABLE,
                format!("GPU {}{name} is unavailable: {what}", d.index),
            )
        };
        out.push(Finding {
            id: id.into(),
            severity,
            title,
            devices: vec![d.index],
            pid: None,
            evidence,
            fix: fix.into(),
        });
    }
    out
}

/// What the live listed processes hold on `d` (in a container every listed process counts
/// as live), summing the usages that are known, and whether all of them are.
fn live_sum(d: &DeviceInfo, processes: &[ProcessInfo], host: bool) -> (u64, bool) {
    let mut sum = 0u64;
    let mut known = true;
    for p in processes.iter().filter(|p| p.visible || !host) {
        if let Some(u) = p.usage_on(d.index) {
            match u.used {
                Some(b) => sum = sum.saturating_add(b),
                None => known = false,
            }
        }
    }
    (sum, known)
}

/// Used memory on `d` that no live listed process accounts for: the arithmetic of
/// [`no_live_owner`] (`used` minus what live processes hold; in a container every listed
/// process counts as live). `None` when a live process's usage is not available.
pub fn unattributed_bytes(d: &DeviceInfo, processes: &[ProcessInfo], host: bool) -> Option<u64> {
    // A MIG parent's memory is its instances': counted there, never here.
    if d.is_mig_parent() {
        return None;
    }
    let (sum, known) = live_sum(d, processes, host);
    known.then(|| d.memory.used.saturating_sub(sum))
}
