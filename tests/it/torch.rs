//! Unmodified PyTorch from PyPI (2.15.0+cu132: CUDA runtime 13.2) on the simulated driver:
//! its CUDA runtime initialises on crates/simgpu's `libcuda.so.1`, PyTorch's own caching
//! allocator charges the box, its own out-of-memory error quotes the box's numbers, its
//! snapshot is read by `vramdoc explain`, and `vramdoc run` of the plain PyTorch failure
//! scripts in examples/torch names them. `scripts/test` installs PyTorch into a cache once
//! and passes its interpreter as `VRAMDOC_TORCH_PYTHON` (tests/README.md).
//!
//! Jobs that the test reads the box from between steps wait for a line on their standard
//! input: every verdict follows an event, never a sleep.

use crate::common::skip::require;
use crate::common::{simgpu_lib_dir, vramdoc, KillOnDrop};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The variable naming a Python interpreter that imports torch 2.15.
const PYTHON_VAR: &str = "VRAMDOC_TORCH_PYTHON";
const MIB: u64 = 1 << 20;

fn python() -> Result<PathBuf, String> {
    let p = std::env::var_os(PYTHON_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| {
            format!("{PYTHON_VAR} is not set (scripts/test installs PyTorch and sets it)")
        })?;
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{PYTHON_VAR}={}: no such file", p.display()))
    }
}

/// A box of two H100s on an R580 driver (CUDA 13.0), which PyTorch's CUDA 13.2 runtime
/// accepts (minor-version compatibility).
fn torch_box() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = vramdoc_sim::profile::DriverProfile::parse("580.65.06").expect("profile");
    let opts = vramdoc_sim::InitOptions {
        pid_view: vramdoc_sim::profile::pid_view_of(&p.driver_version),
        driver_version: p.driver_version,
        cuda_driver_version: p.cuda_driver_version,
        ..Default::default()
    };
    vramdoc_sim::SimBox::create(dir.path(), "2xh100", &opts).expect("create box");
    dir
}

fn probe() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/torch_jobs/probe.py")
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/torch")
        .join(name)
}

/// A Python job on the box: the simulated libraries first on its loader path.
fn job(py: &Path, dir: &Path) -> Command {
    let mut c = Command::new(py);
    c.env("VRAMDOC_SIM_DIR", dir)
        .env("LD_LIBRARY_PATH", simgpu_lib_dir())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("PYTORCH_CUDA_ALLOC_CONF");
    c
}

/// A running probe whose steps the test reads line by line and releases one by one.
struct Stepped {
    child: KillOnDrop,
    lines: BufReader<std::process::ChildStdout>,
}

impl Stepped {
    fn start(mut c: Command) -> Stepped {
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = KillOnDrop(c.spawn().expect("start python"));
        let out = child.0.stdout.take().expect("stdout");
        Stepped {
            child,
            lines: BufReader::new(out),
        }
    }

