//! Unit tests of every rule on hand-built inventories.

use super::*;
use crate::gpu::{DeviceInfo, MemoryInfo, Versions};
use crate::inventory::{Inventory, PidNamespace, CVD_UNKNOWN, CVD_UNSET};
use crate::model::{Environment, Finding, ProcessDeviceUsage, ProcessInfo, Severity};
use crate::units::{GIB, MIB};

const TOTAL: u64 = 24 * GIB;
const RESERVED: u64 = 256 * MIB;

fn uuid(i: u32) -> String {
    format!("GPU-{i:08x}-0000-0000-0000-000000000000")
}

fn device(index: u32, used: u64) -> DeviceInfo {
    DeviceInfo {
        index,
        name: "Test GPU".into(),
        uuid: uuid(index),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x17 + index),
        memory: MemoryInfo {
            total: TOTAL,
            reserved: RESERVED,
            used,
            free: TOTAL - RESERVED - used,
        },
        utilization_gpu: Some(0),
        temperature_c: Some(34),
        numa_node: None,
        mig: None,
        memory_unknown: None,
        status: Default::default(),
        minor: None,
    }
}

pub(super) fn proc_(pid: u32, cvd: &str, usage: &[(u32, Option<u64>)]) -> ProcessInfo {
    ProcessInfo {
        pid,
        visible: true,
        user: Some("alice".into()),
        name: Some(format!("p{pid}")),
        cmdline: Some(format!("python p{pid}.py")),
        cuda_visible_devices: cvd.into(),
        container: None,
        pod: None,
        devices: usage
            .iter()
            .map(|(d, u)| ProcessDeviceUsage {
                device: *d,
                used: *u,
                lists: Vec::new(),
            })
            .collect(),
    }
}

/// An inventory whose device `used` is the sum of its processes' known usage plus `extra`.
pub(super) fn inv_with(
    n_devices: u32,
    procs: Vec<ProcessInfo>,
    extra: &[(u32, u64)],
    host: bool,
) -> Inventory {
    let devices: Vec<DeviceInfo> = (0..n_devices)
        .map(|i| {
            let held: u64 = procs
                .iter()
                .flat_map(|p| p.devices.iter())
                .filter(|u| u.device == i)
                .filter_map(|u| u.used)
                .sum();
            let more: u64 = extra.iter().filter(|(d, _)| *d == i).map(|(_, b)| *b).sum();
            device(i, held + more)
        })
        .collect();
    let versions = Versions {
        driver: "550.54.15".into(),
        cuda: "12.4".into(),
        nvml: "12.550.54.15".into(),
    };
    Inventory {
        environment: Environment {
            hostname: "test".into(),
            kernel: "6.0".into(),
            vramdoc_version: "0".into(),
            backend: "sim".into(),
            sim_spec: None,
            versions,
            devices,
        },
        processes: procs,
        vantage: crate::model::Vantage::new(
            PidNamespace {
                host,
                reason: "test".into(),
            },
            Some("550.54.15".into()),
        ),
        details: Default::default(),
    }
}

fn ids_of(f: &[Finding]) -> Vec<&str> {
    f.iter().map(|f| f.id.as_str()).collect()
}

fn evidence_bytes(f: &Finding, label_start: &str) -> Option<u64> {
    f.evidence
        .iter()
        .find(|e| e.label.starts_with(label_start))
        .and_then(|e| e.bytes)
}

#[test]
fn clean_box_has_no_findings_and_full_headroom() {
    let inv = inv_with(2, vec![], &[], true);
    let (findings, headroom) = diagnose(&inv, &Thresholds::default());
    assert!(findings.is_empty(), "{findings:#?}");
    assert_eq!(headroom.len(), 2);
    // (24 GiB - 256 MiB - 512 MiB) / (24 GiB - 256 MiB) CUDA total = 0.9789 -> 0.97
    assert_eq!(headroom[0].max_gpu_memory_utilization, 0.97);
    assert_eq!(headroom[0].available, TOTAL - RESERVED - 512 * MIB);
    assert!(
        headroom[0].arithmetic.contains("0.9789 -> 0.97"),
        "{}",
        headroom[0].arithmetic
    );
}

