//! NVML over the simulator: the entry points of `libnvidia-ml.so.1` that nvml-wrapper 0.13
//! and NVIDIA's Python bindings (`nvidia-ml-py`, module `pynvml`) call, answered from the
//! `vramdoc_sim` box named by `VRAMDOC_SIM_DIR` when NVML is initialised.
//!
//! Structs, constants and return codes follow nvml.h (CUDA 12.x) exactly:
//!
//! - init / shutdown are reference counted; every call but the version, error-string and
//!   CUDA-version queries needs an initialised library (`NVML_ERROR_UNINITIALIZED`);
//! - no box (or an unreadable one) at init → `NVML_ERROR_DRIVER_NOT_LOADED`: the library is
//!   there but the "driver" (the box) is not, which is what real NVML says on a machine with
//!   the library installed and no kernel module loaded;
//! - memory v1 (`nvmlMemory_t`): `used` = reserved + allocated, `total = used + free`;
//!   memory v2 (`nvmlMemory_v2_t`): `version` must be `nvmlMemory_v2`
//!   (`NVML_STRUCT_VERSION(Memory, 2)` = 0x02000028) else `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`;
//!   `used` excludes `reserved`, `total = reserved + used + free`;
//! - process lists (compute / graphics / MPS, v1 / v2 / v3) use the
//!   `NVML_ERROR_INSUFFICIENT_SIZE` sizing protocol: `*infoCount` in = capacity, out = entries
//!   written or needed; `infos` may be NULL when `*infoCount` is 0. Simulated processes are
//!   CUDA compute processes, so graphics and MPS lists are empty;
//! - a lost device (fault) → `NVML_ERROR_GPU_IS_LOST` from every per-device query;
//! - injected latencies are slept inside the memory and process-list calls.
//!
//! Handles are stable pointers minted once per physical index and never freed. No entry point
//! panics across the C ABI: every body runs under `catch_unwind` (`NVML_ERROR_UNKNOWN`).

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use vramdoc_gpu_spec::ProcessKind;
use vramdoc_sim::profile::RecordLayout;
use vramdoc_sim::{Faults, SimBox, SimDevice, SimError};

pub type nvmlReturn_t = c_uint;

pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: nvmlReturn_t = 2;
pub const NVML_ERROR_NOT_SUPPORTED: nvmlReturn_t = 3;
pub const NVML_ERROR_NO_PERMISSION: nvmlReturn_t = 4;
pub const NVML_ERROR_NOT_FOUND: nvmlReturn_t = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: nvmlReturn_t = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: nvmlReturn_t = 9;
pub const NVML_ERROR_FUNCTION_NOT_FOUND: nvmlReturn_t = 13;
pub const NVML_ERROR_GPU_IS_LOST: nvmlReturn_t = 15;
pub const NVML_ERROR_LIB_RM_VERSION_MISMATCH: nvmlReturn_t = 18;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = 25;
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;

/// `NVML_VALUE_NOT_AVAILABLE` (-1) as it lands in an `unsigned long long` field.
pub const NVML_VALUE_NOT_AVAILABLE_ULL: c_ulonglong = u64::MAX;
/// gpuInstanceId / computeInstanceId outside MIG mode.
pub const NVML_NO_INSTANCE: c_uint = 0xFFFF_FFFF;
/// `NVML_TEMPERATURE_GPU`, the only sensor (`NVML_TEMPERATURE_COUNT` = 1).
pub const NVML_TEMPERATURE_GPU: c_uint = 0;
/// `NVML_STRUCT_VERSION(Memory, 2)`.
pub const NVML_MEMORY_V2_VERSION: c_uint =
    (std::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);
/// NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE / NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE.
const PCI_LEGACY_LEN: usize = 16;
const PCI_BUS_ID_LEN: usize = 32;
/// PCI vendor id of NVIDIA (low 16 bits of `pciDeviceId`).
const NVIDIA_VENDOR_ID: c_uint = 0x10DE;

