//! Issue 9, one test per class, through the CLI as a user (or an attacker) would mount it:
//! untrusted scenario files, secrets in command lines, terminal escapes, signals and orphans,
//! outputs checked before work, broken standard output, exit codes, the simulated box under
//! misuse. docs/security.md describes the trust boundaries these tests hold.

use crate::common;

use common::hold::Holder;
use common::poll::{eventually, SECS_10};
use common::{fresh_box, on_box, scenarios, vramdoc};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

fn run(mut c: Command) -> Output {
    c.output().expect("run vramdoc")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const HEAD: &str = r#"
id = "t"
title = "T"
description = "d"
source = "s"
devices = 1
"#;

const STEPS: &str = r#"
[[steps]]
id = "ctx"
op = "context"
device = 0

[[steps]]
id = "load"
op = "alloc"
tag = "w"
device = 0
size = "10%"
"#;

const VARIANTS: &str = r#"
[[variants]]
name = "bug"
[[variants.expect]]
check = "completes"
"#;

/// Replay a scenario file with `body` on a fresh box; no variant may run (the check is
/// static), so no worker pid may be printed.
fn replay_refused(name: &str, body: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = scenarios::write(dir.path(), name, body);
    let b = fresh_box("1x16GiB");
    let mut c = on_box(b.path());
    c.arg("replay").arg(&path);
    let out = run(c);
    let err = text(&out.stderr);
    assert!(!err.contains("worker pid"), "a variant ran: {err}");
    (out.status.code().unwrap_or(-1), err)
}

/// `[env]` of a scenario or variant is an allow-list: anything else is refused when the file
/// is parsed, before a worker runs.
mod scenario_env_outside_the_allow_list_is_refused_at_parse_time {
    use super::*;

    #[test]
    fn in_the_scenario() {
        for var in [
            "LD_PRELOAD = \"/tmp/evil.so\"",
            "PATH = \"/tmp\"",
            "VRAMDOC_SIM_DIR = \"/tmp/other\"",
            "PYTHONPATH = \"/tmp\"",
            "CUDA_INJECTION64_PATH = \"/tmp/evil.so\"",
            "NCCL_NET_PLUGIN = \"evil\"",
        ] {
            let body = format!("{HEAD}\n[env]\n{var}\n{STEPS}{VARIANTS}");
            let (code, err) = replay_refused("env.toml", &body);
            assert_eq!(code, 2, "{var}: {err}");
            assert!(
                err.contains("env.toml:9:1: environment variable"),
                "{var}: {err}"
            );
            assert!(err.contains("docs/security.md"), "{var}: {err}");
        }
    }

    #[test]
    fn in_a_variant() {
        let body = format!(
            "{HEAD}{STEPS}{VARIANTS}\n[[variants]]\nname = \"fix\"\nenv = {{ LD_LIBRARY_PATH = \"/x\" }}\n[[variants.expect]]\ncheck = \"completes\"\n"
        );
        let (code, err) = replay_refused("v.toml", &body);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("\"LD_LIBRARY_PATH\" may not be set"), "{err}");
    }

    /// The allow-list is not a deny-all: allowed names pass the parser and the replay runs.
    #[test]
    fn allowed_names_pass() {
        let body = format!("{HEAD}\n[env]\nPYTORCH_CUDA_ALLOC_CONF = \"expandable_segments:True\"\nOMP_NUM_THREADS = \"1\"\n{STEPS}{VARIANTS}");
        let dir = tempfile::tempdir().unwrap();
        let p = scenarios::write(dir.path(), "ok.toml", &body);
        let b = fresh_box("1x16GiB");
        let mut c = on_box(b.path());
        c.arg("replay").arg(&p);
        let out = run(c);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}

/// Mistakes a parser can see without running anything: exit 2, `file:line` and what is wrong.
mod static_scenario_mistakes_are_parse_errors_with_positions {
    use super::*;

    #[test]
    fn free_before_alloc() {
        let free_first = format!(
            "{HEAD}{STEPS}\n[[steps]]\nid = \"drop\"\nop = \"free\"\ntag = \"nope\"\n{VARIANTS}"
        );
        let (code, err) = replay_refused("a.toml", &free_first);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("a.toml:2"), "{err}");
        assert!(
            err.contains("frees tag \"nope\" before any step allocates it"),
            "{err}"
        );
    }

    #[test]
    fn tag_allocated_twice() {
        let dup = format!("{HEAD}{STEPS}\n[[steps]]\nid = \"again\"\nop = \"alloc\"\ntag = \"w\"\ndevice = 0\nsize = \"1%\"\n{VARIANTS}");
        let (code, err) = replay_refused("b.toml", &dup);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("tag \"w\" is already allocated"), "{err}");
    }

    #[test]
    fn group_not_initialised() {
        let group = STEPS.replace("size = \"10%\"", "size = \"10%\"\ngroup = \"pg\"");
        let (code, err) = replay_refused("c.toml", &format!("{HEAD}{group}{VARIANTS}"));
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("group \"pg\" is not initialised"), "{err}");
    }

    /// Sizes may refer to each other in any order; a cycle is an error naming both.
    #[test]
    fn sizes_in_any_order_but_not_in_a_cycle() {
        let sizes = "\n[sizes]\nb = \"0.5*a\"\na = \"20%\"\n";
        let ok = format!(
            "{HEAD}{sizes}{}{VARIANTS}",
            STEPS.replace("\"10%\"", "\"b\"")
        );
        let out_ok = vramdoc::scenario::parse_scenario("s.toml", &ok);
        assert!(out_ok.is_ok(), "{out_ok:?}");
        let cyc = "\n[sizes]\nb = \"0.5*a\"\na = \"2*b\"\n";
        let (code, err) = replay_refused("d.toml", &format!("{HEAD}{cyc}{STEPS}{VARIANTS}"));
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("sizes a, b refer to each other in a cycle"),
            "{err}"
        );
    }

    #[test]
    fn nul_byte() {
        let nul =
            format!("{HEAD}{STEPS}{VARIANTS}").replace("title = \"T\"", "title = \"T\\u0000\"");
        let (code, err) = replay_refused("e.toml", &nul);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("e.toml:3:") && err.contains("NUL byte"),
            "{err}"
        );
    }
}

