//! The scan rules: pure functions from one collected [`Inventory`] (the prepared view every
//! rule reads: devices, processes and the details scan gathered) and [`Thresholds`] to
//! [`Finding`]s and per-device [`Headroom`], one file per rule, shaped like
//! [`super::timeline`]. What several rules share sits in its own file below them: the
//! accounting of what live processes hold ([`accounting`]), who holds the device files
//! ([`holders`]), what explains unattributed memory ([`unattributed`]) and what can be
//! concluded from where vramdoc stands ([`vantage`]); what scan shares with the timeline
//! rules sits one room up (`diagnose::{evidence, devset, visibility, usage, stray}`).

mod accounting;
mod device_unavailable;
mod duplicate_copy;
mod headroom;
pub mod holders;
mod low_headroom;
mod mig;
mod no_live_owner;
mod pods;
mod stray_context;
pub mod unattributed;
mod usage_unavailable;
mod vantage;

use crate::inventory::Inventory;
use crate::model::{Finding, Headroom};
use crate::units::{GIB, MIB};

pub use accounting::unattributed_bytes;
pub use device_unavailable::device_unavailable;
pub use duplicate_copy::duplicate_copy;
pub use headroom::{device_headroom, headroom};
pub use low_headroom::low_headroom;
pub use no_live_owner::no_live_owner;
pub use pods::{allocated_gpu_idle, unallocated_gpu_use};
pub use stray_context::stray_context;
pub use usage_unavailable::usage_unavailable;
pub use vantage::invisible_processes;

/// What every rule file imports: the inventory, the model and the evidence helpers.
mod prelude {
    pub(super) use super::super::evidence::{ev, ev_bytes, gpus, owner_pods_evidence, who};
    pub(super) use super::super::{fixes, ids};
    pub(super) use super::Thresholds;
    pub(super) use crate::gpu::DeviceInfo;
    pub(super) use crate::inventory::Inventory;
    pub(super) use crate::model::{Evidence, Finding, Headroom, ProcessInfo, Severity};
    pub(super) use crate::units::format_bytes;
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
    /// gets an info finding. Default 0.92: vLLM's current `CacheConfig.gpu_memory_utilization`
    /// (`Field(default=0.92, gt=0, le=1)`, vllm/config/cache.py at commit 002f10e0); releases
    /// before that default were 0.90 (vllm/engine/arg_utils.py `EngineArgs`).
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
            vllm_default_utilization: 0.92,
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
