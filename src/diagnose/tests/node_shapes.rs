//! Snapshot rules on the node shapes of issue 15, each with its source.

use super::*;
use crate::inventory::NodeHolder;

/// pytorch/pytorch#64130: with NCCL peer mappings every DDP rank is listed on every GPU of
/// the job with 0 bytes. Not a stray context, whatever its CUDA_VISIBLE_DEVICES says.
#[test]
fn ddp_ranks_listed_with_zero_bytes_on_peer_gpus_are_not_strays() {
    let n = 4;
    let procs: Vec<ProcessInfo> = (0..n)
        .map(|rank| {
            let usage: Vec<(u32, Option<u64>)> = (0..n)
                .map(|d| (d, Some(if d == rank { 12 * GIB } else { 0 })))
                .collect();
            proc_(100 + rank, CVD_UNSET, &usage)
        })
        .collect();
    let inv = inv_with(n, procs, &[], true);
    let (findings, _) = diagnose(&inv, &Thresholds::default());
    assert!(
        findings.iter().all(|f| f.severity == Severity::Info),
        "{findings:?}"
    );
    // Also with torchrun's per-rank CUDA_VISIBLE_DEVICES (each rank sees only its GPU).
    let procs: Vec<ProcessInfo> = (0..n)
        .map(|rank| {
            let usage: Vec<(u32, Option<u64>)> = (0..n)
                .map(|d| (d, Some(if d == rank { 12 * GIB } else { 0 })))
                .collect();
            proc_(100 + rank, &rank.to_string(), &usage)
        })
        .collect();
    let inv = inv_with(n, procs, &[], true);
    assert!(stray_context(&inv, &Thresholds::default()).is_empty());
    // A real context (non-zero) outside CUDA_VISIBLE_DEVICES still is one.
    let inv = inv_with(
        2,
        vec![proc_(7, "1", &[(1, Some(8 * GIB)), (0, Some(400 * MIB))])],
        &[],
        true,
    );
    assert_eq!(
        ids_of(&stray_context(&inv, &Thresholds::default())),
        vec!["stray-context"]
    );
}

fn in_container(mut p: ProcessInfo) -> ProcessInfo {
    p.container = Some("kubepods".into());
    p
}

/// NVIDIA/k8s-device-plugin `getAllocateResponse`: every form of NVIDIA_VISIBLE_DEVICES a
/// pod can get. A pod using exactly its allocated GPU (host GPU 2) is never a stray.
#[test]
fn every_device_plugin_form_of_nvidia_visible_devices_is_understood() {
    let th = Thresholds::default();
    let pod = || in_container(proc_(30, CVD_UNSET, &[(2, Some(6 * GIB))]));
    let check = |env: crate::inventory::GpuEnv, what: &str| {
        let mut i = inv_with(4, vec![pod()], &[], true);
        i.details.gpu_env.insert(30, env);
        let f = stray_context(&i, &th);
        assert!(f.is_empty(), "{what}: {f:?}");
    };
    // envvar strategy: UUIDs, indices, time-sliced replicas.
    check(env_of(None, Some(&uuid(2))), "uuid");
    check(env_of(None, Some("2")), "index");
    check(env_of(None, Some(&format!("{}::3", uuid(2)))), "replica");
    // volume-mounts strategy: a directory; the IDs are its entries.
    let mut vm = env_of(None, Some("/var/run/nvidia-container-devices"));
    vm.mounted_device_ids = Some(vec![uuid(2)]);
    check(vm, "volume-mounts");
    // ... and when the list cannot be read, nothing is decided from it.
    check(
        env_of(None, Some("/var/run/nvidia-container-devices")),
        "volume-mounts unread",
    );
    // MIG device UUIDs name slices: not mapped, never "sees none".
    check(
        env_of(None, Some("MIG-4f5e7e2c-1b9d-5b6b-9b0e-2f3a4b5c6d7e")),
        "mig",
    );
    // Legacy MIG form names its parent GPU.
    check(
        env_of(None, Some(&format!("MIG-{}/1/0", uuid(2)))),
        "mig legacy",
    );
    // CDI: the image's `all` stays.
    check(env_of(None, Some("all")), "cdi all");
    // Not managed by the runtime, or a form nobody documented: unknown, no finding.
    check(env_of(None, Some("void")), "void");
    check(env_of(None, Some("nvidia.com/gpu=2")), "unknown form");

    // The legacy MIG form still catches a process on another GPU.
    let mut i = inv_with(
        4,
        vec![in_container(proc_(
            31,
            CVD_UNSET,
            &[(1, Some(GIB / 2)), (2, Some(6 * GIB))],
        ))],
        &[],
        true,
    );
    i.details
        .gpu_env
        .insert(31, env_of(None, Some(&format!("MIG-{}/1/0", uuid(2)))));
    assert_eq!(ids_of(&stray_context(&i, &th)), vec!["stray-context"]);
}