/// Input files that are not what a scenario or report file is: one clear line, exit 2.
mod fifo_device_huge_and_non_utf8_inputs_are_clear_errors {
    use super::*;

    /// A FIFO nobody writes to (or /dev/zero) would block or fill memory on a plain read.
    #[test]
    fn fifo_and_device() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("scenario.toml");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let b = fresh_box("1x16GiB");
        for (cmd, path) in [
            ("replay", fifo.as_path()),
            ("replay", Path::new("/dev/zero")),
            ("report", fifo.as_path()),
            ("report", Path::new("/dev/zero")),
        ] {
            let mut c = on_box(b.path());
            c.arg(cmd).arg(path);
            if cmd == "report" {
                c.args(["--format", "md"]);
            }
            let out = run(c);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {path:?}: {err}");
            assert!(err.contains("not a regular file"), "{cmd} {path:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{cmd} {path:?}: {err}");
        }
    }

    #[test]
    fn huge() {
        let dir = tempfile::tempdir().unwrap();
        let b = fresh_box("1x16GiB");
        let big = dir.path().join("big.toml");
        std::fs::write(
            &big,
            vec![b'#'; (vramdoc::input::MAX_SCENARIO_BYTES + 1) as usize],
        )
        .unwrap();
        let mut c = on_box(b.path());
        c.arg("replay").arg(&big);
        let out = run(c);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("larger than the 1048576-byte limit"), "{err}");
    }

    #[test]
    fn non_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let latin1 = dir.path().join("latin1.json");
        std::fs::write(&latin1, b"{\n  \"a\": \"caf\xe9\"\n}").unwrap();
        let mut c = vramdoc();
        c.arg("report").arg(&latin1).args(["--format", "md"]);
        let out = run(c);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("latin1.json:2:12: not UTF-8"), "{err}");
    }
}

#[test]
fn secrets_and_escapes_of_a_process_never_reach_the_table_or_the_files() {
    let b = fresh_box("1x16GiB");
    // A program whose name carries an escape sequence (comm comes from the exec'd path).
    let bin = tempfile::tempdir().unwrap();
    let evil = bin.path().join("ev\x1b[2Jil");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_vramdoc"), &evil).unwrap();
    let mut c = Command::new(&evil);
    c.env("VRAMDOC_SIM_DIR", b.path()).args([
        "sim",
        "hold",
        "--size",
        "1GiB",
        "--",
        "python",
        "serve.py",
        "-H",
        "Authorization: Bearer S3cretBearer",
        "--db-pass=S3cretPass",
        "--api-key",
        "S3cretKey",
        "--config={\"token\": \"S3cretJson\"}",
        "https://bob:S3cretUrl@db/x?access_token=S3cretQuery",
        "\x1b]0;pwned\x07\r",
    ]);
    let _h = Holder::spawn(c);
    let out_dir = tempfile::tempdir().unwrap();
    let md = out_dir.path().join("r.md");
    let json = out_dir.path().join("r.json");
    let mut c = on_box(b.path());
    c.arg("scan").arg("--out").arg(&md).arg("--out").arg(&json);
    let out = run(c);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let mut c = on_box(b.path());
    c.args(["scan", "--json"]);
    let stdout_json = text(&run(c).stdout);
    let files = [
        ("table", table.clone()),
        ("json stdout", stdout_json),
        ("md", std::fs::read_to_string(&md).unwrap()),
        ("json", std::fs::read_to_string(&json).unwrap()),
    ];
    for (what, body) in &files {
        assert!(!body.contains("S3cret"), "{what} leaks a secret:\n{body}");
        assert!(body.contains("«redacted»"), "{what}");
        assert!(
            !body.contains('\x1b') && !body.contains('\x07'),
            "{what} has raw escapes"
        );
    }
    assert!(
        files[1].1.contains("Authorization: Bearer «redacted»"),
        "{}",
        files[1].1
    );
    assert!(
        table.contains("\\x1b"),
        "escapes are shown, visibly: {table}"
    );
}

