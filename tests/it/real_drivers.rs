//! Real-driver behaviours the simulator models (docs/simulator.md, "Modelled real-driver
//! behaviours"), each seen three ways: by third-party clients of the simulated C libraries
//! (NVIDIA's `pynvml`, a plain ctypes CUDA client: tests/real_drivers_probe.py), by vramdoc's
//! real backends (cudarc / nvml-wrapper over crates/simgpu, in a child process), and by the
//! in-process `sim` backends.
//!
//! Boxes are made with `vramdoc sim init` (which starts the box's PID broker) and removed with
//! their temp directory (the broker then exits). pynvml missing is a failure, as in
//! nvml_python.rs; so is an `unshare` that cannot make a PID namespace (unless
//! `VRAMDOC_ALLOW_SKIP` allows `pynvml` or `unshare`: common/skip.rs).

use crate::common;

use common::child;
use common::hold::Holder;
use common::poll::{eventually, SECS_10};
use common::skip::{python, require};

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use vramdoc::backend::sim::{SimDriver, SimMonitor};
use vramdoc::gpu::{DeviceStatus, Driver, GpuError, Monitor, ProcessKind};
use vramdoc::units::{GIB, MIB};
use vramdoc_sim::{ProcessEnv, SimBox, SimProcess};

// ---------------------------------------------------------------------------------------------
// Helpers

/// A box made by `vramdoc sim init` in a temp dir (removed, with its broker, on drop).
struct CliBox {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

fn cli_box(spec: &str, driver: Option<&str>) -> CliBox {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    let mut c = common::vramdoc();
    c.args(["sim", "init", spec, "--dir"]).arg(&dir);
    if let Some(d) = driver {
        c.args(["--driver", d]);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "sim init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    CliBox { _tmp: tmp, dir }
}

fn sim(b: &CliBox) -> SimBox {
    SimBox::open(&b.dir).unwrap()
}

/// A `vramdoc sim hold` on `b` (optionally wrapped, e.g. in `unshare`), killed on drop.
fn hold(b: &CliBox, wrap: &[&str], args: &[&str], env: &[(&str, &str)]) -> Holder {
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let mut c = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    c.args(["sim", "hold"])
        .args(args)
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NVIDIA_VISIBLE_DEVICES")
        .envs(env.iter().copied());
    Holder::spawn(c)
}

fn probe_script() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/real_drivers_probe.py")
}

/// Run the third-party probe (`nvml` or `cuda`) over the simulated libraries.
fn probe(b: &CliBox, what: &str, wrap: &[&str], env: &[(&str, &str)]) -> Value {
    let py = python();
    let mut c = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(&py);
            c
        }
        None => Command::new(&py),
    };
    let out = c
        .arg(probe_script())
        .arg(what)
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NVIDIA_VISIBLE_DEVICES")
        .env_remove("CUDA_DEVICE_ORDER")
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {py} ({e}); set VRAMDOC_PYTHON"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "probe {what} failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "probe printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Which of vramdoc's real backends [`real_backend_child`] reads the box with.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
enum Real {
    /// `NvmlMonitor` (nvml-wrapper).
    Nvml,
    /// `CudaDriver` (cudarc).
    Cuda,
}

/// Run a child of this test binary that reads the box through vramdoc's real backend
/// `which` over crates/simgpu (with `env`) and returns what it saw.
fn real_backend(b: &CliBox, which: Real, env: &[(&str, &str)]) -> Value {
    real_backend_in(b, which, &[], env)
}

/// [`real_backend`] under a wrapper command (e.g. `vramdoc sim run --gpus 1 --`).
fn real_backend_in(b: &CliBox, which: Real, wrap: &[&str], env: &[(&str, &str)]) -> Value {
    let mut c = child::of!(real_backend_child)
        .simgpu()
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .input(&which);
    for (k, v) in env {
        c = c.env(k, v);
    }
    c.wrapped(wrap).run()
}

fn err_json(e: &GpuError) -> Value {
    let code = match e {
        GpuError::Driver { code, .. } | GpuError::Environment { code, .. } => code.clone(),
        GpuError::DeviceLost(_) => "lost".into(),
        _ => String::new(),
    };
    json!({"error": e.to_string(), "code": code, "environment": e.is_environment()})
}

