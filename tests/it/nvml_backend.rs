//! The NVML backend (`NvmlMonitor` over nvml-wrapper) loaded over crates/simgpu's
//! `libnvidia-ml.so.1`, and that library's C ABI checked directly (sizing protocol, struct
//! versions, reference-counted init, error codes).
//!
//! The simulated library is loaded once per process and reads `VRAMDOC_SIM_DIR` when NVML is
//! initialised, so every test that initialises it holds a `common::nvml::session` (the lock,
//! with the variable set) and shuts NVML down before releasing it.

use crate::common;

use libloading::{Library, Symbol};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, CStr};
use std::path::Path;
use vramdoc::backend::sim::SimMonitor;
use vramdoc::gpu::nvml::NvmlMonitor;
use vramdoc::gpu::{GpuError, Monitor};
use vramdoc_sim::{Faults, SimBox};

const GIB: u64 = 1 << 30;

use common::child;
use common::hold::Holder;
use common::nvml::{lib_path as nvml_lib_path, session as nvml_session};

fn assert_same_view(nvml: &NvmlMonitor, sim: &SimMonitor) {
    let a = nvml.devices().expect("nvml devices");
    let b = sim.devices().expect("sim devices");
    assert_eq!(a, b, "devices() differ");
    for d in &a {
        assert_eq!(
            nvml.memory(d.index).unwrap(),
            sim.memory(d.index).unwrap(),
            "memory({})",
            d.index
        );
        let mut pa = nvml.processes(d.index).unwrap();
        let mut pb = sim.processes(d.index).unwrap();
        pa.sort_by_key(|p| p.pid);
        pb.sort_by_key(|p| p.pid);
        assert_eq!(pa, pb, "processes({})", d.index);
    }
    assert_eq!(nvml.versions().unwrap(), sim.versions().unwrap());
}

#[test]
fn nvml_monitor_matches_sim_monitor() {
    let dir = common::fresh_box("h100,rtx3090");
    let sim = SimMonitor::new(SimBox::open(dir.path()).unwrap());
    let _g = nvml_session(Some(dir.path()));
    let nvml = NvmlMonitor::open_path(&nvml_lib_path()).expect("open simulated NVML");
    assert_eq!(nvml.backend(), "nvml");

    // An idle box.
    assert_same_view(&nvml, &sim);
    let devs = nvml.devices().unwrap();
    assert_eq!(devs.len(), 2);
    assert_eq!(devs[0].name, "NVIDIA H100 80GB HBM3");
    assert_eq!(devs[1].name, "NVIDIA GeForce RTX 3090");
    assert!(nvml.processes(0).unwrap().is_empty());

    // With a neighbour holding memory on physical 1 and a context on 0.
    let holder = Holder::start(
        dir.path(),
        &[],
        &["--device", "1", "--size", "1GiB", "--context-on", "0"],
    );
    assert_same_view(&nvml, &sim);
    let p1 = nvml.processes(1).unwrap();
    assert_eq!(p1.len(), 1);
    assert_eq!(p1[0].pid, holder.pid);
    assert!(p1[0].used.unwrap() > GIB, "{p1:?}");
    let p0 = nvml.processes(0).unwrap();
    assert_eq!(
        p0.iter().map(|p| p.pid).collect::<Vec<_>>(),
        vec![holder.pid]
    );
    let m1 = nvml.memory(1).unwrap();
    assert_eq!(m1.total, m1.reserved + m1.used + m1.free);
    assert_eq!(m1.used, p1[0].used.unwrap());
    holder.kill();
    assert_same_view(&nvml, &sim);

    // Per-process memory "not available" (containers, WDDM) comes through as None.
    let holder = Holder::start(dir.path(), &[], &["--device", "0", "--size", "64MiB"]);
    let b = SimBox::open(dir.path()).unwrap();
    b.set_faults(&Faults {
        nvml_used_memory_unavailable: true,
        ..Default::default()
    })
    .unwrap();
    let p = nvml.processes(0).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].pid, holder.pid);
    assert_eq!(p[0].used, None);
    assert_same_view(&nvml, &sim);
    drop(holder);
}

