//! scripts/gpu-check, the kit a lent GPU machine runs, run here against the simulated box
//! (vramdoc's real backends over the simulated libraries), so the kit cannot rot: every step
//! runs and its report says what it saw.

use crate::common::{simgpu_lib_dir, vramdoc};
use std::path::Path;
use std::process::Command;

#[test]
fn the_gpu_check_kit_runs_every_step_and_writes_one_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let boxdir = dir.path().join("box");
    let init = vramdoc()
        .args(["sim", "init", "2x16GiB", "--dir"])
        .arg(&boxdir)
        .output()
        .expect("sim init");
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let out = dir.path().join("gpu-check.md");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = Command::new(root.join("scripts/gpu-check"))
        .current_dir(root)
        .env("VRAMDOC_SIM_DIR", &boxdir)
        .env("VRAMDOC_PIDNS", "host")
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .arg("--vramdoc")
        .arg(env!("CARGO_BIN_EXE_vramdoc"))
        .arg("--no-torch")
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run scripts/gpu-check");
    // The box's daemons go with the box.
    let _ = std::fs::remove_dir_all(&boxdir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(&out).expect("the report");
    // The machine, through the real NVML backend over the simulated library.
    assert!(md.contains("backend nvml, driver 550.54.15"), "{md}");
    assert!(md.contains("GPU 1: Simulated GPU 16GiB GPU-"), "{md}");
    // Every documented scenario replayed on the real CUDA backend, bug and fixes as expected.
    for s in [
        "stray-cuda0",
        "multi-size-oom",
        "sharded-release",
        "double-load",
        "overcommit",
    ] {
        assert!(md.contains(&format!("{s} / bug: reproduced")), "{s}: {md}");
    }
    assert!(!md.contains(": unexpected"), "{md}");
    // The ctypes job shapes: the out-of-memory one is named.
    assert!(
        md.contains("error out-of-memory: Out of memory on GPU 0"),
        "{md}"
    );
    assert!(md.contains("PyTorch with CUDA is not importable"), "{md}");
}
