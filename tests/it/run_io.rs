//! The I/O of `vramdoc run -- CMD` (issue 19 items 3–7, issue 17, issue 15): the job's
//! stdout and stderr pass through byte for byte, also to a slow reader and after `kill -9`
//! of vramdoc; both are read for error lines; markers in bursts; outputs naming one file;
//! arguments that are not UTF-8; the zero-copy pass-through between pipes (issue 34).

use crate::common;

use crate::common::read_report as report;
use common::poll::{eventually, SECS_10};
use common::{vramdoc, KillOnDrop};
use serde_json::Value;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
GPU 0 has a total capacity of 15.00 GiB of which 1.00 GiB is free.";

fn run_cmd(out: &Path) -> Command {
    let mut c = vramdoc();
    c.args([
        "--sim",
        "1x16GiB",
        "run",
        "--process-period",
        "100ms",
        "--out",
    ])
    .arg(out);
    c
}

fn error_kinds(r: &Value) -> Vec<String> {
    r["run"]["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["kind"].as_str().map(String::from))
        .collect()
}

fn markers(r: &Value) -> Vec<(String, String)> {
    r["run"]["timeline"]["markers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["kind"].as_str().unwrap_or("").to_string(),
                m["label"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Reads `r` to EOF on a thread, sleeping `pause` after every 4 KiB (a pager, a slow ssh).
fn slow_reader(
    mut r: impl Read + Send + 'static,
    pause: Duration,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => return all,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
            std::thread::sleep(pause);
        }
    })
}

/// Item 3: with vramdoc's stderr read slowly, every trailing line of the job and its
/// out-of-memory line reach the terminal and the report (before: ~3,200 lines and the OOM
/// line were lost from both).
#[test]
fn a_slow_reader_gets_every_line_and_the_report_the_oom_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let script = format!(
        "i=0; while [ $i -lt 4000 ]; do echo \"training step $i of the job, loss 0.1234\" >&2; \
         i=$((i+1)); done; echo '{OOM}' >&2; echo last line >&2; exit 1"
    );
    let mut child = KillOnDrop(
        run_cmd(&out)
            // Its private box in the test's directory: nothing left in the system's.
            .env("TMPDIR", tmp.path())
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let reader = slow_reader(child.stderr.take().unwrap(), Duration::from_millis(50));
    let status = child.wait().unwrap();
    let seen = String::from_utf8(reader.join().unwrap()).unwrap();
    assert_eq!(status.code(), Some(1), "{seen}");
    let steps = seen
        .lines()
        .filter(|l| l.starts_with("training step"))
        .count();
    assert_eq!(steps, 4000, "every line reached the terminal");
    assert!(seen.contains("training step 3999 of the job"));
    assert!(seen.contains(OOM) && seen.contains("last line\n"));
    // vramdoc's summary comes after the job's last line.
    let summary = seen.find("vramdoc: ").expect("the summary");
    assert!(
        summary > seen.find("last line").unwrap(),
        "{}",
        &seen[summary..]
    );
    let r = report(&out);
    assert!(error_kinds(&r).contains(&"cuda-oom".to_string()), "{r}");
    let tail = r["run"]["stderr_tail"].to_string();
    assert!(tail.contains("last line"), "{tail}");
    assert!(seen.contains("ERROR out-of-memory"), "{seen}");
}

/// Item 6: `kill -9` of vramdoc leaves the job its stdout and stderr: it writes all of its
/// output (no SIGPIPE), which still reaches the terminal, and the marker directory is
/// removed once the output ends (before: the job died at its next write, the directory
/// stayed).
#[test]
fn kill_9_of_vramdoc_leaves_the_job_its_output_and_removes_the_marker_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let flag = tmp.path().join("finished");
    let where_ = tmp.path().join("markers-at");
    let script = format!(
        "echo \"$VRAMDOC_MARKERS\" > {w}; echo started; \
         while [ ! -e {go} ]; do sleep 0.05; done; \
         i=0; while [ $i -lt 300 ]; do echo out $i; echo err $i >&2; i=$((i+1)); done; \
         echo done > {f}",
        w = where_.display(),
        go = tmp.path().join("go").display(),
        f = flag.display()
    );
    let mut child = KillOnDrop(
        run_cmd(&out)
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out_reader = slow_reader(child.stdout.take().unwrap(), Duration::ZERO);
    let err_reader = slow_reader(child.stderr.take().unwrap(), Duration::ZERO);
    let marker_file = eventually(SECS_10, "the job started", || {
        std::fs::read_to_string(&where_)
            .ok()
            .filter(|s| s.ends_with('\n'))
    });
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    std::fs::write(tmp.path().join("go"), b"").unwrap();
    eventually(SECS_10, "the job wrote all of its output", || flag.exists());
    let stdout = String::from_utf8(out_reader.join().unwrap()).unwrap();
    let stderr = String::from_utf8(err_reader.join().unwrap()).unwrap();
    assert!(
        stdout.starts_with("started\nout 0\n") && stdout.ends_with("out 299\n"),
        "{stdout}"
    );
    assert!(
        stderr.contains("err 0\n") && stderr.ends_with("err 299\n"),
        "{stderr}"
    );
    let dir = Path::new(marker_file.trim())
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
    eventually(SECS_10, "the marker directory removed", || !dir.exists());
}

/// Issue 17 and 15: stdout is passed through byte for byte (binary-safe) and read for error
/// lines as stderr is (vLLM logs to stdout); an error line that is not an allocation
/// failure is an `error` marker, not `oom`.
#[test]
fn stdout_passes_through_byte_for_byte_and_its_error_lines_are_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let bin = tmp.path().join("bytes");
    let all: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    std::fs::write(&bin, &all).unwrap();
    let script = format!(
        "cat {bin}; echo; echo '(EngineCore pid=4242) {OOM}'; \
         echo '[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)'",
        bin = bin.display()
    );
    let o = run_cmd(&out)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(&o.stdout[..all.len()], &all[..], "binary output unchanged");
    let rest = String::from_utf8_lossy(&o.stdout[all.len()..]).into_owned();
    assert!(
        rest.contains("(EngineCore pid=4242) torch.OutOfMemoryError"),
        "{rest}"
    );
    let r = report(&out);
    let kinds = error_kinds(&r);
    assert!(kinds.contains(&"cuda-oom".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"nccl-watchdog".to_string()), "{kinds:?}");
    let m = markers(&r);
    let kind_of = |needle: &str| {
        m.iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(k, _)| k.clone())
    };
    assert_eq!(
        kind_of("CUDA out of memory").as_deref(),
        Some("oom"),
        "{m:?}"
    );
    assert_eq!(
        kind_of("Watchdog caught").as_deref(),
        Some("error"),
        "{m:?}"
    );
}

