//! The real NVML backend: [`NvmlMonitor`] over nvml-wrapper, loading `libnvidia-ml.so.1`
//! (or `libnvidia-ml.so`) by name, so `LD_LIBRARY_PATH` can point it at tests/simgpu.
//!
//! Cost per query, in NVML calls: [`Monitor::devices`] = one count, then per device one
//! handle lookup + name, UUID, PCI info, memory (v2), utilization, temperature;
//! [`Monitor::memory`] = one `nvmlDeviceGetMemoryInfo_v2`; [`Monitor::processes`] = one
//! `nvmlDeviceGetComputeRunningProcesses_v3` into a buffer kept between calls (a second one
//! only when the buffer is too small). Device handles are cached: NVML handles stay valid
//! until `nvmlShutdown`, which only runs when the monitor is dropped.
//!
//! Nothing here panics on a missing library or symbol: a library without `nvmlShutdown` is
//! refused before nvml-wrapper's `Drop` (which would panic calling it) can run.

use super::{CallCounts, DeviceInfo, GpuError, GpuProcess, MemoryInfo, Monitor, Result, Versions};
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlProcessInfo_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_SUCCESS,
};
use std::ffi::OsStr;
use std::os::raw::c_uint;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Raw `nvmlDevice_t` handles by index (0 = not looked up yet).
    handles: Mutex<Vec<usize>>,
    /// Reused buffer for the process list.
    proc_buf: Mutex<Vec<nvmlProcessInfo_t>>,
    inventory: AtomicU64,
    memory: AtomicU64,
    processes: AtomicU64,
}

impl std::fmt::Debug for NvmlMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlMonitor")
            .field("library", &self.library)
            .finish_non_exhaustive()
    }
}

/// The `NVML_ERROR_*` name of an error, for messages.
fn code_name(e: &NvmlError) -> String {
    let s = match e {
        NvmlError::Uninitialized => "NVML_ERROR_UNINITIALIZED",
        NvmlError::InvalidArg => "NVML_ERROR_INVALID_ARGUMENT",
        NvmlError::NotSupported => "NVML_ERROR_NOT_SUPPORTED",
        NvmlError::NoPermission => "NVML_ERROR_NO_PERMISSION",
        NvmlError::NotFound => "NVML_ERROR_NOT_FOUND",
        NvmlError::InsufficientSize(_) => "NVML_ERROR_INSUFFICIENT_SIZE",
        NvmlError::DriverNotLoaded => "NVML_ERROR_DRIVER_NOT_LOADED",
        NvmlError::Timeout => "NVML_ERROR_TIMEOUT",
        NvmlError::LibraryNotFound => "NVML_ERROR_LIBRARY_NOT_FOUND",
        NvmlError::FunctionNotFound => "NVML_ERROR_FUNCTION_NOT_FOUND",
        NvmlError::GpuLost => "NVML_ERROR_GPU_IS_LOST",
        NvmlError::ResetRequired => "NVML_ERROR_RESET_REQUIRED",
        NvmlError::LibRmVersionMismatch => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        NvmlError::InsufficientMemory => "NVML_ERROR_MEMORY",
        NvmlError::Unknown => "NVML_ERROR_UNKNOWN",
        other => return format!("{other:?}"),
    };
    s.to_string()
}

fn map_err(call: &str, index: Option<u32>, library: &str, e: NvmlError) -> GpuError {
    match (e, index) {
        (NvmlError::GpuLost, Some(i)) => GpuError::DeviceLost(i),
        (NvmlError::FailedToLoadSymbol(s), _) => GpuError::LibraryMissing {
            library: library.to_string(),
            hint: format!(
                "{call} is missing from it ({s}); update the NVIDIA driver to a CUDA 12 one"
            ),
        },
        (NvmlError::DriverNotLoaded, _) => GpuError::NoDevice(format!(
            "{call}: the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED); \
             load it (`nvidia-smi` must work), or without a GPU use --sim SPEC"
        )),
        (e, _) => GpuError::Driver {
            call: call.to_string(),
            code: code_name(&e),
            message: e.to_string(),
        },
    }
}

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
            Err(e) => return Err(map_err("nvmlInit_v2", None, label, e)),
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
            handles: Mutex::new(Vec::new()),
            proc_buf: Mutex::new(Vec::new()),
            inventory: AtomicU64::new(0),
            memory: AtomicU64::new(0),
            processes: AtomicU64::new(0),
        })
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

