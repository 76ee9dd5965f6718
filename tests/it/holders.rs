//! Who holds GPU memory through the driver's device files (issue 25's leftover): a process
//! with a CUDA context, told by its maps, never a process holding the files' descriptors
//! only, as every NVML monitor does (real driver: H200, 580.159.04; docs/simulator.md, "Who
//! holds memory through the device files"). An NVML-only monitor — a Python ctypes loop over
//! the simulated libnvidia-ml.so.1 — runs beside memory no live process owns: scan (both
//! backends) and `run`'s held-by-descriptor do not name it, while a forked child that keeps
//! a context is still named. And `sim status` shows minors and managed bytes.

use crate::common;

use common::clients::CliBox;
use common::hold::Holder;
use common::scans::{findings, run, scan_cmd};
use common::{fresh_box, json_ok, sim_fault};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

const JOB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/run_jobs/job.py");

/// A Python NVML client of the box: `nvmlInit_v2`, then device counts and memory queries
/// every 100 ms for `secs` seconds, as a monitor loop (nvitop, a pynvml exporter) does. It
/// prints `holding pid=` once initialised (the `Holder` protocol).
fn nvml_monitor_script(secs: u32) -> String {
    format!(
        "import ctypes, os, sys, time\n\
         l = ctypes.CDLL('libnvidia-ml.so.1')\n\
         assert l.nvmlInit_v2() == 0\n\
         print('holding pid=%d' % os.getpid(), flush=True)\n\
         n = ctypes.c_uint()\n\
         end = time.time() + {secs}\n\
         while time.time() < end:\n\
         \x20   l.nvmlDeviceGetCount_v2(ctypes.byref(n))\n\
         \x20   time.sleep(0.1)\n\
         l.nvmlShutdown()\n"
    )
}

/// The NVML monitor on box `dir`, running until killed (or 120 s).
fn nvml_monitor(dir: &Path) -> Holder {
    let mut c = Command::new("python3");
    c.env("VRAMDOC_SIM_DIR", dir)
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .args(["-c", &nvml_monitor_script(120)]);
    Holder::spawn(c)
}

/// `vramdoc scan --json` on `dir` through `backend`.
fn scan_on(dir: &Path, backend: &str) -> Value {
    let mut c = scan_cmd(dir, &["--json"]);
    c.args(["--backend", backend])
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir());
    json_ok(&run(c), &format!("scan --json ({backend})"))
}

fn text(v: &Value) -> String {
    v.to_string()
}

/// The monitor holds the box's device files open (what `fuser` sees), and maps none.
fn assert_holds_files_maps_none(pid: u32, dir: &Path) {
    let dev = std::fs::canonicalize(dir).unwrap().join("dev");
    let fds: Vec<std::path::PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t.starts_with(&dev))
        .collect();
    for name in ["nvidiactl", "nvidia0", "nvidia-uvm"] {
        assert!(
            fds.iter().any(|t| t.ends_with(name)),
            "monitor holds {name}: {fds:?}"
        );
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        !maps.contains(dev.to_str().unwrap()),
        "an NVML client maps no device file: {maps}"
    );
}

/// Must-show: memory no live process owns (an exited PID still listed on GPU 0) beside an
/// NVML-only monitor: `no-live-owner` names no holder (the monitor is listed as an NVML
/// client, not a holder), on both backends. A child forked after a context that keeps its
/// parent's memory on GPU 1 is still named there, the monitor still not.
#[test]
fn an_nvml_monitor_is_no_holder_and_a_forked_child_with_a_context_is() {
    let b = fresh_box("2x24GiB");
    let mon = nvml_monitor(b.path());
    assert_holds_files_maps_none(mon.pid(), b.path());
    sim_fault(b.path(), &["--keep-dead"]);
    let dead = Holder::start(b.path(), &[], &["--device", "0", "--size", "2GiB"]).kill();
    for backend in ["sim", "real"] {
        let v = scan_on(b.path(), backend);
        let f = findings(&v, "no-live-owner");
        assert_eq!(f.len(), 1, "{backend}: {v}");
        assert_eq!(f[0]["devices"], serde_json::json!([0]), "{backend}");
        assert_eq!(f[0]["severity"], "error", "{backend}");
        assert_eq!(
            f[0]["pid"], dead,
            "{backend}: the exited PID, not the monitor"
        );
        let title = f[0]["title"].as_str().unwrap_or("");
        assert!(!title.contains("held open by"), "{backend}: {title}");
        let ev = text(&f[0]["evidence"]);
        assert!(
            ev.contains("no CUDA context mapped (NVML clients, not holders)")
                && ev.contains(&format!("PID {} (python3)", mon.pid())),
            "{backend}: {ev}"
        );
        assert!(
            !ev.contains("holds GPU device files open"),
            "{backend}: {ev}"
        );
    }
    // A forked child keeping its exited parent's context on GPU 1 (`sim hold --fork-child`:
    // it inherits the descriptors and the context's nvidiactl mappings).
    let h = Holder::start(
        b.path(),
        &[],
        &["--device", "1", "--size", "1GiB", "--fork-child"],
    );
    let child = h.field("child").expect("child=");
    h.kill();
    for backend in ["sim", "real"] {
        let v = scan_on(b.path(), backend);
        let on1: Vec<&Value> = findings(&v, "no-live-owner")
            .into_iter()
            .filter(|f| f["devices"] == serde_json::json!([1]))
            .collect();
        assert_eq!(on1.len(), 1, "{backend}: {v}");
        let title = on1[0]["title"].as_str().unwrap_or("");
        assert!(
            title.contains(&format!("held open by PID {child}")),
            "{backend}: {title}"
        );
        assert!(!text(&v).contains(&format!("PID {} (python3) user", mon.pid())));
    }
    // SAFETY: kill(2) on the forked child this test staged.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
}