#[test]
fn scenario_and_variant_names_cannot_drive_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "{HEAD}{}{}",
        STEPS.replace(
            "id = \"load\"",
            "id = \"load\"\nlabel = \"\\u001b[31mred\\r\""
        ),
        VARIANTS.replace(
            "name = \"bug\"",
            "name = \"bug\\u001b[2J\\u009b1m\"\nkind = \"bug\""
        )
    );
    let p = scenarios::write(dir.path(), "esc.toml", &body);
    let b = fresh_box("1x16GiB");
    let mut c = on_box(b.path());
    c.arg("replay").arg(&p);
    let out = run(c);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        !all.contains('\x1b') && !all.contains('\u{9b}') && !all.contains('\r'),
        "{all:?}"
    );
    assert!(all.contains("bug\\x1b[2J\\x9b1m"), "{all}");
    // An error quoting file content is neutralised too.
    let p = scenarios::write(dir.path(), "bad.toml", "id = \"x\u{1b}[2J\"\n");
    let mut c = on_box(b.path());
    c.arg("replay").arg(&p);
    let out = run(c);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !text(&out.stderr).contains('\x1b'),
        "{:?}",
        text(&out.stderr)
    );
}

const SLOW: &str = r#"
id = "slow"
title = "Slow"
description = "d"
source = "s"
devices = 1

[[neighbours]]
device = 0
size = "5%"

[[steps]]
id = "ctx"
op = "context"
device = 0

[[steps]]
id = "load"
op = "alloc"
tag = "w"
device = 0
size = "10%"

[[steps]]
id = "wait"
op = "pause"
duration = "60s"
only = ["fix"]

[[variants]]
name = "bug"
kind = "bug"
[[variants.expect]]
check = "completes"

[[variants]]
name = "fix"
[[variants.expect]]
check = "completes"
"#;

/// Start a replay in the background; returns it and the pid of the worker of `variant`.
/// The caller waits for the returned child.
#[allow(clippy::zombie_processes)]
fn replay_until_worker(
    box_dir: &Path,
    scenario: &Path,
    out: &Path,
    variant: &str,
) -> (Child, u32, BufReader<std::process::ChildStderr>) {
    let mut c = on_box(box_dir);
    c.arg("replay")
        .arg(scenario)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let needle = format!("/{variant}: worker pid ");
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            let _ = child.wait();
            panic!("replay ended before the {variant} worker started");
        }
        if let Some(i) = line.find(&needle) {
            let pid = line[i + needle.len()..].trim().parse().unwrap();
            return (child, pid, err);
        }
    }
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Wait (at most 10 s) until `pid` is gone: `what` it is, for the failure message.
fn wait_gone(pid: u32, what: &str) {
    eventually(SECS_10, &format!("{what} (PID {pid}) to exit"), || {
        !alive(pid)
    });
}

fn box_processes(dir: &Path) -> usize {
    let mut c = on_box(dir);
    c.args(["sim", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&run(c).stdout).unwrap();
    v["processes"].as_object().map_or(0, |m| m.len())
}

/// SIGTERM or SIGHUP to `vramdoc replay` while the `fix` worker runs: exit 1, the worker
/// stopped, both variants in the report (the second interrupted), nothing left on the box.
fn signal_stops_replay_with_a_partial_report(sig: i32) {
    let dir = tempfile::tempdir().unwrap();
    let scn = scenarios::write(dir.path(), "slow.toml", SLOW);
    let b = fresh_box("1x16GiB");
    let out = dir.path().join(format!("r{sig}.json"));
    let (mut child, worker, _err) = replay_until_worker(b.path(), &scn, &out, "fix");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "signal {sig}");
    wait_gone(worker, "the worker");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let runs = r["replay"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "signal {sig}: both variants reported");
    assert!(
        runs[1]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("interrupted"),
        "signal {sig}: {}",
        runs[1]
    );
    assert_eq!(
        box_processes(b.path()),
        0,
        "signal {sig}: no memory stays held"
    );
}

