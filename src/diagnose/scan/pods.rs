//! The allocation audit (issue 18; docs/findings.md "Allocation audit"): GPU memory held by a
//! pod's process on a GPU the kubelet did not allocate to that pod (`unallocated-gpu-use`), or
//! on one whose allocation cannot be told from the node (`pod-allocation-unknown`: DRA claims
//! the kubelet does not list), and which pods were allocated a GPU whose memory has no live owner (evidence for
//! `no-live-owner`). Pure: the pod facts come from the inventory ([`crate::pods`]).

use crate::diagnose::evidence::{ev, ev_bytes, who};
use crate::diagnose::{fixes, ids};
use crate::inventory::Inventory;
use crate::model::{Finding, Severity};
use crate::pods::device_of_id;
use crate::units::format_bytes;

/// `unallocated-gpu-use` (warn): a process of a pod holds memory on a GPU the kubelet did not
/// allocate to that pod. Fires only when the pod-resources API listed the pod and every id it
/// allocated maps to a GPU here; never on 0-byte peer listings (NCCL/IPC mappings).
///
/// Where NVIDIA's DRA kubelet plugin is registered and the answer lists no DRA claim for any
/// container, a pod may hold the GPU through a ResourceClaim the kubelet does not report (its
/// `KubeletPodResourcesDynamicResources` gate off, the default before Kubernetes 1.34): the
/// same facts are then `pod-allocation-unknown` (info), saying what would decide it.
pub fn unallocated_gpu_use(inv: &Inventory) -> Vec<Finding> {
    let devices = inv.devices();
    let claims_unseen = inv
        .details
        .dra_registration
        .as_ref()
        .filter(|_| !inv.details.dynamic_resources_listed);
    let mut out = Vec::new();
    for p in inv.processes.iter().filter(|p| p.visible) {
        let Some(pod) = &p.pod else { continue };
        if crate::pods::is_system_process(pod, p.name.as_deref()) {
            continue;
        }
        let Some(ids) = &pod.allocated_gpus else {
            continue;
        };
        let allocated: Option<Vec<u32>> = ids.iter().map(|i| device_of_id(i, devices)).collect();
        let Some(allocated) = allocated else { continue };
        let outside: Vec<(u32, u64)> = p
            .devices
            .iter()
            .filter_map(|u| Some((u.device, u.used?)))
            .filter(|(d, b)| *b > 0 && !allocated.contains(d))
            .collect();
        if outside.is_empty() {
            continue;
        }
        let gpus: Vec<String> = outside.iter().map(|(d, _)| d.to_string()).collect();
        let held: u64 = outside.iter().map(|(_, b)| b).sum();
        let mut allowed: Vec<u32> = allocated.clone();
        allowed.sort_unstable();
        allowed.dedup();
        let allocated_text = if ids.is_empty() {
            "no GPU".to_string()
        } else {
            format!("{} ({})", ids.join(", "), gpu_list(&allowed))
        };
        let mut evidence = vec![ev("pod", pod.label()), ev("pod UID", pod.uid.clone())];
        if let Some(c) = &pod.container {
            evidence.push(ev("container", c.clone()));
        }
        evidence.push(ev(
            "allocated by the kubelet (pod-resources)",
            allocated_text,
        ));
        for (d, b) in &outside {
            evidence.push(ev_bytes(format!("held on GPU {d} (not allocated)"), *b));
        }
        evidence.push(ev("CUDA_VISIBLE_DEVICES", p.cuda_visible_devices.clone()));
        if let Some(sock) = claims_unseen {
            evidence.push(ev(
                "NVIDIA's DRA kubelet plugin registered",
                sock.display().to_string(),
            ));
            evidence.push(ev(
                "DRA claims listed by pod-resources",
                "none, for any container of the node (the kubelet lists them only with \
                 KubeletPodResourcesDynamicResources on)",
            ));
            out.push(Finding {
                id: ids::POD_ALLOCATION_UNKNOWN.into(),
                severity: Severity::Info,
                title: format!(
                    "Cannot tell from here whether pod {} was allocated GPU {}: {} holds {} \
                     there outside its device-plugin allocation, and the pod may hold it \
                     through a DRA claim the kubelet does not list",
                    pod.label(),
                    gpus.join(", "),
                    who(p),
                    format_bytes(held),
                ),
                devices: outside.iter().map(|(d, _)| *d).collect(),
                pid: Some(p.pid),
                evidence,
                fix: fixes::POD_ALLOCATION_UNKNOWN.into(),
            });
            continue;
        }
        out.push(Finding {
            id: ids::UNALLOCATED_GPU_USE.into(),
            severity: Severity::Warn,
            title: format!(
                "{} of pod {} holds {} on GPU {} that the pod was not allocated",
                who(p),
                pod.label(),
                format_bytes(held),
                gpus.join(", ")
            ),
            devices: outside.iter().map(|(d, _)| *d).collect(),
            pid: Some(p.pid),
            evidence,
            fix: fixes::UNALLOCATED_GPU_USE.into(),
        });
    }
    out
}

