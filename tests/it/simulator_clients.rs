//! The simulated machine as clients nobody here wrote see it: NVIDIA's Python NVML bindings
//! (`pynvml`), plain ctypes CUDA clients, NVIDIA's CUDA Python bindings (`cuda-python`), the
//! monitors `nvitop` and `gpustat`, and vramdoc's own real backends over the simulated
//! libraries — one test per behaviour of docs/simulator.md "Modelled real-driver behaviours"
//! added for issues 15, 17, 18 and 19 (CUDA IPC and peer access, container runtimes, the
//! runtime daemon, coherent memory, `C+G`, memory-info profiles, sticky errors, monitors,
//! `cuGetProcAddress_v2`, NVML hangs, lost sessions, call counters, a stopped broker).
//! Clients: tests/simulator_clients.py, helpers: tests/it/common/clients.rs. A missing Python
//! package FAILS naming its install (scripts/test installs them); `VRAMDOC_PYTHON` names the
//! interpreter. Container tests need root (mount namespaces, cgroups), as on CI.

use crate::common;
use common::clients::*;
use common::hold::Holder;
use common::poll::{eventually, SECS_10};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Issue 19, item 9: a stopped broker

/// A stopped driver broker (SIGSTOP) whose backlog is full must neither hang nor stall a new
/// client of the box: it uses its own PID after a bounded wait. (Before: connect(2) blocked
/// forever once the backlog was full.)
#[test]
fn a_stopped_broker_with_a_full_backlog_does_not_hang_clients() {
    let b = CliBox::new("t4", &[]);
    let broker: i32 = std::fs::read_to_string(b.dir.join("driver.pid"))
        .expect("sim init writes driver.pid")
        .trim()
        .parse()
        .unwrap();
    // SAFETY: stopping the broker of the box this test made (resumed below).
    assert_eq!(unsafe { libc::kill(broker, libc::SIGSTOP) }, 0);
    let sock = vramdoc_sim::broker::socket_path(&b.dir);
    let mut held = Vec::new();
    while let Ok(s) = vramdoc_sim::broker::connect_nonblocking(&sock) {
        held.push(s);
        assert!(held.len() < 10_000, "the broker's backlog never filled");
    }
    let start = Instant::now();
    let mut child = b
        .vramdoc()
        .args(["sim", "hold", "--size", "64MiB", "--duration", "10ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        eventually(
            Duration::from_secs(20),
            "a client of a stopped broker to finish (it hung)",
            || child.try_wait().unwrap(),
        )
    }));
    // SAFETY: resuming the broker stopped above.
    unsafe { libc::kill(broker, libc::SIGCONT) };
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let _ = child.kill();
            std::panic::resume_unwind(e)
        }
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "holder failed: {err}");
    // A clear line saying which broker did not answer, and what the client did instead.
    assert!(
        err.contains(&format!("driver broker (pid {broker}"))
            && err.contains("backlog is full")
            && err.contains("uses its own PID"),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "stalled {:?}",
        start.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 15: CUDA IPC, peer access

/// A process that opens a peer's memory through CUDA IPC is listed on that peer's GPU with
/// 0 bytes (pytorch/pytorch#64130), and the memory is charged once, to the exporter.
#[test]
fn an_ipc_importer_is_listed_with_zero_bytes_and_the_memory_is_charged_once() {
    require_python("pynvml", "nvidia-ml-py");
    let b = CliBox::new("2xh100", &[]);
    let lib = common::simgpu_lib_dir();
    let mut exporter = Live::start(client(&b.dir, lib, &["ipc-export", "0", &GIB.to_string()]));
    let e = exporter.line();
    assert_eq!(e["rc"], 0, "{e}");
    assert_eq!(
        e["pool_export"], 1,
        "pool memory: CUDA_ERROR_INVALID_VALUE: {e}"
    );
    assert_eq!(
        e["own_open"], 201,
        "own handle: CUDA_ERROR_INVALID_CONTEXT: {e}"
    );
    let handle = e["handle"].as_str().unwrap().to_string();
    let before = client_json(&b.dir, lib, &["nvml"]);
    let used_before = field(&before, 0, "v2")[2].as_u64().unwrap();

    let mut importer = Live::start(client(&b.dir, lib, &["ipc-open", "1", &handle]));
    let i = importer.line();
    assert_eq!(i["rc"], 0, "{i}");
    assert_eq!(i["again"], 0, "{i}");
    assert_eq!(
        i["same_ptr"], true,
        "a second open returns the same pointer: {i}"
    );
    assert_eq!(i["copy"], 801, "contents are not shared: {i}");
    let (epid, ipid) = (e["pid"].as_u64().unwrap(), i["pid"].as_u64().unwrap());
    let v = client_json(&b.dir, lib, &["nvml"]);
    let on0 = listed(field(&v, 0, "compute"));
    assert!(
        on0.contains(&(ipid, Some(0))),
        "importer listed with 0 bytes on GPU 0: {v}"
    );
    assert!(
        on0.iter().any(|(p, u)| *p == epid && u.unwrap() >= GIB),
        "{v}"
    );
    assert_eq!(
        field(&v, 0, "v2")[2].as_u64().unwrap(),
        used_before,
        "charged once: {v}"
    );
    assert!(listed(field(&v, 1, "compute"))
        .iter()
        .any(|(p, _)| *p == ipid));

    importer.send("close");
    assert_eq!(
        importer.line()["close"],
        serde_json::json!([0, 0, 1]),
        "two opens, two closes"
    );
    let v = client_json(&b.dir, lib, &["nvml"]);
    assert!(
        !listed(field(&v, 0, "compute"))
            .iter()
            .any(|(p, _)| *p == ipid),
        "{v}"
    );
    importer.finish();
    exporter.finish();
}

/// Peer access: same datacenter boards can, GeForce boards cannot (stock drivers); enabling
/// twice and disabling twice give the documented codes; cuMemcpyPeer needs no peer access.
#[test]
fn peer_access_follows_the_boards_and_the_documented_codes() {
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("2xh100", &[]);
    let v = client_json(&b.dir, lib, &["peer"]);
    assert_eq!(v["can"], serde_json::json!([[0, 1], [1, 0]]), "{v}");
    assert_eq!(v["enable"], 0, "{v}");
    assert_eq!(v["enable_again"], 704, "PEER_ACCESS_ALREADY_ENABLED: {v}");
    assert_eq!(v["disable"], 0, "{v}");
    assert_eq!(v["disable_again"], 705, "PEER_ACCESS_NOT_ENABLED: {v}");
    assert_eq!(v["enable_self"], 201, "INVALID_CONTEXT: {v}");
    assert_eq!(v["memcpy_peer"], 0, "{v}");
    assert_eq!(v["copied"], "peer-bytes", "{v}");
    let g = CliBox::new("2xrtx3090", &[]);
    let v = client_json(&g.dir, lib, &["peer"]);
    assert_eq!(v["can"], serde_json::json!([[0, 0], [0, 0]]), "{v}");
    assert_eq!(v["enable"], 217, "PEER_ACCESS_UNSUPPORTED: {v}");
    assert_eq!(
        v["memcpy_peer"], 0,
        "copies are staged without peer access: {v}"
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 15: containers of the box's runtime

/// The runtime restricts what a container sees by the device files it mounts (not by the
/// variable), and sets what the device plugin and runtime set for each strategy.
#[test]
fn container_strategies_mount_their_gpus_and_set_the_plugins_environment() {
    require_python("pynvml", "nvidia-ml-py");
    let b = CliBox::new("3x16GiB", &[]);
    let lib = common::simgpu_lib_dir();
    let uuids: Vec<String> = b.sim().devices().iter().map(|d| d.uuid.clone()).collect();
    let in_container = |args: &[&str]| -> Value {
        let mut c = b.vramdoc();
        c.args(["sim", "run"])
            .args(args)
            .arg("--")
            .arg(python())
            .arg(script())
            .arg("nvml");
        c.env("LD_LIBRARY_PATH", lib);
        common::json_ok(&c.output().unwrap(), "nvml in a container")
    };
    let seen = |v: &Value| -> Vec<String> {
        v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["uuid"].as_str().unwrap().to_string())
            .collect()
    };
    for strategy in ["envvar", "volume-mounts", "cdi", "mig"] {
        let v = in_container(&["--gpus", "2", "--strategy", strategy]);
        assert_eq!(seen(&v), [uuids[2].clone()], "{strategy}: {v}");
    }
    // The variable alone, on a host process, restricts nothing: the driver never reads it.
    let mut c = client(&b.dir, lib, &["nvml"]);
    c.env("NVIDIA_VISIBLE_DEVICES", "1");
    let out = c.output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen(&v).len(), 3, "{v}");

    // What each strategy leaves in the process's environment, read from the host.
    let envvar = detached(&b, &["--gpus", "0,2"]);
    let pid = envvar["pid"].as_u64().unwrap();
    assert_eq!(
        environ(pid, "NVIDIA_VISIBLE_DEVICES").unwrap(),
        format!("{},{}", uuids[0], uuids[2])
    );
    let index = detached(&b, &["--gpus", "1", "--device-ids", "index"]);
    assert_eq!(
        environ(index["pid"].as_u64().unwrap(), "NVIDIA_VISIBLE_DEVICES").unwrap(),
        "1"
    );
    let mig = detached(&b, &["--gpus", "1", "--strategy", "mig"]);
    let mig_id = environ(mig["pid"].as_u64().unwrap(), "NVIDIA_VISIBLE_DEVICES").unwrap();
    assert!(mig_id.starts_with("MIG-") && mig_id != uuids[1], "{mig_id}");
    for (cdi_env, want) in [("all", "all"), ("void", "void")] {
        let c = detached(
            &b,
            &["--gpus", "1", "--strategy", "cdi", "--cdi-env", cdi_env],
        );
        assert_eq!(
            environ(c["pid"].as_u64().unwrap(), "NVIDIA_VISIBLE_DEVICES").unwrap(),
            want
        );
    }
    // volume-mounts: the list is a directory of /dev/null bind mounts named by device ID,
    // readable from the host through /proc/PID/root like a real container's.
    let vm = detached(&b, &["--gpus", "1,2", "--strategy", "volume-mounts"]);
    let vpid = vm["pid"].as_u64().unwrap();
    assert_eq!(
        environ(vpid, "NVIDIA_VISIBLE_DEVICES").unwrap(),
        "/var/run/nvidia-container-devices"
    );
    // /var/run is a symlink to /run on most distributions; an absolute link would resolve
    // against the reader's root, so resolve it first, as a host-side reader must.
    let var_run = std::fs::canonicalize("/var/run").unwrap();
    let root = PathBuf::from(format!("/proc/{vpid}/root"))
        .join(var_run.strip_prefix("/").unwrap())
        .join("nvidia-container-devices");
    let mut entries: Vec<String> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    let mut want = vec![uuids[1].clone(), uuids[2].clone()];
    want.sort();
    assert_eq!(entries, want);
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(root.join(&uuids[1]))
        .unwrap()
        .file_type()
        .is_char_device());
    // The host's NVML sees the container's process under its host PID, on host GPU 1.
    let host = client_json(&b.dir, lib, &["nvml"]);
    assert!(
        listed(field(&host, 1, "compute"))
            .iter()
            .any(|(p, _)| *p == vpid),
        "{host}"
    );
    // Removing the box (CliBox's drop) makes its runtime daemon kill these containers.
}

