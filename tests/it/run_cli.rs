//! End-to-end tests of `vramdoc run -- CMD`: real processes (Python over crates/simgpu's
//! libcuda.so through ctypes, shells, `vramdoc sim hold`) wrapped by vramdoc on a simulated
//! box; the report, the JSONL stream, markers, signals and exit statuses.

use crate::common;

use common::poll::{eventually, SECS_10};
use common::{run_job, simgpu_lib_dir, stderr, vramdoc};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

const GIB: u64 = 1 << 30;
const JOB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/run_jobs/job.py");

fn python_job(actions: &[&str]) -> Vec<String> {
    let mut v = vec!["python3".to_string(), JOB.to_string()];
    v.extend(actions.iter().map(|s| s.to_string()));
    v
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn finding_ids(report: &Value) -> Vec<String> {
    report["run"]["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The job's process (the Python interpreter) peak per device, by device index.
fn job_peaks(report: &Value) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for p in report["run"]["processes"].as_array().into_iter().flatten() {
        for d in p["devices"].as_array().into_iter().flatten() {
            v.push((
                d["device"].as_u64().unwrap(),
                d["peak"].as_u64().unwrap_or(0),
            ));
        }
    }
    v
}

fn marker_kinds(report: &Value) -> Vec<String> {
    report["run"]["timeline"]["markers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["kind"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_stray_context_is_recorded_on_the_device_the_job_did_not_pick() {
    let tmp = tempfile::tempdir().unwrap();
    let job = python_job(&["ctx:0", "ctx:1", "alloc:4096", "mark:work", "sleep:600"]);
    let (o, r) = run_job(tmp.path(), &[], &refs(&job));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let peaks = job_peaks(&r);
    // A context alone on GPU 0, the work on GPU 1, by the same process.
    assert!(
        peaks.iter().any(|(d, p)| *d == 0 && *p > 0 && *p < GIB),
        "{peaks:?}"
    );
    assert!(
        peaks.iter().any(|(d, p)| *d == 1 && *p >= 4 * GIB),
        "{peaks:?}"
    );
    assert!(
        finding_ids(&r).contains(&"stray-context".to_string()),
        "{}",
        stderr(&o)
    );
    assert!(marker_kinds(&r).contains(&"marker".to_string()));
}

#[test]
fn stepwise_growth_ending_in_oom_is_recorded_with_the_parsed_error() {
    let tmp = tempfile::tempdir().unwrap();
    // Each size holds for 600 ms: a plateau is a phase's level once it has held 250 ms
    // (diagnose::timeline::levels::SHORT_QUIET_MS); at exactly 250 ms the verdict hung on
    // whether a sample landed past it, which a loaded CI machine decides.
    let job = python_job(&[
        "ctx:0",
        "mark:size_1",
        "alloc:4096",
        "sleep:600",
        "mark:size_2",
        "alloc:4096",
        "sleep:600",
        "mark:size_3",
        "alloc:4096",
        "sleep:600",
        "mark:size_4",
        "alloc:8192",
    ]);
    let (o, r) = run_job(tmp.path(), &[], &refs(&job));
    // The command's own status passes through.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // Its stderr passes through too.
    assert!(
        stderr(&o).contains("torch.OutOfMemoryError"),
        "{}",
        stderr(&o)
    );
    let errors = r["run"]["errors"].as_array().unwrap();
    let oom = errors
        .iter()
        .find(|e| e["kind"] == "cuda-oom")
        .expect("an OOM event");
    assert_eq!(oom["device"], 0);
    assert_eq!(oom["requested"], 8 * GIB);
    assert!(marker_kinds(&r).contains(&"oom".to_string()));
    // Each size shows as a plateau: the readings at the markers climb.
    let series = &r["run"]["timeline"]["devices"][0]["samples"];
    let max = series
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[1].as_u64().unwrap())
        .max();
    assert!(max.unwrap() >= 12 * GIB, "{max:?}");
    let ids = finding_ids(&r);
    assert!(ids.contains(&"out-of-memory".to_string()), "{ids:?}");
    assert!(
        ids.contains(&"growth-without-release".to_string()),
        "{ids:?}"
    );
    // The stderr tail keeps the line.
    let tail = r["run"]["stderr_tail"].as_array().unwrap();
    assert!(tail
        .iter()
        .any(|l| l.as_str().unwrap().contains("Tried to allocate 8.00 GiB")));
}

#[test]
fn a_forked_child_holding_the_memory_belongs_to_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let child = python_job(&["ctx:0", "alloc:3072", "sleep:700"]).join(" ");
    let script = format!("{child} & wait");
    let (o, r) = run_job(tmp.path(), &[], &["sh", "-c", &script]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let procs = r["run"]["processes"].as_array().unwrap();
    let sh = procs
        .iter()
        .find(|p| p["name"] == "sh")
        .expect("sh in the tree");
    let holder = procs
        .iter()
        .find(|p| {
            p["devices"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["peak"].as_u64().unwrap_or(0) >= 3 * GIB))
        })
        .expect("the holder in the tree");
    assert_ne!(holder["pid"], sh["pid"]);
    // Its parent is in the tree (sh, or the pyenv shim sh started).
    assert!(
        procs.iter().any(|p| p["pid"] == holder["ppid"]),
        "{procs:?}"
    );
    assert!(r["run"]["tree_peaks"][0]["peak_used"].as_u64().unwrap() >= 3 * GIB);
    // The holder exited with the job: its memory came back before the end.
    assert!(!finding_ids(&r).contains(&"held-after-exit".to_string()));
}

mod exit_status_and_death_by_signal_pass_through {
    use super::*;

    #[test]
    fn exit_status() {
        let tmp = tempfile::tempdir().unwrap();
        let (o, r) = run_job(tmp.path(), &["--json"], &["sh", "-c", "exit 7"]);
        assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
        assert_eq!(r["run"]["exit"]["code"], 7);
        // --json prints the same report on stdout.
        let printed: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
        assert_eq!(printed["kind"], "run");
        assert_eq!(printed["run"]["exit"], r["run"]["exit"]);
    }

    #[test]
    fn death_by_signal() {
        let tmp = tempfile::tempdir().unwrap();
        let (o, r) = run_job(tmp.path(), &[], &["sh", "-c", "kill -9 $$"]);
        assert_eq!(o.status.code(), Some(128 + 9), "{}", stderr(&o));
        assert_eq!(r["run"]["exit"]["signal_name"], "SIGKILL");
        let errors = r["run"]["errors"].as_array().unwrap();
        assert!(errors.iter().any(|e| e["kind"] == "killed"), "{errors:?}");
    }
}

#[test]
fn a_benign_job_has_no_finding_and_fail_on_keeps_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let samples = tmp.path().join("samples.jsonl");
    let job = python_job(&[
        "ctx:0",
        "mark:load",
        "alloc:2048",
        "sleep:300",
        "free",
        "mark:release_model",
        "sleep:300",
    ]);
    let mut extra = vec!["--fail-on", "info", "--samples"];
    let s = samples.display().to_string();
    extra.push(&s);
    let (o, r) = run_job(tmp.path(), &extra, &refs(&job));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(finding_ids(&r), Vec::<String>::new(), "{}", stderr(&o));
    assert!(marker_kinds(&r).contains(&"release".to_string()));
    // The JSONL stream: a header first, then readings, the markers, the end.
    let text = std::fs::read_to_string(&samples).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "header");
    assert_eq!(lines[0]["devices"].as_array().unwrap().len(), 2);
    let types: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    for t in ["memory", "process", "start", "marker", "end"] {
        assert!(types.contains(&t), "no {t} line in {types:?}");
    }
    assert_eq!(lines.last().unwrap()["type"], "end");
    // The report follows the published schema.
    let text = std::fs::read_to_string(tmp.path().join("run.json")).unwrap();
    common::reports::assert_valid_report_json(&text);
    // Markdown and HTML come from the same model.
    for ext in ["md", "html"] {
        let p = tmp.path().join(format!("run.{ext}"));
        let o = vramdoc()
            .arg("report")
            .arg(tmp.path().join("run.json"))
            .args(["--format", ext, "--out"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("Processes of the job"), "{ext}");
        assert!(text.contains("release model"), "{ext}");
    }
}

