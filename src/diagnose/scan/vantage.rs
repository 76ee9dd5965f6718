//! What the scan rules can conclude from where vramdoc stands (issue 25): the vantage's view
//! of NVML's process lists ([`ListView`]) decides whether memory no listed process accounts
//! for is lost (host PIDs: `no-live-owner` at error) or only not visible from here (a
//! translating driver outside the host PID namespace: other tenants' memory, info), and
//! whether the listed processes' bytes mean anything (0-byte own entries from 535.113 to 560
//! are unknown, not 0). It owns `invisible-processes`; the rule files beside it call its hooks;
//! docs/findings.md ("What each rule needs") says which vantage each rule needs.

use super::Thresholds;
use crate::diagnose::evidence::{ev, ev_bytes, gpus};
use crate::diagnose::{fixes, ids};
use crate::gpu::DeviceInfo;
use crate::inventory::Inventory;
use crate::model::vantage::ListView;
use crate::model::ProcessInfo;
use crate::model::{Evidence, Finding, Severity};
use crate::units::format_bytes;

/// The title's advice: where the bytes can be attributed.
const RUN_ON_HOST: &str = "run on the host or with hostPID to attribute it";

/// Evidence lines naming the vantage: the PID namespace and the driver's generation.
pub(super) fn vantage_evidence(inv: &Inventory) -> Vec<Evidence> {
    let v = &inv.vantage;
    vec![
        ev(
            "PID namespace",
            format!("{} ({})", v.pid_namespace.label(), v.pid_namespace.reason),
        ),
        ev(
            "driver",
            format!(
                "{}: {}",
                v.driver_version.as_deref().unwrap_or("version unknown"),
                v.generation.describe()
            ),
        ),
    ]
}

/// Whether listed processes' bytes are unknown from this vantage (their 0s are the driver's
/// lookup failing, 535.113 to 560, not usage).
pub(crate) fn bytes_unknown(inv: &Inventory) -> bool {
    inv.list_view() == ListView::OwnNamespaceOnly { zero_usage: true }
}

/// `no-live-owner`'s hook: memory on `d` no listed process accounts for (`unlisted`, above
/// the allowance) seen from outside the host PID namespace under a driver that lists only
/// this namespace's processes (or of unknown generation) is other tenants' memory as far as
/// anyone here can tell: info, saying where it can be attributed. `None`: the rule decides
/// as before (host namespace, or host PIDs in a container).
pub(super) fn unlisted_here(
    inv: &Inventory,
    d: &DeviceInfo,
    listed: u64,
    unlisted: u64,
    th: &Thresholds,
) -> Option<Finding> {
    // Dead PIDs and unlisted holders of the device files are lost memory wherever seen.
    if super::unattributed::split(inv, d).is_none_or(|s| s.outside_namespace == 0) {
        return None;
    }
    let (title, why) = match inv.list_view() {
        ListView::Host | ListView::HostPidsInContainer => return None,
        ListView::OwnNamespaceOnly { zero_usage: false } => (
            format!(
                "GPU {}: {} of memory of processes outside this container's PID namespace: \
                 {RUN_ON_HOST}",
                d.index,
                format_bytes(unlisted)
            ),
            "the driver lists only this PID namespace's processes; every other tenant's \
             memory is in `used` and in no list",
        ),
        ListView::OwnNamespaceOnly { zero_usage: true } => (
            format!(
                "GPU {}: {} of memory of processes outside this container's PID namespace \
                 (and of its own, which this driver lists with 0 bytes): {RUN_ON_HOST}",
                d.index,
                format_bytes(unlisted)
            ),
            "the driver lists only this PID namespace's processes, with 0 bytes \
             (NVIDIA/nvidia-container-toolkit#1013); every other tenant's memory is in \
             `used` and in no list",
        ),
        ListView::Unknown => (
            format!(
                "GPU {}: {} used that no process listed here accounts for; the driver's \
                 generation is unknown, so it may be other tenants' memory: {RUN_ON_HOST}",
                d.index,
                format_bytes(unlisted)
            ),
            "outside the host PID namespace a driver from 535.113 on lists only this \
             namespace's processes",
        ),
    };
    let mut evidence = vec![
        ev_bytes(
            format!("used on GPU {} (NVML v2, without reserved)", d.index),
            d.memory.used,
        ),
        ev_bytes("held by processes listed here", listed),
        ev_bytes("not listed from this PID namespace", unlisted),
        ev_bytes("threshold", th.unattributed_min),
    ];
    evidence.extend(vantage_evidence(inv));
    evidence.push(ev("why it is not lost memory here", why));
    Some(Finding {
        id: ids::NO_LIVE_OWNER.into(),
        severity: Severity::Info,
        title,
        devices: vec![d.index],
        pid: None,
        evidence,
        fix: fixes::OUTSIDE_NAMESPACE.into(),
    })
}

