//! Used memory no live listed process accounts for, split by what explains it: the one
//! decision behind `no-live-owner`'s severity and the Prometheus series
//! `vramdoc_gpu_memory_unattributed_bytes` (only the lost part) and
//! `vramdoc_gpu_memory_explained_unattributed_bytes{reason}`, so a finding at info never
//! sits beside a critical alert.
//!
//! What explains the bytes, first match wins:
//! - nothing, when NVML lists a PID that does not exist on the device, or a process NVML
//!   does not list holds the driver's device files with a CUDA context mapped, or with maps
//!   that could not be read (`super::holders`; descriptors alone are every NVML monitor's):
//!   those are the shapes of lost memory (`lost`);
//! - managed (unified) memory, up to what the live listed processes on the device have
//!   mapped from `/dev/nvidia-uvm` beyond their contexts' own 2 MiB
//!   ([`CONTEXT_UVM_MAPPING`]): memory from `cuMemAllocManaged` resident on a GPU is counted
//!   in its `used` but in no process's `usedGpuMemory` (Syllo/nvtop#213,
//!   gpuopenanalytics/pynvml#63, rapidsai/rmm#2259) and is a mapping of `/dev/nvidia-uvm` of
//!   its size in the process (`managed`). Holding `/dev/nvidia-uvm` says nothing: every CUDA
//!   process holds it from `cuInit`, with or without managed memory (observed on an H200,
//!   580.159.04, 2026-11-28; docs/simulator.md, "Managed memory"). The mapped size is an
//!   upper bound (managed pages may be resident on the host); a process whose maps cannot be
//!   read (another user's, `hidepid`) explains nothing;
//! - a coherent-memory GPU (GH200/GB200: a NUMA node of the host) keeps pages freed by
//!   exited processes counted as used until the kernel reclaims them (nvml.h,
//!   `nvmlDeviceGetMemoryInfo`) (`coherent`);
//! - seen from a container on a driver that lists only its namespace's processes (535.113
//!   on), other tenants' memory (`outside_namespace`, docs/scan.md "Where vramdoc stands");
//! - otherwise `lost`.
//!
//! What managed memory does not explain goes on down the list (coherent, else lost).

use super::accounting::unattributed_bytes;
use crate::diagnose::evidence::{ev, ev_bytes};
use crate::diagnose::{fixes, ids};
use crate::gpu::DeviceInfo;
use crate::inventory::{Inventory, NodeHolder};
use crate::model::{Evidence, Finding, Severity, Unattributed};
use crate::units::format_bytes;

/// The UVM device file's name (`/dev/nvidia-uvm`, the simulated box's `dev/nvidia-uvm`).
pub const UVM_NODE: &str = crate::host::devfiles::UVM_NODE;

/// What a CUDA context maps of `/dev/nvidia-uvm` by itself, without managed memory (one
/// 2 MiB mapping after `cuCtxCreate`, observed on an H200, 580.159.04, 2026-11-28).
pub const CONTEXT_UVM_MAPPING: u64 = 2 << 20;

/// Whether `h` holds the UVM device file open.
pub fn holds_uvm(h: &NodeHolder) -> bool {
    h.nodes
        .iter()
        .any(|n| crate::host::is_uvm_node(std::path::Path::new(n)))
}

/// The live processes NVML lists on device `d` that hold the UVM device file.
fn uvm_holders<'a>(inv: &'a Inventory, d: &DeviceInfo) -> Vec<&'a NodeHolder> {
    let host = inv.invisible_is_dead();
    let listed: Vec<u32> = inv
        .processes
        .iter()
        .filter(|p| p.usage_on(d.index).is_some() && (p.visible || !host))
        .map(|p| p.pid)
        .collect();
    inv.details
        .node_holders
        .iter()
        .filter(|h| listed.contains(&h.pid) && holds_uvm(h))
        .collect()
}

/// Bytes `h` has mapped from `/dev/nvidia-uvm` beyond its context's own mapping: the most
/// its managed memory can be (0 when its maps were not read).
fn managed_bound(h: &NodeHolder) -> u64 {
    h.uvm_mapped
        .unwrap_or(0)
        .saturating_sub(CONTEXT_UVM_MAPPING)
}

