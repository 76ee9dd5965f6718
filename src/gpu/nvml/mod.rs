//! The real NVML backend: [`NvmlMonitor`] over nvml-wrapper, loading `libnvidia-ml.so.1`
//! (or `libnvidia-ml.so`) by name, so `LD_LIBRARY_PATH` can point it at any library that
//! implements NVML.
//!
//! Cost per query, in NVML calls: [`Monitor::devices`] = one count, then per device one
//! handle lookup and MIG mode (the MIG enumeration's, reused by the entry) + name, UUID, PCI
//! info, memory (v2), utilization, temperature;
//! [`Monitor::memory`] = one `nvmlDeviceGetMemoryInfo_v2`; [`Monitor::processes`] = one
//! `nvmlDeviceGetComputeRunningProcesses_v3` into a buffer kept between calls (a second one
//! only when the buffer is too small). MIG instances follow the GPUs (`nvml/mig.rs`).
//! Device handles are cached: NVML handles stay valid
//! until `nvmlShutdown`, which only runs when the monitor is dropped.
//!
//! Older and odd drivers: where `nvmlDeviceGetMemoryInfo_v2` is missing (before R510),
//! answers `NVML_ERROR_FUNCTION_NOT_FOUND`, or fails (`NVML_ERROR_UNKNOWN` under WSL), memory
//! is read with v1 (`nvmlDeviceGetMemoryInfo`) and reported with `reserved` 0; once v1
//! answered where v2 did not, v1 is used directly. v1's `used` leaves the driver's
//! reservation out before R510 (as v2's `used` does) and counts it from R510 on. Where the
//! `_v3` process lists are missing (before R510), the `_v2` lists (24-byte records, since
//! R450), then v1 (16-byte), are read.
//!
//! Nothing here panics on a missing library or symbol: a library without `nvmlShutdown` is
//! refused before nvml-wrapper's `Drop` (which would panic calling it) can run.

use super::{
    CallCounters, CallCounts, DeviceInfo, DeviceStatus, GpuError, GpuProcess, MemoryInfo, Monitor,
    ProcessKind, Result, Versions,
};
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlMemory_t, nvmlProcessDetailList_t, nvmlProcessDetail_v1_t, nvmlProcessInfo_t,
    nvmlProcessInfo_v1_t, nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED, nvmlReturn_enum_NVML_SUCCESS,
};
use std::ffi::OsStr;
use std::os::raw::c_uint;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Names tried by [`NvmlMonitor::open`], in order (the dynamic loader searches
/// `LD_LIBRARY_PATH`, then the system directories).
pub const LIBRARY_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

const INSTALL_HINT: &str =
    "install the NVIDIA driver or add its directory to LD_LIBRARY_PATH (no GPU: use --sim SPEC)";

/// `NVML_VALUE_NOT_AVAILABLE` (-1) as it lands in `usedGpuMemory`.
const NOT_AVAILABLE: u64 = u64::MAX;

/// Process-list buffer entries to start with.
const INITIAL_PROCESS_CAPACITY: usize = 64;

/// NVML through nvml-wrapper. Indices are NVML's physical indices.
pub struct NvmlMonitor {
    nvml: Nvml,
    library: String,
    /// Device files beyond the real driver's `/dev` ones ([`NvmlMonitor::with_device_nodes`]).
    extra_nodes: Vec<PathBuf>,
    /// Raw `nvmlDevice_t` handles by index (0 = not looked up yet).
    handles: Mutex<Vec<usize>>,
    /// Reused buffer for the `_v3` process lists (u64 words: 8-byte aligned records).
    proc_buf: Mutex<Vec<u64>>,
    /// The queries made, by kind.
    calls: CallCounters,
    /// v2 memory info is missing or failing on this driver: read v1 directly.
    memory_v1_only: AtomicBool,
    /// MIG instances enumerated, numbered after the GPUs (`nvml::mig`).
    mig: Mutex<mig::MigSlots>,
}

impl std::fmt::Debug for NvmlMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlMonitor")
            .field("library", &self.library)
            .finish_non_exhaustive()
    }
}

