//! Conformance with NVIDIA's official Python NVML bindings (`nvidia-ml-py`, module `pynvml`):
//! tests/nvml_conformance.py loads the simulated `libnvidia-ml.so.1` (LD_LIBRARY_PATH) on a
//! box where a neighbour process holds memory, prints what it reads as JSON, and this test
//! compares every field with what vramdoc reports for the same box, through both the
//! in-process sim backend and the NVML backend.
//!
//! pynvml missing is a failure with the install command (scripts/test installs it), unless
//! `VRAMDOC_ALLOW_SKIP=pynvml`. `VRAMDOC_PYTHON` names the interpreter (default `python3`).

use crate::common;

use common::hold::Holder;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use vramdoc::backend::sim::SimMonitor;
use vramdoc::gpu::nvml::NvmlMonitor;
use vramdoc::gpu::{DeviceInfo, GpuProcess, Monitor};
use vramdoc_sim::SimBox;

use common::skip::python;

fn script() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/nvml_conformance.py"
    ))
}

fn run_probe(dir: &Path) -> Value {
    let out = Command::new(python())
        .arg(script())
        .env("VRAMDOC_SIM_DIR", dir)
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .output()
        .expect("run nvml_conformance.py");
    assert!(
        out.status.success(),
        "nvml_conformance.py failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "probe printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} not an integer in {v}"))
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} not a string in {v}"))
}

fn procs_of(v: &Value, key: &str) -> Vec<GpuProcess> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} not a list in {v}"))
        .iter()
        .map(|p| GpuProcess {
            pid: u(p, "pid") as u32,
            used: p["used"].as_u64(),
            kind: Default::default(),
        })
        .collect()
}

fn sorted(mut p: Vec<GpuProcess>) -> Vec<GpuProcess> {
    p.sort_by_key(|p| p.pid);
    p
}

/// Field-by-field comparison of the probe's view of one device with vramdoc's.
fn compare_device(py: &Value, ours: &DeviceInfo, procs: &[GpuProcess], who: &str) {
    let i = ours.index;
    assert_eq!(u(py, "index"), i as u64, "{who}: index");
    assert_eq!(s(py, "name"), ours.name, "{who}: name of {i}");
    assert_eq!(s(py, "uuid"), ours.uuid, "{who}: uuid of {i}");
    assert_eq!(
        s(py, "pci_bus_id"),
        ours.pci_bus_id,
        "{who}: pci bus id of {i}"
    );
    assert_eq!(
        py["same_handle_by_uuid"],
        Value::Bool(true),
        "{who}: handle by UUID of {i}"
    );
    assert_eq!(
        py["same_handle_by_pci"],
        Value::Bool(true),
        "{who}: handle by bus id of {i}"
    );
    let m2 = &py["memory_v2"];
    assert_eq!(
        u(m2, "version"),
        0x0200_0028,
        "{who}: nvmlMemory_v2 version"
    );
    assert_eq!(u(m2, "total"), ours.memory.total, "{who}: v2 total of {i}");
    assert_eq!(
        u(m2, "reserved"),
        ours.memory.reserved,
        "{who}: v2 reserved of {i}"
    );
    assert_eq!(u(m2, "used"), ours.memory.used, "{who}: v2 used of {i}");
    assert_eq!(u(m2, "free"), ours.memory.free, "{who}: v2 free of {i}");
    let m1 = &py["memory_v1"];
    assert_eq!(u(m1, "total"), ours.memory.total, "{who}: v1 total of {i}");
    assert_eq!(
        u(m1, "used"),
        ours.memory.used + ours.memory.reserved,
        "{who}: v1 used of {i}"
    );
    assert_eq!(u(m1, "free"), ours.memory.free, "{who}: v1 free of {i}");
    let ours_p = sorted(procs.to_vec());
    assert_eq!(
        sorted(procs_of(py, "processes")),
        ours_p,
        "{who}: processes (v3) of {i}"
    );
    assert_eq!(
        sorted(procs_of(py, "processes_v2")),
        ours_p,
        "{who}: processes (v2) of {i}"
    );
    assert!(
        procs_of(py, "graphics_processes").is_empty(),
        "{who}: graphics of {i}"
    );
    assert_eq!(
        py["temperature"].as_u64().map(|t| t as u32),
        ours.temperature_c,
        "{who}: temp"
    );
    assert_eq!(
        py["utilization_gpu"].as_u64().map(|t| t as u32),
        ours.utilization_gpu,
        "{who}: util"
    );
}

fn compare(py: &Value, m: &dyn Monitor) {
    let who = m.backend();
    let v = m.versions().unwrap();
    assert_eq!(s(py, "driver_version"), v.driver, "{who}: driver version");
    assert_eq!(s(py, "nvml_version"), v.nvml, "{who}: NVML version");
    let cuda = u(py, "cuda_driver_version") as i32;
    assert_eq!(
        vramdoc::gpu::cuda_version_string(cuda),
        v.cuda,
        "{who}: CUDA version"
    );
    assert_eq!(u(py, "cuda_driver_version_v2"), cuda as u64);
    let devs = m.devices().unwrap();
    let py_devs = py["devices"].as_array().expect("devices list");
    assert_eq!(py_devs.len(), devs.len(), "{who}: device count");
    for (p, d) in py_devs.iter().zip(&devs) {
        compare_device(p, d, &m.processes(d.index).unwrap(), who);
    }
}

#[test]
fn pynvml_sees_what_vramdoc_sees() {
    common::skip::require!("pynvml", common::skip::pynvml());
    let dir = common::fresh_box("h100,rtx3090");
    // A neighbour: 1 GiB on physical 1 plus a stray context on physical 0.
    let holder = Holder::start(
        dir.path(),
        &[],
        &["--device", "1", "--size", "1GiB", "--context-on", "0"],
    );
    let pid = holder.pid;

    let py = run_probe(dir.path());
    let sim = SimMonitor::new(SimBox::open(dir.path()).unwrap());
    compare(&py, &sim);
    // In-process NVML: the session sets the box for nvmlInit (common/nvml.rs).
    let _session = common::nvml::session(Some(dir.path()));
    let nvml = NvmlMonitor::open_path(&common::nvml::lib_path()).unwrap();
    compare(&py, &nvml);

    // The probe really saw the neighbour on both devices, named as the box recorded it.
    for d in py["devices"].as_array().unwrap() {
        let pids: Vec<u64> = d["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| u(p, "pid"))
            .collect();
        assert_eq!(pids, vec![pid as u64], "{d}");
        assert_eq!(d["process_names"][pid.to_string()], Value::from("vramdoc"));
    }
    holder.kill();

    // After the neighbour exits, the bindings see its memory returned.
    let after = run_probe(dir.path());
    compare(&after, &sim);
    for d in after["devices"].as_array().unwrap() {
        assert!(d["processes"].as_array().unwrap().is_empty(), "{d}");
    }
}