#[test]
fn ordinary_single_gpu_jobs_are_not_findings() {
    let inv = inv_with(
        2,
        vec![
            proc_(10, "0", &[(0, Some(GIB))]),
            proc_(11, CVD_UNSET, &[(1, Some(GIB))]),
            proc_(12, CVD_UNKNOWN, &[(1, Some(300 * MIB))]),
        ],
        &[],
        true,
    );
    let (findings, _) = diagnose(&inv, &Thresholds::default());
    // GPU 1 (1.3 GiB held of 24 GiB) has room for a vLLM engine at 0.91, not at vLLM's
    // default 0.92: said at info, the one finding.
    let rest: Vec<_> = findings
        .iter()
        .filter(|f| !(f.id == "low-headroom" && f.title.contains("default 0.92 does not fit")))
        .collect();
    assert!(rest.is_empty(), "{findings:#?}");
    assert!(
        findings.iter().all(|f| f.severity == Severity::Info),
        "{findings:#?}"
    );
}

#[test]
fn stray_context_outside_cuda_visible_devices() {
    let inv = inv_with(
        2,
        vec![proc_(42, "1", &[(0, Some(448 * MIB)), (1, Some(8 * GIB))])],
        &[],
        true,
    );
    let f = stray_context(&inv, &Thresholds::default());
    assert_eq!(ids_of(&f), vec!["stray-context"]);
    assert_eq!(f[0].pid, Some(42));
    assert_eq!(f[0].devices, vec![0]);
    assert_eq!(f[0].severity, Severity::Warn);
    assert_eq!(evidence_bytes(&f[0], "used on GPU 0"), Some(448 * MIB));
    assert!(
        f[0].title.contains("outside its CUDA_VISIBLE_DEVICES=1"),
        "{}",
        f[0].title
    );
    assert!(f[0].fix.contains("CUDA_VISIBLE_DEVICES"));
}

#[test]
fn stray_context_by_uuid_in_cuda_visible_devices() {
    let cvd = uuid(1);
    let inv = inv_with(
        2,
        vec![proc_(7, &cvd, &[(0, Some(2 * GIB)), (1, Some(2 * GIB))])],
        &[],
        true,
    );
    let f = stray_context(&inv, &Thresholds::default());
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].devices, vec![0]);
}

#[test]
fn mig_uuids_in_cuda_visible_devices_are_not_taken_for_stray() {
    let cvd = "MIG-5e9c1a2b-0000-0000-0000-000000000000";
    let inv = inv_with(2, vec![proc_(8, cvd, &[(1, Some(4 * GIB))])], &[], true);
    assert!(stray_context(&inv, &Thresholds::default()).is_empty());
}

#[test]
fn stray_context_onediff_pattern_without_cvd() {
    // Visible devices "1,0": both allowed, but a context-sized footprint on 0 beside 8 GiB on 1.
    let inv = inv_with(
        2,
        vec![proc_(
            5,
            "1,0",
            &[(0, Some(448 * MIB)), (1, Some(8 * GIB + 448 * MIB))],
        )],
        &[],
        true,
    );
    let f = stray_context(&inv, &Thresholds::default());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].devices, vec![0]);
    assert_eq!(
        evidence_bytes(&f[0], "main work on GPU 1"),
        Some(8 * GIB + 448 * MIB)
    );
    assert_eq!(
        evidence_bytes(&f[0], "context-sized footprint on GPU 0"),
        Some(448 * MIB)
    );
    // Two small footprints: no main work, no finding.
    let inv = inv_with(
        2,
        vec![proc_(
            5,
            CVD_UNSET,
            &[(0, Some(448 * MIB)), (1, Some(900 * MIB))],
        )],
        &[],
        true,
    );
    assert!(stray_context(&inv, &Thresholds::default()).is_empty());
    // A large second footprint is real work, not a stray context.
    let inv = inv_with(
        2,
        vec![proc_(
            5,
            CVD_UNSET,
            &[(0, Some(3 * GIB)), (1, Some(8 * GIB))],
        )],
        &[],
        true,
    );
    assert!(stray_context(&inv, &Thresholds::default()).is_empty());
}

