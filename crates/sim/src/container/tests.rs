//! Tests of the container runtime's pure parts: `--gpus`, device ids, the environment of each
//! strategy, cgroup paths. (Namespaces and cgroups are exercised end to end in
//! tests/simulator_clients.rs.)

use super::*;
use crate::InitOptions;

fn new_box(spec: &str) -> (tempfile::TempDir, SimBox) {
    let dir = tempfile::tempdir().unwrap();
    let b = SimBox::create(dir.path(), spec, &InitOptions::default()).unwrap();
    (dir, b)
}

fn spec(gpus: Vec<u32>, strategy: Strategy) -> ContainerSpec {
    ContainerSpec {
        gpus,
        strategy,
        ids: IdKind::Uuid,
        cdi_env: CdiEnv::All,
        cgroup: None,
    }
}

#[test]
fn gpus_parse_like_docker_run() {
    let (_d, b) = new_box("4x16GiB");
    let u2 = b.devices()[2].uuid.clone();
    assert_eq!(parse_gpus(&b, "all").unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(parse_gpus(&b, "none").unwrap(), Vec::<u32>::new());
    assert_eq!(parse_gpus(&b, "3,1").unwrap(), vec![1, 3]);
    assert_eq!(parse_gpus(&b, "\"device=0,2\"").unwrap(), vec![0, 2]);
    assert_eq!(parse_gpus(&b, &u2).unwrap(), vec![2]);
    assert_eq!(parse_gpus(&b, &u2[..12]).unwrap(), vec![2]);
    for bad in ["", "4", "GPU-zz", "x"] {
        let e = parse_gpus(&b, bad).unwrap_err().to_string();
        assert!(e.contains("--gpus"), "{bad}: {e}");
    }
}

#[test]
fn each_strategy_sets_what_the_plugin_and_runtime_set() {
    let (_d, b) = new_box("3x16GiB");
    let u = |i: usize| b.devices()[i].uuid.clone();
    let s = spec(vec![0, 2], Strategy::Envvar);
    assert_eq!(s.visible_env(&b), format!("{},{}", u(0), u(2)));
    let idx = ContainerSpec {
        ids: IdKind::Index,
        ..s.clone()
    };
    assert_eq!(idx.visible_env(&b), "0,2");
    let vm = spec(vec![1], Strategy::VolumeMounts);
    assert_eq!(vm.visible_env(&b), "/var/run/nvidia-container-devices");
    assert_eq!(vm.volume_entries(&b), vec![u(1)]);
    assert!(s.volume_entries(&b).is_empty());
    let cdi = spec(vec![1], Strategy::Cdi);
    assert_eq!(cdi.visible_env(&b), "all");
    let void = ContainerSpec {
        cdi_env: CdiEnv::Void,
        ..cdi
    };
    assert_eq!(void.visible_env(&b), "void");
    let mig = spec(vec![1], Strategy::Mig);
    let id = mig.visible_env(&b);
    assert!(id.starts_with("MIG-") && id.len() == 40, "{id}");
    assert_ne!(
        id.trim_start_matches("MIG-"),
        u(1).trim_start_matches("GPU-")
    );
    assert_eq!(id, mig_uuid(&u(1)), "stable per GPU");
    assert_eq!(spec(vec![], Strategy::Envvar).visible_env(&b), "none");
}

#[test]
fn cgroup_paths_are_checked_and_ids_are_docker_shaped() {
    assert_eq!(check_cgroup_path("/docker/abc/").unwrap(), "docker/abc");
    assert_eq!(
        check_cgroup_path("kubepods/burstable/pod1-2/c").unwrap(),
        "kubepods/burstable/pod1-2/c"
    );
    for bad in ["", "/", "a/../b", "a//b", "./a"] {
        assert!(check_cgroup_path(bad).is_err(), "{bad}");
    }
    let id = new_id();
    assert_eq!(id.len(), 64);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(id, new_id());
}