/// `struct nvmlDevice_st` is opaque in nvml.h; this is what our handles point at.
#[repr(C)]
pub struct nvmlDevice_st {
    magic: u64,
    index: u32,
}
pub type nvmlDevice_t = *mut nvmlDevice_st;

const HANDLE_MAGIC: u64 = 0x564d_4c53_494d_4750; // "VMLSIMGP"

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlMemory_t {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlMemory_v2_t {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlProcessInfo_v1_t {
    pub pid: c_uint,
    pub usedGpuMemory: c_ulonglong,
}

/// Also `nvmlProcessInfo_t`, the struct the `_v3` functions fill.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlProcessInfo_v2_t {
    pub pid: c_uint,
    pub usedGpuMemory: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

/// `nvmlProcessDetail_v1_t` (32 bytes), also what R535 writes into the `_v3` lists.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlProcessDetail_v1_t {
    pub pid: c_uint,
    pub usedGpuMemory: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
    pub usedGpuCcProtectedMemory: c_ulonglong,
}

/// `nvmlProcessDetailList_v1_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlProcessDetailList_t {
    pub version: c_uint,
    pub mode: c_uint,
    pub numProcArrayEntries: c_uint,
    pub procArray: *mut nvmlProcessDetail_v1_t,
}

/// `NVML_STRUCT_VERSION(ProcessDetailList, 1)`.
pub const NVML_PROCESS_DETAIL_LIST_V1: c_uint =
    (std::mem::size_of::<nvmlProcessDetailList_t>() as c_uint) | (1 << 24);

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlPciInfo_t {
    pub busIdLegacy: [c_char; PCI_LEGACY_LEN],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub busId: [c_char; PCI_BUS_ID_LEN],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlUtilization_t {
    pub gpu: c_uint,
    pub memory: c_uint,
}

// ---------------------------------------------------------------------------------------
// Library state

struct Lib {
    refcount: u32,
    sim: Option<Arc<SimBox>>,
    /// Host index of each NVML index: a process with `NVIDIA_VISIBLE_DEVICES` (a container)
    /// sees only those GPUs, renumbered from 0 in PCI order.
    mounted: Vec<u32>,
}

static LIB: Mutex<Lib> = Mutex::new(Lib {
    refcount: 0,
    sim: None,
    mounted: Vec::new(),
});

/// Host indices of the devices this process's NVML shows.
fn mounted() -> Vec<u32> {
    lock(&LIB).mounted.clone()
}

/// Handles minted so far, by physical index (addresses of leaked `nvmlDevice_st`).
static HANDLES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run an entry point body; a panic becomes `NVML_ERROR_UNKNOWN` instead of unwinding into C.
fn guard(f: impl FnOnce() -> nvmlReturn_t) -> nvmlReturn_t {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(NVML_ERROR_UNKNOWN)
}

type R<T> = Result<T, nvmlReturn_t>;

fn done(r: R<()>) -> nvmlReturn_t {
    match r {
        Ok(()) => NVML_SUCCESS,
        Err(code) => code,
    }
}

fn sim_code(e: &SimError) -> nvmlReturn_t {
    match e {
        SimError::InvalidDevice(_) => NVML_ERROR_INVALID_ARGUMENT,
        SimError::DeviceLost(_) => NVML_ERROR_GPU_IS_LOST,
        SimError::NoPermission(_) => NVML_ERROR_NO_PERMISSION,
        SimError::NoBox | SimError::BadBox { .. } => NVML_ERROR_DRIVER_NOT_LOADED,
        _ => NVML_ERROR_UNKNOWN,
    }
}

/// The box of the initialised library.
fn current() -> R<Arc<SimBox>> {
    lock(&LIB).sim.clone().ok_or(NVML_ERROR_UNINITIALIZED)
}

/// The box for queries that real NVML answers without init (versions): the initialised one,
/// else the one `VRAMDOC_SIM_DIR` names, else none.
fn any_box() -> Option<Arc<SimBox>> {
    current()
        .ok()
        .or_else(|| SimBox::from_env().ok().map(Arc::new))
}

fn handle_for(index: u32) -> nvmlDevice_t {
    let mut hs = lock(&HANDLES);
    while hs.len() <= index as usize {
        let h = Box::new(nvmlDevice_st {
            magic: HANDLE_MAGIC,
            index: hs.len() as u32,
        });
        hs.push(Box::into_raw(h) as usize);
    }
    hs[index as usize] as nvmlDevice_t
}

/// Physical index behind a handle we minted; anything else is `INVALID_ARGUMENT`.
fn index_of(h: nvmlDevice_t) -> R<u32> {
    if h.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let hs = lock(&HANDLES);
    let pos = hs
        .iter()
        .position(|&a| a == h as usize)
        .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
    // SAFETY: `h` is one of our leaked, never-freed handles.
    let st = unsafe { &*h };
    if st.magic != HANDLE_MAGIC || st.index as usize != pos {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    Ok(st.index)
}

/// A per-device query: library initialised, handle valid, device in the box and not lost.
fn with_device<T>(h: nvmlDevice_t, f: impl FnOnce(&SimBox, &SimDevice, &Faults) -> R<T>) -> R<T> {
    let sim = current()?;
    let index = index_of(h)?;
    if !mounted().contains(&index) {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let faults = sim.faults().map_err(|e| sim_code(&e))?;
    let dev = sim
        .check_nvml_device(index, &faults)
        .map_err(|e| sim_code(&e))?;
    f(&sim, dev, &faults)
}

fn sleep_us(us: u64) {
    if us > 0 {
        std::thread::sleep(Duration::from_micros(us));
    }
}

/// Copy `s` and its NUL into `buf` of `len` bytes (`INSUFFICIENT_SIZE` if it does not fit).
unsafe fn write_str(buf: *mut c_char, len: c_uint, s: &str) -> R<()> {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const c_char, buf, bytes.len());
    *buf.add(bytes.len()) = 0;
    Ok(())
}

fn fill_fixed<const N: usize>(dst: &mut [c_char; N], s: &str) {
    *dst = [0; N];
    for (d, b) in dst.iter_mut().zip(s.bytes().take(N - 1)) {
        *d = b as c_char;
    }
}

unsafe fn out<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    p.write(v);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Init, shutdown, errors

fn init(_flags: c_uint) -> nvmlReturn_t {
    let mut lib = lock(&LIB);
    if lib.refcount == 0 {
        match SimBox::from_env() {
            Ok(b) => {
                if b.faults().is_ok_and(|f| f.driver_version_mismatch) {
                    return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
                }
                let env = std::env::var("NVIDIA_VISIBLE_DEVICES").ok();
                lib.mounted = b.mounted(env.as_deref());
                lib.sim = Some(Arc::new(b));
            }
            Err(e) => return sim_code(&e),
        }
    }
    lib.refcount += 1;
    NVML_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    guard(|| init(0))
}

/// The v1 symbol, still exported by real drivers for binary compatibility.
#[no_mangle]
pub unsafe extern "C" fn nvmlInit() -> nvmlReturn_t {
    guard(|| init(0))
}

/// Flags (`NVML_INIT_FLAG_NO_GPUS`, `NVML_INIT_FLAG_NO_ATTACH`) change nothing here: a box
/// always has at least one device and nothing needs attaching.
#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(flags: c_uint) -> nvmlReturn_t {
    guard(|| init(flags))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    guard(|| {
        let mut lib = lock(&LIB);
        if lib.refcount == 0 {
            return NVML_ERROR_UNINITIALIZED;
        }
        lib.refcount -= 1;
        if lib.refcount == 0 {
            lib.sim = None;
        }
        NVML_SUCCESS
    })
}

fn error_text(result: nvmlReturn_t) -> &'static CStr {
    match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        11 => c"Interrupt request issue",
        12 => c"NVML Shared Library Not Found",
        13 => c"Function Not Found",
        14 => c"Corrupted infoROM",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        17 => c"The operating system has blocked the request.",
        18 => c"RM has detected an NVML/RM version mismatch.",
        19 => c"In use by another client",
        20 => c"Insufficient Memory",
        21 => c"No data",
        22 => c"The requested vgpu operation is not available on target device, becasue ECC is enabled",
        23 => c"Ran out of critical resources, other than memory",
        24 => c"The requested frequency is not supported",
        25 => c"The provided version is invalid/unsupported",
        26 => c"The requested functionality has been deprecated",
        27 => c"The system is not ready for the request",
        28 => c"The GPU was not found",
        29 => c"The object is in an invalid state",
        _ => c"Unknown Error",
    }
}

