//! Used memory no live listed process accounts for, split by what explains it: the one
//! decision behind `no-live-owner`'s severity and the Prometheus series
//! `vramdoc_gpu_memory_unattributed_bytes` (only the lost part) and
//! `vramdoc_gpu_memory_explained_unattributed_bytes{reason}`, so a finding at info never
//! sits beside a critical alert.
//!
//! What explains the bytes, first match wins:
//! - nothing, when NVML lists a PID that does not exist on the device, or a process NVML
//!   does not list (not a system monitor) holds the driver's device files: those are the
//!   shapes of lost memory (`lost`);
//! - managed (unified) memory: a live listed process on the device holds `/dev/nvidia-uvm`.
//!   Memory from `cuMemAllocManaged` resident on a GPU is counted in its `used` but in no
//!   process's `usedGpuMemory` (Syllo/nvtop#213, gpuopenanalytics/pynvml#63,
//!   rapidsai/rmm#2259) (`managed`);
//! - a coherent-memory GPU (GH200/GB200: a NUMA node of the host) keeps pages freed by
//!   exited processes counted as used until the kernel reclaims them (nvml.h,
//!   `nvmlDeviceGetMemoryInfo`) (`coherent`);
//! - seen from a container on a driver that lists only its namespace's processes (535.113
//!   on), other tenants' memory (`outside_namespace`, docs/scan.md "Where vramdoc stands");
//! - otherwise `lost`.
//!
//! Caveat on real drivers: CUDA processes on Linux commonly hold `/dev/nvidia-uvm` without
//! managed memory, so "holds nvidia-uvm" says "may have managed memory", not "has". The
//! dead-PID and foreign-holder checks above run first so the shapes of real leaks stay
//! errors.

use super::evidence::{ev, ev_bytes};
use super::rules::{is_system_monitor, unattributed_bytes};
use super::{fixes, ids};
use crate::gpu::DeviceInfo;
use crate::inventory::{Inventory, NodeHolder};
use crate::model::{Evidence, Finding, Severity, Unattributed};
use crate::units::format_bytes;

/// The device file a process with managed memory holds open (`/dev/nvidia-uvm`, the
/// simulated box's `dev/nvidia-uvm`).
pub const UVM_NODE: &str = "nvidia-uvm";

/// Whether `h` holds the UVM device file open.
pub fn holds_uvm(h: &NodeHolder) -> bool {
    h.nodes.iter().any(|n| {
        std::path::Path::new(n)
            .file_name()
            .is_some_and(|f| f == UVM_NODE)
    })
}

/// The split of device `d`'s unattributed bytes; `None` when a live process's usage on it is
/// not available (nothing can be said) or the device did not answer.
pub fn split(inv: &Inventory, d: &DeviceInfo) -> Option<Unattributed> {
    if !d.status.is_ok() || d.memory_unknown.is_some() {
        return None;
    }
    let host = inv.host();
    let bytes = unattributed_bytes(d, &inv.processes, host)?;
    let on_dev: Vec<&crate::model::ProcessInfo> = inv
        .processes
        .iter()
        .filter(|p| p.usage_on(d.index).is_some())
        .collect();
    let is_live = |p: &crate::model::ProcessInfo| p.visible || !host;
    let dead = on_dev.iter().any(|p| !is_live(p));
    let listed: Vec<u32> = on_dev
        .iter()
        .filter(|p| is_live(p))
        .map(|p| p.pid)
        .collect();
    let holders = &inv.details.node_holders;
    let foreign = holders
        .iter()
        .any(|h| !listed.contains(&h.pid) && !h.name.as_deref().is_some_and(is_system_monitor));
    let mut out = Unattributed {
        device: d.index,
        ..Unattributed::default()
    };
    if bytes == 0 || dead || foreign {
        out.lost = bytes;
        return Some(out);
    }
    // Outside the host PID namespace on a driver that lists only this namespace's
    // processes: other tenants' memory (issue 25, `super::vantage`).
    if matches!(
        inv.list_view(),
        crate::model::vantage::ListView::OwnNamespaceOnly { .. }
            | crate::model::vantage::ListView::Unknown
    ) {
        out.outside_namespace = bytes;
        return Some(out);
    }
    let uvm: Vec<u32> = holders
        .iter()
        .filter(|h| listed.contains(&h.pid) && holds_uvm(h))
        .map(|h| h.pid)
        .collect();
    if !uvm.is_empty() {
        out.managed = bytes;
        out.managed_by = uvm;
    } else if d.numa_node.is_some() {
        out.coherent = bytes;
    } else {
        out.lost = bytes;
    }
    Some(out)
}