mod sigterm_and_sighup_stop_replay_like_ctrl_c_with_a_partial_report {
    use super::*;

    #[test]
    fn sigterm() {
        signal_stops_replay_with_a_partial_report(libc::SIGTERM);
    }

    #[test]
    fn sighup() {
        signal_stops_replay_with_a_partial_report(libc::SIGHUP);
    }
}

#[test]
fn sigkill_of_the_monitor_takes_worker_and_neighbours_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let scn = scenarios::write(dir.path(), "slow.toml", SLOW);
    let b = fresh_box("1x16GiB");
    let out = dir.path().join("r.json");
    let (mut child, worker, _err) = replay_until_worker(b.path(), &scn, &out, "fix");
    // The worker pid is printed at spawn; wait until it holds memory next to the neighbour.
    eventually(SECS_10, "worker and neighbour hold memory", || {
        box_processes(b.path()) >= 2
    });
    child.kill().unwrap();
    child.wait().unwrap();
    wait_gone(worker, "the orphaned worker");
    eventually(
        SECS_10,
        "no process holds memory on the box (a neighbour still did)",
        || box_processes(b.path()) == 0,
    );
}

#[test]
fn private_box_is_removed_when_a_command_is_terminated() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = vramdoc();
    c.env("TMPDIR", tmp.path())
        .args(["--sim", "1x16GiB", "sim", "hold", "--size", "1GiB"]);
    let mut h = Holder::spawn(c);
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        1,
        "the private box"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(h.child.id() as i32, libc::SIGTERM) };
    let status = h.child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "box left behind"
    );
}

/// Issue 39 item 7: a vramdoc killed with SIGKILL (nothing of it runs) left its private box
/// in the temp dir for good; the next vramdoc that makes one reclaims it, and leaves the box
/// of a live vramdoc and a `sim init` box alone.
#[test]
fn the_private_box_of_a_killed_vramdoc_is_reclaimed_by_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let hold = |tmp: &Path| {
        let mut c = vramdoc();
        c.env("TMPDIR", tmp)
            .args(["--sim", "1x16GiB", "sim", "hold", "--size", "1GiB"]);
        Holder::spawn(c)
    };
    let boxes = |tmp: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let mut killed = hold(tmp.path());
    let orphan = boxes(tmp.path());
    assert_eq!(orphan.len(), 1);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    assert_eq!(
        boxes(tmp.path()),
        orphan,
        "SIGKILL leaves it (nothing runs)"
    );
    // A `sim init` box in the same directory is the user's.
    let init = vramdoc()
        .env("TMPDIR", tmp.path())
        .args(["sim", "init", "1x16GiB"])
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", text(&init.stderr));
    let user_box = text(&init.stdout).trim().to_string();
    let mut live = hold(tmp.path());
    let now = boxes(tmp.path());
    assert!(!now.contains(&orphan[0]), "reclaimed: {now:?}");
    assert_eq!(now.len(), 2, "the live one and the user's: {now:?}");
    assert!(Path::new(&user_box).exists());
    // The live box is not reclaimed by another vramdoc.
    let o = vramdoc()
        .env("TMPDIR", tmp.path())
        .args(["--sim", "1x16GiB", "scan"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(boxes(tmp.path()), now);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(live.child.id() as i32, libc::SIGTERM) };
    live.child.wait().unwrap();
    std::fs::remove_dir_all(&user_box).unwrap();
    assert!(boxes(tmp.path()).is_empty());
}

