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
                // The _ptds/_ptsz forms exist from 7.0, or from the function's own version.
                t.push(($base, ($ver).max(7000), true, $f as *const () as usize));
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
        // The 7.0 and 11.0 forms share a signature (cudaTypedefs.h): the runtime asks at 7000.
        v!(
            "cuDevicePrimaryCtxRelease",
            7000,
            cuDevicePrimaryCtxRelease_v2
        );
        v!(
            "cuDevicePrimaryCtxRelease",
            11000,
            cuDevicePrimaryCtxRelease_v2
        );
        v!("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset_v2);
        v!("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2);
        v!(
            "cuDevicePrimaryCtxSetFlags",
            7000,
            cuDevicePrimaryCtxSetFlags_v2
        );
        v!(
            "cuDevicePrimaryCtxSetFlags",
            11000,
            cuDevicePrimaryCtxSetFlags_v2
        );
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
        // What the CUDA runtime, cuBLAS and PyTorch's c10 driver API ask for besides
        // (versions from cudaTypedefs.h of CUDA 13.2).
        v!("cuGetExportTable", 3000, cuGetExportTable);
        v!("cuDeviceGetByPCIBusId", 4010, cuDeviceGetByPCIBusId);
        v!("cuDeviceGetP2PAttribute", 8000, cuDeviceGetP2PAttribute);
        v!(
            "cuDeviceGetDefaultMemPool",
            11020,
            cuDeviceGetDefaultMemPool
        );
        v!("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool);
        v!("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute);
        v!("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute);
        v!("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo);
        s!("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync);
        v!(
            "cuFlushGPUDirectRDMAWrites",
            11030,
            cuFlushGPUDirectRDMAWrites
        );
        v!("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion);
        v!("cuCtxGetId", 12000, cuCtxGetId);
        v!("cuCtxGetFlags", 7000, cuCtxGetFlags);
        v!("cuCtxSetFlags", 12010, cuCtxSetFlags);
        v!("cuCtxGetLimit", 3010, cuCtxGetLimit);
        v!("cuCtxSetLimit", 3010, cuCtxSetLimit);
        v!("cuCtxGetCacheConfig", 3020, cuCtxGetCacheConfig);
        v!("cuCtxSetCacheConfig", 3020, cuCtxSetCacheConfig);
        v!("cuCtxGetSharedMemConfig", 4020, cuCtxGetSharedMemConfig);
        v!(
            "cuCtxResetPersistingL2Cache",
            11000,
            cuCtxResetPersistingL2Cache
        );
        v!("cuCtxGetDevice", 13000, cuCtxGetDevice_v2);
        v!("cuCtxSynchronize", 13000, cuCtxSynchronize_v2);
        v!("cuProfilerStart", 4000, cuProfilerStart);
        v!("cuProfilerStop", 4000, cuProfilerStop);
        v!("cuStreamGetFlags", 5050, cuStreamGetFlags);
        v!("cuStreamGetPriority", 5050, cuStreamGetPriority);
        v!("cuStreamGetId", 12000, cuStreamGetId);
        v!("cuStreamGetCtx", 9020, cuStreamGetCtx);
        v!("cuStreamGetCtx", 12050, cuStreamGetCtx_v2);
        v!("cuStreamGetDevice", 12080, cuStreamGetDevice);
        s!("cuStreamAddCallback", 5000, cuStreamAddCallback);
        s!("cuLaunchHostFunc", 10000, cuLaunchHostFunc);
        v!("cuLaunchHostFunc", 13010, cuLaunchHostFunc);
        s!("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags);
        v!("cuStreamBeginCapture", 10000, cuStreamBeginCapture_v2);
        v!("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2);
        v!("cuStreamEndCapture", 10000, cuStreamEndCapture);
        v!("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo);
        v!("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2);
        v!("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3);
        v!("cuStreamIsCapturing", 10000, cuStreamIsCapturing);
        v!(
            "cuThreadExchangeStreamCaptureMode",
            10010,
            cuThreadExchangeStreamCaptureMode
        );
        v!("cuGraphCreate", 10000, cuGraphCreate);
        v!(
            "cuGraphInstantiateWithFlags",
            11040,
            cuGraphInstantiateWithFlags
        );
        v!(
            "cuGraphInstantiateWithParams",
            12000,
            cuGraphInstantiateWithParams
        );
        v!("cuGraphLaunch", 10000, cuGraphLaunch);
        v!("cuGraphUpload", 11010, cuGraphUpload);
        v!("cuGraphDestroy", 10000, cuGraphDestroy);
        v!("cuGraphExecDestroy", 10000, cuGraphExecDestroy);
        v!("cuModuleGetLoadingMode", 11070, cuModuleGetLoadingMode);
        v!("cuModuleGetGlobal", 3020, cuModuleGetGlobal_v2);
        v!("cuLibraryLoadData", 12000, cuLibraryLoadData);
        v!("cuLibraryLoadFromFile", 12000, cuLibraryLoadFromFile);
        v!("cuLibraryUnload", 12000, cuLibraryUnload);
        v!("cuLibraryGetKernel", 12000, cuLibraryGetKernel);
        v!("cuLibraryGetModule", 12000, cuLibraryGetModule);
        v!("cuLibraryGetGlobal", 12000, cuLibraryGetGlobal);
        v!("cuKernelGetFunction", 12000, cuKernelGetFunction);
        v!("cuKernelGetLibrary", 12050, cuKernelGetLibrary);
        v!("cuLinkCreate", 6050, cuLinkCreate_v2);
        v!("cuLinkAddData", 6050, cuLinkAddData_v2);
        v!("cuLinkAddFile", 6050, cuLinkAddFile_v2);
        v!("cuLinkComplete", 5050, cuLinkComplete);
        v!("cuLinkDestroy", 5050, cuLinkDestroy);
        s!("cuStreamBatchMemOp", 8000, cuStreamBatchMemOp);
        v!("cuKernelGetName", 12030, cuKernelGetName);
        v!("cuKernelGetAttribute", 12000, cuKernelGetAttribute);
        v!("cuKernelSetAttribute", 12000, cuKernelSetAttribute);
        v!("cuKernelSetCacheConfig", 12000, cuKernelSetCacheConfig);
        v!("cuFuncGetAttribute", 2020, cuFuncGetAttribute);
        v!("cuFuncSetAttribute", 9000, cuFuncSetAttribute);
        v!("cuFuncSetCacheConfig", 3000, cuFuncSetCacheConfig);
        v!("cuFuncGetName", 12030, cuFuncGetName);
        v!("cuFuncGetModule", 11000, cuFuncGetModule);
        v!(
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            6050,
            cuOccupancyMaxActiveBlocksPerMultiprocessor
        );
        v!(
            "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
            7000,
            cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags
        );
        v!(
            "cuOccupancyMaxPotentialBlockSize",
            6050,
            cuOccupancyMaxPotentialBlockSize
        );
        v!(
            "cuOccupancyAvailableDynamicSMemPerBlock",
            10020,
            cuOccupancyAvailableDynamicSMemPerBlock
        );
        v!(
            "cuOccupancyMaxPotentialClusterSize",
            11070,
            cuOccupancyMaxPotentialClusterSize
        );
        v!(
            "cuOccupancyMaxActiveClusters",
            11070,
            cuOccupancyMaxActiveClusters
        );
        s!("cuLaunchKernelEx", 11060, cuLaunchKernelEx);
        s!("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel);
        v!("cuPointerGetAttribute", 4000, cuPointerGetAttribute);
        v!("cuPointerGetAttributes", 7000, cuPointerGetAttributes);
        v!("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2);
        v!("cuMemHostRegister", 4000, cuMemHostRegister_v2);
        v!("cuMemHostRegister", 6050, cuMemHostRegister_v2);
        v!("cuMemHostUnregister", 4000, cuMemHostUnregister);
        v!(
            "cuMemHostGetDevicePointer",
            3020,
            cuMemHostGetDevicePointer_v2
        );
        v!("cuMemHostGetFlags", 2030, cuMemHostGetFlags);
        s!("cuMemcpy", 4000, cuMemcpy);
        s!("cuMemcpyAsync", 4000, cuMemcpyAsync);
        s!("cuMemcpy2D", 3020, cuMemcpy2D_v2);
        s!("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2);
        s!("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2);
        s!("cuMemcpy3D", 3020, cuMemcpy3D_v2);
        s!("cuMemcpy3DAsync", 3020, cuMemcpy3DAsync_v2);
        s!("cuMemcpyBatchAsync", 12080, cuMemcpyBatchAsync);
        v!("cuMemcpyBatchAsync", 13000, cuMemcpyBatchAsync_v2);
        s!("cuMemsetD16", 3020, cuMemsetD16_v2);
        s!("cuMemsetD16Async", 3020, cuMemsetD16Async);
        s!("cuMemPrefetchAsync", 8000, cuMemPrefetchAsync);
        s!("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2);
        v!("cuMemAdvise", 8000, cuMemAdvise_v2);
        v!("cuMemAdvise", 12020, cuMemAdvise_v2);
        v!(
            "cuMemGetAllocationGranularity",
            10020,
            cuMemGetAllocationGranularity
        );
        v!("cuMemAddressReserve", 10020, cuMemAddressReserve);
        v!("cuMemAddressFree", 10020, cuMemAddressFree);
        v!("cuMemCreate", 10020, cuMemCreate);
        v!("cuMemRelease", 10020, cuMemRelease);
        v!("cuMemMap", 10020, cuMemMap);
        v!("cuMemUnmap", 10020, cuMemUnmap);
        v!("cuMemSetAccess", 10020, cuMemSetAccess);
        v!(
            "cuMemRetainAllocationHandle",
            11000,
            cuMemRetainAllocationHandle
        );
        v!(
            "cuMemGetAllocationPropertiesFromHandle",
            10020,
            cuMemGetAllocationPropertiesFromHandle
        );
        v!(
            "cuMemExportToShareableHandle",
            10020,
            cuMemExportToShareableHandle
        );
        v!(
            "cuMemImportFromShareableHandle",
            10020,
            cuMemImportFromShareableHandle
        );
        v!("cuMulticastCreate", 12010, cuMulticastCreate);
        v!("cuMulticastAddDevice", 12010, cuMulticastAddDevice);
        v!("cuMulticastBindMem", 12010, cuMulticastBindMem);
        v!("cuMulticastUnbind", 12010, cuMulticastUnbind);
        s!("cuStreamWriteValue32", 8000, cuStreamWriteValue32);
        s!("cuStreamWaitValue32", 8000, cuStreamWaitValue32);
        v!("cuDeviceGetDevResource", 12040, cuDeviceGetDevResource);
        v!("cuGreenCtxCreate", 12040, cuGreenCtxCreate);
        v!("cuLogsRegisterCallback", 12090, cuLogsRegisterCallback);
        v!("cuLogsUnregisterCallback", 12090, cuLogsUnregisterCallback);
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
        Ok(f) => {
            record::trace(|| format!("cuGetProcAddress({name}, {version}) -> served"));
            (f, CU_GET_PROC_ADDRESS_SUCCESS)
        }
        Err(st) => {
            // Never a silent NULL: the box records what was asked for (sim status --calls).
            record::missing(name, version);
            (0, st)
        }
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
    guard("cuGetProcAddress_v2", || {
        get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus)
    })
}

/// The CUDA 11.3–11.8 form, without the status.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
) -> CUresult {
    guard("cuGetProcAddress", || {
        get_proc_address(symbol, pfn, cudaVersion, flags, std::ptr::null_mut())
    })
}
