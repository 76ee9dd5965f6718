//! A process's device set (issue 25) end to end: device minor numbers permuted against PCI
//! order (`sim init --minors`) as both backends read them, and `stray-context` deciding on
//! what a process can open and what Slurm gave it before its `CUDA_VISIBLE_DEVICES`.

use crate::common::clients::{vramdoc_scan, CliBox};
use crate::common::poll::{eventually, SECS_10};
use crate::common::{self};
use serde_json::Value;

const GIB: u64 = 1 << 30;
/// NVML index → minor: GPU 1's device file is `dev/nvidia0` (nvidia-docker#1432: minors
/// follow the kernel module's probe order, not NVML's).
const MINORS: &str = "2,0,3,1";

fn permuted_box() -> CliBox {
    CliBox::new("4x16GiB", &["--minors", MINORS])
}

/// `vramdoc scan --json` with the in-process simulator backend.
fn scan_sim(b: &CliBox) -> Value {
    let out = b
        .vramdoc()
        .args(["scan", "--json"])
        .env("VRAMDOC_PIDNS", "host")
        .output()
        .expect("scan");
    assert!(
        matches!(out.status.code(), Some(0) | Some(1)),
        "scan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("scan JSON")
}

fn minors_of(report: &Value) -> Vec<Option<u64>> {
    report["environment"]["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["minor"].as_u64())
        .collect()
}

fn ids(report: &Value) -> Vec<String> {
    crate::corpus::findings_of(report)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// The GPUs NVML lists `pid` on, with bytes.
fn devices_of(report: &Value, pid: u64) -> Vec<(u64, u64)> {
    report["scan"]["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["pid"].as_u64() == Some(pid))
        .flat_map(|p| p["devices"].as_array().cloned().unwrap_or_default())
        .map(|u| {
            (
                u["device"].as_u64().unwrap_or(u64::MAX),
                u["used"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn minor_numbers_come_from_the_driver_on_both_backends() {
    let b = permuted_box();
    let want: Vec<Option<u64>> = [2, 0, 3, 1].into_iter().map(Some).collect();
    // The box's device files are named by minor, as /dev/nvidiaN.
    for m in 0..4 {
        assert!(b.dir.join(format!("dev/nvidia{m}")).exists(), "nvidia{m}");
    }
    let real = vramdoc_scan(&b, common::simgpu_lib_dir());
    assert_eq!(minors_of(&real), want, "nvmlDeviceGetMinorNumber");
    assert_eq!(minors_of(&scan_sim(&b)), want, "in-process backend");
}

#[test]
fn a_bad_minors_list_is_a_usage_error_and_leaves_no_box() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (minors, says) in [("0,1,2", "3 number(s) for 4"), ("0,0,1,2", "given twice")] {
        let out = common::vramdoc()
            .args(["sim", "init", "4x16GiB", "--minors", minors, "--dir"])
            .arg(dir.path().join("box"))
            .output()
            .expect("sim init");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{minors}: {err}");
        assert!(err.contains(says), "{minors}: {err}");
        assert!(!dir.path().join("box").join("box.json").exists());
    }
}

/// Must-show 2: a process on physical GPU 1 with `CUDA_VISIBLE_DEVICES=0` and
/// `SLURM_JOB_GPUS=1` (Slurm `ConstrainDevices`: only its GPU's device file can be opened;
/// SchedMD/slurm `src/plugins/gres/common/gres_common.c` writes the local index into
/// `CUDA_VISIBLE_DEVICES` and the global id into `SLURM_JOB_GPUS`). The image-style
/// `NVIDIA_VISIBLE_DEVICES=all` stays (CDI), and it is in no container cgroup.
#[test]
fn slurm_job_on_gpu_1_with_local_cvd_0_is_not_a_stray_context() {
    let b = permuted_box();
    let pid = b.detached_holder(
        &["--gpus", "1", "--strategy", "cdi", "--cgroup", "none"],
        &[("CUDA_VISIBLE_DEVICES", "0"), ("SLURM_JOB_GPUS", "1")],
        "6GiB",
    );
    for (backend, report) in [
        ("real", vramdoc_scan(&b, common::simgpu_lib_dir())),
        ("sim", scan_sim(&b)),
    ] {
        // The case is what it says: NVML lists it on GPU 1 with its memory, CVD=0.
        let on = devices_of(&report, pid);
        assert!(
            on.iter().any(|(d, u)| *d == 1 && *u >= 6 * GIB),
            "{backend}: {on:?}"
        );
        let ids = ids(&report);
        assert!(
            !ids.iter().any(|i| i == "stray-context"),
            "{backend}: {ids:?}"
        );
    }
}

/// A true stray in a Slurm job is still found: a job given GPUs 1 and 3 (local
/// CUDA_VISIBLE_DEVICES=0,1, SLURM_JOB_GPUS by minor) whose work is on its second GPU and
/// a context-sized footprint on its first (FAILURES.md §1, OneDiff's warm-up on cuda:0).
#[test]
fn a_real_stray_context_in_a_slurm_job_is_still_found() {
    let b = permuted_box();
    let mut c = b.vramdoc();
    c.args(["sim", "run", "-d", "--gpus", "1,3", "--strategy", "cdi"])
        .args(["--cgroup", "none", "--"])
        .arg(env!("CARGO_BIN_EXE_vramdoc"))
        .args(["sim", "hold", "--device", "1", "--size", "8GiB"])
        .args(["--context-on", "0"])
        .env("CUDA_VISIBLE_DEVICES", "0,1")
        .env("SLURM_JOB_GPUS", "0,1");
    let out = c.output().expect("sim run");
    common::assert_ok(&out, "sim run -d");
    eventually(SECS_10, "the job holds its memory", || {
        let st = b.sim().state().expect("box state");
        st.processes
            .values()
            .any(|p| p.devices.values().any(|u| u.alloc_bytes >= 8 * GIB))
    });
    let report = vramdoc_scan(&b, common::simgpu_lib_dir());
    let f = report["scan"]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["id"] == "stray-context")
        .cloned()
        .unwrap_or_else(|| panic!("no stray-context: {:?}", ids(&report)));
    assert_eq!(f["devices"], serde_json::json!([1]), "{f}");
}

/// Must-show 2 for `run`: the same Slurm job recorded by `vramdoc run` (the container's
/// process carries the job's marker in its environment, so it is the job's); the timeline
/// rule reads `SLURM_JOB_GPUS` through the recorded GPUs' minors (a recording reads no
/// device files: Slurm's variable decides).
#[test]
fn run_of_a_slurm_job_on_gpu_1_with_local_cvd_0_is_not_a_stray_context() {
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let b = permuted_box();
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = |name: &str, slurm: &[&str]| -> Value {
        // The job's own environment, set by `env`: vramdoc itself runs without it.
        let out = tmp.path().join(format!("{name}.json"));
        let o = b
            .vramdoc()
            .args(["run", "--process-period", "100ms", "--out"])
            .arg(&out)
            .args(["--", "env", "CUDA_VISIBLE_DEVICES=0"])
            .args(slurm)
            .args([exe, "sim", "run", "--gpus", "1", "--strategy", "cdi"])
            .args(["--cgroup", "none", "--", exe, "sim", "hold"])
            .args(["--size", "6GiB", "--duration", "2s"])
            .stdout(std::process::Stdio::null())
            .output()
            .expect("vramdoc run");
        assert!(
            matches!(o.status.code(), Some(0) | Some(1)),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let text = std::fs::read_to_string(&out).expect("report");
        serde_json::from_str(&text).expect("report JSON")
    };
    let on_gpu_1 = |r: &Value| {
        r["run"]["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["devices"].as_array().cloned().unwrap_or_default())
            .any(|d| d["device"] == 1 && d["peak"].as_u64().unwrap_or(0) >= 6 * GIB)
    };
    let slurm = run("slurm", &["SLURM_JOB_GPUS=1"]);
    assert!(on_gpu_1(&slurm), "the job's memory on GPU 1: {slurm}");
    let ids_slurm = ids(&slurm);
    assert!(
        !ids_slurm.iter().any(|i| i == "stray-context"),
        "{ids_slurm:?}"
    );
}