mod codes;
mod mig;
pub use codes::{error_of_code, init_error_of_code, status_of_code};
use codes::{init_failed, map_err, status_of};

impl NvmlMonitor {
    /// Load NVML by name ([`LIBRARY_NAMES`]) and initialise it.
    pub fn open() -> Result<NvmlMonitor> {
        let mut last = None;
        for name in LIBRARY_NAMES {
            match Self::open_name(OsStr::new(name), name) {
                Err(GpuError::LibraryMissing { library, hint })
                    if hint.starts_with("not found") =>
                {
                    // Report the first (canonical) name.
                    last.get_or_insert(GpuError::LibraryMissing { library, hint });
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| GpuError::LibraryMissing {
            library: LIBRARY_NAMES[0].into(),
            hint: format!("not found; {INSTALL_HINT}"),
        }))
    }

    /// Load NVML from an explicit path and initialise it.
    pub fn open_path(path: &Path) -> Result<NvmlMonitor> {
        Self::open_name(path.as_os_str(), &path.display().to_string())
    }

    fn open_name(lib: &OsStr, label: &str) -> Result<NvmlMonitor> {
        let nvml = match Nvml::builder().lib_path(lib).init() {
            Ok(n) => n,
            Err(NvmlError::LibloadingError(e)) => {
                // dlerror() repeats the name: keep only its reason.
                let text = e.to_string();
                let reason = text
                    .rsplit_once(": cannot")
                    .map_or(text.as_str(), |(_, r)| r);
                let reason = reason.trim_start_matches(" open shared object file: ");
                return Err(GpuError::LibraryMissing {
                    library: label.to_string(),
                    hint: format!("not found ({reason}); {INSTALL_HINT}"),
                });
            }
            Err(e) => return Err(init_failed(map_err("nvmlInit_v2", None, label, e))),
        };
        // nvml-wrapper's Drop calls nvmlShutdown unchecked and panics when the symbol is
        // absent: never let such an instance drop.
        if let Err(e) = nvml.lib().nvmlShutdown.as_ref() {
            let hint = format!("nvmlShutdown is missing from it ({e}); it is not a usable NVML");
            std::mem::forget(nvml);
            return Err(GpuError::LibraryMissing {
                library: label.to_string(),
                hint,
            });
        }
        Ok(NvmlMonitor {
            nvml,
            library: label.to_string(),
            extra_nodes: Vec::new(),
            handles: Mutex::new(Vec::new()),
            proc_buf: Mutex::new(Vec::new()),
            calls: CallCounters::default(),
            memory_v1_only: AtomicBool::new(false),
            mig: Mutex::new(mig::MigSlots::default()),
        })
    }

    /// Also report `nodes` as device files ([`Monitor::device_nodes`]): for an NVML whose
    /// driver keeps them outside `/dev`.
    pub fn with_device_nodes(mut self, nodes: Vec<PathBuf>) -> NvmlMonitor {
        self.extra_nodes = nodes;
        self
    }

    /// The library this monitor loaded (name or path as given).
    pub fn library(&self) -> &str {
        &self.library
    }

    fn err(&self, call: &str, index: Option<u32>, e: NvmlError) -> GpuError {
        map_err(call, index, &self.library, e)
    }

    /// Look up (one NVML call) and cache the handle of `index`.
    fn lookup(&self, index: u32) -> Result<Device<'_>> {
        let dev = self.nvml.device_by_index(index).map_err(|e| match e {
            NvmlError::InvalidArg => GpuError::InvalidDevice(index),
            e => self.err("nvmlDeviceGetHandleByIndex_v2", Some(index), e),
        })?;
        // SAFETY: reading the raw handle out of a live Device has no side effect.
        let raw = unsafe { dev.handle() } as usize;
        let mut hs = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        if hs.len() <= index as usize {
            hs.resize(index as usize + 1, 0);
        }
        hs[index as usize] = raw;
        Ok(dev)
    }

    /// The cached handle of `index`, looked up on first use.
    fn device(&self, index: u32) -> Result<Device<'_>> {
        let cached = {
            let hs = self.handles.lock().unwrap_or_else(|e| e.into_inner());
            hs.get(index as usize).copied().unwrap_or(0)
        };
        if cached == 0 {
            return self.lookup(index);
        }
        // SAFETY: the handle came from this NVML session, which lives as long as `self`.
        Ok(unsafe { Device::new(cached as nvmlDevice_t, &self.nvml) })
    }
}

