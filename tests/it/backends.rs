//! One behaviour suite for every driver backend: the in-process `sim` driver, and the real
//! `cuda` driver (cudarc) loading crates/simgpu as libcuda.so in a child process. The monitor
//! side is `sim` in-process, and in the child whatever `VRAMDOC_TEST_MONITOR` names: the
//! cuda suites run with `nvml` (nvml-wrapper over the simulated libnvidia-ml.so.1).
//!
//! The child processes are entries of the child-process harness (common/child.rs).

use crate::common;

use common::child;
use common::poll::{eventually, SECS_10};

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use vramdoc::backend::{self, BackendKind};
use vramdoc::gpu::{self, Driver, GpuError, Monitor};
use vramdoc::units::{GIB, MIB};
use vramdoc_sim::{SimBox, SimProcess};

const SPEC: &str = "2x16GiB";

fn pid_used(monitor: &dyn Monitor, device: u32, pid: u32) -> Option<Option<u64>> {
    monitor
        .processes(device)
        .unwrap()
        .into_iter()
        .find(|p| p.pid == pid)
        .map(|p| p.used)
}

/// Start a holder process and wait for its `holding pid=` line; returns it and its pid.
fn start_holder(mut cmd: Command) -> (Child, u32) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn holder");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = match lines.next() {
            Some(Ok(l)) => l,
            _ => {
                let status = child.wait().unwrap();
                panic!("holder exited before holding: {status}");
            }
        };
        // The test harness prints `test NAME ... ` before a child test's own output.
        if let Some(rest) = line.split("holding pid=").nth(1) {
            let pid: u32 = rest.split_whitespace().next().unwrap().parse().unwrap();
            return (child, pid);
        }
    }
}