child::entry! {
    /// The child side of [`real_backend`]: what the real backend `which` reads, as JSON.
    fn real_backend_child(which: Real) -> Value {
        match which {
            Real::Nvml => match vramdoc::gpu::nvml::NvmlMonitor::open() {
                Err(e) => json!({"open": err_json(&e)}),
                Ok(m) => {
                    let devices = m.devices().expect("devices");
                    let processes: Vec<Value> = (0..devices.len() as u32)
                        .map(|i| match m.processes(i) {
                            Ok(p) => serde_json::to_value(p).unwrap(),
                            Err(e) => err_json(&e),
                        })
                        .collect();
                    json!({"devices": devices, "processes": processes})
                }
            },
            Real::Cuda => match vramdoc::gpu::cuda::CudaDriver::open() {
                Err(e) => json!({"open": err_json(&e)}),
                Ok(mut d) => {
                    let n = d.device_count().expect("count");
                    let uuids: Vec<String> = (0..n).map(|o| d.device_uuid(o).unwrap()).collect();
                    let fill = d
                        .create_context(0)
                        .and_then(|c| d.alloc(c, 4 * MIB))
                        .and_then(|a| d.fill(a, 7));
                    let fill = match fill {
                        Ok(sum) => json!({"checksum": sum}),
                        Err(e) => err_json(&e),
                    };
                    json!({"uuids": uuids, "fill": fill})
                }
            },
        }
    }
}

/// `(pid, used)` pairs of a pynvml process list.
fn py_procs(v: &Value) -> Vec<(u64, u64)> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|p| (p[0].as_u64().unwrap_or(0), p[1].as_u64().unwrap_or(0)))
        .collect()
}

fn pids_of(v: &Value, kind: &str) -> BTreeSet<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .filter(|p| p["kind"] == kind)
        .map(|p| p["pid"].as_u64().unwrap())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Driver profiles and process-record layouts

#[test]
fn r535_writes_32_byte_records_pynvml_scrambles_vramdoc_does_not() {
    require!("pynvml", common::skip::pynvml());
    let b = cli_box("h100", Some("535.54.03"));
    let h1 = hold(&b, &[], &["--size", "1GiB"], &[]);
    let h2 = hold(&b, &[], &["--size", "2GiB"], &[]);
    let want: BTreeSet<u64> = [h1.pid as u64, h2.pid as u64].into();

    let py = probe(&b, "nvml", &[], &[]);
    assert_eq!(py["driver"], "535.54.03");
    assert_eq!(py["nvml"], "12.535.54.03");
    assert_eq!(py["cuda"], 12020);
    let d0 = &py["devices"][0];
    // pynvml #50 / go-nvml #75: a 24-byte reader of 32-byte records gets the second
    // entry's pid from usedGpuCcProtectedMemory (0) and its memory from the next pid.
    let seen: BTreeSet<u64> = py_procs(&d0["compute"]).iter().map(|p| p.0).collect();
    assert_ne!(seen, want, "pynvml should read R535 records wrongly: {d0}");
    assert!(seen.contains(&0), "{d0}");
    assert_eq!(d0["detail_error"], 13, "R535 has no DetailList: {d0}");

    let real = real_backend(&b, Real::Nvml, &[]);
    assert_eq!(pids_of(&real["processes"][0], "compute"), want, "{real}");
    let used: Vec<u64> = real["processes"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["used"].as_u64().unwrap())
        .collect();
    let overhead = sim(&b).devices()[0].context_overhead;
    assert!(used.contains(&(GIB + overhead)) && used.contains(&(2 * GIB + overhead)));

    let m = SimMonitor::new(sim(&b));
    let mine: BTreeSet<u64> = m
        .processes(0)
        .unwrap()
        .iter()
        .map(|p| p.pid as u64)
        .collect();
    assert_eq!(mine, want);
}