#[test]
fn sim_hold_children_are_found_through_the_process_lists() {
    // `vramdoc sim hold` as a grandchild (through sh): memory on GPU 1 attributed to it.
    let tmp = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let script = format!("{exe} sim hold --device 1 --size 2GiB --duration 600ms; exit 0");
    let (o, r) = run_job(tmp.path(), &[], &["sh", "-c", &script]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(job_peaks(&r).iter().any(|(d, p)| *d == 1 && *p >= 2 * GIB));
}

/// `vramdoc --sim 1x16GiB run --samples SAMPLES -- sleep 30`, process lists every 50 ms.
fn run_sleep_30(samples: &Path, stderr: std::process::Stdio) -> std::process::Child {
    // vramdoc's temporary files (its private box) beside the samples: the tests that kill
    // vramdoc leave nothing in the system's temp dir.
    vramdoc()
        .env("TMPDIR", samples.parent().expect("a directory"))
        .args([
            "--sim",
            "1x16GiB",
            "run",
            "--process-period",
            "50ms",
            "--samples",
        ])
        .arg(samples)
        .args(["--", "sleep", "30"])
        .stderr(stderr)
        .spawn()
        .unwrap()
}

#[test]
fn sigterm_to_vramdoc_is_forwarded_to_the_command() {
    let tmp = tempfile::tempdir().unwrap();
    let samples = tmp.path().join("s.jsonl");
    let mut child = common::KillOnDrop(run_sleep_30(&samples, std::process::Stdio::piped()));
    // Wait until the tree shows `sleep` (it has started), then signal vramdoc only.
    let started =
        |p: &PathBuf| std::fs::read_to_string(p).is_ok_and(|t| t.contains("\"name\":\"sleep\""));
    eventually(SECS_10, "sleep shows up in the samples", || {
        started(&samples)
    });
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
}

/// vramdoc's own failures use the codes a shell uses: 127 not found, 126 not executable,
/// 125 anything else of vramdoc's (and the command never starts).
mod vramdoc_own_failures_use_125_126_127 {
    use super::*;

    /// `vramdoc ARGS`: its exit code and stderr.
    fn vramdoc_run(args: &[&str]) -> (Option<i32>, String) {
        let o = vramdoc().args(args).output().unwrap();
        (o.status.code(), stderr(&o))
    }

    #[test]
    fn command_not_found_is_127() {
        let (code, err) = vramdoc_run(&[
            "--sim",
            "1x16GiB",
            "run",
            "--",
            "/nonexistent/vramdoc-test-cmd",
        ]);
        assert_eq!(code, Some(127), "{err}");
        assert!(err.contains("command not found"), "{err}");
    }

    #[test]
    fn found_not_executable_is_126() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("script.sh");
        std::fs::write(&f, "echo hi\n").unwrap();
        let (code, err) = vramdoc_run(&["--sim", "1x16GiB", "run", "--", f.to_str().unwrap()]);
        assert_eq!(code, Some(126), "{err}");
    }

    /// A bad --out is refused before anything runs: the command never starts.
    #[test]
    fn bad_out_is_125_and_nothing_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let witness = tmp.path().join("ran");
        let (code, err) = vramdoc_run(&[
            "--sim",
            "1x16GiB",
            "run",
            "--out",
            "report.txt",
            "--",
            "touch",
            witness.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(125), "{err}");
        assert!(!witness.exists());
    }

    #[test]
    fn bad_flag_value_is_125() {
        let (code, err) = vramdoc_run(&["run", "--period", "fast", "--", "true"]);
        assert_eq!(code, Some(125), "{err}");
    }

    #[test]
    fn unknown_flag_is_125() {
        let (code, err) = vramdoc_run(&["run", "--no-such-flag", "--", "true"]);
        assert_eq!(code, Some(125), "{err}");
    }

    #[test]
    fn no_gpu_is_125() {
        let (code, err) = vramdoc_run(&["--backend", "sim", "run", "--", "true"]);
        assert_eq!(code, Some(125), "{err}");
    }
}