/// The behaviour suite. `physical[o]` is the physical device behind CUDA ordinal `o`;
/// `holder` starts a process that holds 1 GiB on ordinal 0 and prints `holding pid=`.
fn suite(
    driver: &mut dyn Driver,
    monitor: &dyn Monitor,
    box_dir: &Path,
    physical: &[u32],
    holder: &dyn Fn() -> Command,
) {
    let sim = SimBox::open(box_dir).unwrap();
    let pid = std::process::id();
    let n_phys = sim.devices().len() as u32;
    println!(
        "suite: backend={} monitor={} physical={physical:?}",
        driver.backend(),
        monitor.backend()
    );

    // Devices as this process sees them.
    assert_eq!(driver.device_count().unwrap(), physical.len() as u32);
    let base: Vec<u64> = (0..n_phys)
        .map(|d| monitor.memory(d).unwrap().used)
        .collect();
    for d in 0..n_phys {
        assert_eq!(
            pid_used(monitor, d, pid),
            None,
            "nothing of ours on {d} yet"
        );
    }

    // A context on the last ordinal: overhead on its physical device, and only there.
    let ordinal = physical.len() as u32 - 1;
    let target = physical[ordinal as usize];
    // The cuda backend allocates its checksum kernel's result word with the context (so a
    // fill never needs memory beyond the allocation it fills): one 2 MiB page more.
    let word = if driver.backend() == "cuda" {
        2 * MIB
    } else {
        0
    };
    let overhead = sim.device(target).unwrap().context_overhead + word;
    let ctx = driver.create_context(ordinal).unwrap();
    assert_eq!(
        monitor.memory(target).unwrap().used,
        base[target as usize] + overhead
    );
    assert_eq!(pid_used(monitor, target, pid), Some(Some(overhead)));
    for d in (0..n_phys).filter(|d| *d != target) {
        assert_eq!(
            pid_used(monitor, d, pid),
            None,
            "vramdoc touched physical device {d}, which it was not asked to use"
        );
        assert_eq!(monitor.memory(d).unwrap().used, base[d as usize]);
    }

    // The process's view of memory agrees with the monitor's.
    let (free, total) = driver.mem_info(ctx).unwrap();
    let m = monitor.memory(target).unwrap();
    assert_eq!(total, m.total);
    assert_eq!(free, m.free);

    // Allocation, rounded up to the 2 MiB granularity.
    let small = 3 * MIB + 6;
    let a = driver.alloc(ctx, small).unwrap();
    assert_eq!(
        pid_used(monitor, target, pid),
        Some(Some(overhead + 4 * MIB))
    );
    assert_eq!(
        monitor.memory(target).unwrap().used,
        base[target as usize] + overhead + 4 * MIB
    );

    // The fill kernel touches the memory; the checksum kernel proves it.
    for value in [0xA5A5_0001u32, 7] {
        assert_eq!(
            driver.fill(a, value).unwrap(),
            gpu::expected_checksum(small, value)
        );
    }
    let large = 256 * MIB;
    let b = driver.alloc(ctx, large).unwrap();
    assert_eq!(
        driver.fill(b, 0xFFFF_FFFF).unwrap(),
        gpu::expected_checksum(large, 0xFFFF_FFFF)
    );
    driver.synchronize(ctx).unwrap();
    driver.free(b).unwrap();
    assert_eq!(
        pid_used(monitor, target, pid),
        Some(Some(overhead + 4 * MIB))
    );

    // Beyond free: out of memory, and nothing charged.
    let (free, _) = driver.mem_info(ctx).unwrap();
    match driver.alloc(ctx, free + 2 * MIB) {
        Err(e) => assert!(e.is_out_of_memory(), "expected out of memory, got {e}"),
        Ok(_) => panic!("allocating {} with {free} free succeeded", free + 2 * MIB),
    }
    assert_eq!(
        pid_used(monitor, target, pid),
        Some(Some(overhead + 4 * MIB))
    );

    // An allocation of every free byte can still be filled and checksummed: the fill needs
    // no memory of its own.
    let (free, _) = driver.mem_info(ctx).unwrap();
    let all = driver.alloc(ctx, free).unwrap();
    assert_eq!(
        driver.fill(all, 7).unwrap(),
        gpu::expected_checksum(free, 7),
        "fill of the last free bytes"
    );
    driver.free(all).unwrap();

    // Free returns the allocation.
    driver.free(a).unwrap();
    assert_eq!(pid_used(monitor, target, pid), Some(Some(overhead)));

    // Destroying the context returns everything, allocations included.
    let _left = driver.alloc(ctx, GIB).unwrap();
    assert_eq!(pid_used(monitor, target, pid), Some(Some(overhead + GIB)));
    driver.destroy_context(ctx).unwrap();
    for d in 0..n_phys {
        assert_eq!(pid_used(monitor, d, pid), None);
        assert_eq!(monitor.memory(d).unwrap().used, base[d as usize]);
    }

    // Process exit returns memory: a holder on ordinal 0, killed.
    let held = physical[0];
    let (mut child, hpid) = start_holder(holder());
    let used = pid_used(monitor, held, hpid).expect("holder visible to the monitor");
    assert!(used.unwrap_or(0) >= GIB, "holder uses {used:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    eventually(SECS_10, "the killed holder's memory is returned", || {
        pid_used(monitor, held, hpid).is_none()
            && monitor.memory(held).unwrap().used == base[held as usize]
    });
}

fn sim_holder(box_dir: &Path, visible: Option<&str>) -> Command {
    let mut c = common::vramdoc();
    c.args(["sim", "hold", "--device", "0", "--size", "1GiB"])
        .env("VRAMDOC_SIM_DIR", box_dir);
    if let Some(v) = visible {
        c.env("CUDA_VISIBLE_DEVICES", v);
    }
    c
}

// ---------------------------------------------------------------------------------------------
// (a) in-process sim backend

fn run_sim_suite(visible: Option<&str>, physical: &[u32]) {
    let dir = common::fresh_box(SPEC);
    let sim = SimBox::open(dir.path()).unwrap();
    let mut driver = backend::sim::SimDriver::new(SimProcess::new(sim.clone(), visible));
    let monitor = backend::sim::SimMonitor::new(sim);
    let path = dir.path().to_path_buf();
    let v = visible.map(str::to_string);
    suite(&mut driver, &monitor, dir.path(), physical, &|| {
        sim_holder(&path, v.as_deref())
    });
}

