//! `stray-context` on one snapshot: every process through the shared decision
//! ([`crate::diagnose::stray`]).

use super::prelude::*;
use crate::diagnose::devset::GpuRef;
use crate::diagnose::stray::stray_context_of;

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