#[test]
fn no_live_owner_from_unattributed_bytes() {
    // 3 GiB used on GPU 0 beyond what listed processes hold.
    let inv = inv_with(
        2,
        vec![proc_(10, CVD_UNSET, &[(0, Some(GIB))])],
        &[(0, 3 * GIB)],
        true,
    );
    let f = no_live_owner(&inv, &Thresholds::default());
    assert_eq!(ids_of(&f), vec!["no-live-owner"]);
    assert_eq!(f[0].devices, vec![0]);
    assert_eq!(f[0].severity, Severity::Error);
    assert_eq!(evidence_bytes(&f[0], "no live owner"), Some(3 * GIB));
    assert_eq!(evidence_bytes(&f[0], "held by live processes"), Some(GIB));
    // Under the threshold: nothing.
    let inv = inv_with(1, vec![], &[(0, 100 * MIB)], true);
    assert!(no_live_owner(&inv, &Thresholds::default()).is_empty());
}

#[test]
fn no_live_owner_from_dead_pid_in_host_namespace_only() {
    let mut dead = proc_(999, CVD_UNKNOWN, &[(1, Some(8 * GIB))]);
    dead.visible = false;
    let inv = inv_with(2, vec![dead.clone()], &[], true);
    let f = no_live_owner(&inv, &Thresholds::default());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].devices, vec![1]);
    assert_eq!(f[0].pid, Some(999));
    assert_eq!(
        evidence_bytes(&f[0], "PID 999 listed by NVML"),
        Some(8 * GIB)
    );
    assert_eq!(evidence_bytes(&f[0], "no live owner"), Some(8 * GIB));
    // In a container under host PIDs (before 535.113) the same PID is invisible, not dead.
    let mut inv = inv_with(2, vec![dead], &[], false);
    inv.vantage =
        crate::model::Vantage::new(inv.vantage.pid_namespace.clone(), Some("535.54.03".into()));
    assert!(no_live_owner(&inv, &Thresholds::default()).is_empty());
    let f = invisible_processes(&inv, &Thresholds::default());
    assert_eq!(ids_of(&f), vec!["invisible-processes"]);
    assert_eq!(evidence_bytes(&f[0], "memory they hold"), Some(8 * GIB));
    assert!(f[0].title.contains("1 of 1"), "{}", f[0].title);
}

#[test]
fn invisible_processes_only_in_a_container() {
    let inv = inv_with(1, vec![proc_(10, CVD_UNSET, &[(0, Some(GIB))])], &[], false);
    assert!(
        invisible_processes(&inv, &Thresholds::default()).is_empty(),
        "all visible: attribution complete"
    );
}

#[test]
fn usage_not_available_is_reported_and_blocks_byte_rule() {
    let inv = inv_with(
        1,
        vec![proc_(10, CVD_UNSET, &[(0, None)])],
        &[(0, 4 * GIB)],
        false,
    );
    let f = usage_unavailable(&inv);
    assert_eq!(ids_of(&f), vec!["usage-unavailable"]);
    assert!(f[0].evidence[0].value.contains("PID 10 on GPU 0"));
    // 4 GiB used and unknown per-process usage: no claim of missing owners.
    assert!(no_live_owner(&inv, &Thresholds::default()).is_empty());
}

