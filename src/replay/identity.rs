//! Which PID NVML lists for the replay worker: its own in the host PID namespace, its `NSpid`
//! when /proc shows the outer namespace, else the one new process on the devices it made
//! contexts on.

use crate::gpu::{DeviceInfo, Monitor};

/// Which PID NVML lists for the worker. In the host PID namespace it is the worker's own
/// PID; in a container NVML still reports host PIDs, so the worker's `NSpid` says it when
/// this /proc shows the outer namespace; otherwise the worker is recognised on the devices
/// it reported contexts on, as the one process that appeared there after it started.
#[derive(Debug, Default)]
pub(super) struct WorkerIdentity {
    /// PID as NVML lists it, once known.
    pub(super) nvml: Option<u32>,
    /// How `nvml` was found (for the report's marker).
    pub(super) how: Option<String>,
    /// NVML PIDs present on the devices before the worker started (neighbours, others).
    pub(super) before: std::collections::BTreeSet<u32>,
}

impl WorkerIdentity {
    /// Try to find the worker in NVML's lists: it is the one process, not there before it
    /// started, listed on every device it reported a context on (on any device when it
    /// reported none, e.g. a driver that cannot name a device's UUID).
    pub(super) fn resolve(
        &mut self,
        monitor: &dyn Monitor,
        positions: &[usize],
        devices: &[DeviceInfo],
    ) {
        if self.nvml.is_some() {
            return;
        }
        let mut candidates: Option<std::collections::BTreeSet<u32>> = None;
        let all: Vec<usize> = (0..devices.len()).collect();
        let (look, every) = if positions.is_empty() {
            (all.as_slice(), false)
        } else {
            (positions, true)
        };
        for p in look {
            let Some(d) = devices.get(*p) else { continue };
            let Ok(list) = monitor.processes(d.index) else {
                return;
            };
            let here: std::collections::BTreeSet<u32> = list
                .iter()
                .map(|p| p.pid)
                .filter(|pid| !self.before.contains(pid))
                .collect();
            candidates = Some(match candidates {
                None => here,
                Some(c) if every => c.intersection(&here).copied().collect(),
                Some(c) => c.union(&here).copied().collect(),
            });
        }
        if let Some(c) = candidates {
            if c.len() == 1 {
                self.nvml = c.into_iter().next();
                self.how = Some("the one new process on the devices it has contexts on".into());
            }
        }
    }
}
