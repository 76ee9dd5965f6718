//! `device-unavailable` and `gpu-lost`: devices the driver would not answer for, and devices
//! whose process lists could not be read.

use super::prelude::*;

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