/// Processes NVML lists that are not visible from our (container) PID namespace: attribution
/// is incomplete, and we say so instead of guessing. Under a driver that drops them from the
/// lists instead, the memory nobody listed here accounts for ([`unlisted_tenants`]).
pub fn invisible_processes(inv: &Inventory, th: &Thresholds) -> Vec<Finding> {
    if inv.host() {
        return Vec::new();
    }
    // Under a translating driver a listed PID that does not exist here exited: `no-live-owner`'s.
    let dead = inv.invisible_is_dead();
    let hidden: Vec<&ProcessInfo> = inv
        .processes
        .iter()
        .filter(|p| !p.visible && !dead)
        .collect();
    if hidden.is_empty() {
        return unlisted_tenants(inv, th);
    }
    let mut devs: Vec<u32> = hidden
        .iter()
        .flat_map(|p| p.devices.iter().map(|u| u.device))
        .collect();
    devs.sort_unstable();
    devs.dedup();
    let held: u64 = hidden
        .iter()
        .flat_map(|p| crate::diagnose::usage::known(p))
        .map(|(_, b)| b)
        .sum();
    let pids: Vec<String> = hidden.iter().map(|p| p.pid.to_string()).collect();
    vec![Finding {
        id: ids::INVISIBLE_PROCESSES.into(),
        severity: Severity::Info,
        title: format!(
            "Attribution incomplete: {} of {} GPU processes are not visible from this PID \
             namespace",
            hidden.len(),
            inv.processes.len()
        ),
        devices: devs,
        pid: None,
        evidence: vec![
            ev(
                "PID namespace",
                format!("container ({})", inv.vantage.pid_namespace.reason),
            ),
            ev("PIDs listed by NVML, not found here", pids.join(", ")),
            ev_bytes("memory they hold", held),
        ],
        fix: fixes::INVISIBLE_PROCESSES.into(),
    }]
}

/// `invisible-processes` where the driver drops what this namespace cannot see: no PID is
/// listed that does not exist here, and its evidence is the memory no listed process
/// accounts for, per device (above [`Thresholds::unattributed_min`]).
pub(super) fn unlisted_tenants(inv: &Inventory, th: &Thresholds) -> Vec<Finding> {
    if !matches!(
        inv.list_view(),
        ListView::OwnNamespaceOnly { .. } | ListView::Unknown
    ) {
        return Vec::new();
    }
    let mut devs = Vec::new();
    let mut evidence = Vec::new();
    let mut total = 0u64;
    for d in inv.devices().iter().filter(|d| d.status.is_ok()) {
        if inv.details.list_errors.contains_key(&d.index) {
            continue;
        }
        let Some(unlisted) = super::accounting::unattributed_bytes(d, &inv.processes, false) else {
            continue;
        };
        if unlisted <= th.unattributed_min {
            continue;
        }
        devs.push(d.index);
        total = total.saturating_add(unlisted);
        evidence.push(ev_bytes(
            format!("used on GPU {} by no process listed here", d.index),
            unlisted,
        ));
    }
    if devs.is_empty() {
        return Vec::new();
    }
    evidence.extend(vantage_evidence(inv));
    vec![Finding {
        id: ids::INVISIBLE_PROCESSES.into(),
        severity: Severity::Info,
        title: format!(
            "Attribution incomplete: {} on GPU {} belongs to processes not visible from this \
             PID namespace (the driver lists only this namespace's)",
            format_bytes(total),
            gpus(&devs)
        ),
        devices: devs,
        pid: None,
        evidence,
        fix: fixes::INVISIBLE_PROCESSES.into(),
    }]
}

/// Findings about one process that is not visible from this (container) PID namespace — a
/// host PID a driver before 535.113 lists — are kept at info: its environment (which GPUs it
/// may use, its container) cannot be read from here, so nothing about it is decided.
pub(super) fn about_invisible(inv: &Inventory, findings: &mut [Finding]) {
    if inv.invisible_is_dead() {
        return;
    }
    for f in findings.iter_mut().filter(|f| f.severity > Severity::Info) {
        let Some(pid) = f.pid else { continue };
        if !inv.processes.iter().any(|p| p.pid == pid && !p.visible) {
            continue;
        }
        f.severity = Severity::Info;
        f.evidence.push(ev(
            format!("PID {pid}"),
            "not visible from this PID namespace (a host PID): its environment and container \
             cannot be read here; run on the host to decide",
        ));
    }
}

/// `usage-unavailable`'s hook: the 0-byte entries a 535.113–560 driver gives this namespace's
/// own processes, as `PID N on GPU D` (their usage is unknown, not 0), and why.
pub(super) fn zero_usage_entries(inv: &Inventory) -> Option<(Vec<String>, Vec<u32>, String)> {
    if !bytes_unknown(inv) {
        return None;
    }
    let mut pairs = Vec::new();
    let mut devs = Vec::new();
    for p in &inv.processes {
        for u in p.devices.iter().filter(|u| u.used == Some(0)) {
            pairs.push(format!("PID {} on GPU {}", p.pid, u.device));
            devs.push(u.device);
        }
    }
    let why = format!(
        "driver {} lists this PID namespace's processes with 0 bytes (535.113 to 560: the \
         usage lookup compares host PIDs, NVIDIA/nvidia-container-toolkit#1013): their usage \
         is unknown, not 0",
        inv.vantage.driver_version.as_deref().unwrap_or("?")
    );
    (!pairs.is_empty()).then_some((pairs, devs, why))
}