/// Item 4: a burst of 100k markers is recorded up to the documented cap and the rest are
/// counted in the report (before: quadratic, 20 s after the job ended).
#[test]
fn a_burst_of_markers_is_capped_with_a_counted_note() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let o = run_cmd(&out)
        .args([
            "--",
            "sh",
            "-c",
            "seq 100000 | sed 's/^/step /' >> \"$VRAMDOC_MARKERS\"",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let m = markers(&report(&out));
    let steps = m.iter().filter(|(_, l)| l.starts_with("step ")).count();
    assert_eq!(steps, 10_000, "the cap");
    assert!(
        m.iter()
            .any(|(_, l)| l == "90000 markers dropped (vramdoc records the first 10000 of a run)"),
        "{:?}",
        m.last()
    );
}

/// Item 4: SIGTERM reaches vramdoc's job and vramdoc ends, with its report, while the job
/// floods the marker file (before: busy for minutes, SIGTERM ignored).
#[test]
fn sigterm_during_a_marker_flood_ends_the_run_with_a_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let where_ = tmp.path().join("markers-at");
    let script = format!(
        "echo \"$VRAMDOC_MARKERS\" > {}; while :; do seq 20000 >> \"$VRAMDOC_MARKERS\"; done",
        where_.display()
    );
    let mut child = KillOnDrop(
        run_cmd(&out)
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let file = eventually(SECS_10, "the job started", || {
        std::fs::read_to_string(&where_)
            .ok()
            .filter(|s| s.ends_with('\n'))
    });
    eventually(SECS_10, "a million markers written", || {
        std::fs::metadata(file.trim()).is_ok_and(|m| m.len() > 7_000_000)
    });
    // SAFETY: signalling the vramdoc this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = eventually(Duration::from_secs(60), "vramdoc ended", || {
        child.try_wait().ok().flatten()
    });
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let m = markers(&report(&out));
    let numbered = m.iter().filter(|(k, _)| k == "marker").count();
    assert!(numbered <= 10_001, "{numbered}");
    assert!(m.iter().any(|(k, _)| k == "signal"), "{m:?}");
}

