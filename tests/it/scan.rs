//! End-to-end tests of `vramdoc scan` through the binary, on simulated boxes shared with real
//! holder processes staged by `vramdoc sim hold` (each test has its own box).

use crate::common;

use common::hold::Holder;
use common::poll::{eventually, SECS_10};
use common::scans::{
    all_ids, evidence_bytes, fail_on, findings, process, run, scan_cmd, scan_json, scan_json_with,
    used_on,
};
use common::{assert_ok, fresh_box, json_ok, sim_fault, vramdoc};
use serde_json::Value;
use std::process::Command;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;
/// Context overhead of a default box.
const CTX: u64 = 448 * MIB;
/// Reserved memory of a generic 24 GiB card (1 % of total, at least 256 MiB).
const RESERVED_24: u64 = 256 * MIB;
const TOTAL_24: u64 = 24 * GIB;

#[test]
fn clean_box_yields_no_finding() {
    let b = fresh_box("2x24GiB");
    let v = scan_json(b.path());
    assert_eq!(v["kind"], "scan");
    assert_eq!(v["schema_version"], 1);
    assert!(all_ids(&v).is_empty(), "{:?}", all_ids(&v));
    assert_eq!(v["scan"]["processes"].as_array().unwrap().len(), 0);
    assert_eq!(v["scan"]["devices"].as_array().unwrap().len(), 2);
    assert_eq!(v["scan"]["pid_namespace"], "host");
    // Headroom for every device: (24 GiB - 0 - 256 MiB - 512 MiB) / (24 GiB - 256 MiB), CUDA's
    // total, the one vLLM multiplies = 0.9789 -> 0.97.
    let h = v["scan"]["headroom"].as_array().unwrap();
    assert_eq!(h.len(), 2);
    assert_eq!(h[1]["max_gpu_memory_utilization"], 0.97);
    assert_eq!(h[1]["available"], TOTAL_24 - RESERVED_24 - 512 * MIB);
    // Table view, and --fail-on info passes on a clean box.
    let out = run(scan_cmd(b.path(), &["--fail-on", "info"]));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("No findings."), "{text}");
}

#[test]
fn neighbour_holding_memory_shows_numbers_and_headroom() {
    let b = fresh_box("2x24GiB");
    let h = Holder::start(b.path(), &[], &["--device", "0", "--size", "8GiB"]);
    let v = scan_json(b.path());
    let p = process(&v, h.pid);
    assert_eq!(used_on(p, 0), Some(8 * GIB + CTX));
    assert_eq!(p["visible"], true);
    assert_eq!(p["cuda_visible_devices"], "unset");
    assert_eq!(v["scan"]["devices"][0]["memory"]["used"], 8 * GIB + CTX);
    // Only the headroom note: (24576 - 8640 - 256 - 512) MiB / 24320 MiB CUDA total = 0.6237
    // -> 0.62.
    assert_eq!(all_ids(&v), vec!["low-headroom"]);
    let f = findings(&v, "low-headroom")[0];
    assert_eq!(f["severity"], "info");
    assert_eq!(f["devices"], serde_json::json!([0]));
    assert_eq!(evidence_bytes(f, "used"), Some(8 * GIB + CTX));
    let util = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["label"] == "largest safe gpu_memory_utilization")
        .expect("utilization evidence");
    let text = util["value"].as_str().unwrap();
    assert!(
        text.starts_with("0.62 = (24.00 GiB total - 8.44 GiB used"),
        "{text}"
    );
    assert!(
        text.ends_with("/ 23.75 GiB CUDA total = 0.6237 -> 0.62"),
        "{text}"
    );
    assert_eq!(v["scan"]["headroom"][0]["max_gpu_memory_utilization"], 0.62);
    assert_eq!(v["scan"]["headroom"][1]["max_gpu_memory_utilization"], 0.97);
    // Info only: --fail-on warn passes, --fail-on info fails.
    assert_eq!(fail_on(b.path(), "warn"), Some(0));
    assert_eq!(fail_on(b.path(), "info"), Some(1));
}