#[test]
fn sim_backend_suite() {
    run_sim_suite(None, &[0, 1]);
}

#[test]
fn sim_backend_suite_under_cuda_visible_devices() {
    // CUDA_VISIBLE_DEVICES=1: ordinal 0 is physical 1, and physical 0 sees nothing of us.
    run_sim_suite(Some("1"), &[1]);
}

// ---------------------------------------------------------------------------------------------
// (b) the real cuda backend over crates/simgpu, in a child process

/// What the child running the suite is told.
#[derive(Serialize, Deserialize)]
struct SuiteInput {
    /// The box.
    box_dir: std::path::PathBuf,
    /// Physical index of each CUDA ordinal the child should see.
    physical: Vec<u32>,
    /// The monitor backend: nvml-wrapper over simgpu (`Real`) or in-process (`Sim`).
    nvml: bool,
}

fn run_cuda_suite(visible: Option<&str>, physical: &[u32]) {
    let dir = common::fresh_box(SPEC);
    // The real pair: cudarc's CudaDriver and nvml-wrapper's NvmlMonitor, both over simgpu.
    let mut c = child::of!(cuda_suite_child)
        .simgpu()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .input(&SuiteInput {
            box_dir: dir.path().to_path_buf(),
            physical: physical.to_vec(),
            nvml: true,
        });
    if let Some(v) = visible {
        c = c.env("CUDA_VISIBLE_DEVICES", v);
    }
    c.run::<()>();
    // The child has exited: nothing of it is left on the box.
    let sim = SimBox::open(dir.path()).unwrap();
    assert!(sim.state().unwrap().processes.is_empty());
}

#[test]
fn cuda_backend_suite() {
    run_cuda_suite(None, &[0, 1]);
}

#[test]
fn cuda_backend_suite_under_cuda_visible_devices() {
    run_cuda_suite(Some("1"), &[1]);
}

child::entry! {
    /// The suite through the cuda backend (cudarc over the simulated libcuda.so).
    fn cuda_suite_child(input: SuiteInput) {
        let mut driver = gpu::cuda::CudaDriver::open().unwrap();
        let kind = if input.nvml { BackendKind::Real } else { BackendKind::Sim };
        let sim_dir = backend::Backend::sim_dir_from_env();
        let monitor = backend::open_monitor(&backend::Backend { kind, sim_dir }).unwrap();
        let holder = || {
            // The holder is this binary again, holding through the cuda backend, with this
            // process's libraries, box and CUDA_VISIBLE_DEVICES.
            child::of!(cuda_hold_child)
                .inherit(&["LD_LIBRARY_PATH", "VRAMDOC_SIM_DIR", "CUDA_VISIBLE_DEVICES"])
                .command()
        };
        suite(&mut driver, monitor.as_ref(), &input.box_dir, &input.physical, &holder);
        assert!(
            driver.last_fill_ms().is_some_and(|ms| ms >= 0.0),
            "event timing"
        );
    }
}

child::entry! {
    /// Holds 1 GiB on ordinal 0 through the cuda backend until killed.
    fn cuda_hold_child() {
        let mut driver = gpu::cuda::CudaDriver::open().unwrap();
        let ctx = driver.create_context(0).unwrap();
        let a = driver.alloc(ctx, GIB).unwrap();
        assert_eq!(driver.fill(a, 1).unwrap(), gpu::expected_checksum(GIB, 1));
        println!("holding pid={} device=0 size={GIB}", std::process::id());
        std::thread::sleep(Duration::from_secs(120));
    }
}

// ---------------------------------------------------------------------------------------------
// Missing library, no device