/// Item 5: two outputs naming one file (any spelling, a symbolic link, a hard link) are
/// refused before the command starts: one line naming both flags, run's usage status 125,
/// replay's and scan's 2 (before: the job ran, then vramdoc exited 125 and a report was
/// lost).
#[test]
fn outputs_naming_one_file_are_refused_before_the_command_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::os::unix::fs::symlink(d.join("sub"), d.join("link")).unwrap();
    let ran = d.join("ran");
    let touch = format!("touch {}", ran.display());
    let p = |s: &str| d.join(s).display().to_string();
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (vec!["--samples".into(), p("r.json")], "--out", "--samples"),
        (vec!["--junit".into(), p("./r.json")], "--out", "--junit"),
        (
            vec!["--scenario-out".into(), p("sub/../r.json")],
            "--out",
            "--scenario-out",
        ),
        (
            vec![
                "--junit".into(),
                p("link/j.xml"),
                "--samples".into(),
                p("sub/j.xml"),
            ],
            "--samples",
            "--junit",
        ),
    ];
    for (extra, a, b) in cases {
        let o = run_cmd(&d.join("r.json"))
            .args(&extra)
            .args(["--", "sh", "-c", &touch])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{extra:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(a) && err.contains(b) && err.contains("same file"),
            "{err}"
        );
        assert!(!ran.exists(), "{extra:?}: the command ran");
    }
    let o = vramdoc()
        .args(["--sim", "1x16GiB", "replay", "multi-size-oom", "--out"])
        .arg(d.join("x.json"))
        .arg("--junit")
        .arg(d.join("x.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--out") && err.contains("--junit") && err.contains("same file"),
        "{err}"
    );
    std::os::unix::fs::symlink(d.join("s.json"), d.join("s.prom")).unwrap();
    let o = vramdoc()
        .args(["--sim", "1x16GiB", "scan", "--out"])
        .arg(d.join("s.json"))
        .arg("--prom")
        .arg(d.join("s.prom"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--prom") && err.contains("same file"), "{err}");
    assert!(!d.join("s.json").exists());
}

/// Item 7: an argument that is not UTF-8 is passed to the command as the OS gave it and
/// shown escaped in the report (before: exit 125, the command never ran).
#[test]
fn a_non_utf8_argument_is_passed_as_given_and_shown_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let got = tmp.path().join("got");
    let script = format!("printf '%s' \"$1\" > {}", got.display());
    let arg = std::ffi::OsStr::from_bytes(b"caf\xe9-\xff");
    let o = run_cmd(&out)
        .args(["--", "sh", "-c", &script, "sh"])
        .arg(arg)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read(&got).unwrap(), b"caf\xe9-\xff");
    let r = report(&out);
    let cmd: Vec<&str> = r["run"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(cmd.last(), Some(&"caf\\xe9-\\xff"), "{cmd:?}");
}