/// What could be read of a device before an error: name, UUID, PCI bus id (empty if not).
type Partial = (String, String, String);

impl NvmlMonitor {
    /// Everything `devices()` reports of one device, or what was read before the first error.
    fn device_info(&self, index: u32) -> std::result::Result<DeviceInfo, (Partial, NvmlError)> {
        let mut partial: Partial = (String::new(), String::new(), String::new());
        let d = match self.info_handle(index) {
            Ok(d) => d,
            Err(e) => return Err((partial, e)),
        };
        {
            // SAFETY: reading the raw handle out of a live Device has no side effect.
            let raw = unsafe { d.handle() } as usize;
            let mut hs = self.handles.lock().unwrap_or_else(|e| e.into_inner());
            if hs.len() <= index as usize {
                hs.resize(index as usize + 1, 0);
            }
            hs[index as usize] = raw;
        }
        macro_rules! get {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(e) => return Err((partial, e)),
                }
            };
        }
        partial.0 = get!(d.name());
        partial.1 = get!(d.uuid());
        partial.2 = get!(d.pci_info()).bus_id;
        // NOT_SUPPORTED (GB10: no framebuffer to report) leaves the device in the inventory
        // with its memory unknown; per-process usage still works.
        let (m, memory_unknown) = match self.memory_info(&d) {
            Ok(m) => (m, None),
            Err(NvmlError::NotSupported) => (
                MemoryInfo::zeroed(),
                Some(super::MEMORY_NOT_SUPPORTED.into()),
            ),
            Err(e) => return Err((partial, e)),
        };
        let util = get!(optional(d.utilization_rates()));
        let temp = get!(optional(d.temperature(TemperatureSensor::Gpu)));
        // Any error (NOT_SUPPORTED off coherent platforms, a driver without the symbol) means
        // the GPU is not a NUMA node: never a reason to fail the device.
        let numa_node = d.numa_node_id().ok();
        // The device file's number; NOT_SUPPORTED on some platforms: unknown, never a failure.
        let minor = d.minor_number().ok();
        Ok(DeviceInfo {
            index,
            name: partial.0,
            uuid: partial.1,
            pci_bus_id: partial.2,
            memory: MemoryInfo {
                total: m.total,
                reserved: m.reserved,
                used: m.used,
                free: m.free,
            },
            utilization_gpu: util.map(|u| u.gpu),
            temperature_c: temp,
            numa_node,
            mig: self.mig_role(index, &d),
            memory_unknown,
            status: DeviceStatus::Ok,
            minor,
        })
    }
}

/// Bytes of one process record as NVML's headers declare it (`nvmlProcessInfo_v2_t`).
const NARROW_RECORD: usize = 24;
/// Bytes of one record as R535 drivers write it into the `_v3` lists (with
/// `usedGpuCcProtectedMemory`, i.e. `nvmlProcessDetail_v1_t`) without a version bump.
const WIDE_RECORD: usize = 32;
/// Filler written into the buffer before each call, to see how far the driver wrote.
const SENTINEL: u8 = 0xA5;
/// `NVML_STRUCT_VERSION(ProcessDetailList, 1)`.
const DETAIL_LIST_V1: c_uint =
    (std::mem::size_of::<nvmlProcessDetailList_t>() as c_uint) | (1 << 24);

/// `(pid, used)` pairs of one process list.
type RawList = Vec<(u32, Option<u64>)>;

fn used_of(v: u64) -> Option<u64> {
    (v != NOT_AVAILABLE).then_some(v)
}