#[test]
fn finished_variants_are_reported_when_the_box_disappears_mid_replay() {
    let dir = tempfile::tempdir().unwrap();
    let body = SLOW
        .replace("duration = \"60s\"", "duration = \"3s\"")
        .replace(
        "[[steps]]\nid = \"load\"",
        "[[steps]]\nid = \"pre\"\nop = \"pause\"\nduration = \"1ms\"\n\n[[steps]]\nid = \"load\"",
    ) + "\n[[variants]]\nname = \"fix-2\"\n[[variants.expect]]\ncheck = \"completes\"\n";
    // Pause before the allocation in `fix`, so the box goes away while it waits.
    let body = body.replace(
        "[[steps]]\nid = \"wait\"\nop = \"pause\"\nduration = \"3s\"\nonly = [\"fix\"]\n",
        "",
    );
    let body = body.replace(
        "[[steps]]\nid = \"pre\"\nop = \"pause\"\nduration = \"1ms\"",
        "[[steps]]\nid = \"pre\"\nop = \"pause\"\nduration = \"3s\"\nonly = [\"fix\"]",
    );
    let scn = scenarios::write(dir.path(), "gone.toml", &body);
    let b = fresh_box("1x16GiB");
    let out = dir.path().join("r.json");
    let (child, _worker, _err) = replay_until_worker(b.path(), &scn, &out, "fix");
    // The box disappears in one step (a rename: its processes keep writing into it).
    let moved = dir.path().join("moved-box");
    std::fs::rename(b.path(), &moved).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3), "environment failure");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let runs = r["replay"]["runs"].as_array().unwrap();
    assert!(!runs.is_empty() && runs[0]["variant"] == "bug", "{runs:?}");
    assert!(
        text(&output.stdout).contains("┆ bug"),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn every_out_is_checked_before_the_first_variant() {
    let b = fresh_box("1x16GiB");
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("old.json");
    std::fs::write(&existing, "{}").unwrap();
    let a = dir.path().join("a.json");
    let same = dir.path().join(".").join("a.json");
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (
            vec![dir.path().join("missing/r.json").into()],
            "does not exist",
        ),
        (vec![a.clone().into(), same.into()], "given twice"),
        (vec![existing.into()], "--force"),
        (
            vec![dir.path().join("r.txt").into()],
            "unknown report extension",
        ),
    ];
    for (outs, want) in cases {
        let mut c = on_box(b.path());
        c.args(["replay", "stray-cuda0"]);
        for o in &outs {
            c.arg("--out").arg(o);
        }
        let out = run(c);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{outs:?}: {err}");
        assert!(err.contains(want), "{outs:?}: {err}");
        assert!(!err.contains("worker pid"), "{outs:?}: work started: {err}");
        assert!(!a.exists(), "{outs:?}");
    }
}

/// `--out` into a directory the user may not write to: refused before any work. Root may
/// write anywhere, so as root vramdoc runs as `nobody` (through util-linux `setpriv`).
#[test]
fn an_out_in_a_read_only_directory_is_refused_before_work() {
    use std::os::unix::fs::PermissionsExt;
    let root = unsafe { libc::geteuid() } == 0;
    let setpriv = if root {
        let setpriv = common::skip::require!(
            "setpriv",
            common::skip::tool("setpriv", "util-linux")
                .map_err(|e| format!("{e}: as root, this test drops to `nobody` with it"))
        );
        Some(setpriv)
    } else {
        None
    };
    let dir = tempfile::tempdir().unwrap();
    // Reachable by `nobody`; the directory inside writable by no one but root.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let readonly = dir.path().join("ro");
    std::fs::create_dir(&readonly).unwrap();
    std::fs::set_permissions(&readonly, std::fs::Permissions::from_mode(0o555)).unwrap();
    let target = readonly.join("r.json");
    let mut c = match &setpriv {
        Some(setpriv) => {
            let mut c = Command::new(setpriv);
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_vramdoc"))
                .env_remove("VRAMDOC_SIM_DIR")
                .env_remove("CUDA_VISIBLE_DEVICES")
                .env_remove("TMPDIR");
            c
        }
        None => vramdoc(),
    };
    // A private box (in the world-writable /tmp when run as nobody).
    c.args(["--sim", "1x16GiB", "replay", "stray-cuda0", "--out"])
        .arg(&target);
    let out = run(c);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ermission denied"), "{err}");
    assert!(!err.contains("worker pid"), "work started: {err}");
    assert!(!target.exists());
}

/// Every subcommand that writes to standard output: a closed pipe is quiet (the command's
/// own exit code), a full disk is one line on stderr and exit 3.
#[test]
fn broken_and_full_stdout_never_panic() {
    let b = fresh_box("1x16GiB");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let mut c = on_box(b.path());
    c.args(["scan", "--out"]).arg(&report);
    assert!(run(c).status.success());
    let cmds: Vec<(Vec<&str>, i32)> = vec![
        (vec!["list"], 0),
        (vec!["list", "--json"], 0),
        (vec!["scan"], 0),
        (vec!["scan", "--json"], 0),
        (vec!["sim", "status"], 0),
        (vec!["sim", "status", "--json"], 0),
        (vec!["sim", "presets"], 0),
        (
            vec!["report", report.to_str().unwrap(), "--format", "md"],
            0,
        ),
        (
            vec!["report", report.to_str().unwrap(), "--format", "json"],
            0,
        ),
        (vec!["--help"], 0),
        (
            vec!["replay", "stray-cuda0", "--variant", "fix-visible-devices"],
            0,
        ),
        (
            vec![
                "replay",
                "stray-cuda0",
                "--variant",
                "fix-visible-devices",
                "--json",
            ],
            0,
        ),
    ];
    for (args, code) in &cmds {
        // Closed pipe: the reader is gone before vramdoc writes.
        let mut c = on_box(b.path());
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(*code),
            "{args:?} | head: {}",
            text(&out.stderr)
        );
        // Only replay's progress lines ("replay scenario/variant: ...") may be on stderr.
        let err = text(&out.stderr);
        let quiet = err.lines().all(|l| l.starts_with("replay "));
        assert!(quiet, "{args:?} | head is quiet: {err}");

        let mut c = on_box(b.path());
        c.args(args)
            .stdout(std::fs::File::create("/dev/full").unwrap());
        let out = run(c);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?} > /dev/full: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| !l.starts_with("replay ")).collect();
        assert_eq!(errors.len(), 1, "{args:?} > /dev/full: {err}");
        assert!(
            errors[0].starts_with("error: writing to standard output"),
            "{args:?} > /dev/full: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?} > /dev/full: {err}");
    }
}

