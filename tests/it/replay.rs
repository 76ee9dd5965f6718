//! `vramdoc replay` and `vramdoc list` end to end: every built-in scenario and variant on
//! simulated boxes (a 16 GiB and a 141 GiB card), the real backends over crates/simgpu, a
//! worker killed mid-step, Ctrl-C, malformed scenario files, skipping.

use crate::common;

use common::hold::Holder;
use common::{fresh_box, scenarios, simgpu_lib_dir, vramdoc};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vramdoc::units::MIB;

const CONTEXT: u64 = 448 * MIB;

/// Run a replay with --json on the box in `dir`; returns (exit code, report).
fn replay_json(dir: &Path, args: &[&str]) -> (i32, Value) {
    let out = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir)
        .arg("replay")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

fn run<'a>(report: &'a Value, scenario: &str, variant: &str) -> &'a Value {
    report["replay"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["scenario"] == scenario && r["variant"] == variant)
        .unwrap_or_else(|| panic!("no run {scenario}/{variant}"))
}

fn step<'a>(run: &'a Value, id: &str) -> &'a Value {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no step {id}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn total(report: &Value, device: usize) -> u64 {
    u(&report["environment"]["devices"][device]["memory"]["total"])
}

fn max_worker_on(run: &Value, device: usize) -> u64 {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["worker_after"].get(device).and_then(Value::as_u64))
        .max()
        .unwrap_or(0)
}

fn assert_verdict(run: &Value, verdict: &str) {
    assert_eq!(
        run["verdict"],
        verdict,
        "{}",
        serde_json::to_string_pretty(&run["checks"]).unwrap()
    );
}

fn frac(bytes: u64, total: u64) -> f64 {
    bytes as f64 / total as f64
}

/// Every variant of `scenario` (it has `variants`) on a fresh `spec` box, sampled every
/// 1 ms: all behave as expected (exit 0), and the box is empty afterwards. Returns the
/// report and the total of GPU 0.
fn replay_every_variant(spec: &str, scenario: &str, variants: usize) -> (Value, u64) {
    let dir = fresh_box(spec);
    let (code, r) = replay_json(dir.path(), &[scenario, "--period", "1ms"]);
    assert_eq!(
        code, 0,
        "every variant of {scenario} behaves as expected on {spec}"
    );
    assert_eq!(r["replay"]["runs"].as_array().unwrap().len(), variants);
    assert_eq!(r["replay"]["period_us"], 1000);
    let sim = vramdoc_sim::SimBox::open(dir.path()).unwrap();
    for d in 0..2 {
        assert_eq!(
            sim.memory(d).unwrap().used,
            0,
            "GPU {d} is empty after the replays of {scenario}"
        );
    }
    let t0 = total(&r, 0);
    (r, t0)
}

/// stray-cuda0: the bug holds about one context (plus the warm-up workspace) on physical
/// GPU 0; with CUDA_VISIBLE_DEVICES=1 nothing.
fn stray_cuda0_on(spec: &str) {
    let (r, t0) = replay_every_variant(spec, "stray-cuda0", 2);
    let bug = run(&r, "stray-cuda0", "bug");
    assert_verdict(bug, "reproduced");
    let on0 = max_worker_on(bug, 0);
    assert!(
        (CONTEXT..=CONTEXT + 130 * MIB).contains(&on0),
        "worker on GPU 0: {on0}"
    );
    let fix = run(&r, "stray-cuda0", "fix-visible-devices");
    assert_verdict(fix, "fixed");
    assert_eq!(max_worker_on(fix, 0), 0);
    assert!(frac(max_worker_on(fix, 1), total(&r, 1)) >= 0.25);
    // The neighbour really holds 40 % of GPU 0 in both: used on GPU 0 at the end of the
    // first step is at least that.
    assert!(frac(u(&step(fix, "model-to-cuda1")["used_after"][0]), t0) >= 0.40);
}