#[test]
fn low_headroom_levels_and_arithmetic() {
    let th = Thresholds::default();
    // A neighbour holding 8 GiB: info, max utilization (24 - 8 - 0.25 - 0.5) / 23.75 = 0.6421
    // (CUDA's total, the one vLLM multiplies).
    let inv = inv_with(
        1,
        vec![proc_(10, CVD_UNSET, &[(0, Some(8 * GIB))])],
        &[],
        true,
    );
    let h = headroom(&inv, &th);
    assert_eq!(h[0].max_gpu_memory_utilization, 0.64);
    assert_eq!(h[0].used_by_others, 8 * GIB);
    let f = low_headroom(&inv, &h, &th);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Info);
    assert!(f[0].title.contains("<= 0.64"), "{}", f[0].title);
    let util = f[0]
        .evidence
        .iter()
        .find(|e| e.label.starts_with("largest safe"))
        .unwrap();
    assert!(util.value.contains("8.00 GiB used"), "{}", util.value);
    assert!(util.value.contains("0.6421 -> 0.64"), "{}", util.value);
    assert!(
        util.value.contains("/ 23.75 GiB CUDA total"),
        "{}",
        util.value
    );

    // 0.9 x total held by one engine (vLLM's default claim): its steady state, info, with
    // the budget-sized holder named.
    let held = TOTAL / 10 * 9;
    let inv = inv_with(1, vec![proc_(11, CVD_UNSET, &[(0, Some(held))])], &[], true);
    let h = headroom(&inv, &th);
    let f = low_headroom(&inv, &h, &th);
    assert_eq!(f[0].severity, Severity::Info);
    assert!(f[0].title.contains("steady fill"), "{}", f[0].title);
    assert_eq!(evidence_bytes(&f[0], "free"), Some(TOTAL - RESERVED - held));
    assert!(f[0]
        .evidence
        .iter()
        .any(|e| e.label.contains("utilization-sized budget")));
    assert_eq!(h[0].max_gpu_memory_utilization, 0.06);

    // Over-full by one holder: still its steady state (nothing failed), max utilization 0.
    let held = TOTAL - RESERVED - 100 * MIB;
    let inv = inv_with(1, vec![proc_(12, CVD_UNSET, &[(0, Some(held))])], &[], true);
    let h = headroom(&inv, &th);
    let f = low_headroom(&inv, &h, &th);
    assert_eq!(f[0].severity, Severity::Info);
    assert_eq!(evidence_bytes(&f[0], "free"), Some(100 * MIB));
    assert_eq!(h[0].available, 0);
    assert_eq!(h[0].max_gpu_memory_utilization, 0.0);

    // Two independent claimants at fixed budgets with 1 GiB free: one snapshot cannot tell
    // this steady state from growth (serve's trend can), info with the numbers.
    let half = (TOTAL - RESERVED - GIB) / 2;
    let inv = inv_with(
        1,
        vec![
            proc_(13, CVD_UNSET, &[(0, Some(half))]),
            proc_(14, CVD_UNSET, &[(0, Some(half))]),
        ],
        &[],
        true,
    );
    let h = headroom(&inv, &th);
    let f = low_headroom(&inv, &h, &th);
    assert_eq!(f[0].severity, Severity::Info, "{}", f[0].title);
    assert!(
        f[0].title.contains("steady fixed budgets"),
        "{}",
        f[0].title
    );

    // Two independent claimants leaving less than a context free: out of room, warn.
    let half = (TOTAL - RESERVED - 300 * MIB) / 2;
    let inv = inv_with(
        1,
        vec![
            proc_(13, CVD_UNSET, &[(0, Some(half))]),
            proc_(14, CVD_UNSET, &[(0, Some(half))]),
        ],
        &[],
        true,
    );
    let h = headroom(&inv, &th);
    let f = low_headroom(&inv, &h, &th);
    assert_eq!(f[0].severity, Severity::Warn, "{}", f[0].title);
    assert!(
        f[0].title.contains("2 processes share it"),
        "{}",
        f[0].title
    );

    // A monitor's context beside one engine is not a second claimant.
    let inv = inv_with(
        1,
        vec![
            proc_(15, CVD_UNSET, &[(0, Some(TOTAL - RESERVED - GIB))]),
            proc_(16, CVD_UNSET, &[(0, Some(300 * MIB))]),
        ],
        &[],
        true,
    );
    let h = headroom(&inv, &th);
    assert_eq!(low_headroom(&inv, &h, &th)[0].severity, Severity::Info);
}