/// Read `n` records out of a buffer the driver filled, deciding the record stride from how
/// far it wrote: a driver that writes 32-byte records changes bytes `[24n, 32n)`, which a
/// 24-byte writer leaves as [`SENTINEL`]. (Each of those 8 bytes lies in a pid, instance id or
/// memory field of a 32-byte record; none of these is ever 0xA5A5… on a real driver.)
fn decode_records(buf: &[u8], n: usize) -> RawList {
    let wide = n > 0
        && buf
            .get(n * NARROW_RECORD..n * WIDE_RECORD)
            .is_some_and(|tail| tail.iter().any(|b| *b != SENTINEL));
    let stride = if wide { WIDE_RECORD } else { NARROW_RECORD };
    (0..n)
        .filter_map(|i| {
            let r = buf.get(i * stride..i * stride + 16)?;
            let pid = u32::from_ne_bytes([r[0], r[1], r[2], r[3]]);
            let mut used = [0u8; 8];
            used.copy_from_slice(&r[8..16]);
            Some((pid, used_of(u64::from_ne_bytes(used))))
        })
        .collect()
}

impl NvmlMonitor {
    /// One `_v3` process list into a byte buffer sized for the wider (32-byte) records, so
    /// an R535 driver writing `usedGpuCcProtectedMemory` cannot overrun it; the stride is
    /// probed per call ([`decode_records`]).
    fn process_list_v3(
        &self,
        handle: nvmlDevice_t,
        index: u32,
        kind: ProcessKind,
    ) -> Result<RawList> {
        let lib = self.nvml.lib();
        let (call, sym) = match kind {
            ProcessKind::Compute => (
                "nvmlDeviceGetComputeRunningProcesses_v3",
                lib.nvmlDeviceGetComputeRunningProcesses_v3.as_ref(),
            ),
            ProcessKind::Graphics => (
                "nvmlDeviceGetGraphicsRunningProcesses_v3",
                lib.nvmlDeviceGetGraphicsRunningProcesses_v3.as_ref(),
            ),
            ProcessKind::Mps => (
                "nvmlDeviceGetMPSComputeRunningProcesses_v3",
                lib.nvmlDeviceGetMPSComputeRunningProcesses_v3.as_ref(),
            ),
        };
        let sym = match sym {
            Ok(s) => s,
            // Before R510: the `_v2` / v1 lists.
            Err(e) => {
                return match self.process_list_legacy(handle, index, kind)? {
                    Some(list) => Ok(list),
                    // Only the compute list is required.
                    None if kind != ProcessKind::Compute => Ok(Vec::new()),
                    None => Err(self.err(
                        call,
                        Some(index),
                        NvmlError::FailedToLoadSymbol(e.to_string()),
                    )),
                };
            }
        };
        let mut buf = self.proc_buf.lock().unwrap_or_else(|e| e.into_inner());
        // `buf` is in u64 words: the records it held last time, in bytes, over the record size.
        let mut capacity = (buf.len() * 8 / WIDE_RECORD).max(INITIAL_PROCESS_CAPACITY);
        // The list may grow between calls: retry a few times with the size NVML asks for.
        for _ in 0..4 {
            buf.clear();
            // u64 words keep the buffer 8-byte aligned, as the records need.
            buf.resize(
                capacity * WIDE_RECORD / 8,
                u64::from_ne_bytes([SENTINEL; 8]),
            );
            let mut count = capacity as c_uint;
            // SAFETY: `buf` holds `capacity` records of the wider (32-byte) layout, so even a
            // driver writing `count` 32-byte records stays inside it.
            let rc = unsafe {
                sym(
                    handle,
                    &mut count,
                    buf.as_mut_ptr().cast::<nvmlProcessInfo_t>(),
                )
            };
            if rc == nvmlReturn_enum_NVML_SUCCESS {
                let n = (count as usize).min(capacity);
                // SAFETY: viewing initialised u64 words as bytes.
                let bytes =
                    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len() * 8) };
                return Ok(decode_records(bytes, n));
            }
            if rc == nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED && kind != ProcessKind::Compute {
                return Ok(Vec::new());
            }
            if rc == nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND {
                drop(buf);
                if let Some(list) = self.process_list_legacy(handle, index, kind)? {
                    return Ok(list);
                }
                return Err(self.err(call, Some(index), NvmlError::from(rc)));
            }
            if rc != nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
                return Err(self.err(call, Some(index), NvmlError::from(rc)));
            }
            capacity = (count as usize).max(capacity) + 16;
        }
        Err(GpuError::Driver {
            call: call.into(),
            code: "NVML_ERROR_INSUFFICIENT_SIZE".into(),
            message: "the process list kept growing while being read".into(),
        })
    }

    /// One list through `nvmlDeviceGetRunningProcessDetailList` (R550+ drivers), or `None`
    /// when the library lacks it or says it is not supported (then the `_v3` list is read).
    fn detail_list(
        &self,
        handle: nvmlDevice_t,
        index: u32,
        kind: ProcessKind,
    ) -> Result<Option<RawList>> {
        const CALL: &str = "nvmlDeviceGetRunningProcessDetailList";
        let Ok(sym) = self
            .nvml
            .lib()
            .nvmlDeviceGetRunningProcessDetailList
            .as_ref()
        else {
            return Ok(None);
        };
        let mode: c_uint = match kind {
            ProcessKind::Compute => 0,
            ProcessKind::Graphics => 1,
            ProcessKind::Mps => 2,
        };
        let mut capacity = INITIAL_PROCESS_CAPACITY;
        for _ in 0..4 {
            // SAFETY: plain old data.
            let mut recs: Vec<nvmlProcessDetail_v1_t> =
                vec![unsafe { std::mem::zeroed() }; capacity];
            let mut list = nvmlProcessDetailList_t {
                version: DETAIL_LIST_V1,
                mode,
                numProcArrayEntries: capacity as c_uint,
                procArray: recs.as_mut_ptr(),
            };
            // SAFETY: `recs` holds `numProcArrayEntries` records of the declared type.
            let rc = unsafe { sym(handle, &mut list) };
            match rc {
                r if r == nvmlReturn_enum_NVML_SUCCESS => {
                    let n = (list.numProcArrayEntries as usize).min(capacity);
                    return Ok(Some(
                        recs[..n]
                            .iter()
                            .map(|p| (p.pid, used_of(p.usedGpuMemory)))
                            .collect(),
                    ));
                }
                r if r == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE => {
                    capacity = (list.numProcArrayEntries as usize).max(capacity) + 16;
                }
                r if r == nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
                    || r == nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND
                    || r == nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH =>
                {
                    return Ok(None)
                }
                r => return Err(self.err(CALL, Some(index), NvmlError::from(r))),
            }
        }
        Err(GpuError::Driver {
            call: CALL.into(),
            code: "NVML_ERROR_INSUFFICIENT_SIZE".into(),
            message: "the process list kept growing while being read".into(),
        })
    }
}

