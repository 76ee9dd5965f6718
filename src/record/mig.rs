//! MIG in a recording (`run`): on a GPU in MIG mode the devices recorded are its instances,
//! never the parent. nvml.h (`nvmlDeviceGetComputeRunningProcesses_v3`): "In MIG mode, if
//! device handle is provided, the API returns aggregate information, only if the caller has
//! appropriate privileges. Per-instance information can be queried by using specific MIG
//! device handles" — so a privileged caller reading the parent would list every instance's
//! processes a second time, and the parent's memory is the sum of its instances'. Recording
//! the instances alone gives each its own series, process lists and headroom: a job in one
//! instance is judged against that instance's memory, and a neighbour in another instance is
//! not on its device. CUDA names an instance by its `MIG-<uuid>` in `CUDA_VISIBLE_DEVICES`
//! and enumerates at most one MIG device per process (NVIDIA MIG User Guide, "CUDA Device
//! Enumeration"): [`ordinal`] maps an error line's ordinal through such a list.

use crate::gpu::DeviceInfo;

/// The devices `run` records out of an inventory: every device except GPUs in MIG mode,
/// whose instances (entries of their own) are recorded instead.
pub fn recorded_devices(devices: &[DeviceInfo]) -> Vec<DeviceInfo> {
    devices
        .iter()
        .filter(|d| !d.is_mig_parent())
        .cloned()
        .collect()
}

/// The physical index of CUDA ordinal `ordinal` of a process whose `CUDA_VISIBLE_DEVICES`
/// is a list of MIG device UUIDs (unique prefixes allowed), among recorded devices
/// `(index, uuid)`: `Some(None)` when the ordinal names none (CUDA enumerates one MIG
/// device per process: only ordinal 0 exists), `None` when the list is not a MIG list (the
/// ordinary mapping applies).
pub fn ordinal(
    ordinal: u32,
    cuda_visible_devices: Option<&str>,
    devices: &[(u32, &str)],
) -> Option<Option<u32>> {
    let list = cuda_visible_devices?.trim();
    if !list.to_ascii_uppercase().starts_with("MIG-") {
        return None;
    }
    if ordinal != 0 {
        return Some(None);
    }
    let first = list
        .split(',')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let hits: Vec<u32> = devices
        .iter()
        .filter(|(_, u)| {
            let u = u.to_ascii_lowercase();
            u.starts_with("mig-") && u.starts_with(&first)
        })
        .map(|(i, _)| *i)
        .collect();
    Some(match hits.as_slice() {
        [one] => Some(*one),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{DeviceStatus, MigInfo, MigInstanceInfo};

    fn dev(index: u32, mig: Option<MigInfo>) -> DeviceInfo {
        DeviceInfo {
            mig,
            ..DeviceInfo::unanswered(index, Default::default(), DeviceStatus::Ok)
        }
    }

    #[test]
    fn parents_in_mig_mode_give_way_to_their_instances() {
        let inst = |gi| {
            Some(MigInfo::Instance(MigInstanceInfo {
                parent: 0,
                parent_uuid: "GPU-a".into(),
                gi: Some(gi),
                ci: Some(0),
                profile: "3g.40gb".into(),
            }))
        };
        let all = vec![
            dev(0, Some(MigInfo::Parent)),
            dev(1, None),
            dev(2, inst(1)),
            dev(3, inst(2)),
        ];
        let kept: Vec<u32> = recorded_devices(&all).iter().map(|d| d.index).collect();
        assert_eq!(kept, vec![1, 2, 3]);
        // A box without MIG is recorded whole.
        let plain = vec![dev(0, None), dev(1, None)];
        assert_eq!(recorded_devices(&plain), plain);
    }

    #[test]
    fn a_mig_list_names_one_instance() {
        let d = [
            (0, "GPU-11111111-0000-0000-0000-000000000000"),
            (2, "MIG-aaaa1111-0000-0000-0000-000000000000"),
            (3, "MIG-bbbb2222-0000-0000-0000-000000000000"),
        ];
        let m = "MIG-bbbb2222-0000-0000-0000-000000000000";
        assert_eq!(ordinal(0, Some(m), &d), Some(Some(3)));
        assert_eq!(ordinal(0, Some("mig-AAAA"), &d), Some(Some(2)));
        assert_eq!(
            ordinal(1, Some(m), &d),
            Some(None),
            "one MIG device per process"
        );
        assert_eq!(ordinal(0, Some("MIG-cccc"), &d), Some(None));
        assert_eq!(ordinal(0, Some("MIG-"), &d), Some(None), "not unique");
        assert_eq!(ordinal(0, Some("0"), &d), None);
        assert_eq!(ordinal(0, None, &d), None);
    }
}
