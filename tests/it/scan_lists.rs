//! Which NVML process lists `vramdoc scan` reads (docs/scan.md): each GPU's compute list, and
//! its graphics and MPS lists only where the compute list leaves used memory unexplained;
//! `--all-lists` reads all three. The calls are counted by the simulated libnvidia-ml.so.1
//! per client (`vramdoc sim status --calls`); the per-process numbers must not change.

use crate::common::hold::Holder;
use crate::common::{self, fresh_box, json_ok, scans::scan_cmd};
use serde_json::Value;
use std::path::Path;

/// `vramdoc --backend real scan --json [extra]` over the simulated libraries: its report and
/// the process-list calls it made.
fn scan_real(dir: &Path, extra: &[&str]) -> (Value, u64) {
    let mut cmd = scan_cmd(dir, &["--json", "--backend", "real"]);
    cmd.args(extra)
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn scan");
    let pid = child.id();
    let out = child.wait_with_output().expect("scan");
    let v = json_ok(&out, "scan");
    let lists = vramdoc_sim::calls::read_all(dir)
        .expect("call counters")
        .iter()
        .filter(|c| c.pid == pid)
        .flat_map(|c| c.calls.iter())
        .filter(|(name, _)| name.contains("RunningProcess"))
        .map(|(_, n)| n)
        .sum();
    (v, lists)
}

/// `(pid, device, used)` of every process of a scan report, sorted.
fn usage(v: &Value) -> Vec<(u64, u64, Option<u64>)> {
    let mut out: Vec<_> = v["scan"]["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .flat_map(|p| {
            p["devices"].as_array().into_iter().flatten().map(move |u| {
                (
                    p["pid"].as_u64().unwrap_or(0),
                    u["device"].as_u64().unwrap_or(0),
                    u["used"].as_u64(),
                )
            })
        })
        .collect();
    out.sort();
    out
}

#[test]
fn scan_lists_only_compute_where_it_explains_the_memory() {
    let b = fresh_box("2x24GiB");
    let h0 = Holder::start(b.path(), &[], &["--size", "1GiB"]);
    let h1 = Holder::start(b.path(), &[], &["--device", "1", "--size", "512MiB"]);
    let (v, lists) = scan_real(b.path(), &[]);
    assert_eq!(lists, 2, "one compute list per GPU: {v}");
    let (all, all_lists) = scan_real(b.path(), &["--all-lists"]);
    assert_eq!(all_lists, 6, "--all-lists: three lists per GPU");
    assert_eq!(usage(&v), usage(&all));
    assert!(usage(&v)
        .iter()
        .any(|(p, d, _)| *p == h0.pid as u64 && *d == 0));
    assert!(usage(&v)
        .iter()
        .any(|(p, d, _)| *p == h1.pid as u64 && *d == 1));
}

/// Graphics and MPS clients hold memory the compute list does not explain: those GPUs' other
/// lists are read, and every process is reported as with `--all-lists`, on both backends.
#[test]
fn scan_lists_graphics_and_mps_where_compute_leaves_memory_unexplained() {
    let b = fresh_box("3x24GiB");
    let _c = Holder::start(b.path(), &[], &["--size", "1GiB"]);
    let x = Holder::start(b.path(), &[], &["--graphics", "--size", "200MiB"]);
    let m = Holder::start(
        b.path(),
        &[],
        &["--device", "1", "--mps", "--size", "300MiB"],
    );
    let cg = Holder::start(
        b.path(),
        &[],
        &["--device", "2", "--also-graphics", "--size", "64MiB"],
    );
    let (v, lists) = scan_real(b.path(), &[]);
    // GPU 0 (a graphics client) and GPU 1 (an MPS client): three lists each; GPU 2's C+G
    // process is in its compute list with all its memory: one.
    assert_eq!(lists, 3 + 3 + 1, "{v}");
    let (all, all_lists) = scan_real(b.path(), &["--all-lists"]);
    assert_eq!(all_lists, 9);
    assert_eq!(usage(&v), usage(&all));
    for (pid, device) in [(x.pid, 0), (m.pid, 1), (cg.pid, 2)] {
        assert!(
            usage(&v)
                .iter()
                .any(|(p, d, u)| *p == pid as u64 && *d == device && u.is_some()),
            "PID {pid} on GPU {device}: {v}"
        );
    }
    // The in-process backend reads the same lists the same way.
    let sim = |extra: &[&str]| {
        let mut cmd = scan_cmd(b.path(), &["--json", "--backend", "sim"]);
        cmd.args(extra);
        usage(&json_ok(&cmd.output().expect("scan"), "scan --backend sim"))
    };
    assert_eq!(sim(&[]), usage(&v));
    assert_eq!(sim(&["--all-lists"]), usage(&v));
}
