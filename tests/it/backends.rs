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

/// What the checksum kernel must read back after a fill of `bytes` with `value`: the sum of
/// the whole 32-bit words written, wrapping at 64 bits. Computed here (word count times
/// value, in 128 bits, truncated), not by `vramdoc_gpu_spec::kernel`, the helper the
/// simulator itself answers with.
fn sum_of_fill(bytes: u64, value: u32) -> u64 {
    (u128::from(bytes / 4) * u128::from(value)) as u64
}

#[test]
fn sum_of_fill_is_the_sum_of_the_words() {
    // 3 MiB + 6 bytes: 786_433 whole words (the last 2 bytes are no word).
    assert_eq!(sum_of_fill(3 * MIB + 6, 7), 786_433 * 7);
    // 256 MiB of 0xFFFF_FFFF: 2^26 words.
    assert_eq!(sum_of_fill(256 * MIB, u32::MAX), 0xFFFF_FFFF << 26);
    // Wrapping: 2^34 words of 2^32 - 1 is 2^66 - 2^34, which is -2^34 modulo 2^64.
    assert_eq!(sum_of_fill(1 << 36, u32::MAX), 0u64.wrapping_sub(1 << 34));
}

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
        assert_eq!(driver.fill(a, value).unwrap(), sum_of_fill(small, value));
    }
    let large = 256 * MIB;
    let b = driver.alloc(ctx, large).unwrap();
    assert_eq!(
        driver.fill(b, 0xFFFF_FFFF).unwrap(),
        sum_of_fill(large, 0xFFFF_FFFF)
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
        sum_of_fill(free, 7),
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
        assert_eq!(driver.fill(a, 1).unwrap(), sum_of_fill(GIB, 1));
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

// ---------------------------------------------------------------------------------------------
// The fault matrix: every fault and driver behaviour of the simulator's core, through both
// paths — the in-process backends (`backend::sim`) and the real ones (cudarc, nvml-wrapper)
// over crates/simgpu in a child process — with the answers compared cell by cell.

/// One cell: a box, a fault (or driver behaviour), and the calls it shows in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Cell {
    /// The box as made: the calls below all succeed.
    Clean,
    CudaStubLibrary,
    DriverMismatch,
    NoPtxJit,
    Contained,
    IllegalAddress,
    AllocFailAfter,
    CudaTotalExcludesReserved,
    ExclusiveProcess,
    InvalidOrdinal,
    LostDevice,
    NoPermission,
    MigUnprivileged,
    UsedMemoryUnavailable,
    NvmlHang,
    SessionLostBeforeInit,
    SessionLostAfterInit,
    Wsl,
    Pre510Driver,
    Gb10,
}

const CELLS: [Cell; 20] = [
    Cell::Clean,
    Cell::CudaStubLibrary,
    Cell::DriverMismatch,
    Cell::NoPtxJit,
    Cell::Contained,
    Cell::IllegalAddress,
    Cell::AllocFailAfter,
    Cell::CudaTotalExcludesReserved,
    Cell::ExclusiveProcess,
    Cell::InvalidOrdinal,
    Cell::LostDevice,
    Cell::NoPermission,
    Cell::MigUnprivileged,
    Cell::UsedMemoryUnavailable,
    Cell::NvmlHang,
    Cell::SessionLostBeforeInit,
    Cell::SessionLostAfterInit,
    Cell::Wsl,
    Cell::Pre510Driver,
    Cell::Gb10,
];

/// Where the two paths answer differently on purpose, (cell, answer index, in-process,
/// real): a device lost under CUDA. The simulator knows which device fell off the bus and
/// says so (`DeviceLost`); CUDA has no such code, so the real backend reads
/// `CUDA_ERROR_UNKNOWN` (a context on it) or `CUDA_ERROR_LAUNCH_FAILED` (work on it).
const DIFFERENCES: &[(Cell, usize, &str, &str)] = &[
    (
        Cell::LostDevice,
        0,
        "device-lost 1",
        "driver CUDA_ERROR_UNKNOWN",
    ),
    (
        Cell::LostDevice,
        1,
        "device-lost 0",
        "driver CUDA_ERROR_LAUNCH_FAILED",
    ),
];

