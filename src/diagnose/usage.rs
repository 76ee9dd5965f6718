//! How a process's per-device usage reads, for every rule that looks at it (scan rules and
//! the timeline's stray-context): the devices where its bytes are known, and the 0-byte
//! peer listings that are no context of it.

use crate::model::ProcessInfo;

/// A 0-byte entry: NVML lists a process on every GPU whose memory it maps, with 0 bytes,
/// once NCCL (or any CUDA IPC / peer access) maps peer memory — every DDP rank shows on
/// every GPU of the job (pytorch/pytorch#64130). It is not a context of that process there.
pub(crate) fn is_peer_listing(u: &crate::model::ProcessDeviceUsage) -> bool {
    u.used == Some(0)
}

/// `(device, bytes)` for every device where the process's usage is known.
pub(crate) fn known(p: &ProcessInfo) -> Vec<(u32, u64)> {
    p.devices
        .iter()
        .filter_map(|u| u.used.map(|b| (u.device, b)))
        .collect()
}