/// multi-size-oom: OOM at the second size; largest-first never grows after the first size.
fn multi_size_oom_on(spec: &str) {
    let (r, t0) = replay_every_variant(spec, "multi-size-oom", 3);
    let bug = run(&r, "multi-size-oom", "bug");
    assert_verdict(bug, "reproduced");
    assert_eq!(bug["error"]["kind"], "out-of-memory");
    assert_eq!(bug["error"]["step_label"], "tune-1024x1152");
    let fix = run(&r, "multi-size-oom", "fix-largest-first");
    assert_verdict(fix, "fixed");
    assert!(fix["error"].is_null());
    let first = u(&step(fix, "tune-1536x1536")["held_after"]);
    let last = u(&step(fix, "done-1024x1024")["held_after"]);
    assert_eq!(
        first, last,
        "the first, largest block serves every later size"
    );
    assert!(
        (frac(first, t0) - 0.885).abs() < 0.01,
        "weights + largest workspace: {first}"
    );
    let fix = run(&r, "multi-size-oom", "fix-no-tuning-warmup");
    assert_verdict(fix, "fixed");
    assert!(frac(u(&fix["peaks"][0]["peak_used"]), t0) < 0.80);
}

/// sharded-release: residual after release roughly equal on every GPU; fix: one context.
fn sharded_release_on(spec: &str) {
    let (r, t0) = replay_every_variant(spec, "sharded-release", 2);
    let bug = run(&r, "sharded-release", "bug");
    assert_verdict(bug, "reproduced");
    let rel = step(bug, "release");
    let (a, b) = (u(&rel["used_after"][0]), u(&rel["used_after"][1]));
    assert!(a.abs_diff(b) <= 4 * MIB, "equal residual: {a} vs {b}");
    assert!(frac(a, t0) >= 0.33, "shard + buffers stay: {a}");
    assert_eq!(bug["error"]["step_label"], "load-next-0");
    let fix = run(&r, "sharded-release", "fix-destroy-process-group");
    assert_verdict(fix, "fixed");
    let rel = step(fix, "release");
    for d in 0..2 {
        assert!(
            u(&rel["used_after"][d]) <= CONTEXT,
            "GPU {d} keeps at most a context"
        );
    }
}

/// double-load: footprint about twice the model (58 %), then OOM at inference.
fn double_load_on(spec: &str) {
    let (r, t0) = replay_every_variant(spec, "double-load", 2);
    let bug = run(&r, "double-load", "bug");
    assert_verdict(bug, "reproduced");
    let fp = frac(u(&step(bug, "load-auto-1")["held_after"]), t0);
    assert!((fp - 1.16).abs() < 0.01, "footprint {fp}");
    assert_eq!(bug["error"]["step_label"], "inference");
    let fix = run(&r, "double-load", "fix-single-load");
    assert_verdict(fix, "fixed");
    let fp = frac(u(&step(fix, "load-auto-1")["held_after"]), t0);
    assert!((fp - 0.58).abs() < 0.01, "footprint {fp}");
}

/// overcommit: 0.9 fills the card, then dynamic work fails; 0.5 completes.
fn overcommit_on(spec: &str) {
    let (r, t0) = replay_every_variant(spec, "overcommit", 2);
    let bug = run(&r, "overcommit", "bug");
    assert_verdict(bug, "reproduced");
    let claimed = u(&step(bug, "kv-cache")["bytes"]);
    assert!(
        (frac(claimed, t0) - (0.90 - 0.37)).abs() < 0.01,
        "KV cache claim {claimed}"
    );
    assert!(frac(u(&bug["peaks"][0]["peak_used"]), t0) >= 0.90);
    let failed = bug["error"]["step_label"].as_str().unwrap();
    assert!(
        ["cuda-graph-capture", "generate"].contains(&failed),
        "failed at {failed}"
    );
    let fix = run(&r, "overcommit", "fix-utilization-0.5");
    assert_verdict(fix, "fixed");
    assert!(frac(u(&fix["peaks"][0]["peak_used"]), t0) <= 0.80);
}

/// One test per built-in scenario on a box of `spec`: verdicts and key numbers.
macro_rules! every_scenario_and_variant_on {
    ($name:ident, $spec:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn stray_cuda0() {
                stray_cuda0_on($spec);
            }

            #[test]
            fn multi_size_oom() {
                multi_size_oom_on($spec);
            }

            #[test]
            fn sharded_release() {
                sharded_release_on($spec);
            }

            #[test]
            fn double_load() {
                double_load_on($spec);
            }

            #[test]
            fn overcommit() {
                overcommit_on($spec);
            }
        }
    };
}

every_scenario_and_variant_on!(every_scenario_and_variant_on_a_16gib_box, "2xt4");
every_scenario_and_variant_on!(every_scenario_and_variant_on_a_141gib_box, "2xh200");