impl NvmlMonitor {
    /// The NVML lists of `kinds` on a device (one call each): one entry per (pid, kind)
    /// (NVML can list a process once per context).
    fn lists(&self, index: u32, kinds: &[ProcessKind]) -> Result<Vec<GpuProcess>> {
        self.calls.processes();
        let d = self.device(index)?;
        // SAFETY: the handle belongs to this live NVML session.
        let handle = unsafe { d.handle() };
        let mut out: Vec<GpuProcess> = Vec::new();
        for &kind in kinds {
            let list = match self.detail_list(handle, index, kind)? {
                Some(list) => list,
                None => self.process_list_v3(handle, index, kind)?,
            };
            for (pid, used) in list {
                match out.iter_mut().find(|p| p.pid == pid && p.kind == kind) {
                    Some(p) => p.used = p.used.zip(used).map(|(a, b)| a.saturating_add(b)),
                    None => out.push(GpuProcess { pid, used, kind }),
                }
            }
        }
        Ok(out)
    }

    /// Memory through `nvmlDeviceGetMemoryInfo_v2`, or v1 where v2 is missing, answers
    /// `FUNCTION_NOT_FOUND` or fails (see the module docs).
    fn memory_info(&self, d: &Device<'_>) -> std::result::Result<MemoryInfo, NvmlError> {
        if !self.memory_v1_only.load(Ordering::Relaxed) {
            match d.memory_info() {
                Ok(m) => {
                    return Ok(MemoryInfo {
                        total: m.total,
                        reserved: m.reserved,
                        used: m.used,
                        free: m.free,
                    })
                }
                Err(
                    e @ (NvmlError::FailedToLoadSymbol(_)
                    | NvmlError::FunctionNotFound
                    | NvmlError::Unknown
                    | NvmlError::NotSupported),
                ) => {
                    let m = self.memory_v1(d).map_err(|_| e)?;
                    self.memory_v1_only.store(true, Ordering::Relaxed);
                    return Ok(m);
                }
                Err(e) => return Err(e),
            }
        }
        self.memory_v1(d)
    }

