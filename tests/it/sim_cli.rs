//! End-to-end tests of `vramdoc sim …`: creating a box, its status, faults, errors.

use crate::common;

use common::{stderr, vramdoc};

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
#[test]
fn init_prints_a_box_that_status_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    let o = vramdoc()
        .args(["sim", "init", "rtx3090,2x16GiB", "--dir"])
        .arg(&dir)
        .args(["--context-overhead", "512MiB"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), dir.display().to_string());
    let o = vramdoc()
        .env("VRAMDOC_SIM_DIR", &dir)
        .args(["sim", "status", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 3);
    assert_eq!(devices[0]["device"]["name"], "NVIDIA GeForce RTX 3090");
    assert_eq!(devices[1]["device"]["total"], 16u64 << 30);
    assert_eq!(devices[2]["device"]["context_overhead"], 512u64 << 20);
    assert_eq!(devices[0]["memory"]["used"], 0);
    // A second init into the same directory is refused, and the box is kept.
    let o = vramdoc()
        .args(["sim", "init", "t4", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("already exists"));
    assert_eq!(stderr(&o).lines().count(), 1);
}

#[test]
fn bad_spec_is_a_one_line_usage_error() {
    let o = vramdoc()
        .args(["sim", "init", "2xgtx9999"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("unknown device \"gtx9999\"") && err.contains("h100"),
        "{err}"
    );
    let o = vramdoc()
        .args(["--sim", "0x24GiB", "scan"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn status_without_a_box_is_an_environment_error() {
    let o = vramdoc().args(["sim", "status"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("VRAMDOC_SIM_DIR"), "{}", stderr(&o));
}

#[test]
fn faults_are_set_shown_and_cleared() {
    let b = common::fresh_box("2xt4");
    let run = |args: &[&str]| {
        let o = vramdoc()
            .env("VRAMDOC_SIM_DIR", b.path())
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        o
    };
    run(&[
        "sim",
        "fault",
        "--lose-device",
        "1",
        "--alloc-fail-after",
        "2",
        "--nvml-process-latency",
        "4.5ms",
        "--keep-dead",
        "--usage-unavailable",
    ]);
    let sim = vramdoc_sim::SimBox::open(b.path()).unwrap();
    let f = sim.faults().unwrap();
    assert_eq!(f.lost_devices, vec![1]);
    assert_eq!(f.alloc_fail_after, Some(2));
    assert_eq!(f.nvml_process_latency_us, 4500);
    assert!(f.keep_dead_processes && f.nvml_used_memory_unavailable);
    assert!(matches!(
        sim.memory(1),
        Err(vramdoc_sim::SimError::DeviceLost(1))
    ));
    let text = stdout(&run(&["sim", "status"]));
    assert!(text.contains("1 LOST"), "{text}");
    run(&["sim", "fault", "--clear"]);
    assert_eq!(sim.faults().unwrap(), vramdoc_sim::Faults::default());
    let o = vramdoc()
        .env("VRAMDOC_SIM_DIR", b.path())
        .args(["sim", "fault", "--lose-device", "7"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn hold_is_visible_in_status_and_returned_on_kill() {
    let b = common::fresh_box("2x16GiB");
    let mut child = vramdoc()
        .env("VRAMDOC_SIM_DIR", b.path())
        .args(["sim", "hold", "--device", "1", "--size", "1GiB"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(
        line.starts_with(&format!("holding pid={}", child.id())),
        "{line}"
    );
    let sim = vramdoc_sim::SimBox::open(b.path()).unwrap();
    let overhead = sim.device(1).unwrap().context_overhead;
    assert_eq!(sim.memory(1).unwrap().used, (1 << 30) + overhead);
    assert_eq!(sim.memory(0).unwrap().used, 0);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(sim.memory(1).unwrap().used, 0);
}

#[test]
fn presets_lists_real_cards() {
    let o = vramdoc().args(["sim", "presets"]).output().unwrap();
    assert!(o.status.success());
    let t = stdout(&o);
    for name in [
        "Tesla T4",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA GeForce RTX 3090",
    ] {
        assert!(t.contains(name), "{t}");
    }
    assert!(t.lines().all(|l| l.chars().count() <= 100));
}

/// Issue 25, the simulator side: what a process inside a PID namespace (a container without
/// `hostPID`) reads of its own GPU process, by driver generation (`sim init --driver`): the
/// host PID with its usage before 535.113; its PID in the namespace with 0 bytes from 535.113
/// to the 560 series; with its usage from 565 (docs/simulator.md).
#[test]
fn a_namespaced_reader_sees_its_own_process_as_the_driver_generation_says() {
    common::skip::require!("unshare", common::skip::unshare());
    use serde_json::Value;
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    for (driver, translated, usage) in [
        ("535.54.03", false, true),
        ("550", true, false),
        ("565", true, true),
    ] {
        let b = common::clients::CliBox::new("16GiB", &["--driver", driver]);
        let scan = b.dir.join("scan.json");
        let script = format!(
            "{exe} sim hold --size 1GiB --duration 60s > {d}/hold.out & \
             echo $! > {d}/ns.pid; \
             while ! grep -q holding {d}/hold.out; do sleep 0.05; done; \
             {exe} --backend sim scan --json > {scan}; kill $!",
            d = b.dir.display(),
            scan = scan.display()
        );
        let status = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
            .env("VRAMDOC_SIM_DIR", &b.dir)
            .env_remove("CUDA_VISIBLE_DEVICES")
            .status()
            .unwrap();
        assert!(status.success(), "{driver}");
        let read = |f: &str| std::fs::read_to_string(b.dir.join(f)).unwrap();
        let host_pid: u64 = read("hold.out")
            .split("holding pid=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        let ns_pid: u64 = read("ns.pid").trim().parse().unwrap();
        assert_ne!(
            host_pid, ns_pid,
            "{driver}: the holder runs in its own namespace"
        );
        let v: Value = serde_json::from_str(&read("scan.json")).unwrap();
        let procs = v["scan"]["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 1, "{driver}: {v}");
        let want_pid = if translated { ns_pid } else { host_pid };
        assert_eq!(procs[0]["pid"], want_pid, "{driver}: {v}");
        let used = procs[0]["devices"][0]["used"].as_u64().unwrap();
        if usage {
            assert!(used >= 1 << 30, "{driver}: {used}");
        } else {
            assert_eq!(used, 0, "{driver}");
        }
    }
}

/// Issue 39 item 7: the README tour started a box's daemons and never said how to stop them.
/// `sim down` removes the box and waits for its driver broker and runtime daemon to exit.
#[test]
fn sim_down_removes_the_box_and_stops_its_daemons() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    let o = common::vramdoc()
        .args(["sim", "init", "1x16GiB", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pid = |file: &str| -> u32 {
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let daemons = [pid("driver.pid"), pid("runtime.pid")];
    let o = common::vramdoc()
        .env("VRAMDOC_SIM_DIR", &dir)
        .args(["sim", "down"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("removed the box at") && out.contains("daemons stopped"),
        "{out}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("unset VRAMDOC_SIM_DIR"));
    assert!(!dir.exists());
    for p in daemons {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting for init to reap it.
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        assert!(
            stat.is_empty() || state == Some("Z"),
            "PID {p} still runs: {stat}"
        );
    }
    // A directory that is not a box is refused and left alone.
    let o = common::vramdoc()
        .args(["sim", "down", "--dir"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a simulated box"));
    assert!(tmp.path().exists());
}

/// Issue 39 item 7: `sim hold --physical-context 0` under `CUDA_VISIBLE_DEVICES=1` printed
/// `device=0 … contexts_on=[]`: the line says the logical and physical device and the stray
/// context it made.
#[test]
fn hold_says_the_physical_device_and_its_stray_context() {
    let b = common::fresh_box("2x16GiB");
    let h = common::hold::Holder::start(
        b.path(),
        &[("CUDA_VISIBLE_DEVICES", "1")],
        &["--size", "1GiB", "--physical-context", "0"],
    );
    let line = &h.line;
    assert_eq!(h.field("device"), Some(0), "{line}");
    assert_eq!(h.field("physical"), Some(1), "{line}");
    assert!(line.contains("stray_contexts_on_physical=[0]"), "{line}");
    assert!(line.contains("CUDA_VISIBLE_DEVICES=1"), "{line}");
}
