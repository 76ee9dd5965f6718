//! What the host hands vramdoc is untrusted (issue 19): process names and arguments that are
//! not UTF-8 (a binary named `caf\xe9`, `prctl(PR_SET_NAME)`), secret shapes in a process's
//! argv, a marker path that is not a regular file. Real processes on simulated boxes, seen by
//! `vramdoc scan` (both backends) and `vramdoc run`.

use crate::common;

use common::hold::Holder;
use common::scans::{all_ids, process, run, scan_cmd, scan_json, used_on};
use common::{assert_ok, fresh_box, json_ok, run_job, simgpu_lib_dir, stderr, vramdoc};
use std::process::Command;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;
/// Context overhead of a default box.
const CTX: u64 = 448 * MIB;

/// Issue 19, item 1: a live process whose name (its binary's, or one it set with
/// `prctl(PR_SET_NAME)`) or an argument is not UTF-8 is shown as the owner of its memory, its
/// name and arguments escaped (`caf\xe9`), in every output; no `no-live-owner`.
#[test]
fn owners_whose_names_and_arguments_are_not_utf8_stay_visible() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let b = fresh_box("2x24GiB");
    let bin = tempfile::tempdir().unwrap();
    let cafe_bin = bin.path().join(OsStr::from_bytes(b"caf\xe9"));
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_vramdoc"), &cafe_bin).unwrap();
    let mut cmd = Command::new(&cafe_bin);
    cmd.env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("LD_LIBRARY_PATH")
        .env("VRAMDOC_SIM_DIR", b.path())
        .args(["sim", "hold", "--device", "0", "--size", "1GiB", "--"])
        .arg(OsStr::from_bytes(b"--tag=\xffrun"))
        .args(["--lr", "3e-4"]);
    let cafe = Holder::spawn(cmd);
    let mut cmd = vramdoc();
    cmd.env("VRAMDOC_SIM_DIR", b.path())
        .args([
            "sim",
            "hold",
            "--device",
            "1",
            "--size",
            "1GiB",
            "--set-name",
        ])
        .arg(OsStr::from_bytes(b"\xff\xfe"));
    let renamed = Holder::spawn(cmd);

    // The in-process simulator and the real backends (nvml-wrapper over the simulated
    // libnvidia-ml.so.1) agree.
    for backend in ["sim", "real"] {
        let mut c = scan_cmd(b.path(), &["--json"]);
        c.args(["--backend", backend])
            .env("LD_LIBRARY_PATH", simgpu_lib_dir());
        let v = json_ok(&run(c), backend);
        let p = process(&v, cafe.pid);
        assert_eq!(p["visible"], true, "{backend}: {p}");
        assert_eq!(p["name"], "caf\\xe9", "{backend}: {p}");
        let cmdline = p["cmdline"].as_str().expect("cmdline kept");
        assert!(
            cmdline.contains("--tag=\\xffrun") && cmdline.contains("--lr 3e-4"),
            "{backend}: {cmdline}"
        );
        assert_eq!(used_on(p, 0), Some(GIB + CTX), "{backend}");
        let q = process(&v, renamed.pid);
        assert_eq!(q["visible"], true, "{backend}: {q}");
        assert_eq!(q["name"], "\\xff\\xfe", "{backend}: {q}");
        assert!(
            !all_ids(&v).iter().any(|id| id == "no-live-owner"),
            "{backend}: {:?}",
            all_ids(&v)
        );
    }
    // The table and Markdown show the names escaped; --fail-on error passes.
    for args in [&["--fail-on", "error"][..], &["--markdown"][..]] {
        let out = run(scan_cmd(b.path(), args));
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = std::str::from_utf8(&out.stdout).expect("output is UTF-8");
        assert!(
            text.contains("caf\\xe9") && text.contains("\\xff\\xfe"),
            "{args:?}: {text}"
        );
        assert!(!text.contains("not visible"), "{args:?}: {text}");
    }
    // HTML and Markdown files.
    for name in ["scan.html", "scan.md"] {
        let f = bin.path().join(name);
        assert_ok(
            &run(scan_cmd(b.path(), &["--out", f.to_str().unwrap()])),
            name,
        );
        let text = std::fs::read_to_string(&f).expect("report is UTF-8");
        assert!(
            text.contains("caf\\xe9") && text.contains("\\xff\\xfe"),
            "{name}"
        );
    }
    // Prometheus labels, per process.
    let prom = bin.path().join("scan.prom");
    let out = run(scan_cmd(
        b.path(),
        &["--per-process", "--prom", prom.to_str().unwrap()],
    ));
    assert_ok(&out, "scan --prom");
    let text = std::fs::read_to_string(&prom).expect("prom file is UTF-8");
    assert!(text.contains(r#"caf\\xe9"#), "{text}");
    drop(cafe);
    drop(renamed);
}

/// Issue 19, item 8: the secret shapes that leaked (MySQL `-pPASS`, `sshpass -p`, `--pw`, a
/// PEM private key as an argument, a bare `Bearer`, vendor key formats) reach no output of
/// scan: table, JSON, Markdown, HTML.
#[test]
fn issue_19_secret_shapes_reach_no_output() {
    let pad = |s: &str, n: usize| format!("{s}{}", "x7Q".repeat(n).split_at(n - s.len()).0);
    let google = format!("AIza{}", pad("PLANTED19google", 35));
    let npm = format!("npm_{}", pad("PLANTED19npm", 36));
    let stripe = format!("sk_live_{}", pad("PLANTED19stripe", 24));
    let sendgrid = format!("SG.{}.{}", pad("PLANTED19sg", 22), pad("sendgridB", 43));
    let databricks = format!("dapi{}", "deadbeef".repeat(4));
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nPLANTED19pemLINE0\nQUJDRA==\n-----END RSA PRIVATE KEY-----";
    let secrets = [
        "PLANTED19mysql",
        "PLANTED19ssh",
        "PLANTED19pw",
        "PLANTED19pemLINE0",
        "PLANTED19bearer",
        "PLANTED19google",
        "PLANTED19npm",
        "PLANTED19stripe",
        "PLANTED19sg",
        "deadbeefdeadbeef",
    ];
    let b = fresh_box("2x24GiB");
    let args = [
        "--device",
        "0",
        "--size",
        "1GiB",
        "--",
        "mysql",
        "-uroot",
        "-pPLANTED19mysql",
        "db",
        "--pw",
        "PLANTED19pw",
        "--identity",
        pem,
        "Bearer",
        "PLANTED19bearer",
        &google,
        &npm,
        &stripe,
        &sendgrid,
        &databricks,
        "--lr",
        "3e-4",
        "--model",
        "meta-llama/Llama-3-8B",
    ];
    let h = Holder::start(b.path(), &[], &args);
    let sshpass = Holder::start(
        b.path(),
        &[],
        &[
            "--device",
            "1",
            "--",
            "sshpass",
            "-p",
            "PLANTED19ssh",
            "ssh",
            "-p",
            "22",
            "h",
        ],
    );
    let check = |what: &str, bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        for s in secrets {
            assert!(!text.contains(s), "secret {s} leaked into {what}:\n{text}");
        }
    };
    let out = run(scan_cmd(b.path(), &[]));
    assert_ok(&out, "scan");
    check("table", &out.stdout);
    let v = scan_json(b.path());
    check("json", &serde_json::to_vec(&v).unwrap());
    let cmd = process(&v, h.pid)["cmdline"].as_str().unwrap().to_string();
    assert!(
        cmd.contains("--lr 3e-4 --model meta-llama/Llama-3-8B") && cmd.contains("-p«redacted»"),
        "{cmd}"
    );
    let cmd = process(&v, sshpass.pid)["cmdline"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(cmd.contains("ssh -p 22 h"), "{cmd}");
    let out = run(scan_cmd(b.path(), &["--markdown"]));
    assert_ok(&out, "scan");
    check("markdown", &out.stdout);
    let dir = tempfile::tempdir().unwrap();
    for name in ["scan.json", "scan.md", "scan.html"] {
        let f = dir.path().join(name);
        assert_ok(
            &run(scan_cmd(b.path(), &["--out", f.to_str().unwrap()])),
            "scan",
        );
        check(name, &std::fs::read(&f).unwrap());
    }
}

/// Issue 19, item 1: a process of the job whose name and an argument are not UTF-8 is
/// recorded in the tree with both escaped (`caf\xe9`, `x\xffy`), not without a name or a
/// command line.
#[test]
fn job_processes_with_names_that_are_not_utf8_are_recorded_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let script = r#"ln -s /bin/sh "$0/$(printf 'caf\351')" && "$0/$(printf 'caf\351')" -c 'sleep 0.5' "$(printf 'x\377y')""#;
    let dir = tmp.path().to_str().unwrap();
    let (o, r) = run_job(tmp.path(), &[], &["sh", "-c", script, dir]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let procs = r["run"]["processes"].as_array().expect("processes");
    let cafe = procs
        .iter()
        .find(|p| p["name"] == "caf\\xe9")
        .unwrap_or_else(|| panic!("no caf\\xe9 in {procs:?}"));
    let cmdline = cafe["cmdline"].as_str().expect("command line kept");
    assert!(
        cmdline.ends_with("caf\\xe9 -c sleep 0.5 x\\xffy"),
        "{cmdline}"
    );
}

/// Issue 19: `VRAMDOC_MARKERS` naming a FIFO (with no reader, or with one) or a device makes
/// `vramdoc mark` fail at once with exit 2 and one line, never hang.
#[test]
fn mark_refuses_a_fifo_or_device_without_hanging() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path inside this test's temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for path in [fifo.as_path(), std::path::Path::new("/dev/null")] {
        let (status, err) = ends_within_10s(
            vramdoc()
                .env("VRAMDOC_MARKERS", path)
                .args(["mark", "load"]),
        );
        assert_eq!(status.code(), Some(2), "{}: {err}", path.display());
        assert!(
            err.contains("not a regular file") && err.trim().lines().count() == 1,
            "{err}"
        );
    }
}

/// `vramdoc mark --pid PID` on a FIFO put where the attach marker file would be: refused at
/// once (no recording attached), never a hang.
#[test]
fn mark_pid_refuses_a_fifo_without_hanging() {
    use std::os::unix::fs::DirBuilderExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("vramdoc");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let pid = std::process::id();
    // Named as a recording's own marker file (`attach-PID-VRAMDOCPID.markers`).
    let fifo = dir.join(format!("attach-{pid}-1.markers"));
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path inside this test's temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (status, err) = ends_within_10s(vramdoc().env("XDG_RUNTIME_DIR", tmp.path()).args([
        "mark",
        "--pid",
        &pid.to_string(),
        "load",
    ]));
    assert!(!status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Run `cmd` (stdout discarded) and wait for it at most 10 s: a command still running then
/// is a hang (the test fails, the command is killed). Its exit status and stderr.
fn ends_within_10s(cmd: &mut Command) -> (std::process::ExitStatus, String) {
    let mut child = common::KillOnDrop(
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let status = common::poll::eventually(common::poll::SECS_10, "the command ended", || {
        child.0.try_wait().ok().flatten()
    });
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err).unwrap();
    (status, err)
}