/// Exit codes: 2 for what the user must fix, 3 for the environment (docs/exit-codes.md).
mod exit_codes_mean_one_thing {
    use super::*;

    fn code(c: Command) -> Option<i32> {
        run(c).status.code()
    }

    /// An unknown scenario among `all`: refused before anything runs.
    #[test]
    fn unknown_scenario_among_all_is_2() {
        let b = fresh_box("2x16GiB");
        let mut c = on_box(b.path());
        c.args(["replay", "all", "nope"]);
        assert_eq!(code(c), Some(2));
    }

    /// Out-of-range devices for `sim hold`: the user's to fix.
    #[test]
    fn out_of_range_device_is_2() {
        let b = fresh_box("2x16GiB");
        for args in [
            vec!["sim", "hold", "--device", "2"],
            vec!["sim", "hold", "--context-on", "7"],
        ] {
            let mut c = on_box(b.path());
            c.args(&args);
            assert_eq!(code(c), Some(2), "{args:?}");
        }
    }

    /// The build without the simulator (`--no-default-features`, the real-only binary):
    /// `--sim` is the environment's to change, refused saying so.
    #[test]
    fn sim_in_a_build_without_the_simulator_is_3() {
        let bin = common::skip::require!("no-sim-build", common::no_sim::binary());
        let mut c = Command::new(bin);
        c.env_remove("VRAMDOC_SIM_DIR")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("LD_LIBRARY_PATH")
            .args(["--sim", "1x16GiB", "scan"]);
        let o = run(c);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert!(err.contains("built without the simulator"), "{err}");
    }

    /// A missing TMPDIR: the environment.
    #[test]
    fn missing_tmpdir_is_3() {
        let mut c = vramdoc();
        c.env("TMPDIR", "/nonexistent/tmp")
            .args(["--sim", "1x16GiB", "scan"]);
        assert_eq!(code(c), Some(3));
    }

    /// Zero devices: the environment.
    #[test]
    fn zero_devices_is_3() {
        let zero = fresh_box("1x16GiB");
        let cfg = zero.path().join("box.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&cfg).unwrap()).unwrap();
        v["devices"] = serde_json::json!([]);
        std::fs::write(&cfg, v.to_string()).unwrap();
        for args in [vec!["scan"], vec!["replay", "stray-cuda0"]] {
            let mut c = on_box(zero.path());
            c.args(&args);
            assert_eq!(code(c), Some(3), "{args:?} with zero devices");
        }
    }
}

#[test]
fn garbage_cuda_visible_devices_is_the_same_answer_on_both_backends() {
    let b = fresh_box("2x16GiB");
    let libs = common::simgpu_lib_dir();
    for backend in ["sim", "real"] {
        let mut c = on_box(b.path());
        c.args(["--backend", backend, "replay", "stray-cuda0"])
            .env("CUDA_VISIBLE_DEVICES", "garbage")
            .env("LD_LIBRARY_PATH", libs);
        let out = run(c);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{backend}: {err}");
        assert!(err.contains("leaves no visible GPU"), "{backend}: {err}");
        // NVML ignores CUDA_VISIBLE_DEVICES: scan works the same on both.
        let mut c = on_box(b.path());
        c.args(["--backend", backend, "scan"])
            .env("CUDA_VISIBLE_DEVICES", "garbage")
            .env("LD_LIBRARY_PATH", libs);
        assert_eq!(run(c).status.code(), Some(0), "{backend} scan");
    }
}

mod the_simulated_box_refuses_misuse {
    use super::*;

    /// A latency of years is a typo.
    #[test]
    fn a_latency_of_years() {
        let b = fresh_box("1x16GiB");
        let mut c = on_box(b.path());
        c.args(["sim", "fault", "--nvml-memory-latency", "40000000s"]);
        let out = run(c);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    }

