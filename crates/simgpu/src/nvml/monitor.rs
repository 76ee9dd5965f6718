//! Entry points NVML monitors call besides memory and processes (nvitop, gpustat, exporters):
//! fan, power, clocks, performance state, persistence / compute / display modes, ECC, MIG
//! mode, encoder/decoder and process utilization, PCIe throughput, compute capability,
//! serial, NUMA node. Answered from the board facts of the device's product
//! (`vramdoc_sim::board`): a value where the real board has one, `NVML_ERROR_NOT_SUPPORTED`
//! where it shows "N/A" (a fan on a passively cooled datacenter board, ECC on most GeForce
//! boards, the Windows driver model on Linux). The simulator models no load: utilizations
//! are 0 %, power is the board's idle draw, and no process has utilization samples.

use super::*;
use vramdoc_sim::board::{board_of, Board};

pub const NVML_ERROR_NOT_FOUND_SAMPLES: nvmlReturn_t = NVML_ERROR_NOT_FOUND;
/// `NVML_FEATURE_DISABLED` / `NVML_FEATURE_ENABLED`.
const DISABLED: c_uint = 0;
const ENABLED: c_uint = 1;
/// `NVML_COMPUTEMODE_DEFAULT`, `NVML_COMPUTEMODE_EXCLUSIVE_PROCESS`.
const COMPUTEMODE_DEFAULT: c_uint = 0;
const COMPUTEMODE_EXCLUSIVE_PROCESS: c_uint = 3;
/// `NVML_DRIVER_WDDM`.
const DRIVER_WDDM: c_uint = 0;
/// `NVML_STRUCT_VERSION(Temperature, 1)`.
pub const NVML_TEMPERATURE_V1: c_uint =
    (std::mem::size_of::<nvmlTemperature_t>() as c_uint) | (1 << 24);

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlTemperature_t {
    pub version: c_uint,
    pub sensorType: c_uint,
    pub temperature: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlProcessUtilizationSample_t {
    pub pid: c_uint,
    pub timeStamp: c_ulonglong,
    pub smUtil: c_uint,
    pub memUtil: c_uint,
    pub encUtil: c_uint,
    pub decUtil: c_uint,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nvmlBAR1Memory_t {
    pub bar1Total: c_ulonglong,
    pub bar1Free: c_ulonglong,
    pub bar1Used: c_ulonglong,
}

/// A per-device query on the device's board facts.
fn board_query(
    name: &'static str,
    device: nvmlDevice_t,
    f: impl FnOnce(&SimBox, &SimDevice, &Faults, Board) -> R<()>,
) -> nvmlReturn_t {
    guard(name, || {
        done(with_device(device, |sim, d, faults| {
            f(sim, d, faults, board_of(&d.name))
        }))
    })
}

/// Whether any process has a context (or memory) on the device.
fn busy(sim: &SimBox, d: &SimDevice, faults: &Faults) -> bool {
    sim.processes_with(d.index, faults)
        .map(|p| !p.is_empty())
        .unwrap_or(false)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed(
    device: nvmlDevice_t,
    speed: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetFanSpeed", device, |_, _, _, b| {
        if !b.has_fan() {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        // SAFETY: checked for NULL by `out`.
        unsafe { out(speed, 30) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetPowerUsage", device, |_, _, _, b| {
        // SAFETY: checked for NULL by `out`.
        unsafe { out(power, b.idle_power_w * 1000) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetPowerManagementLimit", device, |_, _, _, b| {
        // SAFETY: checked for NULL by `out`.
        unsafe { out(limit, b.power_limit_w * 1000) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetEnforcedPowerLimit", device, |_, _, _, b| {
        // SAFETY: checked for NULL by `out`.
        unsafe { out(limit, b.power_limit_w * 1000) }
    })
}

/// P0 on datacenter boards (idle captures show P0); GeForce boards idle in P8 and run CUDA
/// work in P2.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(
    device: nvmlDevice_t,
    state: *mut c_uint,
) -> nvmlReturn_t {
    board_query(
        "nvmlDeviceGetPerformanceState",
        device,
        |sim, d, faults, b| {
            let p = match (b.datacenter, busy(sim, d, faults)) {
                (true, _) => 0,
                (false, true) => 2,
                (false, false) => 8,
            };
            // SAFETY: checked for NULL by `out`.
            unsafe { out(state, p) }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    device: nvmlDevice_t,
    mode: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetPersistenceMode", device, |_, _, _, b| {
        // SAFETY: checked for NULL by `out`.
        unsafe { out(mode, if b.datacenter { ENABLED } else { DISABLED }) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    device: nvmlDevice_t,
    mode: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetComputeMode", device, |_, d, faults, _| {
        let m = if faults.exclusive_process_devices.contains(&d.index) {
            COMPUTEMODE_EXCLUSIVE_PROCESS
        } else {
            COMPUTEMODE_DEFAULT
        };
        // SAFETY: checked for NULL by `out`.
        unsafe { out(mode, m) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDisplayMode(
    device: nvmlDevice_t,
    display: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetDisplayMode", device, |_, _, _, _| {
        // SAFETY: checked for NULL by `out`.
        unsafe { out(display, ENABLED) }
    })
}

/// Active when a graphics client (an X server) holds memory on the device.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDisplayActive(
    device: nvmlDevice_t,
    active: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetDisplayActive", device, |sim, d, faults, _| {
        let x = sim
            .processes_with(d.index, faults)
            .map(|ps| ps.iter().any(|p| p.kind == ProcessKind::Graphics))
            .unwrap_or(false);
        // SAFETY: checked for NULL by `out`.
        unsafe { out(active, if x { ENABLED } else { DISABLED }) }
    })
}

/// The Windows driver model: not on Linux; WDDM under WSL.
unsafe fn driver_model(
    name: &'static str,
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    board_query(name, device, |sim, _, _, _| {
        if sim.config().platform != vramdoc_sim::Platform::Wsl {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        // SAFETY: checked for NULL by `out`.
        unsafe {
            out(current, DRIVER_WDDM)?;
            out(pending, DRIVER_WDDM)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    driver_model("nvmlDeviceGetDriverModel", device, current, pending)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel_v2(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    driver_model("nvmlDeviceGetDriverModel_v2", device, current, pending)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetEccMode", device, |_, _, _, b| {
        let on = b.ecc.ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        let v = if on { ENABLED } else { DISABLED };
        // SAFETY: checked for NULL by `out`.
        unsafe {
            out(current, v)?;
            out(pending, v)
        }
    })
}

/// No error was ever counted; "Requires ECC Mode to be enabled".
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: c_uint,
    counter_type: c_uint,
    counts: *mut c_ulonglong,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetTotalEccErrors", device, |_, _, _, b| {
        if error_type > 1 || counter_type > 1 {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        if b.ecc != Some(true) {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        // SAFETY: checked for NULL by `out`.
        unsafe { out(counts, 0) }
    })
}

unsafe fn codec(
    name: &'static str,
    device: nvmlDevice_t,
    util: *mut c_uint,
    period: *mut c_uint,
) -> nvmlReturn_t {
    board_query(name, device, |_, _, _, _| {
        // SAFETY: checked for NULL by `out`.
        unsafe {
            out(util, 0)?;
            out(period, 167_000)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    samplingPeriodUs: *mut c_uint,
) -> nvmlReturn_t {
    codec(
        "nvmlDeviceGetEncoderUtilization",
        device,
        utilization,
        samplingPeriodUs,
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    samplingPeriodUs: *mut c_uint,
) -> nvmlReturn_t {
    codec(
        "nvmlDeviceGetDecoderUtilization",
        device,
        utilization,
        samplingPeriodUs,
    )
}

/// No process had non-zero utilization: "If no valid sample entries are found since the
/// lastSeenTimeStamp, NVML_ERROR_NOT_FOUND is returned" (nvml.h).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    _utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    _last_seen: c_ulonglong,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetProcessUtilization", device, |_, _, _, _| {
        // SAFETY: checked for NULL by `out`.
        unsafe { out(count, 0)? };
        Err(NVML_ERROR_NOT_FOUND_SAMPLES)
    })
}

/// Memory clock at its maximum; SM/graphics clocks at the maximum while a process uses the
/// device, at an idle 210 MHz otherwise.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    kind: c_uint,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetClockInfo", device, |sim, d, faults, b| {
        let v = match kind {
            0 | 1 | 3 if busy(sim, d, faults) => b.max_sm_mhz,
            0 | 1 | 3 => 210,
            2 => b.max_mem_mhz,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        // SAFETY: checked for NULL by `out`.
        unsafe { out(clock, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    kind: c_uint,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetMaxClockInfo", device, |_, _, _, b| {
        let v = match kind {
            0 | 1 | 3 => b.max_sm_mhz,
            2 => b.max_mem_mhz,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        // SAFETY: checked for NULL by `out`.
        unsafe { out(clock, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: c_uint,
    value: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetPcieThroughput", device, |_, _, _, _| {
        if counter > 1 {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: checked for NULL by `out`.
        unsafe { out(value, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(
    device: nvmlDevice_t,
    t: *mut nvmlTemperature_t,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetTemperatureV", device, |_, _, _, _| {
        if t.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: checked for NULL above; the caller's struct.
        let v = unsafe { &mut *t };
        if v.version != NVML_TEMPERATURE_V1 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        if v.sensorType != NVML_TEMPERATURE_GPU {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        v.temperature = vramdoc_sim::TEMPERATURE_C as c_int;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
    board_query(
        "nvmlDeviceGetCudaComputeCapability",
        device,
        |_, d, _, _| {
            let ((ma, mi), _) = vramdoc_sim::spec::arch_of(&d.name);
            // SAFETY: checked for NULL by `out`.
            unsafe {
                out(major, ma)?;
                out(minor, mi)
            }
        },
    )
}

/// MIG is off on every simulated GPU; boards before Ampere (and GeForce) have none.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetMigMode", device, |_, _, _, b| {
        if !b.mig {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        // SAFETY: checked for NULL by `out`.
        unsafe {
            out(current, DISABLED)?;
            out(pending, DISABLED)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetMaxMigDeviceCount", device, |_, _, _, b| {
        // SAFETY: checked for NULL by `out`.
        unsafe { out(count, if b.mig { 7 } else { 0 }) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    is_mig: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceIsMigDeviceHandle", device, |_, _, _, _| {
        // SAFETY: checked for NULL by `out`.
        unsafe { out(is_mig, 0) }
    })
}

/// Datacenter boards have a serial number (derived from the UUID); GeForce boards do not.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    device: nvmlDevice_t,
    serial: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetSerial", device, |_, d, _, b| {
        if !b.datacenter {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        let digits: String = d
            .uuid
            .bytes()
            .filter(u8::is_ascii_hexdigit)
            .map(|c| char::from(b'0' + (c % 10)))
            .take(13)
            .collect();
        // SAFETY: caller's buffer of `length` bytes; NULL checked in write_str.
        unsafe { write_str(serial, length, &digits) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: nvmlDevice_t,
    minor: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetMinorNumber", device, |_, d, _, _| {
        // SAFETY: checked for NULL by `out`.
        unsafe { out(minor, d.minor()) }
    })
}

/// The host NUMA node the GPU's memory is, on coherent-memory boxes (GH200, GB200): "This
/// only applies to platforms where the GPUs are NUMA nodes" (nvml.h).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(
    device: nvmlDevice_t,
    node: *mut c_uint,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetNumaNodeId", device, |_, d, _, _| {
        let n = d.numa_node.ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        // SAFETY: checked for NULL by `out`.
        unsafe { out(node, n) }
    })
}

/// BAR1: the whole framebuffer on datacenter boards, 256 MiB on GeForce; nothing mapped.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetBAR1MemoryInfo(
    device: nvmlDevice_t,
    bar1: *mut nvmlBAR1Memory_t,
) -> nvmlReturn_t {
    board_query("nvmlDeviceGetBAR1MemoryInfo", device, |_, d, _, b| {
        let total = if b.datacenter {
            d.total.next_power_of_two()
        } else {
            256 << 20
        };
        // SAFETY: checked for NULL by `out`.
        unsafe {
            out(
                bar1,
                nvmlBAR1Memory_t {
                    bar1Total: total,
                    bar1Free: total,
                    bar1Used: 0,
                },
            )
        }
    })
}

/// Confidential computing is not enabled on simulated boards. Absent before R535 (nvitop uses
/// its presence, with `nvmlDeviceGetRunningProcessDetailList`'s absence, to recognise R535).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetConfComputeMemSizeInfo(
    device: nvmlDevice_t,
    _info: *mut c_void,
) -> nvmlReturn_t {
    board_query(
        "nvmlDeviceGetConfComputeMemSizeInfo",
        device,
        |sim, _, _, _| {
            if !sim.config().nvml_api().conf_compute {
                return Err(NVML_ERROR_FUNCTION_NOT_FOUND);
            }
            Err(NVML_ERROR_NOT_SUPPORTED)
        },
    )
}