#[test]
fn mark_needs_the_variable_and_appends_one_line() {
    let o = vramdoc()
        .args(["mark", "load"])
        .env_remove("VRAMDOC_MARKERS")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("VRAMDOC_MARKERS is not set"),
        "{}",
        stderr(&o)
    );
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("m");
    std::fs::write(&f, "").unwrap();
    for t in [["release", "model"], ["load", "next"]] {
        let o = vramdoc()
            .env("VRAMDOC_MARKERS", &f)
            .arg("mark")
            .args(t)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "release model\nload next\n"
    );
}

#[test]
fn vllm_and_torchrun_lines_become_error_events() {
    let tmp = tempfile::tempdir().unwrap();
    let script = "echo 'ValueError: Free memory on device cuda:1 (1.50/16.00 GiB) on startup is \
less than desired GPU memory utilization (0.9, 14.40 GiB).' >&2; \
printf 'torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\\n====\\n\
Root Cause (first observed failure):\\n[0]:\\n  rank      : 1 (local_rank: 1)\\n\
  exitcode  : -9 (pid: 4242)\\n====\\n' >&2; exit 1";
    let (o, r) = run_job(tmp.path(), &[], &["sh", "-c", script]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let errors = r["run"]["errors"].as_array().unwrap();
    let kinds: Vec<&str> = errors.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["vllm-free-memory", "child-failed", "child-exit"],
        "{errors:?}"
    );
    assert_eq!(errors[0]["device"], 1);
    assert_eq!(errors[0]["requested"], (14.4 * GIB as f64).round() as u64);
    assert_eq!(errors[2]["line"], "torchrun rank 1: exitcode -9 (pid 4242)");
}