    /// The next JSON line the job printed (it then waits for [`Stepped::go`]).
    fn next(&mut self) -> serde_json::Value {
        let mut line = String::new();
        let n = self
            .lines
            .read_line(&mut line)
            .expect("read the job's line");
        assert!(n > 0, "the job ended before its next step");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    fn go(&mut self) {
        let stdin = self.child.0.stdin.as_mut().expect("stdin");
        stdin.write_all(b"\n").expect("release the job");
        stdin.flush().expect("flush");
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    fn finish(mut self) {
        drop(self.child.0.stdin.take());
        let st = self.child.0.wait().expect("wait");
        assert!(st.success(), "the job failed: {st}");
    }
}

/// The bytes NVML lists for `pid` on physical GPU `index` of the box (`None`: not listed).
fn listed(dir: &Path, index: u32, pid: u32) -> Option<u64> {
    let sim = vramdoc_sim::SimBox::open(dir).expect("open box");
    sim.processes(index)
        .expect("processes")
        .into_iter()
        .find(|p| p.pid == pid)
        .map(|p| p.used)
}

fn context(dir: &Path) -> u64 {
    vramdoc_sim::SimBox::open(dir).expect("open box").devices()[0].context_overhead
}

#[test]
fn pytorch_initialises_and_charges_no_context_until_a_tensor_is_made() {
    let py = require!("torch", python());
    let b = torch_box();
    let mut j = Stepped::start({
        let mut c = job(&py, b.path());
        c.arg(probe()).arg("init");
        c
    });
    let v = j.next();
    assert_eq!(v["available"], true, "{v}");
    assert_eq!(v["count"], 2, "{v}");
    // is_available() made no context: a real driver lists no memory for the process.
    for gpu in 0..2 {
        assert_eq!(listed(b.path(), gpu, j.pid()), None, "GPU {gpu}");
    }
    j.go();
    j.finish();
}

#[test]
fn memory_reserved_is_what_nvml_lists_for_the_process_less_its_context() {
    let py = require!("torch", python());
    let b = torch_box();
    let mut j = Stepped::start({
        let mut c = job(&py, b.path());
        c.arg(probe()).arg("sizes");
        c
    });
    let v = j.next();
    let reserved = v["reserved"].as_u64().expect("reserved");
    let allocated = v["allocated"].as_u64().expect("allocated");
    // PyTorch's own rounding: a 1000-byte tensor takes a 512-byte block of a 2 MiB segment,
    // 1 GiB one segment of its own; reserved covers allocated.
    assert!(reserved >= allocated && allocated > 1 << 30, "{v}");
    assert_eq!(
        listed(b.path(), 1, j.pid()),
        Some(context(b.path()) + reserved),
        "NVML's usage of the process on GPU 1 is PyTorch's reserved plus the context"
    );
    assert_eq!(listed(b.path(), 0, j.pid()), None, "nothing on GPU 0");
    j.go();
    j.finish();
}

#[test]
fn cublas_and_cudnn_run_a_linear_a_convolution_and_an_mlps_training_steps() {
    let py = require!("torch", python());
    let b = torch_box();
    let mut j = Stepped::start({
        let mut c = job(&py, b.path());
        c.arg(probe()).arg("train");
        c
    });
    let v = j.next();
    assert_eq!(v["linear"], serde_json::json!([64, 128]), "{v}");
    assert_eq!(v["grad"], serde_json::json!([128, 256]), "{v}");
    assert_eq!(v["conv"], serde_json::json!([2, 8, 30, 30]), "{v}");
    // cuBLAS's workspace and the optimiser's state come from PyTorch's allocator; cuBLASLt
    // and cuDNN also allocate for themselves with cudaMalloc, outside PyTorch: NVML lists the
    // process with the context, what PyTorch reserved, and theirs.
    let reserved = v["reserved"].as_u64().expect("reserved");
    assert!(
        reserved > v["allocated"].as_u64().expect("allocated"),
        "{v}"
    );
    let used = listed(b.path(), 0, j.pid()).expect("listed on GPU 0");
    assert!(
        used >= context(b.path()) + reserved,
        "{used} < context + {reserved}"
    );
    j.go();
    j.finish();
}

#[test]
fn expandable_segments_map_physical_memory_and_give_it_back() {
    let py = require!("torch", python());
    let b = torch_box();
    let mut j = Stepped::start({
        let mut c = job(&py, b.path());
        c.env("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
            .arg(probe())
            .arg("expandable");
        c
    });
    let grown = j.next()["reserved"].as_u64().expect("reserved");
    // Expandable segments grow in 20 MiB pages: 1 GiB + 12345 bytes rounds up to whole pages.
    assert!(grown > 1 << 30 && grown.is_multiple_of(2 * MIB), "{grown}");
    assert_eq!(
        listed(b.path(), 0, j.pid()),
        Some(context(b.path()) + grown)
    );
    j.go();
    let shrunk = j.next()["reserved"].as_u64().expect("reserved");
    assert_eq!(shrunk, 0);
    assert_eq!(listed(b.path(), 0, j.pid()), Some(context(b.path())));
    j.go();
    j.finish();
}

#[test]
fn pytorchs_own_out_of_memory_error_quotes_the_box_and_explain_names_the_line() {
    let py = require!("torch", python());
    let b = torch_box();
    let out_dir = tempfile::tempdir().expect("tempdir");
    let o = job(&py, b.path())
        .arg(probe())
        .arg("oom")
        .arg(out_dir.path())
        .output()
        .expect("run python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    let msg = v["message"].as_str().expect("message");
    let total = vramdoc_sim::SimBox::open(b.path()).expect("box").devices()[0].total;
    let gib = |x: u64| format!("{:.2} GiB", x as f64 / (1u64 << 30) as f64);
    assert!(
        msg.starts_with("CUDA out of memory. Tried to allocate 8.00 GiB."),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("total capacity of {} of which", gib(total))),
        "PyTorch's total is the box's: {msg}"
    );
    let held = v["held"].as_u64().expect("held");
    assert!(
        msg.contains(&format!(
            "{} is allocated by PyTorch",
            gib((held * 8) << 30)
        )),
        "{msg}"
    );
    // The snapshot PyTorch dumped at its OOM: explain reads it and names the script's line.
    let snap = out_dir.path().join("snap.pickle");
    let e = vramdoc()
        .arg("explain")
        .arg(&snap)
        .arg("--json")
        .output()
        .expect("explain");
    let text = String::from_utf8_lossy(&e.stdout);
    assert!(
        text.contains("probe.py:"),
        "a site is the script's Python line: {text}"
    );
    assert!(
        !text.contains(".so.1.0:") && !text.contains("libtorch"),
        "no native frame is a site: {text}"
    );
}

#[test]
fn run_torch_memory_joins_pytorchs_own_snapshot_at_its_oom() {
    let py = require!("torch", python());
    let b = torch_box();
    let out = b.path().join("job.json");
    let o = vramdoc()
        .env("VRAMDOC_SIM_DIR", b.path())
        .env("VRAMDOC_PIDNS", "host")
        .env("VRAMDOC_SIMGPU_DIR", simgpu_lib_dir())
        .args(["run", "--torch-memory", "--out"])
        .arg(&out)
        .arg("--")
        .arg(&py)
        .arg(probe())
        .arg("fill")
        .output()
        .expect("vramdoc run");
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = crate::common::read_report(&out);
    let oom = r["run"]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["id"] == "out-of-memory")
        .unwrap_or_else(|| panic!("no out-of-memory finding: {r}"))
        .clone();
    let evidence: Vec<String> = oom["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e["label"].as_str().unwrap_or(""),
                e["value"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert!(
        evidence
            .iter()
            .any(|e| e.starts_with("PyTorch (cuda:0) top site: <module> (")
                && e.contains("probe.py:")),
        "the snapshot PyTorch dumped at its OOM names the script's line: {evidence:#?}"
    );
    assert!(
        b.path().join("job.torch-memory.pickle").is_file(),
        "the snapshot is kept"
    );
}

/// `vramdoc run` of `script` on the box (with `--fixed` for the twin): its JSON report.
fn run_example(dir: &Path, py: &Path, script: &str, fixed: bool) -> serde_json::Value {
    let out = dir.join(format!("{script}-{fixed}.json"));
    let mut c = vramdoc();
    c.env("VRAMDOC_SIM_DIR", dir)
        .env("VRAMDOC_PIDNS", "host")
        .env("VRAMDOC_SIMGPU_DIR", simgpu_lib_dir())
        .args(["run", "--out"])
        .arg(&out)
        .arg("--")
        .arg(py)
        .arg(example(script));
    if fixed {
        c.arg("--fixed");
    }
    let o = c.output().expect("vramdoc run");
    let r = std::fs::read(&out)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| panic!("no report: {}", String::from_utf8_lossy(&o.stderr)));
    r
}

fn finding_ids(r: &serde_json::Value) -> Vec<String> {
    r["run"]["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings array: {r}"))
        .iter()
        .filter_map(|f| f["id"].as_str().map(str::to_string))
        .collect()
}

fn exit_status(r: &serde_json::Value) -> i64 {
    r["run"]["exit"]["status"].as_i64().expect("exit status")
}

#[test]
fn run_names_a_stray_context_of_an_unmodified_pytorch_job_and_not_its_fix() {
    let py = require!("torch", python());
    let b = torch_box();
    let bug = run_example(b.path(), &py, "stray_cuda0.py", false);
    assert_eq!(exit_status(&bug), 0, "{bug}");
    assert!(
        finding_ids(&bug).contains(&"stray-context".to_string()),
        "{bug}"
    );
    let fixed = run_example(b.path(), &py, "stray_cuda0.py", true);
    assert_eq!(exit_status(&fixed), 0);
    assert!(finding_ids(&fixed).is_empty(), "{fixed}");
}

#[test]
fn run_names_a_sharded_model_not_released_and_not_its_fix() {
    let py = require!("torch", python());
    let b = torch_box();
    let bug = run_example(b.path(), &py, "sharded_release.py", false);
    let ids = finding_ids(&bug);
    assert!(ids.contains(&"not-released".to_string()), "{ids:?}");
    assert!(
        ids.contains(&"out-of-memory".to_string()),
        "the next model: {ids:?}"
    );
    assert!(!ids.contains(&"overcommit".to_string()), "{ids:?}");
    let fixed = run_example(b.path(), &py, "sharded_release.py", true);
    assert_eq!(exit_status(&fixed), 0, "{fixed}");
    assert!(finding_ids(&fixed).is_empty(), "{fixed}");
}

/// The script's phase markers are stamped at the earliest time they can have been written
/// (never after the load that follows them), and the per-process series has the device's
/// resolution where the job is the only process on its GPUs (process lists are read every
/// 500 ms, the loads take 300 ms).
#[test]
fn run_names_a_model_loaded_twice_and_not_its_single_load() {
    let py = require!("torch", python());
    let b = torch_box();
    let bug = run_example(b.path(), &py, "double_load.py", false);
    assert_eq!(exit_status(&bug), 0, "{bug}");
    let ids = finding_ids(&bug);
    assert!(ids.contains(&"double-load".to_string()), "{ids:?}");
    let fixed = run_example(b.path(), &py, "double_load.py", true);
    assert_eq!(exit_status(&fixed), 0, "{fixed}");
    assert!(finding_ids(&fixed).is_empty(), "{fixed}");
}

/// `vramdoc replay --expect FP --fix ARGS -- CMD` on a `--sim` box made for today's PyTorch.
fn replay_script(py: &Path, args: &[&str], script: &str) -> (i32, serde_json::Value) {
    let o = vramdoc()
        .env_remove("VRAMDOC_SIM_DIR")
        .env("VRAMDOC_PIDNS", "host")
        .env("VRAMDOC_SIMGPU_DIR", simgpu_lib_dir())
        .args(["--sim", "2xh100@580", "replay", "--json"])
        .args(args)
        .arg("--")
        .arg(py)
        .arg(example(script))
        .output()
        .expect("vramdoc replay");
    let r = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&o.stderr));
    });
    (o.status.code().unwrap_or(-1), r)
}

