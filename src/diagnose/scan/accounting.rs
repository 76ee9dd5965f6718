//! The arithmetic several scan rules and the Prometheus series share: what the live listed
//! processes hold on a device, the used memory none of them accounts for, and how much of
//! that may be unattributed without being lost.

use super::prelude::*;

/// What the live listed processes hold on `d` (in a container every listed process counts
/// as live), summing the usages that are known, and whether all of them are.
pub(super) fn live_sum(d: &DeviceInfo, processes: &[ProcessInfo], host: bool) -> (u64, bool) {
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

/// Used bytes that may have no listed owner without being lost: [`Thresholds::unattributed_min`],
/// plus, where the driver reports no `reserved` (NVML v1 on drivers before R510, where
/// `used` includes the driver's own reservation: nvml.h, `nvmlMemory_v2_t`), an allowance
/// for that reservation (2 % of total, at least 512 MiB).
pub(super) fn unattributed_allowance(d: &DeviceInfo, th: &Thresholds) -> u64 {
    if d.memory.reserved > 0 {
        th.unattributed_min
    } else {
        th.unattributed_min + (d.memory.total / 50).max(512 << 20)
    }
}