/// `vramdoc sim run` asks the box's runtime daemon: the job runs outside the client's
/// process tree (the daemon is its parent), in its own Docker-shaped cgroup named by the id
/// the cidfile holds; signals are forwarded, the exit status is the job's, and the cgroup
/// is removed afterwards.
#[test]
fn the_runtime_daemon_runs_jobs_outside_the_callers_tree_in_their_own_cgroup() {
    let b = CliBox::new("t4", &[]);
    let daemon: u32 = std::fs::read_to_string(b.dir.join("runtime.pid"))
        .expect("sim init starts the runtime daemon")
        .trim()
        .parse()
        .unwrap();
    let cid = b.dir.parent().unwrap().join("cid");
    let mut cmd = b.vramdoc();
    cmd.args(["sim", "run", "--gpus", "0", "--cidfile"])
        .arg(&cid)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_vramdoc"))
        .args(["sim", "hold", "--size", "256MiB"]);
    let h = Holder::spawn(cmd);
    let client = h.child.id();
    assert_ne!(h.pid, client);
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", h.pid)).unwrap();
    let ppid: u32 = stat[stat.rfind(')').unwrap() + 2..]
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        ppid, daemon,
        "the daemon, not the client ({client}), is the parent"
    );
    let id = std::fs::read_to_string(&cid).unwrap();
    assert_eq!(id.len(), 64);
    let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", h.pid)).unwrap();
    assert!(cgroup.contains(&format!("/docker/{id}")), "{cgroup}");
    let dirs: Vec<PathBuf> = vramdoc_sim::container::cgroup_hierarchies()
        .iter()
        .map(|hi| hi.mount.join("docker").join(&id))
        .collect();
    assert!(dirs.iter().all(|d| d.is_dir()), "{dirs:?}");
    // SIGTERM to the client reaches the job through the daemon; the client exits with it.
    let mut h = h;
    // SAFETY: signalling the `sim run` client this test started.
    unsafe { libc::kill(client as i32, libc::SIGTERM) };
    let status = eventually(SECS_10, "the client to exit when the job does", || {
        h.child.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(143), "128 + SIGTERM, as docker run");
    eventually(SECS_10, "the job's cgroup is removed", || {
        dirs.iter().all(|d| !d.exists())
    });
    // A cidfile that exists already is refused (docker's contract).
    let out = b
        .vramdoc()
        .args(["sim", "run", "--cidfile"])
        .arg(&cid)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("container ID file found"));
}