fn optional<T>(r: std::result::Result<T, NvmlError>) -> std::result::Result<Option<T>, NvmlError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(e),
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
            cuda: super::sim::cuda_version_string(cuda),
            nvml,
        })
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        self.inventory.fetch_add(1, Ordering::Relaxed);
        let count = self
            .nvml
            .device_count()
            .map_err(|e| self.err("nvmlDeviceGetCount_v2", None, e))?;
        let mut out = Vec::with_capacity(count as usize);
        for index in 0..count {
            let d = self.lookup(index)?;
            let at = |call: &str| {
                let call = call.to_string();
                move |e| self.err(&call, Some(index), e)
            };
            let name = d.name().map_err(at("nvmlDeviceGetName"))?;
            let uuid = d.uuid().map_err(at("nvmlDeviceGetUUID"))?;
            let pci = d.pci_info().map_err(at("nvmlDeviceGetPciInfo_v3"))?;
            let m = d.memory_info().map_err(at("nvmlDeviceGetMemoryInfo_v2"))?;
            let util =
                optional(d.utilization_rates()).map_err(at("nvmlDeviceGetUtilizationRates"))?;
            let temp = optional(d.temperature(TemperatureSensor::Gpu))
                .map_err(at("nvmlDeviceGetTemperature"))?;
            out.push(DeviceInfo {
                index,
                name,
                uuid,
                pci_bus_id: pci.bus_id,
                memory: MemoryInfo {
                    total: m.total,
                    reserved: m.reserved,
                    used: m.used,
                    free: m.free,
                },
                utilization_gpu: util.map(|u| u.gpu),
                temperature_c: temp,
            });
        }
        Ok(out)
    }

    fn memory(&self, index: u32) -> Result<MemoryInfo> {
        self.memory.fetch_add(1, Ordering::Relaxed);
        let d = self.device(index)?;
        let m = d
            .memory_info()
            .map_err(|e| self.err("nvmlDeviceGetMemoryInfo_v2", Some(index), e))?;
        Ok(MemoryInfo {
            total: m.total,
            reserved: m.reserved,
            used: m.used,
            free: m.free,
        })
    }

    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>> {
        const CALL: &str = "nvmlDeviceGetComputeRunningProcesses_v3";
        self.processes.fetch_add(1, Ordering::Relaxed);
        let d = self.device(index)?;
        let sym = self
            .nvml
            .lib()
            .nvmlDeviceGetComputeRunningProcesses_v3
            .as_ref()
            .map_err(|e| {
                self.err(
                    CALL,
                    Some(index),
                    NvmlError::FailedToLoadSymbol(e.to_string()),
                )
            })?;
        let mut buf = self.proc_buf.lock().unwrap_or_else(|e| e.into_inner());
        if buf.is_empty() {
            // SAFETY: nvmlProcessInfo_t is plain old data.
            buf.resize(INITIAL_PROCESS_CAPACITY, unsafe { std::mem::zeroed() });
        }
        // The list may grow between calls: retry a few times with the size NVML asks for.
        for _ in 0..4 {
            let mut count = buf.len() as c_uint;
            // SAFETY: `buf` holds `count` entries of the struct the _v3 entry point fills;
            // the handle belongs to this live NVML session.
            let rc = unsafe { sym(d.handle(), &mut count, buf.as_mut_ptr()) };
            if rc == nvmlReturn_enum_NVML_SUCCESS {
                let n = (count as usize).min(buf.len());
                return Ok(buf[..n]
                    .iter()
                    .map(|p| GpuProcess {
                        pid: p.pid,
                        used: (p.usedGpuMemory != NOT_AVAILABLE).then_some(p.usedGpuMemory),
                    })
                    .collect());
            }
            if rc != nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
                return Err(self.err(CALL, Some(index), NvmlError::from(rc)));
            }
            let want = (count as usize).max(buf.len()) + 16;
            // SAFETY: nvmlProcessInfo_t is plain old data.
            buf.resize(want, unsafe { std::mem::zeroed() });
        }
        Err(GpuError::Driver {
            call: CALL.into(),
            code: "NVML_ERROR_INSUFFICIENT_SIZE".into(),
            message: "the process list kept growing while being read".into(),
        })
    }

    fn call_counts(&self) -> CallCounts {
        CallCounts {
            inventory: self.inventory.load(Ordering::Relaxed),
            memory: self.memory.load(Ordering::Relaxed),
            processes: self.processes.load(Ordering::Relaxed),
        }
    }
}