/// The box of a cell: spec and options, and the faults set before anything opens it.
fn cell_box(cell: Cell) -> tempfile::TempDir {
    use vramdoc_sim::profile::DriverProfile;
    use vramdoc_sim::{Faults, InitOptions, Platform};
    let mut opts = InitOptions::default();
    let spec = match cell {
        Cell::Gb10 => "gb10",
        _ => SPEC,
    };
    if let Cell::Wsl | Cell::Pre510Driver = cell {
        let p = DriverProfile::parse(if cell == Cell::Wsl { "516.59" } else { "470" }).unwrap();
        opts.driver_version = p.driver_version;
        opts.cuda_driver_version = p.cuda_driver_version;
        if cell == Cell::Wsl {
            opts.platform = Platform::Wsl;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let sim = SimBox::create(dir.path(), spec, &opts).unwrap();
    let mut f = Faults::default();
    match cell {
        Cell::CudaStubLibrary => f.cuda_stub_library = true,
        Cell::DriverMismatch => f.driver_version_mismatch = true,
        Cell::NoPtxJit => f.no_ptx_jit = true,
        Cell::Contained => f.contained_devices = vec![0],
        Cell::IllegalAddress => f.illegal_address_devices = vec![0],
        Cell::CudaTotalExcludesReserved => f.cuda_total_excludes_reserved = true,
        Cell::ExclusiveProcess => f.exclusive_process_devices = vec![0],
        Cell::NoPermission => f.no_permission_devices = vec![1],
        Cell::LostDevice => f.lost_devices = vec![1],
        Cell::MigUnprivileged => f.mig_unprivileged_devices = vec![0],
        Cell::UsedMemoryUnavailable => f.nvml_used_memory_unavailable = true,
        Cell::SessionLostBeforeInit => {
            f.nvml_sessions_lost = true;
            f.nvml_epoch = 1;
        }
        _ => {}
    }
    sim.set_faults(&f).unwrap();
    dir
}

/// A call's answer, as the matrix compares it: what succeeded (with the numbers both paths
/// must agree on), or the error's kind and driver code (not its text: the calls named in
/// messages differ between a backend and a library).
fn answer<T>(r: gpu::Result<T>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => format!("ok {}", ok(v)),
        Err(e) => match e {
            GpuError::LibraryMissing { .. } => "library-missing".into(),
            GpuError::NoDevice(_) => "no-device".into(),
            GpuError::InvalidDevice(i) => format!("invalid-device {i}"),
            GpuError::DeviceLost(i) => format!("device-lost {i}"),
            GpuError::OutOfMemory { device, .. } => format!("out-of-memory {device}"),
            GpuError::Driver { code, .. } => format!("driver {code}"),
            GpuError::Backend { environment, .. } => format!("backend environment={environment}"),
            GpuError::Environment { code, .. } => format!("environment {code}"),
        },
    }
}

fn memory_text(m: gpu::MemoryInfo) -> String {
    format!("{}/{}/{}/{}", m.total, m.reserved, m.used, m.free)
}

/// This process's entries in a device's lists, as (kind, used).
fn own_entries(monitor: &dyn Monitor, device: u32) -> gpu::Result<String> {
    let me = std::process::id();
    let mine: Vec<String> = monitor
        .processes(device)?
        .into_iter()
        .filter(|p| p.pid == me)
        .map(|p| format!("{:?}:{:?}", p.kind, p.used.map(|u| u > 0)))
        .collect();
    Ok(mine.join(","))
}

/// The opening of both traits on one path.
struct Opener<'a> {
    driver: &'a dyn Fn() -> gpu::Result<Box<dyn Driver>>,
    monitor: &'a dyn Fn() -> gpu::Result<Box<dyn Monitor>>,
}