#[test]
fn stray_context_outside_cuda_visible_devices() {
    let b = fresh_box("2x24GiB");
    // Env says GPU 1 only, yet the process has a context on physical 0 (test-only staging).
    let h = Holder::start(
        b.path(),
        &[("CUDA_VISIBLE_DEVICES", "1")],
        &["--device", "0", "--size", "8GiB", "--physical-context", "0"],
    );
    let v = scan_json(b.path());
    let p = process(&v, h.pid);
    assert_eq!(p["cuda_visible_devices"], "1");
    assert_eq!(used_on(p, 0), Some(CTX));
    assert_eq!(used_on(p, 1), Some(8 * GIB + CTX));
    let f = findings(&v, "stray-context");
    assert_eq!(f.len(), 1, "{:?}", all_ids(&v));
    assert_eq!(f[0]["severity"], "warn");
    assert_eq!(f[0]["pid"], h.pid);
    assert_eq!(f[0]["devices"], serde_json::json!([0]));
    assert_eq!(evidence_bytes(f[0], "used on GPU 0"), Some(CTX));
    assert!(f[0]["title"]
        .as_str()
        .unwrap()
        .contains("outside its CUDA_VISIBLE_DEVICES=1"));
    assert!(f[0]["fix"]
        .as_str()
        .unwrap()
        .contains("CUDA_VISIBLE_DEVICES"));
    assert_eq!(fail_on(b.path(), "warn"), Some(1));
    assert_eq!(fail_on(b.path(), "error"), Some(0));
}

#[test]
fn stray_context_onediff_pattern() {
    let b = fresh_box("2x24GiB");
    // Ordinal 0 = physical 1 (the work), ordinal 1 = physical 0 (a context only).
    let h = Holder::start(
        b.path(),
        &[("CUDA_VISIBLE_DEVICES", "1,0")],
        &["--device", "0", "--size", "8GiB", "--context-on", "1"],
    );
    let v = scan_json(b.path());
    let f = findings(&v, "stray-context");
    assert_eq!(f.len(), 1, "{:?}", all_ids(&v));
    assert_eq!(f[0]["pid"], h.pid);
    assert_eq!(f[0]["devices"], serde_json::json!([0]));
    assert_eq!(
        evidence_bytes(f[0], "main work on GPU 1"),
        Some(8 * GIB + CTX)
    );
    assert_eq!(
        evidence_bytes(f[0], "context-sized footprint on GPU 0"),
        Some(CTX)
    );
}

mod process_dying_while_holding_memory {
    use super::*;

    /// Without the fault the driver returns the memory: no finding.
    #[test]
    fn the_driver_returns_its_memory() {
        let b = fresh_box("2x24GiB");
        let h = Holder::start(b.path(), &[], &["--device", "1", "--size", "6GiB"]);
        let v = scan_json(b.path());
        assert_eq!(used_on(process(&v, h.pid), 1), Some(6 * GIB + CTX));
        h.kill();
        let v = scan_json(b.path());
        assert!(all_ids(&v).is_empty(), "{:?}", all_ids(&v));
        assert_eq!(v["scan"]["devices"][1]["memory"]["used"], 0);
    }

    /// A box whose driver keeps the memory of exited processes, and the PID of a holder of
    /// 6 GiB on GPU 1 that has exited.
    fn stuck_driver_with_a_dead_holder() -> (tempfile::TempDir, u32) {
        stuck_driver_of(vramdoc_sim::profile::DEFAULT_DRIVER)
    }

    /// [`stuck_driver_with_a_dead_holder`] on a box of driver `version`.
    fn stuck_driver_of(version: &str) -> (tempfile::TempDir, u32) {
        let b = tempfile::tempdir().unwrap();
        let opts = vramdoc_sim::InitOptions {
            driver_version: version.into(),
            pid_view: vramdoc_sim::profile::pid_view_of(version),
            ..Default::default()
        };
        vramdoc_sim::SimBox::create(b.path(), "2x24GiB", &opts).unwrap();
        sim_fault(b.path(), &["--keep-dead"]);
        let h = Holder::start(b.path(), &[], &["--device", "1", "--size", "6GiB"]);
        let pid = h.kill();
        (b, pid)
    }

    /// With the stuck-driver fault the memory stays, owned by a PID that no longer exists.
    #[test]
    fn a_stuck_driver_keeps_it_with_no_live_owner() {
        let (b, pid) = stuck_driver_with_a_dead_holder();
        let v = scan_json(b.path());
        let f = findings(&v, "no-live-owner");
        assert_eq!(f.len(), 1, "{:?}", all_ids(&v));
        assert_eq!(f[0]["severity"], "error");
        assert_eq!(f[0]["devices"], serde_json::json!([1]));
        assert_eq!(f[0]["pid"], pid);
        assert_eq!(evidence_bytes(f[0], "no live owner"), Some(6 * GIB + CTX));
        assert_eq!(
            evidence_bytes(f[0], &format!("PID {pid} listed by NVML")),
            Some(6 * GIB + CTX)
        );
        assert_eq!(evidence_bytes(f[0], "held by live processes"), Some(0));
        assert_eq!(process(&v, pid)["visible"], false);
        assert_eq!(fail_on(b.path(), "error"), Some(1));
    }