#[test]
fn duplicate_copy_near_equal_large_footprints() {
    let th = Thresholds::default();
    let inv = inv_with(
        2,
        vec![proc_(
            20,
            CVD_UNSET,
            &[(0, Some(10 * GIB)), (1, Some(10 * GIB + 512 * MIB))],
        )],
        &[],
        true,
    );
    let f = duplicate_copy(&inv, &th);
    assert_eq!(ids_of(&f), vec!["duplicate-copy"]);
    assert_eq!(f[0].severity, Severity::Info);
    assert_eq!(f[0].devices, vec![0, 1]);
    assert_eq!(
        evidence_bytes(&f[0], "total across"),
        Some(20 * GIB + 512 * MIB)
    );
    // Unequal: 4 GiB vs 10 GiB is a split, not a copy.
    let inv = inv_with(
        2,
        vec![proc_(
            20,
            CVD_UNSET,
            &[(0, Some(4 * GIB)), (1, Some(10 * GIB))],
        )],
        &[],
        true,
    );
    assert!(duplicate_copy(&inv, &th).is_empty());
    // Small: contexts only.
    let inv = inv_with(
        2,
        vec![proc_(20, CVD_UNSET, &[(0, Some(GIB)), (1, Some(GIB))])],
        &[],
        true,
    );
    assert!(duplicate_copy(&inv, &th).is_empty());
}

#[test]
fn diagnose_orders_most_severe_first() {
    let mut dead = proc_(999, CVD_UNKNOWN, &[(1, Some(4 * GIB))]);
    dead.visible = false;
    let inv = inv_with(
        2,
        vec![
            proc_(20, CVD_UNSET, &[(0, Some(5 * GIB)), (1, Some(5 * GIB))]),
            proc_(21, "1", &[(0, Some(448 * MIB)), (1, Some(2 * GIB))]),
            dead,
        ],
        &[],
        true,
    );
    let (f, _) = diagnose(&inv, &Thresholds::default());
    let sev: Vec<Severity> = f.iter().map(|f| f.severity).collect();
    let mut sorted = sev.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(sev, sorted);
    assert_eq!(f[0].id, "no-live-owner");
    for id in ["stray-context", "duplicate-copy", "low-headroom"] {
        assert!(ids_of(&f).contains(&id), "{id} missing: {:?}", ids_of(&f));
    }
    assert!(f
        .iter()
        .all(|f| !f.fix.is_empty() && !f.evidence.is_empty()));
}

// ---------------------------------------------------------------------------------------
// Issue 8: real machines as they are.

fn env_of(order: Option<&str>, nvd: Option<&str>) -> crate::inventory::GpuEnv {
    crate::inventory::GpuEnv {
        cuda_device_order: order.map(String::from),
        nvidia_visible_devices: nvd.map(String::from),
        mounted_device_ids: None,
        ..Default::default()
    }
}

#[test]
fn bad_device_gets_a_finding_and_the_others_are_still_diagnosed() {
    use crate::gpu::DeviceStatus;
    let mut i = inv_with(
        3,
        vec![proc_(10, CVD_UNSET, &[(2, Some(GIB))])],
        &[(2, 2 * GIB)],
        true,
    );
    i.environment.devices[0].status = DeviceStatus::Lost;
    i.environment.devices[0].memory = MemoryInfo::zeroed();
    i.environment.devices[1].status = DeviceStatus::NoPermission;
    i.environment.devices[1].memory = MemoryInfo::zeroed();
    let (f, h) = diagnose(&i, &Thresholds::default());
    let bad: Vec<&Finding> = f
        .iter()
        .filter(|f| f.id == ids::DEVICE_UNAVAILABLE || f.id == ids::GPU_LOST)
        .collect();
    assert_eq!(bad.len(), 2);
    assert_eq!(bad[0].id, ids::GPU_LOST);
    assert_eq!(bad[1].id, ids::DEVICE_UNAVAILABLE);
    assert_eq!(bad[0].devices, vec![0]);
    assert_eq!(bad[0].severity, Severity::Error);
    assert!(bad[0].title.contains("lost"), "{}", bad[0].title);
    // NVIDIA's Xid catalogue: Xid 79's immediate action is a restart of the machine.
    assert!(
        bad[0].fix.contains("reboot the node") && !bad[0].fix.contains("--gpu-reset"),
        "{}",
        bad[0].fix
    );
    assert_eq!(bad[1].severity, Severity::Warn);
    // Zeroed memory of bad devices is never read as an over-full device.
    assert!(!f
        .iter()
        .any(|f| f.id == ids::LOW_HEADROOM && f.devices != vec![2]));
    assert_eq!(h.iter().map(|h| h.device).collect::<Vec<_>>(), vec![2]);
    // GPU 2 is still diagnosed: 2 GiB there has no live owner.
    assert!(f
        .iter()
        .any(|f| f.id == ids::NO_LIVE_OWNER && f.devices == vec![2]));

    // A device whose process lists failed: a warning, and no owner guess on it.
    let mut i = inv_with(1, vec![], &[(0, GIB)], true);
    i.details
        .list_errors
        .insert(0, "nvmlDeviceGetComputeRunningProcesses failed".into());
    let f = diagnose(&i, &Thresholds::default()).0;
    assert_eq!(ids_of(&f), vec![ids::DEVICE_UNAVAILABLE]);
    assert!(f[0].title.contains("process lists"), "{}", f[0].title);
}

