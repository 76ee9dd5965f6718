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
//!
//! Here: the C types and codes of nvml.h, the library's state and the helpers every entry
//! point uses. The entry points, by group: `init` (init, shutdown, errors), `system`
//! (versions, process names), `device` (enumeration, handles, static facts, memory,
//! utilization, temperature), `process` (the process lists).

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use vramdoc_gpu_spec::ProcessKind;
use vramdoc_sim::calls::Counter;
use vramdoc_sim::profile::RecordLayout;
use vramdoc_sim::{Faults, SimBox, SimDevice, SimError};

mod device;
mod init;
mod monitor;
mod process;
mod system;
#[cfg(test)]
mod tests;

pub use device::*;
pub use init::*;
pub use monitor::*;
pub use process::*;
pub use system::*;

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
    /// Host index of each NVML index: a process in a container sees only the GPUs whose
    /// device files its container runtime mounted, renumbered from 0 in PCI order.
    mounted: Vec<u32>,
    /// The box's NVML epoch when this session was opened (`Faults::nvml_epoch`): a newer
    /// epoch means the session was lost (`sim fault --nvml-session-lost`).
    epoch: u64,
}

static LIB: Mutex<Lib> = Mutex::new(Lib {
    refcount: 0,
    sim: None,
    mounted: Vec::new(),
    epoch: 0,
});

/// Host indices of the devices this process's NVML shows.
fn mounted() -> Vec<u32> {
    lock(&LIB).mounted.clone()
}

/// Handles minted so far, by physical index (addresses of leaked `nvmlDevice_st`).
static HANDLES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// This process's call counter (`vramdoc_sim::calls`), for the box it was opened on.
static COUNTER: Mutex<Option<(std::path::PathBuf, Counter)>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Count one call of `name` in this process's counter file of the current box (the
/// initialised one, else the one `VRAMDOC_SIM_DIR` names; none: not counted).
fn count(name: &'static str) {
    let dir = match lock(&LIB).sim.as_ref() {
        Some(b) => b.dir().to_path_buf(),
        None => match std::env::var_os(vramdoc_sim::SIM_DIR_ENV) {
            Some(d) if !d.is_empty() => std::path::PathBuf::from(d),
            _ => return,
        },
    };
    let mut c = lock(&COUNTER);
    if c.as_ref().is_none_or(|(d, _)| *d != dir) {
        if !dir.join("box.json").exists() {
            return;
        }
        let own = std::process::id();
        let pid = vramdoc_sim::broker::host_pid(&dir).unwrap_or(own);
        *c = Counter::open(&dir, pid, own).ok().map(|k| (dir, k));
    }
    if let Some((_, k)) = c.as_mut() {
        k.count(name);
    }
}

/// Run an entry point body, counting the call; a panic becomes `NVML_ERROR_UNKNOWN` instead
/// of unwinding into C.
fn guard(name: &'static str, f: impl FnOnce() -> nvmlReturn_t) -> nvmlReturn_t {
    catch_unwind(AssertUnwindSafe(|| {
        count(name);
        f()
    }))
    .unwrap_or(NVML_ERROR_UNKNOWN)
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

/// Poll interval of a hung call ([`hang`]).
const HANG_POLL: Duration = Duration::from_millis(20);

/// Block while the box's `nvml_hang` fault applies to a call on `device` (`None`: a call not
/// about one device), re-reading the faults; past the fault's bound the call fails with
/// `NVML_ERROR_UNKNOWN`. Returns the faults as they are when the call may go on.
fn hang(sim: &SimBox, device: Option<u32>, mut faults: Faults) -> R<Faults> {
    let start = std::time::Instant::now();
    while let Some(h) = faults.nvml_hang.filter(|h| h.applies(device)) {
        if start.elapsed() >= Duration::from_millis(h.limit_ms) {
            return Err(NVML_ERROR_UNKNOWN);
        }
        std::thread::sleep(HANG_POLL);
        faults = sim.faults().map_err(|e| sim_code(&e))?;
    }
    Ok(faults)
}

/// The box of the initialised library and its current faults: `NVML_ERROR_UNINITIALIZED`
/// before init, `NVML_ERROR_UNKNOWN` once the session was lost, and a hang while the box
/// hangs every call.
fn session() -> R<(Arc<SimBox>, Faults)> {
    let (sim, epoch) = {
        let lib = lock(&LIB);
        (lib.sim.clone().ok_or(NVML_ERROR_UNINITIALIZED)?, lib.epoch)
    };
    let faults = sim.faults().map_err(|e| sim_code(&e))?;
    if faults.nvml_epoch > epoch {
        return Err(NVML_ERROR_UNKNOWN);
    }
    let faults = hang(&sim, None, faults)?;
    Ok((sim, faults))
}

/// The box of the initialised library (checked as [`session`] does).
fn current() -> R<Arc<SimBox>> {
    session().map(|(sim, _)| sim)
}

/// The box for queries that real NVML answers without init (versions): the initialised one,
/// else the one `VRAMDOC_SIM_DIR` names, else none.
fn any_box() -> Option<Arc<SimBox>> {
    lock(&LIB)
        .sim
        .clone()
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

/// A per-device query: library initialised, session not lost, handle valid, device mounted
/// in this process's view, in the box and not lost; waits out a hang of the device.
fn with_device<T>(h: nvmlDevice_t, f: impl FnOnce(&SimBox, &SimDevice, &Faults) -> R<T>) -> R<T> {
    let (sim, faults) = session()?;
    let index = index_of(h)?;
    if !mounted().contains(&index) {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let faults = hang(&sim, Some(index), faults)?;
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
