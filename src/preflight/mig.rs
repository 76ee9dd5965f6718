//! MIG in preflight (issue 25): a GPU in MIG mode runs jobs in its instances, so it is
//! judged by them. Its own answers say nothing a job could use: an unprivileged caller gets
//! `NVML_ERROR_NO_PERMISSION` on it (nvml.h: "per-instance information can be queried by
//! using specific MIG device handles") and its memory is the sum of its instances'. The GPU
//! passes when one of its instances is clean with the free memory asked for (a candidate,
//! named `0/1` and by its `MIG-<uuid>`, the id a job gives in `CUDA_VISIBLE_DEVICES`: NVIDIA
//! MIG User Guide, "CUDA Device Enumeration"); else every instance's problems are the GPU's.
//! A job given one instance (`MIG-<uuid>`) has that instance checked as a GPU is.

use super::Problem;
use crate::gpu::DeviceInfo;
use crate::model::ScanResult;
use crate::units::format_bytes;
use serde::Serialize;
use std::collections::BTreeMap;

/// A MIG instance a job could start in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// Its inventory index.
    pub device: u32,
    /// As scan names it: `0/1` (parent / GPU instance).
    pub label: String,
    /// Its `MIG-<uuid>`.
    pub uuid: String,
    /// Its free memory, bytes.
    pub free: u64,
}

/// Whether `id` is a MIG device UUID (`MIG-<uuid>`; not the legacy `MIG-GPU-<uuid>/…`).
pub(super) fn is_mig_uuid(id: &str) -> bool {
    let up = id.to_ascii_uppercase();
    up.starts_with("MIG-") && !up.starts_with("MIG-GPU-")
}

/// The inventory index of the instance `id` (a `MIG-<uuid>` or unique prefix) names among
/// `uuids`, or why none.
pub(super) fn resolve(id: &str, uuids: &[String]) -> Result<u32, String> {
    match crate::gpu::visible::uuid_matches(id, uuids).as_slice() {
        [one] => Ok(*one),
        [] => Err(format!(
            "{id} names no MIG instance this caller can open (`vramdoc scan` lists them)"
        )),
        _ => Err(format!("{id} matches several MIG instances")),
    }
}

/// The instances of MIG parent `parent` this scan read, in index order.
fn instances_of<'a>(scan: &'a ScanResult, parent: &DeviceInfo) -> Vec<&'a DeviceInfo> {
    scan.devices
        .iter()
        .filter(|d| d.mig_instance().is_some_and(|m| m.parent == parent.index))
        .collect()
}

/// Judge MIG parent `parent` by its instances, each judged by `judge` (its problems):
/// no problem and the candidates when one is clean, else every instance's problems (one
/// saying so when this caller can open none).
pub(super) fn judge_parent(
    scan: &ScanResult,
    parent: &DeviceInfo,
    judge: impl Fn(&DeviceInfo) -> Vec<Problem>,
) -> (Vec<Problem>, Vec<Candidate>) {
    let instances = instances_of(scan, parent);
    if instances.is_empty() {
        return (
            vec![Problem {
                device: parent.index,
                kind: "device-unavailable",
                detail: "in MIG mode with no instance this caller can open (give the job a \
                         MIG instance, `MIG-<uuid>`)"
                    .into(),
            }],
            Vec::new(),
        );
    }
    let judged: Vec<(&DeviceInfo, Vec<Problem>)> =
        instances.into_iter().map(|i| (i, judge(i))).collect();
    let candidates: Vec<Candidate> = judged
        .iter()
        .filter(|(_, p)| p.is_empty())
        .map(|(i, _)| Candidate {
            device: i.index,
            label: i.label(),
            uuid: i.uuid.clone(),
            free: i.memory.free,
        })
        .collect();
    if candidates.is_empty() {
        (
            judged.into_iter().flat_map(|(_, p)| p).collect(),
            Vec::new(),
        )
    } else {
        (Vec::new(), candidates)
    }
}

/// How the verdict names MIG instances (`0/1`).
pub(super) fn labels(scan: &ScanResult) -> BTreeMap<u32, String> {
    scan.devices
        .iter()
        .filter(|d| d.mig_instance().is_some())
        .map(|d| (d.index, d.label()))
        .collect()
}

/// `; MIG instances free: 0/2 (MIG-5e061090…, 39.25 GiB free)`, or nothing.
pub(super) fn candidates_text(candidates: &[Candidate]) -> String {
    if candidates.is_empty() {
        return String::new();
    }
    let each: Vec<String> = candidates
        .iter()
        .map(|c| {
            format!(
                "{} ({}, {} free)",
                c.label,
                crate::term::clean_text(&c.uuid),
                format_bytes(c.free)
            )
        })
        .collect();
    format!("; MIG instances a job can start in: {}", each.join(", "))
}