    /// Seen from a container namespace under a driver that gives host PIDs (before 535.113)
    /// the same PID is invisible, not dead: no guessing. Under a translating driver a listed
    /// PID that does not exist in the namespace is one of its own processes that exited:
    /// lost, as on the host.
    #[test]
    fn from_a_container_it_is_invisible_not_dead() {
        let (b, _) = stuck_driver_of("535.54.03");
        let v = scan_json_with(b.path(), "container");
        assert_eq!(v["scan"]["pid_namespace"], "container");
        assert!(
            findings(&v, "no-live-owner").is_empty(),
            "{:?}",
            all_ids(&v)
        );
        let f = findings(&v, "invisible-processes");
        assert_eq!(f.len(), 1, "{:?}", all_ids(&v));
        assert_eq!(
            evidence_bytes(f[0], "memory they hold"),
            Some(6 * GIB + CTX)
        );
        let (b, pid) = stuck_driver_of("570.86.10");
        let v = scan_json_with(b.path(), "container");
        let f = findings(&v, "no-live-owner");
        assert_eq!(f.len(), 1, "{:?}", all_ids(&v));
        assert_eq!(f[0]["severity"], "error");
        assert_eq!(f[0]["pid"], pid);
        assert!(findings(&v, "invisible-processes").is_empty(), "{v:#}");
    }
}

/// Issue 15: one claimant keeping a GPU full is its steady state (info, even over-full);
/// two claimants leaving no room for another context is a cause that will bite (warn).
/// Never error.
#[test]
fn over_full_and_low_headroom_devices() {
    let b = fresh_box("2x24GiB");
    // GPU 0: 24320 MiB usable - 448 MiB context - 23800 MiB = 72 MiB free, one holder.
    let _full = Holder::start(b.path(), &[], &["--device", "0", "--size", "23800MiB"]);
    // GPU 1: 24320 - 2 x 448 - 2 x 11500 = 424 MiB free, two holders: no room for another
    // context (with 1 GiB free a snapshot says info: a steady fixed-budget state, memacct::).
    let gpu1 = [("CUDA_VISIBLE_DEVICES", "1")];
    let _a = Holder::start(b.path(), &gpu1, &["--device", "0", "--size", "11500MiB"]);
    let _b = Holder::start(b.path(), &gpu1, &["--device", "0", "--size", "11500MiB"]);
    let v = scan_json(b.path());
    let f = findings(&v, "low-headroom");
    assert_eq!(f.len(), 2, "{:?}", all_ids(&v));
    let on = |d: u32| {
        *f.iter()
            .find(|f| f["devices"] == serde_json::json!([d]))
            .expect("finding for device")
    };
    assert_eq!(on(0)["severity"], "info");
    assert_eq!(evidence_bytes(on(0), "free"), Some(72 * MIB));
    assert!(on(0)["title"].as_str().unwrap().contains("steady fill"));
    assert_eq!(on(1)["severity"], "warn");
    assert!(on(1)["title"]
        .as_str()
        .unwrap()
        .contains("2 processes share it"));
    assert_eq!(evidence_bytes(on(1), "free"), Some(424 * MIB));
    // A single holder of 0.91 x total is labelled as a utilization-sized budget.
    assert!(on(0)["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["label"]
            .as_str()
            .unwrap()
            .contains("utilization-sized budget")));
    assert_eq!(v["scan"]["headroom"][0]["max_gpu_memory_utilization"], 0.0);
    // 424 MiB free is less than the 512 MiB context reserve: nothing fits.
    assert_eq!(v["scan"]["headroom"][1]["max_gpu_memory_utilization"], 0.0);
    // Warnings sort first.
    assert_eq!(v["scan"]["findings"][0]["severity"], "warn");
}

const SECRETS: &[&str] = &[
    "PLANTED-argv-token",
    "PLANTED-argv-apikey",
    "PLANTEDpw",
    "hf_PLANTEDargvtoken123",
    "hf_PLANTEDenvtoken456",
    "PLANTED-env-key",
    "PLANTED-env-password",
];

