//! Entry points: device enumeration and handles (by index, UUID, PCI bus id), static facts
//! (name, UUID, index, PCI info), memory (v1 and v2), and utilization and temperature (the
//! simulator models memory only: 0 % and a fixed temperature).

use super::*;

fn device_count(count: *mut c_uint) -> nvmlReturn_t {
    done((|| {
        current()?;
        // SAFETY: checked for NULL by `out`.
        unsafe { out(count, mounted().len() as c_uint) }
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(deviceCount: *mut c_uint) -> nvmlReturn_t {
    guard("nvmlDeviceGetCount_v2", || device_count(deviceCount))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(deviceCount: *mut c_uint) -> nvmlReturn_t {
    guard("nvmlDeviceGetCount", || device_count(deviceCount))
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
    guard("nvmlDeviceGetHandleByIndex_v2", || {
        handle_by_index(index, device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetHandleByIndex", || {
        handle_by_index(index, device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetHandleByUUID", || {
        done((|| {
            let nvml = current()?;
            let sim = nvml.sim();
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
                .find(|d| d.uuid.eq_ignore_ascii_case(want));
            if let Some(dev) = dev {
                return out(device, handle_for(dev.index));
            }
            // A MIG device UUID gives that instance's MIG device handle, where this caller
            // can open it (rapidsai/cudf dask_cudf `_get_device_size`: "This works for both
            // MIG and non-MIG device UUIDs").
            let key = super::mig::openable_by_uuid(&nvml, want).ok_or(NVML_ERROR_NOT_FOUND)?;
            out(device, mig_handle_for(key))
        })())
    })
}

/// `[domain:]bus:device.function` in hex → (domain, bus, device, function).
pub(super) fn parse_bus_id(s: &str) -> Option<(u32, u32, u32, u32)> {
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
        let nvml = current()?;
        let sim = nvml.sim();
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
    guard("nvmlDeviceGetHandleByPciBusId_v2", || {
        handle_by_pci(pciBusId, device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    pciBusId: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetHandleByPciBusId", || {
        handle_by_pci(pciBusId, device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetName", || {
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
    guard("nvmlDeviceGetUUID", || {
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
    guard("nvmlDeviceGetIndex", || {
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
    guard("nvmlDeviceGetPciInfo_v3", || pci_info(device, pci))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetPciInfo_v2", || pci_info(device, pci))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetPciInfo", || pci_info(device, pci))
}

/// v1: what the core's [`SimNvml::memory_v1`] says (the reservation counted by driver branch).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetMemoryInfo", || {
        done((|| {
            let (nvml, index) = session_and_index(device)?;
            let m = nvml.memory_v1(index).map_err(|e| sim_code(&e))?;
            // SAFETY: checked for NULL by `out`.
            unsafe {
                out(
                    memory,
                    nvmlMemory_t {
                        total: m.total,
                        free: m.free,
                        used: m.used,
                    },
                )
            }
        })())
    })
}

/// v2: the core's [`SimNvml::memory`]; then the struct: `version` must be `nvmlMemory_v2`
/// (R510–R520 answer a wrong one with `FUNCTION_NOT_FOUND`, nvidia-settings#78).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetMemoryInfo_v2", || {
        done((|| {
            let (nvml, index) = session_and_index(device)?;
            let m = nvml.memory(index).map_err(|e| sim_code(&e))?;
            if memory.is_null() {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            // SAFETY: checked for NULL above; the caller set `version`.
            if unsafe { (*memory).version } != NVML_MEMORY_V2_VERSION {
                return Err(
                    if nvml
                        .sim()
                        .config()
                        .nvml_api()
                        .wrong_version_is_function_not_found
                    {
                        NVML_ERROR_FUNCTION_NOT_FOUND
                    } else {
                        NVML_ERROR_ARGUMENT_VERSION_MISMATCH
                    },
                );
            }
            let v = nvmlMemory_v2_t {
                version: NVML_MEMORY_V2_VERSION,
                total: m.total,
                reserved: m.reserved,
                free: m.free,
                used: m.used,
            };
            // SAFETY: checked for NULL above.
            unsafe { out(memory, v) }
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetUtilizationRates", || {
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
    guard("nvmlDeviceGetTemperature", || {
        done(with_device(device, |_, _, _| {
            if sensorType != NVML_TEMPERATURE_GPU {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            // SAFETY: checked for NULL by `out`.
            unsafe { out(temp, vramdoc_sim::TEMPERATURE_C) }
        }))
    })
}

/// NVLink and fabric queries (PyTorch's c10 resolves them at start and asks on its
/// out-of-memory path and for peer topology): a simulated GPU has no NVLink and belongs to
/// no NVSwitch fabric, so each answers `NVML_ERROR_NOT_SUPPORTED` — what NVML answers on a
/// PCIe-only GPU — after checking the handle.
fn no_nvlink(device: nvmlDevice_t) -> nvmlReturn_t {
    done(with_device(device, |_, _, _| {
        Err::<(), _>(NVML_ERROR_NOT_SUPPORTED)
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(
    device: nvmlDevice_t,
    _link: c_uint,
    _kind: *mut c_uint,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetNvLinkRemoteDeviceType", || no_nvlink(device))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    device: nvmlDevice_t,
    _link: c_uint,
    _pci: *mut c_void,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetNvLinkRemotePciInfo_v2", || no_nvlink(device))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: nvmlDevice_t,
    _link: c_uint,
    _active: *mut c_uint,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetNvLinkState", || no_nvlink(device))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfoV(
    device: nvmlDevice_t,
    _info: *mut c_void,
) -> nvmlReturn_t {
    guard("nvmlDeviceGetGpuFabricInfoV", || no_nvlink(device))
}