/// On a box with driver profile `driver` (CUDA `cuda`, with a DetailList API or not),
/// pynvml and vramdoc both list the two holders of GPU 1, and nothing on GPU 0.
fn profile_lists_processes_right_everywhere(driver: &str, cuda: u64, detail: bool) {
    let b = cli_box("2x16GiB", Some(driver));
    let h1 = hold(&b, &[], &["--device", "1", "--size", "1GiB"], &[]);
    let h2 = hold(&b, &[], &["--device", "1", "--size", "512MiB"], &[]);
    let want: BTreeSet<u64> = [h1.pid as u64, h2.pid as u64].into();
    let py = probe(&b, "nvml", &[], &[]);
    assert_eq!(py["cuda"], cuda, "{driver}");
    let d1 = &py["devices"][1];
    let seen: BTreeSet<u64> = py_procs(&d1["compute"]).iter().map(|p| p.0).collect();
    assert_eq!(seen, want, "{driver}: {d1}");
    if detail {
        let det: BTreeSet<u64> = py_procs(&d1["detail"]).iter().map(|p| p.0).collect();
        assert_eq!(det, want, "{driver}: {d1}");
    } else {
        assert_eq!(d1["detail_error"], 13, "{driver}: {d1}");
    }
    let real = real_backend(&b, Real::Nvml, &[]);
    assert_eq!(pids_of(&real["processes"][1], "compute"), want, "{driver}");
    assert!(
        pids_of(&real["processes"][0], "compute").is_empty(),
        "{driver}: {real}"
    );
}

mod r525_and_r550_profiles_list_processes_right_everywhere {
    use super::*;

    #[test]
    fn r525() {
        require!("pynvml", common::skip::pynvml());
        profile_lists_processes_right_everywhere("525", 12000, false);
    }

    #[test]
    fn r550() {
        require!("pynvml", common::skip::pynvml());
        profile_lists_processes_right_everywhere("550.127.05", 12040, true);
    }
}

// ---------------------------------------------------------------------------------------------
// CUDA device order, containers

#[test]
fn cuda_enumerates_fastest_first_on_a_t4_h100_box() {
    require!("pynvml", common::skip::pynvml());
    let b = cli_box("t4,h100", None);
    let s = sim(&b);
    let (t4, h100) = (s.devices()[0].uuid.clone(), s.devices()[1].uuid.clone());
    let names = |v: &Value| -> Vec<String> {
        v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect()
    };
    let c = probe(&b, "cuda", &[], &[]);
    assert_eq!(names(&c), ["NVIDIA H100 80GB HBM3", "Tesla T4"], "{c}");
    assert_eq!(c["devices"][0]["uuid"], h100.as_str());
    let c = probe(&b, "cuda", &[], &[("CUDA_DEVICE_ORDER", "PCI_BUS_ID")]);
    assert_eq!(names(&c), ["Tesla T4", "NVIDIA H100 80GB HBM3"], "{c}");
    // CUDA_VISIBLE_DEVICES indexes CUDA's order: 1 is the T4.
    let c = probe(&b, "cuda", &[], &[("CUDA_VISIBLE_DEVICES", "1")]);
    assert_eq!(names(&c), ["Tesla T4"], "{c}");
    // NVML stays in PCI order.
    let py = probe(&b, "nvml", &[], &[]);
    assert_eq!(py["devices"][0]["uuid"], t4.as_str());

    let real = real_backend(&b, Real::Cuda, &[]);
    assert_eq!(real["uuids"], json!([h100, t4]), "{real}");
    assert_eq!(real["fill"]["checksum"], 7 * MIB, "{real}");
    let mut d = SimDriver::new(SimProcess::new(s.clone(), None));
    assert_eq!(d.device_uuid(0).unwrap(), h100);
    let env = ProcessEnv {
        device_order: Some("PCI_BUS_ID".into()),
        ..Default::default()
    };
    let mut d = SimDriver::new(SimProcess::with_env(s, &env));
    assert_eq!(d.device_uuid(0).unwrap(), t4);
}