/// Static strings: valid for the life of the process, never to be freed (as in nvml.h).
#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    catch_unwind(|| error_text(result).as_ptr()).unwrap_or(c"Unknown Error".as_ptr())
}

// ---------------------------------------------------------------------------------------
// System queries

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        done((|| {
            let sim = current()?;
            write_str(version, length, &sim.config().driver_version)
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        let v = match any_box() {
            Some(b) => b.config().nvml_version.clone(),
            None => default_nvml_version(),
        };
        done(write_str(version, length, &v))
    })
}

fn default_nvml_version() -> String {
    let o = vramdoc_sim::InitOptions::default();
    format!("{}.{}", o.cuda_driver_version / 1000, o.driver_version)
}

fn cuda_version(out_v: *mut c_int) -> nvmlReturn_t {
    let v = match any_box() {
        Some(b) => b.config().cuda_driver_version,
        None => vramdoc_sim::InitOptions::default().cuda_driver_version,
    };
    // SAFETY: checked for NULL by `out`.
    done(unsafe { out(out_v, v) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(
    cudaDriverVersion: *mut c_int,
) -> nvmlReturn_t {
    guard(|| cuda_version(cudaDriverVersion))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(
    cudaDriverVersion: *mut c_int,
) -> nvmlReturn_t {
    guard(|| cuda_version(cudaDriverVersion))
}

/// The name the box recorded for `pid`, else `/proc/PID/comm`; cropped to `length`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        done((|| {
            let sim = current()?;
            if name.is_null() || length == 0 {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            let st = sim.state().map_err(|e| sim_code(&e))?;
            let recorded = st
                .processes
                .get(&pid)
                .map(|p| p.name.clone())
                .filter(|n| !n.is_empty());
            let n = match recorded {
                Some(n) => n,
                None => std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .map(|s| s.trim_end().to_string())
                    .map_err(|_| NVML_ERROR_NOT_FOUND)?,
            };
            let max = length as usize - 1;
            let mut cut = n.len().min(max);
            while !n.is_char_boundary(cut) {
                cut -= 1;
            }
            write_str(name, length, &n[..cut])
        })())
    })
}

