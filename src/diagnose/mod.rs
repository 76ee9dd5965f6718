//! Diagnosis: the only place scan findings are decided. Pure functions from a collected
//! [`Inventory`] (and [`Thresholds`]) to [`Finding`]s and per-device [`Headroom`]; no I/O,
//! so every rule is unit-tested on hand-built inventories. Fix texts come from
//! shared/FAILURES.md (see [`fixes`]); docs/scan.md explains each finding to users.

pub mod devset;
mod evidence;
pub mod fixes;
pub mod headroom_trend;
pub mod holders;
mod last_reading;
mod mig;
mod pods;
mod rules;
pub mod timeline;
pub mod unattributed;
mod vantage;
mod visibility;

use crate::inventory::Inventory;
use crate::model::{Finding, Headroom};
use crate::units::{GIB, MIB};

pub use timeline::{
    fingerprints, fingerprints_seen_from, DeviceFileHolder, ErrorEvent, ErrorKind, JobExit,
    RecordedDevice, RecordedProcess, Recording, TimelineThresholds,
};

pub use last_reading::{add_last_readings, LastReading};
pub use pods::{allocated_gpu_idle, device_of_id, unallocated_gpu_use};
pub use rules::{
    device_headroom, device_unavailable, duplicate_copy, headroom, low_headroom, no_live_owner,
    stray_context, unattributed_bytes, usage_unavailable,
};
pub use vantage::invisible_processes;

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

/// Every threshold the rules use. Defaults are documented per field and in docs/scan.md.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// A footprint at or below this on a device is "context-sized": what a CUDA context
    /// alone costs (300–600 MiB on real drivers) plus a little. Default 1 GiB.
    pub context_sized_max: u64,
    /// A process's largest footprint must exceed this for its small footprints elsewhere to
    /// count as stray contexts (its "main work"). Default 1 GiB.
    pub main_work_min: u64,
    /// Memory a new process needs for its own CUDA context; kept back in the headroom
    /// arithmetic and the over-full test. Default 512 MiB.
    pub context_reserve: u64,
    /// Used memory not held by any live listed process above this is reported as memory
    /// with no live owner. Default 256 MiB.
    pub unattributed_min: u64,
    /// Free memory below this fraction of total is low headroom (warn). Default 0.10.
    pub low_free_fraction: f64,
    /// vLLM's default `gpu_memory_utilization`; a device whose largest safe value is below it
    /// gets an info finding. Default 0.90.
    pub vllm_default_utilization: f64,
    /// A single process holding at least this fraction of a device looks like a
    /// utilization-style budget (the WeClone pattern). Default 0.80.
    pub budget_holder_fraction: f64,
    /// Footprints at or above this on two or more devices are candidates for a duplicate
    /// model copy. Default 2 GiB.
    pub duplicate_min: u64,
    /// Footprints are "near-equal" when (max − min) / max is at most this. Default 0.10.
    pub duplicate_tolerance: f64,
    /// An allocated GPU none of its pod's processes held memory on for at least this long
    /// is reported (`allocated-gpu-idle`, serve only). Default 30 min.
    pub allocation_idle_min: std::time::Duration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            context_sized_max: GIB,
            main_work_min: GIB,
            context_reserve: 512 * MIB,
            unattributed_min: 256 * MIB,
            low_free_fraction: 0.10,
            vllm_default_utilization: 0.90,
            budget_holder_fraction: 0.80,
            duplicate_min: 2 * GIB,
            duplicate_tolerance: 0.10,
            allocation_idle_min: std::time::Duration::from_secs(30 * 60),
        }
    }
}

/// Everything scan decides: findings (most severe first) and headroom for every device.
pub fn diagnose(inv: &Inventory, th: &Thresholds) -> (Vec<Finding>, Vec<Headroom>) {
    let headroom = headroom(inv, th);
    let mut findings = Vec::new();
    findings.extend(device_unavailable(inv));
    findings.extend(stray_context(inv, th));
    findings.extend(no_live_owner(inv, th));
    findings.extend(invisible_processes(inv, th));
    findings.extend(usage_unavailable(inv));
    findings.extend(low_headroom(inv, &headroom, th));
    findings.extend(duplicate_copy(inv, th));
    findings.extend(unallocated_gpu_use(inv));
    findings.extend(allocated_gpu_idle(inv, th));
    vantage::about_invisible(inv, &mut findings);
    // Most severe first; stable within a severity (rule order, then device / PID).
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    (findings, headroom)
}

#[cfg(test)]
mod tests;