// ---------------------------------------------------------------------------------------------
// Issue 15: coherent memory, C+G

/// GH200-style coherent memory: an exited process's pages stay counted as used (NVML's
/// documented note for GPUs that are NUMA nodes) until an allocation needs them; ordinary
/// boards return them at once.
#[test]
fn coherent_memory_keeps_an_exited_process_pages_used_until_reclaimed() {
    require_python("pynvml", "nvidia-ml-py");
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("gh200,h100", &[]);
    let v = client_json(&b.dir, lib, &["nvml"]);
    let node = field(&v, 0, "numa")
        .as_u64()
        .expect("GPU memory is a NUMA node");
    assert_eq!(field(&v, 1, "numa_error"), 3, "NOT_SUPPORTED on H100: {v}");
    let cuda = client_json(&b.dir, lib, &["numa"]);
    assert_eq!(cuda, serde_json::json!([[1, node], [0, -1]]), "CUDA agrees");
    for dev in ["0", "1"] {
        let h = Holder::start(&b.dir, &[], &["--device", dev, "--size", "10GiB"]);
        h.kill();
    }
    let v = client_json(&b.dir, lib, &["nvml"]);
    let kept = field(&v, 0, "v2")[2].as_u64().unwrap();
    assert!(kept >= 10 * GIB, "freed pages stay used after exit: {v}");
    assert!(
        listed(field(&v, 0, "compute")).is_empty(),
        "no live owner: {v}"
    );
    assert_eq!(
        field(&v, 1, "v2")[2],
        0,
        "an H100 returns memory at exit: {v}"
    );
    // An allocation that needs the pages gets them back.
    let free = field(&v, 0, "v2")[3].as_u64().unwrap();
    let want = free + 4 * GIB;
    let h = Holder::start(&b.dir, &[], &["--device", "0", "--size", &want.to_string()]);
    let v = client_json(&b.dir, lib, &["nvml"]);
    let used = field(&v, 0, "v2")[2].as_u64().unwrap();
    assert!(used < kept + want, "reclaimed, not added ({}): {v}", h.pid);
}