#[test]
fn a_container_sees_only_its_mounted_gpu() {
    require!("pynvml", common::skip::pynvml());
    let b = cli_box("2x16GiB", None);
    let s = sim(&b);
    let host1 = s.devices()[1].uuid.clone();
    // A container of the box's runtime (`vramdoc sim run --gpus 1`) sees only its GPU,
    // through the device files mounted into it (not through NVIDIA_VISIBLE_DEVICES, which
    // the driver never reads); the host sees its process on host GPU 1.
    let wrap = [
        env!("CARGO_BIN_EXE_vramdoc"),
        "sim",
        "run",
        "--gpus",
        "1",
        "--",
    ];
    let c = probe(&b, "cuda", &wrap, &[]);
    assert_eq!(c["devices"].as_array().unwrap().len(), 1, "{c}");
    assert_eq!(c["devices"][0]["uuid"], host1.as_str());
    let py = probe(&b, "nvml", &wrap, &[]);
    assert_eq!(py["devices"].as_array().unwrap().len(), 1, "{py}");
    assert_eq!(py["devices"][0]["uuid"], host1.as_str());
    let real = real_backend_in(&b, Real::Nvml, &wrap, &[]);
    assert_eq!(real["devices"][0]["uuid"], host1.as_str(), "{real}");
    assert_eq!(real["devices"].as_array().unwrap().len(), 1);
    // The variable alone changes nothing: the driver does not read it.
    let py = probe(&b, "nvml", &[], &[("NVIDIA_VISIBLE_DEVICES", "1")]);
    assert_eq!(py["devices"].as_array().unwrap().len(), 2, "{py}");

    // A "containerised" job holding its GPU 0 shows on host GPU 1 in the host's NVML.
    let h = hold(&b, &wrap, &["--size", "1GiB"], &[]);
    let py = probe(&b, "nvml", &[], &[]);
    let on1: Vec<u64> = py_procs(&py["devices"][1]["compute"])
        .iter()
        .map(|p| p.0)
        .collect();
    assert_eq!(on1, [h.pid as u64], "{py}");
    assert!(py_procs(&py["devices"][0]["compute"]).is_empty());
    let m = SimMonitor::with_mounted(s, vec![1]);
    assert_eq!(m.devices().unwrap()[0].uuid, host1);
    assert_eq!(m.processes(0).unwrap()[0].pid, h.pid);
}

#[test]
fn pid_namespace_clients_are_listed_under_host_pids_even_from_inside() {
    require!("pynvml", common::skip::pynvml());
    require!("unshare", common::skip::unshare());
    // A driver before 535.113 reports host PIDs to every caller (NVIDIA/nvidia-docker#1483);
    // later ones translate them (tests/it/vantage.rs, sim_cli).
    let b = cli_box("t4", Some("535.54.03"));
    let wrap = ["unshare", "--pid", "--fork", "--mount-proc"];
    let h = hold(&b, &wrap, &["--size", "1GiB"], &[]);
    // The PID it reports (from the box's broker) is a host PID: its NSpid has two levels.
    let status = std::fs::read_to_string(format!("/proc/{}/status", h.pid)).unwrap();
    let nspid: Vec<&str> = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(nspid.len(), 2, "{}: {status}", h.line);
    assert_eq!(nspid[0], h.pid.to_string());
    // Host readers and readers inside a PID namespace both get the host PID.
    let host = probe(&b, "nvml", &[], &[]);
    assert_eq!(py_procs(&host["devices"][0]["compute"])[0].0, h.pid as u64);
    let inside = probe(&b, "nvml", &wrap, &[]);
    assert_eq!(
        py_procs(&inside["devices"][0]["compute"])[0].0,
        h.pid as u64,
        "{inside}"
    );
    let out = Command::new("unshare")
        .args(wrap[1..].iter())
        .arg(env!("CARGO_BIN_EXE_vramdoc"))
        .args(["sim", "status", "--json"])
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = &v["processes"][h.pid.to_string()];
    assert_eq!(entry["ns_pid"], nspid[1].parse::<u64>().unwrap(), "{v}");
    let pid = h.pid;
    drop(h);
    let s = sim(&b);
    eventually(
        SECS_10,
        "the namespaced holder's memory is returned",
        || s.processes(0).unwrap().iter().all(|p| p.pid != pid),
    );
}

// ---------------------------------------------------------------------------------------------
// Graphics and MPS clients, memory held by descriptors

