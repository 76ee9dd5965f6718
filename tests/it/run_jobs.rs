//! End-to-end tests of `vramdoc run` where jobs really run (issue 17): signals reach the
//! job's whole process group, processes that outlive the command are reported and ended
//! with `--kill-after` (also a forked child keeping the exited command's memory through
//! inherited descriptors, issue 25), a container started through the box's runtime daemon (outside
//! vramdoc's tree, in its own cgroup) is recorded as the job's, attach (`--pid`, `mark
//! --pid`), and the `--live` line on a terminal.

use crate::common;

use crate::common::read_report as report;
use common::clients::CliBox;
use common::hold::Holder;
use common::poll::{eventually, SECS_10};
use common::stderr;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const GIB: u64 = 1 << 30;
const JOB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/run_jobs/job.py");
const EXE: &str = env!("CARGO_BIN_EXE_vramdoc");

/// Used bytes of every device of the box, as `vramdoc scan` reads them now.
fn used_now(b: &CliBox) -> Vec<u64> {
    let out = b.vramdoc().args(["scan", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v["scan"]["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| d["memory"]["used"].as_u64().unwrap_or(u64::MAX))
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| !r.starts_with(" Z")))
}

/// One process of the report: (pid, name, ppid, member, peak per device).
type Proc = (u32, String, Option<u64>, Option<String>, Vec<(u64, u64)>);

/// The report's processes of the job.
fn processes(r: &Value) -> Vec<Proc> {
    r["run"]["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap() as u32,
                p["name"].as_str().unwrap_or("").to_string(),
                p["ppid"].as_u64(),
                p["member"].as_str().map(str::to_string),
                p["devices"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|d| {
                        (
                            d["device"].as_u64().unwrap(),
                            d["peak"].as_u64().unwrap_or(0),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

fn findings(r: &Value, id: &str) -> Vec<Value> {
    r["run"]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["id"] == id)
        .cloned()
        .collect()
}

fn markers(r: &Value) -> Vec<String> {
    r["run"]["timeline"]["markers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["label"].as_str().map(str::to_string))
        .collect()
}

/// SIGTERM to `vramdoc run -- sh -c '…'` reaches every process of the job's group, not just
/// `sh` (which would leave its children holding their memory), as GNU `timeout`, and each
/// process of the job outside the group (a `setsid` child) one by one.
#[test]
fn sigterm_to_vramdoc_leaves_no_process_of_the_job_holding_memory() {
    let b = CliBox::new("2x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let samples = tmp.path().join("s.jsonl");
    let out = tmp.path().join("r.json");
    let script = format!(
        "{EXE} sim hold --size 2GiB & setsid {EXE} sim hold --device 1 --size 1GiB & \
         {EXE} sim hold --device 1 --size 512MiB; echo not reached"
    );
    let child = b
        .vramdoc()
        .args(["run", "--process-period", "50ms", "--samples"])
        .arg(&samples)
        .arg("--out")
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = common::KillOnDrop(child);
    eventually(SECS_10, "the three holders listed as the job's", || {
        let t = std::fs::read_to_string(&samples).unwrap_or_default();
        let pids: std::collections::BTreeSet<u64> = t
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "process" && v["tree"] == true)
            .filter(|v| v["used"].as_u64().is_some_and(|u| u > 0))
            .filter_map(|v| v["pid"].as_u64())
            .collect();
        pids.len() >= 3
    });
    // SAFETY: signalling the vramdoc this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let r = report(&out);
    let holders: Vec<u32> = processes(&r)
        .into_iter()
        .filter(|p| !p.4.is_empty())
        .map(|p| p.0)
        .collect();
    assert_eq!(holders.len(), 3, "{r}");
    eventually(SECS_10, "every holder of the job ended", || {
        holders.iter().all(|p| !alive(*p))
    });
    eventually(SECS_10, "the memory returned", || {
        used_now(&b).iter().all(|u| *u == 0)
    });
    assert!(
        markers(&r).iter().any(|m| m
            == "SIGTERM forwarded to the job's process group and 1 of its processes outside it"),
        "{:?}",
        markers(&r)
    );
}

/// `vramdoc run -- sh -c 'holder & …; exit 0'` with the command ending first.
fn run_leaving_a_holder(b: &CliBox, out: &Path, extra: &[&str]) -> Output {
    // Its output redirected: a background process holding the job's stdout/stderr keeps
    // them open for whoever reads vramdoc's to the end, as without vramdoc (docs/run.md).
    let script = format!("{EXE} sim hold --size 2GiB >/dev/null 2>&1 & sleep 1; exit 0");
    b.vramdoc()
        .args(["run", "--process-period", "100ms", "--out"])
        .arg(out)
        .args(extra)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap()
}

/// A background child that still holds memory when the command exits is named
/// (`outlived-command`, warn: its memory is not lost yet) and left running; with
/// `--kill-after` it is ended (SIGTERM) and the report says so.
#[test]
fn a_child_outliving_the_command_is_reported_and_kill_after_ends_it() {
    let b = CliBox::new("1x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("left.json");
    let o = run_leaving_a_holder(&b, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = report(&out);
    let f = findings(&r, "outlived-command");
    assert_eq!(f.len(), 1, "{r}");
    let pid = f[0]["pid"].as_u64().unwrap() as u32;
    let alive_after = alive(pid);
    // SAFETY: killing the holder this test's job left behind.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert!(alive_after, "left running without --kill-after");
    assert_eq!(f[0]["severity"], "warn");
    let title = f[0]["title"].as_str().unwrap();
    assert!(title.contains(&format!("kill {pid}")), "{title}");
    assert!(title.contains("GPU 0"), "{title}");
    let ev = f[0]["evidence"].to_string();
    assert!(ev.contains("parent") && ev.contains("(sh)"), "{ev}");
    assert!(ev.contains("sim hold --size 2GiB"), "{ev}");
    assert!(
        stderr(&o).contains("WARN outlived-command"),
        "{}",
        stderr(&o)
    );

    let out = tmp.path().join("ended.json");
    let o = run_leaving_a_holder(&b, &out, &["--kill-after", "2s"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = report(&out);
    let f = findings(&r, "outlived-command");
    assert_eq!(f.len(), 1, "{r}");
    let pid = f[0]["pid"].as_u64().unwrap() as u32;
    assert!(!alive(pid), "ended by --kill-after");
    assert_eq!(f[0]["severity"], "info");
    assert!(f[0]["title"].as_str().unwrap().contains("--kill-after"));
    assert!(markers(&r)
        .iter()
        .any(|m| m.starts_with("kill-after: SIGTERM to") && m.contains(&pid.to_string())));
    eventually(SECS_10, "the memory returned", || used_now(&b) == [0]);
}

/// `vramdoc run -- python3 job.py ctx:0 alloc:2048 fork:… exit:0`: the command makes a context
/// and 2 GiB, forks a child that keeps the inherited descriptors, and exits.
fn run_forking(b: &CliBox, out: &Path, extra: &[&str]) -> Output {
    b.vramdoc()
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .args(["run", "--process-period", "100ms", "--out"])
        .arg(out)
        .args(extra)
        .args([
            "--",
            "python3",
            JOB,
            "ctx:0",
            "alloc:2048",
            "fork:60000",
            "exit:0",
        ])
        .stdout(Stdio::null())
        .output()
        .unwrap()
}

/// Issue 25, Must-show: the command exits while its forked child keeps the memory through
/// the CUDA context's inherited descriptors; NVML lists the exited command, not the child.
/// One finding explains it, naming the child's PID with `kill PID` (warn, left running);
/// with `--kill-after` the child is ended and the finding is info.
#[test]
fn a_forked_child_keeping_the_exited_command_s_memory_is_named() {
    let b = CliBox::new("1x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("held.json");
    let o = run_forking(&b, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = report(&out);
    let f = findings(&r, "held-by-descriptor");
    assert_eq!(f.len(), 1, "{r}");
    let child = f[0]["pid"].as_u64().unwrap() as u32;
    let alive_after = alive(child);
    // SAFETY: killing the child this test's job left behind.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    assert!(alive_after, "left running without --kill-after");
    eventually(SECS_10, "the memory returned once the child ended", || {
        used_now(&b) == [0]
    });
    assert_eq!(f[0]["severity"], "warn");
    // The command, which made the context and exited (the child may be first seen after it
    // was re-parented to vramdoc: its recorded parent is not always the command).
    let parent = markers(&r)
        .iter()
        .find_map(|m| {
            m.strip_prefix("command started (pid ")?
                .strip_suffix(')')?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or_else(|| panic!("the command's start marker: {:?}", markers(&r)));
    let title = f[0]["title"].as_str().unwrap();
    // 2 GiB and the context.
    assert!(title.starts_with("GPU 0: 2."), "{title}");
    for want in [
        format!("GiB held by PID {child} (python3)"),
        format!("NVML lists PID {parent} (python3) (exited)"),
        format!("`kill {child}`"),
    ] {
        assert!(title.contains(&want), "{want:?} in {title}");
    }
    let ev = f[0]["evidence"].to_string();
    assert!(
        ev.contains("dev/nvidia0") && ev.contains(&format!("kill {child}")),
        "{ev}"
    );
    // The one finding at warn or error: not outlived-command, not held-after-exit.
    let alarms: Vec<&Value> = r["run"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] != "info")
        .collect();
    assert_eq!(alarms.len(), 1, "{alarms:?}");
    assert!(
        stderr(&o).contains("WARN held-by-descriptor"),
        "{}",
        stderr(&o)
    );

    let out = tmp.path().join("ended.json");
    let o = run_forking(&b, &out, &["--kill-after", "2s"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = report(&out);
    let f = findings(&r, "held-by-descriptor");
    assert_eq!(f.len(), 1, "{r}");
    let child = f[0]["pid"].as_u64().unwrap() as u32;
    assert!(!alive(child), "ended by --kill-after");
    assert_eq!(f[0]["severity"], "info");
    assert!(
        f[0]["title"].as_str().unwrap().contains("--kill-after"),
        "{}",
        f[0]["title"]
    );
    assert!(markers(&r)
        .iter()
        .any(|m| m.starts_with("kill-after: SIGTERM to") && m.contains(&child.to_string())));
    eventually(SECS_10, "the memory returned", || used_now(&b) == [0]);
}

/// Contexts on two GPUs, then the fork: one finding names the child once, with both GPUs.
#[test]
fn a_forked_child_keeping_contexts_on_two_gpus_is_one_finding() {
    let b = CliBox::new("2x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("two.json");
    let o = b
        .vramdoc()
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .args(["run", "--process-period", "100ms", "--out"])
        .arg(&out)
        .args(["--", "python3", JOB])
        .args([
            "ctx:0",
            "alloc:1024",
            "ctx:1",
            "alloc:1024",
            "fork:60000",
            "exit:0",
        ])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = report(&out);
    let f = findings(&r, "held-by-descriptor");
    let child = f.first().and_then(|f| f["pid"].as_u64());
    if let Some(pid) = child {
        // SAFETY: killing the child this test's job left behind.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    assert_eq!(f.len(), 1, "{r}");
    assert_eq!(f[0]["devices"], serde_json::json!([0, 1]), "{r}");
    let title = f[0]["title"].as_str().unwrap();
    assert!(
        title.starts_with("GPU 0: 1.") && title.contains(", GPU 1: 1."),
        "{title}"
    );
    eventually(SECS_10, "the memory returned", || used_now(&b) == [0, 0]);
}

/// The same job whose child exits with it (forked, done before the command ends), and one
/// whose worker was forked before CUDA was initialised (it holds no device file) and
/// outlives the command: the memory returns at the command's exit, no finding at warn.
#[test]
fn forked_workers_that_do_not_keep_memory_raise_nothing() {
    let b = CliBox::new("1x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    for (name, args) in [
        (
            "child done first",
            &["ctx:0", "alloc:2048", "fork:200", "sleep:600", "exit:0"][..],
        ),
        (
            "forked before CUDA",
            &["fork:4000", "ctx:0", "alloc:2048", "sleep:300", "exit:0"][..],
        ),
    ] {
        let out = tmp.path().join(format!("{}.json", name.replace(' ', "_")));
        let o = b
            .vramdoc()
            .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
            .args(["run", "--process-period", "100ms", "--out"])
            .arg(&out)
            .args(["--", "python3", JOB])
            .args(args)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let r = report(&out);
        let alarms: Vec<&Value> = r["run"]["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["severity"] != "info")
            .collect();
        assert!(alarms.is_empty(), "{name}: {alarms:?}");
        assert!(findings(&r, "held-by-descriptor").is_empty(), "{name}: {r}");
        eventually(SECS_10, "the memory returned", || used_now(&b) == [0]);
    }
}

/// `vramdoc run -- vramdoc sim run … python3 job.py`: the box's runtime daemon (started by
/// `sim init`, not by the job) starts the workload outside vramdoc's tree, in a
/// docker-shaped cgroup; it is recorded as the job's, not as a neighbour: through the marker
/// variable the runtime passes on, or without it through the new container cgroup, when the
/// job's container client (`vramdoc`, named in `VRAMDOC_CONTAINER_CLIENTS` as `docker` is by
/// default) ran; with no client of the job running, a new container is a neighbour's.
#[test]
fn a_container_started_by_the_command_is_recorded_as_the_job_s() {
    let b = CliBox::new("2x16GiB", &[]);
    let daemon: u64 = eventually(SECS_10, "the runtime daemon's pid file", || {
        std::fs::read_to_string(b.dir.join("runtime.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u64>().ok())
    });
    let tmp = tempfile::tempdir().unwrap();
    let unset: &[&str] = &["env", "-u", "VRAMDOC_MARKERS"];
    let python: &[&str] = &["python3", JOB, "ctx:0", "alloc:2048", "sleep:1200"];
    // A workload whose `comm` does not change at its exec (`vramdoc` → `vramdoc`).
    let hold: &[&str] = &[EXE, "sim", "hold", "--size", "2GiB", "--duration", "1200ms"];
    for (name, prefix, clients, workload, want) in [
        (
            "env",
            &[][..],
            "",
            python,
            Some("environment VRAMDOC_MARKERS"),
        ),
        ("cgroup", unset, "vramdoc", python, Some("cgroup /docker/")),
        (
            "cgroup, same comm",
            unset,
            "vramdoc",
            hold,
            Some("cgroup /docker/"),
        ),
        ("no client", unset, "", python, None),
    ] {
        let out = tmp
            .path()
            .join(format!("{}.json", name.replace([' ', ','], "_")));
        let md = tmp
            .path()
            .join(format!("{}.md", name.replace([' ', ','], "_")));
        let o = b
            .vramdoc()
            .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
            .env("VRAMDOC_CONTAINER_CLIENTS", clients)
            .args(["run", "--process-period", "100ms", "--out"])
            .arg(&out)
            .arg("--out")
            .arg(&md)
            .arg("--")
            .args(prefix)
            .args([EXE, "sim", "run", "--gpus", "1", "--"])
            .args(workload)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let r = report(&out);
        let procs = processes(&r);
        // This box's container (tests running beside this one start containers too).
        let py = procs
            .iter()
            .find(|p| p.2 == Some(daemon) && p.1 == workload[0].rsplit('/').next().unwrap());
        let tree_peak = r["run"]["tree_peaks"][1]["peak_used"].as_u64().unwrap();
        let Some(want) = want else {
            assert!(py.is_none(), "{name}: a neighbour's: {procs:?}");
            assert!(tree_peak < 2 * GIB, "{name}: not in the job's share");
            continue;
        };
        let py = py.unwrap_or_else(|| panic!("{name}: the workload is not the job's: {procs:?}"));
        // With the variable passed on, the environment says it (also when the cgroup was
        // seen first, between the runtime's fork and the exec); without it, the cgroup.
        let member = py.3.clone().unwrap_or_default();
        assert!(member.starts_with(want), "{name}: {member:?}");
        let md = std::fs::read_to_string(&md).unwrap();
        assert!(
            md.contains(&format!(" via {want}")),
            "{name}: the Markdown says why"
        );
        assert!(
            py.4.iter().any(|(d, p)| *d == 1 && *p >= 2 * GIB),
            "{name}: its memory on host GPU 1: {procs:?}"
        );
        assert!(tree_peak >= 2 * GIB, "{name}: the job's share on GPU 1");
    }
}

/// `srun vramdoc run -- …`: a process of the same Slurm step started by someone else
/// (slurmstepd starts the step's other tasks) is the job's; one of another step is not.
#[test]
fn a_process_of_vramdoc_s_slurm_step_is_the_job_s() {
    let b = CliBox::new("1x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let samples = tmp.path().join("s.jsonl");
    let out = tmp.path().join("r.json");
    let rec = b
        .vramdoc()
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_STEP_ID", "0")
        .args(["run", "--process-period", "50ms", "--samples"])
        .arg(&samples)
        .arg("--out")
        .arg(&out)
        .args(["--", "sleep", "2"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut rec = common::KillOnDrop(rec);
    eventually(SECS_10, "the recording started", || {
        std::fs::read_to_string(&samples).is_ok_and(|t| t.contains("\"name\":\"sleep\""))
    });
    let step = |s: &'static str, size: &str| {
        Holder::start(
            &b.dir,
            &[("SLURM_JOB_ID", "4242"), ("SLURM_STEP_ID", s)],
            &["--size", size, "--duration", "1s"],
        )
    };
    let same = step("0", "1GiB");
    let other = step("1", "512MiB");
    assert_eq!(rec.wait().unwrap().code(), Some(0));
    let procs = processes(&report(&out));
    let mine = procs.iter().find(|p| p.0 == same.pid).expect("same step");
    assert_eq!(mine.3.as_deref(), Some("Slurm step 4242.0"));
    assert!(mine.4.iter().any(|(_, p)| *p >= GIB), "{procs:?}");
    assert!(
        procs.iter().all(|p| p.0 != other.pid),
        "another step: {procs:?}"
    );
}

/// `vramdoc run --pid PID` records a running holder and its child until the holder exits;
/// `vramdoc mark --pid PID` reaches it; SIGTERM stops the recording, not the holder.
#[test]
fn attach_records_a_running_holder_and_its_children() {
    let b = CliBox::new("1x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = b.vramdoc();
    cmd.args(["sim", "hold", "--size", "1GiB", "--fork-child"]);
    let h = Holder::spawn(cmd);
    let child_pid = h.field("child").expect("child=");
    let out = tmp.path().join("a.json");
    let rec = b
        .vramdoc()
        .args(["run", "--process-period", "50ms", "--pid"])
        .arg(h.pid.to_string())
        .arg("--out")
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut rec = common::KillOnDrop(rec);
    // The marker file exists once attached; then a marker, then the holder exits.
    eventually(SECS_10, "mark --pid accepted", || {
        b.vramdoc()
            .args([
                "mark",
                "--pid",
                &h.pid.to_string(),
                "served",
                "1000",
                "requests",
            ])
            .status()
            .unwrap()
            .success()
    });
    std::thread::sleep(std::time::Duration::from_millis(400));
    let holder_pid = h.kill();
    let status = eventually(SECS_10, "the recording ends with the holder", || {
        rec.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(0));
    // SAFETY: the holder's forked child, started by this test's holder.
    unsafe { libc::kill(child_pid as i32, libc::SIGKILL) };
    let r = report(&out);
    let procs = processes(&r);
    let me = procs
        .iter()
        .find(|p| p.0 == holder_pid)
        .expect("the holder");
    assert_eq!(me.3.as_deref(), Some("attached"));
    assert!(me.4.iter().any(|(d, p)| *d == 0 && *p >= GIB), "{procs:?}");
    assert!(
        procs.iter().any(|p| p.0 == child_pid),
        "its child: {procs:?}"
    );
    let m = markers(&r);
    assert!(m.iter().any(|l| l == "served 1000 requests"), "{m:?}");
    assert!(m.iter().any(|l| l.starts_with("attached to pid")), "{m:?}");
    assert!(
        m.iter()
            .any(|l| l == &format!("process {holder_pid} exited")),
        "{m:?}"
    );
    assert!(r["run"]["command"].to_string().contains("sim"), "{r}");
    let attached = r["run"]["attached"].as_str().unwrap_or_default();
    assert!(
        attached.starts_with(&format!("pid {holder_pid}")),
        "{attached:?}"
    );
    let mut summary = String::new();
    use std::io::Read;
    rec.stderr
        .take()
        .unwrap()
        .read_to_string(&mut summary)
        .unwrap();
    assert!(summary.contains("was recorded while attached"), "{summary}");

    // SIGTERM ends the recording (exit 0, report written) and leaves the process running.
    let h = Holder::start(&b.dir, &[], &["--size", "512MiB"]);
    let out = tmp.path().join("b.json");
    let mut rec = common::KillOnDrop(
        b.vramdoc()
            .args(["run", "--process-period", "50ms", "--pid"])
            .arg(h.pid.to_string())
            .arg("--out")
            .arg(&out)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let marker = |pid: u32| {
        b.vramdoc()
            .args(["mark", "--pid", &pid.to_string(), "x"])
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    eventually(SECS_10, "attached", || marker(h.pid));
    // SAFETY: signalling the vramdoc this test started.
    unsafe { libc::kill(rec.id() as i32, libc::SIGTERM) };
    assert_eq!(rec.wait().unwrap().code(), Some(0));
    assert!(alive(h.pid), "the attached process keeps running");
    let m = markers(&report(&out));
    assert!(m.iter().any(|l| l.contains("stopped by SIGTERM")), "{m:?}");
    assert!(!marker(h.pid), "no recording is attached any more");
}

/// Issue 29 item 12: two `run --pid` on one PID each have their own marker file; the first
/// to end leaves the second's in place, and `mark --pid` still reaches the second.
#[test]
fn two_recordings_attached_to_one_pid_keep_their_own_markers() {
    let b = CliBox::new("1x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    // Marker files in a directory of this test's own.
    let rt = tempfile::tempdir().unwrap();
    let h = Holder::start(&b.dir, &[], &["--size", "512MiB"]);
    let files = || {
        std::fs::read_dir(rt.path().join("vramdoc")).map_or(0, |d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with(&format!("attach-{}-", h.pid)) && n.ends_with(".markers")
                })
                .count()
        })
    };
    let attach = |out: &Path| {
        common::KillOnDrop(
            b.vramdoc()
                .env("XDG_RUNTIME_DIR", rt.path())
                .args(["run", "--process-period", "50ms", "--pid"])
                .arg(h.pid.to_string())
                .arg("--out")
                .arg(out)
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let mark = |label: &str| {
        b.vramdoc()
            .env("XDG_RUNTIME_DIR", rt.path())
            .args(["mark", "--pid", &h.pid.to_string(), label])
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    let (first, second) = (
        tmp.path().join("first.json"),
        tmp.path().join("second.json"),
    );
    let mut one = attach(&first);
    eventually(SECS_10, "the first attached", || mark("one"));
    let mut two = attach(&second);
    eventually(SECS_10, "the second attached (its own marker file)", || {
        files() == 2
    });
    // SAFETY: signalling the vramdoc this test started.
    unsafe { libc::kill(one.id() as i32, libc::SIGTERM) };
    assert_eq!(one.wait().unwrap().code(), Some(0));
    assert_eq!(files(), 1, "the first removed only its own marker file");
    assert!(
        mark("after the first ended"),
        "the second's marker file is gone"
    );
    // SAFETY: as above.
    unsafe { libc::kill(two.id() as i32, libc::SIGTERM) };
    assert_eq!(two.wait().unwrap().code(), Some(0));
    let m = markers(&report(&second));
    assert!(m.iter().any(|l| l == "after the first ended"), "{m:?}");
    let m1 = markers(&report(&first));
    assert!(!m1.iter().any(|l| l == "after the first ended"), "{m1:?}");
}

/// `--container ID` (a 12-digit prefix, as `docker ps` shows it) and `--cgroup PATH` record
/// every process of a running container, found through its cgroup, for `--duration`.
#[test]
fn attach_to_a_container_by_id_or_cgroup() {
    let b = CliBox::new("1x16GiB", &[]);
    let c = common::clients::detached(&b, &["--gpus", "0"]);
    let id = c["id"].as_str().unwrap().to_string();
    let pid = c["pid"].as_u64().unwrap() as u32;
    let tmp = tempfile::tempdir().unwrap();
    for (flag, value, member) in [
        (
            "--container",
            id[..12].to_string(),
            format!("container {}", &id[..12]),
        ),
        (
            "--cgroup",
            format!("/docker/{id}"),
            format!("cgroup /docker/{id}"),
        ),
    ] {
        let out = tmp.path().join("c.json");
        let o = b
            .vramdoc()
            .args([
                "run",
                "--process-period",
                "50ms",
                "--duration",
                "600ms",
                "--force",
            ])
            .args([flag, &value])
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{flag}: {}", stderr(&o));
        let r = report(&out);
        let procs = processes(&r);
        let held = procs
            .iter()
            .find(|p| p.0 == pid)
            .unwrap_or_else(|| panic!("{flag}: {procs:?}"));
        assert_eq!(held.3.as_deref(), Some(member.as_str()), "{flag}");
        assert!(
            held.4.iter().any(|(d, p)| *d == 0 && *p >= GIB),
            "{flag}: {procs:?}"
        );
        assert!(
            markers(&r).iter().any(|m| m.contains("--duration reached")),
            "{flag}: {:?}",
            markers(&r)
        );
        assert!(alive(pid), "{flag}: the container keeps running");
    }
}

/// Attach needs a running process; `--duration` needs attach; a command and `--pid` do
/// not go together: usage errors (125), nothing recorded.
#[test]
fn attach_flags_are_checked_before_anything_runs() {
    let o = common::vramdoc()
        .args(["--sim", "1x16GiB", "run", "--pid", "999999999"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    for args in [
        &["run", "--duration", "1s", "--", "true"][..],
        &["run", "--pid", "1", "--", "true"][..],
        &["run", "--kill-after", "1s", "--pid", "1"][..],
    ] {
        let o = common::vramdoc().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(125), "{args:?}: {}", stderr(&o));
    }
    let o = common::vramdoc()
        .args(["mark", "--pid", "999999999", "x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no `vramdoc run --pid 999999999`"));
}

/// `--live` draws one line redrawn in place on a terminal (here `script`'s pseudo-terminal),
/// and nothing when stderr is a pipe.
#[test]
fn live_status_is_drawn_on_a_terminal_only() {
    let tmp = tempfile::tempdir().unwrap();
    let typescript = tmp.path().join("typescript");
    let line = format!(
        "{EXE} --sim 2x16GiB run --live --process-period 50ms -- {EXE} sim hold --device 1 --size 1GiB --duration 1s"
    );
    let o = Command::new("script")
        .args(["-qec", &line])
        .arg(&typescript)
        .env_remove("VRAMDOC_SIM_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("script(1) from util-linux");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let seen = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(seen.contains("\r\x1b[2Kvramdoc "), "{seen:?}");
    assert!(seen.contains("peak GPU0 0 B GPU1 1."), "{seen:?}");
    let o = common::vramdoc()
        .args(["--sim", "1x16GiB", "run", "--live", "--", "sleep", "0.5"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(!stderr(&o).contains("\x1b[2K"), "{}", stderr(&o));
}

/// Started from a script on a terminal (vramdoc not leading its process group), vramdoc's
/// own group is made the terminal's foreground while the job runs, so the job still reads
/// the terminal; the script gets it back afterwards.
#[test]
fn a_job_started_from_a_script_still_reads_the_terminal() {
    let inner = format!(
        "{EXE} --sim 1x16GiB run -- sh -c 'read x; echo got $x' 2>/dev/null; read y; echo after $y"
    );
    let mut feeder = Command::new("sh")
        .args(["-c", "sleep 1.5; echo hello; sleep 2.5; echo again"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input = feeder.stdout.take().unwrap();
    let o = Command::new("timeout")
        .args(["30", "script", "-qec"])
        .arg(format!("sh -c {}", shell_quote(&inner)))
        .arg("/dev/null")
        .stdin(input)
        .output()
        .expect("script(1) from util-linux");
    let _ = feeder.wait();
    let seen = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "stopped on the terminal? {seen:?}"
    );
    assert!(seen.contains("got hello"), "{seen:?}");
    assert!(seen.contains("after again"), "{seen:?}");
}

/// `'…'` for sh.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Issue 37 item 6: a command that allocates, forks a child that keeps the memory through
/// the context's inherited descriptors, and exits before the first process round after its
/// start (`--process-period 5s`: the next round comes seconds after its exit) gets the same
/// finding wherever its output goes: vramdoc's stdout a regular file, a pipe, and a pipe
/// the child itself keeps open. Its PID is the job's from spawn, so what NVML lists for it
/// after its exit is the job's, and the child (re-parented to vramdoc) is the holder.
#[test]
fn a_command_that_exits_before_the_first_round_is_named_wherever_its_output_goes() {
    let b = CliBox::new("1x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    for (name, fork, to_file) in [
        ("stdout to a file", "fork:60000", true),
        ("stdout to a pipe", "fork:60000", false),
        ("a pipe the child keeps", "forkout:60000", false),
    ] {
        let out = tmp.path().join(format!("{}.json", name.replace(' ', "_")));
        let mut c = b.vramdoc();
        c.env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
            .args(["run", "--process-period", "5s", "--out"])
            .arg(&out)
            .args(["--", "python3", JOB, "ctx:0", "alloc:2048", fork, "exit:0"])
            .stderr(Stdio::piped());
        if to_file {
            c.stdout(std::fs::File::create(tmp.path().join("stdout.txt")).unwrap());
        } else {
            c.stdout(Stdio::piped());
        }
        // Waited for without reading the pipes to their end: the child may hold them.
        let mut child = c.spawn().unwrap();
        let mut err = child.stderr.take().unwrap();
        let text = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let status = child.wait().unwrap();
        let r = report(&out);
        let f = findings(&r, "held-by-descriptor");
        let holder = f.first().and_then(|f| f["pid"].as_u64());
        if let Some(pid) = holder {
            // SAFETY: killing the child this test's job left behind.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        drop(child);
        let text = text.join().unwrap_or_default();
        assert_eq!(status.code(), Some(0), "{name}: {text}");
        assert_eq!(f.len(), 1, "{name}: {text}\n{r}");
        assert_eq!(f[0]["severity"], "warn", "{name}: {}", f[0]);
        let title = f[0]["title"].as_str().unwrap();
        let holder = holder.unwrap();
        assert!(
            title.contains(&format!("held by PID {holder} (python3)"))
                && title.contains("(python3) (exited)"),
            "{name}: {title}"
        );
        // The command is one of the job's processes, from its start.
        let cmd = markers(&r)
            .iter()
            .find_map(|m| {
                m.strip_prefix("command started (pid ")?
                    .strip_suffix(')')?
                    .parse::<u32>()
                    .ok()
            })
            .unwrap();
        assert!(
            processes(&r).iter().any(|p| p.0 == cmd),
            "{name}: {:?}",
            processes(&r)
        );
        eventually(SECS_10, "the memory returned", || used_now(&b) == [0]);
    }
}

/// Issue 39: the summary names the process NVML lists by the program it ran then, never by
/// the one it exec'd away from: `sh` sleeps through a process round (which reads `sh`),
/// then execs python3, which makes the context, forks the holder and exits between two
/// rounds. Its name is read again as it ends (its zombie, before vramdoc reaps it).
#[test]
fn the_listed_command_is_named_by_the_program_it_exec_d() {
    let b = CliBox::new("1x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("exec.json");
    let script = format!("sleep 1.2; exec python3 {JOB} ctx:0 alloc:2048 fork:60000 exit:0");
    let o = b
        .vramdoc()
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .args(["run", "--process-period", "1s", "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let r = report(&out);
    let f = findings(&r, "held-by-descriptor");
    if let Some(pid) = f.first().and_then(|f| f["pid"].as_u64()) {
        // SAFETY: killing the child this test's job left behind.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(f.len(), 1, "{r}");
    let cmd = markers(&r)
        .iter()
        .find_map(|m| {
            m.strip_prefix("command started (pid ")?
                .strip_suffix(')')?
                .parse::<u32>()
                .ok()
        })
        .unwrap();
    let title = f[0]["title"].as_str().unwrap();
    assert!(
        title.contains(&format!("NVML lists PID {cmd} (python3) (exited)")),
        "{title}"
    );
    assert!(!title.contains("(sh)"), "{title}");
    let named: Vec<String> = processes(&r)
        .into_iter()
        .filter(|p| p.0 == cmd)
        .map(|p| p.1)
        .collect();
    assert_eq!(named, ["python3"], "{:?}", processes(&r));
    assert!(
        stderr(&o).contains(&format!("PID {cmd} (python3)")),
        "{}",
        stderr(&o)
    );
    eventually(SECS_10, "the memory returned", || used_now(&b) == [0]);
}
