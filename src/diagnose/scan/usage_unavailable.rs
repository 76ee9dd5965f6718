//! `usage-unavailable`: processes whose per-device usage NVML does not report, and GPUs with
//! memory used and no process listed where the platform lists none (WSL).

use super::prelude::*;

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