/// `run`: the job starts an NVML monitor that outlives the command, and its exited main
/// process's memory stays (`--keep-dead`). The monitor holds the device files but no
/// context: held-by-descriptor does not name it, `--kill-after` does not end it (it holds no
/// memory), and the memory the driver kept is `held-after-exit`.
#[test]
fn run_does_not_name_an_nvml_monitor_of_the_job_as_holder() {
    let b = CliBox::new("1x16GiB", &[]);
    sim_fault(&b.dir, &["--keep-dead"]);
    let tmp = tempfile::tempdir().unwrap();
    for (i, extra) in [&[][..], &["--kill-after", "2s"][..]]
        .into_iter()
        .enumerate()
    {
        let out = tmp.path().join(format!("run{i}.json"));
        let pid_file = tmp.path().join(format!("monitor{i}.pid"));
        let script = format!(
            "python3 -c \"$MONITOR\" > {pid} 2>/dev/null & \
             while ! grep -q holding {pid}; do sleep 0.1; done; \
             exec python3 {JOB} ctx:0 alloc:2048 exit:0 > /dev/null",
            pid = pid_file.display()
        );
        let o = b
            .vramdoc()
            .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
            .env("MONITOR", nvml_monitor_script(20))
            .args(["run", "--process-period", "100ms", "--out"])
            .arg(&out)
            .args(extra)
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        let line = std::fs::read_to_string(&pid_file).unwrap_or_default();
        let monitor: u32 = line
            .trim()
            .strip_prefix("holding pid=")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{extra:?}: monitor pid: {line:?}"));
        let alive = std::fs::read_to_string(format!("/proc/{monitor}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| !r.starts_with(" Z")));
        // SAFETY: kill(2) on the monitor this test's job started.
        unsafe { libc::kill(monitor as i32, libc::SIGKILL) };
        assert_eq!(
            o.status.code(),
            Some(0),
            "{extra:?}: {}",
            common::stderr(&o)
        );
        assert!(
            alive,
            "{extra:?}: the monitor outlived the command, not ended"
        );
        let r = common::read_report(&out);
        let all = r["run"]["findings"].as_array().cloned().unwrap_or_default();
        let held: Vec<&Value> = all
            .iter()
            .filter(|f| f["id"] == "held-by-descriptor")
            .collect();
        assert!(held.is_empty(), "{extra:?}: {held:?}");
        // The exited process's memory the driver kept is still found: the monitor, holding
        // no context, is not waited for.
        assert!(
            all.iter()
                .any(|f| f["id"] == "held-after-exit" && f["severity"] == "error"),
            "{extra:?}: {all:?}"
        );
        assert!(
            !all.iter()
                .any(|f| f["pid"] == monitor && f["severity"] != "info"),
            "{extra:?}: {all:?}"
        );
        assert!(
            !r.to_string()
                .contains(&format!("kill-after: SIGTERM to {monitor}")),
            "{extra:?}"
        );
    }
}

/// `sim status` shows each device's minor number and each process's managed bytes.
#[test]
fn sim_status_shows_minors_and_managed_bytes() {
    let b = CliBox::new("2x24GiB", &["--minors", "1,0"]);
    let _h = Holder::start(&b.dir, &[], &["--size", "1GiB", "--managed", "2GiB"]);
    let out = b.vramdoc().args(["sim", "status"]).output().unwrap();
    common::assert_ok(&out, "sim status");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| {
            l.split(['|', '│', '┆', ' '])
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    let header = rows
        .iter()
        .find(|r| r.first() == Some(&"gpu"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(header.get(1), Some(&"minor"), "{text}");
    let gpu0 = rows
        .iter()
        .find(|r| r.first() == Some(&"0") && r.len() > 3)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(gpu0.get(1), Some(&"1"), "GPU 0 has minor 1: {text}");
    assert!(text.contains("managed"), "{text}");
    assert!(text.contains("2.00 GiB"), "{text}");
}