#[test]
fn timeline_has_samples_markers_and_step_peaks() {
    let dir = fresh_box("2x16GiB");
    let (_, r) = replay_json(
        dir.path(),
        &["multi-size-oom", "--variant", "bug", "--period", "1ms"],
    );
    let bug = run(&r, "multi-size-oom", "bug");
    let series = &bug["timeline"]["devices"][0]["samples"];
    assert!(series.as_array().unwrap().len() >= 10);
    let kinds: Vec<&str> = bug["timeline"]["markers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"step") && kinds.contains(&"oom") && kinds.contains(&"end"));
    let load = step(bug, "load");
    assert!(frac(u(&load["peak_used"][0]), total(&r, 0)) >= 0.50);
    assert!(bug["worker_pid"].as_u64().unwrap() > 0);
}

#[test]
fn summary_table_fits_100_columns() {
    let dir = fresh_box("2xt4");
    let out = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .args(["replay", "sharded-release", "double-load"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("reproduced") && text.contains("fixed"),
        "{text}"
    );
    assert!(text.contains("OOM at load-next-0"), "{text}");
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "too wide: {line}");
    }
}

#[test]
fn list_shows_every_scenario_with_devices() {
    let out = vramdoc().args(["list", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "stray-cuda0",
            "multi-size-oom",
            "sharded-release",
            "double-load",
            "overcommit"
        ]
    );
    let stray = &v[0];
    assert_eq!(stray["devices"], 2);
    assert!(stray["source"].as_str().unwrap().contains("OneDiff"));
    let out = vramdoc().arg("list").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fix-largest-first") && text.contains("overcommit"));
    assert!(text.lines().all(|l| l.chars().count() <= 100));
}

#[test]
fn scenario_needing_more_gpus_is_skipped_unless_required() {
    let dir = fresh_box("t4");
    let (code, r) = replay_json(dir.path(), &["stray-cuda0", "overcommit"]);
    assert_eq!(code, 0, "{r:#}");
    let s = run(&r, "stray-cuda0", "bug");
    assert_eq!(s["verdict"], "skipped");
    assert!(s["reason"].as_str().unwrap().contains("needs 2 GPUs"));
    assert_verdict(run(&r, "overcommit", "bug"), "reproduced");
    let (code, _) = replay_json(dir.path(), &["stray-cuda0", "--require"]);
    assert_eq!(code, 1);
}

#[test]
fn variant_filter_and_unknown_variant() {
    let dir = fresh_box("2xt4");
    let (code, r) = replay_json(
        dir.path(),
        &["stray-cuda0", "--variant", "fix-visible-devices"],
    );
    assert_eq!(code, 0);
    assert_eq!(r["replay"]["runs"].as_array().unwrap().len(), 1);
    let out = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .args(["replay", "stray-cuda0", "--variant", "fix-nothing"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no variant \"fix-nothing\""));
}

#[test]
fn unexpected_behaviour_exits_1() {
    // A "fix" whose expectation cannot hold: the worker does allocate on GPU 0.
    let dir = fresh_box("2xt4");
    let file = scenarios::write(dir.path(), "wrong.toml", scenarios::WRONG_FIX);
    let (code, r) = replay_json(dir.path(), &[file.to_str().unwrap()]);
    assert_eq!(code, 1);
    let w = run(&r, "wrong", "fix-claims-nothing");
    assert_eq!(w["verdict"], "unexpected");
    assert_eq!(w["checks"][0]["passed"], false);
}

