//! Record once, replay anywhere (issue 16): a third-party workload (Python over the
//! simulated libcuda.so through ctypes, tests/run_jobs/job.py) recorded under `vramdoc run`
//! becomes a scenario (`--scenario-out`, `scenario from`) that replays on the same box with
//! the same fingerprint and the OOM in the same phase, completes on a larger box, keeps no
//! argv, environment value or path of the job; `whatif` over five presets; bad input.

use crate::common::{self, hold::Holder, simgpu_lib_dir, stderr, vramdoc, KillOnDrop};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

const JOB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/run_jobs/job.py");
const GIB: u64 = 1 << 30;

/// The cadence the Python shapes are recorded at.
const CADENCE: [&str; 4] = ["--period", "20ms", "--process-period", "100ms"];

/// `vramdoc run` on the box `dir` (crates/simgpu on LD_LIBRARY_PATH) with `extra` flags.
fn record(dir: &Path, out: &Path, extra: &[&str], cmd: &[&str]) -> Output {
    vramdoc()
        .env("VRAMDOC_SIM_DIR", dir)
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .arg("run")
        .arg("--out")
        .arg(out.join("run.json"))
        .arg("--scenario-out")
        .arg(out.join("repro.toml"))
        .args(extra)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run vramdoc")
}

/// `vramdoc replay FILE --json` with `--sim SPEC`; the one variant run.
fn replay(file: &Path, sim: &str) -> (Output, Value) {
    let o = vramdoc()
        .args(["--sim", sim, "replay"])
        .arg(file)
        .arg("--json")
        .output()
        .expect("replay");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o, v["replay"]["runs"][0].clone())
}

/// `vramdoc scenario from` of the samples stream `s` written into `dir`: the scenario file it
/// wrote and its text.
fn scenario_of_stream(dir: &Path, s: &str) -> (std::path::PathBuf, String) {
    let stream = dir.join("s.jsonl");
    std::fs::write(&stream, s).unwrap();
    let repro = dir.join("repro.toml");
    let o = vramdoc()
        .args(["scenario", "from"])
        .arg(&stream)
        .arg("--out")
        .arg(&repro)
        .output()
        .expect("scenario from");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&repro).unwrap();
    (repro, text)
}

fn check_passed(run: &Value, starts: &str) -> bool {
    run["checks"].as_array().into_iter().flatten().any(|c| {
        c["expectation"]
            .as_str()
            .is_some_and(|e| e.starts_with(starts))
            && c["passed"] == true
    })
}