/// Run one cell through `open` (the box is `box_dir`, its pre-open faults already set):
/// the answers, in order.
fn run_cell(cell: Cell, box_dir: &Path, open: &Opener) -> Vec<String> {
    let sim = SimBox::open(box_dir).unwrap();
    let mut out = Vec::new();
    let device_statuses = |m: &dyn Monitor| {
        answer(m.devices(), |ds| {
            ds.iter()
                .map(|d| format!("{}:{:?}:{}", d.index, d.status, memory_text(d.memory)))
                .collect::<Vec<_>>()
                .join(" ")
        })
    };
    match cell {
        Cell::CudaStubLibrary | Cell::DriverMismatch => {
            out.push(answer((open.driver)(), |d| d.backend().into()));
            out.push(answer((open.monitor)(), |_| String::new()));
        }
        Cell::SessionLostBeforeInit => {
            out.push(answer((open.monitor)(), |_| String::new()));
        }
        Cell::SessionLostAfterInit | Cell::NvmlHang => {
            let m = (open.monitor)().unwrap();
            sim.update_faults(|f, _| {
                if cell == Cell::NvmlHang {
                    f.nvml_hang = Some(vramdoc_sim::NvmlHang {
                        device: Some(1),
                        limit_ms: 50,
                    });
                } else {
                    f.nvml_sessions_lost = true;
                    f.nvml_epoch += 1;
                }
                Ok(())
            })
            .unwrap();
            out.push(answer(m.memory(0), memory_text));
            out.push(answer(m.memory(1), memory_text));
            out.push(answer(m.process_list(1, gpu::ProcessKind::Compute), |l| {
                l.len().to_string()
            }));
        }
        Cell::NoPtxJit | Cell::ExclusiveProcess | Cell::InvalidOrdinal => {
            // ExclusiveProcess: the test holds device 0 from another process.
            let mut d = (open.driver)().unwrap();
            let ordinal = if cell == Cell::InvalidOrdinal { 7 } else { 0 };
            out.push(answer(d.create_context(ordinal), |_| String::new()));
        }
        Cell::Contained | Cell::IllegalAddress | Cell::AllocFailAfter => {
            let mut d = (open.driver)().unwrap();
            let ctx = match d.create_context(0) {
                Ok(c) => {
                    out.push(answer(Ok(()), |_| String::new()));
                    c
                }
                Err(e) => {
                    out.push(answer::<()>(Err(e), |_| String::new()));
                    return out;
                }
            };
            if cell == Cell::AllocFailAfter {
                // Counted from now, as `sim fault --alloc-fail-after 0`.
                sim.update_faults(|f, st| {
                    f.alloc_fail_after = Some(st.alloc_calls);
                    Ok(())
                })
                .unwrap();
                out.push(answer(d.alloc(ctx, 4 * MIB), |_| String::new()));
            } else {
                let a = d.alloc(ctx, 4 * MIB).unwrap();
                out.push(answer(d.fill(a, 7), |sum| sum.to_string()));
                out.push(answer(d.synchronize(ctx), |_| String::new()));
            }
        }
        Cell::LostDevice => {
            // Device 1 lost before anything opened; then device 0 under a context.
            let m = (open.monitor)().unwrap();
            out.push(String::new());
            let mut d = (open.driver)().unwrap();
            out[0] = answer(d.create_context(1), |_| String::new());
            let ctx = d.create_context(0).unwrap();
            sim.update_faults(|f, _| {
                f.lost_devices = vec![0, 1];
                Ok(())
            })
            .unwrap();
            out.push(answer(d.synchronize(ctx), |_| String::new()));
            out.push(device_statuses(m.as_ref()));
            out.push(answer(m.memory(1), memory_text));
            out.push(answer(m.processes(1), |l| l.len().to_string()));
        }
        Cell::Clean
        | Cell::CudaTotalExcludesReserved
        | Cell::NoPermission
        | Cell::MigUnprivileged
        | Cell::UsedMemoryUnavailable
        | Cell::Wsl
        | Cell::Pre510Driver
        | Cell::Gb10 => {
            // The monitor first, on an empty box: the cuda backend's context carries its
            // checksum word (2 MiB more than the in-process one), so numbers are read before.
            let m = (open.monitor)().unwrap();
            out.push(device_statuses(m.as_ref()));
            let last = sim.devices().len() as u32 - 1;
            for dev in [0, last] {
                out.push(answer(m.memory(dev), memory_text));
            }
            let mut d = (open.driver)().unwrap();
            let ctx = d.create_context(0).unwrap();
            let a = d.alloc(ctx, 64 * MIB).unwrap();
            out.push(answer(d.fill(a, 7), |sum| sum.to_string()));
            out.push(answer(d.mem_info(ctx), |(_, total)| total.to_string()));
            for dev in [0, last] {
                out.push(answer(own_entries(m.as_ref(), dev), |s| s));
            }
        }
    }
    out
}