    /// `sim init` never overwrites a box.
    #[test]
    fn init_over_a_box() {
        let b = fresh_box("1x16GiB");
        let mut c = vramdoc();
        c.args(["sim", "init", "2x16GiB", "--dir"]).arg(b.path());
        let out = run(c);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let cfg = std::fs::read_to_string(b.path().join("box.json")).unwrap();
        assert!(cfg.contains("1x16GiB"), "{cfg}");
    }

    /// A failed `sim init` leaves nothing in TMPDIR.
    #[test]
    fn failed_init_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = vramdoc();
        c.env("TMPDIR", tmp.path()).args(["sim", "init", "2xbogus"]);
        let out = run(c);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    /// Concurrent `sim fault` calls lose nothing: each adds a lost device under the lock.
    #[test]
    fn concurrent_faults_lose_nothing() {
        let many = fresh_box("8x16GiB");
        let children: Vec<Child> = (0..8)
            .map(|i| {
                let mut c = on_box(many.path());
                c.args(["sim", "fault", "--lose-device", &i.to_string()])
                    .stdout(Stdio::null());
                c.spawn().unwrap()
            })
            .collect();
        for mut ch in children {
            assert!(ch.wait().unwrap().success());
        }
        let f: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(many.path().join("faults.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(f["lost_devices"].as_array().unwrap().len(), 8, "{f}");
    }
}

#[test]
fn an_os_error_is_printed_once() {
    let mut c = vramdoc();
    c.args(["report", "/nonexistent/r.json", "--format", "md"]);
    let err = text(&run(c).stderr);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn a_hostile_report_file_cannot_drive_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let hostile_json = serde_json::to_string(common::reports::HOSTILE).unwrap();
    let inner = &hostile_json[1..hostile_json.len() - 1];
    let evil = r"\u001b]0;pwned\u0007\u009b31m\u202eexe.txt\r";
    for (i, report) in common::reports::hostile_reports().iter().enumerate() {
        let body = String::from_utf8(vramdoc::report::json::render(report)).unwrap();
        assert!(body.contains(inner));
        let path = dir.path().join(format!("r{i}.json"));
        std::fs::write(&path, body.replace(inner, evil)).unwrap();
        for format in ["md", "html", "json"] {
            let mut c = vramdoc();
            c.arg("report").arg(&path).args(["--format", format]);
            let out = run(c);
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            let stdout = text(&out.stdout);
            for bad in ['\x1b', '\x07', '\u{9b}', '\u{202e}', '\r'] {
                assert!(
                    !stdout.contains(bad),
                    "{format}: raw {bad:?} on the terminal"
                );
            }
            if format == "json" {
                // Still the same report.
                vramdoc::report::read::parse_report(&stdout, &path).unwrap();
            }
        }
    }
}

// Issue 29, third round.

fn preflight_on(dir: &Path, gpus: &str) -> (Option<i32>, String) {
    let mut c = on_box(dir);
    c.args(["preflight", "--gpus", gpus]);
    for k in ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "GPU_DEVICE_ORDINAL"] {
        c.env_remove(k);
    }
    let o = run(c);
    (o.status.code(), text(&o.stdout).trim().to_string())
}

/// Item 4: a GPU where a listed process's usage is "not available" (containers), or whose
/// process lists cannot be read (an unprivileged MIG GPU), is not "clean": nothing says
/// the process does not hold the whole GPU.
#[test]
fn preflight_refuses_a_gpu_it_cannot_see_into() {
    let b = fresh_box("2x16GiB");
    let h = Holder::start(b.path(), &[], &["--device", "1", "--size", "6GiB"]);
    common::sim_fault(b.path(), &["--usage-unavailable"]);
    let (code, line) = preflight_on(b.path(), "1");
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.starts_with("problem: GPU 1: PID ") && line.contains("unknown amount"),
        "{line}"
    );
    assert!(line.contains(&h.pid().to_string()), "{line}");
    // The GPU nobody uses is still clean.
    let (code, line) = preflight_on(b.path(), "0");
    assert_eq!(code, Some(0), "{line}");

