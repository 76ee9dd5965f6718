//! Collects the [`Environment`](super::Environment) section: host, kernel, versions, devices.

use super::Environment;
use crate::gpu::{GpuError, Monitor};

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Describe the machine through `monitor`. `sim_spec` is the box spec when simulated.
pub fn collect(monitor: &dyn Monitor, sim_spec: Option<String>) -> Result<Environment, GpuError> {
    Ok(Environment {
        hostname: read_trim("/proc/sys/kernel/hostname"),
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        vramdoc_version: env!("CARGO_PKG_VERSION").to_string(),
        backend: monitor.backend().to_string(),
        sim_spec,
        versions: monitor.versions()?,
        devices: monitor.devices()?,
    })
}

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