/// A process with compute and graphics contexts (`C+G`) is in both NVML lists with the same
/// memory, counted once in the device's total; nvitop shows it as `C+G`.
#[test]
fn a_c_plus_g_process_is_in_both_lists_and_counted_once() {
    require_python("nvitop", "nvitop");
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("rtx4090", &[]);
    let h = Holder::start(&b.dir, &[], &["--also-graphics", "--size", "1GiB"]);
    let v = client_json(&b.dir, lib, &["nvml"]);
    let c = listed(field(&v, 0, "compute"));
    let g = listed(field(&v, 0, "graphics"));
    assert_eq!(c, g, "{v}");
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].0, h.pid as u64);
    assert_eq!(field(&v, 0, "v2")[2].as_u64(), c[0].1, "counted once: {v}");
    assert_eq!(field(&v, 0, "display_active"), 1, "an X-like client: {v}");
    let out = Command::new(python())
        .args([
            "-c",
            "from nvitop import Device; import json; d=Device(0); \
             print(json.dumps({str(p): q.type for p, q in d.processes().items()}))",
        ])
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .env("LD_LIBRARY_PATH", lib)
        .output()
        .unwrap();
    let types: Value = common::json_ok(&out, "nvitop api");
    assert_eq!(types[h.pid.to_string()], "C+G", "{types}");
}