fn job(script: &Path, actions: &[&str]) -> Vec<String> {
    let mut v = vec!["python3".to_string(), script.display().to_string()];
    v.extend(actions.iter().map(|s| s.to_string()));
    v
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn round_trip_reproduces_on_the_same_box_completes_on_a_larger_one_and_keeps_no_secret() {
    let tmp = tempfile::tempdir().unwrap();
    let b = common::fresh_box("16GiB");
    // Planted: a path (the script's directory), an argv word, an environment value, a path
    // in a marker.
    let planted_dir = tmp.path().join("zq-planted-path-7141");
    std::fs::create_dir(&planted_dir).unwrap();
    let script = planted_dir.join("job.py");
    std::fs::copy(JOB, &script).unwrap();
    let mut cmd = vec![
        "env".to_string(),
        "ZQ_PLANTED_ARGV=zq-argv-5521".to_string(),
    ];
    // Each size holds 600 ms, past the 250 ms a plateau needs to be a phase's level
    // (diagnose::timeline::levels::SHORT_QUIET_MS) even on a loaded machine.
    cmd.extend(job(
        &script,
        &[
            "ctx:0",
            "mark:load_/home/zq-marker-path-33/ckpt",
            "alloc:4096",
            "sleep:600",
            "mark:size_2",
            "alloc:2048",
            "sleep:600",
            "mark:size_3",
            "alloc:2048",
            "sleep:600",
            "mark:size_4",
            "alloc:2048",
            "sleep:600",
            "mark:size_5",
            "alloc:8192",
        ],
    ));
    let o = vramdoc()
        .env("ZQ_PLANTED_ENV", "zq-env-9183")
        .env("VRAMDOC_SIM_DIR", b.path())
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .args(["run", "--period", "20ms", "--process-period", "100ms"])
        .arg("--out")
        .arg(tmp.path().join("run.json"))
        .arg("--samples")
        .arg(tmp.path().join("run.jsonl"))
        .arg("--scenario-out")
        .arg(tmp.path().join("repro.toml"))
        .arg("--")
        .args(refs(&cmd))
        .output()
        .unwrap();
    // The command's own status still passes through.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("scenario: "), "{}", stderr(&o));
    let repro = tmp.path().join("repro.toml");
    let text = std::fs::read_to_string(&repro).expect("--scenario-out written");
    for planted in [
        "zq-planted-path-7141",
        "zq-argv-5521",
        "ZQ_PLANTED",
        "zq-env-9183",
        "zq-marker-path-33",
        "job.py",
        "python",
        &tmp.path().display().to_string(),
    ] {
        assert!(!text.contains(planted), "{planted} leaked into\n{text}");
    }
    assert!(text.contains("recorded_on = \"16GiB\""), "{text}");
    assert!(
        text.contains("fingerprint = \"growth-without-release\""),
        "{text}"
    );

    // Same box: the fingerprint fires, the OOM is at the recorded failed allocation, in the
    // phase of the last marker; peaks within one step.
    let (o, run) = replay(&repro, "recorded");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(run["verdict"], "reproduced", "{run:#}");
    assert!(
        check_passed(&run, "the growth-without-release fingerprint fires"),
        "{run:#}"
    );
    assert!(
        check_passed(&run, "out of memory at or after step m5"),
        "{run:#}"
    );
    assert!(check_passed(&run, "peak used on GPU 0"), "{run:#}");
    let steps = run["steps"].as_array().unwrap();
    let failed = &steps[run["error"]["step"].as_u64().unwrap() as usize];
    assert_eq!(failed["id"], "failed-alloc", "{run:#}");
    // Its size is the one the parsed error line asked for.
    assert!(
        text.contains(
            "id = \"failed-alloc\"\nlabel = \"the allocation that failed: 8.00 GiB on GPU 0\""
        ),
        "{text}"
    );

    // A larger box: every step runs.
    let (_, big) = replay(&repro, "24GiB");
    assert!(big["error"].is_null(), "{big:#}");
    assert!(big["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["status"] == "ok"));

    // The --samples stream converts to the same scenario.
    let o = vramdoc()
        .args(["scenario", "from"])
        .arg(tmp.path().join("run.jsonl"))
        .output()
        .unwrap();
    common::assert_ok(&o, "scenario from run.jsonl");
    assert_eq!(String::from_utf8_lossy(&o.stdout), text);
}

/// Record a shape on a box of `spec` (with a `sim hold` neighbour of `neighbour`), convert,
/// replay on the recorded box; the replayed bug variant.
fn fidelity(spec: &str, neighbour: Option<&str>, actions: &[&str]) -> (Value, String) {
    fidelity_of(spec, neighbour, &CADENCE, &job(Path::new(JOB), actions))
}

/// [`fidelity`] of any command, recorded with `extra` flags.
fn fidelity_of(
    spec: &str,
    neighbour: Option<&str>,
    extra: &[&str],
    cmd: &[String],
) -> (Value, String) {
    let tmp = tempfile::tempdir().unwrap();
    let b = common::fresh_box(spec);
    let holder = neighbour.map(|size| Holder::start(b.path(), &[], &["--size", size]));
    let o = record(b.path(), tmp.path(), extra, &refs(cmd));
    drop(holder);
    let repro = tmp.path().join("repro.toml");
    let text = std::fs::read_to_string(&repro)
        .unwrap_or_else(|e| panic!("no scenario ({e}): {}", stderr(&o)));
    let (o, run) = replay(&repro, "recorded");
    assert!(run.is_object(), "{}", stderr(&o));
    (run, text)
}

mod fidelity_over_recorded_shapes {
    use super::*;

    #[test]
    fn stray_context() {
        let (run, text) = fidelity(
            "2x16GiB",
            None,
            &["ctx:0", "ctx:1", "mark:work", "alloc:4096", "sleep:600"],
        );
        assert!(text.contains("fingerprint = \"stray-context\""), "{text}");
        assert_eq!(run["verdict"], "reproduced", "{run:#}\n{text}");
    }

    #[test]
    fn neighbour_plus_over_claim() {
        // vLLM loads its weights, then claims the rest of its budget for the KV cache. The
        // job runs as `vllm.py`: only an engine's claim scales with the card (issue 26).
        let engine = tempfile::tempdir().unwrap();
        let script = engine.path().join("vllm.py");
        std::fs::copy(JOB, &script).unwrap();
        let (run, text) = fidelity_of(
            "16GiB",
            Some("1536MiB"),
            &CADENCE,
            &job(
                &script,
                &[
                    "ctx:0",
                    "mark:load",
                    "alloc:2048",
                    "sleep:300",
                    "mark:claim",
                    "alloc:11059",
                    "sleep:300",
                    "mark:serve",
                    "alloc:1024",
                ],
            ),
        );
        assert!(text.contains("[[neighbours]]"), "{text}");
        // The engine at 12.8 GiB of a 16 GiB GPU: its gpu_memory_utilization 0.8.
        assert!(text.contains("op = \"claim_utilization\""), "{text}");
        assert!(text.contains("fraction = 0.8"), "{text}");
        assert!(text.contains("fingerprint = \"overcommit\""), "{text}");
        assert_eq!(run["verdict"], "reproduced", "{run:#}\n{text}");
    }

    /// A built-in replay run as the job (its worker and neighbour are the job's processes):
    /// the worker's stray context survives the conversion.
    #[test]
    fn builtin_stray_cuda0_replayed_under_run() {
        let cmd: Vec<String> = [env!("CARGO_BIN_EXE_vramdoc"), "replay", "stray-cuda0"]
            .iter()
            .chain(&["--variant", "bug", "--force"])
            .map(|s| s.to_string())
            .collect();
        let fast = ["--period", "1ms", "--process-period", "10ms"];
        let (run, text) = fidelity_of("2xt4", None, &fast, &cmd);
        assert!(text.contains("recorded_on = \"2xt4\""), "{text}");
        assert!(text.contains("fingerprint = \"stray-context\""), "{text}");
        assert_eq!(run["verdict"], "reproduced", "{run:#}\n{text}");
    }

    #[test]
    fn release_not_done() {
        let (run, text) = fidelity(
            "16GiB",
            None,
            &[
                "ctx:0",
                "mark:load",
                "alloc:6144",
                "sleep:300",
                "mark:release_model",
                "sleep:2500",
            ],
        );
        assert!(text.contains("fingerprint = \"not-released\""), "{text}");
        assert!(text.contains("check = \"residual\""), "{text}");
        assert_eq!(run["verdict"], "reproduced", "{run:#}\n{text}");
    }
}

/// A reproduction as `scenario from` writes one: 12 GiB held, then 8 GiB more fails.
const RECORDED_16GIB: &str = r#"
id = "repro"
title = "t"
description = "d"
source = "s"
devices = 1
recorded_on = "16GiB"
fingerprint = "out-of-memory"

[[steps]]
id = "s1"
op = "context"
device = 0

[[steps]]
id = "s2"
op = "alloc"
tag = "a1"
device = 0
size = "12GiB"
fill = false

[[steps]]
id = "failed-alloc"
op = "alloc"
tag = "failed"
device = 0
size = "8GiB"
fill = false

[[variants]]
name = "bug"
[[variants.expect]]
check = "oom"
at_or_after = "failed-alloc"
"#;

#[test]
fn whatif_on_five_presets_names_the_smallest_box_it_fits_on() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("repro.toml");
    std::fs::write(&file, RECORDED_16GIB).unwrap();
    let o = vramdoc()
        .arg("whatif")
        .arg(&file)
        .args(["--on", "t4,l4,a100-80gb,h100,2xh100,recorded", "--json"])
        .output()
        .unwrap();
    let v = common::json_ok(&o, "whatif --json");
    let boxes = v["boxes"].as_array().unwrap();
    let by = |spec: &str| boxes.iter().find(|b| b["spec"] == spec).unwrap().clone();
    assert_eq!(boxes.len(), 6, "{v:#}");
    // 12.4 GiB + 8 GiB: over a T4 or a 16 GiB card, within an L4.
    for small in ["t4", "16GiB"] {
        assert_eq!(by(small)["reproduces"], true, "{small}: {v:#}");
        assert_eq!(by(small)["fits"], false, "{small}: {v:#}");
    }
    for big in ["l4", "a100-80gb", "h100", "2xh100"] {
        assert_eq!(by(big)["fits"], true, "{big}: {v:#}");
        assert_eq!(by(big)["reproduces"], false, "{big}: {v:#}");
    }
    assert_eq!(by("2xh100")["gpus"].as_array().unwrap().len(), 2);
    let h100 = &by("h100")["gpus"][0];
    assert!(h100["peak"].as_u64().unwrap() >= 20 * GIB, "{h100}");
    assert!(h100["headroom"].as_u64().unwrap() >= 50 * GIB, "{h100}");
    assert_eq!(v["smallest_fit"], "l4", "{v:#}");

    // The table, for people.
    let o = vramdoc()
        .arg("whatif")
        .arg(&file)
        .args(["--on", "t4,l4,a100-80gb,h100,2xh100"])
        .output()
        .unwrap();
    common::assert_ok(&o, "whatif");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("smallest box it fits on: l4"), "{table}");
    assert!(table.contains("a100-80gb"), "{table}");
}

mod bad_input {
    use super::*;

    fn from(file: &Path) -> Output {
        vramdoc()
            .args(["scenario", "from"])
            .arg(file)
            .output()
            .unwrap()
    }

    #[test]
    fn a_report_that_is_not_a_run_report_is_exit_2_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let scan = tmp.path().join("scan.json");
        let json = serde_json::to_string(&common::reports::scan_report()).unwrap();
        std::fs::write(&scan, json).unwrap();
        let o = from(&scan);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(
            e.contains("scan.json: a scan report, not a run report"),
            "{e}"
        );
        let junk = tmp.path().join("notes.txt");
        std::fs::write(&junk, "{\"hello\": 1}").unwrap();
        let o = from(&junk);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            stderr(&o).contains("notes.txt: neither a vramdoc run report nor"),
            "{}",
            stderr(&o)
        );
    }

    #[test]
    fn a_recorded_box_is_required_by_sim_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plain.toml");
        std::fs::write(
            &file,
            RECORDED_16GIB.replace("recorded_on = \"16GiB\"\n", ""),
        )
        .unwrap();
        let o = vramdoc()
            .args(["--sim", "recorded", "replay"])
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("does not say which GPUs it was recorded on"));
        let o = vramdoc()
            .arg("whatif")
            .arg(&file)
            .args(["--on", "t4,nope9"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("\"nope9\" is not a box spec"),
            "{}",
            stderr(&o)
        );
    }

    /// The samples of a run whose vramdoc was killed (SIGKILL) while the job held 2 GiB.
    fn crashed_samples(dir: &Path) -> PathBuf {
        let b = common::fresh_box("16GiB");
        let samples = dir.join("crash.jsonl");
        let mut child = KillOnDrop(
            vramdoc()
                .env("VRAMDOC_SIM_DIR", b.path())
                .env("LD_LIBRARY_PATH", simgpu_lib_dir())
                .args(["run", "--period", "20ms", "--process-period", "50ms"])
                .arg("--samples")
                .arg(&samples)
                .arg("--")
                .args(refs(&job(
                    Path::new(JOB),
                    &["ctx:0", "alloc:2048", "sleep:20000"],
                )))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let job_pid = common::poll::eventually(
            common::poll::SECS_10,
            "the job's 2 GiB in the samples",
            || {
                let text = std::fs::read_to_string(&samples).unwrap_or_default();
                text.lines().find_map(|l| {
                    let v: Value = serde_json::from_str(l).ok()?;
                    (v["type"] == "process" && v["tree"] == true && v["used"].as_u64()? >= 2 * GIB)
                        .then(|| v["pid"].as_u64())
                        .flatten()
                })
            },
        );
        child.kill().unwrap();
        child.wait().unwrap();
        // The job outlives vramdoc: end it too.
        unsafe { libc::kill(job_pid as i32, libc::SIGKILL) };
        samples
    }

    #[test]
    fn a_samples_stream_cut_short_by_a_crash_still_converts() {
        let tmp = tempfile::tempdir().unwrap();
        let samples = crashed_samples(tmp.path());
        let text = std::fs::read_to_string(&samples).unwrap();
        assert!(!text.contains("\"type\":\"end\""), "the run did not end");
        // Cut inside the last line as well, as a crash mid-write would.
        std::fs::write(&samples, format!("{text}{{\"type\":\"memory\",\"t_ms\":9")).unwrap();
        let out = tmp.path().join("crash.toml");
        let o = vramdoc()
            .args(["scenario", "from"])
            .arg(&samples)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        common::assert_ok(&o, "scenario from a crashed stream");
        assert!(stderr(&o).contains("cut short"), "{}", stderr(&o));
        let toml = std::fs::read_to_string(&out).unwrap();
        assert!(toml.contains("size = \"2GiB\""), "{toml}");
        // And it replays: the 2 GiB fit on the recorded box.
        let (o, run) = replay(&out, "recorded");
        assert_eq!(run["verdict"], "reproduced", "{}\n{run:#}", stderr(&o));
    }
}