/// Evidence for device `d`'s `no-live-owner` finding about managed memory: a line per live
/// listed process holding `/dev/nvidia-uvm` whose maps could not be read (its managed
/// memory, if any, is not seen), and, when `with_managed`, the bytes explained as managed
/// memory (when some are, and some are still lost).
pub fn managed_evidence(inv: &Inventory, d: &DeviceInfo, with_managed: bool) -> Vec<Evidence> {
    let mut out: Vec<Evidence> = uvm_holders(inv, d)
        .iter()
        .filter(|h| h.uvm_mapped.is_none())
        .map(|h| {
            ev(
                format!("maps of PID {} not readable", h.pid),
                "run as root to see managed memory",
            )
        })
        .collect();
    if with_managed {
        if let Some(s) = split(inv, d).filter(|s| s.managed > 0) {
            out.push(ev_bytes("explained as managed memory", s.managed));
        }
    }
    out
}

/// The split of device `d`'s unattributed bytes; `None` when a live process's usage on it is
/// not available (nothing can be said) or the device did not answer.
pub fn split(inv: &Inventory, d: &DeviceInfo) -> Option<Unattributed> {
    if !d.status.is_ok() || d.memory_unknown.is_some() {
        return None;
    }
    let host = inv.invisible_is_dead();
    let bytes = unattributed_bytes(d, &inv.processes, host)?;
    let on_dev: Vec<&crate::model::ProcessInfo> = inv
        .processes
        .iter()
        .filter(|p| p.usage_on(d.index).is_some())
        .collect();
    let is_live = |p: &crate::model::ProcessInfo| p.visible || !host;
    let dead = on_dev.iter().any(|p| !is_live(p));
    // A process NVML does not list here holding the device files with a CUDA context (or
    // whose maps could not be read) may keep the memory: nothing explains it then.
    let foreign = super::holders::of_device(inv, d).any_possible();
    let mut out = Unattributed {
        device: d.index,
        ..Unattributed::default()
    };
    if bytes == 0 || dead || foreign {
        out.lost = bytes;
        // In a container under a translating driver, only the exited PIDs' listed bytes are
        // known lost (whoever holds them open): the rest is other tenants' memory, unlisted
        // here.
        if dead && !inv.host() && inv.invisible_is_dead() {
            let exited: u64 = on_dev
                .iter()
                .filter(|p| !is_live(p))
                .filter_map(|p| p.usage_on(d.index).and_then(|u| u.used))
                .fold(0, u64::saturating_add);
            out.lost = exited.min(bytes);
            out.outside_namespace = bytes - out.lost;
        }
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
    // Managed memory: what the listed processes have mapped from nvidia-uvm beyond their
    // contexts, at most the unattributed bytes.
    let uvm = uvm_holders(inv, d);
    let bound = uvm
        .iter()
        .map(|h| managed_bound(h))
        .fold(0u64, u64::saturating_add);
    out.managed = bound.min(bytes);
    if out.managed > 0 {
        out.managed_by = uvm
            .iter()
            .filter(|h| managed_bound(h) > 0)
            .map(|h| h.pid)
            .collect();
    }
    let rest = bytes - out.managed;
    if d.numa_node.is_some() {
        out.coherent = rest;
    } else {
        out.lost = rest;
    }
    Some(out)
}

/// `no-live-owner` at info for device `d` when [`split`] explains its unattributed bytes
/// (managed memory of a live process, or a coherent GPU's unreclaimed pages) but at most
/// `allowance` (the rule's threshold), with `evidence` (the rule's) and what explains them;
/// `None` when more is lost.
pub fn explained_finding(
    inv: &Inventory,
    d: &DeviceInfo,
    evidence: &[Evidence],
    allowance: u64,
) -> Option<Finding> {
    let s = split(inv, d)?;
    if s.lost > allowance || s.managed + s.coherent == 0 {
        return None;
    }
    let mut evidence = evidence.to_vec();
    evidence.extend(managed_evidence(inv, d, false));
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
            "mapping /dev/nvidia-uvm beyond a context (managed memory), listed on this GPU",
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
            uvm_mapped: None,
            context: Some(true),
        }
    }

    /// `holder` holding nvidia-uvm with `mapped` bytes of it in its maps.
    fn uvm_holder(pid: u32, mapped: Option<u64>) -> NodeHolder {
        NodeHolder {
            uvm_mapped: mapped,
            ..holder(
                pid,
                "python3",
                &["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"],
            )
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
    fn a_listed_process_mapping_managed_memory_explains_the_bytes_as_managed() {
        let mut inv = five_unattributed();
        // 2 GiB of managed memory beside the context's 2 MiB: 2 GiB managed, 3 GiB lost.
        inv.details.node_holders = vec![uvm_holder(10, Some(2 * GIB + CONTEXT_UVM_MAPPING))];
        let s = split(&inv, &inv.devices()[0]).unwrap();
        assert_eq!((s.lost, s.managed, s.coherent), (3 * GIB, 2 * GIB, 0));
        assert_eq!(s.managed_by, vec![10]);
        // Explained up to the unattributed bytes, never more.
        inv.details.node_holders = vec![uvm_holder(10, Some(8 * GIB))];
        let s = split(&inv, &inv.devices()[0]).unwrap();
        assert_eq!((s.lost, s.managed), (0, 5 * GIB));
        let f = explained_finding(&inv, &inv.devices()[0], &[], 0).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(f.pid, Some(10));
    }

    #[test]
    fn holding_nvidia_uvm_alone_explains_nothing() {
        let mut inv = five_unattributed();
        // Every CUDA process holds nvidia-uvm and maps 2 MiB of it for its context.
        inv.details.node_holders = vec![uvm_holder(10, Some(CONTEXT_UVM_MAPPING))];
        let s = split(&inv, &inv.devices()[0]).unwrap();
        assert_eq!((s.lost, s.managed), (5 * GIB, 0));
        assert!(s.managed_by.is_empty());
        assert!(explained_finding(&inv, &inv.devices()[0], &[], GIB).is_none());
        assert!(managed_evidence(&inv, &inv.devices()[0], true).is_empty());
        // Maps not readable: nothing explained, and the evidence says why.
        inv.details.node_holders = vec![uvm_holder(10, None)];
        let s = split(&inv, &inv.devices()[0]).unwrap();
        assert_eq!((s.lost, s.managed), (5 * GIB, 0));
        let e = managed_evidence(&inv, &inv.devices()[0], true);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].label, "maps of PID 10 not readable");
        assert_eq!(e[0].value, "run as root to see managed memory");
    }

    #[test]
    fn what_is_left_within_the_threshold_is_still_info() {
        let mut inv = five_unattributed();
        // 4.5 GiB managed of 5 GiB: 512 MiB lost, within a 1 GiB threshold.
        inv.details.node_holders = vec![uvm_holder(
            10,
            Some(4 * GIB + GIB / 2 + CONTEXT_UVM_MAPPING),
        )];
        let d = &inv.devices()[0];
        assert_eq!(split(&inv, d).unwrap().lost, GIB / 2);
        let f = explained_finding(&inv, d, &[], GIB).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert!(explained_finding(&inv, d, &[], GIB / 4).is_none());
        // Above it, the error carries the part that is explained.
        let e = managed_evidence(&inv, d, true);
        assert_eq!(e[0].label, "explained as managed memory");
    }

    #[test]
    fn without_uvm_or_with_a_foreign_holder_the_bytes_are_lost() {
        let mut inv = five_unattributed();
        inv.details.node_holders = vec![holder(10, "python3", &["/dev/nvidia0"])];
        assert_eq!(split(&inv, &inv.devices()[0]).unwrap().lost, 5 * GIB);
        // A forked worker NVML does not list holds the files: lost, uvm or not.
        inv.details.node_holders = vec![
            uvm_holder(10, Some(6 * GIB)),
            holder(11, "pt_data_worker", &["/dev/nvidia0", "/dev/nvidia-uvm"]),
        ];
        let s = split(&inv, &inv.devices()[0]).unwrap();
        assert_eq!((s.lost, s.managed), (5 * GIB, 0));
        // Its maps not readable: it may be one, so nothing is explained either.
        inv.details.node_holders[1].context = None;
        assert_eq!(split(&inv, &inv.devices()[0]).unwrap().lost, 5 * GIB);
        // A monitor beside it is not a holder.
        inv.details.node_holders[1] = holder(12, "nvidia-smi", &["/dev/nvidia0"]);
        assert_eq!(split(&inv, &inv.devices()[0]).unwrap().managed, 5 * GIB);
        // Nor is any NVML client: descriptors and no CUDA context mapped.
        inv.details.node_holders[1] = NodeHolder {
            context: Some(false),
            ..holder(13, "pynvml-loop", &["/dev/nvidia0", "/dev/nvidia-uvm"])
        };
        assert_eq!(split(&inv, &inv.devices()[0]).unwrap().managed, 5 * GIB);
    }

    #[test]
    fn a_dead_listed_pid_makes_every_byte_lost() {
        let mut inv = five_unattributed();
        let mut gone = proc_(99, CVD_UNSET, &[(0, Some(GIB))]);
        gone.visible = false;
        inv.processes.push(gone);
        inv.details.node_holders = vec![uvm_holder(10, Some(6 * GIB))];
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
