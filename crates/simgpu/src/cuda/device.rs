//! Entry points: devices (count, names, UUIDs, memory, PCI ids, attributes).

use super::*;
use vramdoc_sim::spec::arch_of;

pub(super) fn pci_parts(bus_id: &str) -> (i32, i32, i32) {
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
    with_driver("cuDeviceGetCount", |d| {
        out(count, d.proc.device_count() as c_int)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    with_driver("cuDeviceGet", |d| {
        d.ordinal(ordinal)?;
        out(device, ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    with_driver("cuDeviceGetName", |d| {
        let o = d.ordinal(dev)?;
        let n = d.proc.device(o).map_err(code)?.name.clone();
        write_cstr(name, len, &n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    with_driver("cuDeviceGetUuid", |d| {
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
    with_driver("cuDeviceTotalMem_v2", |d| {
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
    with_driver("cuDeviceGetPCIBusId", |d| {
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
    with_driver("cuDeviceGetAttribute", |d| {
        let o = d.ordinal(dev)?;
        let info = d.proc.device(o).map_err(code)?;
        let ((major, minor), sms) = arch_of(&info.name);
        let (domain, bus, device) = pci_parts(&info.pci_bus_id);
        let v = attribute_value(
            attrib,
            (major, minor),
            sms,
            (domain, bus, device),
            info.numa_node,
        )
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        out(pi, v)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(
    dev: *mut CUdevice,
    bus_id: *const c_char,
) -> CUresult {
    with_driver("cuDeviceGetByPCIBusId", |d| {
        nonnull(dev)?;
        nonnull(bus_id)?;
        // SAFETY: NUL-terminated id per cuda.h.
        let want = unsafe { CStr::from_ptr(bus_id) }
            .to_string_lossy()
            .to_ascii_lowercase();
        let parse = |s: &str| {
            let s = s.to_ascii_lowercase();
            // `[domain]:[bus]:[device].[function]`, the domain 4 or 8 hex digits.
            let mut it = s.rsplitn(3, ':');
            let devfn = it.next().unwrap_or_default().to_string();
            let bus = it.next().and_then(|b| u32::from_str_radix(b, 16).ok());
            let domain = it
                .next()
                .map_or(Some(0), |x| u32::from_str_radix(x, 16).ok());
            (domain, bus, devfn)
        };
        let target = parse(&want);
        for o in 0..d.proc.device_count() {
            let id = d.proc.device(o).map_err(code)?.pci_bus_id.clone();
            if parse(&id) == target {
                return out(dev, o as CUdevice);
            }
        }
        Err(CUDA_ERROR_INVALID_DEVICE)
    })
}

/// `CUdevice_P2PAttribute`: performance rank, access, native atomics, array access.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetP2PAttribute(
    value: *mut c_int,
    attrib: c_int,
    src: CUdevice,
    dst: CUdevice,
) -> CUresult {
    with_driver("cuDeviceGetP2PAttribute", |d| {
        let a = d.proc.physical(d.ordinal(src)?).map_err(code)?;
        let b = d.proc.physical(d.ordinal(dst)?).map_err(code)?;
        if a == b {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        let peer = d.proc.sim().can_access_peer(a, b) as c_int;
        let v = match attrib {
            1 => 0,
            2..=4 => peer,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        out(value, v)
    })
}

/// `cuDeviceGetDefaultMemPool`, `cuDeviceGetMemPool`: one pool handle per device, for the
/// stream-ordered allocator (`cuMemAllocAsync`).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut usize, dev: CUdevice) -> CUresult {
    with_driver("cuDeviceGetDefaultMemPool", |d| {
        let o = d.ordinal(dev)?;
        out(pool, POOL_BASE + o as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut usize, dev: CUdevice) -> CUresult {
    with_driver("cuDeviceGetMemPool", |d| {
        let o = d.ordinal(dev)?;
        out(pool, POOL_BASE + o as usize)
    })
}

/// Handles of the devices' default memory pools.
pub(super) const POOL_BASE: usize = 0x900d_0000;

fn pool_ordinal(d: &Driver, pool: usize) -> Result<u32, CUresult> {
    let o = pool
        .checked_sub(POOL_BASE)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    d.ordinal(o as CUdevice)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: usize,
    _attr: c_int,
    value: *mut c_void,
) -> CUresult {
    with_driver("cuMemPoolSetAttribute", |d| {
        pool_ordinal(d, pool)?;
        nonnull(value)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: usize,
    attr: c_int,
    value: *mut c_void,
) -> CUresult {
    with_driver("cuMemPoolGetAttribute", |d| {
        pool_ordinal(d, pool)?;
        nonnull(value)?;
        // REUSE_* flags (1..3) are on; thresholds and counters (4..8) read 0.
        match attr {
            1..=3 => out(value as *mut c_int, 1),
            4..=8 => out(value as *mut u64, 0),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: usize, _keep: usize) -> CUresult {
    with_driver("cuMemPoolTrimTo", |d| pool_ordinal(d, pool).map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemAllocFromPoolAsync", |d| {
        nonnull(dptr)?;
        let o = pool_ordinal(d, pool)?;
        let ctx = d.stream_ctx(stream)?;
        if d.contexts[&ctx].ordinal != o {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let p = d.alloc(ctx, bytes)?;
        d.pooled.insert(p);
        out(dptr, p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFlushGPUDirectRDMAWrites(_target: c_int, _scope: c_int) -> CUresult {
    with_driver("cuFlushGPUDirectRDMAWrites", |_| Ok(()))
}

/// Per-architecture limits (CUDA C++ Programming Guide, "Compute Capabilities", table of
/// technical specifications): shared memory per multiprocessor and the opt-in per block, the
/// threads and blocks one multiprocessor holds.
pub(super) struct ArchLimits {
    pub(super) smem_per_sm: i32,
    pub(super) smem_optin: i32,
    pub(super) threads_per_sm: i32,
    pub(super) blocks_per_sm: i32,
    pub(super) l2_bytes: i32,
}

pub(super) fn arch_limits((major, minor): (i32, i32)) -> ArchLimits {
    let kib = 1024;
    match (major, minor) {
        (9, _) | (10, _) | (12, _) => ArchLimits {
            smem_per_sm: 228 * kib,
            smem_optin: 227 * kib,
            threads_per_sm: 2048,
            blocks_per_sm: 32,
            l2_bytes: 50 * kib * kib,
        },
        (8, 0) => ArchLimits {
            smem_per_sm: 164 * kib,
            smem_optin: 163 * kib,
            threads_per_sm: 2048,
            blocks_per_sm: 32,
            l2_bytes: 40 * kib * kib,
        },
        (8, 9) => ArchLimits {
            smem_per_sm: 100 * kib,
            smem_optin: 99 * kib,
            threads_per_sm: 1536,
            blocks_per_sm: 24,
            l2_bytes: 48 * kib * kib,
        },
        (8, _) => ArchLimits {
            smem_per_sm: 100 * kib,
            smem_optin: 99 * kib,
            threads_per_sm: 1536,
            blocks_per_sm: 16,
            l2_bytes: 6 * kib * kib,
        },
        (7, 5) => ArchLimits {
            smem_per_sm: 64 * kib,
            smem_optin: 64 * kib,
            threads_per_sm: 1024,
            blocks_per_sm: 16,
            l2_bytes: 4 * kib * kib,
        },
        _ => ArchLimits {
            smem_per_sm: 96 * kib,
            smem_optin: 96 * kib,
            threads_per_sm: 2048,
            blocks_per_sm: 32,
            l2_bytes: 6 * kib * kib,
        },
    }
}

/// `cuDeviceGetAttribute`'s answer for a device of compute capability `cc` with `sms`
/// multiprocessors (cuda.h `CUdevice_attribute`; `None`: not an attribute of this driver).
/// Capabilities a simulated device has (unified addressing, managed memory, the virtual
/// memory API, memory pools, stream priorities, cooperative launches) read 1; texture and
/// surface limits are the ones every current GPU reports.
fn attribute_value(
    attrib: c_int,
    cc: (i32, i32),
    sms: i32,
    (domain, bus, device): (i32, i32, i32),
    numa: Option<u32>,
) -> Option<c_int> {
    let a = arch_limits(cc);
    Some(match attrib {
        1 => 1024,                   // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,               // MAX_BLOCK_DIM_X / Y
        4 => 64,                     // MAX_BLOCK_DIM_Z
        5 => i32::MAX,               // MAX_GRID_DIM_X
        6 | 7 => 65535,              // MAX_GRID_DIM_Y / Z
        8 => 48 * 1024,              // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 64 * 1024,              // TOTAL_CONSTANT_MEMORY
        10 => 32,                    // WARP_SIZE
        11 => i32::MAX,              // MAX_PITCH
        12 => 65536,                 // MAX_REGISTERS_PER_BLOCK
        13 => 1_410_000,             // CLOCK_RATE (kHz)
        14 => 512,                   // TEXTURE_ALIGNMENT
        15 => 1,                     // GPU_OVERLAP
        16 => sms,                   // MULTIPROCESSOR_COUNT
        17 => 0,                     // KERNEL_EXEC_TIMEOUT
        18 => 0,                     // INTEGRATED
        19 => 1,                     // CAN_MAP_HOST_MEMORY
        20 => 0,                     // COMPUTE_MODE: default
        21 | 22 | 69 | 70 => 131072, // texture 1D/2D widths
        23 | 71 => 65536,            // texture 2D heights
        24..=26 | 47..=49 => 16384,  // texture 3D
        27 | 28 | 42 | 45 | 46 | 52 | 53 | 55..=68 | 72..=74 | 77 => 32768,
        29 | 43 | 54 => 2048,      // layered layers
        30 => 512,                 // SURFACE_ALIGNMENT
        31 => 1,                   // CONCURRENT_KERNELS
        32 => 1,                   // ECC_ENABLED
        33 => bus,                 // PCI_BUS_ID
        34 => device,              // PCI_DEVICE_ID
        35 => 0,                   // TCC_DRIVER
        36 => 2_619_000,           // MEMORY_CLOCK_RATE (kHz)
        37 => 5120,                // GLOBAL_MEMORY_BUS_WIDTH
        38 => a.l2_bytes,          // L2_CACHE_SIZE
        39 => a.threads_per_sm,    // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 2,                   // ASYNC_ENGINE_COUNT
        41 => 1,                   // UNIFIED_ADDRESSING
        44 => 1,                   // CAN_TEX2D_GATHER
        50 => domain,              // PCI_DOMAIN_ID
        51 => 32,                  // TEXTURE_PITCH_ALIGNMENT
        75 => cc.0,                // COMPUTE_CAPABILITY_MAJOR
        76 => cc.1,                // COMPUTE_CAPABILITY_MINOR
        78..=80 => 1,              // STREAM_PRIORITIES, GLOBAL/LOCAL_L1_CACHE_SUPPORTED
        81 => a.smem_per_sm,       // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,               // MAX_REGISTERS_PER_MULTIPROCESSOR
        83 => 1,                   // MANAGED_MEMORY
        84 | 85 => 0,              // MULTI_GPU_BOARD, its group id
        86 => 0,                   // HOST_NATIVE_ATOMIC_SUPPORTED
        87 => 2,                   // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        88 => 0,                   // PAGEABLE_MEMORY_ACCESS
        89 | 90 => 1,              // CONCURRENT_MANAGED_ACCESS, COMPUTE_PREEMPTION
        91 => 1,                   // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
        92..=94 => 0,              // stream memory operations (v1)
        95 => 1,                   // COOPERATIVE_LAUNCH
        96 => 0,                   // COOPERATIVE_MULTI_DEVICE_LAUNCH
        97 => a.smem_optin,        // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        98 => 1,                   // CAN_FLUSH_REMOTE_WRITES
        99 => 1,                   // HOST_REGISTER_SUPPORTED
        100 | 101 => 0,            // pageable access through host page tables
        102 => 1,                  // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        103 => 1,                  // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
        104 | 105 => 0,            // Windows handles
        106 => a.blocks_per_sm,    // MAX_BLOCKS_PER_MULTIPROCESSOR
        107 => 0,                  // GENERIC_COMPRESSION_SUPPORTED
        108 => a.l2_bytes / 4 * 3, // MAX_PERSISTING_L2_CACHE_SIZE
        109 => 128 * 1024 * 1024,  // MAX_ACCESS_POLICY_WINDOW_SIZE
        110 => 0,                  // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
        111 => 1024,               // RESERVED_SHARED_MEMORY_PER_BLOCK
        112 | 113 => 1,            // SPARSE_CUDA_ARRAY, READ_ONLY_HOST_REGISTER
        114 => 1,                  // TIMELINE_SEMAPHORE_INTEROP_SUPPORTED
        115 => 1,                  // MEMORY_POOLS_SUPPORTED: cudarc then uses cuMemAllocAsync
        116..=118 => 0,            // GPU Direct RDMA
        119 => (cc.0 >= 9) as i32, // CLUSTER_LAUNCH: Hopper on
        120 => 1,                  // DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED
        121 | 122 => 0,            // 64-bit stream mem ops, wait value NOR
        123 => 1,                  // DMA_BUF_SUPPORTED
        124 => 0,                  // IPC_EVENT_SUPPORTED
        125 => 1,                  // MEM_SYNC_DOMAIN_COUNT
        126 | 127 => 0,            // tensor map access, handle type fabric
        128 => 0,                  // UNIFIED_FUNCTION_POINTERS
        // NUMA_CONFIG: CU_DEVICE_NUMA_CONFIG_NUMA_NODE (1) on coherent-memory boards.
        130 => numa.is_some() as i32,
        131 => numa.map_or(-1, |n| n as i32), // NUMA_ID of the GPU memory
        132 => 0,                             // MULTICAST_SUPPORTED
        133 => 0,                             // MPS_ENABLED: no MPS server
        134 => numa.map_or(-1, |n| n as i32), // HOST_NUMA_ID
        a if (1..256).contains(&a) => 0,
        _ => return None,
    })
}