#[test]
fn the_jsonl_stream_survives_vramdoc_being_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let samples = tmp.path().join("s.jsonl");
    let mut child = common::KillOnDrop(run_sleep_30(&samples, std::process::Stdio::null()));
    let sleep_pid = |p: &PathBuf| -> Option<i64> {
        let text = std::fs::read_to_string(p).ok()?;
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["type"] == "start" && v["name"] == "sleep")
            .and_then(|v| v["pid"].as_i64())
    };
    let pid = eventually(SECS_10, "sleep's start line in the samples", || {
        sleep_pid(&samples)
    });
    child.kill().unwrap();
    let _ = child.wait();
    // SAFETY: kill(2) on the `sleep` this test started (orphaned by the SIGKILL of vramdoc).
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    // Every line written so far is whole JSON; the header comes first.
    let text = std::fs::read_to_string(&samples).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "header");
    assert!(lines.iter().any(|l| l["type"] == "memory"));
    assert!(
        !lines.iter().any(|l| l["type"] == "end"),
        "vramdoc never got to its end"
    );
}

#[test]
fn memory_kept_by_a_stuck_driver_after_the_job_is_held_after_exit() {
    // A shared box whose driver keeps the memory of exited processes (`keep_dead` fault).
    let tmp = tempfile::tempdir().unwrap();
    let boxdir = common::fresh_box("1x16GiB");
    common::sim_fault(boxdir.path(), &["--keep-dead"]);
    let out = tmp.path().join("run.json");
    let job = python_job(&["ctx:0", "alloc:2048", "sleep:200"]);
    let o = vramdoc()
        .env("VRAMDOC_SIM_DIR", boxdir.path())
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .args([
            "run",
            "--process-period",
            "100ms",
            "--fail-on",
            "warn",
            "--out",
        ])
        .arg(&out)
        .arg("--")
        .args(&job)
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ids = finding_ids(&r);
    assert!(
        ids.contains(&"held-after-exit".to_string()),
        "{ids:?} {}",
        stderr(&o)
    );
    // The job itself exited 0; --fail-on turns that into 1.
    assert_eq!(r["run"]["exit"]["code"], 0);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// `vramdoc run --junit DIR/junit.xml --out DIR/run.html --out DIR/run.json [extra] -- cmd…`
/// with `GITHUB_STEP_SUMMARY` set to DIR/summary.md. Returns the output, the JUnit XML, the
/// job summary and the report.
fn run_ci(dir: &Path, extra: &[&str], cmd: &[&str]) -> (Output, String, String, Value) {
    let o = vramdoc()
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
        .args(["--sim", "2x16GiB", "run", "--process-period", "100ms"])
        .arg("--junit")
        .arg(dir.join("junit.xml"))
        .arg("--out")
        .arg(dir.join("run.html"))
        .arg("--out")
        .arg(dir.join("run.json"))
        .args(extra)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run vramdoc");
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap_or_default();
    let report = serde_json::from_str(&read("run.json")).unwrap_or(Value::Null);
    (o, read("junit.xml"), read("summary.md"), report)
}

/// The single `<testcase>` of a `vramdoc run` JUnit document: (name, failure message,
/// failure text), the failure parts `None` when it passed.
fn junit_case(xml: &str) -> (String, Option<String>, Option<String>) {
    let doc = roxmltree::Document::parse(xml).expect("well-formed JUnit XML");
    let cases: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 1, "one test case per run: {xml}");
    let c = cases[0];
    assert_eq!(c.attribute("classname"), Some("vramdoc.run"));
    let failure = c.children().find(|n| n.has_tag_name("failure"));
    (
        c.attribute("name").unwrap_or_default().to_string(),
        failure.and_then(|f| f.attribute("message").map(str::to_string)),
        failure.and_then(|f| f.text().map(str::to_string)),
    )
}

