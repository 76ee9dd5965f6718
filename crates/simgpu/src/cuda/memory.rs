//! Entry points: device and host allocations, memset, copies.

use super::*;

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    with_driver("cuMemAlloc_v2", |d| {
        nonnull(dptr)?;
        let ctx = d.current()?;
        let p = d.alloc(ctx, bytes)?;
        out(dptr, p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemAllocAsync", |d| {
        nonnull(dptr)?;
        let ctx = d.stream_ctx(stream)?;
        let p = d.alloc(ctx, bytes)?;
        d.pooled.insert(p);
        out(dptr, p)
    })
}

/// `CU_MEM_ATTACH_GLOBAL`: the memory is accessible from any stream on any device.
const CU_MEM_ATTACH_GLOBAL: c_uint = 0x1;
/// `CU_MEM_ATTACH_HOST`: not accessible from the device until attached to a stream.
const CU_MEM_ATTACH_HOST: c_uint = 0x2;

/// `cuMemAllocManaged`: `flags` must be `CU_MEM_ATTACH_GLOBAL` or `CU_MEM_ATTACH_HOST` and
/// `bytes` non-zero (`CUDA_ERROR_INVALID_VALUE` otherwise; CUDA driver API, "Memory
/// Management"). The simulator keeps the whole allocation resident on the current
/// context's device (docs/simulator.md, "Managed memory"); `cuMemFree` releases it.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    with_driver("cuMemAllocManaged", |d| {
        nonnull(dptr)?;
        if flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let ctx = d.current()?;
        let p = d.alloc_managed(ctx, bytes)?;
        out(dptr, p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    with_driver("cuMemFree_v2", |d| {
        if dptr == 0 {
            // Freeing null frees nothing; the runtimes call it to make their context exist
            // (the `cudaFree(0)` idiom), so it is a use of the current context.
            return d.current().map(|_| ());
        }
        d.free(dptr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    with_driver("cuMemFreeAsync", |d| {
        d.stream_ctx(stream)?;
        d.free(dptr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    with_driver("cuMemGetInfo_v2", |d| {
        nonnull(free)?;
        nonnull(total)?;
        let ctx = d.current()?;
        let (f, t) = d.proc.mem_info(d.contexts[&ctx].ordinal).map_err(code)?;
        out(free, f as usize)?;
        out(total, t as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize) -> CUresult {
    with_driver("cuMemAllocHost_v2", |d| {
        nonnull(pp)?;
        d.current()?;
        // SAFETY: plain host allocation, released by cuMemFreeHost.
        let p = unsafe { libc::malloc(bytes.max(1)) };
        if p.is_null() {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        // Pinned: its pointer attributes say host memory of CUDA's.
        d.host.insert(p as u64, bytes as u64);
        out(pp, p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytes: usize,
    _flags: c_uint,
) -> CUresult {
    cuMemAllocHost_v2(pp, bytes)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    with_driver("cuMemFreeHost", |d| {
        nonnull(p)?;
        if d.host.remove(&(p as u64)).is_none() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: p came from cuMemAllocHost_v2 / cuMemHostAlloc (libc::malloc).
        unsafe { libc::free(p) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, uc: u8, n: usize) -> CUresult {
    with_driver("cuMemsetD8_v2", |d| d.memset8(dst, uc, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    uc: u8,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemsetD8Async", |d| {
        d.stream_ctx(stream)?;
        d.memset8(dst, uc, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: CUdeviceptr, ui: c_uint, n: usize) -> CUresult {
    with_driver("cuMemsetD32_v2", |d| d.memset32(dst, ui, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: CUdeviceptr,
    ui: c_uint,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemsetD32Async", |d| {
        d.stream_ctx(stream)?;
        d.memset32(dst, ui, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
) -> CUresult {
    with_driver("cuMemcpyHtoD_v2", |d| d.memcpy_htod(dst, src, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemcpyHtoDAsync_v2", |d| {
        d.stream_ctx(stream)?;
        d.memcpy_htod(dst, src, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    with_driver("cuMemcpyDtoH_v2", |d| d.memcpy_dtoh(dst, src, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemcpyDtoHAsync_v2", |d| {
        d.stream_ctx(stream)?;
        d.memcpy_dtoh(dst, src, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    with_driver("cuMemcpyDtoD_v2", |d| d.memcpy_dtod(dst, src, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemcpyDtoDAsync_v2", |d| {
        d.stream_ctx(stream)?;
        d.memcpy_dtod(dst, src, n)
    })
}
