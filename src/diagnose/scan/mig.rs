//! MIG in diagnosis: a GPU in MIG mode is read through its instances (`gpu::MigInfo`), so
//! rules count memory, processes and headroom per instance, never on the parent
//! (`DeviceInfo::is_counted`), and a parent that refuses an unprivileged caller
//! (`NVML_ERROR_NO_PERMISSION`: nvml.h, "per-instance information can be queried by using
//! specific MIG device handles") is no finding while its instances answer.

use crate::gpu::{DeviceInfo, DeviceStatus};
use crate::inventory::Inventory;

/// Whether `d` is a MIG parent that refused this caller while at least one of its instances
/// answered: nothing is unavailable that this caller could read.
pub(crate) fn refused_parent_with_instances(inv: &Inventory, d: &DeviceInfo) -> bool {
    d.is_mig_parent()
        && d.status == DeviceStatus::NoPermission
        && inv
            .devices()
            .iter()
            .any(|i| i.is_counted() && i.mig_instance().is_some_and(|m| m.parent == d.index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{MigInfo, MigInstanceInfo};

    fn inv(devices: Vec<DeviceInfo>) -> Inventory {
        Inventory {
            environment: crate::model::Environment {
                hostname: "test".into(),
                kernel: "6.0".into(),
                vramdoc_version: "0".into(),
                backend: "sim".into(),
                sim_spec: None,
                versions: crate::gpu::Versions {
                    driver: "550.54.15".into(),
                    cuda: "12.4".into(),
                    nvml: "12.550.54.15".into(),
                },
                devices,
            },
            processes: Vec::new(),
            vantage: crate::model::Vantage::new(
                crate::inventory::PidNamespace {
                    host: true,
                    reason: "test".into(),
                },
                Some("550.54.15".into()),
            ),
            details: Default::default(),
        }
    }

    fn parent(status: DeviceStatus) -> DeviceInfo {
        DeviceInfo {
            mig: Some(MigInfo::Parent),
            ..DeviceInfo::unanswered(0, Default::default(), status)
        }
    }

    fn instance(ok: bool) -> DeviceInfo {
        let status = if ok {
            DeviceStatus::Ok
        } else {
            DeviceStatus::NoPermission
        };
        DeviceInfo {
            mig: Some(MigInfo::Instance(MigInstanceInfo {
                parent: 0,
                parent_uuid: "GPU-x".into(),
                gi: Some(1),
                ci: Some(0),
                profile: "3g.40gb".into(),
            })),
            ..DeviceInfo::unanswered(1, Default::default(), status)
        }
    }

    #[test]
    fn pod_mig_ids_name_their_instance() {
        let mut gpu = parent(DeviceStatus::Ok);
        gpu.uuid = "GPU-aaaa".into();
        // GKE's `nvidiaN` is a minor number (devsets); the instance has none of its own.
        gpu.minor = Some(0);
        let mut i1 = instance(true);
        i1.uuid = "MIG-bbbb".into();
        let devs = vec![gpu, i1];
        let of = |id: &str| crate::pods::device_of_id(id, &devs);
        assert_eq!(of("MIG-bbbb"), Some(1));
        assert_eq!(of("MIG-cccc"), None, "an instance this inventory lacks");
        assert_eq!(of("MIG-GPU-aaaa/1/0"), Some(1));
        assert_eq!(of("MIG-GPU-aaaa/5/0"), Some(0), "else its parent");
        assert_eq!(of("nvidia0/gi1"), Some(1));
        assert_eq!(of("nvidia0/gi3"), Some(0));
        assert_eq!(of("nvidia0/vgpu1"), Some(0));
        assert_eq!(of("nvidia0"), Some(0));
    }

    #[test]
    fn a_refused_parent_is_no_finding_only_while_an_instance_answers() {
        let refused = parent(DeviceStatus::NoPermission);
        let i = inv(vec![refused.clone(), instance(true)]);
        assert!(refused_parent_with_instances(&i, &refused));
        assert!(crate::diagnose::device_unavailable(&i).is_empty());
        let i = inv(vec![refused.clone(), instance(false)]);
        assert!(!refused_parent_with_instances(&i, &refused));
        assert_eq!(crate::diagnose::device_unavailable(&i).len(), 2);
        let lost = parent(DeviceStatus::Lost);
        let i = inv(vec![lost.clone(), instance(true)]);
        assert!(!refused_parent_with_instances(&i, &lost));
    }
}