/// How `CudaDriver::open()` must fail in [`cuda_open_child`].
#[derive(Debug, Serialize, Deserialize)]
enum OpenFailure {
    /// No libcuda.so at all: `LibraryMissing` with the install hint.
    Missing,
    /// A libcuda.so without the cu* symbols: `LibraryMissing` naming cuInit.
    Symbols,
    /// The library loads but sees no device: `NoDevice`.
    NoDevice,
}

/// Run [`cuda_open_child`] expecting `expect`; `Err` when the machine cannot stage it.
fn open_fails(expect: OpenFailure, c: child::Child) -> Result<String, String> {
    c.input(&expect).run()
}

#[test]
fn cuda_open_without_libcuda_is_library_missing() {
    let empty = tempfile::tempdir().unwrap();
    let c = child::of!(cuda_open_child).env("LD_LIBRARY_PATH", empty.path());
    common::skip::require!("real-driver", open_fails(OpenFailure::Missing, c));
}

#[test]
fn cuda_open_with_a_libcuda_lacking_symbols_is_library_missing() {
    // A library that loads under the name libcuda.so but exports no cu* symbol: cudarc would
    // panic on the first call; open() must find out first. LD_LIBRARY_PATH puts it before
    // any installed driver.
    let dir = tempfile::tempdir().unwrap();
    let lib = common::c_library(dir.path(), "notcuda", "int not_cuda(void) { return 0; }\n");
    for name in ["libcuda.so", "libcuda.so.1"] {
        std::fs::copy(&lib, dir.path().join(name)).unwrap();
    }
    let c = child::of!(cuda_open_child).env("LD_LIBRARY_PATH", dir.path());
    open_fails(OpenFailure::Symbols, c).unwrap();
}

#[test]
fn cuda_open_without_box_is_no_device() {
    // The simulated libcuda.so loads, but cuInit finds no box: CUDA_ERROR_NO_DEVICE.
    open_fails(OpenFailure::NoDevice, child::of!(cuda_open_child).simgpu()).unwrap();
}

#[test]
fn cuda_open_with_no_visible_device_is_no_device() {
    let dir = common::fresh_box(SPEC);
    let c = child::of!(cuda_open_child)
        .simgpu()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .env("CUDA_VISIBLE_DEVICES", "");
    open_fails(OpenFailure::NoDevice, c).unwrap();
}

child::entry! {
    /// `CudaDriver::open()` fails as `expect` says: `Ok(the error)`; `Err` when a real
    /// libcuda.so outside `LD_LIBRARY_PATH` makes a missing library impossible to stage.
    fn cuda_open_child(expect: OpenFailure) -> Result<String, String> {
        if matches!(expect, OpenFailure::Missing) && gpu::cuda::library_present() {
            return Err("the loader finds a libcuda.so outside LD_LIBRARY_PATH (an NVIDIA \
                        driver is installed), so a missing library cannot be staged"
                .into());
        }
        let err = match gpu::cuda::CudaDriver::open() {
            Ok(_) => panic!("CudaDriver::open succeeded; expected {expect:?}"),
            Err(e) => e,
        };
        assert!(
            err.is_environment(),
            "{err} must be an environment error (exit 3)"
        );
        assert!(!err.to_string().contains('\n'), "one-line message: {err}");
        match (&expect, &err) {
            (OpenFailure::Missing, GpuError::LibraryMissing { hint, .. }) => {
                assert!(hint.contains("install the NVIDIA driver"), "{hint}");
                assert!(err.to_string().len() <= 100, "fits 100 columns: {err}");
            }
            (OpenFailure::Symbols, GpuError::LibraryMissing { hint, .. }) => {
                assert!(hint.contains("lacks cuInit"), "{hint}");
                assert!(err.to_string().len() <= 100, "fits 100 columns: {err}");
            }
            (OpenFailure::NoDevice, GpuError::NoDevice(msg)) => {
                assert!(
                    msg.contains("CUDA_ERROR_NO_DEVICE") || msg.contains("no device"),
                    "{msg}"
                );
            }
            _ => panic!("expected {expect:?}, got {err:?}"),
        }
        Ok(err.to_string())
    }
}
