//! MIG end to end (issue 25, item 5): a box made with `vramdoc sim init SPEC --mig …`, read
//! by `vramdoc scan` over the in-process simulator and over the simulated libnvidia-ml.so.1
//! (nvml-wrapper's MIG API), on the host and from a container given one instance.

use crate::common;

use common::clients::CliBox;
use common::hold::Holder;
use common::scans::{all_ids, run, scan_cmd};
use common::{assert_ok, json_ok};
use serde_json::Value;

const GIB: u64 = 1024 * 1024 * 1024;

fn devices(v: &Value) -> &Vec<Value> {
    v["scan"]["devices"].as_array().expect("devices")
}

fn severities(v: &Value) -> Vec<(String, String, Value)> {
    v["scan"]["findings"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|f| {
                    (
                        f["id"].as_str().unwrap_or("").to_string(),
                        f["severity"].as_str().unwrap_or("").to_string(),
                        f["devices"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An A100-80GB in MIG mode with two `3g.40gb` instances, their MIG UUIDs, and a holder of
/// `size` in the first.
fn halves_with_a_holder_in_the_first(size: &str) -> (CliBox, String, String, Holder) {
    let b = CliBox::new("a100-80gb", &["--mig", "3g.40gb,3g.40gb"]);
    let inst = b.sim().mig_instances().to_vec();
    assert_eq!(inst.len(), 2);
    let (u1, u2) = (inst[0].device.uuid.clone(), inst[1].device.uuid.clone());
    let h = Holder::start(
        &b.dir,
        &[("CUDA_VISIBLE_DEVICES", u1.as_str())],
        &["--size", size],
    );
    (b, u1, u2, h)
}

/// Must-show #4: a MIG box (`--mig 3g.40gb,3g.40gb` on an A100-80GB), one instance nearly
/// full and the other empty: per-instance rows, headroom per instance, no low-headroom on
/// the parent or across instances — over the in-process backend and over libnvidia-ml.so.1.
#[test]
fn a_mig_box_scans_per_instance() {
    // 37 GiB of the first instance's 39.25 GiB.
    let (b, u1, u2, h) = halves_with_a_holder_in_the_first("37GiB");
    for backend in ["sim", "real"] {
        let mut c = scan_cmd(&b.dir, &["--json"]);
        c.args(["--backend", backend]);
        if backend == "real" {
            c.env("LD_LIBRARY_PATH", common::simgpu_lib_dir());
        }
        let v = json_ok(&run(c), backend);
        let d = devices(&v);
        assert_eq!(d.len(), 3, "{backend}: parent + 2 instances: {v}");
        assert_eq!(d[0]["mig"]["role"], "parent", "{backend}");
        for (i, uuid, gi) in [(1, &u1, 1), (2, &u2, 2)] {
            assert_eq!(d[i]["mig"]["role"], "instance", "{backend}");
            assert_eq!(d[i]["mig"]["parent"], 0);
            assert_eq!(d[i]["mig"]["gi"], gi);
            assert_eq!(d[i]["mig"]["ci"], 0);
            assert_eq!(d[i]["mig"]["profile"], "3g.40gb");
            assert_eq!(d[i]["uuid"], uuid.as_str());
            assert_eq!(d[i]["memory"]["total"], 40192u64 * 1024 * 1024);
        }
        let used1 = d[1]["memory"]["used"].as_u64().unwrap();
        assert!(used1 >= 37 * GIB, "{backend}: {used1}");
        assert_eq!(d[2]["memory"]["used"], 0, "{backend}");
        // The parent is the sum of its instances.
        assert_eq!(d[0]["memory"]["used"], used1, "{backend}");
        // The holder's memory is on its instance only.
        let p = v["scan"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == h.pid())
            .unwrap_or_else(|| panic!("{backend}: holder listed: {v}"));
        assert_eq!(p["devices"].as_array().unwrap().len(), 1, "{backend}: {p}");
        assert_eq!(p["devices"][0]["device"], 1, "{backend}");
        // Headroom per instance, none for the parent.
        let hr: Vec<u64> = v["scan"]["headroom"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["device"].as_u64().unwrap())
            .collect();
        assert_eq!(hr, vec![1, 2], "{backend}");
        // No warning or error; a low-headroom note at most, and only for the full instance.
        for (id, sev, devs) in severities(&v) {
            assert_eq!(sev, "info", "{backend}: {id} {sev} {devs}");
            if id == "low-headroom" {
                assert_eq!(devs, serde_json::json!([1]), "{backend}");
            }
        }
        assert!(
            !all_ids(&v).contains(&"no-live-owner".to_string()),
            "{backend}: {:?}",
            all_ids(&v)
        );
    }
    // The table: one row per instance, named parent/GI with its profile and MIG UUID.
    let out = run(scan_cmd(&b.dir, &["--fail-on", "warn"]));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("0/1") && text.contains("0/2"), "{text}");
    assert!(text.contains("MIG 3g.40gb"), "{text}");
    assert!(text.contains(&u1[..12]), "{text}");
    assert!(text.contains("gpu 0/1:"), "{text}");
}

/// `--mig` layouts the board cannot hold are refused before a box exists, naming the fix.
#[test]
fn bad_mig_layouts_are_usage_errors() {
    for (spec, mig, says) in [
        ("a100", "3g.40gb", "3g.20gb"),
        ("t4", "1g.5gb", "no MIG profiles"),
        ("h100", "4g.40gb,4g.40gb", "at most 1"),
        ("h100", "4g.40gb,3g.40gb,1g.10gb", "do not fit"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("box");
        let out = common::vramdoc()
            .args(["sim", "init", spec, "--mig", mig, "--dir"])
            .arg(&dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{spec} --mig {mig}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{spec} --mig {mig}: {err}");
        assert!(!dir.join("box.json").exists());
    }
}

/// A container given one MIG instance (`sim run --gpus MIG-…`, as the device plugin's MIG
/// strategies do) scans as an unprivileged caller: it sees its instance with its own memory
/// and process, the parent refuses it (NO_PERMISSION) and that is no finding.
/// `script` run with `sh -c` in a `sim run` container of box `b` given the GPU or MIG
/// instance `gpus` (no cgroup), from `cwd`, as the host's PID namespace.
fn in_container(
    b: &CliBox,
    gpus: &str,
    cwd: &std::path::Path,
    script: &str,
) -> std::process::Output {
    b.vramdoc()
        .current_dir(cwd)
        .env("VRAMDOC_PIDNS", "host")
        .args(["sim", "run", "--gpus", gpus, "--cgroup", "none", "--"])
        .args(["sh", "-c", script])
        .output()
        .unwrap()
}

#[test]
fn a_container_with_one_instance_sees_it() {
    let b = CliBox::new("h100", &["--mig", "3g.40gb,3g.40gb"]);
    let inst = b.sim().mig_instances().to_vec();
    let mine = inst[1].device.uuid.clone();
    // A neighbour on the other instance, on the host.
    let _n = Holder::start(
        &b.dir,
        &[("CUDA_VISIBLE_DEVICES", inst[0].device.uuid.as_str())],
        &["--size", "10GiB"],
    );
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let script = format!(
        "{exe} sim hold --size 2GiB --duration 60s > hold.out 2>&1 & H=$!; \
         for i in $(seq 200); do grep -q holding hold.out && break; sleep 0.05; done; \
         {exe} scan --json > scan.json; kill $H; wait; cat scan.json"
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = in_container(&b, &mine, tmp.path(), &script);
    assert_ok(&out, "sim run");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "scan JSON from the container: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let d = devices(&v);
    assert_eq!(d.len(), 2, "the parent and this container's instance: {v}");
    assert_eq!(d[0]["mig"]["role"], "parent");
    assert_eq!(d[0]["status"], "no-permission");
    assert_eq!(d[1]["uuid"], mine.as_str());
    assert_eq!(d[1]["mig"]["gi"], 2);
    let used = d[1]["memory"]["used"].as_u64().unwrap();
    assert!((2 * GIB..3 * GIB).contains(&used), "its own 2 GiB: {used}");
    let procs = v["scan"]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "only its own process: {v}");
    assert_eq!(procs[0]["devices"][0]["device"], 1);
    assert_eq!(
        all_ids(&v),
        Vec::<String>::new(),
        "no device-unavailable for the parent"
    );
}

/// The MIG entry points of the simulated libnvidia-ml.so.1 at the C ABI: MIG handles are
/// distinct from device handles, answer for their instance and lead back to their parent.
#[test]
fn c_abi_mig_handles() {
    use libloading::Library;
    use std::ffi::{c_char, c_uint, c_void};
    type Device = *mut c_void;
    const SUCCESS: c_uint = 0;
    const NOT_SUPPORTED: c_uint = 3;
    const NOT_FOUND: c_uint = 6;
    let dir = tempfile::tempdir().unwrap();
    let opts = vramdoc_sim::InitOptions {
        mig: vec!["3g.40gb".into(), "1g.10gb".into()],
        ..Default::default()
    };
    let sim = vramdoc_sim::SimBox::create(dir.path(), "h100", &opts).unwrap();
    let inst = sim.mig_instances().to_vec();
    let _g = common::nvml::session(Some(dir.path()));
    // SAFETY: our own simulated library; each symbol is called with its nvml.h signature.
    unsafe {
        let lib = Library::new(common::nvml::lib_path()).expect("dlopen simgpu");
        let call0 = lib
            .get::<unsafe extern "C" fn() -> c_uint>(b"nvmlInit_v2")
            .unwrap();
        assert_eq!(call0(), SUCCESS);
        let by_index = lib
            .get::<unsafe extern "C" fn(c_uint, *mut Device) -> c_uint>(
                b"nvmlDeviceGetHandleByIndex_v2",
            )
            .unwrap();
        let mut d: Device = std::ptr::null_mut();
        assert_eq!(by_index(0, &mut d), SUCCESS);
        let two = |name: &[u8], h: Device| {
            let f = lib
                .get::<unsafe extern "C" fn(Device, *mut c_uint, *mut c_uint) -> c_uint>(name)
                .unwrap();
            let (mut a, mut b) = (9, 9);
            (f(h, &mut a, &mut b), a, b)
        };
        let one = |name: &[u8], h: Device| {
            let f = lib
                .get::<unsafe extern "C" fn(Device, *mut c_uint) -> c_uint>(name)
                .unwrap();
            let mut a = 9;
            (f(h, &mut a), a)
        };
        assert_eq!(two(b"nvmlDeviceGetMigMode", d), (SUCCESS, 1, 1));
        assert_eq!(one(b"nvmlDeviceGetMaxMigDeviceCount", d), (SUCCESS, 7));
        let mig_by_index = lib
            .get::<unsafe extern "C" fn(Device, c_uint, *mut Device) -> c_uint>(
                b"nvmlDeviceGetMigDeviceHandleByIndex",
            )
            .unwrap();
        let (mut m0, mut m1, mut m2): (Device, Device, Device) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(mig_by_index(d, 0, &mut m0), SUCCESS);
        assert_eq!(mig_by_index(d, 1, &mut m1), SUCCESS);
        assert_eq!(mig_by_index(d, 2, &mut m2), NOT_FOUND);
        assert!(m0 != d && m1 != d && m0 != m1);
        assert_eq!(one(b"nvmlDeviceIsMigDeviceHandle", m0), (SUCCESS, 1));
        assert_eq!(one(b"nvmlDeviceIsMigDeviceHandle", d), (SUCCESS, 0));
        assert_eq!(one(b"nvmlDeviceGetGpuInstanceId", m1), (SUCCESS, 2));
        assert_eq!(one(b"nvmlDeviceGetComputeInstanceId", m1), (SUCCESS, 0));
        assert_eq!(one(b"nvmlDeviceGetGpuInstanceId", d).0, NOT_SUPPORTED);
        assert_eq!(two(b"nvmlDeviceGetMigMode", m0).0, NOT_SUPPORTED);
        let parent = lib
            .get::<unsafe extern "C" fn(Device, *mut Device) -> c_uint>(
                b"nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
            )
            .unwrap();
        let mut p: Device = std::ptr::null_mut();
        assert_eq!(parent(m1, &mut p), SUCCESS);
        assert_eq!(p, d);
        assert_ne!(parent(d, &mut p), SUCCESS, "a device handle has no parent");
        // Name, UUID and memory answer for the instance.
        let text = |name: &[u8], h: Device| {
            let f = lib
                .get::<unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_uint>(name)
                .unwrap();
            let mut buf = [0 as c_char; 96];
            assert_eq!(f(h, buf.as_mut_ptr(), 96), SUCCESS);
            std::ffi::CStr::from_ptr(buf.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        assert_eq!(text(b"nvmlDeviceGetUUID", m1), inst[1].device.uuid);
        assert_eq!(
            text(b"nvmlDeviceGetName", m1),
            "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
        );
        let mem = lib
            .get::<unsafe extern "C" fn(Device, *mut [u64; 3]) -> c_uint>(
                b"nvmlDeviceGetMemoryInfo",
            )
            .unwrap();
        let mut m = [0u64; 3];
        assert_eq!(mem(m1, &mut m), SUCCESS);
        assert_eq!(m[0], inst[1].device.total);
        let shutdown = lib
            .get::<unsafe extern "C" fn() -> c_uint>(b"nvmlShutdown")
            .unwrap();
        assert_eq!(shutdown(), SUCCESS);
    }
}

const JOB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/run_jobs/job.py");

/// `vramdoc run` (over `backend`) of `job.py ACTIONS` in the MIG instance `mig`: the
/// report and the summary printed on stderr.
fn run_in_instance(b: &CliBox, backend: &str, mig: &str, actions: &[&str]) -> (Value, String) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run.json");
    let o = b
        .vramdoc()
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .env("CUDA_VISIBLE_DEVICES", mig)
        .args(["run", "--backend", backend, "--process-period", "100ms"])
        .arg("--out")
        .arg(&out)
        .args(["--", "python3", JOB])
        .args(actions)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = common::stderr(&o);
    assert!(out.exists(), "{backend}: no report: {err}");
    (common::read_report(&out), err)
}

/// `run` on a MIG box (issue 25): the job in instance 0/1 beside a neighbour holding 30 GiB
/// in instance 0/2. The instances are recorded, not the parent (whose privileged aggregate
/// lists would repeat the job), the job is on its instance only, its instance's peak is
/// recorded, the summary names instances as scan does, and nothing is said about the
/// neighbour; an out-of-memory error in the job's instance is judged against that
/// instance's memory, with the neighbour's 30 GiB not counted as the job's competition.
/// Over the in-process backend and nvml-wrapper over libnvidia-ml.so.1.
#[test]
fn run_judges_a_job_against_its_instance() {
    let b = CliBox::new("a100-80gb", &["--mig", "3g.40gb,3g.40gb"]);
    let inst = b.sim().mig_instances().to_vec();
    let (u1, u2) = (inst[0].device.uuid.clone(), inst[1].device.uuid.clone());
    let total = inst[0].device.total;
    let _n = Holder::start(
        &b.dir,
        &[("CUDA_VISIBLE_DEVICES", u2.as_str())],
        &["--size", "30GiB"],
    );
    for backend in ["sim", "real"] {
        let (r, err) = run_in_instance(&b, backend, &u1, &["ctx:0", "alloc:20480", "sleep:300"]);
        assert_eq!(r["run"]["exit"]["status"], 0, "{backend}: {err}");
        let peaks: Vec<(u64, u64, u64)> = r["run"]["peaks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["device"].as_u64().unwrap(),
                    p["total"].as_u64().unwrap(),
                    p["peak_used"].as_u64().unwrap(),
                )
            })
            .collect();
        let devs: Vec<u64> = peaks.iter().map(|p| p.0).collect();
        assert_eq!(
            devs,
            vec![1, 2],
            "{backend}: instances, not the parent: {peaks:?}"
        );
        let (_, t1, p1) = peaks[0];
        assert_eq!(t1, total, "{backend}");
        assert!(
            (20 * GIB..22 * GIB).contains(&p1),
            "{backend}: instance peak {p1}"
        );
        // The job is on its instance only, counted once.
        let job: Vec<&Value> = r["run"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["devices"].as_array().is_some_and(|d| !d.is_empty()))
            .collect();
        assert_eq!(job.len(), 1, "{backend}: {job:?}");
        assert_eq!(job[0]["devices"].as_array().unwrap().len(), 1, "{backend}");
        assert_eq!(job[0]["devices"][0]["device"], 1, "{backend}");
        assert_eq!(job[0]["devices"][0]["uuid"], u1.as_str(), "{backend}");
        let tree = r["run"]["tree_peaks"][0]["peak_used"].as_u64().unwrap();
        assert!(
            tree <= p1,
            "{backend}: the job's {tree} within its instance's {p1}"
        );
        // Nothing about the neighbour, no warning at all.
        for f in r["run"]["findings"].as_array().unwrap() {
            assert_eq!(f["severity"], "info", "{backend}: {f}");
            assert!(
                !f["devices"].as_array().unwrap().contains(&2.into()),
                "{backend}: {f}"
            );
        }
        assert!(
            err.contains("GPU 0/1 (MIG 3g.40gb): peak"),
            "{backend}: {err}"
        );
        assert!(
            err.contains("GPU 0/2 (MIG 3g.40gb): peak"),
            "{backend}: {err}"
        );
        assert!(!err.contains("  GPU 0:"), "{backend}: no parent row: {err}");

        // 30 GiB, then 12 GiB more: out of memory in the instance (39.25 GiB).
        let (r, err) = run_in_instance(
            &b,
            backend,
            &u1,
            &["ctx:0", "alloc:30720", "sleep:300", "alloc:12288"],
        );
        assert_eq!(r["run"]["exit"]["status"], 1, "{backend}: {err}");
        let oom: Vec<&Value> = r["run"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["id"] == "out-of-memory")
            .collect();
        assert_eq!(oom.len(), 1, "{backend}: {r}");
        assert_eq!(oom[0]["severity"], "error");
        assert_eq!(oom[0]["devices"], serde_json::json!([1]), "{backend}");
        let title = oom[0]["title"].as_str().unwrap();
        assert!(title.starts_with("Out of memory on GPU 0/1 at"), "{title}");
        assert!(
            title.contains("of 39.25 GiB"),
            "{backend}: the instance's: {title}"
        );
        let ev = |label: &str| {
            oom[0]["evidence"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["label"] == label)
                .and_then(|e| e["bytes"].as_u64())
                .unwrap_or_else(|| panic!("{backend}: {label} in {}", oom[0]))
        };
        assert_eq!(ev("total"), total, "{backend}");
        // The neighbour's 30 GiB is in another instance: not "other processes" here.
        let others = ev("held by other processes and the driver (used - the job's)");
        assert!(others < GIB, "{backend}: {others}");
        for f in r["run"]["findings"].as_array().unwrap() {
            assert!(
                !f["devices"].as_array().unwrap().contains(&2.into()),
                "{backend}: {f}"
            );
        }
    }
}

/// nvml.h at the C ABI of the simulated libnvidia-ml.so.1: `nvmlDeviceGetHandleByUUID` on a
/// MIG device UUID gives that instance's MIG device handle (as pynvml clients such as
/// dask_cudf use it), and a process running in an instance is listed with its GPU and
/// compute instance ids (0xFFFFFFFF only outside MIG mode), through the instance's handle
/// and through the parent's aggregate list alike.
#[test]
fn c_abi_mig_uuids_and_process_instance_ids() {
    use libloading::Library;
    use std::ffi::{c_char, c_uint, c_ulonglong, c_void, CString};
    type Device = *mut c_void;
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct ProcV2 {
        pid: c_uint,
        used: c_ulonglong,
        gi: c_uint,
        ci: c_uint,
    }
    const SUCCESS: c_uint = 0;
    const NOT_FOUND: c_uint = 6;
    const NO_INSTANCE: c_uint = 0xFFFF_FFFF;
    let b = CliBox::new("h100", &["--mig", "3g.40gb,1g.10gb"]);
    let inst = b.sim().mig_instances().to_vec();
    let (u1, gi1) = (inst[1].device.uuid.clone(), inst[1].gi);
    let h = Holder::start(
        &b.dir,
        &[("CUDA_VISIBLE_DEVICES", u1.as_str())],
        &["--size", "1GiB"],
    );
    let _g = common::nvml::session(Some(&b.dir));
    // SAFETY: our own simulated library; each symbol is called with its nvml.h signature.
    unsafe {
        let lib = Library::new(common::nvml::lib_path()).expect("dlopen simgpu");
        let init = lib
            .get::<unsafe extern "C" fn() -> c_uint>(b"nvmlInit_v2")
            .unwrap();
        assert_eq!(init(), SUCCESS);
        let by_uuid = lib
            .get::<unsafe extern "C" fn(*const c_char, *mut Device) -> c_uint>(
                b"nvmlDeviceGetHandleByUUID",
            )
            .unwrap();
        let by_index = lib
            .get::<unsafe extern "C" fn(c_uint, *mut Device) -> c_uint>(
                b"nvmlDeviceGetHandleByIndex_v2",
            )
            .unwrap();
        let mig_by_index = lib
            .get::<unsafe extern "C" fn(Device, c_uint, *mut Device) -> c_uint>(
                b"nvmlDeviceGetMigDeviceHandleByIndex",
            )
            .unwrap();
        let is_mig = lib
            .get::<unsafe extern "C" fn(Device, *mut c_uint) -> c_uint>(
                b"nvmlDeviceIsMigDeviceHandle",
            )
            .unwrap();
        let (mut d, mut m1, mut by) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(by_index(0, &mut d), SUCCESS);
        assert_eq!(mig_by_index(d, 1, &mut m1), SUCCESS);
        let c = CString::new(u1.to_lowercase()).unwrap();
        assert_eq!(by_uuid(c.as_ptr(), &mut by), SUCCESS, "a MIG device UUID");
        assert_eq!(by, m1, "the instance's MIG handle");
        let mut flag = 9;
        assert_eq!(is_mig(by, &mut flag), SUCCESS);
        assert_eq!(flag, 1);
        let parent_uuid = CString::new(inst[1].device.uuid.replace("MIG-", "GPU-")).unwrap();
        assert_eq!(by_uuid(parent_uuid.as_ptr(), &mut by), NOT_FOUND);
        let nope = CString::new("MIG-00000000-0000-0000-0000-000000000000").unwrap();
        assert_eq!(by_uuid(nope.as_ptr(), &mut by), NOT_FOUND);
        let procs = lib
            .get::<unsafe extern "C" fn(Device, *mut c_uint, *mut ProcV2) -> c_uint>(
                b"nvmlDeviceGetComputeRunningProcesses_v3",
            )
            .unwrap();
        let list = |h: Device| {
            let mut buf = [ProcV2 {
                pid: 0,
                used: 0,
                gi: 0,
                ci: 0,
            }; 8];
            let mut n: c_uint = 8;
            assert_eq!(procs(h, &mut n, buf.as_mut_ptr()), SUCCESS);
            buf[..n as usize].to_vec()
        };
        for (what, handle) in [("instance handle", m1), ("parent (aggregate)", d)] {
            let l = list(handle);
            let p = l
                .iter()
                .find(|p| p.pid == h.pid())
                .unwrap_or_else(|| panic!("{what}: the holder listed"));
            assert_eq!((p.gi, p.ci), (gi1, 0), "{what}");
            assert_ne!(p.gi, NO_INSTANCE);
        }
        let shutdown = lib
            .get::<unsafe extern "C" fn() -> c_uint>(b"nvmlShutdown")
            .unwrap();
        assert_eq!(shutdown(), SUCCESS);
    }
}

/// `vramdoc preflight` on a MIG box (issue 25), over both backends: a job given the whole
/// GPU in MIG mode passes while one instance is clean with the memory asked for, and the
/// answer names that instance (`0/2` and its MIG UUID); the parent's sum (37 GiB used of
/// 80 GiB in instance 0/1) refuses nothing. A job given the full instance by its MIG UUID is
/// refused, naming `0/1`; given the free one, it passes.
#[test]
fn preflight_on_a_mig_box_names_a_free_instance() {
    let (b, u1, u2, h) = halves_with_a_holder_in_the_first("37GiB");
    for backend in ["sim", "real"] {
        let preflight = |gpus: &str| {
            let out = b
                .vramdoc()
                .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
                .args([
                    "preflight",
                    "--backend",
                    backend,
                    "--need",
                    "8GiB",
                    "--gpus",
                ])
                .arg(gpus)
                .output()
                .unwrap();
            let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (out.status.code(), line)
        };
        let (code, line) = preflight("0");
        assert_eq!(code, Some(0), "{backend}: {line}");
        assert!(
            line.starts_with("ok: GPU 0 (--gpus) clean"),
            "{backend}: {line}"
        );
        assert!(
            line.contains(&format!("0/2 ({u2}, 39.25 GiB free)")),
            "{backend}: {line}"
        );
        assert!(
            !line.contains("0/1"),
            "{backend}: the full instance is no candidate: {line}"
        );
        let (code, line) = preflight(&u1);
        assert_eq!(code, Some(1), "{backend}: {line}");
        assert!(line.starts_with("problem: GPU 0/1: "), "{backend}: {line}");
        assert!(
            line.contains(&format!("PID {}", h.pid())),
            "{backend}: {line}"
        );
        assert!(line.contains("8.00 GiB needed"), "{backend}: {line}");
        let (code, line) = preflight(&u2[..12]);
        assert_eq!(code, Some(0), "{backend}: {line}");
        assert!(
            line.starts_with("ok: GPU 0/2 (--gpus) clean"),
            "{backend}: {line}"
        );
    }
    // In a container given the free instance (an unprivileged caller: the parent answers
    // NO_PERMISSION): its NVIDIA_VISIBLE_DEVICES=MIG-<uuid> is checked, and the parent GPU
    // is judged by the instance, not refused.
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let tmp = tempfile::tempdir().unwrap();
    let out = in_container(
        &b,
        &u2,
        tmp.path(),
        &format!(
            "{exe} preflight --need 8GiB; echo rc=$?; {exe} preflight --gpus 0 --need 8GiB; echo rc=$?"
        ),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text} {}", common::stderr(&out));
    assert!(
        lines[0].starts_with("ok: GPU 0/2 (NVIDIA_VISIBLE_DEVICES) clean"),
        "{text}"
    );
    assert!(lines[2].starts_with("ok: GPU 0 (--gpus) clean"), "{text}");
    assert!(lines[2].contains(&format!("0/2 ({u2}")), "{text}");
    assert_eq!((lines[1], lines[3]), ("rc=0", "rc=0"), "{text}");
}

/// The Prometheus exposition `serve` keeps (rendered here by `scan --prom`, the same
/// renderer) on a MIG box, over both backends: memory series per instance, labelled with the
/// instance as scan names it (`gpu="0/1"`, its MIG UUID); the GPU in MIG mode keeps its
/// info series but no memory series (its memory is the instances' sum: a node's sum would
/// count it twice); process series name the instance.
#[test]
fn prometheus_series_are_per_instance() {
    let (b, u1, u2, h) = halves_with_a_holder_in_the_first("4GiB");
    for backend in ["sim", "real"] {
        let tmp = tempfile::tempdir().unwrap();
        let prom = tmp.path().join("m.prom");
        let mut c = scan_cmd(&b.dir, &["--prom"]);
        c.arg(&prom).args(["--per-process", "--backend", backend]);
        c.env("LD_LIBRARY_PATH", common::simgpu_lib_dir());
        assert_ok(&run(c), backend);
        let text = std::fs::read_to_string(&prom).unwrap();
        let series = |name: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .map(str::to_string)
                .collect()
        };
        let used = series("vramdoc_gpu_memory_used_bytes");
        assert_eq!(used.len(), 2, "{backend}: one per instance: {used:?}");
        assert!(
            used.iter()
                .any(|l| l.contains("gpu=\"0/1\"") && l.contains(&u1)),
            "{backend}: {used:?}"
        );
        assert!(
            used.iter()
                .any(|l| l.contains("gpu=\"0/2\"") && l.contains(&u2)),
            "{backend}: {used:?}"
        );
        assert!(!used.iter().any(|l| l.contains("gpu=\"0\"")), "{backend}");
        assert_eq!(series("vramdoc_gpu_info").len(), 3, "{backend}");
        let procs = series("vramdoc_process_gpu_memory_bytes");
        let mine: Vec<&String> = procs
            .iter()
            .filter(|l| l.contains(&format!("pid=\"{}\"", h.pid())))
            .collect();
        assert_eq!(mine.len(), 1, "{backend}: counted once: {procs:?}");
        assert!(mine[0].contains("gpu=\"0/1\""), "{backend}: {mine:?}");
    }
}

/// `run` in a container given one MIG instance (an unprivileged caller: the parent answers
/// NO_PERMISSION): the instance is recorded, named `0/2`, and the parent is neither a row
/// nor a finding.
#[test]
fn run_in_a_container_given_one_instance_records_it() {
    let b = CliBox::new("h100", &["--mig", "3g.40gb,3g.40gb"]);
    let mine = b.sim().mig_instances()[1].device.uuid.clone();
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let tmp = tempfile::tempdir().unwrap();
    let out = in_container(
        &b,
        &mine,
        tmp.path(),
        &format!("{exe} run --json -- {exe} sim hold --size 2GiB --duration 1s 2>/dev/null"),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let json = &text[text.find('{').unwrap_or(0)..];
    let v: Value = serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("run JSON: {e}: {text} {}", common::stderr(&out)));
    let peaks = v["run"]["peaks"].as_array().unwrap();
    assert_eq!(peaks.len(), 1, "the instance only: {peaks:?}");
    assert_eq!(peaks[0]["device"], 1);
    let peak = peaks[0]["peak_used"].as_u64().unwrap();
    assert!((2 * GIB..3 * GIB).contains(&peak), "{peak}");
    assert_eq!(
        v["run"]["findings"].as_array().unwrap().len(),
        0,
        "{}",
        v["run"]["findings"]
    );
    let d = &v["environment"]["devices"];
    assert_eq!(d[0]["status"], "no-permission", "{d}");
    assert_eq!(d[1]["uuid"], mine.as_str());
}