fn assert_no_secret(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for s in SECRETS {
        assert!(!text.contains(s), "secret {s} leaked into {what}:\n{text}");
    }
}

#[test]
fn planted_secrets_reach_no_output() {
    let b = fresh_box("2x24GiB");
    let h = Holder::start(
        b.path(),
        &[
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("HF_TOKEN", "hf_PLANTEDenvtoken456"),
            ("CUDA_API_KEY", "PLANTED-env-key"),
            ("DB_PASSWORD", "PLANTED-env-password"),
        ],
        &[
            "--device",
            "0",
            "--size",
            "1GiB",
            "--",
            "python",
            "serve.py",
            "--token=PLANTED-argv-token",
            "--api-key",
            "PLANTED-argv-apikey",
            "https://bob:PLANTEDpw@hub.example.org/models",
            "HF_TOKEN=hf_PLANTEDargvtoken123",
            "--model",
            "qwen2.5-7b",
        ],
    );
    // The table.
    let out = run(scan_cmd(b.path(), &[]));
    assert!(out.status.success());
    assert_no_secret("table", &out.stdout);
    assert_no_secret("stderr", &out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("«redacted»"), "{table}");
    // JSON, and the harmless arguments survive.
    let v = scan_json(b.path());
    let json = serde_json::to_vec(&v).unwrap();
    assert_no_secret("json", &json);
    let cmd = process(&v, h.pid)["cmdline"].as_str().unwrap().to_string();
    assert!(cmd.contains("--model qwen2.5-7b"), "{cmd}");
    assert!(cmd.contains("hub.example.org/models"), "{cmd}");
    assert!(cmd.contains("--token=«redacted»"), "{cmd}");
    // A report file through the one writer.
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("scan.json");
    let out = run(scan_cmd(b.path(), &["--out", file.to_str().unwrap()]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_secret("--out file", &std::fs::read(&file).unwrap());
    // Markdown on stdout, and Markdown and HTML files.
    let out = run(scan_cmd(b.path(), &["--markdown"]));
    assert_ok(&out, "scan");
    assert_no_secret("markdown", &out.stdout);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&h.pid.to_string()));
    for name in ["scan.md", "scan.html"] {
        let f = out_dir.path().join(name);
        let out = run(scan_cmd(b.path(), &["--out", f.to_str().unwrap()]));
        assert_ok(&out, "scan");
        let bytes = std::fs::read(&f).unwrap();
        assert!(String::from_utf8_lossy(&bytes).contains(&h.pid.to_string()));
        assert_no_secret(name, &bytes);
    }
}