/// `--scenario-out` is checked with the other outputs, before the command starts: an
/// existing file without `--force` is vramdoc's own failure (125) and nothing runs.
#[test]
fn an_existing_scenario_out_is_refused_before_the_command_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("repro.toml");
    std::fs::write(&out, "keep me").unwrap();
    let ran = tmp.path().join("ran");
    let o = vramdoc()
        .args(["--sim", "16GiB", "run", "--scenario-out"])
        .arg(&out)
        .args(["--", "touch"])
        .arg(&ran)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("repro.toml"), "{}", stderr(&o));
    assert!(!ran.exists(), "the command ran");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
}

/// A bug variant that holds memory for a minute before its failing allocation.
const LONG_BUG: &str = r#"
id = "long-hold"
title = "t"
description = "d"
source = "s"
devices = 1

[[steps]]
id = "ctx"
op = "context"
device = 0

[[steps]]
id = "load"
op = "alloc"
tag = "a"
device = 0
size = "1GiB"
fill = false

[[steps]]
id = "wait"
op = "pause"
duration = "60s"

[[variants]]
name = "bug"
[[variants.expect]]
check = "oom"
at_or_after = "wait"
"#;

/// Every live (not zombie) descendant of `root`, from /proc.
fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name's closing parenthesis: state, ppid.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let ppid = fields
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0);
        if state != "Z" {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
    })
}