#[test]
fn no_live_owner_is_silent_where_per_process_data_does_not_exist() {
    // WSL: 6 GiB used, no process ever listed.
    let mut i = inv_with(1, vec![], &[(0, 6 * GIB)], true);
    i.details.per_process_unavailable = Some("WSL kernel".into());
    let f = diagnose(&i, &Thresholds::default()).0;
    assert!(!ids_of(&f).contains(&ids::NO_LIVE_OWNER), "{f:?}");
    let u = f
        .iter()
        .find(|f| f.id == ids::USAGE_UNAVAILABLE)
        .expect("info");
    assert_eq!(u.severity, Severity::Info);
    // The same numbers on Linux: memory with no live owner.
    i.details.per_process_unavailable = None;
    let f = diagnose(&i, &Thresholds::default()).0;
    assert!(ids_of(&f).contains(&ids::NO_LIVE_OWNER));
}

#[test]
fn no_live_owner_names_processes_holding_the_device_files() {
    use crate::inventory::NodeHolder;
    // The parent exited (not listed any more is the same as dead here); its DataLoader child
    // holds /dev/nvidia1 and keeps 3 GiB alive. A listed owner also holds the files.
    let mut i = inv_with(
        2,
        vec![proc_(10, CVD_UNSET, &[(1, Some(GIB))])],
        &[(1, 3 * GIB)],
        true,
    );
    let holder = |pid: u32, name: &str, nodes: &[&str]| NodeHolder {
        pid,
        name: Some(name.into()),
        user: Some("alice".into()),
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        uvm_mapped: None,
        context: Some(true),
    };
    i.details.node_holders = vec![
        holder(10, "p10", &["/dev/nvidia1", "/dev/nvidiactl"]),
        holder(77, "pt_data_worker", &["/dev/nvidia1", "/dev/nvidiactl"]),
        holder(
            88,
            "nvidia-persistenced",
            &["/dev/nvidia0", "/dev/nvidiactl"],
        ),
    ];
    let f = no_live_owner(&i, &Thresholds::default());
    assert_eq!(f.len(), 1);
    assert!(
        f[0].title.ends_with("held open by PID 77 (pt_data_worker)"),
        "{}",
        f[0].title
    );
    assert_eq!(f[0].pid, Some(77));
    assert!(f[0]
        .evidence
        .iter()
        .any(|e| e.label == "PID 77 (pt_data_worker) user alice holds GPU device files open"));
    assert!(!f[0].evidence.iter().any(|e| e.label.contains("PID 88")));
}