/// `allocated-gpu-idle` (info, serve): a GPU the kubelet allocated to a pod on which none of
/// the pod's processes has held memory for at least [`super::Thresholds::allocation_idle_min`]. Only
/// in the host PID namespace (elsewhere the pod's processes may just be invisible), where
/// per-process data exists and the GPU's process list was read. A one-shot scan sees every
/// allocation for the first time: never there.
pub fn allocated_gpu_idle(inv: &Inventory, th: &super::Thresholds) -> Vec<Finding> {
    let d = &inv.details;
    if !inv.host() || d.per_process_unavailable.is_some() {
        return Vec::new();
    }
    let min = th.allocation_idle_min.as_secs_f64();
    d.idle_allocations
        .iter()
        .filter(|a| a.idle_seconds >= min && !d.list_errors.contains_key(&a.device))
        .map(|a| {
            let idle = crate::units::format_duration(std::time::Duration::from_secs_f64(
                a.idle_seconds,
            ));
            Finding {
                id: ids::ALLOCATED_GPU_IDLE.into(),
                severity: Severity::Info,
                title: format!(
                    "GPU {} is allocated to pod {}/{} and none of its processes has used it for {idle}",
                    a.device, a.namespace, a.pod
                ),
                devices: vec![a.device],
                pid: None,
                evidence: vec![
                    ev("pod", format!("{}/{}", a.namespace, a.pod)),
                    ev("allocated device id", a.device_id.clone()),
                    ev("unused for", idle),
                    ev(
                        "threshold",
                        crate::units::format_duration(th.allocation_idle_min),
                    ),
                ],
                fix: fixes::ALLOCATED_GPU_IDLE.into(),
            }
        })
        .collect()
}