// ---------------------------------------------------------------------------------------------
// Issue 15: nvmlDeviceGetMemoryInfo_v2 profiles, and vramdoc's v1 fallback

#[test]
fn memory_info_v2_profiles_and_vramdoc_falls_back_to_v1() {
    require_python("pynvml", "nvidia-ml-py");
    require_python("gpustat", "gpustat");
    let ctx = 448 * MIB;
    // Before R510: no _v2 symbol at all; v1 leaves the reservation out of total and used.
    let old = CliBox::new("a100", &["--driver", "470"]);
    let libs = old.libs();
    let h = Holder::start(&old.dir, &[], &["--size", "2GiB"]);
    let v = client_json(
        &old.dir,
        &libs,
        &[
            "nvml",
            "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetComputeRunningProcesses_v2",
        ],
    );
    assert_eq!(v["symbols"]["nvmlDeviceGetMemoryInfo_v2"], false, "{v}");
    assert_eq!(
        v["symbols"]["nvmlDeviceGetComputeRunningProcesses_v3"],
        false
    );
    assert_eq!(
        v["symbols"]["nvmlDeviceGetComputeRunningProcesses_v2"],
        true
    );
    let dev = old.sim().devices()[0].clone();
    assert_eq!(
        field(&v, 0, "v1"),
        &serde_json::json!([
            dev.total - dev.reserved,
            2 * GIB + ctx,
            dev.total - dev.reserved - 2 * GIB - ctx
        ]),
        "{v}"
    );
    assert_eq!(
        field(&v, 0, "compute_error"),
        "NVMLLibraryMismatchError",
        "pynvml's unversioned call needs _v3: {v}"
    );
    assert_eq!(
        listed(field(&v, 0, "compute_v2")),
        [(h.pid as u64, Some(2 * GIB + ctx))],
        "{v}"
    );
    let s = vramdoc_scan(&old, &libs);
    assert_eq!(scan_memory(&s)["used"], 2 * GIB + ctx, "{s}");
    let shared = vramdoc_scan(&old, common::simgpu_lib_dir()); // answers FUNCTION_NOT_FOUND
    assert_eq!(scan_memory(&shared)["used"], 2 * GIB + ctx, "{shared}");
    assert_eq!(scan_memory(&s)["reserved"], 0);
    assert_eq!(
        scan_used_by(&s, h.pid),
        Some(2 * GIB + ctx),
        "the _v2 process list: {s}"
    );
    let g = Command::new("gpustat")
        .arg("--json")
        .env("VRAMDOC_SIM_DIR", &old.dir)
        .env("LD_LIBRARY_PATH", &libs)
        .output()
        .unwrap();
    let g = common::json_ok(&g, "gpustat on a pre-R510 profile");
    assert_eq!(g["gpus"][0]["memory.used"], (2 * GIB + ctx) / MIB);

    // R510.39: the symbol exists; a bare `2` as version is FUNCTION_NOT_FOUND (13).
    let r510 = CliBox::new("a100", &["--driver", "510.39.01"]);
    let libs = r510.libs();
    let v = client_json(&r510.dir, &libs, &["nvml"]);
    assert_eq!(field(&v, 0, "v2_bare_version_error"), 13, "{v}");
    assert!(field(&v, 0, "v2").is_array(), "{v}");
    let dev = r510.sim().devices()[0].clone();
    assert_eq!(
        field(&v, 0, "v1")[1],
        dev.reserved,
        "v1 used counts the reservation: {v}"
    );
    assert_eq!(
        scan_memory(&vramdoc_scan(&r510, &libs))["reserved"],
        dev.reserved
    );

    // WSL: _v2 fails (UNKNOWN); per-process memory is not available (WDDM).
    let wsl = CliBox::new("rtx4090", &["--platform", "wsl"]);
    let lib = common::simgpu_lib_dir();
    let h = Holder::start(&wsl.dir, &[], &["--size", "1GiB"]);
    let v = client_json(&wsl.dir, lib, &["nvml"]);
    assert_eq!(field(&v, 0, "v2_error"), 999, "{v}");
    assert_eq!(
        listed(field(&v, 0, "compute")),
        [(h.pid as u64, None)],
        "{v}"
    );
    let s = vramdoc_scan(&wsl, lib);
    let dev = wsl.sim().devices()[0].clone();
    assert_eq!(
        scan_memory(&s)["used"],
        GIB + ctx + dev.reserved,
        "v1 used, reservation included: {s}"
    );
    assert_eq!(scan_memory(&s)["reserved"], 0, "{s}");
}

