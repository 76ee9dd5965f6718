//! Diagnosis: the only place findings are decided, as pure functions with no I/O, so every
//! rule is unit-tested on hand-built input. Scan rules ([`scan`], one file per rule) read a
//! collected [`Inventory`] with [`Thresholds`] and give [`Finding`]s and per-device
//! [`Headroom`]; timeline fingerprints ([`timeline`], one file per rule) read a
//! [`Recording`]. What both share lives here, below them: evidence lines, device sets and
//! visibility, how a process's usage reads ([`usage`]) and the stray-context decision
//! ([`stray`]), and the one convention by which every command suggests a vLLM
//! `--gpu-memory-utilization` ([`vllm_utilization`]). Fix texts come from shared/FAILURES.md (see [`fixes`]); docs/scan.md and
//! docs/findings.md explain each finding to users.
//!
//! [`Inventory`]: crate::inventory::Inventory
//! [`Finding`]: crate::model::Finding
//! [`Headroom`]: crate::model::Headroom

pub mod devset;
mod evidence;
pub mod fixes;
pub mod headroom_trend;
mod last_reading;
mod scan;
mod stray;
pub mod timeline;
mod usage;
mod visibility;
pub mod vllm_utilization;

pub use timeline::{
    fingerprints, fingerprints_seen_from, DeviceFileHolder, ErrorEvent, ErrorKind, JobExit,
    RecordedDevice, RecordedProcess, Recording, TimelineThresholds,
};

pub use crate::pods::device_of_id;
pub use last_reading::{add_last_readings, LastReading};
pub use scan::{
    allocated_gpu_idle, device_headroom, device_unavailable, diagnose, duplicate_copy, headroom,
    holders, invisible_processes, low_headroom, no_live_owner, stray_context, unallocated_gpu_use,
    unattributed, unattributed_bytes, usage_unavailable, Thresholds,
};

/// Stable finding ids (JSON `findings[].id`).
pub mod ids {
    pub const STRAY_CONTEXT: &str = "stray-context";
    pub const NO_LIVE_OWNER: &str = "no-live-owner";
    pub const INVISIBLE_PROCESSES: &str = "invisible-processes";
    pub const USAGE_UNAVAILABLE: &str = "usage-unavailable";
    pub const LOW_HEADROOM: &str = "low-headroom";
    pub const DUPLICATE_COPY: &str = "duplicate-copy";
    pub const DEVICE_UNAVAILABLE: &str = "device-unavailable";
    /// A GPU the driver reports lost (NVML_ERROR_GPU_IS_LOST, Xid 79): scan, serve and run.
    pub const GPU_LOST: &str = "gpu-lost";
    /// Allocation audit (issue 18): a pod's process on a GPU the pod was not allocated.
    pub const UNALLOCATED_GPU_USE: &str = "unallocated-gpu-use";
    /// Allocation audit: a pod's process on a GPU outside what pod-resources lists for it, on
    /// a node where DRA claims may go unlisted (issue 37): cannot be told from here (info).
    pub const POD_ALLOCATION_UNKNOWN: &str = "pod-allocation-unknown";
    /// Allocation audit: a GPU allocated to a pod that none of its processes uses.
    pub const ALLOCATED_GPU_IDLE: &str = "allocated-gpu-idle";
    // Timeline fingerprints (`vramdoc run`, replay): see docs/findings.md.
    pub const OUT_OF_MEMORY: &str = "out-of-memory";
    pub const GROWTH_WITHOUT_RELEASE: &str = "growth-without-release";
    pub const NOT_RELEASED: &str = "not-released";
    pub const DOUBLE_LOAD: &str = "double-load";
    pub const OVERCOMMIT: &str = "overcommit";
    pub const HELD_AFTER_EXIT: &str = "held-after-exit";
    pub const OUTLIVED_COMMAND: &str = "outlived-command";
    /// Memory kept after the command by a job process NVML does not list, holding the
    /// driver's device files it inherited (issue 25, item 9).
    pub const HELD_BY_DESCRIPTOR: &str = "held-by-descriptor";
    pub const FRAGMENTATION: &str = "fragmentation";
    pub const COLLECTIVE_TIMEOUT: &str = "collective-timeout";
    pub const HOST_OOM_KILL: &str = "host-oom-kill";
    pub const CUDA_ERROR: &str = "cuda-error";
    /// Every timeline fingerprint id (`stray-context` is shared with scan).
    pub const FINGERPRINTS: &[&str] = &[
        OUT_OF_MEMORY,
        STRAY_CONTEXT,
        GROWTH_WITHOUT_RELEASE,
        NOT_RELEASED,
        DOUBLE_LOAD,
        OVERCOMMIT,
        HELD_AFTER_EXIT,
        OUTLIVED_COMMAND,
        HELD_BY_DESCRIPTOR,
        FRAGMENTATION,
        COLLECTIVE_TIMEOUT,
        HOST_OOM_KILL,
        CUDA_ERROR,
    ];
}

#[cfg(test)]
mod tests;