fn gpu_list(list: &[u32]) -> String {
    let v: Vec<String> = list.iter().map(|d| d.to_string()).collect();
    match v.len() {
        0 => "no GPU here".into(),
        1 => format!("GPU {}", v[0]),
        _ => format!("GPUs {}", v.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::evidence::owner_pods_evidence;
    use crate::model::{PodAllocation, PodRef, ProcessDeviceUsage};
    use crate::units::GIB;

    fn inv_with(pod: Option<PodRef>, usage: &[(u32, u64)]) -> Inventory {
        let mut inv = crate::scan::sample_inventory();
        inv.processes.truncate(1);
        let p = &mut inv.processes[0];
        p.pod = pod;
        p.devices = usage
            .iter()
            .map(|(d, b)| ProcessDeviceUsage {
                device: *d,
                used: Some(*b),
                lists: Vec::new(),
            })
            .collect();
        inv
    }

    fn pod(allocated: Option<&[&str]>) -> PodRef {
        PodRef {
            uid: "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b".into(),
            namespace: Some("ml".into()),
            name: Some("llm-0".into()),
            container: Some("vllm".into()),
            container_id: None,
            allocated_gpus: allocated.map(|a| a.iter().map(|s| s.to_string()).collect()),
        }
    }

    const U0: &str = "GPU-00000000-0000-0000-0000-000000000000";
    const U1: &str = "GPU-00000001-0000-0000-0000-000000000000";

    #[test]
    fn device_ids_of_every_plugin_shape_map_to_gpus() {
        let inv = crate::scan::sample_inventory();
        let d = inv.devices();
        assert_eq!(device_of_id(U1, d), Some(1));
        assert_eq!(
            device_of_id(&U1.to_lowercase().replace("gpu-", "GPU-"), d),
            Some(1)
        );
        assert_eq!(device_of_id(&format!("{U0}::3"), d), Some(0));
        assert_eq!(device_of_id(&format!("MIG-{U1}/1/0"), d), Some(1));
        assert_eq!(device_of_id("nvidia1", d), Some(1));
        assert_eq!(device_of_id("nvidia7", d), None);
        assert_eq!(
            device_of_id("MIG-4b2c3a1e-1111-2222-3333-444455556666", d),
            None
        );
        assert_eq!(
            device_of_id("GPU-ffffffff-0000-0000-0000-000000000000", d),
            None
        );
    }

    #[test]
    fn the_mps_control_daemon_and_system_pods_are_not_flagged() {
        let mut mps = pod(Some(&[]));
        mps.name = Some("nvidia-device-plugin-mps-control-daemon-x7k2p".into());
        assert!(unallocated_gpu_use(&inv_with(Some(mps), &[(0, GIB)])).is_empty());
        // The GPU operator's validators and standalone DCGM (no GPU request).
        for name in [
            "nvidia-cuda-validator-9xk4q",
            "nvidia-operator-validator-m2v7d",
            "nvidia-dcgm-h5lzt",
        ] {
            let mut p = pod(Some(&[]));
            p.name = Some(name.into());
            assert!(
                unallocated_gpu_use(&inv_with(Some(p), &[(0, GIB)])).is_empty(),
                "{name}"
            );
        }
        let mut inv = inv_with(Some(pod(Some(&[]))), &[(0, GIB)]);
        inv.processes[0].name = Some("nvidia-cuda-mps-server".into());
        assert!(unallocated_gpu_use(&inv).is_empty());
        // The same pod shape under a workload's name is flagged.
        assert_eq!(
            unallocated_gpu_use(&inv_with(Some(pod(Some(&[]))), &[(0, GIB)])).len(),
            1
        );
    }

    #[test]
    fn memory_on_a_gpu_outside_the_pods_allocation_is_a_warning() {
        let inv = inv_with(Some(pod(Some(&[U0]))), &[(0, 2 * GIB), (1, 3 * GIB)]);
        let f = unallocated_gpu_use(&inv);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "unallocated-gpu-use");
        assert_eq!(f[0].severity, Severity::Warn);
        assert_eq!(f[0].devices, vec![1]);
        assert_eq!(f[0].pid, Some(4242));
        assert!(
            f[0].title.contains("pod ml/llm-0 holds 3.00 GiB on GPU 1"),
            "{}",
            f[0].title
        );
        // A pod allocated no GPU that holds memory anyway.
        let f = unallocated_gpu_use(&inv_with(Some(pod(Some(&[]))), &[(0, GIB)]));
        assert_eq!(f.len(), 1);
        assert!(f[0].evidence.iter().any(|e| e.value == "no GPU"));
    }

    /// NVIDIA's DRA plugin registered and no DRA claim listed for any container: use outside
    /// the device-plugin allocation cannot be told (info, saying how to make it decidable);
    /// once the answer lists a claim (the gate is on), it is a warning again.
    #[test]
    fn use_outside_the_allocation_is_unknown_where_dra_claims_may_be_unlisted() {
        let mut inv = inv_with(Some(pod(Some(&[]))), &[(0, GIB)]);
        inv.details.dra_registration =
            Some("/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock".into());
        let f = unallocated_gpu_use(&inv);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "pod-allocation-unknown");
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].devices, vec![0]);
        assert!(
            f[0].title.starts_with("Cannot tell from here"),
            "{}",
            f[0].title
        );
        assert!(
            f[0].fix.contains("KubeletPodResourcesDynamicResources") && f[0].fix.contains("1.34"),
            "{}",
            f[0].fix
        );
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.value.ends_with("gpu.nvidia.com-reg.sock")));
        // A device-plugin GPU and use of another: the other may be a claim's too.
        let mut both = inv_with(Some(pod(Some(&[U0]))), &[(0, GIB), (1, GIB)]);
        both.details.dra_registration = inv.details.dra_registration.clone();
        let f = unallocated_gpu_use(&both);
        assert_eq!(
            (f[0].id.as_str(), &f[0].devices),
            ("pod-allocation-unknown", &vec![1])
        );
        // The gate is on (some container's claims are listed): decided.
        inv.details.dynamic_resources_listed = true;
        let f = unallocated_gpu_use(&inv);
        assert_eq!(
            (f[0].id.as_str(), f[0].severity),
            ("unallocated-gpu-use", Severity::Warn)
        );
        // No DRA plugin: decided as before.
        inv.details.dynamic_resources_listed = false;
        inv.details.dra_registration = None;
        assert_eq!(unallocated_gpu_use(&inv)[0].id, "unallocated-gpu-use");
    }

    /// NVIDIA's DRA driver's MIG device names, both forms, name their instance on the GPU of
    /// the minor; two instances of the profile on that GPU, or none, cannot be told.
    #[test]
    fn dra_mig_device_names_map_to_their_instance() {
        use crate::gpu::{MigInfo, MigInstanceInfo};
        let mut devices = crate::scan::sample_inventory().environment.devices;
        devices.truncate(2);
        // Minors permuted: /dev/nvidia0 is GPU 1, whose instances follow.
        devices[0].minor = Some(1);
        devices[1].minor = Some(0);
        devices[1].mig = Some(MigInfo::Parent);
        let parent = devices[1].clone();
        let instance = |index: u32, gi: u32, profile: &str| {
            let mut d = parent.clone();
            d.index = index;
            d.minor = None;
            d.uuid = format!("MIG-0000000{index}-0000-0000-0000-000000000000");
            d.mig = Some(MigInfo::Instance(MigInstanceInfo {
                parent: 1,
                parent_uuid: parent.uuid.clone(),
                gi: Some(gi),
                ci: Some(0),
                profile: profile.into(),
            }));
            d
        };
        devices.push(instance(2, 1, "3g.40gb"));
        devices.push(instance(3, 5, "1g.10gb+me"));
        devices.push(instance(4, 6, "1g.10gb"));
        for (id, want) in [
            // v25.12 on: profile, GI profile id, placement start.
            ("gpu-0-mig-3g40gb-2-0", Some(2)),
            ("gpu-0-mig-1g10gb-me-7-6", Some(3)),
            ("gpu-0-mig-1g10gb-0-5", Some(4)),
            ("gpu-0-mig-2g20gb-1-0", None),
            ("gpu-1-mig-3g40gb-2-0", None),
            // v25.3 – v25.8: GI profile id, placement start, size (3 slices: one instance;
            // 1 slice: two, so not told).
            ("gpu-0-mig-2-4-4", Some(2)),
            ("gpu-0-mig-0-6-1", None),
            ("gpu-0-mig-99-0-1", None),
            ("gpu-0-mig-3g40gb", None),
            ("gpu-x-mig-3g40gb-2-0", None),
        ] {
            assert_eq!(device_of_id(id, &devices), want, "{id}");
        }
        devices[0].minor = None;
        assert_eq!(device_of_id("gpu-0-mig-3g40gb-2-0", &devices), None);
    }

    #[test]
    fn does_not_fire_without_data_on_allocated_gpus_on_peer_listings_or_on_unmappable_ids() {
        for inv in [
            // Inside the allocation (a time-slicing replica of GPU 0).
            inv_with(Some(pod(Some(&[&format!("{U0}::1")]))), &[(0, GIB)]),
            // No pod-resources data for the pod; no pod at all.
            inv_with(Some(pod(None)), &[(1, GIB)]),
            inv_with(None, &[(1, GIB)]),
            // A 0-byte peer listing on the other GPU (NCCL).
            inv_with(Some(pod(Some(&[U0]))), &[(0, GIB), (1, 0)]),
            // A MIG UUID whose parent this scan cannot tell.
            inv_with(
                Some(pod(Some(&["MIG-4b2c3a1e-1111-2222-3333-444455556666"]))),
                &[(1, GIB)],
            ),
        ] {
            assert!(
                unallocated_gpu_use(&inv).is_empty(),
                "{:?}",
                inv.processes[0]
            );
        }
    }

    #[test]
    fn an_allocated_gpu_unused_past_the_threshold_is_information_in_the_host_namespace_only() {
        use crate::pods::{IdleAllocation, PodMemory};
        use std::time::{Duration, Instant};
        // The facts: the pod is allocated GPUs 0 and 1 and its process holds memory on 0.
        let mut inv = inv_with(Some(pod(Some(&[U0, U1]))), &[(0, GIB)]);
        let alloc = vec![PodAllocation {
            namespace: "ml".into(),
            pod: "llm-0".into(),
            container: "vllm".into(),
            device_ids: vec![U0.into(), format!("{U1}::0")],
        }];
        let memory = PodMemory::default();
        let t0 = Instant::now();
        let first = memory.idle(&alloc, &inv.processes, inv.devices(), t0);
        assert_eq!(first.len(), 1);
        assert_eq!((first[0].device, first[0].idle_seconds), (1, 0.0));
        let later = memory.idle(
            &alloc,
            &inv.processes,
            inv.devices(),
            t0 + Duration::from_secs(31 * 60),
        );
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].idle_seconds, 31.0 * 60.0);
        // The rule: over 30 min is information; under it, nothing.
        let th = crate::diagnose::Thresholds::default();
        inv.details.idle_allocations = later.clone();
        let f = allocated_gpu_idle(&inv, &th);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "allocated-gpu-idle");
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(f[0].devices, vec![1]);
        inv.details.idle_allocations = first;
        assert!(allocated_gpu_idle(&inv, &th).is_empty());
        // In a container namespace the pod's processes may be invisible: nothing.
        inv.details.idle_allocations = later;
        inv.vantage.pid_namespace.host = false;
        assert!(allocated_gpu_idle(&inv, &th).is_empty());
        // Once a process of the pod uses GPU 1, the clock starts again.
        let busy = inv_with(Some(pod(Some(&[U0, U1]))), &[(0, GIB), (1, GIB)]);
        let t1 = t0 + Duration::from_secs(40 * 60);
        assert!(memory
            .idle(&alloc, &busy.processes, busy.devices(), t1)
            .is_empty());
        let again = memory.idle(
            &alloc,
            &inv.processes,
            inv.devices(),
            t1 + Duration::from_secs(5),
        );
        assert_eq!(
            again,
            vec![IdleAllocation {
                namespace: "ml".into(),
                pod: "llm-0".into(),
                device: 1,
                device_id: format!("{U1}::0"),
                idle_seconds: 5.0,
            }]
        );
    }

    #[test]
    fn memory_without_a_live_owner_names_the_pod_the_gpu_was_allocated_to() {
        let mut inv = inv_with(None, &[]);
        inv.details.pod_allocations = vec![PodAllocation {
            namespace: "ml".into(),
            pod: "trainer-7".into(),
            container: "main".into(),
            device_ids: vec![U0.into()],
        }];
        let e = owner_pods_evidence(&inv, 0);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].value, "ml/trainer-7 (container main)");
        assert!(owner_pods_evidence(&inv, 1).is_empty());
        // And the scan's no-live-owner finding carries it (sample: PID 77 is dead on GPU 0).
        let full = crate::scan::sample_inventory();
        let mut with = full.clone();
        with.details.pod_allocations = inv.details.pod_allocations.clone();
        let f = super::super::no_live_owner(&with, &super::super::Thresholds::default());
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.value == "ml/trainer-7 (container main)"),
            "{:?}",
            f[0].evidence
        );
    }
}
