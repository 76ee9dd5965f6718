//! Tests of the box: creation, memory accounting, reaping, device faults.

use super::*;
use vramdoc_gpu_spec::units::GIB;
use vramdoc_gpu_spec::ProcessKind;

#[test]
fn pci_bus_ids_follow_the_nvml_format_past_16_gpus() {
    assert_eq!(pci_bus_id(0), "00000000:17:00.0");
    assert_eq!(pci_bus_id(14), "00000000:F7:00.0");
    assert_eq!(pci_bus_id(15), "00000001:07:00.0");
    let ids: Vec<String> = (0..64).map(pci_bus_id).collect();
    for id in &ids {
        // "%08X:%02X:%02X.0"
        let (dom, rest) = id.split_once(':').unwrap();
        let (bus, dev) = rest.split_once(':').unwrap();
        assert_eq!((dom.len(), bus.len(), dev), (8, 2, "00.0"), "{id}");
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 64);
}

#[test]
fn create_open_and_memory_accounting() {
    let dir = tempfile::tempdir().unwrap();
    let b = SimBox::create(dir.path(), "2x24GiB", &InitOptions::default()).unwrap();
    let again = SimBox::open(dir.path()).unwrap();
    assert_eq!(b.config(), again.config());
    assert_ne!(b.devices()[0].uuid, b.devices()[1].uuid);
    let m = b.memory(0).unwrap();
    assert_eq!(m.total, 24 * GIB);
    assert_eq!(m.used, 0);
    assert_eq!(m.reserved + m.free, m.total);
    // A live process (ourselves) holding memory.
    let me = std::process::id();
    b.update(|st, _| {
        let e = st.processes.entry(me).or_default();
        e.start_time = procinfo::start_time(me).unwrap_or(0);
        e.devices.entry(1).or_default().alloc_bytes = 100 * MIB;
        Ok(())
    })
    .unwrap();
    let m1 = b.memory(1).unwrap();
    assert_eq!(m1.used, 100 * MIB);
    assert_eq!(m1.reserved + m1.used + m1.free, m1.total);
    assert_eq!(
        b.processes(1).unwrap(),
        vec![SimProcessView {
            pid: me,
            used: 100 * MIB,
            kind: ProcessKind::Compute,
        }]
    );
    assert!(b.processes(0).unwrap().is_empty());
    assert!(SimBox::create(dir.path(), "t4", &InitOptions::default()).is_err());
}

#[test]
fn dead_process_memory_returns_unless_fault_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let b = SimBox::create(dir.path(), "t4", &InitOptions::default()).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let plant_dead = |b: &SimBox| {
        b.update(|st, _| {
            let usage = DeviceUsage {
                allocations: 1,
                alloc_bytes: GIB,
                ..Default::default()
            };
            let entry = ProcessEntry {
                start_time: 1,
                name: "gone".into(),
                devices: [(0, usage)].into(),
                ..Default::default()
            };
            st.processes.insert(pid, entry);
            Ok(())
        })
    };
    plant_dead(&b).unwrap();
    // update reaps before the closure; the write happened after. A read reaps again.
    assert_eq!(b.memory(0).unwrap().used, 0);
    b.set_faults(&Faults {
        keep_dead_processes: true,
        ..Default::default()
    })
    .unwrap();
    plant_dead(&b).unwrap();
    assert_eq!(b.memory(0).unwrap().used, GIB);
    assert_eq!(b.processes(0).unwrap()[0].pid, pid);
}

#[test]
fn lost_device_faults() {
    let dir = tempfile::tempdir().unwrap();
    let b = SimBox::create(dir.path(), "2xt4", &InitOptions::default()).unwrap();
    b.set_faults(&Faults {
        lost_devices: vec![1],
        ..Default::default()
    })
    .unwrap();
    assert!(b.memory(0).is_ok());
    assert!(matches!(b.memory(1), Err(SimError::DeviceLost(1))));
    assert!(matches!(b.memory(5), Err(SimError::InvalidDevice(5))));
}

#[test]
fn minors_name_the_device_files_and_need_not_follow_nvml_order() {
    let dir = tempfile::tempdir().unwrap();
    let opts = InitOptions {
        minors: Some(vec![2, 0, 3, 1]),
        ..InitOptions::default()
    };
    let b = SimBox::create(dir.path(), "4x16GiB", &opts).unwrap();
    let minors: Vec<u32> = b.devices().iter().map(SimDevice::minor).collect();
    assert_eq!(minors, vec![2, 0, 3, 1]);
    // Device files are named by minor: NVML index 0 is dev/nvidia2.
    assert!(b.node_path(0).unwrap().ends_with("dev/nvidia2"));
    assert_eq!(b.index_of_minor(2), Some(0));
    assert_eq!(b.index_of_minor(1), Some(3));
    assert_eq!(b.index_of_minor(9), None);
    // Every device is mounted in its own view, in NVML order, whatever the minors.
    assert_eq!(b.mounted(), vec![0, 1, 2, 3]);
    // A view without minor 3's file (a container given the others) lacks NVML index 2.
    std::fs::remove_file(dir.path().join(DEV_DIR).join("nvidia3")).unwrap();
    assert_eq!(b.mounted(), vec![0, 1, 3]);
    // Kept in box.json; a box without minors numbers them by index.
    let again = SimBox::open(dir.path()).unwrap();
    assert_eq!(again.devices()[0].minor(), 2);
    let plain = tempfile::tempdir().unwrap();
    let p = SimBox::create(plain.path(), "2x16GiB", &InitOptions::default()).unwrap();
    assert_eq!(p.devices()[1].minor(), 1);
    assert!(p.device_nodes().iter().any(|n| n.ends_with("dev/nvidia1")));
}

#[test]
fn bad_minors_are_refused_with_what_to_change() {
    assert!(check_minors(&[0, 1], 2).is_ok());
    for (m, n, says) in [
        (vec![0], 2, "1 number(s) for 2 device(s)"),
        (vec![0, 0], 2, "given twice"),
        (vec![0, 255], 2, "out of range"),
    ] {
        let e = check_minors(&m, n).unwrap_err();
        assert!(e.contains(says), "{m:?}: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = InitOptions {
        minors: Some(vec![1]),
        ..InitOptions::default()
    };
    let e = SimBox::create(dir.path(), "2x16GiB", &opts).unwrap_err();
    assert!(e.to_string().contains("--minors"), "{e}");
    assert!(!dir.path().join("box.json").exists());
}

#[test]
fn a_spec_can_name_its_driver_after_an_at_sign() {
    let dir = tempfile::tempdir().unwrap();
    let b = SimBox::create(dir.path(), "2xh100@580", &InitOptions::default()).unwrap();
    assert_eq!(b.devices().len(), 2);
    assert_eq!(b.config().driver_version, "580.65.06");
    assert_eq!(b.config().cuda_driver_version, 13000);
    let e = crate::parse_spec("2xh100@12").unwrap_err();
    assert!(e.reason.contains("after `@`"), "{}", e.reason);
    assert!(crate::parse_spec("2xh100@R535").is_ok());
}