/// The cell through the in-process backends, on this process.
fn in_process(cell: Cell, box_dir: &Path) -> Vec<String> {
    let sim = SimBox::open(box_dir).unwrap();
    let (s1, s2) = (sim.clone(), sim);
    let driver = move || -> gpu::Result<Box<dyn Driver>> {
        Ok(Box::new(backend::sim::SimDriver::open(SimProcess::new(
            s1.clone(),
            None,
        ))?))
    };
    let monitor = move || -> gpu::Result<Box<dyn Monitor>> {
        Ok(Box::new(backend::sim::SimMonitor::open(s2.clone())?))
    };
    run_cell(
        cell,
        box_dir,
        &Opener {
            driver: &driver,
            monitor: &monitor,
        },
    )
}

#[derive(Serialize, Deserialize)]
struct MatrixInput {
    cell: Cell,
    box_dir: std::path::PathBuf,
}

child::entry! {
    /// The cell through the real backends: cudarc and nvml-wrapper over crates/simgpu.
    fn fault_matrix_child(input: MatrixInput) -> Vec<String> {
        let driver = || -> gpu::Result<Box<dyn Driver>> {
            Ok(Box::new(gpu::cuda::CudaDriver::open()?))
        };
        let monitor = || -> gpu::Result<Box<dyn Monitor>> {
            Ok(Box::new(gpu::nvml::NvmlMonitor::open()?))
        };
        run_cell(input.cell, &input.box_dir, &Opener { driver: &driver, monitor: &monitor })
    }
}

/// Both paths on every cell of the matrix (each on a box of its own, the real one in a child
/// process per cell: CUDA initialises once per process); the answers must be equal, except
/// the [`DIFFERENCES`], which must be exactly as listed.
#[test]
fn fault_matrix_both_backends_agree() {
    let mut problems = Vec::new();
    for cell in CELLS {
        let inproc_box = cell_box(cell);
        let real_box = cell_box(cell);
        // A process of its own holding the exclusive device, on each box.
        let _holders: Vec<common::KillOnDrop> = if cell == Cell::ExclusiveProcess {
            [&inproc_box, &real_box]
                .iter()
                .map(|b| common::KillOnDrop(start_holder(sim_holder(b.path(), None)).0))
                .collect()
        } else {
            Vec::new()
        };
        let a = in_process(cell, inproc_box.path());
        let b: Vec<String> = child::of!(fault_matrix_child)
            .simgpu()
            .env("VRAMDOC_SIM_DIR", real_box.path())
            .input(&MatrixInput {
                cell,
                box_dir: real_box.path().to_path_buf(),
            })
            .run();
        println!("{cell:?}:\n  in-process {a:?}\n  real       {b:?}");
        if a.len() != b.len() {
            problems.push(format!(
                "{cell:?}: {} answers in-process, {} real",
                a.len(),
                b.len()
            ));
            continue;
        }
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let expected = DIFFERENCES
                .iter()
                .find(|(c, n, _, _)| *c == cell && *n == i)
                .map(|(_, _, p, r)| (*p, *r));
            match expected {
                Some((p, r)) if x == p && y == r => {}
                Some((p, r)) => problems.push(format!(
                    "{cell:?} answer {i}: the documented difference changed: in-process {x} \
                     (expected {p}), real {y} (expected {r})"
                )),
                None if x == y => {}
                None => problems.push(format!("{cell:?} answer {i}: in-process {x}, real {y}")),
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the backends disagree:\n{}",
        problems.join("\n")
    );
}