    /// `nvmlDeviceGetMemoryInfo` (v1): no `reserved` field.
    fn memory_v1(&self, d: &Device<'_>) -> std::result::Result<MemoryInfo, NvmlError> {
        let sym = self
            .nvml
            .lib()
            .nvmlDeviceGetMemoryInfo
            .as_ref()
            .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
        let mut m = nvmlMemory_t {
            total: 0,
            free: 0,
            used: 0,
        };
        // SAFETY: a live handle of this session and a v1 struct to fill.
        let rc = unsafe { sym(d.handle(), &mut m) };
        if rc != nvmlReturn_enum_NVML_SUCCESS {
            return Err(NvmlError::from(rc));
        }
        Ok(MemoryInfo {
            total: m.total,
            reserved: 0,
            used: m.used,
            free: m.free,
        })
    }

    /// A process list through the pre-R510 entry points: `_v2` (24-byte records, R450+),
    /// else v1 (16-byte). `None`: the library has neither.
    fn process_list_legacy(
        &self,
        handle: nvmlDevice_t,
        index: u32,
        kind: ProcessKind,
    ) -> Result<Option<RawList>> {
        let lib = self.nvml.lib();
        let (v2, v1) = match kind {
            ProcessKind::Compute => (
                lib.nvmlDeviceGetComputeRunningProcesses_v2.as_ref().ok(),
                lib.nvmlDeviceGetComputeRunningProcesses.as_ref().ok(),
            ),
            ProcessKind::Graphics => (
                lib.nvmlDeviceGetGraphicsRunningProcesses_v2.as_ref().ok(),
                lib.nvmlDeviceGetGraphicsRunningProcesses.as_ref().ok(),
            ),
            ProcessKind::Mps => (
                lib.nvmlDeviceGetMPSComputeRunningProcesses_v2.as_ref().ok(),
                lib.nvmlDeviceGetMPSComputeRunningProcesses.as_ref().ok(),
            ),
        };
        if let Some(f) = v2 {
            return self.legacy_list(
                "nvmlDeviceGetComputeRunningProcesses_v2",
                index,
                // SAFETY: `p` holds `*n` records of the declared type.
                |n, p| unsafe { f(handle, n, p) },
                |r: &nvmlProcessInfo_t| (r.pid, r.usedGpuMemory),
            );
        }
        if let Some(f) = v1 {
            return self.legacy_list(
                "nvmlDeviceGetComputeRunningProcesses",
                index,
                // SAFETY: `p` holds `*n` records of the declared type.
                |n, p| unsafe { f(handle, n, p) },
                |r: &nvmlProcessInfo_v1_t| (r.pid, r.usedGpuMemory),
            );
        }
        Ok(None)
    }

    /// One list through a legacy entry point `call` (its errors named `entry`), whose records
    /// `T` give their PID and memory through `pid_used`.
    fn legacy_list<T: Copy>(
        &self,
        entry: &str,
        index: u32,
        call: impl FnMut(*mut c_uint, *mut T) -> nvml_wrapper_sys::bindings::nvmlReturn_t,
        pid_used: impl Fn(&T) -> (u32, u64),
    ) -> Result<Option<RawList>> {
        read_list::<T>(call)
            .map(|l| {
                Some(
                    l.iter()
                        .map(|r| {
                            let (pid, used) = pid_used(r);
                            (pid, used_of(used))
                        })
                        .collect(),
                )
            })
            .map_err(|rc| self.err(entry, Some(index), NvmlError::from(rc)))
    }
}