#[test]
fn graphics_and_mps_clients_are_listed_only_in_their_lists() {
    require!("pynvml", common::skip::pynvml());
    let b = cli_box("rtx4090", None);
    let x = hold(&b, &[], &["--graphics", "--size", "256MiB"], &[]);
    let mps = hold(&b, &[], &["--mps", "--size", "128MiB"], &[]);
    let cu = hold(&b, &[], &["--size", "64MiB"], &[]);
    let py = probe(&b, "nvml", &[], &[]);
    let d = &py["devices"][0];
    let pids = |k: &str| -> Vec<u64> { py_procs(&d[k]).iter().map(|p| p.0).collect() };
    assert_eq!(pids("graphics"), [x.pid as u64], "{d}");
    assert_eq!(pids("mps"), [mps.pid as u64], "{d}");
    assert_eq!(pids("compute"), [cu.pid as u64], "{d}");
    let real = real_backend(&b, Real::Nvml, &[]);
    let p = &real["processes"][0];
    assert_eq!(pids_of(p, "graphics"), [x.pid as u64].into());
    assert_eq!(pids_of(p, "mps"), [mps.pid as u64].into());
    assert_eq!(pids_of(p, "compute"), [cu.pid as u64].into());
    let m = SimMonitor::new(sim(&b));
    let kinds: BTreeSet<(u32, ProcessKind)> = m
        .processes(0)
        .unwrap()
        .iter()
        .map(|p| (p.pid, p.kind))
        .collect();
    let want: BTreeSet<(u32, ProcessKind)> = [
        (x.pid, ProcessKind::Graphics),
        (mps.pid, ProcessKind::Mps),
        (cu.pid, ProcessKind::Compute),
    ]
    .into();
    assert_eq!(kinds, want);
}

/// PIDs (in this namespace) holding any of `nodes` open: the `fuser -v /dev/nvidia*` answer.
fn holders(nodes: &[PathBuf]) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|t| nodes.contains(&t)) {
                out.insert(pid);
            }
        }
    }
    out
}

#[test]
fn a_forked_worker_keeps_a_dead_parents_memory() {
    require!("pynvml", common::skip::pynvml());
    let b = cli_box("a10", None);
    let mut h = hold(
        &b,
        &[],
        &["--size", "1GiB", "--fork-child", "--duration", "1ms"],
        &[],
    );
    let worker = h.field("child").expect("child= in holder line");
    let parent = h.pid;
    h.child.wait().unwrap();
    assert!(
        !Path::new(&format!("/proc/{parent}")).exists(),
        "parent reaped"
    );
    // NVML lists the parent, which no longer exists, with its memory.
    let py = probe(&b, "nvml", &[], &[]);
    let procs = py_procs(&py["devices"][0]["compute"]);
    let overhead = sim(&b).devices()[0].context_overhead;
    assert_eq!(procs, [(parent as u64, GIB + overhead)], "{py}");
    let m = SimMonitor::new(sim(&b));
    assert_eq!(m.processes(0).unwrap()[0].pid, parent);
    // The worker holds the device files open.
    let nodes = m.device_nodes();
    assert!(
        nodes.iter().any(|n| n.ends_with("dev/nvidia0")),
        "{nodes:?}"
    );
    assert!(holders(&nodes).contains(&worker), "{nodes:?}");
    let real = real_backend(&b, Real::Nvml, &[]);
    assert_eq!(
        pids_of(&real["processes"][0], "compute"),
        [parent as u64].into()
    );
    // SAFETY: the worker is this test's grandchild.
    unsafe { libc::kill(worker as i32, libc::SIGKILL) };
    eventually(
        SECS_10,
        "the memory is returned once the last holder exits",
        || m.processes(0).unwrap().is_empty() && m.memory(0).unwrap().used == 0,
    );
}

// ---------------------------------------------------------------------------------------------
// Failures real drivers produce

