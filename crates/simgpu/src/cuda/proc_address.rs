//! Entry points: `cuGetProcAddress_v2` (CUDA 12) and `cuGetProcAddress` (11.3–11.8): the
//! driver's own table of its functions by **base name** and the CUDA version that introduced
//! each ABI variant, so clients that resolve everything through it (NVIDIA's CUDA Python
//! bindings dlsym only `cuDriverGetVersion` and `cuGetProcAddress_v2`) get the same driver.
//!
//! Semantics, after the CUDA Driver API reference (Driver Entry Point Access): for `symbol`
//! and `cudaVersion`, the newest variant introduced at or before `cudaVersion` (`"cuMemAlloc"`
//! @3020 → `cuMemAlloc_v2`); with `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` the
//! per-thread-default-stream variants (`_ptds`/`_ptsz`, introduced at 7000) where they exist —
//! here the same functions, since every stream runs synchronously. A version above the
//! driver's → `CUDA_ERROR_INVALID_VALUE`; an unknown symbol → `CUDA_SUCCESS` with `*pfn =
//! NULL` and status `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`; a symbol only newer than the
//! version asked → `NULL` and `CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT`.

use super::*;
use std::sync::OnceLock;

/// `CUdriverProcAddressQueryResult`.
const CU_GET_PROC_ADDRESS_SUCCESS: c_int = 0;
const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: c_int = 1;
const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: c_int = 2;
/// `CUdriverProcAddress_flags`.
const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// One variant: base name, the CUDA version that introduced it, whether it is the
/// per-thread-default-stream variant, and the function.
type Entry = (&'static str, c_int, bool, usize);

fn table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t: Vec<Entry> = Vec::new();
        macro_rules! v {
            ($base:literal, $ver:expr, $f:expr) => {
                t.push(($base, $ver, false, $f as *const () as usize))
            };
        }
        // Functions with a per-thread default-stream variant (CUDA 7.0): same function.
        macro_rules! s {
            ($base:literal, $ver:expr, $f:expr) => {{
                t.push(($base, $ver, false, $f as *const () as usize));
                t.push(($base, 7000, true, $f as *const () as usize));
            }};
        }
        v!("cuInit", 2000, cuInit);
        v!("cuDriverGetVersion", 2020, cuDriverGetVersion);
        v!("cuGetErrorName", 6000, cuGetErrorName);
        v!("cuGetErrorString", 6000, cuGetErrorString);
        v!("cuGetProcAddress", 11030, cuGetProcAddress);
        v!("cuGetProcAddress", 12000, cuGetProcAddress_v2);
        v!("cuDeviceGet", 2000, cuDeviceGet);
        v!("cuDeviceGetCount", 2000, cuDeviceGetCount);
        v!("cuDeviceGetName", 2000, cuDeviceGetName);
        v!("cuDeviceGetUuid", 9020, cuDeviceGetUuid);
        v!("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2);
        v!("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2);
        v!("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId);
        v!("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute);
        v!("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer);
        v!("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain);
        v!(
            "cuDevicePrimaryCtxRelease",
            11000,
            cuDevicePrimaryCtxRelease_v2
        );
        v!("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2);
        v!(
            "cuDevicePrimaryCtxGetState",
            7000,
            cuDevicePrimaryCtxGetState
        );
        v!("cuCtxCreate", 3020, cuCtxCreate_v2);
        v!("cuCtxCreate", 11040, cuCtxCreate_v3);
        v!("cuCtxDestroy", 4000, cuCtxDestroy_v2);
        v!("cuCtxGetCurrent", 4000, cuCtxGetCurrent);
        v!("cuCtxSetCurrent", 4000, cuCtxSetCurrent);
        v!("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2);
        v!("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2);
        v!("cuCtxGetDevice", 2000, cuCtxGetDevice);
        v!("cuCtxSynchronize", 2000, cuCtxSynchronize);
        v!(
            "cuCtxGetStreamPriorityRange",
            5050,
            cuCtxGetStreamPriorityRange
        );
        v!("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess);
        v!("cuCtxDisablePeerAccess", 4000, cuCtxDisablePeerAccess);
        v!("cuStreamCreate", 2000, cuStreamCreate);
        v!(
            "cuStreamCreateWithPriority",
            5050,
            cuStreamCreateWithPriority
        );
        v!("cuStreamDestroy", 4000, cuStreamDestroy_v2);
        s!("cuStreamSynchronize", 2000, cuStreamSynchronize);
        s!("cuStreamQuery", 2000, cuStreamQuery);
        s!("cuStreamWaitEvent", 3020, cuStreamWaitEvent);
        v!("cuEventCreate", 2000, cuEventCreate);
        s!("cuEventRecord", 2000, cuEventRecord);
        v!("cuEventQuery", 2000, cuEventQuery);
        v!("cuEventSynchronize", 2000, cuEventSynchronize);
        v!("cuEventElapsedTime", 2000, cuEventElapsedTime);
        v!("cuEventElapsedTime", 12080, cuEventElapsedTime_v2);
        v!("cuEventDestroy", 4000, cuEventDestroy_v2);
        v!("cuMemAlloc", 3020, cuMemAlloc_v2);
        v!("cuMemFree", 3020, cuMemFree_v2);
        v!("cuMemAllocManaged", 6000, cuMemAllocManaged);
        s!("cuMemAllocAsync", 11020, cuMemAllocAsync);
        s!("cuMemFreeAsync", 11020, cuMemFreeAsync);
        v!("cuMemGetInfo", 3020, cuMemGetInfo_v2);
        v!("cuMemAllocHost", 3020, cuMemAllocHost_v2);
        v!("cuMemHostAlloc", 2020, cuMemHostAlloc);
        v!("cuMemFreeHost", 2000, cuMemFreeHost);
        s!("cuMemsetD8", 3020, cuMemsetD8_v2);
        s!("cuMemsetD8Async", 3020, cuMemsetD8Async);
        s!("cuMemsetD32", 3020, cuMemsetD32_v2);
        s!("cuMemsetD32Async", 3020, cuMemsetD32Async);
        s!("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2);
        s!("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2);
        s!("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2);
        s!("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2);
        s!("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2);
        s!("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2);
        s!("cuMemcpyPeer", 4000, cuMemcpyPeer);
        s!("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync);
        v!("cuModuleLoad", 2000, cuModuleLoad);
        v!("cuModuleLoadData", 2000, cuModuleLoadData);
        v!("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx);
        v!("cuModuleUnload", 2000, cuModuleUnload);
        v!("cuModuleGetFunction", 2000, cuModuleGetFunction);
        s!("cuLaunchKernel", 4000, cuLaunchKernel);
        v!("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle);
        v!("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle);
        v!("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2);
        v!("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle);
        t
    })
}

/// The driver API version this library reports (`cuDriverGetVersion`).
fn driver_version() -> c_int {
    match lock().as_ref() {
        Some(d) => d.proc.sim().config().cuda_driver_version,
        None => vramdoc_sim::SimBox::from_env()
            .map(|b| b.config().cuda_driver_version)
            .unwrap_or(vramdoc_sim::InitOptions::default().cuda_driver_version),
    }
}

/// Look `symbol` up for `version` and `flags`: the function, or the query result.
pub fn lookup(symbol: &str, version: c_int, flags: u64) -> Result<usize, c_int> {
    let per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
    let mut known = false;
    let best = table()
        .iter()
        .filter(|(name, _, pt, _)| *name == symbol && (per_thread || !*pt))
        .inspect(|_| known = true)
        .filter(|(_, ver, _, _)| *ver <= version)
        .max_by_key(|(_, ver, pt, _)| (*ver, *pt));
    match best {
        Some((_, _, _, f)) => Ok(*f),
        None if known => Err(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
        None => Err(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND),
    }
}

unsafe fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    if symbol.is_null() || pfn.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pfn = std::ptr::null_mut();
    if version > driver_version() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let name = CStr::from_ptr(symbol).to_str().unwrap_or("");
    let (f, st) = match lookup(name, version, flags) {
        Ok(f) => (f, CU_GET_PROC_ADDRESS_SUCCESS),
        Err(st) => (0, st),
    };
    *pfn = f as *mut c_void;
    if !status.is_null() {
        *status = st;
    }
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
    symbolStatus: *mut c_int,
) -> CUresult {
    guard(|| get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus))
}

/// The CUDA 11.3–11.8 form, without the status.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
) -> CUresult {
    guard(|| get_proc_address(symbol, pfn, cudaVersion, flags, std::ptr::null_mut()))
}
