//! Headroom: the room for a new vLLM-style engine on each device, with its arithmetic
//! (`headroom[]` of the report; `low-headroom` reads it).

use super::prelude::*;
use crate::diagnose::vllm_utilization::fitting_hundredths;

/// Room for a new vLLM-style engine on every device: its budget `u x (total - reserved)`
/// (CUDA's total) must fit in `total - used_by_others - reserved - context_reserve`; the
/// largest such `u` by [`fitting_hundredths`], the one utilisation convention.
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
    // vLLM multiplies CUDA's total (NVML's less the driver's reservation), not NVML's.
    let cuda_total = m.total.saturating_sub(m.reserved);
    let ratio = if cuda_total == 0 {
        0.0
    } else {
        available as f64 / cuda_total as f64
    };
    // Rounded down to 0.01 so that vLLM's ceil(U x total) fits in what is available.
    let max = fitting_hundredths(cuda_total, available) as f64 / 100.0;
    let arithmetic = format!(
        "({} total - {} used - {} reserved - {} context) / {} CUDA total = {:.4} -> {:.2}",
        format_bytes(m.total),
        format_bytes(m.used),
        format_bytes(m.reserved),
        format_bytes(th.context_reserve),
        format_bytes(cuda_total),
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