#[test]
fn stray_context_reads_the_container_and_device_order() {
    // PID 20 runs in a container with GPU 1 mounted and uses its CUDA device 0: no stray.
    let mut i = inv_with(2, vec![proc_(20, "0", &[(1, Some(4 * GIB))])], &[], true);
    i.details.gpu_env.insert(20, env_of(None, Some(&uuid(1))));
    assert!(stray_context(&i, &Thresholds::default()).is_empty());
    // By index, as the runtime also accepts.
    i.details.gpu_env.insert(20, env_of(None, Some("1")));
    assert!(stray_context(&i, &Thresholds::default()).is_empty());
    // The same process with a context on GPU 0, outside its container's GPU: stray.
    i.processes[0].devices.insert(
        0,
        ProcessDeviceUsage {
            device: 0,
            used: Some(448 * MIB),
            lists: Vec::new(),
        },
    );
    let f = stray_context(&i, &Thresholds::default());
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].devices, vec![0]);
    assert!(f[0]
        .evidence
        .iter()
        .any(|e| e.label.starts_with("NVIDIA_VISIBLE_DEVICES")));
}

#[test]
fn index_entries_on_mixed_gpus_need_pci_bus_order() {
    // A T4 (NVML 0) and an H100 (NVML 1): CUDA's device 0 is the H100 by default.
    let mut i = inv_with(2, vec![proc_(30, "0", &[(1, Some(4 * GIB))])], &[], true);
    i.environment.devices[0].name = "Tesla T4".into();
    i.environment.devices[1].name = "NVIDIA H100 80GB HBM3".into();
    // Fastest first: "0" cannot be mapped from NVML data; no false alarm.
    assert!(stray_context(&i, &Thresholds::default()).is_empty());
    // PCI_BUS_ID order: "0" is the T4, and the process works on the H100: stray.
    i.details
        .gpu_env
        .insert(30, env_of(Some("PCI_BUS_ID"), None));
    let f = stray_context(&i, &Thresholds::default());
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].devices, vec![1]);
    // UUIDs are exact in any order.
    i.details.gpu_env.clear();
    i.processes[0].cuda_visible_devices = uuid(1);
    assert!(stray_context(&i, &Thresholds::default()).is_empty());
}

#[test]
fn unattributed_bytes_is_the_no_live_owner_arithmetic() {
    let mut dead = proc_(999, CVD_UNKNOWN, &[(1, Some(8 * GIB))]);
    dead.visible = false;
    let live = proc_(10, CVD_UNSET, &[(0, Some(GIB))]);
    let inv = inv_with(2, vec![live.clone(), dead], &[(0, 3 * GIB)], true);
    let f = no_live_owner(&inv, &Thresholds::default());
    for d in inv.devices() {
        let from_rule = f
            .iter()
            .find(|f| f.devices == vec![d.index])
            .and_then(|f| evidence_bytes(f, "no live owner"));
        assert_eq!(unattributed_bytes(d, &inv.processes, true), from_rule);
    }
    // In a container every listed process counts as live.
    assert_eq!(
        unattributed_bytes(&inv.devices()[1], &inv.processes, false),
        Some(0)
    );
    // Unknown per-process usage: unknown.
    let unknown = proc_(11, CVD_UNSET, &[(0, None)]);
    assert_eq!(
        unattributed_bytes(&inv.devices()[0], &[unknown], true),
        None
    );
}

/// Issue 15: node shapes that must not raise false alarms (peer listings, device-plugin
/// forms, engines at their fill, coherent memory, system monitors, drivers before R510).
mod node_shapes;

/// Issue 25: what each rule concludes from each vantage × driver generation.
mod vantages;

/// Issue 37 item 8: vLLM's default `gpu_memory_utilization` is 0.92 in its current source
/// (vllm/config/cache.py): a GPU where at most 0.91 fits gets the info finding (at 0.90, the
/// older default, it did not).
#[test]
fn a_gpu_where_vllm_s_current_default_does_not_fit_is_said_at_info() {
    let th = Thresholds::default();
    let found = (1..200u64).find_map(|n| {
        let held = TOTAL / 1000 * n;
        let inv = inv_with(1, vec![proc_(21, CVD_UNSET, &[(0, Some(held))])], &[], true);
        let h = headroom(&inv, &th);
        (h[0].max_gpu_memory_utilization == 0.91).then(|| low_headroom(&inv, &h, &th))
    });
    let f = found.expect("a holding that leaves 0.91");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Info);
    assert!(
        f[0].title.contains("default 0.92 does not fit"),
        "{}",
        f[0].title
    );
}