/// `no-live-owner` at info for device `d` when [`split`] explains all of its unattributed
/// bytes (managed memory of a live process, or a coherent GPU's unreclaimed pages), with
/// `evidence` (the rule's) and what explains them; `None` when any byte is lost.
pub fn explained_finding(
    inv: &Inventory,
    d: &DeviceInfo,
    evidence: &[Evidence],
) -> Option<Finding> {
    let s = split(inv, d)?;
    if s.lost > 0 || s.managed + s.coherent == 0 {
        return None;
    }
    let mut evidence = evidence.to_vec();
    let (title, fix) = if s.managed > 0 {
        let owners: Vec<String> = s
            .managed_by
            .iter()
            .map(|pid| {
                let name = inv
                    .processes
                    .iter()
                    .find(|p| p.pid == *pid)
                    .and_then(|p| p.name.as_deref())
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default();
                format!("PID {pid}{name}")
            })
            .collect();
        evidence.push(ev(
            "holding /dev/nvidia-uvm (managed memory), listed on this GPU",
            owners.join(", "),
        ));
        evidence.push(ev_bytes("explained as managed memory", s.managed));
        (
            format!(
                "GPU {}: {} used with no listed owner: managed (unified) memory of {} is \
                 counted in used but in no process's usage",
                d.index,
                format_bytes(s.managed),
                owners.join(", ")
            ),
            fixes::MANAGED_MEMORY,
        )
    } else {
        evidence.push(ev_bytes(
            "explained as unreclaimed coherent memory",
            s.coherent,
        ));
        (
            format!(
                "GPU {}: {} counted as used with no live owner: a coherent-memory GPU \
                 (NUMA node {}) keeps freed pages counted until they are reclaimed",
                d.index,
                format_bytes(s.coherent),
                d.numa_node.unwrap_or_default()
            ),
            fixes::COHERENT_UNRECLAIMED,
        )
    };
    Some(Finding {
        id: ids::NO_LIVE_OWNER.into(),
        severity: Severity::Info,
        title,
        devices: vec![d.index],
        pid: match s.managed_by.as_slice() {
            [one] => Some(*one),
            _ => None,
        },
        evidence,
        fix: fix.into(),
    })
}

/// [`split`] for every device that has one.
pub fn split_all(inv: &Inventory) -> Vec<Unattributed> {
    inv.devices().iter().filter_map(|d| split(inv, d)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::tests::{inv_with, proc_};
    use crate::inventory::CVD_UNSET;
    use crate::units::GIB;

    fn holder(pid: u32, name: &str, nodes: &[&str]) -> NodeHolder {
        NodeHolder {
            pid,
            name: Some(name.into()),
            user: None,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        }
    }

    /// 6 GiB used on GPU 0, 1 GiB of it listed for PID 10 (alive): 5 GiB unattributed.
    fn five_unattributed() -> Inventory {
        inv_with(
            1,
            vec![proc_(10, CVD_UNSET, &[(0, Some(GIB))])],
            &[(0, 5 * GIB)],
            true,
        )
    }

    #[test]
    fn a_listed_uvm_holder_explains_the_bytes_as_managed() {
        let mut inv = five_unattributed();
        inv.details.node_holders = vec![holder(
            10,
            "python3",
            &["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"],
        )];
        let s = split(&inv, &inv.devices()[0]).unwrap();
        assert_eq!((s.lost, s.managed, s.coherent), (0, 5 * GIB, 0));
        assert_eq!(s.managed_by, vec![10]);
    }

    #[test]
    fn without_uvm_or_with_a_foreign_holder_the_bytes_are_lost() {
        let mut inv = five_unattributed();
        inv.details.node_holders = vec![holder(10, "python3", &["/dev/nvidia0"])];
        assert_eq!(split(&inv, &inv.devices()[0]).unwrap().lost, 5 * GIB);
        // A forked worker NVML does not list holds the files: lost, uvm or not.
        inv.details.node_holders = vec![
            holder(10, "python3", &["/dev/nvidia0", "/dev/nvidia-uvm"]),
            holder(11, "pt_data_worker", &["/dev/nvidia0", "/dev/nvidia-uvm"]),
        ];
        let s = split(&inv, &inv.devices()[0]).unwrap();
        assert_eq!((s.lost, s.managed), (5 * GIB, 0));
        // A monitor beside it is not a holder.
        inv.details.node_holders[1] = holder(12, "nvidia-smi", &["/dev/nvidia0"]);
        assert_eq!(split(&inv, &inv.devices()[0]).unwrap().managed, 5 * GIB);
    }

    #[test]
    fn a_dead_listed_pid_makes_every_byte_lost() {
        let mut inv = five_unattributed();
        let mut gone = proc_(99, CVD_UNSET, &[(0, Some(GIB))]);
        gone.visible = false;
        inv.processes.push(gone);
        inv.details.node_holders = vec![holder(10, "python3", &["/dev/nvidia-uvm"])];
        let s = split(&inv, &inv.devices()[0]).unwrap();
        assert_eq!((s.lost, s.managed), (5 * GIB, 0));
    }

    #[test]
    fn a_coherent_gpu_without_holders_is_coherent() {
        let mut inv = five_unattributed();
        inv.environment.devices[0].numa_node = Some(1);
        let s = split(&inv, &inv.devices()[0]).unwrap();
        assert_eq!((s.lost, s.managed, s.coherent), (0, 0, 5 * GIB));
        // Unknown usage of a live process: nothing to split.
        inv.processes[0].devices[0].used = None;
        assert!(split(&inv, &inv.devices()[0]).is_none());
    }
}