mod junit_and_job_summary_for_a_failed_command_and_for_a_passing_one {
    use super::*;

    /// The command fails: a failure naming its status, with the evidence and the HTML report.
    #[test]
    fn failed_command() {
        let tmp = tempfile::tempdir().unwrap();
        let (o, xml, summary, r) = run_ci(
            tmp.path(),
            &[],
            &[
                "sh",
                "-c",
                "echo 'CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 3",
            ],
        );
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        let (name, message, text) = junit_case(&xml);
        assert!(name.starts_with("sh -c"), "{name}");
        assert_eq!(message.as_deref(), Some("the command exited 3"), "{xml}");
        let text = text.unwrap_or_default();
        assert!(text.contains("cuda-oom"), "{text}");
        assert!(text.contains("run.html"), "{text}");
        // The job summary is the run's Markdown report, appended.
        assert!(summary.contains("## vramdoc run report"), "{summary}");
        assert_eq!(r["run"]["exit"]["code"], 3);
    }

    /// A clean command and no --fail-on: the case passes; a summary already there is kept.
    #[test]
    fn passing_command() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("summary.md"), "# earlier step\n").unwrap();
        let (o, xml, summary, _) = run_ci(tmp.path(), &[], &["true"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let (name, message, _) = junit_case(&xml);
        assert_eq!(name, "true");
        assert_eq!(message, None, "{xml}");
        assert!(
            summary.starts_with("# earlier step\n## vramdoc run report"),
            "{summary}"
        );
    }
}

#[test]
fn junit_fails_the_case_when_findings_reach_fail_on() {
    let tmp = tempfile::tempdir().unwrap();
    let job = python_job(&["ctx:0", "ctx:1", "alloc:4096", "sleep:600"]);
    let (o, xml, _, r) = run_ci(tmp.path(), &["--fail-on", "warn"], &refs(&job));
    assert!(
        finding_ids(&r).contains(&"stray-context".to_string()),
        "{}",
        stderr(&o)
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (_, message, text) = junit_case(&xml);
    let message = message.expect("a failure");
    assert!(message.contains("--fail-on warn"), "{message}");
    assert!(message.contains("stray-context"), "{message}");
    assert!(text.unwrap_or_default().contains("stray-context"));
}

#[test]
fn an_existing_junit_file_is_refused_before_the_command_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let junit = tmp.path().join("junit.xml");
    std::fs::write(&junit, "keep").unwrap();
    let witness = tmp.path().join("ran");
    let o = vramdoc()
        .args(["--sim", "1x16GiB", "run", "--junit"])
        .arg(&junit)
        .args(["--", "touch"])
        .arg(&witness)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert!(!witness.exists());
    assert_eq!(std::fs::read_to_string(&junit).unwrap(), "keep");
}

#[test]
fn long_periods_are_accepted_up_to_a_minute() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run.json");
    let o = vramdoc()
        .args([
            "--sim",
            "1x16GiB",
            "run",
            "--period",
            "60s",
            "--process-period",
            "60s",
        ])
        .arg("--out")
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(r["run"]["period_us"], 60_000_000);
    let o = vramdoc()
        .args(["--sim", "1x16GiB", "run", "--period", "61s", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("60s"), "{}", stderr(&o));
}