/// The sizing protocol over typed records: call with a capacity, grow on
/// `NVML_ERROR_INSUFFICIENT_SIZE` (a few times: the list can grow in between).
fn read_list<T: Copy>(
    mut call: impl FnMut(*mut c_uint, *mut T) -> nvml_wrapper_sys::bindings::nvmlReturn_t,
) -> std::result::Result<Vec<T>, nvml_wrapper_sys::bindings::nvmlReturn_t> {
    let mut capacity = INITIAL_PROCESS_CAPACITY;
    for _ in 0..4 {
        // SAFETY: plain old data.
        let mut recs: Vec<T> = vec![unsafe { std::mem::zeroed() }; capacity];
        let mut n = capacity as c_uint;
        let rc = call(&mut n, recs.as_mut_ptr());
        if rc == nvmlReturn_enum_NVML_SUCCESS {
            recs.truncate((n as usize).min(capacity));
            return Ok(recs);
        }
        if rc != nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            return Err(rc);
        }
        capacity = (n as usize).max(capacity) + 16;
    }
    Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE)
}

fn optional<T>(r: std::result::Result<T, NvmlError>) -> std::result::Result<Option<T>, NvmlError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(e),
    }
}

impl NvmlMonitor {
    fn count(&self) -> Result<u32> {
        self.nvml
            .device_count()
            .map_err(|e| self.err("nvmlDeviceGetCount_v2", None, e))
    }

    /// One device of the inventory. One bad device never ends the inventory: it gets a
    /// status and zeroed memory.
    fn entry(&self, index: u32) -> DeviceInfo {
        match self.device_info(index) {
            Ok(info) => info,
            Err((partial, e)) => DeviceInfo {
                // A MIG parent that will not answer this caller is still one.
                mig: self.parent_role(index),
                ..DeviceInfo::unanswered(index, partial, status_of(e))
            },
        }
    }
}

impl Monitor for NvmlMonitor {
    fn backend(&self) -> &'static str {
        "nvml"
    }

    fn versions(&self) -> Result<Versions> {
        let driver = self
            .nvml
            .sys_driver_version()
            .map_err(|e| self.err("nvmlSystemGetDriverVersion", None, e))?;
        let cuda = self
            .nvml
            .sys_cuda_driver_version()
            .map_err(|e| self.err("nvmlSystemGetCudaDriverVersion_v2", None, e))?;
        let nvml = self
            .nvml
            .sys_nvml_version()
            .map_err(|e| self.err("nvmlSystemGetNVMLVersion", None, e))?;
        Ok(Versions {
            driver,
            cuda: super::cuda_version_string(cuda),
            nvml,
        })
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        self.calls.inventory();
        let count = self.count()?;
        let count = count + self.enumerate_mig(count);
        Ok((0..count).map(|index| self.entry(index)).collect())
    }

    fn device_count(&self) -> Result<u32> {
        self.calls.inventory();
        let count = self.count()?;
        Ok(count + self.mig_count(count))
    }

    fn inventory_entry(&self, index: u32) -> Result<DeviceInfo> {
        Ok(self.entry(index))
    }

    fn memory(&self, index: u32) -> Result<MemoryInfo> {
        self.calls.memory();
        let d = self.device(index)?;
        let m = self
            .memory_info(&d)
            .map_err(|e| self.err("nvmlDeviceGetMemoryInfo_v2", Some(index), e))?;
        Ok(MemoryInfo {
            total: m.total,
            reserved: m.reserved,
            used: m.used,
            free: m.free,
        })
    }

    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>> {
        use ProcessKind::{Compute, Graphics, Mps};
        self.lists(index, &[Compute, Graphics, Mps])
    }

    fn cuda_speed(&self, index: u32) -> Option<(i32, i32, i32)> {
        let d = self.device(index).ok()?;
        let cc = d.cuda_compute_capability().ok()?;
        Some((cc.major, cc.minor, d.num_cores().map_or(0, |c| c as i32)))
    }

    fn process_list(&self, index: u32, kind: ProcessKind) -> Result<Vec<GpuProcess>> {
        self.lists(index, &[kind])
    }

    fn device_nodes(&self) -> Vec<PathBuf> {
        let mut nodes = super::real_device_nodes();
        nodes.extend(self.extra_nodes.iter().cloned());
        nodes
    }

    fn call_counts(&self) -> CallCounts {
        self.calls.counts()
    }
}

#[cfg(test)]
mod tests;