#[cfg(test)]
mod tests {
    use super::super::{judge, resolve as resolve_list};
    use crate::gpu::{DeviceStatus, MemoryInfo, MigInfo, MigInstanceInfo};
    use crate::units::GIB;

    fn dev(index: u32, uuid: &str, mig: Option<MigInfo>, status: DeviceStatus) -> DeviceInfo {
        DeviceInfo {
            mig,
            uuid: uuid.into(),
            memory: MemoryInfo {
                total: 40 * GIB,
                reserved: 0,
                used: 0,
                free: 40 * GIB,
            },
            ..DeviceInfo::unanswered(index, Default::default(), status)
        }
    }

    fn instance(index: u32, gi: u32, used: u64) -> DeviceInfo {
        let mut d = dev(
            index,
            &format!("MIG-{gi}aaaaaaa-0000-0000-0000-000000000000"),
            Some(MigInfo::Instance(MigInstanceInfo {
                parent: 0,
                parent_uuid: "GPU-0".into(),
                gi: Some(gi),
                ci: Some(0),
                profile: "3g.40gb".into(),
            })),
            DeviceStatus::Ok,
        );
        d.memory.used = used;
        d.memory.free = 40 * GIB - used;
        d
    }

    use super::*;

    /// A scan report of a parent refusing this caller (NO_PERMISSION) and its two instances,
    /// the first nearly full.
    fn report(second_used: u64) -> crate::model::Report {
        let mut inv = crate::scan::sample_inventory();
        inv.processes.clear();
        inv.environment.devices = vec![
            dev(
                0,
                "GPU-00000000-0000-0000-0000-000000000000",
                Some(MigInfo::Parent),
                DeviceStatus::NoPermission,
            ),
            instance(1, 1, 38 * GIB),
            instance(2, 2, second_used),
        ];
        crate::scan::build_report(&inv, &crate::diagnose::Thresholds::default())
    }

    #[test]
    fn a_mig_gpu_passes_with_a_free_instance_and_names_it() {
        let r = report(0);
        let uuids: Vec<String> = r
            .scan()
            .unwrap()
            .devices
            .iter()
            .map(|d| d.uuid.clone())
            .collect();
        let sel = resolve_list("SLURM_JOB_GPUS", "0", &uuids).unwrap();
        let v = judge(&r, sel, Some(8 * GIB));
        assert!(
            v.ok(),
            "not refused for its NO_PERMISSION or its sum: {v:?}"
        );
        assert_eq!(v.candidates.len(), 1, "{v:?}");
        assert_eq!(v.candidates[0].label, "0/2");
        let line = v.line();
        assert!(
            line.starts_with("ok: GPU 0 (SLURM_JOB_GPUS) clean"),
            "{line}"
        );
        assert!(line.contains("0/2 (MIG-2aaaaaaa"), "{line}");
        // The job's own instance, by its MIG UUID: checked as a GPU is.
        let sel = resolve_list("CUDA_VISIBLE_DEVICES", "MIG-1aaaaaaa", &uuids).unwrap();
        assert_eq!(sel.devices, vec![1]);
        let v = judge(&r, sel, Some(8 * GIB));
        let kinds: Vec<&str> = v.problems.iter().map(|p| p.kind).collect();
        assert!(kinds.contains(&"not-enough-free"), "{v:?}");
        assert!(v.problems.iter().all(|p| p.device == 1), "{v:?}");
        assert!(v.line().contains("GPU 0/1: 2.00 GiB free"), "{}", v.line());
        // An index names a GPU, never an instance.
        assert!(resolve_list("--gpus", "1", &uuids).is_err());
    }

    #[test]
    fn a_mig_gpu_with_no_free_instance_gives_its_instances_problems() {
        let r = report(39 * GIB);
        let sel = super::super::Selection {
            devices: vec![0],
            source: "--gpus".into(),
        };
        let v = judge(&r, sel, Some(8 * GIB));
        let short: Vec<u32> = v
            .problems
            .iter()
            .filter(|p| p.kind == "not-enough-free")
            .map(|p| p.device)
            .collect();
        assert_eq!(short, vec![1, 2], "{v:?}");
        assert!(v.problems.iter().all(|p| p.device != 0), "{v:?}");
        assert!(v.candidates.is_empty());
        assert!(v.line().contains("GPU 0/2: 1.00 GiB free"), "{}", v.line());
    }
}