/// `run` of `sh -c OUTER WORKER` with process rounds every `process_period`, where OUTER runs
/// WORKER under `CUDA_VISIBLE_DEVICES=1` and WORKER prints an OOM line with Ray's `(pid=$$)`
/// prefix on stdout: the run's first error, after checking that the run passed and the line
/// reached vramdoc's stdout.
fn oom_of_a_printer(process_period: &str, outer: &str, worker: &str) -> serde_json::Value {
    let boxdir = common::fresh_box("2x16GiB");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let o = common::on_box(boxdir.path())
        .args([
            "run",
            "--period",
            "20ms",
            "--process-period",
            process_period,
        ])
        .arg("--out")
        .arg(&out)
        .args(["--", "sh", "-c", outer, worker])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("(pid="));
    let r = report(&out);
    let e = r["run"]["errors"][0].clone();
    assert_eq!(e["kind"], "cuda-oom", "{r}");
    e
}

/// Issue 15/17: an OOM line a worker prints on **stdout** with Ray's `(pid=N)` prefix is mapped
/// through that worker's own `CUDA_VISIBLE_DEVICES=1` (physical GPU 1), as stderr lines are.
#[test]
fn a_stdout_line_with_a_pid_prefix_is_mapped_through_the_printer_s_variables() {
    let e = oom_of_a_printer(
        "100ms",
        "env CUDA_VISIBLE_DEVICES=1 sh -c \"$0\"; sleep 0.3",
        &format!("sleep 1; echo \"(pid=$$) {OOM}\"; sleep 0.5"),
    );
    assert_eq!(e["device"], 1, "{e}");
}

/// The same with a printer that starts after the only process round (`--process-period 60s`):
/// the tree is read again when a line names a process it does not hold yet, so the line is
/// still mapped through the printer's own variables, not the command's.
#[test]
fn a_printer_that_started_since_the_last_process_round_is_found_by_its_pid() {
    let e = oom_of_a_printer(
        "60s",
        "sleep 0.5; env CUDA_VISIBLE_DEVICES=1 sh -c \"$0\"; sleep 0.3",
        &format!("echo \"(pid=$$) {OOM}\"; sleep 0.5"),
    );
    assert_eq!(e["device"], 1, "{e}");
}