#[test]
fn no_box_is_an_environment_error() {
    let out = vramdoc()
        .args(["--backend", "sim", "replay", "overcommit"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// Malformed scenario files: one per error class, each `file:line:col: ...`, exit 2.

const GOOD: &str = r#"id = "t"
title = "T"
description = "d"
source = "s"
devices = 2

[[steps]]
id = "ctx"
op = "context"
device = 1

[[steps]]
id = "load"
op = "alloc"
tag = "w"
device = 1
size = "30%"

[[variants]]
name = "bug"
[[variants.expect]]
check = "completes"
"#;

fn bad_file(text: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = scenarios::write(dir.path(), "bad.toml", text);
    let out = vramdoc()
        .args(["--sim", "2x16GiB", "replay", path.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
        path.to_str().unwrap().to_string(),
    )
}

fn assert_bad(text: &str, line: usize, col: Option<usize>, needle: &str) {
    let (code, err, path) = bad_file(text);
    assert_eq!(code, 2, "{err}");
    let prefix = match col {
        Some(c) => format!("error: {path}:{line}:{c}: "),
        None => format!("error: {path}:{line}:"),
    };
    assert!(err.starts_with(&prefix), "want {prefix:?} in {err}");
    assert!(err.contains(needle), "want {needle:?} in {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}

#[test]
fn good_file_runs() {
    let (code, err, _) = bad_file(GOOD);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn malformed_unknown_op() {
    assert_bad(
        &GOOD.replace("op = \"context\"", "op = \"contxt\""),
        9,
        Some(6),
        "unknown op \"contxt\"",
    );
}

#[test]
fn malformed_size_over_100_percent() {
    assert_bad(
        &GOOD.replace("\"30%\"", "\"130%\""),
        17,
        Some(8),
        "over 100 %",
    );
}

#[test]
fn malformed_missing_field() {
    assert_bad(
        &GOOD.replace("size = \"30%\"\n", ""),
        12,
        None,
        "missing field `size`",
    );
    assert_bad(
        &GOOD.replace("source = \"s\"\n", ""),
        1,
        None,
        "missing field `source`",
    );
}

#[test]
fn malformed_wrong_type() {
    assert_bad(
        &GOOD.replace("devices = 2", "devices = \"two\""),
        5,
        Some(11),
        "invalid type",
    );
    assert_bad(
        &GOOD.replace("device = 1\nsize", "device = \"one\"\nsize"),
        16,
        Some(10),
        "invalid type",
    );
}

#[test]
fn malformed_unknown_device() {
    assert_bad(
        &GOOD.replace("device = 1\n\n", "device = 5\n\n"),
        10,
        Some(10),
        "unknown device 5",
    );
}

#[test]
fn malformed_unknown_variant_reference() {
    assert_bad(
        &GOOD.replace("device = 1\n\n", "device = 1\nonly = [\"fix-z\"]\n\n"),
        11,
        Some(9),
        "unknown variant \"fix-z\"",
    );
    assert_bad(
        &GOOD.replace("name = \"bug\"\n", "name = \"bug\"\nskip = [\"lod\"]\n"),
        21,
        Some(9),
        "unknown step \"lod\"",
    );
}

#[test]
fn malformed_toml_syntax() {
    assert_bad(&GOOD.replace("devices = 2", "devices = = 2"), 5, None, "");
}

// ---------------------------------------------------------------------------------------
// Kill and Ctrl-C.

const LONG_PAUSE: &str = r#"id = "long"
title = "Long"
description = "holds memory, then waits"
source = "test"
devices = 1
[[steps]]
id = "load"
op = "alloc"
tag = "w"
device = 0
size = "20%"
[[steps]]
id = "wait"
op = "pause"
duration = "30s"
[[variants]]
name = "bug"
[[variants.expect]]
check = "completes"
"#;

/// Start a replay of LONG_PAUSE on `dir`'s box; return the child and the worker's PID once
/// the worker holds its memory and is inside the `wait` step (sleeping: it announced the
/// step before it started it, so a kill from now on lands in `wait`).
fn start_long(dir: &Path, out: &Path) -> (std::process::Child, u32) {
    let file = scenarios::write(dir, "long.toml", LONG_PAUSE);
    let mut child = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir)
        .args([
            "replay",
            file.to_str().unwrap(),
            "--json",
            "--out",
            out.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let pid = loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "replay ended before a worker started"
        );
        if let Some(p) = line.trim().strip_prefix("replay long/bug: worker pid ") {
            break p.parse::<u32>().unwrap();
        }
    };
    // Keep draining stderr so the replay never blocks on it.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {}
    });
    let sim = vramdoc_sim::SimBox::open(dir).unwrap();
    common::poll::eventually(Duration::from_secs(20), "the worker to allocate", || {
        let mine = sim.processes(0).unwrap().into_iter().find(|p| p.pid == pid);
        mine.is_some_and(|p| p.used > CONTEXT)
    });
    common::poll::eventually(
        common::poll::SECS_10,
        "the worker to sleep in its `wait` step",
        || common::sleeping(pid),
    );
    (child, pid)
}

fn box_is_empty(dir: &Path) {
    let sim = vramdoc_sim::SimBox::open(dir).unwrap();
    assert_eq!(
        sim.memory(0).unwrap().used,
        0,
        "the box holds nothing afterwards"
    );
    assert!(sim.processes(0).unwrap().is_empty());
}

#[test]
fn worker_killed_mid_step_is_reported_and_its_memory_returned() {
    let dir = fresh_box("t4");
    let out = dir.path().join("killed.json");
    let (child, pid) = start_long(dir.path(), &out);
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(1),
        "a killed worker is unexpected"
    );
    let r: Value = serde_json::from_slice(&output.stdout).unwrap();
    let run = run(&r, "long", "bug");
    assert_eq!(run["verdict"], "unexpected");
    assert_eq!(run["error"]["kind"], "killed");
    assert_eq!(run["error"]["step_label"], "wait");
    assert!(run["error"]["message"]
        .as_str()
        .unwrap()
        .contains("signal 9"));
    assert_eq!(step(run, "wait")["status"], "killed");
    assert_eq!(u(&run["worker_pid"]), pid as u64);
    box_is_empty(dir.path());
    let saved: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(saved["replay"]["runs"][0]["error"]["kind"], "killed");
}

#[test]
fn ctrl_c_stops_the_worker_and_writes_partial_results() {
    let dir = fresh_box("t4");
    let out = dir.path().join("partial.json");
    let (child, _pid) = start_long(dir.path(), &out);
    let started = Instant::now();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped promptly, not after the pause"
    );
    assert_eq!(output.status.code(), Some(1));
    let saved: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let run = &saved["replay"]["runs"][0];
    assert_eq!(run["error"]["kind"], "interrupted");
    assert_eq!(run["verdict"], "unexpected");
    assert_eq!(step(run, "load")["status"], "ok");
    box_is_empty(dir.path());
}

// ---------------------------------------------------------------------------------------
// The real backends (cudarc in src/gpu/cuda.rs, nvml-wrapper in src/gpu/nvml.rs) over
// crates/simgpu loaded as libcuda.so and libnvidia-ml.so.1 from VRAMDOC_SIMGPU_DIR
// (common::simgpu): the same replays as on the in-process simulator, through the libraries'
// C ABI.

fn real_replay(spec: &str, args: &[&str]) -> (i32, Value, String) {
    let dir = fresh_box(spec);
    let out = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .args(["--backend", "real", "replay"])
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v, stderr)
}

#[test]
fn real_backends_stray_cuda0_and_visible_devices_fix() {
    let (code, r, err) = real_replay("2xt4", &["stray-cuda0"]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(r["environment"]["backend"], "sim");
    let bug = run(&r, "stray-cuda0", "bug");
    assert_verdict(bug, "reproduced");
    assert!(max_worker_on(bug, 0) >= CONTEXT);
    let fix = run(&r, "stray-cuda0", "fix-visible-devices");
    assert_verdict(fix, "fixed");
    assert_eq!(
        max_worker_on(fix, 0),
        0,
        "CUDA_VISIBLE_DEVICES=1 keeps physical GPU 0 clean"
    );
}

#[test]
fn real_backends_multi_size_oom() {
    let (code, r, err) = real_replay("t4", &["multi-size-oom"]);
    assert_eq!(code, 0, "{err}");
    let bug = run(&r, "multi-size-oom", "bug");
    assert_verdict(bug, "reproduced");
    assert_eq!(bug["error"]["step_label"], "tune-1024x1152");
    assert_verdict(run(&r, "multi-size-oom", "fix-largest-first"), "fixed");
    assert_verdict(run(&r, "multi-size-oom", "fix-no-tuning-warmup"), "fixed");
}

#[test]
fn out_is_checked_before_running_and_written_as_json() {
    let dir = fresh_box("t4");
    let bad = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .args(["replay", "overcommit", "--out", "r.txt"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stdout).is_empty(),
        "nothing ran"
    );
    let out = dir.path().join("r.json");
    std::fs::write(&out, "old").unwrap();
    let exists = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .args(["replay", "overcommit", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(exists.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&exists.stderr).contains("--force"));
    let ok = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .args([
            "replay",
            "overcommit",
            "--force",
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0));
    let saved: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(saved["kind"], "replay");
    assert_eq!(saved["environment"]["backend"], "sim");
    assert_eq!(saved["replay"]["runs"].as_array().unwrap().len(), 2);
}

#[test]
fn replay_all_runs_every_builtin_scenario_and_variant() {
    let out = common::vramdoc()
        .args(["--sim", "2x16GiB", "replay", "all", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = v["replay"]["runs"].as_array().unwrap();
    let list = vramdoc::scenario::builtin::all().unwrap();
    let expected: usize = list.iter().map(|s| s.variants.len()).sum();
    assert_eq!(runs.len(), expected);
    for r in runs {
        let verdict = r["verdict"].as_str().unwrap();
        let variant = r["variant"].as_str().unwrap();
        let want = if variant == "bug" {
            "reproduced"
        } else {
            "fixed"
        };
        assert_eq!(verdict, want, "{} {}", r["scenario"], variant);
    }
}

/// The real backend with NVML present but no libcuda.so: the worker cannot open the CUDA
/// driver; vramdoc says so in one line and exits 3 (environment), no panic.
#[test]
fn missing_libcuda_is_an_environment_error() {
    let libs = tempfile::tempdir().unwrap();
    // Meaningless where a real libcuda is installed: the loader would find it.
    common::skip::require!("real-driver", common::no_libcuda_outside(libs.path()));
    std::fs::copy(
        common::simgpu_lib_dir().join("libnvidia-ml.so.1"),
        libs.path().join("libnvidia-ml.so.1"),
    )
    .unwrap();
    let b = common::fresh_box("2x16GiB");
    let out = vramdoc()
        .env("LD_LIBRARY_PATH", libs.path())
        .env("VRAMDOC_SIM_DIR", b.path())
        .args([
            "--backend",
            "real",
            "replay",
            "stray-cuda0",
            "--variant",
            "bug",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ") && last.contains("libcuda.so"),
        "{err}"
    );
    assert!(vramdoc_sim::SimBox::open(b.path())
        .unwrap()
        .state()
        .unwrap()
        .processes
        .is_empty());
}

/// The report round trip on a real replay: one run writes JSON and Markdown; re-rendering
/// the JSON with `vramdoc report --format md` gives the same Markdown byte for byte. The
/// JSON validates against the checked-in schema, and the HTML is self-contained.
#[test]
fn replay_report_round_trip_and_schema() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let md = dir.path().join("r.md");
    let html = dir.path().join("r.html");
    let out = vramdoc()
        .args([
            "--sim",
            "2x16GiB",
            "replay",
            "stray-cuda0",
            "multi-size-oom",
            "--out",
        ])
        .arg(&json)
        .arg("--out")
        .arg(&md)
        .arg("--out")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).unwrap();
    common::reports::assert_valid_report_json(&text);
    let again = vramdoc()
        .arg("report")
        .arg(&json)
        .args(["--format", "md"])
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        String::from_utf8(again.stdout).unwrap(),
        std::fs::read_to_string(&md).unwrap()
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(
        page.matches("<svg").count(),
        2 * 5,
        "one chart per device and variant"
    );
    let no_ns = page.replace("http://www.w3.org/2000/svg", "");
    assert!(
        !no_ns.contains("http://") && !no_ns.contains("https://"),
        "page loads nothing"
    );
    // The same --out again is refused without --force, and the file is left as it was.
    let before = std::fs::read(&json).unwrap();
    let out = vramdoc()
        .args(["--sim", "2x16GiB", "replay", "overcommit", "--out"])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&json).unwrap(), before);
}

// ---------------------------------------------------------------------------------------
// Real machines as they are (issue 8): busy GPUs, hung steps, lost devices, containers,
// mixed boxes.

#[test]
fn replay_refuses_gpus_other_processes_use_unless_forced() {
    let dir = fresh_box("2x16GiB");
    let other = Holder::start(dir.path(), &[], &["--device", "0", "--size", "64MiB"]);
    let out = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .args(["replay", "multi-size-oom", "--variant", "fix-largest-first"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("GPU 0 is in use by PID {}", other.pid())),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // With --force it runs (and the other process's memory is in its numbers).
    let (code, v) = replay_json(
        dir.path(),
        &[
            "multi-size-oom",
            "--variant",
            "fix-largest-first",
            "--force",
        ],
    );
    other.kill();
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["replay"]["runs"].as_array().unwrap().len(), 1);
}

#[test]
fn hung_step_ends_with_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenarios::write(
        dir.path(),
        "hang.toml",
        r#"id = "hang"
title = "A step that hangs"
description = "d"
source = "s"
devices = 1

[[steps]]
id = "load"
op = "alloc"
tag = "w"
device = 0
size = "10%"

[[steps]]
id = "stuck"
op = "pause"
duration = "60s"

[[variants]]
name = "bug"
[[variants.expect]]
check = "completes"
"#,
    );
    let started = Instant::now();
    let out = vramdoc()
        .args(["--sim", "16GiB", "replay"])
        .arg(&path)
        .args(["--step-timeout", "500ms", "--json"])
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(50), "not killed");
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = run(&v, "hang", "bug");
    assert_verdict(r, "unexpected");
    assert_eq!(step(r, "load")["status"], "ok");
    assert_eq!(step(r, "stuck")["status"], "timeout");
    assert_eq!(r["error"]["kind"], "timeout");
    assert!(
        r["reason"].as_str().unwrap().contains("--step-timeout"),
        "{}",
        r["reason"]
    );
}