#[test]
fn per_device_errors_give_a_status_and_never_end_the_inventory() {
    require!("pynvml", common::skip::pynvml());
    let b = cli_box("3xt4", None);
    common::sim_fault(&b.dir, &["--lose-device", "1", "--no-permission", "2"]);
    let py = probe(&b, "nvml", &[], &[]);
    assert_eq!(py["devices"][1]["name_error"], 15, "{py}");
    assert_eq!(py["devices"][2]["name_error"], 4, "{py}");
    let statuses = |v: &Value| -> Vec<Value> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|d| d["status"].clone())
            .collect()
    };
    let want = json!(["ok", "lost", "no-permission"]);
    let real = real_backend(&b, Real::Nvml, &[]);
    assert_eq!(Value::from(statuses(&real["devices"])), want, "{real}");
    assert_eq!(real["devices"][1]["memory"]["total"], 0);
    let m = SimMonitor::new(sim(&b));
    let devs = m.devices().unwrap();
    let st: Vec<DeviceStatus> = devs.iter().map(|d| d.status.clone()).collect();
    assert_eq!(
        st,
        [
            DeviceStatus::Ok,
            DeviceStatus::Lost,
            DeviceStatus::NoPermission
        ]
    );
    assert!(devs[0].memory.total > 0);
}

/// A MIG parent read without privileges: memory answers, process lists do not.
#[test]
fn an_unprivileged_mig_parent_answers_memory_but_not_processes() {
    require!("pynvml", common::skip::pynvml());
    let b = cli_box("3xt4", None);
    common::sim_fault(&b.dir, &["--mig-unprivileged", "0"]);
    let py = probe(&b, "nvml", &[], &[]);
    assert_eq!(py["devices"][0]["compute_error"], 4, "{py}");
    assert!(py["devices"][0]["total"].as_u64().unwrap() > 0);
    let real = real_backend(&b, Real::Nvml, &[]);
    assert_eq!(
        real["processes"][0]["code"], "NVML_ERROR_NO_PERMISSION",
        "{real}"
    );
    let m = SimMonitor::new(sim(&b));
    assert!(m.processes(0).is_err());
    assert!(m.memory(0).is_ok());
}

#[test]
fn driver_library_mismatch_is_an_environment_error() {
    require!("pynvml", common::skip::pynvml());
    let b = cli_box("t4", None);
    common::sim_fault(&b.dir, &["--version-mismatch"]);
    let py = probe(&b, "nvml", &[], &[]);
    assert_eq!(py["init_error"], 18, "{py}");
    let c = probe(&b, "cuda", &[], &[]);
    assert_eq!(c["init"], 803, "{c}");
    let real = real_backend(&b, Real::Nvml, &[]);
    assert_eq!(real["open"]["environment"], true, "{real}");
    assert!(real["open"]["error"]
        .as_str()
        .unwrap()
        .contains("Driver/library version mismatch"));
    let real = real_backend(&b, Real::Cuda, &[]);
    assert_eq!(real["open"]["environment"], true, "{real}");
    assert_eq!(real["open"]["code"], "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH");
}