#[test]
fn call_counts_follow_queries() {
    let dir = common::fresh_box("2x24GiB");
    let _g = nvml_session(Some(dir.path()));
    let nvml = NvmlMonitor::open_path(&nvml_lib_path()).unwrap();
    assert_eq!(nvml.call_counts().inventory, 0);
    nvml.devices().unwrap();
    nvml.memory(0).unwrap();
    nvml.memory(1).unwrap();
    nvml.processes(1).unwrap();
    let c = nvml.call_counts();
    assert_eq!((c.inventory, c.memory, c.processes), (1, 2, 1));
    // Handles are cached; an unknown index is a typed error, not a panic.
    assert!(
        matches!(nvml.memory(7), Err(GpuError::InvalidDevice(7))),
        "{:?}",
        nvml.memory(7)
    );
    assert!(matches!(nvml.processes(9), Err(GpuError::InvalidDevice(9))));
}

#[test]
fn cross_process_nvml_sees_neighbour_and_its_release() {
    let dir = common::fresh_box("2x24GiB");
    let _g = nvml_session(Some(dir.path()));
    let nvml = NvmlMonitor::open_path(&nvml_lib_path()).unwrap();
    let before = nvml.memory(1).unwrap();
    assert!(nvml.processes(1).unwrap().is_empty());

    let a = Holder::start(dir.path(), &[], &["--device", "1", "--size", "3GiB"]);
    let procs = nvml.processes(1).unwrap();
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert_eq!(procs[0].pid, a.pid);
    let overhead = SimBox::open(dir.path()).unwrap().devices()[1].context_overhead;
    assert_eq!(procs[0].used, Some(3 * GIB + overhead));
    let during = nvml.memory(1).unwrap();
    assert_eq!(during.used, before.used + 3 * GIB + overhead);
    assert_eq!(during.free, before.free - 3 * GIB - overhead);
    // Physical 0 untouched by A.
    assert!(nvml.processes(0).unwrap().is_empty());

    a.kill();
    assert!(nvml.processes(1).unwrap().is_empty());
    assert_eq!(nvml.memory(1).unwrap(), before);
}