/// CDI injects only the allocated GPUs while NVIDIA_VISIBLE_DEVICES stays `all`: in a
/// container, index CUDA_VISIBLE_DEVICES cannot be mapped to host GPUs.
#[test]
fn cuda_indices_in_a_cdi_container_are_not_mapped_to_host_gpus() {
    let mut i = inv_with(
        4,
        vec![in_container(proc_(40, "0", &[(3, Some(6 * GIB))]))],
        &[],
        true,
    );
    i.details.gpu_env.insert(40, env_of(None, Some("all")));
    assert!(stray_context(&i, &Thresholds::default()).is_empty());
    // Outside a container the same indices are the host's.
    let mut i = inv_with(4, vec![proc_(41, "0", &[(3, Some(6 * GIB))])], &[], true);
    i.details.gpu_env.insert(41, env_of(None, Some("all")));
    assert_eq!(
        ids_of(&stray_context(&i, &Thresholds::default())),
        vec!["stray-context"]
    );
}

/// nvml.h (`nvmlDeviceGetMemoryInfo`): on coherent-memory GPUs pages freed by an exited
/// process stay counted as used until reclaimed. Information, not lost memory.
#[test]
fn coherent_memory_after_exit_is_information() {
    let mut i = inv_with(1, vec![], &[(0, 20 * GIB)], true);
    i.environment.devices[0].numa_node = Some(1);
    let f = no_live_owner(&i, &Thresholds::default());
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Info, "{}", f[0].title);
    assert!(f[0].title.contains("coherent-memory"), "{}", f[0].title);
    // The same bytes on an ordinary GPU are lost memory.
    let i = inv_with(1, vec![], &[(0, 20 * GIB)], true);
    assert_eq!(
        no_live_owner(&i, &Thresholds::default())[0].severity,
        Severity::Error
    );
}

/// Persistence daemon, DCGM, device plugin and monitors hold every device file by design.
#[test]
fn system_daemons_and_monitors_are_never_named_as_holders() {
    let mut i = inv_with(1, vec![], &[(0, 3 * GIB)], true);
    let holder = |pid: u32, name: &str| NodeHolder {
        pid,
        name: Some(name.into()),
        user: Some("root".into()),
        nodes: vec!["/dev/nvidia0".into(), "/dev/nvidiactl".into()],
        uvm_mapped: None,
        context: Some(true),
    };
    i.details.node_holders = vec![
        holder(5, "nvidia-persiste"),
        holder(6, "nv-hostengine"),
        holder(7, "nvidia-device-p"),
        holder(8, "nvitop"),
    ];
    let f = no_live_owner(&i, &Thresholds::default());
    assert_eq!(f.len(), 1);
    assert!(!f[0].title.contains("held open by"), "{}", f[0].title);
    assert_eq!(f[0].pid, None);
    assert!(f[0]
        .evidence
        .iter()
        .any(|e| e.label.starts_with("system daemons")));
    assert!(!f[0]
        .evidence
        .iter()
        .any(|e| e.label.contains("holds GPU device files open")));
}

/// Before R510 only NVML v1 exists: `used` includes the driver's reservation. A healthy GPU
/// must not show it as memory with no owner.
#[test]
fn driver_reservation_under_nvml_v1_is_not_memory_with_no_owner() {
    let mut i = inv_with(
        1,
        vec![proc_(9, CVD_UNSET, &[(0, Some(8 * GIB))])],
        &[(0, 400 * MIB)],
        true,
    );
    i.environment.devices[0].memory.reserved = 0;
    assert!(no_live_owner(&i, &Thresholds::default()).is_empty());
    // A leak is still a leak.
    let mut i = inv_with(
        1,
        vec![proc_(9, CVD_UNSET, &[(0, Some(8 * GIB))])],
        &[(0, 4 * GIB)],
        true,
    );
    i.environment.devices[0].memory.reserved = 0;
    assert_eq!(
        ids_of(&no_live_owner(&i, &Thresholds::default())),
        vec!["no-live-owner"]
    );
}