/// A reader of vramdoc's stdout that goes away (`| head -1`) gives the job EPIPE/SIGPIPE on
/// that stream, as without vramdoc: the job ends and its status is passed on.
#[test]
fn a_reader_that_goes_away_gives_the_job_sigpipe_as_without_vramdoc() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let mut child = KillOnDrop(
        run_cmd(&out)
            .args(["--", "yes"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut first = [0u8; 2];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap(); // and closed
    assert_eq!(&first, b"y\n");
    let status = eventually(Duration::from_secs(30), "vramdoc ended", || {
        child.try_wait().ok().flatten()
    });
    assert_eq!(status.code(), Some(128 + libc::SIGPIPE));
    assert_eq!(report(&out)["run"]["exit"]["signal_name"], "SIGPIPE");
}

/// A background process of the job that keeps the output pipes open does not hold the
/// report back: vramdoc writes it and exits while that process still runs.
#[test]
fn a_background_process_holding_the_pipes_does_not_hold_the_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let pidfile = tmp.path().join("bg");
    let script = format!(
        "sleep 30 & echo $! > {}; echo '{OOM}' >&2; exit 0",
        pidfile.display()
    );
    let log = std::fs::File::create(tmp.path().join("log")).unwrap();
    let mut child = KillOnDrop(
        run_cmd(&out)
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let status = eventually(Duration::from_secs(30), "vramdoc ended", || {
        child.try_wait().ok().flatten()
    });
    let bg: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: signal 0 to, then SIGKILL of, the sleep this test's job started.
    let alive = unsafe { libc::kill(bg, 0) } == 0;
    unsafe { libc::kill(bg, libc::SIGKILL) };
    assert!(alive, "the background process outlived vramdoc");
    assert_eq!(status.code(), Some(0));
    assert!(error_kinds(&report(&out)).contains(&"cuda-oom".to_string()));
}

/// Issue 29 item 11: under `--json`, standard output is the JSON report alone; the command's
/// own standard output goes to standard error (docs/run.md "Output").
#[test]
fn run_json_keeps_stdout_for_the_report_and_moves_the_jobs_stdout_to_stderr() {
    let o = vramdoc()
        .args(["--sim", "16GiB", "run", "--json", "--period", "20ms", "--"])
        // Printed words that are not in the command line (which the report holds).
        .args([
            "sh",
            "-c",
            "printf 'job-%s\\n' says-hello; printf 'job-%s\\n' err-line >&2",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("stdout is not the JSON report alone ({e}):\n{out}"));
    assert_eq!(v["kind"], "run", "{v}");
    assert!(!out.contains("job-says-hello"), "{out}");
    assert!(err.contains("job-says-hello"), "{err}");
    assert!(err.contains("job-err-line"), "{err}");
    // Without --json the command's stdout stays on stdout.
    let o = vramdoc()
        .args(["--sim", "16GiB", "run", "--period", "20ms", "--"])
        .args(["sh", "-c", "printf 'job-%s\\n' says-hello"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("job-says-hello"));
}

/// Runs `c` under a child subreaper (prctl `PR_SET_CHILD_SUBREAPER`, a Python harness), in a
/// process group of its own; once it has returned, prints on its last stdout line its exit
/// status and every process left behind: re-parented to the harness (orphans of vramdoc,
/// alive or zombies the harness never reaps, so nothing can go unseen), or in vramdoc's
/// process group.
fn under_subreaper(c: &Command) -> Command {
    const HARNESS: &str = r#"
import ctypes, json, os, subprocess, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
p = subprocess.Popen(sys.argv[1:], process_group=0)
code = p.wait()
me, left = os.getpid(), []
for d in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{d}/stat").read()
    except OSError:
        continue
    f = stat[stat.rindex(")") + 2:].split()
    if int(f[1]) == me or int(f[2]) == p.pid:
        left.append(f"{d} ({stat[stat.index('(') + 1:stat.rindex(')')]}) state {f[0]}")
print(json.dumps({"code": code, "left": left}))
"#;
    let mut h = Command::new("python3");
    h.arg("-c")
        .arg(HARNESS)
        .arg(c.get_program())
        .args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => h.env(k, v),
            None => h.env_remove(k),
        };
    }
    h
}

/// Issue 39: nothing of vramdoc's outlives `run` — its output pump (`[exe]`) was left in
/// its process group, a zombie under PID 1 for seconds. Checked without timing: under a
/// subreaper, whatever vramdoc leaves is the harness's to see once vramdoc has returned.
/// A command that exits 0, one that fails with `--json`, and one not found.
#[test]
fn nothing_of_vramdoc_s_outlives_run() {
    for (name, extra, cmd, code) in [
        (
            "exit 0",
            &[][..],
            &["sh", "-c", "echo hi; echo there >&2"][..],
            0,
        ),
        (
            "exit 3, --json",
            &["--json"][..],
            &["sh", "-c", "exit 3"][..],
            3,
        ),
        (
            "not found",
            &[][..],
            &["vramdoc-no-such-command-39"][..],
            127,
        ),
    ] {
        let mut c = vramdoc();
        c.args(["--sim", "1x16GiB", "run"])
            .args(extra)
            .arg("--")
            .args(cmd);
        let o = under_subreaper(&c).stderr(Stdio::piped()).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        let last = text.lines().last().unwrap_or("");
        let v: Value = serde_json::from_str(last).unwrap_or_else(|e| {
            panic!(
                "{name}: the harness's line ({e}): {text}\n{}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
        assert_eq!(
            v["code"],
            code,
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(v["left"], serde_json::json!([]), "{name}: left behind");
    }
}

/// `count` bytes of numbered lines with a few binary bytes after each (every byte value).
fn numbered_bytes(prefix: &str, count: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(count + 64);
    let mut i = 0u32;
    while v.len() < count {
        v.extend_from_slice(format!("{prefix} {i:07}\n").as_bytes());
        v.extend((0..=255u8).skip((i % 251) as usize).take(5));
        i += 1;
    }
    v
}

/// Issue 34: where vramdoc's stdout and stderr are pipes the pass-through process moves the
/// job's bytes with `tee`/`splice` (src/job/splice.rs): megabytes of numbered lines and
/// binary bytes on both streams arrive unchanged and in order, and an out-of-memory line
/// written after them still reaches the report.
#[test]
fn megabytes_through_pipes_arrive_unchanged_and_a_late_oom_line_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let (o_file, e_file) = (tmp.path().join("o"), tmp.path().join("e"));
    let o_bytes = numbered_bytes("stdout line", 3 << 20);
    let e_bytes = numbered_bytes("stderr line", 2 << 20);
    std::fs::write(&o_file, &o_bytes).unwrap();
    std::fs::write(&e_file, &e_bytes).unwrap();
    let script = format!(
        "cat {o}; cat {e} >&2; echo; echo '{OOM}' >&2; echo last-of-stdout",
        o = o_file.display(),
        e = e_file.display()
    );
    let o = run_cmd(&out)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let mut want = o_bytes.clone();
    want.extend_from_slice(b"\nlast-of-stdout\n");
    assert!(o.stdout == want, "stdout: {} bytes", o.stdout.len());
    assert!(o.stderr.len() > e_bytes.len(), "{} bytes", o.stderr.len());
    assert!(o.stderr[..e_bytes.len()] == e_bytes[..], "stderr in order");
    let rest = String::from_utf8_lossy(&o.stderr[e_bytes.len()..]).into_owned();
    assert!(rest.starts_with(&format!("{OOM}\n")), "{rest}");
    assert!(error_kinds(&report(&out)).contains(&"cuda-oom".to_string()));
}

/// Issue 34: `| head -c 100` on either stream still gives the job SIGPIPE through the
/// zero-copy path, as without vramdoc.
#[test]
fn a_reader_that_takes_100_bytes_gives_the_job_sigpipe_on_stdout_and_on_stderr() {
    for on_stderr in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("r.json");
        let job = if on_stderr {
            "exec yes 'a line of the job' >&2"
        } else {
            "exec yes 'a line of the job'"
        };
        let mut c = run_cmd(&out);
        c.args(["--", "sh", "-c", job]).stdin(Stdio::null());
        if on_stderr {
            c.stdout(Stdio::null()).stderr(Stdio::piped());
        } else {
            c.stdout(Stdio::piped()).stderr(Stdio::null());
        }
        let mut child = KillOnDrop(c.spawn().unwrap());
        let mut first = [0u8; 100];
        if on_stderr {
            child.stderr.take().unwrap().read_exact(&mut first).unwrap();
        } else {
            child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        }
        assert!(first.starts_with(b"a line of the job\na line"));
        let status = eventually(Duration::from_secs(30), "vramdoc ended", || {
            child.try_wait().ok().flatten()
        });
        assert_eq!(
            status.code(),
            Some(128 + libc::SIGPIPE),
            "stderr: {on_stderr}"
        );
        assert_eq!(report(&out)["run"]["exit"]["signal_name"], "SIGPIPE");
    }
}

/// Issue 34: a reader of vramdoc's stdout that reads nothing until the command has ended
/// does not stop the command from ending (the pass-through process buffers up to its lead,
/// as before the zero-copy path), the report gets the out-of-memory line written last, and
/// every byte arrives, in order, once the reader reads.
#[test]
fn a_stalled_reader_lets_the_command_end_and_then_gets_every_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let (o_file, done) = (tmp.path().join("o"), tmp.path().join("done"));
    let o_bytes = numbered_bytes("stdout line", 3 << 20);
    std::fs::write(&o_file, &o_bytes).unwrap();
    let script = format!(
        "cat {o}; echo '{OOM}'; touch {d}",
        o = o_file.display(),
        d = done.display()
    );
    let mut child = KillOnDrop(
        run_cmd(&out)
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut stdout = child.stdout.take().unwrap();
    eventually(Duration::from_secs(60), "the command ended", || {
        done.exists()
    });
    let mut got = Vec::new();
    stdout.read_to_end(&mut got).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let mut want = o_bytes;
    want.extend_from_slice(format!("{OOM}\n").as_bytes());
    assert!(got == want, "{} bytes of {}", got.len(), want.len());
    assert!(error_kinds(&report(&out)).contains(&"cuda-oom".to_string()));
}