#[test]
fn replay_runs_a_users_own_reproduction_as_a_scenario_with_its_fix() {
    let py = require!("torch", python());
    let (code, r) = replay_script(
        &py,
        &["--expect", "stray-context", "--fix=--fixed"],
        "stray_cuda0.py",
    );
    let runs = r["replay"]["runs"].as_array().expect("runs");
    let verdicts: Vec<(&str, &str)> = runs
        .iter()
        .map(|v| {
            (
                v["variant"].as_str().unwrap(),
                v["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(verdicts, [("bug", "reproduced"), ("fix", "fixed")], "{r}");
    assert_eq!(code, 0, "{r}");
    assert_eq!(runs[0]["scenario"], "script:stray_cuda0.py");
    // A fingerprint the bug does not show: the bug variant is unexpected, exit 1.
    let (code, r) = replay_script(&py, &["--expect", "double-load"], "stray_cuda0.py");
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["replay"]["runs"][0]["verdict"], "unexpected", "{r}");
}

#[test]
fn whatif_runs_the_users_command_on_each_card_and_pytorch_decides_where_it_fits() {
    let py = require!("torch", python());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/torch_jobs/fixed_footprint.py");
    let o = vramdoc()
        .env_remove("VRAMDOC_SIM_DIR")
        .env("VRAMDOC_PIDNS", "host")
        .env("VRAMDOC_SIMGPU_DIR", simgpu_lib_dir())
        .args(["whatif", "--json", "--on", "t4,a100-80gb", "--"])
        .arg(&py)
        .arg(&script)
        .arg("20")
        .output()
        .expect("vramdoc whatif");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let w: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let t4 = &w["boxes"][0];
    assert_eq!(t4["spec"], "t4", "{w}");
    assert_eq!(t4["fits"], false, "{w}");
    assert_eq!(t4["verdict"], "out-of-memory", "{w}");
    // PyTorch's own message, with the card's numbers.
    let err = t4["error"].as_str().unwrap_or_default();
    assert!(
        err.starts_with("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
        "{err}"
    );
    let a100 = &w["boxes"][1];
    assert_eq!(a100["fits"], true, "{w}");
    let peak = a100["gpus"][0]["peak"].as_u64().expect("peak");
    assert!(peak >= 20 << 30, "{peak}");
    assert_eq!(w["smallest_fit"], "a100-80gb", "{w}");
    assert!(
        w["command"]
            .as_str()
            .is_some_and(|c| c.contains("fixed_footprint.py")),
        "{w}"
    );
}

#[test]
fn the_oom_scripts_fail_with_pytorchs_own_error_and_their_twins_run_clean() {
    let py = require!("torch", python());
    let b = torch_box();
    // Each names its own fingerprint beside PyTorch's out-of-memory error: the staircase of
    // growing sizes, and the one claim of a utilisation budget that leaves too little.
    for (script, fingerprint) in [
        ("multi_size_oom.py", "growth-without-release"),
        ("overcommit.py", "overcommit"),
    ] {
        let bug = run_example(b.path(), &py, script, false);
        assert_ne!(exit_status(&bug), 0, "{script}: {bug}");
        let ids = finding_ids(&bug);
        assert!(
            ids.contains(&"out-of-memory".to_string()),
            "{script}: {bug}"
        );
        assert!(ids.contains(&fingerprint.to_string()), "{script}: {ids:?}");
        let line = bug["run"]["errors"][0]["line"].as_str().unwrap_or_default();
        assert!(
            line.starts_with("torch.OutOfMemoryError: CUDA out of memory."),
            "{line}"
        );
        let fixed = run_example(b.path(), &py, script, true);
        assert_eq!(exit_status(&fixed), 0, "{script} --fixed: {fixed}");
        assert!(finding_ids(&fixed).is_empty(), "{script} --fixed: {fixed}");
    }
}

#[test]
fn the_cuda_calls_of_a_pytorch_job_are_recorded_with_what_was_not_served() {
    let py = require!("torch", python());
    let b = torch_box();
    let mut j = Stepped::start({
        let mut c = job(&py, b.path());
        c.arg(probe()).arg("sizes");
        c
    });
    j.next();
    j.go();
    let pid = j.pid();
    j.finish();
    let o = vramdoc()
        .env("VRAMDOC_SIM_DIR", b.path())
        .args(["sim", "status", "--calls", "--json"])
        .output()
        .expect("sim status");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let c = v["cuda_clients"]
        .as_array()
        .expect("cuda_clients")
        .iter()
        .find(|c| c["pid"] == pid)
        .unwrap_or_else(|| panic!("no CUDA client {pid}: {v}"))
        .clone();
    // The runtime's private tables were asked for; the runtime resolved its entry points.
    assert!(c["calls"]["cuGetExportTable"].as_u64() > Some(0), "{c}");
    assert!(
        c["calls"]["cuGetProcAddress_v2"].as_u64() > Some(100),
        "{c}"
    );
    assert!(
        c["calls"]["cudart:integrity_check"].as_u64() > Some(0),
        "{c}"
    );
    // PyTorch's allocator made its segments with cuMemAlloc.
    assert!(c["calls"]["cuMemAlloc_v2"].as_u64() > Some(0), "{c}");
    // What it asked for and did not get is there, by name and version.
    let missing: Vec<&str> = c["missing_entry_points"]
        .as_array()
        .expect("missing")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    assert!(
        missing
            .iter()
            .any(|m| m.starts_with("cuGraphAddKernelNode@")),
        "{missing:?}"
    );
}
