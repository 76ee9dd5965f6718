//! Entry points: the process lists (compute / graphics / MPS; v1, v2, v3 and the R550+
//! detail list), with the record layout of the box's driver branch.

use super::*;

/// The sizing protocol of nvml.h for every process-list entry point: the processes of
/// `kind` on the device, each written by `make` (record `i` at `infos + i * stride`).
unsafe fn processes<T>(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut T,
    kind: ProcessKind,
    make: fn(c_uint, c_ulonglong, (c_uint, c_uint)) -> T,
) -> nvmlReturn_t {
    done((|| {
        let (nvml, index) = session_and_index(device)?;
        if count.is_null() {
            nvml.device(index).map_err(|e| sim_code(&e))?;
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let list = nvml.processes(index, kind).map_err(|e| sim_code(&e))?;
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
            let used = p.used.unwrap_or(NVML_VALUE_NOT_AVAILABLE_ULL);
            // SAFETY: the caller's array holds `capacity` >= n entries of the record type
            // this driver writes (on R535 that is wider than the header's: the real bug).
            // A process in a MIG instance carries its GPU and compute instance ids.
            let ids = p.instance.unwrap_or((NVML_NO_INSTANCE, NVML_NO_INSTANCE));
            unsafe { infos.add(i).write_unaligned(make(p.pid, used, ids)) };
        }
        Ok(())
    })())
}

fn v1(pid: c_uint, used: c_ulonglong, _: (c_uint, c_uint)) -> nvmlProcessInfo_v1_t {
    nvmlProcessInfo_v1_t {
        pid,
        usedGpuMemory: used,
    }
}

fn v2(pid: c_uint, used: c_ulonglong, (gi, ci): (c_uint, c_uint)) -> nvmlProcessInfo_v2_t {
    nvmlProcessInfo_v2_t {
        pid,
        usedGpuMemory: used,
        gpuInstanceId: gi,
        computeInstanceId: ci,
    }
}

fn detail(pid: c_uint, used: c_ulonglong, (gi, ci): (c_uint, c_uint)) -> nvmlProcessDetail_v1_t {
    nvmlProcessDetail_v1_t {
        pid,
        usedGpuMemory: used,
        gpuInstanceId: gi,
        computeInstanceId: ci,
        usedGpuCcProtectedMemory: 0,
    }
}

/// The layout of the box's driver branch (R525 when no box is initialised).
fn layout() -> RecordLayout {
    lock(&LIB)
        .nvml
        .as_ref()
        .map(|n| n.sim().config().record_layout())
        .unwrap_or(RecordLayout::R525)
}

/// The entry points of the box's driver branch (all of them when no box is initialised).
fn api() -> vramdoc_sim::profile::NvmlApi {
    lock(&LIB)
        .nvml
        .as_ref()
        .map(|n| n.sim().config().nvml_api())
        .unwrap_or_else(|| vramdoc_sim::profile::api_of(vramdoc_sim::profile::DEFAULT_DRIVER))
}

/// `_v3`: declared with `nvmlProcessInfo_v2_t`, but R535 drivers write 32-byte records.
unsafe fn processes_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
    kind: ProcessKind,
) -> nvmlReturn_t {
    if !api().process_v3 {
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    }
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
            guard(stringify!($name), || {
                processes(device, infoCount, infos, $kind, $make)
            })
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
            guard(stringify!($name), || {
                processes_v3(device, infoCount, infos, $kind)
            })
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
    guard("nvmlDeviceGetRunningProcessDetailList", || {
        if !api().detail_list {
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
