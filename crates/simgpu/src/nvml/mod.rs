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
//! utilization, temperature), `process` (the process lists), `mig` (MIG device handles).

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use vramdoc_gpu_spec::ProcessKind;
use vramdoc_sim::calls::Counter;
use vramdoc_sim::nvml::SimNvml;
use vramdoc_sim::profile::RecordLayout;
use vramdoc_sim::{Faults, SimBox, SimDevice, SimError};

mod device;
mod init;
mod mig;
mod monitor;
mod process;
mod system;
#[cfg(test)]
mod tests;

pub use device::*;
pub use init::*;
pub use mig::*;
pub use monitor::*;
pub use process::*;
pub use system::*;

pub type nvmlReturn_t = c_uint;

/// The codes come from the simulator's core (`vramdoc_sim::codes`).
pub use vramdoc_sim::codes::nvml::*;

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
    /// The session (`vramdoc_sim::nvml::SimNvml`): the box, the devices mounted into this
    /// process's view of it (a process in a container sees only the GPUs whose device files
    /// its container runtime mounted, renumbered from 0 in PCI order), and its epoch.
    nvml: Option<Arc<SimNvml>>,
}

static LIB: Mutex<Lib> = Mutex::new(Lib {
    refcount: 0,
    nvml: None,
});

/// Host indices of the devices this process's NVML shows.
fn mounted() -> Vec<u32> {
    lock(&LIB)
        .nvml
        .as_ref()
        .map(|n| n.mounted().to_vec())
        .unwrap_or_default()
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
    // The session's box compared in place: no path is copied on a call of an open counter.
    let nvml = lock(&LIB).nvml.clone();
    let from_env;
    let dir: &std::path::Path = match nvml.as_ref() {
        Some(n) => n.sim().dir(),
        None => match std::env::var_os(vramdoc_sim::SIM_DIR_ENV) {
            Some(d) if !d.is_empty() => {
                from_env = std::path::PathBuf::from(d);
                &from_env
            }
            _ => return,
        },
    };
    let mut c = lock(&COUNTER);
    if c.as_ref().is_none_or(|(d, _)| d != dir) {
        if !dir.join("box.json").exists() {
            return;
        }
        let own = std::process::id();
        let pid = vramdoc_sim::broker::host_pid(dir).unwrap_or(own);
        *c = Counter::open(dir, pid, own)
            .ok()
            .map(|k| (dir.to_path_buf(), k));
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

/// `nvmlReturn_t` of a simulator error (the core decides it: [`SimError::nvml_code`]).
fn sim_code(e: &SimError) -> nvmlReturn_t {
    e.nvml_code()
}

/// The initialised session and its current faults: `NVML_ERROR_UNINITIALIZED` before init,
/// then the core's session checks (lost session, a hang of every call).
fn session() -> R<(Arc<SimNvml>, Faults)> {
    let nvml = lock(&LIB).nvml.clone().ok_or(NVML_ERROR_UNINITIALIZED)?;
    let faults = nvml.session().map_err(|e| sim_code(&e))?;
    Ok((nvml, faults))
}

/// The box of the initialised library (checked as [`session`] does).
fn current() -> R<Arc<SimNvml>> {
    session().map(|(nvml, _)| nvml)
}

/// The box for queries that real NVML answers without init (versions): the initialised one,
/// else the one `VRAMDOC_SIM_DIR` names, else none.
fn any_box() -> Option<SimBox> {
    lock(&LIB)
        .nvml
        .as_ref()
        .map(|n| n.sim().clone())
        .or_else(|| SimBox::from_env().ok())
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

/// MIG device handles minted so far: (instance key, address of a leaked `nvmlDevice_st`
/// whose magic is [`MIG_HANDLE_MAGIC`]). Kept apart from [`HANDLES`] (indexed by physical
/// index): the two kinds of handle never alias, and [`index_of`] tells them apart.
static MIG_HANDLES: Mutex<Vec<(u32, usize)>> = Mutex::new(Vec::new());

const MIG_HANDLE_MAGIC: u64 = 0x564d_4c53_494d_4d49; // "VMLSIMMI"

/// The handle of MIG instance `key` (`vramdoc_sim::mig::key`), minted once.
fn mig_handle_for(key: u32) -> nvmlDevice_t {
    let mut hs = lock(&MIG_HANDLES);
    if let Some((_, a)) = hs.iter().find(|(k, _)| *k == key) {
        return *a as nvmlDevice_t;
    }
    let h = Box::into_raw(Box::new(nvmlDevice_st {
        magic: MIG_HANDLE_MAGIC,
        index: key,
    })) as usize;
    hs.push((key, h));
    h as nvmlDevice_t
}

/// Physical index behind a handle we minted, or a MIG instance's key behind a MIG device
/// handle; anything else is `INVALID_ARGUMENT`.
fn index_of(h: nvmlDevice_t) -> R<u32> {
    if h.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    if let Some((key, _)) = lock(&MIG_HANDLES).iter().find(|(_, a)| *a == h as usize) {
        // SAFETY: `h` is one of our leaked, never-freed MIG handles.
        let st = unsafe { &*h };
        if st.magic != MIG_HANDLE_MAGIC || st.index != *key {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        return Ok(*key);
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

/// The initialised session and the physical index behind handle `h`
/// (`NVML_ERROR_UNINITIALIZED`, `NVML_ERROR_INVALID_ARGUMENT`): what every per-device entry
/// point starts with before asking the core.
fn session_and_index(h: nvmlDevice_t) -> R<(Arc<SimNvml>, u32)> {
    let nvml = lock(&LIB).nvml.clone().ok_or(NVML_ERROR_UNINITIALIZED)?;
    Ok((nvml, index_of(h)?))
}

/// A per-device query answered from the box's facts: the core's device checks (session,
/// mounted in this view, hang, lost or hidden), then `f` with the box, the device and the
/// faults in force.
fn with_device<T>(h: nvmlDevice_t, f: impl FnOnce(&SimBox, &SimDevice, &Faults) -> R<T>) -> R<T> {
    let (nvml, index) = session_and_index(h)?;
    let (dev, faults) = nvml.device(index).map_err(|e| sim_code(&e))?;
    f(nvml.sim(), dev, &faults)
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