// ---------------------------------------------------------------------------------------------
// Issue 15: sticky errors

/// After a kernel fault every call on the context returns CUDA_ERROR_ILLEGAL_ADDRESS; NVML
/// still lists the process's memory; a new process is fine.
#[test]
fn an_illegal_address_sticks_to_its_context_and_not_to_the_next_process() {
    require_python("pynvml", "nvidia-ml-py");
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("2x16GiB", &[]);
    b.fault(&["--illegal-address", "0"]);
    let mut bad = Live::start(client(&b.dir, lib, &["launch", "0", ptx()]));
    let r = bad.line();
    for key in ["launch", "sync", "alloc", "copy", "launch_again"] {
        assert_eq!(r[key], 700, "{key}: {r}");
    }
    let v = client_json(&b.dir, lib, &["nvml"]);
    assert!(
        listed(field(&v, 0, "compute"))
            .iter()
            .any(|(p, u)| *p == r["pid"].as_u64().unwrap() && u.unwrap() > 0),
        "{v}"
    );
    let good = Live::start(client(&b.dir, lib, &["launch", "0", ptx()])).line();
    for key in ["launch", "sync", "alloc", "copy", "launch_again"] {
        assert_eq!(good[key], 0, "{key}: {good}");
    }
    bad.finish();
}

// ---------------------------------------------------------------------------------------------
// Issue 15: third-party monitors and CUDA clients