#[test]
fn out_file_is_the_json_report_and_is_not_overwritten() {
    let b = fresh_box("1x16GiB");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.json");
    let out = run(scan_cmd(b.path(), &["--out", file.to_str().unwrap()]));
    assert_ok(&out, "scan");
    let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(v["kind"], "scan");
    assert_eq!(v["scan"]["devices"][0]["memory"]["total"], 16 * GIB);
    // Exists: refuse (exit 2, one line naming --force); with --force: replace.
    let out = run(scan_cmd(b.path(), &["--out", file.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--force"), "{err}");
    let out = run(scan_cmd(
        b.path(),
        &["--out", file.to_str().unwrap(), "--force"],
    ));
    assert_eq!(out.status.code(), Some(0));
    // Unknown extension: usage error.
    let bad = dir.path().join("r.txt");
    assert_eq!(
        run(scan_cmd(b.path(), &["--out", bad.to_str().unwrap()]))
            .status
            .code(),
        Some(2)
    );
}

/// `--out r.csv` (the format added after the output sink, issue 33): one row per finding of
/// the report written beside it, in the JSON's order, with its id, severity, GPUs and PID.
#[test]
fn csv_out_has_a_row_per_finding() {
    let b = fresh_box("2x24GiB");
    let h = Holder::start(
        b.path(),
        &[("CUDA_VISIBLE_DEVICES", "1")],
        &["--device", "0", "--size", "8GiB", "--physical-context", "0"],
    );
    let dir = tempfile::tempdir().unwrap();
    let (csv, json) = (dir.path().join("r.csv"), dir.path().join("r.json"));
    let out = run(scan_cmd(
        b.path(),
        &[
            "--out",
            csv.to_str().unwrap(),
            "--out",
            json.to_str().unwrap(),
        ],
    ));
    assert_ok(&out, "scan");
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let text = String::from_utf8(std::fs::read(&csv).unwrap()).unwrap();
    let rows: Vec<&str> = text.split_terminator("\r\n").collect();
    assert_eq!(rows[0], "source,id,severity,devices,pid,title");
    let want = v["scan"]["findings"].as_array().unwrap();
    assert_eq!(rows.len(), want.len() + 1, "{text}");
    let stray = format!("scan,stray-context,warn,0,{},", h.pid);
    assert!(rows.iter().any(|r| r.starts_with(&stray)), "{text}");
    for (row, f) in rows[1..].iter().zip(want) {
        let id = f["id"].as_str().unwrap();
        assert!(row.starts_with(&format!("scan,{id},")), "{row} vs {f}");
    }
}

#[test]
fn table_lines_fit_100_columns() {
    let b = fresh_box("h100,rtx3090");
    let _h = Holder::start(
        b.path(),
        &[("CUDA_VISIBLE_DEVICES", "1,0")],
        &[
            "--device",
            "0",
            "--size",
            "20GiB",
            "--context-on",
            "1",
            "--",
            &"x".repeat(250),
        ],
    );
    let out = run(scan_cmd(b.path(), &[]));
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("stray-context"), "{text}");
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
}

mod environment_and_usage_errors_have_documented_codes {
    use super::*;

    /// No box: environment (3), one line.
    #[test]
    fn no_box_is_3() {
        let out = run({
            let mut c = vramdoc();
            c.args(["--backend", "sim", "scan"]);
            c
        });
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    /// Bad VRAMDOC_PIDNS: usage (2).
    #[test]
    fn bad_pidns_is_2() {
        let b = fresh_box("1x16GiB");
        let out = run({
            let mut c = scan_cmd(b.path(), &[]);
            c.env("VRAMDOC_PIDNS", "sideways");
            c
        });
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("VRAMDOC_PIDNS"), "{err}");
    }

    /// Bad --fail-on level: usage (2, clap).
    #[test]
    fn bad_fail_on_level_is_2() {
        let b = fresh_box("1x16GiB");
        assert_eq!(fail_on(b.path(), "fatal"), Some(2));
    }
}

#[test]
fn missing_nvml_library_is_an_environment_error() {
    let empty = tempfile::tempdir().unwrap();
    let b = fresh_box("1x16GiB");
    let out = run({
        let mut c = vramdoc();
        c.env("LD_LIBRARY_PATH", empty.path())
            .env("VRAMDOC_SIM_DIR", b.path())
            .args(["--backend", "real", "scan"]);
        c
    });
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
}

/// Remove what legitimately differs between backends: timestamps, the command line, the
/// backend name and the sim spec (only the in-process backend knows it).
fn normalise(mut v: Value) -> Value {
    let o = v.as_object_mut().expect("report object");
    o.remove("created_unix_ms");
    o.remove("command");
    if let Some(env) = o.get_mut("environment").and_then(Value::as_object_mut) {
        env.remove("backend");
        env.remove("sim_spec");
    }
    v
}

// NOTE: needs the NVML backend (src/gpu/nvml.rs) and crates/simgpu's NVML side, written by
// another helper in parallel: this test fails in the scan worktree until the lead merges.
#[test]
fn real_nvml_backend_over_simgpu_matches_sim_backend() {
    let lib = common::simgpu_lib_dir();
    let b = fresh_box("2x24GiB");
    let _n = Holder::start(b.path(), &[], &["--device", "0", "--size", "3GiB"]);
    let _s = Holder::start(
        b.path(),
        &[("CUDA_VISIBLE_DEVICES", "1,0")],
        &["--device", "0", "--size", "5GiB", "--context-on", "1"],
    );
    let sim = {
        let mut c = scan_cmd(b.path(), &["--json"]);
        c.args(["--backend", "sim"]);
        run(c)
    };
    let real = {
        let mut c = scan_cmd(b.path(), &["--json"]);
        c.args(["--backend", "real"]).env("LD_LIBRARY_PATH", lib);
        run(c)
    };
    let sim = json_ok(&sim, "sim");
    let real = json_ok(&real, "real");
    assert_eq!(real["environment"]["backend"], "nvml");
    assert_eq!(sim["environment"]["backend"], "sim");
    assert!(!findings(&sim, "stray-context").is_empty());
    assert_eq!(normalise(sim), normalise(real));
}

#[test]
fn duplicate_copy_on_a_live_process() {
    // A live process (a `sleep`) with a 10 GiB and a 10.5 GiB footprint, written straight
    // into the box state: `sim hold` allocates on one device only.
    use vramdoc_sim::{procinfo, DeviceUsage, ProcessEntry, SimBox};
    let b = fresh_box("2x24GiB");
    let mut sleeper = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn sleep");
    let pid = sleeper.id();
    let sim = SimBox::open(b.path()).unwrap();
    sim.update(|st, _| {
        let usage = |alloc: u64| DeviceUsage {
            contexts: 1,
            context_bytes: CTX,
            allocations: 1,
            alloc_bytes: alloc,
            ..DeviceUsage::default()
        };
        st.processes.insert(
            pid,
            ProcessEntry {
                start_time: procinfo::start_time(pid).unwrap_or(0),
                name: "sleep".into(),
                devices: [(0, usage(10 * GIB)), (1, usage(10 * GIB + 512 * MIB))]
                    .into_iter()
                    .collect(),
                ..Default::default()
            },
        );
        Ok(())
    })
    .unwrap();
    let v = scan_json(b.path());
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let f = findings(&v, "duplicate-copy");
    assert_eq!(f.len(), 1, "{:?}", all_ids(&v));
    assert_eq!(f[0]["severity"], "info");
    assert_eq!(f[0]["pid"], pid);
    assert_eq!(f[0]["devices"], serde_json::json!([0, 1]));
    assert_eq!(evidence_bytes(f[0], "used on GPU 0"), Some(10 * GIB + CTX));
    assert_eq!(
        evidence_bytes(f[0], "used on GPU 1"),
        Some(10 * GIB + 512 * MIB + CTX)
    );
    assert_eq!(
        evidence_bytes(f[0], "total across"),
        Some(20 * GIB + 512 * MIB + 2 * CTX)
    );
    // Once the process is gone the driver returns its memory: nothing left to report.
    let v = scan_json(b.path());
    assert!(all_ids(&v).is_empty(), "{:?}", all_ids(&v));
}

/// A scan with findings writes JSON, Markdown and HTML from one run: the JSON validates
/// against the checked-in schema, `vramdoc report --format md` of it equals the Markdown
/// written directly, and `--markdown` on stdout carries the same findings.
#[test]
fn scan_report_round_trip_and_schema() {
    let b = fresh_box("2x16GiB");
    let _neighbour = Holder::start(b.path(), &[], &["--device", "0", "--size", "14GiB"]);
    let _stray = Holder::start(
        b.path(),
        &[("CUDA_VISIBLE_DEVICES", "1")],
        &["--device", "0", "--size", "1GiB", "--physical-context", "0"],
    );
    let dir = tempfile::tempdir().unwrap();
    let (json, md, html) = (
        dir.path().join("s.json"),
        dir.path().join("s.md"),
        dir.path().join("s.html"),
    );
    let out = run({
        let mut c = scan_cmd(b.path(), &["--out"]);
        c.arg(&json).arg("--out").arg(&md).arg("--out").arg(&html);
        c
    });
    assert_ok(&out, "scan");
    let text = std::fs::read_to_string(&json).unwrap();
    common::reports::assert_valid_report_json(&text);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(!findings(&v, "stray-context").is_empty(), "{text}");
    let again = run({
        let mut c = vramdoc();
        c.arg("report").arg(&json).args(["--format", "md"]);
        c
    });
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let direct = std::fs::read_to_string(&md).unwrap();
    assert_eq!(String::from_utf8(again.stdout).unwrap(), direct);
    assert!(
        direct.contains("stray-context") && direct.contains("Headroom"),
        "{direct}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("stray-context") && page.starts_with("<!DOCTYPE html>"));
    let stdout_md = run(scan_cmd(b.path(), &["--markdown"]));
    assert_eq!(stdout_md.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&stdout_md.stdout).contains("stray-context"));
}

/// A non-UTF-8 argument (here an --out file name) is no reason to panic: the report's
/// command line shows it escaped (`r\xff.json`, issue 19), nothing replaced or dropped.
#[test]
fn non_utf8_argument_does_not_panic() {
    use std::os::unix::ffi::OsStrExt;
    let b = fresh_box("1x16GiB");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(std::ffi::OsStr::from_bytes(b"r\xff.json"));
    let out = run({
        let mut c = scan_cmd(b.path(), &["--out"]);
        c.arg(&file);
        c
    });
    assert_ok(&out, "scan");
    let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(v["command"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a.as_str().unwrap().ends_with("r\\xff.json")));
}

/// One bad GPU never ends a scan: a lost device and one we may not query each get a status
/// and a `device-unavailable` finding; the good device is still reported, with its holder.
/// The NVML backend over crates/simgpu says the same as the in-process simulator.
#[test]
fn bad_gpus_get_a_status_and_a_finding_and_the_others_are_reported() {
    use vramdoc_sim::{Faults, SimBox};
    let lib = common::simgpu_lib_dir();
    let b = fresh_box("3x24GiB");
    let h = Holder::start(b.path(), &[], &["--device", "2", "--size", "3GiB"]);
    let sim = SimBox::open(b.path()).unwrap();
    sim.set_faults(&Faults {
        lost_devices: vec![0],
        no_permission_devices: vec![1],
        ..Faults::default()
    })
    .unwrap();
    let mut reports = Vec::new();
    for backend in ["sim", "real"] {
        let mut c = scan_cmd(b.path(), &["--json"]);
        c.args(["--backend", backend]).env("LD_LIBRARY_PATH", lib);
        let v = json_ok(&run(c), backend);
        let devices = v["scan"]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 3, "{backend}");
        assert_eq!(devices[0]["status"], "lost", "{backend}");
        assert_eq!(devices[1]["status"], "no-permission", "{backend}");
        assert_eq!(devices[2]["status"], "ok", "{backend}");
        let lost = findings(&v, "gpu-lost");
        assert_eq!(lost.len(), 1, "{backend}: {v}");
        assert_eq!(lost[0]["severity"], "error");
        assert_eq!(lost[0]["devices"], serde_json::json!([0]));
        let bad = findings(&v, "device-unavailable");
        assert_eq!(bad.len(), 1, "{backend}: {v}");
        assert_eq!(bad[0]["severity"], "warn");
        assert_eq!(bad[0]["devices"], serde_json::json!([1]));
        assert_eq!(process(&v, h.pid)["devices"][0]["device"], 2);
        assert!(used_on(process(&v, h.pid), 2).unwrap() >= 3 << 30);
        // Zeroed memory of a bad device is never read as an over-full one.
        for f in findings(&v, "low-headroom") {
            assert_eq!(f["devices"], serde_json::json!([2]), "{backend}: {f}");
        }
        let summary: Vec<(Value, Value)> = v["scan"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["id"].clone(), f["devices"].clone()))
            .collect();
        reports.push((summary, v["scan"]["processes"].clone()));
    }
    // Both backends find the same things. (A lost device's name and UUID may be missing
    // on the NVML path, as on a real driver; they are not compared.)
    assert_eq!(reports[0], reports[1]);
    // The table shows it too.
    let out = run(scan_cmd(b.path(), &[]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("device-unavailable"), "{text}");
    assert!(text.contains("LOST"), "{text}");
}

/// A descriptor alone keeps nothing: a process holding the box's device file open with no
/// CUDA context mapped (what every NVML monitor holds) is not named by `no-live-owner` as
/// the holder; it is listed as not one, and the exited PID is the finding's (a forked child
/// with a context is named: `forked_child_keeping_memory_is_named_by_no_live_owner`).
#[test]
fn no_live_owner_does_not_name_a_process_holding_only_a_descriptor() {
    use vramdoc_sim::SimBox;
    let b = fresh_box("24GiB");
    sim_fault(b.path(), &["--keep-dead"]);
    let h = Holder::start(b.path(), &[], &["--device", "0", "--size", "2GiB"]);
    let node = SimBox::open(b.path()).unwrap().device_nodes()[0].clone();
    if !node.exists() {
        std::fs::create_dir_all(node.parent().unwrap()).unwrap();
        std::fs::write(&node, b"").unwrap();
    }
    // A process holding the device file open, mapping none of the files.
    let mut child = Command::new("sleep")
        .arg("30")
        .stdin(std::fs::File::open(&node).unwrap())
        .spawn()
        .unwrap();
    // Wait until it has exec'd (its name is `sleep`).
    let comm = format!("/proc/{}/comm", child.id());
    eventually(
        SECS_10,
        "the descriptor-holding child has exec'd sleep",
        || std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep"),
    );
    let dead = h.kill();
    let v = scan_json(b.path());
    child.kill().unwrap();
    child.wait().unwrap();
    let f = findings(&v, "no-live-owner");
    assert_eq!(f.len(), 1, "{v}");
    let title = f[0]["title"].as_str().unwrap();
    assert!(!title.contains("held open by"), "{title}");
    assert_eq!(f[0]["pid"], dead, "{v}");
    let ev = f[0]["evidence"].as_array().unwrap();
    assert!(ev.iter().any(|e| e["label"]
        .as_str()
        .unwrap()
        .starts_with(&format!("PID {dead} listed by NVML"))));
    assert!(
        ev.iter().any(|e| e["label"]
            .as_str()
            .unwrap()
            .contains("no CUDA context mapped")
            && e["value"]
                .as_str()
                .unwrap()
                .contains(&format!("PID {} (sleep)", child.id()))),
        "{ev:?}"
    );
}

/// A process forked from a CUDA process keeps its parent's memory through the inherited
/// device descriptors (`sim hold --fork-child`): after the parent is gone, NVML still lists
/// it and `no-live-owner` names the child that holds the device files open. On the NVML
/// backend over crates/simgpu too.
#[test]
fn forked_child_keeping_memory_is_named_by_no_live_owner() {
    let lib = common::simgpu_lib_dir();
    let b = fresh_box("2x24GiB");
    let holder = Holder::start(b.path(), &[], &["--size", "1GiB", "--fork-child"]);
    let child = holder
        .field("child")
        .unwrap_or_else(|| panic!("no child= in {:?}", holder.line));
    let parent = holder.kill();
    for backend in ["sim", "real"] {
        let mut c = scan_cmd(b.path(), &["--json"]);
        c.args(["--backend", backend]).env("LD_LIBRARY_PATH", lib);
        let out = run(c);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let f = findings(&v, "no-live-owner");
        assert_eq!(f.len(), 1, "{backend}: {v}");
        assert!(
            f[0]["title"]
                .as_str()
                .unwrap()
                .contains(&format!("held open by PID {child}")),
            "{backend}: {}",
            f[0]["title"]
        );
        assert_eq!(f[0]["pid"], parent, "{backend}: the exited PID");
    }
    // SAFETY: kill(2) on the PID of the child this test staged; no memory is touched.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
}

/// Graphics clients are owners: an Xorg-like client listed only in NVML's graphics list is
/// not "memory with no live owner". A container process using its one mounted GPU
/// (`vramdoc sim run --gpus 1`: NVIDIA_VISIBLE_DEVICES names host GPU 1, CUDA sees it as 0)
/// is not a stray context.
#[test]
fn graphics_clients_and_container_gpus_raise_no_false_alarm() {
    let lib = common::simgpu_lib_dir();
    let b = fresh_box("2x24GiB");
    let x = Holder::start(b.path(), &[], &["--graphics", "--size", "200MiB"]);
    // A container of the box's runtime given GPU 1 (its NVIDIA_VISIBLE_DEVICES names it).
    let mut cmd = common::vramdoc();
    cmd.env("VRAMDOC_SIM_DIR", b.path())
        .args(["sim", "run", "--gpus", "1", "--"])
        .arg(env!("CARGO_BIN_EXE_vramdoc"))
        .args(["sim", "hold", "--size", "1GiB"]);
    let c = Holder::spawn(cmd);
    for backend in ["sim", "real"] {
        let mut cmd = scan_cmd(b.path(), &["--json"]);
        cmd.args(["--backend", backend]).env("LD_LIBRARY_PATH", lib);
        let v = json_ok(&run(cmd), backend);
        assert!(used_on(process(&v, x.pid), 0).is_some(), "{backend}: {v}");
        assert!(
            used_on(process(&v, c.pid), 1).unwrap() >= 1 << 30,
            "{backend}"
        );
        // GPU 1 (1 GiB and a context held) has room for a vLLM engine at 0.91, not at
        // vLLM's default 0.92: that info is the one finding (issue 37 item 8).
        let ids: Vec<String> = all_ids(&v)
            .into_iter()
            .filter(|id| id != "low-headroom")
            .collect();
        assert_eq!(ids, Vec::<String>::new(), "{backend}: {v}");
        let infos_only = v["scan"]["findings"]
            .as_array()
            .is_some_and(|f| f.iter().all(|f| f["severity"] == "info"));
        assert!(infos_only, "{backend}: {v}");
    }
}
