//! Which NVML process lists `vramdoc scan` reads (docs/scan.md): each GPU's compute list, and
//! its graphics and MPS lists only where the compute list leaves used memory unexplained;
//! `--all-lists` reads all three. The calls are counted by the simulated libnvidia-ml.so.1
//! per client (`vramdoc sim status --calls`); the per-process numbers must not change.

use crate::common::hold::Holder;
use crate::common::{self, fresh_box, json_ok, scans::scan_cmd};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// `vramdoc --backend real scan --json [extra]` over the simulated libraries: its report and
/// the process-list calls it made.
fn scan_real(dir: &Path, extra: &[&str]) -> (Value, u64) {
    let (v, calls) = scan_calls(dir, extra);
    let lists = calls
        .iter()
        .filter(|(name, _)| name.contains("RunningProcess"))
        .map(|(_, n)| n)
        .sum();
    (v, lists)
}

/// `vramdoc --backend real scan --json [extra]`: its report and every NVML call it made, by
/// entry point.
fn scan_calls(dir: &Path, extra: &[&str]) -> (Value, BTreeMap<String, u64>) {
    let mut cmd = scan_cmd(dir, &["--json", "--backend", "real"]);
    cmd.args(extra)
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn scan");
    let pid = child.id();
    let out = child.wait_with_output().expect("scan");
    let v = json_ok(&out, "scan");
    let mut calls = BTreeMap::new();
    for c in vramdoc_sim::calls::read_all(dir)
        .expect("call counters")
        .iter()
        .filter(|c| c.pid == pid)
    {
        for (name, n) in &c.calls {
            *calls.entry(name.clone()).or_default() += n;
        }
    }
    (v, calls)
}

/// Issue 34: a scan asks each GPU each question once (its handle, its MIG mode, its facts and
/// memory) and the driver for the count once: the open's count serves the inventory, the
/// enumeration's handles and modes serve the entries.
#[test]
fn scan_asks_each_gpu_each_question_once() {
    let b = fresh_box("4x24GiB");
    let _h0 = Holder::start(b.path(), &[], &["--size", "1GiB"]);
    let _h2 = Holder::start(b.path(), &[], &["--device", "2", "--size", "512MiB"]);
    let (v, calls) = scan_calls(b.path(), &[]);
    assert_eq!(v["scan"]["devices"].as_array().map(Vec::len), Some(4));
    let n = |name: &str| calls.get(name).copied().unwrap_or(0);
    for per_gpu in [
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetMemoryInfo_v2",
    ] {
        assert_eq!(n(per_gpu), 4, "{per_gpu} once per GPU: {calls:?}");
    }
    assert_eq!(n("nvmlDeviceGetCount_v2"), 1, "the count once: {calls:?}");
    assert_eq!(n("nvmlInit_v2"), 1, "{calls:?}");
}

/// The same of a GPU in MIG mode: its handle and mode once; each instance is read through the
/// handle the enumeration opened.
#[test]
fn scan_asks_a_mig_gpu_its_mode_once() {
    let b = common::clients::CliBox::new("a100-80gb", &["--mig", "3g.40gb,3g.40gb"]);
    let (v, calls) = scan_calls(&b.dir, &[]);
    assert_eq!(
        v["scan"]["devices"].as_array().map(Vec::len),
        Some(3),
        "{v}"
    );
    let n = |name: &str| calls.get(name).copied().unwrap_or(0);
    assert_eq!(n("nvmlDeviceGetHandleByIndex_v2"), 1, "{calls:?}");
    assert_eq!(n("nvmlDeviceGetMigMode"), 1, "{calls:?}");
    assert_eq!(n("nvmlDeviceGetCount_v2"), 1, "{calls:?}");
}

/// The files `vramdoc scan` opens, traced with strace: how many times each of `paths` was
/// opened.
fn opens_of_scan(dir: &Path, paths: &[&str]) -> Vec<usize> {
    let strace = common::skip::tool("strace", "strace").expect("checked by the caller");
    let log = tempfile::NamedTempFile::new().expect("trace file");
    let cmd = scan_cmd(dir, &["--json"]);
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let envs: Vec<_> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    let out = std::process::Command::new(strace)
        .args(["-f", "-qq", "-e", "trace=open,openat", "-o"])
        .arg(log.path())
        .arg(program)
        .args(args)
        .envs(envs)
        .output()
        .expect("strace vramdoc scan");
    json_ok(&out, "scan under strace");
    let text = std::fs::read_to_string(log.path()).expect("trace");
    paths
        .iter()
        .map(|p| {
            let quoted = format!("\"{p}\"");
            text.lines()
                .filter(|l| l.contains(&quoted) && !l.contains("= -1"))
                .count()
        })
        .collect()
}

/// Issue 34: the machine-wide files every process's reading consults (`/etc/passwd` for user
/// names, the mount table for the device cgroup) are opened once per scan, not once per
/// process: the count is the same with one GPU process and with five.
#[test]
fn scan_reads_the_host_files_once() {
    let _ = common::skip::require!("strace", common::skip::tool("strace", "strace"));
    let files = ["/etc/passwd", "/proc/self/mountinfo"];
    let b = fresh_box("2x24GiB");
    let first = Holder::start(b.path(), &[], &["--size", "256MiB"]);
    let one = opens_of_scan(b.path(), &files);
    let _more: Vec<Holder> = (0..4)
        .map(|i| {
            Holder::start(
                b.path(),
                &[],
                &["--device", &(i % 2).to_string(), "--size", "128MiB"],
            )
        })
        .collect();
    let five = opens_of_scan(b.path(), &files);
    assert_eq!(one[0], 1, "/etc/passwd once with one process");
    assert_eq!(
        five, one,
        "{files:?} opened as often with five processes as with one"
    );
    drop(first);
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

/// The `lists` of process `pid` on `device` in a scan report.
fn lists_of(v: &Value, pid: u32, device: u64) -> Vec<String> {
    v["scan"]["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["pid"].as_u64() == Some(pid as u64))
        .flat_map(|p| p["devices"].as_array().into_iter().flatten())
        .filter(|u| u["device"].as_u64() == Some(device))
        .flat_map(|u| u["lists"].as_array().into_iter().flatten())
        .filter_map(|k| k.as_str().map(String::from))
        .collect()
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
    // Issue 37 item 4: each entry says which lists named it (docs/json.md `lists`): the
    // graphics client only the graphics list, the C+G process the compute list (its
    // graphics list is read only with --all-lists), on both backends.
    for (report, cg_lists) in [(&v, vec!["compute"]), (&all, vec!["compute", "graphics"])] {
        for (pid, device, want) in [
            (x.pid, 0, vec!["graphics"]),
            (m.pid, 1, vec!["mps"]),
            (cg.pid, 2, cg_lists),
        ] {
            assert_eq!(lists_of(report, pid, device), want, "PID {pid}: {report}");
        }
    }
    // The in-process backend reads the same lists the same way.
    let sim_report = json_ok(
        &scan_cmd(b.path(), &["--json", "--backend", "sim"])
            .output()
            .expect("scan"),
        "scan --backend sim",
    );
    assert_eq!(lists_of(&sim_report, x.pid, 0), ["graphics"]);
    let sim = |extra: &[&str]| {
        let mut cmd = scan_cmd(b.path(), &["--json", "--backend", "sim"]);
        cmd.args(extra);
        usage(&json_ok(&cmd.output().expect("scan"), "scan --backend sim"))
    };
    assert_eq!(sim(&[]), usage(&v));
    assert_eq!(sim(&["--all-lists"]), usage(&v));
}