/// "Failed to initialize NVML: Unknown Error" (a container that lost its GPUs) is the
/// machine's state: `scan` exits 3 (environment) with what to do, never 1 (findings).
#[test]
fn nvml_that_cannot_initialise_is_an_environment_exit_with_advice() {
    let b = cli_box("t4", None);
    common::sim_fault(&b.dir, &["--nvml-session-lost"]);
    let out = common::vramdoc()
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .args(["--backend", "real", "scan", "--fail-on", "warn"])
        .output()
        .unwrap();
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("NVML_ERROR_UNKNOWN"), "{err}");
    assert!(err.contains("restart the container"), "{err}");
    common::sim_fault(&b.dir, &["--clear"]);
    let out = common::vramdoc()
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .args(["--backend", "real", "scan"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
}

/// CUDA faults real drivers produce, each read by a ctypes client, by the real cuda backend
/// (cudarc) and by the in-process sim driver: one test per fault, on a `2xt4` box.
mod cuda_faults_read_as_codes_with_advice {
    use super::*;

    /// A box with `fault` set (`vramdoc sim fault ARGS`).
    fn faulted(fault: &[&str]) -> CliBox {
        let b = cli_box("2xt4", None);
        common::sim_fault(&b.dir, fault);
        b
    }

    /// Context, allocation and fill through the in-process sim driver.
    fn in_process_fill(b: &CliBox) -> Result<u64, GpuError> {
        let mut d = SimDriver::open(SimProcess::new(sim(b), None))?;
        let c = d.create_context(0)?;
        let a = d.alloc(c, 4 * MIB)?;
        d.fill(a, 7)
    }

    /// 226, newer than the CUDA 12.0 headers cudarc is built with: no undefined behaviour.
    #[test]
    fn contained() {
        let b = faulted(&["--contained", "0"]);
        let c = probe(&b, "cuda", &[], &[]);
        assert_eq!(c["synchronize"], 226, "{c}");
        assert_eq!(c["synchronize_name"], "CUDA_ERROR_CONTAINED");
        let real = real_backend(&b, Real::Cuda, &[]);
        assert_eq!(real["fill"]["code"], "CUDA_ERROR_CONTAINED", "{real}");
        assert!(real["fill"]["error"].as_str().unwrap().contains("restart"));
        let e = in_process_fill(&b).unwrap_err();
        assert!(e.to_string().contains("CUDA_ERROR_CONTAINED"), "{e}");
    }

    /// The toolkit's stub libcuda.so shadowing the driver: an environment error.
    #[test]
    fn stub_library() {
        let b = faulted(&["--cuda-stub"]);
        assert_eq!(probe(&b, "cuda", &[], &[])["init"], 34);
        let real = real_backend(&b, Real::Cuda, &[]);
        assert_eq!(real["open"]["code"], "CUDA_ERROR_STUB_LIBRARY", "{real}");
        assert_eq!(real["open"]["environment"], true);
        assert!(real["open"]["error"]
            .as_str()
            .unwrap()
            .contains("LD_LIBRARY_PATH"));
        assert!(in_process_fill(&b).unwrap_err().is_environment());
    }

    /// No PTX JIT compiler: the fill kernel cannot load.
    #[test]
    fn no_ptx_jit() {
        let b = faulted(&["--no-ptx-jit"]);
        assert_eq!(probe(&b, "cuda", &[], &[])["module_load"], 221);
        let real = real_backend(&b, Real::Cuda, &[]);
        assert_eq!(
            real["fill"]["code"], "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
            "{real}"
        );
        assert_eq!(real["fill"]["environment"], true);
        assert!(in_process_fill(&b).unwrap_err().is_environment());
    }

    /// Exclusive-process mode: a second process cannot make a context.
    #[test]
    fn exclusive_process() {
        let b = faulted(&["--exclusive-process", "0"]);
        let mut first = common::KillOnDrop(
            Command::new(python())
                .arg(probe_script())
                .args(["cuda", "hold"])
                .env("VRAMDOC_SIM_DIR", &b.dir)
                .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
                .env_remove("CUDA_VISIBLE_DEVICES")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        BufReader::new(first.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let held: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(held["retain"], 0, "{held}");
        assert_eq!(probe(&b, "cuda", &[], &[])["retain"], 46);
        let real = real_backend(&b, Real::Cuda, &[]);
        assert_eq!(
            real["fill"]["code"], "CUDA_ERROR_DEVICE_UNAVAILABLE",
            "{real}"
        );
        assert!(matches!(
            in_process_fill(&b),
            Err(GpuError::Driver { ref code, .. }) if code == "CUDA_ERROR_DEVICE_UNAVAILABLE"
        ));
        let _ = first.stdin.take().unwrap().write_all(b"");
        first.wait().unwrap();
        // Device 1 is in the default mode: two processes share it.
        assert_eq!(
            probe(&b, "cuda", &[], &[("CUDA_VISIBLE_DEVICES", "1")])["retain"],
            0
        );
    }

    /// cuMemGetInfo's total leaves out what NVML's total counts as reserved.
    #[test]
    fn cuda_total_excludes_reserved() {
        require!("pynvml", common::skip::pynvml());
        let b = faulted(&["--cuda-total-excludes-reserved"]);
        let c = probe(&b, "cuda", &[], &[]);
        let s = sim(&b);
        let d = &s.devices()[0];
        assert_eq!(c["total"], d.total - d.reserved, "{c}");
        assert_eq!(probe(&b, "nvml", &[], &[])["devices"][0]["total"], d.total);
    }
}