/// Kills what a failed test left running.
struct KillAll(Vec<u32>);
impl Drop for KillAll {
    fn drop(&mut self) {
        for pid in &self.0 {
            if alive(*pid) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
            }
        }
    }
}

/// Issue 29 item 14: `whatif` ended by SIGTERM leaves no replay worker and no box behind.
#[test]
fn whatif_ended_by_sigterm_leaves_no_replays_and_no_boxes_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("long.toml");
    std::fs::write(&file, LONG_BUG).unwrap();
    let boxes_dir = tmp.path().join("tmp");
    std::fs::create_dir(&boxes_dir).unwrap();
    let boxes = || -> Vec<PathBuf> {
        std::fs::read_dir(&boxes_dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("vramdoc-sim-"))
            })
            .collect()
    };
    let mut whatif = KillOnDrop(
        vramdoc()
            .arg("whatif")
            .arg(&file)
            .args(["--on", "16GiB,24GiB", "--jobs", "2", "--json"])
            .env("TMPDIR", &boxes_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = whatif.id();
    let mut left = KillAll(Vec::new());
    // Both boxes made and a replay worker holding memory on each.
    common::poll::eventually(
        std::time::Duration::from_secs(60),
        "two boxes with their replays running",
        || {
            left.0 = descendants(pid);
            boxes().len() == 2 && left.0.len() >= 2
        },
    );
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = whatif.wait().unwrap();
    assert!(!status.success(), "{status:?}");
    let running = left.0.clone();
    common::poll::eventually(
        common::poll::SECS_10,
        "every replay process of whatif gone",
        || {
            let still: Vec<u32> = running.iter().copied().filter(|p| alive(*p)).collect();
            if still.is_empty() {
                Ok(())
            } else {
                Err(format!("still running: {still:?}"))
            }
        },
    );
    common::poll::eventually(common::poll::SECS_10, "whatif's boxes removed", || {
        boxes().is_empty()
    });
}

/// Issue 26: a plain job whose allocation happens to be a round share of the card keeps its
/// bytes in `scenario from`, so `whatif` on a larger card peaks where it peaked, not at that
/// share of the larger card; the converted file says why.
#[test]
fn whatif_of_a_plain_recorded_job_keeps_its_bytes_on_a_larger_card() {
    let tmp = tempfile::tempdir().unwrap();
    let b = common::fresh_box("16GiB");
    // 60 % of the 16 GiB card in one allocation (9.6 GiB), by a job that is no engine.
    let cmd = job(
        Path::new(JOB),
        &["ctx:0", "mark:load", "alloc:9830", "sleep:400"],
    );
    let o = record(b.path(), tmp.path(), &CADENCE, &refs(&cmd));
    let repro = tmp.path().join("repro.toml");
    let text = std::fs::read_to_string(&repro)
        .unwrap_or_else(|e| panic!("no scenario ({e}): {}", stderr(&o)));
    assert!(!text.contains("claim_utilization"), "{text}");
    assert!(text.contains("absolute"), "{text}");
    let o = vramdoc()
        .arg("whatif")
        .arg(&repro)
        .args(["--on", "h100,recorded", "--json"])
        .output()
        .unwrap();
    let v = common::json_ok(&o, "whatif --json");
    let boxes = v["boxes"].as_array().unwrap();
    let h100 = boxes.iter().find(|x| x["spec"] == "h100").unwrap();
    let peak = h100["gpus"][0]["peak"].as_u64().unwrap();
    // The 9.6 GiB plus a context, not 60 % of 80 GiB (48 GiB).
    assert!(
        (9 * GIB..12 * GIB).contains(&peak),
        "peak {peak} on an H100: {v:#}\n{text}"
    );
}

/// Issue 29 item 3: a neighbour that held 8 GiB of a 16 GiB GPU and exited before the job
/// took 10 GiB is replayed only while it was there (started and stopped at the matching
/// steps): the job, which exited 0 on its own recorded box, completes there when replayed
/// (it used to replay as "OOM, UNEXPECTED": every neighbour held its peak all along).
#[test]
fn a_neighbour_that_came_and_went_is_replayed_only_while_it_was_there() {
    const MIB: u64 = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let total = 16 * GIB;
    let ctx = 448 * MIB;
    let mut s = format!(
        "{{\"type\":\"header\",\"version\":1,\"devices\":[{{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"Simulated GPU 16GiB\",\"total\":{total}}}],\"period_us\":100000,\"process_period_us\":100000}}\n"
    );
    for k in 0..=20u64 {
        let t = k * 100;
        let neighbour = if t <= 1000 { 8 * GIB } else { 0 };
        let job = match t {
            0..=100 => 0,
            200..=1400 => ctx,
            _ => ctx + 10 * GIB,
        };
        s.push_str(&format!(
            "{{\"type\":\"memory\",\"t_ms\":{t}.0,\"used\":[{}]}}\n",
            neighbour + job
        ));
        if neighbour > 0 {
            s.push_str(&format!("{{\"type\":\"process\",\"t_ms\":{t}.0,\"device\":0,\"pid\":500,\"used\":{neighbour},\"tree\":false}}\n"));
        }
        if job > 0 {
            s.push_str(&format!("{{\"type\":\"process\",\"t_ms\":{t}.0,\"device\":0,\"pid\":600,\"used\":{job},\"tree\":true}}\n"));
        }
    }
    s.push_str("{\"type\":\"end\",\"t_ms\":2050.0,\"status\":0}\n");
    let (repro, text) = scenario_of_stream(tmp.path(), &s);
    assert!(
        text.contains("[[neighbours]]") && text.contains("until = "),
        "{text}"
    );
    let (o, run) = replay(&repro, "recorded");
    assert!(run.is_object(), "{}", stderr(&o));
    assert!(
        check_passed(&run, "the workload completes"),
        "{run:#}\n{text}"
    );
    assert_eq!(run["verdict"], "reproduced", "{run:#}\n{text}");
}

/// Issue 37 item 7: the out-of-memory line says the GPU had 1 GiB free where the last
/// sample before it saw 9.5 GiB (a holder came and went between two readings): the
/// scenario models the memory the samples missed as one more holder and says so, and
/// `replay --sim recorded` fails the 8 GiB allocation the line reports, at that step
/// (before: the allocation fit in what the samples showed and the replay completed).
#[test]
fn an_oom_line_stating_less_free_than_the_samples_is_reproduced() {
    const MIB: u64 = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let total = 16 * GIB;
    let ctx = 448 * MIB;
    let mut s = format!(
        "{{\"type\":\"header\",\"version\":1,\"devices\":[{{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"Simulated GPU 16GiB\",\"total\":{total}}}],\"period_us\":100000,\"process_period_us\":100000}}\n"
    );
    s.push_str("{\"type\":\"start\",\"t_ms\":0.0,\"pid\":600,\"name\":\"python3\"}\n");
    for k in 0..=15u64 {
        let t = k * 100;
        let job = match t {
            0..=100 => 0,
            200..=500 => ctx,
            _ => ctx + 6 * GIB,
        };
        s.push_str(&format!(
            "{{\"type\":\"memory\",\"t_ms\":{t}.0,\"used\":[{job}]}}\n"
        ));
        if job > 0 {
            s.push_str(&format!("{{\"type\":\"process\",\"t_ms\":{t}.0,\"device\":0,\"pid\":600,\"used\":{job},\"tree\":true}}\n"));
        }
    }
    let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 \
                has a total capacity of 16.00 GiB of which 1.00 GiB is free. Including \
                non-PyTorch memory, this process has 6.44 GiB memory in use.";
    s.push_str(&format!(
        "{{\"type\":\"error\",\"t_ms\":1550.0,\"kind\":\"cuda-oom\",\"device\":0,\"requested\":{},\"line\":{}}}\n",
        8 * GIB,
        serde_json::to_string(line).unwrap()
    ));
    s.push_str("{\"type\":\"end\",\"t_ms\":1600.0,\"status\":1}\n");
    let (repro, text) = scenario_of_stream(tmp.path(), &s);
    assert!(
        text.contains("the samples missed") && text.contains("from = \"failed-alloc\""),
        "the scenario says what it models: {text}"
    );
    let (o, run) = replay(&repro, "recorded");
    assert!(run.is_object(), "{}", stderr(&o));
    assert!(check_passed(&run, "out of memory"), "{run:#}\n{text}");
    let failed: Vec<&Value> = run["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|st| st["status"] == "out-of-memory")
        .collect();
    assert_eq!(failed.len(), 1, "{run:#}\n{text}");
    assert_eq!(failed[0]["id"], "failed-alloc", "{run:#}\n{text}");
    assert_eq!(run["verdict"], "reproduced", "{run:#}\n{text}");
}