    common::sim_fault(b.path(), &["--clear"]);
    common::sim_fault(b.path(), &["--mig-unprivileged", "1"]);
    let (code, line) = preflight_on(b.path(), "1");
    assert_eq!(code, Some(1), "{line}");
    assert!(line.starts_with("problem: GPU 1: "), "{line}");
    assert!(!line.contains("GPU 1: GPU 1"), "{line}");
    drop(h);
}

/// Item 15: a dead process's memory is named once per GPU ("GPU 1: GPU 1: ..." before).
#[test]
fn preflight_names_each_gpu_once() {
    let b = fresh_box("2x16GiB");
    common::sim_fault(b.path(), &["--keep-dead"]);
    let h = Holder::start(b.path(), &[], &["--device", "1", "--size", "6GiB"]);
    h.kill();
    let (code, line) = preflight_on(b.path(), "1");
    assert_eq!(code, Some(1), "{line}");
    assert!(line.starts_with("problem: GPU 1: "), "{line}");
    assert!(!line.contains("GPU 1: GPU 1"), "{line}");
}

/// Items 9 and 10: bidi overrides and zero-width characters from the machine never reach an
/// HTML or Markdown report raw, and Markdown leaves no live `@mention` or autolink (pasted
/// into a GitHub issue they would ping users and make links).
#[test]
fn documents_show_hidden_characters_and_neutralise_mentions_and_autolinks() {
    let hostile_json = serde_json::to_string(common::reports::HOSTILE).unwrap();
    let inner = &hostile_json[1..hostile_json.len() - 1];
    let payload =
        r"a\u202eb c\u200bd\u2060e\ufefff @octocat www.evil.example https://evil.example/x";
    for report in common::reports::hostile_reports() {
        let body = String::from_utf8(vramdoc::report::json::render(&report)).unwrap();
        let body = body.replace(inner, payload);
        let report = vramdoc::report::read::parse_report(&body, Path::new("r.json")).unwrap();
        let md = vramdoc::report::markdown::render(&report);
        let html = vramdoc::report::html::render(&report).unwrap();
        for (name, doc) in [("md", &md), ("html", &html)] {
            for bad in ['\u{202e}', '\u{200b}', '\u{2060}', '\u{feff}'] {
                assert!(!doc.contains(bad), "{name}: raw {bad:?}");
            }
        }
        assert!(md.contains("\\u{202e}"), "the override is shown escaped");
        for live in ["@octocat", "www.evil", "https://evil"] {
            let mut fenced = false;
            for line in md.lines() {
                // Code blocks and spans are never linked: only text outside them counts.
                if line.trim_start().starts_with("```") {
                    fenced = !fenced;
                    continue;
                }
                if fenced {
                    continue;
                }
                for (at, _) in line.match_indices(live) {
                    let ticks = line[..at].matches('`').count();
                    assert!(ticks % 2 == 1, "md: {live} left live in {line}");
                }
            }
        }
    }
}

/// Item 13: a client that shuts down its write half right after its request (`nc -N`,
/// probes) gets its answer every time (hyper closed on that EOF without one, 1-3 %).
#[test]
fn serve_answers_clients_that_half_close_after_sending() {
    use std::io::Write;
    use std::net::{Shutdown, TcpStream};
    let (_dir, serve) = common::exporter::serve_fresh("1x16GiB");
    for i in 0..300 {
        let mut s = TcpStream::connect(serve.addr).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .expect("send");
        s.shutdown(Shutdown::Write).expect("half-close");
        let mut got = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut got);
        let got = text(&got);
        assert!(
            got.starts_with("HTTP/1.1 "),
            "request {i}: no response: {got:?}"
        );
    }
}

/// Item 5: a GPU whose NVML calls hang costs `preflight` and `scan` one per-GPU deadline
/// (the one `run` uses), not the hang: preflight answers for the healthy GPU it was given,
/// refuses the hung one (exit 1), and scan reports the hung GPU's lists as unreadable.
#[test]
fn a_hung_gpu_is_a_problem_for_preflight_and_a_finding_for_scan() {
    let b = fresh_box("2x16GiB");
    common::sim_fault(
        b.path(),
        &["--nvml-hang", "--device", "1", "--hang-limit", "10m"],
    );
    // Far beyond the 1 s deadline, far below the 10 min hang.
    let bounded = |mut c: Command| -> Output {
        c.env_remove("SLURM_STEP_GPUS")
            .env_remove("SLURM_JOB_GPUS")
            .env_remove("GPU_DEVICE_ORDINAL")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn vramdoc");
        let start = std::time::Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if start.elapsed() > std::time::Duration::from_secs(90) {
                let _ = child.kill();
                let _ = child.wait();
                common::sim_fault(b.path(), &["--clear"]);
                panic!("still waiting on the hung GPU after 90 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        child.wait_with_output().expect("output")
    };
    let mut c = on_box(b.path());
    c.args(["preflight", "--gpus", "0"]);
    let o = bounded(c);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    let mut c = on_box(b.path());
    c.args(["preflight", "--gpus", "1"]);
    let o = bounded(c);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(
        text(&o.stdout).starts_with("problem: GPU 1: "),
        "{}",
        text(&o.stdout)
    );
    let mut c = on_box(b.path());
    c.args(["scan", "--json"]);
    let o = bounded(c);
    common::sim_fault(b.path(), &["--clear"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("scan JSON");
    let hung = v["scan"]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f["id"] == "device-unavailable" && f["devices"] == serde_json::json!([1]));
    assert!(hung, "{:#}", v["scan"]["findings"]);
}