// ---------------------------------------------------------------------------------------
// Device enumeration

fn device_count(count: *mut c_uint) -> nvmlReturn_t {
    done((|| {
        current()?;
        // SAFETY: checked for NULL by `out`.
        unsafe { out(count, mounted().len() as c_uint) }
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(deviceCount: *mut c_uint) -> nvmlReturn_t {
    guard(|| device_count(deviceCount))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(deviceCount: *mut c_uint) -> nvmlReturn_t {
    guard(|| device_count(deviceCount))
}

/// Handle lookups succeed for a lost device (real NVML enumerates at init); the queries on
/// it then fail with `NVML_ERROR_GPU_IS_LOST`.
fn handle_by_index(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    done((|| {
        current()?;
        let host = *mounted()
            .get(index as usize)
            .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        // SAFETY: checked for NULL by `out`.
        unsafe { out(device, handle_for(host)) }
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| handle_by_index(index, device))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| handle_by_index(index, device))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| {
        done((|| {
            let sim = current()?;
            if uuid.is_null() || device.is_null() {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            let want = CStr::from_ptr(uuid)
                .to_str()
                .map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
            let dev = sim
                .devices()
                .iter()
                .filter(|d| mounted().contains(&d.index))
                .find(|d| d.uuid.eq_ignore_ascii_case(want))
                .ok_or(NVML_ERROR_NOT_FOUND)?;
            out(device, handle_for(dev.index))
        })())
    })
}

/// `[domain:]bus:device.function` in hex → (domain, bus, device, function).
fn parse_bus_id(s: &str) -> Option<(u32, u32, u32, u32)> {
    let (head, func) = s.trim().rsplit_once('.')?;
    let parts: Vec<&str> = head.split(':').collect();
    let (dom, bus, dev) = match parts.as_slice() {
        [d, b, v] => (*d, *b, *v),
        [b, v] => ("0", *b, *v),
        _ => return None,
    };
    let hex = |x: &str| u32::from_str_radix(x, 16).ok();
    Some((hex(dom)?, hex(bus)?, hex(dev)?, hex(func)?))
}

fn handle_by_pci(bus_id: *const c_char, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    done((|| {
        let sim = current()?;
        if bus_id.is_null() || device.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: NUL-terminated string from the caller, checked for NULL above.
        let want = unsafe { CStr::from_ptr(bus_id) }
            .to_str()
            .ok()
            .and_then(parse_bus_id)
            .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        let dev = sim
            .devices()
            .iter()
            .filter(|d| mounted().contains(&d.index))
            .find(|d| parse_bus_id(&d.pci_bus_id) == Some(want))
            .ok_or(NVML_ERROR_NOT_FOUND)?;
        let faults = sim.faults().map_err(|e| sim_code(&e))?;
        sim.check_device(dev.index, &faults)
            .map_err(|e| sim_code(&e))?;
        // SAFETY: checked for NULL above.
        unsafe { out(device, handle_for(dev.index)) }
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    pciBusId: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| handle_by_pci(pciBusId, device))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    pciBusId: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard(|| handle_by_pci(pciBusId, device))
}

// ---------------------------------------------------------------------------------------
// Static device facts

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        done(with_device(device, |_, d, _| {
            // SAFETY: caller's buffer of `length` bytes; NULL checked in write_str.
            unsafe { write_str(name, length, &d.name) }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard(|| {
        done(with_device(device, |_, d, _| {
            // SAFETY: caller's buffer of `length` bytes; NULL checked in write_str.
            unsafe { write_str(uuid, length, &d.uuid) }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        done(with_device(device, |_, d, _| {
            let i = mounted()
                .iter()
                .position(|m| *m == d.index)
                .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
            // SAFETY: checked for NULL by `out`.
            unsafe { out(index, i as c_uint) }
        }))
    })
}

/// PCI device id (upper 16 bits of `pciDeviceId`) of the presets' real boards; 0 otherwise.
fn pci_device_id(name: &str) -> c_uint {
    const IDS: &[(&str, c_uint)] = &[
        ("Tesla T4", 0x1EB8),
        ("Tesla V100-SXM2-16GB", 0x1DB1),
        ("RTX 4060 Ti", 0x2803),
        ("NVIDIA L4", 0x27B8),
        ("RTX 3090", 0x2204),
        ("RTX 4090", 0x2684),
        ("NVIDIA A10", 0x2236),
        ("A100-SXM4-40GB", 0x20B0),
        ("A100-SXM4-80GB", 0x20B2),
        ("H100 80GB HBM3", 0x2330),
        ("NVIDIA H200", 0x2335),
    ];
    IDS.iter()
        .find(|(n, _)| name.contains(n))
        .map(|(_, id)| *id)
        .unwrap_or(0)
}

fn pci_info(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    done(with_device(device, |_, d, _| {
        if pci.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let (domain, bus, dev, _) = parse_bus_id(&d.pci_bus_id).ok_or(NVML_ERROR_UNKNOWN)?;
        let mut info = nvmlPciInfo_t {
            busIdLegacy: [0; PCI_LEGACY_LEN],
            domain,
            bus,
            device: dev,
            pciDeviceId: (pci_device_id(&d.name) << 16) | NVIDIA_VENDOR_ID,
            pciSubSystemId: 0,
            busId: [0; PCI_BUS_ID_LEN],
        };
        // NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT and NVML_DEVICE_PCI_BUS_ID_FMT.
        fill_fixed(
            &mut info.busIdLegacy,
            &format!("{:04X}:{bus:02X}:{dev:02X}.0", domain & 0xFFFF),
        );
        fill_fixed(
            &mut info.busId,
            &format!("{domain:08X}:{bus:02X}:{dev:02X}.0"),
        );
        // SAFETY: checked for NULL above.
        unsafe { pci.write(info) };
        Ok(())
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    guard(|| pci_info(device, pci))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    guard(|| pci_info(device, pci))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    guard(|| pci_info(device, pci))
}

// ---------------------------------------------------------------------------------------
// Memory

fn sim_memory(sim: &SimBox, d: &SimDevice, faults: &Faults) -> R<vramdoc_sim::SimMemory> {
    sleep_us(faults.nvml_memory_latency_us);
    sim.memory_with(d.index, faults).map_err(|e| sim_code(&e))
}

/// v1: `used` is reserved + allocated (nvml.h: "Sum of Reserved and Allocated").
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    guard(|| {
        done(with_device(device, |sim, d, faults| {
            if memory.is_null() {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            let m = sim_memory(sim, d, faults)?;
            let v = nvmlMemory_t {
                total: m.total,
                free: m.free,
                used: m.reserved + m.used,
            };
            // SAFETY: checked for NULL above.
            unsafe { out(memory, v) }
        }))
    })
}

/// v2: `version` must be `nvmlMemory_v2`; `used` excludes `reserved`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    guard(|| {
        done(with_device(device, |sim, d, faults| {
            if memory.is_null() {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            // SAFETY: checked for NULL above; the caller set `version`.
            if unsafe { (*memory).version } != NVML_MEMORY_V2_VERSION {
                return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
            }
            let m = sim_memory(sim, d, faults)?;
            let v = nvmlMemory_v2_t {
                version: NVML_MEMORY_V2_VERSION,
                total: m.total,
                reserved: m.reserved,
                free: m.free,
                used: m.used,
            };
            // SAFETY: checked for NULL above.
            unsafe { out(memory, v) }
        }))
    })
}

// ---------------------------------------------------------------------------------------
// Processes

/// The sizing protocol of nvml.h for every process-list entry point: the processes of
/// `kind` on the device, each written by `make` (record `i` at `infos + i * stride`).
unsafe fn processes<T>(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut T,
    kind: ProcessKind,
    make: fn(c_uint, c_ulonglong) -> T,
) -> nvmlReturn_t {
    done(with_device(device, |sim, d, faults| {
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        sleep_us(faults.nvml_process_latency_us);
        if faults.mig_unprivileged_devices.contains(&d.index) {
            // A MIG parent handle has no aggregate process data for unprivileged callers.
            return Err(NVML_ERROR_NO_PERMISSION);
        }
        let list: Vec<_> = sim
            .processes_with(d.index, faults)
            .map_err(|e| sim_code(&e))?
            .into_iter()
            .filter(|p| p.kind == kind)
            .collect();
        let n = list.len() as c_uint;
        // SAFETY: checked for NULL above.
        let capacity = unsafe { *count };
        unsafe { *count = n };
        if n == 0 {
            return Ok(());
        }
        if capacity < n {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        if infos.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        for (i, p) in list.iter().enumerate() {
            let used = if faults.nvml_used_memory_unavailable {
                NVML_VALUE_NOT_AVAILABLE_ULL
            } else {
                p.used
            };
            // SAFETY: the caller's array holds `capacity` >= n entries of the record type
            // this driver writes (on R535 that is wider than the header's: the real bug).
            unsafe { infos.add(i).write_unaligned(make(p.pid, used)) };
        }
        Ok(())
    }))
}

fn v1(pid: c_uint, used: c_ulonglong) -> nvmlProcessInfo_v1_t {
    nvmlProcessInfo_v1_t {
        pid,
        usedGpuMemory: used,
    }
}

fn v2(pid: c_uint, used: c_ulonglong) -> nvmlProcessInfo_v2_t {
    nvmlProcessInfo_v2_t {
        pid,
        usedGpuMemory: used,
        gpuInstanceId: NVML_NO_INSTANCE,
        computeInstanceId: NVML_NO_INSTANCE,
    }
}

fn detail(pid: c_uint, used: c_ulonglong) -> nvmlProcessDetail_v1_t {
    nvmlProcessDetail_v1_t {
        pid,
        usedGpuMemory: used,
        gpuInstanceId: NVML_NO_INSTANCE,
        computeInstanceId: NVML_NO_INSTANCE,
        usedGpuCcProtectedMemory: 0,
    }
}

/// The layout of the box's driver branch (R525 when no box is initialised).
fn layout() -> RecordLayout {
    current()
        .map(|b| b.config().record_layout())
        .unwrap_or(RecordLayout::R525)
}

/// `_v3`: declared with `nvmlProcessInfo_v2_t`, but R535 drivers write 32-byte records.
unsafe fn processes_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
    kind: ProcessKind,
) -> nvmlReturn_t {
    match layout() {
        RecordLayout::R535 => processes(device, count, infos.cast(), kind, detail),
        RecordLayout::R525 | RecordLayout::R550 => processes(device, count, infos, kind, v2),
    }
}

macro_rules! process_entry {
    ($name:ident, $t:ty, $kind:expr, $make:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            device: nvmlDevice_t,
            infoCount: *mut c_uint,
            infos: *mut $t,
        ) -> nvmlReturn_t {
            guard(|| processes(device, infoCount, infos, $kind, $make))
        }
    };
}

macro_rules! process_entry_v3 {
    ($name:ident, $kind:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            device: nvmlDevice_t,
            infoCount: *mut c_uint,
            infos: *mut nvmlProcessInfo_v2_t,
        ) -> nvmlReturn_t {
            guard(|| processes_v3(device, infoCount, infos, $kind))
        }
    };
}

process_entry!(
    nvmlDeviceGetComputeRunningProcesses,
    nvmlProcessInfo_v1_t,
    ProcessKind::Compute,
    v1
);
process_entry!(
    nvmlDeviceGetComputeRunningProcesses_v2,
    nvmlProcessInfo_v2_t,
    ProcessKind::Compute,
    v2
);
process_entry_v3!(
    nvmlDeviceGetComputeRunningProcesses_v3,
    ProcessKind::Compute
);
process_entry!(
    nvmlDeviceGetGraphicsRunningProcesses,
    nvmlProcessInfo_v1_t,
    ProcessKind::Graphics,
    v1
);
process_entry!(
    nvmlDeviceGetGraphicsRunningProcesses_v2,
    nvmlProcessInfo_v2_t,
    ProcessKind::Graphics,
    v2
);
process_entry_v3!(
    nvmlDeviceGetGraphicsRunningProcesses_v3,
    ProcessKind::Graphics
);
process_entry!(
    nvmlDeviceGetMPSComputeRunningProcesses,
    nvmlProcessInfo_v1_t,
    ProcessKind::Mps,
    v1
);
process_entry!(
    nvmlDeviceGetMPSComputeRunningProcesses_v2,
    nvmlProcessInfo_v2_t,
    ProcessKind::Mps,
    v2
);
process_entry_v3!(nvmlDeviceGetMPSComputeRunningProcesses_v3, ProcessKind::Mps);

/// R550+: `nvmlDeviceGetRunningProcessDetailList`. `plist->version` must be
/// `nvmlProcessDetailList_v1`; `mode` 0 compute, 1 graphics, 2 MPS;
/// `numProcArrayEntries` in = capacity, out = written or needed (`INSUFFICIENT_SIZE`).
/// Older branches do not have it: `NVML_ERROR_FUNCTION_NOT_FOUND` (a real library of those
/// branches lacks the symbol; one shared object cannot hide it per box).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRunningProcessDetailList(
    device: nvmlDevice_t,
    plist: *mut nvmlProcessDetailList_t,
) -> nvmlReturn_t {
    guard(|| {
        if layout() != RecordLayout::R550 && current().is_ok() {
            return NVML_ERROR_FUNCTION_NOT_FOUND;
        }
        if plist.is_null() {
            return done(with_device(device, |_, _, _| {
                Err(NVML_ERROR_INVALID_ARGUMENT)
            }));
        }
        // SAFETY: non-NULL, the caller's struct.
        let l = unsafe { &mut *plist };
        if l.version != NVML_PROCESS_DETAIL_LIST_V1 {
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        let kind = match l.mode {
            0 => ProcessKind::Compute,
            1 => ProcessKind::Graphics,
            2 => ProcessKind::Mps,
            _ => return NVML_ERROR_INVALID_ARGUMENT,
        };
        let mut n = l.numProcArrayEntries;
        if l.procArray.is_null() && n > 0 {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: procArray holds numProcArrayEntries records (checked above when non-zero).
        let rc = unsafe { processes(device, &mut n, l.procArray, kind, detail) };
        l.numProcArrayEntries = n;
        rc
    })
}

// ---------------------------------------------------------------------------------------
// Utilization, temperature (the simulator models memory only: 0 % and a fixed temperature)

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    guard(|| {
        done(with_device(device, |_, _, _| {
            // SAFETY: checked for NULL by `out`.
            unsafe { out(utilization, nvmlUtilization_t { gpu: 0, memory: 0 }) }
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensorType: c_uint,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    guard(|| {
        done(with_device(device, |_, _, _| {
            if sensorType != NVML_TEMPERATURE_GPU {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            // SAFETY: checked for NULL by `out`.
            unsafe { out(temp, vramdoc_sim::TEMPERATURE_C) }
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layouts_match_nvml_h() {
        assert_eq!(std::mem::size_of::<nvmlMemory_t>(), 24);
        assert_eq!(std::mem::size_of::<nvmlMemory_v2_t>(), 40);
        assert_eq!(NVML_MEMORY_V2_VERSION, 0x0200_0028);
        assert_eq!(std::mem::size_of::<nvmlProcessInfo_v1_t>(), 16);
        assert_eq!(std::mem::size_of::<nvmlProcessInfo_v2_t>(), 24);
        assert_eq!(std::mem::size_of::<nvmlProcessDetail_v1_t>(), 32);
        assert_eq!(std::mem::size_of::<nvmlProcessDetailList_t>(), 24);
        assert_eq!(NVML_PROCESS_DETAIL_LIST_V1, 0x0100_0018);
        assert_eq!(std::mem::size_of::<nvmlPciInfo_t>(), 68);
        assert_eq!(std::mem::size_of::<nvmlUtilization_t>(), 8);
    }

    #[test]
    fn bus_ids_parse_in_both_formats() {
        assert_eq!(parse_bus_id("00000000:17:00.0"), Some((0, 0x17, 0, 0)));
        assert_eq!(parse_bus_id("0000:27:00.0"), Some((0, 0x27, 0, 0)));
        assert_eq!(parse_bus_id("27:00.0"), Some((0, 0x27, 0, 0)));
        assert_eq!(parse_bus_id("garbage"), None);
    }
}