/// nvitop and gpustat, installed from PyPI, run for real against the simulated
/// libnvidia-ml.so.1: exit 0, the right devices, memory and processes, N/A exactly where a
/// real board has none (fan on a passively cooled H100), and no missing function.
#[test]
fn nvitop_and_gpustat_run_on_the_simulated_box() {
    require_python("nvitop", "nvitop");
    require_python("gpustat", "gpustat");
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("h100,rtx4090", &[]);
    let h = Holder::start(&b.dir, &[], &["--size", "2GiB"]);
    let x = Holder::start(
        &b.dir,
        &[],
        &["--device", "1", "--graphics", "--size", "200MiB"],
    );
    let run = |prog: &str, args: &[&str]| {
        let out = Command::new(prog)
            .args(args)
            .env("VRAMDOC_SIM_DIR", &b.dir)
            .env("LD_LIBRARY_PATH", lib)
            .env("COLUMNS", "120")
            .output()
            .unwrap_or_else(|e| panic!("{prog}: {e}"));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{prog} {args:?}: {err}");
        assert!(
            !err.contains("FunctionNotFound") && !err.contains("undefined symbol"),
            "{prog}: {err}"
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let g: Value = serde_json::from_str(&run("gpustat", &["--json"])).unwrap();
    let gpus = g["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpus[0]["fan.speed"], Value::Null, "no fan on an H100: {g}");
    assert!(gpus[1]["fan.speed"].is_u64(), "a GeForce fan: {g}");
    assert_eq!(gpus[0]["enforced.power.limit"], 700);
    let held = (2 * GIB + 448 * MIB) / MIB;
    assert_eq!(gpus[0]["memory.used"], held);
    assert_eq!(gpus[0]["processes"][0]["pid"], h.pid);
    assert_eq!(
        gpus[1]["processes"][0]["pid"], x.pid,
        "graphics clients too"
    );
    let once = run("nvitop", &["--once", "--only", "0"]);
    assert!(once.contains("H100 80GB HBM3"), "{once}");
    assert!(once.contains(&h.pid.to_string()), "{once}");
    assert!(once.contains(&format!("{held}MiB")), "{once}");
    let snap = run(
        python().as_str(),
        &[
            "-c",
            "from nvitop import Device; import json; \
             print(json.dumps([{k: str(v) for k, v in d.as_snapshot().__dict__.items()} for d in Device.all()]))",
        ],
    );
    let snap: Value = serde_json::from_str(&snap).unwrap();
    assert_eq!(snap[0]["fan_speed"], "N/A", "{snap}");
    assert_eq!(snap[0]["performance_state"], "P0");
    assert_eq!(snap[0]["persistence_mode"], "Enabled");
    assert_eq!(
        snap[1]["display_active"], "Enabled",
        "an X-like client on GPU 1: {snap}"
    );
}

/// NVIDIA's CUDA Python bindings (they resolve every function but two through
/// cuGetProcAddress_v2) get the same simulated driver: init, devices, an allocation NVML
/// sees, and its release.
#[test]
fn cuda_python_bindings_get_the_same_driver() {
    require_python("cuda.bindings.driver", "cuda-python");
    require_python("pynvml", "nvidia-ml-py");
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("h100,t4", &[]);
    let mut c = Live::start(client(&b.dir, lib, &["cuda-python"]));
    let v = c.line();
    assert_eq!(v["version"], 12040, "{v}");
    assert_eq!(v["count"], 2);
    assert_eq!(v["name"], "NVIDIA H100 80GB HBM3", "fastest first");
    let pid = v["pid"].as_u64().unwrap();
    let n = client_json(&b.dir, lib, &["nvml"]);
    assert_eq!(
        listed(field(&n, 0, "compute")),
        [(pid, Some(GIB + 448 * MIB))],
        "{n}"
    );
    c.send("free");
    assert_eq!(c.line()["freed"], true);
    let n = client_json(&b.dir, lib, &["nvml"]);
    assert_eq!(
        listed(field(&n, 0, "compute")),
        [(pid, Some(448 * MIB))],
        "{n}"
    );
    c.finish();
}

/// A client that dlsyms only `cuDriverGetVersion` and `cuGetProcAddress_v2`: base names and
/// versions resolve to the right variants; unknown names, too-old versions and versions
/// newer than the driver answer as documented.
#[test]
fn cu_get_proc_address_resolves_by_base_name_and_version() {
    require_python("pynvml", "nvidia-ml-py");
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("t4", &[]);
    let mut c = Live::start(client(&b.dir, lib, &["procaddr"]));
    let v = c.line();
    // (rc, pointer, status)
    assert_eq!(v["unknown"][0], 0);
    assert_eq!(v["unknown"][1], Value::Null, "{v}");
    assert_eq!(v["unknown"][2], 1, "SYMBOL_NOT_FOUND: {v}");
    assert_eq!(v["too_old"][2], 2, "VERSION_NOT_SUFFICIENT: {v}");
    assert_eq!(
        v["newer_than_driver"][0], 1,
        "CUDA_ERROR_INVALID_VALUE: {v}"
    );
    assert!(v["per_thread"][1].is_u64(), "per-thread variant: {v}");
    assert_eq!(v["count"], 1);
    assert_eq!(v["alloc"], 0);
    let n = client_json(&b.dir, lib, &["nvml"]);
    let pid = v["pid"].as_u64().unwrap();
    assert_eq!(
        listed(field(&n, 0, "compute")),
        [(pid, Some(256 * MIB + 448 * MIB))],
        "{n}"
    );
    c.send("free");
    assert_eq!(c.line()["free"], 0);
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// Issues 17 and 18: NVML hangs, lost sessions, call counters

/// `--nvml-hang --device N`: calls on GPU N block until the fault is cleared (other GPUs
/// answer), and at most the bound, then fail with NVML_ERROR_UNKNOWN.
#[test]
fn nvml_calls_hang_on_the_faulted_gpu_until_cleared_and_within_the_bound() {
    require_python("pynvml", "nvidia-ml-py");
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("2xt4", &[]);
    b.fault(&["--nvml-hang", "--device", "1", "--hang-limit", "30s"]);
    let fine = client_json(&b.dir, lib, &["nvml-time", "0"]);
    assert_eq!(fine["error"], Value::Null);
    assert!(fine["seconds"].as_f64().unwrap() < 1.0, "{fine}");
    let mut hung = Live::start(client(&b.dir, lib, &["nvml-time", "1", "--announce"]));
    assert_eq!(hung.line()["start"], true);
    std::thread::sleep(Duration::from_millis(800));
    b.fault(&["--clear"]);
    let v = hung.line();
    assert_eq!(v["error"], Value::Null, "completes once cleared: {v}");
    assert!(v["seconds"].as_f64().unwrap() >= 0.5, "it blocked: {v}");
    // Without --device every call hangs, nvmlInit included (go-nvml#152).
    b.fault(&["--nvml-hang", "--hang-limit", "300ms"]);
    let v = client_json(&b.dir, lib, &["nvml-time", "0"]);
    assert_eq!(
        v["init_error"], 999,
        "NVML_ERROR_UNKNOWN past the bound: {v}"
    );
    assert!(v["seconds"].as_f64().unwrap() >= 0.3, "{v}");
}

/// `--nvml-session-lost`: calls of a session opened before fail with NVML_ERROR_UNKNOWN, new
/// inits fail until `--clear`; after it a new session works (the old one stays lost).
#[test]
fn a_lost_nvml_session_fails_until_a_new_one_after_clear() {
    require_python("pynvml", "nvidia-ml-py");
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("t4", &[]);
    let mut s = Live::start(client(&b.dir, lib, &["session"]));
    assert_eq!(s.line()["init"], 0);
    s.send("query");
    assert_eq!(s.line()["query"], 0);
    b.fault(&["--nvml-session-lost"]);
    s.send("query");
    assert_eq!(s.line()["query"], 999);
    s.send("shutdown");
    assert_eq!(s.line()["shutdown"], 0);
    s.send("init");
    assert_eq!(
        s.line()["init"],
        999,
        "Failed to initialize NVML: Unknown Error"
    );
    b.fault(&["--clear"]);
    s.send("init");
    assert_eq!(s.line()["init"], 0);
    s.send("query");
    assert_eq!(s.line()["query"], 0);
    s.finish();
}

/// The simulated NVML counts calls per entry point and client PID; `sim status --calls`
/// shows them, for any client (here pynvml and gpustat).
#[test]
fn nvml_calls_are_counted_per_entry_point_and_client() {
    require_python("gpustat", "gpustat");
    let lib = common::simgpu_lib_dir();
    let b = CliBox::new("2xt4", &[]);
    let v = client_json(&b.dir, lib, &["queries", "7"]);
    let pid = v["pid"].as_u64().unwrap();
    let g = Command::new("gpustat")
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .env("LD_LIBRARY_PATH", lib)
        .output()
        .unwrap();
    common::assert_ok(&g, "gpustat");
    let calls = common::json_ok(
        &b.vramdoc()
            .args(["sim", "status", "--calls", "--json"])
            .output()
            .unwrap(),
        "status --calls",
    );
    let clients = calls["clients"].as_array().unwrap();
    let me = clients
        .iter()
        .find(|c| c["pid"] == pid)
        .expect("the pynvml client");
    assert_eq!(me["calls"]["nvmlDeviceGetMemoryInfo"], 7, "{me}");
    assert_eq!(me["calls"]["nvmlDeviceGetHandleByIndex_v2"], 1, "{me}");
    assert_eq!(me["alive"], false);
    let gpustat = clients
        .iter()
        .find(|c| c["name"] == "gpustat")
        .expect("gpustat's calls");
    assert_eq!(
        gpustat["calls"]["nvmlDeviceGetComputeRunningProcesses_v3"], 2,
        "{gpustat}"
    );
    let table = b
        .vramdoc()
        .args(["sim", "status", "--calls", "--reset-calls"])
        .output()
        .unwrap();
    common::assert_ok(&table, "status --calls");
    assert!(String::from_utf8_lossy(&table.stdout).contains("nvmlDeviceGetMemoryInfo"));
    let after = common::json_ok(
        &b.vramdoc()
            .args(["sim", "status", "--calls", "--json"])
            .output()
            .unwrap(),
        "status --calls",
    );
    assert!(after["clients"].as_array().unwrap().is_empty(), "{after}");
}
