//! Node shapes on MIG GPUs (issue 25 item 5): boxes made with `vramdoc sim init SPEC --mig
//! …`, read by `vramdoc scan` through its real NVML backend (nvml-wrapper's MIG API) over the
//! simulated libnvidia-ml.so.1. MIG instances are isolated slices (NVIDIA Multi-Instance GPU
//! User Guide, "Introduction": each instance has its own memory, cache and compute), so a
//! full instance beside empty ones is that instance's state, never the GPU's.

use super::{assert_clean, findings_of, Outcome};
use crate::common::clients::{vramdoc_scan, CliBox};
use crate::common::hold::Holder;

use crate::common::{self};

const GIB: u64 = 1 << 30;

fn scan(b: &CliBox) -> Vec<(String, String)> {
    findings_of(&vramdoc_scan(b, common::simgpu_lib_dir()))
}

/// A holder on MIG instance `n` of the box (by its `MIG-<uuid>`, as CUDA selects one).
fn hold_on(b: &CliBox, n: usize, size: &str) -> Holder {
    let uuid = b.sim().mig_instances()[n].device.uuid.clone();
    Holder::start(
        &b.dir,
        &[("CUDA_VISIBLE_DEVICES", uuid.as_str())],
        &["--size", size],
    )
}

/// One instance of an A100-80GB (`3g.40gb,3g.40gb`) held at 37 of its 39.25 GiB by one
/// engine, the other empty: MIG User Guide, "Supported MIG Profiles" (A100-80GB 3g.40gb);
/// issue 25 item 5 (low-headroom computed on the parent).
fn one_instance_full() -> Outcome {
    let b = CliBox::new("a100-80gb", &["--mig", "3g.40gb,3g.40gb"]);
    let _h = hold_on(&b, 0, "37GiB");
    Outcome::new(
        "mig-one-instance-full-one-empty",
        "NVIDIA MIG User Guide, Supported MIG Profiles (A100-80GB 3g.40gb); issue 25 item 5",
        &[],
        scan(&b),
    )
}

/// A pod given one MIG instance by the device plugin's MIG strategy
/// (`NVIDIA_VISIBLE_DEVICES=MIG-<uuid>`: NVIDIA/k8s-device-plugin, `--mig-strategy`
/// single/mixed), holding most of it, scanned from the host.
fn pod_on_an_instance() -> Outcome {
    let b = CliBox::new("h100", &["--mig", "3g.40gb,2g.20gb,1g.10gb,1g.10gb"]);
    let uuid = b.sim().mig_instances()[1].device.uuid.clone();
    b.detached_holder(&["--gpus", &uuid, "--cgroup", "none"], &[], "18GiB");
    Outcome::new(
        "mig-pod-on-a-2g.20gb-instance",
        "NVIDIA/k8s-device-plugin MIG strategies (NVIDIA_VISIBLE_DEVICES=MIG-<uuid>); MIG User Guide",
        &[],
        scan(&b),
    )
}

/// Three of seven `1g.10gb` instances of an H100 each held near full by its own job (the
/// seven-way split the MIG User Guide shows for inference).
fn seven_small_instances() -> Outcome {
    let b = CliBox::new("h100", &["--mig", &["1g.10gb"; 7].join(",")]);
    let _h: Vec<Holder> = (0..3).map(|n| hold_on(&b, n, "8GiB")).collect();
    Outcome::new(
        "mig-seven-1g.10gb-three-busy",
        "NVIDIA MIG User Guide, Supported MIG Profiles (H100 1g.10gb x7)",
        &[],
        scan(&b),
    )
}

/// Two independent claimants in one instance leave it too full for another context (0.375
/// of its 39.25 GiB free): the over-commit of shared/FAILURES.md §5, inside a MIG slice (the
/// rule still holds per instance).
fn two_claimants_in_one_instance() -> Outcome {
    let b = CliBox::new("a100-80gb", &["--mig", "3g.40gb,3g.40gb"]);
    let _a = hold_on(&b, 1, "19GiB");
    let _b = hold_on(&b, 1, "19GiB");
    Outcome::new(
        "mig-two-claimants-share-one-instance",
        "shared/FAILURES.md §5 (over-committed utilisation), inside one MIG instance",
        &["low-headroom"],
        scan(&b),
    )
}

#[test]
fn mig_node_shapes() {
    let outcomes = vec![
        one_instance_full(),
        pod_on_an_instance(),
        seven_small_instances(),
        two_claimants_in_one_instance(),
    ];
    assert_clean("scan (MIG node shapes)", &outcomes);
}