#[test]
fn every_memory_sample_is_streamed_as_it_is_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let samples = tmp.path().join("s.jsonl");
    let s = samples.display().to_string();
    let job = python_job(&["ctx:1", "alloc:1024", "sleep:300", "free", "sleep:200"]);
    let (o, r) = run_job(tmp.path(), &["--samples", &s], &refs(&job));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&samples).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["type"], "end");
    let memory: Vec<&Value> = lines.iter().filter(|l| l["type"] == "memory").collect();
    // The report's series of GPU 1 is the sampler's rounds plus the tracker's and markers'
    // readings; the stream has a line for each of them (no query failed on this box) up to
    // its `end` line (rounds after it are in the report only).
    let series = r["run"]["timeline"]["devices"][1]["samples"]
        .as_array()
        .unwrap();
    assert!(series.len() > 20, "{} samples at 20ms", series.len());
    let end = lines.last().unwrap()["t_ms"].as_f64().unwrap();
    let before = |t: f64| series.iter().filter(|s| s[0].as_f64().unwrap() < t).count();
    assert!(memory.len() <= series.len());
    assert!(
        memory.len() >= before(end - 100.0),
        "{} lines, {} samples before the end",
        memory.len(),
        before(end - 100.0)
    );
    let mut streamed: Vec<(f64, u64)> = memory
        .iter()
        .map(|m| (m["t_ms"].as_f64().unwrap(), m["used"][1].as_u64().unwrap()))
        .collect();
    streamed.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The 1 GiB allocation shows in the stream, as in the report.
    assert!(streamed.iter().any(|(_, u)| *u >= GIB), "{streamed:?}");
    // Every line is whole JSON, in time order within the sampler's own lines.
    assert!(streamed.windows(2).all(|w| w[0].0 <= w[1].0));
}

#[test]
fn the_summary_escapes_control_characters_from_paths_and_error_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out\x1b]0;pwned\x07");
    std::fs::create_dir(&dir).unwrap();
    let o = vramdoc()
        .args(["--sim", "1x16GiB", "run", "--out"])
        .arg(dir.join("run.json"))
        .args([
            "--",
            "sh",
            "-c",
            "printf 'CUDA out of memory. Tried to allocate 2.00 GiB \\033[2J\\n' >&2; exit 1",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    // The command's own stderr passes through untouched; vramdoc's summary after it is safe.
    let summary = &err[err.find("\nvramdoc: `").expect("a summary")..];
    assert!(!summary.contains('\x1b'), "{summary:?}");
    assert!(!summary.contains('\x07'), "{summary:?}");
    assert!(summary.contains("report: "), "{summary}");
}

#[test]
fn a_job_in_its_own_pid_namespace_is_attributed_to_the_tree_through_host_pids() {
    common::skip::require!("unshare", common::skip::unshare());
    let wrap = ["unshare", "--pid", "--fork", "--mount-proc"];
    // A shared box made by `sim init`: its broker hands out host PIDs, as the real driver
    // (which has no PID-namespace support) reports them.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    let o = vramdoc()
        .args(["sim", "init", "1x16GiB", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "sim init: {}", stderr(&o));
    let out = tmp.path().join("run.json");
    let o = vramdoc()
        .env("VRAMDOC_SIM_DIR", &dir)
        .args(["run", "--process-period", "100ms", "--out"])
        .arg(&out)
        .arg("--")
        .args(wrap)
        .arg(env!("CARGO_BIN_EXE_vramdoc"))
        .args(["sim", "hold", "--size", "1GiB", "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let procs = r["run"]["processes"].as_array().unwrap();
    // The holder is PID 1 of its namespace; NVML listed it under its host PID, which the
    // recorder found in the tree (NSpid has both levels).
    let holder = procs
        .iter()
        .find(|p| p["nspid"].as_array().is_some_and(|n| n.len() == 2))
        .unwrap_or_else(|| panic!("no namespaced process in the tree: {procs:?}"));
    assert_eq!(holder["nspid"][1], 1, "{holder}");
    assert_eq!(holder["nspid"][0], holder["pid"], "{holder}");
    assert!(
        holder["devices"][0]["peak"].as_u64().unwrap_or(0) >= GIB,
        "{holder}"
    );
    assert!(r["run"]["tree_peaks"][0]["peak_used"].as_u64().unwrap() >= GIB);
    let unshare = procs.iter().find(|p| p["name"] == "unshare").unwrap();
    assert_eq!(holder["ppid"], unshare["pid"]);
}
