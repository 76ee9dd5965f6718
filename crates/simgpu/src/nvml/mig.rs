//! Entry points: MIG — the mode of a GPU, its MIG device handles (by index, minted apart from
//! device handles: [`super::mig_handle_for`]), the parent of a MIG handle, and the GPU and
//! compute instance ids. Every other query (name, UUID, memory, process lists) takes a MIG
//! handle like a device handle and answers for the instance (the core's `SimNvml`, which
//! knows instances by their keys). What nvml-wrapper 0.13's MIG API calls
//! (`Device::mig_mode`, `mig_device_count`, `mig_device_by_index`, `mig_parent_device`,
//! `mig_is_mig_device_handle`), plus the instance ids nvml.h declares.

use super::*;
use vramdoc_sim::board::board_of;
use vramdoc_sim::mig::is_key;

/// `NVML_DEVICE_MIG_DISABLE` / `NVML_DEVICE_MIG_ENABLE`.
const MIG_DISABLE: c_uint = 0;
const MIG_ENABLE: c_uint = 1;

/// The session and the parent GPU behind device handle `h`: MIG handles and boards without
/// MIG are `NOT_SUPPORTED`, as nvml.h documents for the MIG queries.
fn mig_capable(h: nvmlDevice_t) -> R<(Arc<SimNvml>, u32)> {
    let (nvml, index) = session_and_index(h)?;
    let (dev, _) = nvml.device(index).map_err(|e| sim_code(&e))?;
    if is_key(index) || !board_of(&dev.name).mig {
        return Err(NVML_ERROR_NOT_SUPPORTED);
    }
    Ok((nvml, index))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    currentMode: *mut c_uint,
    pendingMode: *mut c_uint,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetMigMode", || {
        done((|| {
            let (nvml, index) = mig_capable(device)?;
            let on = nvml.mig_mode(index).map_err(|e| sim_code(&e))?;
            let mode = if on { MIG_ENABLE } else { MIG_DISABLE };
            // SAFETY: checked for NULL by `out`.
            unsafe {
                out(currentMode, mode)?;
                out(pendingMode, mode)
            }
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetMaxMigDeviceCount", || {
        done((|| {
            let (nvml, index) = session_and_index(device)?;
            let (dev, _) = nvml.device(index).map_err(|e| sim_code(&e))?;
            let max = if !is_key(index) && board_of(&dev.name).mig {
                vramdoc_sim::mig::MAX_INSTANCES
            } else {
                0
            };
            // SAFETY: checked for NULL by `out`.
            unsafe { out(count, max) }
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    isMigDevice: *mut c_uint,
) -> nvmlReturn_t {
    guard("nvmlDeviceIsMigDeviceHandle", || {
        done((|| {
            let (_, index) = session_and_index(device)?;
            // SAFETY: checked for NULL by `out`.
            unsafe { out(isMigDevice, c_uint::from(is_key(index))) }
        })())
    })
}

/// The `index`-th MIG device of a GPU in MIG mode among those this caller can open (a
/// container sees only the instances its runtime gave it).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    migDevice: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetMigDeviceHandleByIndex", || {
        done((|| {
            let (nvml, parent) = mig_capable(device)?;
            if migDevice.is_null() || index >= vramdoc_sim::mig::MAX_INSTANCES {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            let list = nvml.mig_instances(parent).map_err(|e| sim_code(&e))?;
            let m = list.get(index as usize).ok_or(NVML_ERROR_NOT_FOUND)?;
            // SAFETY: checked for NULL above.
            unsafe { out(migDevice, mig_handle_for(m.device.index)) }
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    migDevice: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", || {
        done((|| {
            let (nvml, key) = session_and_index(migDevice)?;
            let m = nvml
                .sim()
                .mig_instance(key)
                .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
            // SAFETY: checked for NULL by `out`.
            unsafe { out(device, handle_for(m.parent)) }
        })())
    })
}

/// `gi` or `ci` of the instance behind a MIG handle (`NOT_SUPPORTED` on a device handle).
fn instance_id(h: nvmlDevice_t, id: *mut c_uint, ci: bool) -> nvmlReturn_t {
    done((|| {
        let (nvml, key) = session_and_index(h)?;
        nvml.device(key).map_err(|e| sim_code(&e))?;
        let m = nvml
            .sim()
            .mig_instance(key)
            .ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        // SAFETY: checked for NULL by `out`.
        unsafe { out(id, if ci { m.ci } else { m.gi }) }
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetGpuInstanceId", || {
        instance_id(device, id, false)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetComputeInstanceId", || {
        instance_id(device, id, true)
    })
}

/// The key of the MIG instance whose `MIG-<uuid>` is `uuid` (case ignored), among those this
/// caller can open (`nvmlDeviceGetHandleByUUID` on a MIG device UUID).
pub(super) fn openable_by_uuid(nvml: &SimNvml, uuid: &str) -> Option<u32> {
    let parents: Vec<u32> = nvml
        .sim()
        .mig_instances()
        .iter()
        .map(|m| m.parent)
        .collect();
    parents.into_iter().find_map(|p| {
        nvml.mig_instances(p)
            .ok()?
            .into_iter()
            .find(|m| m.device.uuid.eq_ignore_ascii_case(uuid))
            .map(|m| m.device.index)
    })
}
