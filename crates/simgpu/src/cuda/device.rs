//! Entry points: devices (count, names, UUIDs, memory, PCI ids, attributes).

use super::*;
use vramdoc_sim::spec::arch_of;

fn pci_parts(bus_id: &str) -> (i32, i32, i32) {
    // NVML form `00000000:17:00.0`: domain, bus, device.
    let mut it = bus_id.split([':', '.']);
    let domain = it
        .next()
        .and_then(|s| i32::from_str_radix(s, 16).ok())
        .unwrap_or(0);
    let bus = it
        .next()
        .and_then(|s| i32::from_str_radix(s, 16).ok())
        .unwrap_or(0);
    let dev = it
        .next()
        .and_then(|s| i32::from_str_radix(s, 16).ok())
        .unwrap_or(0);
    (domain, bus, dev)
}

/// The 16 bytes of a `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` UUID (zeros if malformed;
/// the box's UUIDs never are).
pub fn uuid_bytes(uuid: &str) -> [u8; 16] {
    vramdoc_gpu_spec::uuid::parse_gpu_uuid(uuid).unwrap_or_default()
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    with_driver(|d| out(count, d.proc.device_count() as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    with_driver(|d| {
        d.ordinal(ordinal)?;
        out(device, ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        let n = d.proc.device(o).map_err(code)?.name.clone();
        write_cstr(name, len, &n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        let u = uuid_bytes(&d.proc.device(o).map_err(code)?.uuid);
        out(uuid, u)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    cuDeviceGetUuid(uuid, dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        // The same total cuMemGetInfo reports for the device.
        out(bytes, d.proc.mem_info(o).map_err(code)?.1 as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(
    bus_id: *mut c_char,
    len: c_int,
    dev: CUdevice,
) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        let (domain, bus, device) = pci_parts(&d.proc.device(o).map_err(code)?.pci_bus_id);
        // CUDA's form: 4-digit domain, `0000:17:00.0`.
        write_cstr(
            bus_id,
            len,
            &format!("{domain:04x}:{bus:02x}:{device:02x}.0"),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    dev: CUdevice,
) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        let info = d.proc.device(o).map_err(code)?;
        let ((major, minor), sms) = arch_of(&info.name);
        let (domain, bus, device) = pci_parts(&info.pci_bus_id);
        let v = match attrib {
            1 => 1024,       // MAX_THREADS_PER_BLOCK
            2 | 3 => 1024,   // MAX_BLOCK_DIM_X / Y
            4 => 64,         // MAX_BLOCK_DIM_Z
            5 => i32::MAX,   // MAX_GRID_DIM_X
            6 | 7 => 65535,  // MAX_GRID_DIM_Y / Z
            8 => 48 * 1024,  // MAX_SHARED_MEMORY_PER_BLOCK
            9 => 64 * 1024,  // TOTAL_CONSTANT_MEMORY
            10 => 32,        // WARP_SIZE
            12 => 65536,     // MAX_REGISTERS_PER_BLOCK
            13 => 1_410_000, // CLOCK_RATE (kHz)
            16 => sms,       // MULTIPROCESSOR_COUNT
            18 => 0,         // INTEGRATED
            20 => 0,         // COMPUTE_MODE: default
            31 => 1,         // CONCURRENT_KERNELS
            32 => 1,         // ECC_ENABLED
            33 => bus,       // PCI_BUS_ID
            34 => device,    // PCI_DEVICE_ID
            39 => 2048,      // MAX_THREADS_PER_MULTIPROCESSOR
            41 => 1,         // UNIFIED_ADDRESSING
            50 => domain,    // PCI_DOMAIN_ID
            75 => major,     // COMPUTE_CAPABILITY_MAJOR
            76 => minor,     // COMPUTE_CAPABILITY_MINOR
            83 => 1,         // MANAGED_MEMORY
            115 => 1,        // MEMORY_POOLS_SUPPORTED: cudarc then uses cuMemAllocAsync
            // NUMA_CONFIG: CU_DEVICE_NUMA_CONFIG_NUMA_NODE (1) on coherent-memory boards.
            130 => info.numa_node.is_some() as i32,
            131 => info.numa_node.map_or(-1, |n| n as i32), // NUMA_ID of the GPU memory
            a if (1..256).contains(&a) => 0,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        out(pi, v)
    })
}