#[test]
fn a_step_timeout_that_is_not_a_duration_is_a_usage_error() {
    let out = vramdoc()
        .args([
            "--sim",
            "16GiB",
            "replay",
            "stray-cuda0",
            "--step-timeout",
            "soon",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--step-timeout"), "{err}");
}

/// The physical GPU index of each peak of every run that ran.
fn run_devices(v: &Value) -> Vec<Vec<u64>> {
    v["replay"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verdict"] != "skipped")
        .map(|r| {
            r["peaks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["device"].as_u64().unwrap())
                .collect()
        })
        .collect()
}

/// Every variant ran and behaved as its expectations say.
fn assert_all_as_expected(v: &Value) {
    for r in v["replay"]["runs"].as_array().unwrap() {
        let verdict = r["verdict"].as_str().unwrap();
        assert!(
            verdict == "reproduced" || verdict == "fixed",
            "{}/{}: {verdict}: {}",
            r["scenario"],
            r["variant"],
            r["reason"]
        );
    }
}

#[test]
fn lost_gpu_is_left_out_and_every_scenario_replays_on_the_others() {
    let dir = fresh_box("3x16GiB");
    common::sim_fault(dir.path(), &["--lose-device", "0"]);
    let out = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .args(["replay", "all", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{err}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("GPU 0 is not used"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_all_as_expected(&v);
    let devs = run_devices(&v);
    assert!(!devs.is_empty());
    // Scenario devices 0 and 1 are physical GPUs 1 and 2, pinned by UUID.
    for d in devs {
        assert_eq!(d, vec![1, 2]);
    }
}

#[test]
fn every_scenario_replays_on_a_mixed_t4_h100_box() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let res = vramdoc()
        .args(["--sim", "t4,h100", "replay", "all", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        res.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&res.stdout),
        String::from_utf8_lossy(&res.stderr)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_all_as_expected(&v);
    // stray-cuda0's bug: the context lands on NVML GPU 0 (the T4), the work on GPU 1.
    let bug = run(&v, "stray-cuda0", "bug");
    assert!(max_worker_on(bug, 0) >= CONTEXT, "{bug}");
}

/// `replay all` inside a new PID namespace with its own /proc (as in a container) on a box
/// made with `--driver DRIVER`, whose broker runs in the host namespace. Checked to exit 0
/// with every variant as expected.
fn replay_all_in_a_pid_namespace(driver: &str) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().unwrap();
    let init = vramdoc()
        .args(["sim", "init", "2x16GiB", "--driver", driver, "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(env!("CARGO_BIN_EXE_vramdoc"))
        .args(["replay", "all", "--json"])
        .env("VRAMDOC_SIM_DIR", dir.path())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("VRAMDOC_PIDNS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{driver}: {err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_all_as_expected(&v);
    (dir, v)
}

/// `replay all` from inside a PID namespace on a driver before 535.113: NVML reports host
/// PIDs to every caller, vramdoc sees namespace PIDs, and the worker is still found.
#[test]
fn replay_all_inside_a_pid_namespace() {
    common::skip::require!("unshare", common::skip::unshare());
    let (dir, v) = replay_all_in_a_pid_namespace("535.54.03");
    // The worker's usage was attributed: stray-cuda0's bug shows its context on GPU 0.
    let bug = run(&v, "stray-cuda0", "bug");
    assert!(max_worker_on(bug, 0) >= CONTEXT, "{bug}");
    // Found in NVML's (host) PID namespace, not under its namespace PID.
    let local = bug["worker_pid"].as_u64().unwrap();
    let found = bug["timeline"]["markers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["label"].as_str())
        .find(|l| l.starts_with("NVML lists the worker as PID"))
        .unwrap_or_else(|| panic!("no NVML PID marker: {bug}"))
        .to_string();
    assert!(!found.contains(&format!("PID {local} ")), "{found}");
    let _ = std::fs::remove_file(dir.path().join("box.json"));
}

/// The same on a driver from 565 on, which translates each client's PID into the caller's
/// namespace with its usage: the worker is listed under its own (namespace) PID.
#[test]
fn replay_all_inside_a_pid_namespace_on_a_translating_driver() {
    common::skip::require!("unshare", common::skip::unshare());
    let (dir, v) = replay_all_in_a_pid_namespace("570.86.10");
    let bug = run(&v, "stray-cuda0", "bug");
    assert!(max_worker_on(bug, 0) >= CONTEXT, "{bug}");
    let _ = std::fs::remove_file(dir.path().join("box.json"));
}

/// A GPU lost while a replay runs: the variant running on it ends with `device-lost`, the
/// next variant runs on the GPU that is left (pinned by UUID), and the report has both.
#[test]
fn gpu_lost_mid_replay_later_variants_run_on_the_rest() {
    let dir = fresh_box("2x16GiB");
    let file = scenarios::write(
        dir.path(),
        "mid.toml",
        r#"id = "mid"
title = "Lost mid-run"
description = "d"
source = "s"
devices = 1
[[steps]]
id = "load"
op = "alloc"
tag = "w"
device = 0
size = "10%"
[[steps]]
id = "wait"
op = "pause"
duration = "5s"
only = ["bug"]
[[steps]]
id = "more"
op = "alloc"
tag = "x"
device = 0
size = "5%"
[[variants]]
name = "bug"
[[variants.expect]]
check = "completes"
[[variants]]
name = "fix-again"
[[variants.expect]]
check = "completes"
"#,
    );
    let mut child = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .arg("replay")
        .arg(&file)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let worker: u32 = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "no worker started");
        if let Some(pid) = line.strip_prefix("replay mid/bug: worker pid") {
            break pid.trim().parse().expect("worker pid");
        }
    };
    std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {}
    });
    // Lose GPU 0 once the worker holds its `load` allocation (10 % of 16 GiB), i.e. during
    // the 5 s pause before `more` (a pause in `bug` only: `fix-again` does not wait).
    let sim = vramdoc_sim::SimBox::open(dir.path()).unwrap();
    common::poll::eventually(
        common::poll::SECS_10,
        "the bug worker's load allocation on GPU 0",
        || {
            sim.processes(0)
                .unwrap()
                .iter()
                .any(|p| p.pid == worker && p.used >= sim.devices()[0].total / 10)
        },
    );
    common::sim_fault(dir.path(), &["--lose-device", "0"]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = run(&v, "mid", "bug");
    assert_verdict(a, "unexpected");
    assert_eq!(a["error"]["kind"], "device-lost", "{a}");
    // The sampler kept going and recorded where it had no data.
    assert!(
        a["timeline"]["gaps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["device"] == 0 && g["reason"].as_str().unwrap().contains("lost")),
        "{}",
        a["timeline"]["gaps"]
    );
    let b = run(&v, "mid", "fix-again");
    assert_verdict(b, "fixed");
    let devs: Vec<u64> = b["peaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["device"].as_u64().unwrap())
        .collect();
    assert_eq!(devs, vec![1], "{b}");
}

/// `replay --all` and `replay all` say one thing: every built-in scenario (issue 14). With
/// `--variant` that is one variant of each; naming nothing is a usage error that says how.
#[test]
fn all_flag_and_all_argument_are_every_scenario() {
    let dir = fresh_box("2x16GiB");
    let ids = |v: &Value| -> Vec<(String, String)> {
        v["replay"]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert_eq!(r["verdict"], "reproduced", "{r}");
                (
                    r["scenario"].as_str().unwrap().to_string(),
                    r["variant"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (code, flag) = replay_json(dir.path(), &["--all", "--variant", "bug"]);
    assert_eq!(code, 0, "{flag}");
    let (code, arg) = replay_json(dir.path(), &["all", "--variant", "bug"]);
    assert_eq!(code, 0, "{arg}");
    assert_eq!(ids(&flag), ids(&arg));
    let builtin: Vec<(String, String)> = vramdoc::scenario::builtin::BUILTIN
        .iter()
        .map(|(id, _)| (id.to_string(), "bug".to_string()))
        .collect();
    assert_eq!(
        ids(&flag),
        builtin,
        "every built-in scenario, in list order"
    );

    let out = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .arg("replay")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("<ID|FILE|--all|CMD>"), "{err}");
}
