use super::*;
use crate::nvml::{Caller, SimNvml};
use crate::{InitOptions, ProcessEnv, SimBox, SimProcess};
use vramdoc_gpu_spec::units::GIB;
use vramdoc_gpu_spec::ProcessKind;

fn mig_box(spec: &str, layout: &str) -> (tempfile::TempDir, SimBox) {
    let dir = tempfile::tempdir().unwrap();
    let opts = InitOptions {
        mig: parse_layout(layout).unwrap(),
        ..InitOptions::default()
    };
    let sim = SimBox::create(dir.path(), spec, &opts).unwrap();
    (dir, sim)
}

#[test]
fn profiles_are_validated_against_the_board() {
    let ok = |spec: &str, l: &str| check_layout(spec, &parse_layout(l).unwrap());
    assert_eq!(ok("a100-80gb", "3g.40gb,3g.40gb"), Ok(()));
    assert_eq!(ok("h100", "3g.40gb,2g.20gb,1g.10gb,1g.10gb"), Ok(()));
    assert_eq!(
        ok("a100", "1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb"),
        Ok(())
    );
    // A100-40GB has no 3g.40gb; the error lists what it has.
    let e = ok("a100", "3g.40gb").unwrap_err().to_string();
    assert!(e.contains("3g.20gb") && e.contains("no profile"), "{e}");
    // Not MIG-capable.
    let e = ok("t4", "1g.5gb").unwrap_err().to_string();
    assert!(e.contains("no MIG profiles"), "{e}");
    // Too many of one profile, and slices that do not fit.
    assert!(matches!(
        ok("h100", "4g.40gb,4g.40gb"),
        Err(MigError::TooMany { max: 1, .. })
    ));
    let e = ok("h100", "4g.40gb,3g.40gb,1g.10gb").unwrap_err();
    assert!(matches!(e, MigError::DoesNotFit { .. }), "{e}");
    assert_eq!(parse_layout(" , "), Err(MigError::Empty));
    // Case and spaces as people type them.
    assert_eq!(
        parse_layout("3G.40GB, 1g.10gb").unwrap(),
        vec!["3g.40gb", "1g.10gb"]
    );
}

#[test]
fn memory_splits_per_instance_and_the_parent_sums_them() {
    let (_d, sim) = mig_box("a100-80gb", "3g.40gb,3g.40gb");
    let inst = sim.mig_instances().to_vec();
    assert_eq!(inst.len(), 2);
    assert_eq!((inst[0].gi, inst[1].gi), (1, 2));
    assert!(inst.iter().all(|m| m.device.uuid.starts_with("MIG-")));
    assert_ne!(inst[0].device.uuid, inst[1].device.uuid);
    assert_eq!(inst[0].device.name, "NVIDIA A100-SXM4-80GB MIG 3g.40gb");
    // 39.25 GiB each, as nvidia-smi mig -lgip prints it.
    assert_eq!(inst[0].device.total, 40192 * 1024 * 1024);
    assert!(sim.is_mig_parent(0));
    // A process given instance 2 by its MIG UUID sees it as its only CUDA device.
    let env = ProcessEnv {
        cuda_visible: Some(inst[1].device.uuid.clone()),
        ..ProcessEnv::default()
    };
    let mut p = SimProcess::with_env(sim.clone(), &env);
    assert_eq!(p.device_count(), 1);
    assert_eq!(p.physical(0).unwrap(), inst[1].device.index);
    p.create_context(0).unwrap();
    p.alloc(0, 30 * GIB).unwrap();
    let (free, total) = p.mem_info(0).unwrap();
    assert_eq!(total, inst[1].device.total);
    assert!(free < 10 * GIB, "{free}");
    // More than the instance holds fails, though the parent has room.
    assert!(matches!(
        p.alloc(0, 15 * GIB),
        Err(crate::SimError::OutOfMemory { .. })
    ));
    let nvml = SimNvml::attach(sim.clone(), vec![0]).seen_from(Caller::Host);
    let i1 = nvml.memory(inst[1].device.index).unwrap();
    let i0 = nvml.memory(inst[0].device.index).unwrap();
    let parent = nvml.memory(0).unwrap();
    assert_eq!(i0.used, 0);
    assert!(i1.used >= 30 * GIB);
    assert_eq!(parent.used, i0.used + i1.used, "the parent is the sum");
    assert_eq!(parent.total, sim.device(0).unwrap().total);
    // Per-instance lists; the parent's aggregate for a privileged caller.
    let on = |k: u32| nvml.processes(k, ProcessKind::Compute).unwrap();
    assert!(on(inst[0].device.index).is_empty());
    assert_eq!(on(inst[1].device.index).len(), 1);
    assert_eq!(on(0).len(), 1);
    // Unprivileged (another PID namespace): no aggregate on the parent; instances answer.
    let inside = nvml.clone().seen_from(Caller::Namespace(42));
    assert!(matches!(
        inside.processes(0, ProcessKind::Compute),
        Err(crate::SimError::NoPermission(0))
    ));
    assert!(inside
        .processes(inst[1].device.index, ProcessKind::Compute)
        .is_ok());
    assert!(nvml.mig_mode(0).unwrap());
    assert_eq!(nvml.mig_instances(0).unwrap().len(), 2);
    p.release_all().unwrap();
}

#[test]
fn cuda_sees_one_mig_device_and_only_openable_instances() {
    let (_d, sim) = mig_box("2xh100", "3g.40gb,3g.40gb");
    let inst = sim.mig_instances().to_vec();
    assert_eq!(inst.len(), 4);
    // No CUDA_VISIBLE_DEVICES: the first instance of the first GPU only.
    let p = SimProcess::new(sim.clone(), None);
    assert_eq!(p.device_count(), 1);
    assert_eq!(p.physical(0).unwrap(), inst[0].device.index);
    // Two MIG UUIDs: still one MIG device.
    let two = format!("{},{}", inst[3].device.uuid, inst[0].device.uuid);
    let p = SimProcess::new(sim.clone(), Some(&two));
    assert_eq!(p.device_count(), 1);
    assert_eq!(p.physical(0).unwrap(), inst[3].device.index);
    // An instance whose capability file is not in this view cannot be opened.
    let cap = sim
        .dir()
        .join(crate::DEV_DIR)
        .join(cap_file(inst[3].device.index));
    std::fs::remove_file(cap).unwrap();
    let p = SimProcess::new(sim.clone(), Some(&inst[3].device.uuid));
    assert_eq!(p.device_count(), 0);
    let nvml = SimNvml::attach(sim.clone(), vec![0, 1]);
    assert_eq!(nvml.mig_instances(1).unwrap().len(), 1);
    assert!(matches!(
        nvml.memory(inst[3].device.index),
        Err(crate::SimError::InvalidDevice(_))
    ));
}

#[test]
fn a_lost_parent_loses_its_instances() {
    let (_d, sim) = mig_box("h100", "7g.80gb");
    let k = sim.mig_instances()[0].device.index;
    sim.update_faults(|f, _| {
        f.lost_devices.push(0);
        Ok(())
    })
    .unwrap();
    let nvml = SimNvml::attach(sim.clone(), vec![0]);
    assert!(matches!(
        nvml.memory(k),
        Err(crate::SimError::DeviceLost(_))
    ));
}