#[test]
fn missing_library_is_a_typed_error() {
    let e = NvmlMonitor::open_path(Path::new("/nonexistent/libnvidia-ml.so.1")).unwrap_err();
    assert!(matches!(e, GpuError::LibraryMissing { .. }), "{e:?}");
    assert!(e.is_environment());
    let msg = e.to_string();
    assert!(msg.contains("/nonexistent/libnvidia-ml.so.1"), "{msg}");
    assert!(msg.contains("LD_LIBRARY_PATH"), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");

    // A library that loads but is not NVML (no nvmlInit_v2): also LibraryMissing, no panic.
    let e = NvmlMonitor::open_path(Path::new("libm.so.6")).unwrap_err();
    assert!(matches!(e, GpuError::LibraryMissing { .. }), "{e:?}");
    assert!(e.to_string().contains("nvmlInit_v2"), "{e}");
}

#[test]
fn no_box_means_driver_not_loaded() {
    let _g = nvml_session(None);
    let e = NvmlMonitor::open_path(&nvml_lib_path()).unwrap_err();
    assert!(matches!(e, GpuError::NoDevice(_)), "{e:?}");
    assert!(e.is_environment());
    assert!(
        e.to_string().contains("NVML_ERROR_DRIVER_NOT_LOADED"),
        "{e}"
    );
}

#[test]
fn lost_gpu_is_an_error_not_a_panic() {
    let dir = common::fresh_box("2x24GiB");
    let b = SimBox::open(dir.path()).unwrap();
    let _g = nvml_session(Some(dir.path()));
    let nvml = NvmlMonitor::open_path(&nvml_lib_path()).unwrap();
    nvml.devices().unwrap();
    b.set_faults(&Faults {
        lost_devices: vec![1],
        ..Default::default()
    })
    .unwrap();
    assert!(
        matches!(nvml.memory(1), Err(GpuError::DeviceLost(1))),
        "{:?}",
        nvml.memory(1)
    );
    assert!(matches!(nvml.processes(1), Err(GpuError::DeviceLost(1))));
    // One lost GPU never ends the inventory: it gets a status, the others are reported.
    let devs = nvml.devices().unwrap();
    assert_eq!(devs.len(), 2);
    assert_eq!(devs[1].status, vramdoc::gpu::DeviceStatus::Lost);
    assert_eq!(devs[1].memory.total, 0);
    assert!(devs[0].status.is_ok() && devs[0].memory.total > 0);
    nvml.memory(0).unwrap();
    // The in-process sim backend agrees.
    let sim = SimMonitor::new(b.clone());
    assert!(matches!(sim.memory(1), Err(GpuError::DeviceLost(1))));
    assert_eq!(sim.devices().unwrap(), devs);
    b.set_faults(&Faults::default()).unwrap();
    nvml.memory(1).unwrap();
}

// ---------------------------------------------------------------------------------------
// The C ABI directly.

type Device = *mut std::ffi::c_void;

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct ProcV1 {
    pid: c_uint,
    used: c_ulonglong,
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct ProcV2 {
    pid: c_uint,
    used: c_ulonglong,
    gpu_instance: c_uint,
    compute_instance: c_uint,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

const SUCCESS: c_uint = 0;
const UNINITIALIZED: c_uint = 1;
const INVALID_ARGUMENT: c_uint = 2;
const NOT_FOUND: c_uint = 6;
const INSUFFICIENT_SIZE: c_uint = 7;
const DRIVER_NOT_LOADED: c_uint = 9;
const GPU_IS_LOST: c_uint = 15;
const ARGUMENT_VERSION_MISMATCH: c_uint = 25;
const MEMORY_V2: c_uint = 0x0200_0028;

struct Api {
    lib: Library,
}

impl Api {
    fn load() -> Api {
        // SAFETY: loading our own simulated library.
        Api {
            lib: unsafe { Library::new(nvml_lib_path()).expect("dlopen simgpu") },
        }
    }
    /// Undo initialisations a failed test may have left behind (call under the session lock).
    fn drain(&self) {
        while self.call0("nvmlShutdown") == SUCCESS {}
    }
    fn f<T>(&self, name: &str) -> Symbol<'_, T> {
        // SAFETY: the caller names the exact C signature from nvml.h.
        unsafe {
            self.lib
                .get(name.as_bytes())
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        }
    }
    fn call0(&self, name: &str) -> c_uint {
        unsafe { self.f::<unsafe extern "C" fn() -> c_uint>(name)() }
    }
    fn handle(&self, i: c_uint) -> Device {
        let mut d: Device = std::ptr::null_mut();
        let rc = unsafe {
            self.f::<unsafe extern "C" fn(c_uint, *mut Device) -> c_uint>(
                "nvmlDeviceGetHandleByIndex_v2",
            )(i, &mut d)
        };
        assert_eq!(rc, SUCCESS);
        d
    }
    fn procs<T: Default + Clone>(
        &self,
        name: &str,
        d: Device,
        cap: c_uint,
        null: bool,
    ) -> (c_uint, c_uint, Vec<T>) {
        let mut buf = vec![T::default(); cap as usize];
        let mut count = cap;
        let ptr = if null {
            std::ptr::null_mut()
        } else {
            buf.as_mut_ptr()
        };
        let rc = unsafe {
            self.f::<unsafe extern "C" fn(Device, *mut c_uint, *mut T) -> c_uint>(name)(
                d, &mut count, ptr,
            )
        };
        (rc, count, buf)
    }
}

#[test]
fn c_abi_init_refcount_and_errors() {
    let api = Api::load();
    {
        let _g = nvml_session(None);
        api.drain();
        assert_eq!(api.call0("nvmlInit_v2"), DRIVER_NOT_LOADED);
        assert_eq!(api.call0("nvmlShutdown"), UNINITIALIZED);
    }
    let dir = common::fresh_box("2x24GiB");
    let _g = nvml_session(Some(dir.path()));
    api.drain();
    let mut n: c_uint = 0;
    let count = api.f::<unsafe extern "C" fn(*mut c_uint) -> c_uint>("nvmlDeviceGetCount_v2");
    assert_eq!(unsafe { count(&mut n) }, UNINITIALIZED);
    assert_eq!(api.call0("nvmlInit_v2"), SUCCESS);
    assert_eq!(
        unsafe { api.f::<unsafe extern "C" fn(c_uint) -> c_uint>("nvmlInitWithFlags")(0) },
        SUCCESS
    );
    assert_eq!(unsafe { count(&mut n) }, SUCCESS);
    assert_eq!(n, 2);
    assert_eq!(unsafe { count(std::ptr::null_mut()) }, INVALID_ARGUMENT);
    // Two inits, one shutdown: still initialised.
    assert_eq!(api.call0("nvmlShutdown"), SUCCESS);
    assert_eq!(unsafe { count(&mut n) }, SUCCESS);
    assert_eq!(api.call0("nvmlShutdown"), SUCCESS);
    assert_eq!(unsafe { count(&mut n) }, UNINITIALIZED);
    assert_eq!(api.call0("nvmlShutdown"), UNINITIALIZED);

    let es = api.f::<unsafe extern "C" fn(c_uint) -> *const c_char>("nvmlErrorString");
    let text = |c| {
        unsafe { CStr::from_ptr(es(c)) }
            .to_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(text(GPU_IS_LOST), "GPU is lost");
    assert_eq!(text(INSUFFICIENT_SIZE), "Insufficient Size");
    assert_eq!(text(12345), "Unknown Error");

    // Versions answer without init, as real NVML does.
    let mut v: c_int = 0;
    let cv =
        api.f::<unsafe extern "C" fn(*mut c_int) -> c_uint>("nvmlSystemGetCudaDriverVersion_v2");
    assert_eq!(unsafe { cv(&mut v) }, SUCCESS);
    assert_eq!(
        v,
        SimBox::open(dir.path())
            .unwrap()
            .config()
            .cuda_driver_version
    );
}

#[test]
fn c_abi_devices_memory_and_sizing_protocol() {
    let dir = common::fresh_box("2x24GiB");
    let b = SimBox::open(dir.path()).unwrap();
    let _g = nvml_session(Some(dir.path()));
    let api = Api::load();
    api.drain();
    assert_eq!(api.call0("nvmlInit"), SUCCESS); // the v1 symbol
    let d0 = api.handle(0);
    let d1 = api.handle(1);
    assert_ne!(d0, d1);
    assert_eq!(api.handle(1), d1, "handles are stable");

    // Lookups by UUID and bus id give the same handles.
    let dev1 = &b.devices()[1];
    let mut h: Device = std::ptr::null_mut();
    let uuid = std::ffi::CString::new(dev1.uuid.clone()).unwrap();
    let by_uuid = api.f::<unsafe extern "C" fn(*const c_char, *mut Device) -> c_uint>(
        "nvmlDeviceGetHandleByUUID",
    );
    assert_eq!(unsafe { by_uuid(uuid.as_ptr(), &mut h) }, SUCCESS);
    assert_eq!(h, d1);
    assert_eq!(unsafe { by_uuid(c"GPU-nope".as_ptr(), &mut h) }, NOT_FOUND);
    let by_pci = api.f::<unsafe extern "C" fn(*const c_char, *mut Device) -> c_uint>(
        "nvmlDeviceGetHandleByPciBusId_v2",
    );
    let bus = std::ffi::CString::new(dev1.pci_bus_id.to_lowercase()).unwrap();
    assert_eq!(unsafe { by_pci(bus.as_ptr(), &mut h) }, SUCCESS);
    assert_eq!(h, d1);

    // Strings: exact size needed including the NUL.
    let name_fn =
        api.f::<unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_uint>("nvmlDeviceGetName");
    let mut buf = [0 as c_char; 96];
    let need = dev1.name.len() as c_uint + 1;
    assert_eq!(
        unsafe { name_fn(d1, buf.as_mut_ptr(), need - 1) },
        INSUFFICIENT_SIZE
    );
    assert_eq!(unsafe { name_fn(d1, buf.as_mut_ptr(), need) }, SUCCESS);
    assert_eq!(
        unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(),
        dev1.name
    );
    assert_eq!(
        unsafe { name_fn(std::ptr::null_mut(), buf.as_mut_ptr(), 96) },
        INVALID_ARGUMENT
    );
    let bogus = 0x1234usize as Device;
    assert_eq!(
        unsafe { name_fn(bogus, buf.as_mut_ptr(), 96) },
        INVALID_ARGUMENT
    );

    // PCI info: both bus id formats of nvml.h.
    let pci_fn =
        api.f::<unsafe extern "C" fn(Device, *mut PciInfo) -> c_uint>("nvmlDeviceGetPciInfo_v3");
    let mut pci: PciInfo = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { pci_fn(d1, &mut pci) }, SUCCESS);
    assert_eq!(
        unsafe { CStr::from_ptr(pci.bus_id.as_ptr()) }
            .to_str()
            .unwrap(),
        dev1.pci_bus_id
    );
    let legacy = unsafe { CStr::from_ptr(pci.bus_id_legacy.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(legacy, format!("0000:{:02X}:00.0", pci.bus));
    assert_eq!(pci.pci_device_id & 0xFFFF, 0x10DE);

    // Sizing protocol: no processes → SUCCESS with count 0, even with a NULL buffer.
    let (rc, count, _) =
        api.procs::<ProcV2>("nvmlDeviceGetComputeRunningProcesses_v3", d1, 0, true);
    assert_eq!((rc, count), (SUCCESS, 0));

    let holder = Holder::start(dir.path(), &[], &["--device", "1", "--size", "512MiB"]);
    let used = 512 * (1 << 20) + dev1.context_overhead;
    // count 0 + NULL → INSUFFICIENT_SIZE and the count needed.
    let (rc, count, _) =
        api.procs::<ProcV2>("nvmlDeviceGetComputeRunningProcesses_v3", d1, 0, true);
    assert_eq!((rc, count), (INSUFFICIENT_SIZE, 1));
    // Room for the entries: filled, count = entries written.
    let (rc, count, buf) =
        api.procs::<ProcV2>("nvmlDeviceGetComputeRunningProcesses_v3", d1, 4, false);
    assert_eq!((rc, count), (SUCCESS, 1));
    assert_eq!(buf[0].pid, holder.pid);
    assert_eq!(buf[0].used, used);
    assert_eq!(
        (buf[0].gpu_instance, buf[0].compute_instance),
        (0xFFFF_FFFF, 0xFFFF_FFFF)
    );
    assert_eq!(buf[1].pid, 0, "nothing written past the entries");
    // v2 has the same layout; v1 is the legacy 16-byte struct.
    let (rc, _, buf) = api.procs::<ProcV2>("nvmlDeviceGetComputeRunningProcesses_v2", d1, 2, false);
    assert_eq!((rc, buf[0].pid, buf[0].used), (SUCCESS, holder.pid, used));
    let (rc, count, buf) =
        api.procs::<ProcV1>("nvmlDeviceGetComputeRunningProcesses", d1, 3, false);
    assert_eq!((rc, count), (SUCCESS, 1));
    assert_eq!((buf[0].pid, buf[0].used), (holder.pid, used));
    assert_eq!(buf[1].pid, 0);
    // Buffer given but non-NULL infos with a large count and NULL pointer → INVALID_ARGUMENT.
    let (rc, _, _) = api.procs::<ProcV2>("nvmlDeviceGetComputeRunningProcesses_v3", d1, 4, true);
    assert_eq!(rc, INVALID_ARGUMENT);
    // Graphics lists: the simulated processes are compute-only.
    for f in [
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
    ] {
        let (rc, count, _) = api.procs::<ProcV2>(f, d1, 0, true);
        assert_eq!((rc, count), (SUCCESS, 0), "{f}");
    }
    let (rc, count, _) = api.procs::<ProcV1>("nvmlDeviceGetGraphicsRunningProcesses", d1, 0, true);
    assert_eq!((rc, count), (SUCCESS, 0));
    // Device 0 untouched.
    let (rc, count, _) =
        api.procs::<ProcV2>("nvmlDeviceGetComputeRunningProcesses_v3", d0, 0, true);
    assert_eq!((rc, count), (SUCCESS, 0));

    // Memory: v1 used includes reserved, v2 excludes it; version checked.
    let m1f =
        api.f::<unsafe extern "C" fn(Device, *mut Memory) -> c_uint>("nvmlDeviceGetMemoryInfo");
    let m2f = api
        .f::<unsafe extern "C" fn(Device, *mut MemoryV2) -> c_uint>("nvmlDeviceGetMemoryInfo_v2");
    let mut m1 = Memory::default();
    let mut m2 = MemoryV2 {
        version: MEMORY_V2,
        ..Default::default()
    };
    assert_eq!(unsafe { m1f(d1, &mut m1) }, SUCCESS);
    assert_eq!(unsafe { m2f(d1, &mut m2) }, SUCCESS);
    assert_eq!(m2.version, MEMORY_V2);
    assert_eq!(m2.reserved, dev1.reserved);
    assert_eq!(m2.used, used);
    assert_eq!(m2.total, m2.reserved + m2.used + m2.free);
    assert_eq!(m1.used, m2.used + m2.reserved);
    assert_eq!((m1.total, m1.free), (m2.total, m2.free));
    assert_eq!(m1.total, m1.used + m1.free);
    let mut bad = MemoryV2 {
        version: 1,
        ..Default::default()
    };
    assert_eq!(unsafe { m2f(d1, &mut bad) }, ARGUMENT_VERSION_MISMATCH);
    assert_eq!(unsafe { m2f(d1, std::ptr::null_mut()) }, INVALID_ARGUMENT);

    // Per-process memory hidden → NVML_VALUE_NOT_AVAILABLE.
    b.set_faults(&Faults {
        nvml_used_memory_unavailable: true,
        ..Default::default()
    })
    .unwrap();
    let (_, _, buf) = api.procs::<ProcV2>("nvmlDeviceGetComputeRunningProcesses_v3", d1, 2, false);
    assert_eq!(buf[0].used, u64::MAX);

    // Lost device: every query on it fails with GPU_IS_LOST; the other still answers.
    b.set_faults(&Faults {
        lost_devices: vec![1],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(unsafe { m2f(d1, &mut m2) }, GPU_IS_LOST);
    assert_eq!(
        unsafe { name_fn(d1, buf_ptr(&mut [0; 96]), 96) },
        GPU_IS_LOST
    );
    let (rc, _, _) = api.procs::<ProcV2>("nvmlDeviceGetComputeRunningProcesses_v3", d1, 0, true);
    assert_eq!(rc, GPU_IS_LOST);
    assert_eq!(unsafe { m1f(d0, &mut m1) }, SUCCESS);
    b.set_faults(&Faults::default()).unwrap();

    // Temperature and utilization.
    let tf = api.f::<unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> c_uint>(
        "nvmlDeviceGetTemperature",
    );
    let mut t = 0;
    assert_eq!(unsafe { tf(d0, 0, &mut t) }, SUCCESS);
    assert_eq!(t, vramdoc_sim::TEMPERATURE_C);
    assert_eq!(unsafe { tf(d0, 5, &mut t) }, INVALID_ARGUMENT);

    drop(holder);
    assert_eq!(api.call0("nvmlShutdown"), SUCCESS);
    // After shutdown, handles are refused as uninitialised.
    assert_eq!(unsafe { m1f(d0, &mut m1) }, UNINITIALIZED);
}

fn buf_ptr(b: &mut [c_char; 96]) -> *mut c_char {
    b.as_mut_ptr()
}

/// What `NvmlMonitor::open()` by name gave in [`nvml_open_by_name_child`].
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum OpenedByName {
    /// It opened `library`, which lists `devices` GPUs.
    Opened { library: String, devices: usize },
    /// `GpuError::LibraryMissing` for `library`, with its message.
    Missing { library: String, message: String },
    /// Any other error.
    Failed(String),
}

/// `NvmlMonitor::open()` loads by name, so the loader's `LD_LIBRARY_PATH` (read at process
/// start) decides which NVML it gets: the simulated one here.
#[test]
fn open_by_name_honours_ld_library_path() {
    let dir = common::fresh_box("3x16GiB");
    let opened: OpenedByName = child::of!(nvml_open_by_name_child)
        .simgpu()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .run();
    let want = OpenedByName::Opened {
        library: "libnvidia-ml.so.1".into(),
        devices: 3,
    };
    assert_eq!(opened, want);
}

/// No NVML on `LD_LIBRARY_PATH` (nor installed): a typed error naming the canonical library.
#[test]
fn open_by_name_without_a_library_is_library_missing() {
    let dir = common::fresh_box("3x16GiB");
    let empty = tempfile::tempdir().unwrap();
    let opened: OpenedByName = child::of!(nvml_open_by_name_child)
        .env("LD_LIBRARY_PATH", empty.path())
        .env("VRAMDOC_SIM_DIR", dir.path())
        .run();
    match opened {
        OpenedByName::Missing { library, message } => {
            assert_eq!(library, "libnvidia-ml.so.1");
            assert!(
                message.contains("libnvidia-ml.so.1 could not be loaded"),
                "{message}"
            );
        }
        OpenedByName::Opened { library, .. } => common::skip::cannot_run(
            "real-driver",
            &format!(
                "NvmlMonitor::open() found {library} outside LD_LIBRARY_PATH (an NVIDIA driver \
                 is installed), so a missing library cannot be staged"
            ),
        ),
        other => panic!("expected LibraryMissing, got {other:?}"),
    }
}

child::entry! {
    /// `NvmlMonitor::open()` by name, as [`OpenedByName`].
    fn nvml_open_by_name_child() -> OpenedByName {
        match NvmlMonitor::open() {
            Ok(m) => OpenedByName::Opened {
                library: m.library().to_string(),
                devices: m.devices().unwrap().len(),
            },
            Err(e) => match &e {
                GpuError::LibraryMissing { library, .. } => OpenedByName::Missing {
                    library: library.clone(),
                    message: e.to_string(),
                },
                _ => OpenedByName::Failed(format!("{e:?}")),
            },
        }
    }
}

/// The box's injected NVML latencies are spent inside the library's memory and process-list
/// calls (lower bounds only: a sleep never returns early).
#[test]
fn injected_latency_is_spent_inside_the_calls() {
    let dir = common::fresh_box("2x24GiB");
    let b = SimBox::open(dir.path()).unwrap();
    let _g = nvml_session(Some(dir.path()));
    let nvml = NvmlMonitor::open_path(&nvml_lib_path()).unwrap();
    nvml.memory(1).unwrap();
    b.set_faults(&Faults {
        nvml_memory_latency_us: 15_000,
        nvml_process_latency_us: 40_000,
        ..Default::default()
    })
    .unwrap();
    let t = std::time::Instant::now();
    nvml.memory(1).unwrap();
    let mem = t.elapsed();
    let t = std::time::Instant::now();
    nvml.processes(1).unwrap();
    let procs = t.elapsed();
    assert!(mem >= std::time::Duration::from_millis(15), "{mem:?}");
    assert!(procs >= std::time::Duration::from_millis(40), "{procs:?}");
}

/// Libraries that load but lack symbols never make vramdoc panic, including nvml-wrapper's
/// `Drop`, which calls `nvmlShutdown` unchecked.
#[test]
fn missing_symbols_are_typed_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    // nvmlInit_v2 but no nvmlShutdown: refused at open.
    let no_shutdown = common::c_library(
        dir.path(),
        "no_shutdown",
        "int nvmlInit_v2(void) { return 0; }\n",
    );
    let e = NvmlMonitor::open_path(&no_shutdown).unwrap_err();
    assert!(matches!(e, GpuError::LibraryMissing { .. }), "{e:?}");
    assert!(e.to_string().contains("nvmlShutdown"), "{e}");

    // Init and shutdown only: opens; every query is a typed error naming the missing call.
    let bare = common::c_library(
        dir.path(),
        "bare",
        "int nvmlInit_v2(void) { return 0; }\nint nvmlShutdown(void) { return 0; }\n",
    );
    let m = NvmlMonitor::open_path(&bare).expect("init-only library opens");
    for (what, r) in [
        ("devices", m.devices().map(|_| ())),
        ("memory", m.memory(0).map(|_| ())),
        ("processes", m.processes(0).map(|_| ())),
        ("versions", m.versions().map(|_| ())),
    ] {
        let e = r.expect_err(what);
        assert!(
            matches!(e, GpuError::LibraryMissing { .. }),
            "{what}: {e:?}"
        );
        assert!(e.to_string().contains("nvml"), "{what}: {e}");
    }
    drop(m); // nvmlShutdown exists: a clean drop.
}
