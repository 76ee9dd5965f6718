//! Entry points: contexts (primary and created) and each thread's current-context stack.

use super::*;

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    with_driver("cuDevicePrimaryCtxRetain", |d| {
        nonnull(pctx)?;
        let o = d.ordinal(dev)?;
        let h = match d.primaries.get(&o).and_then(|h| d.contexts.get_mut(h)) {
            Some(c) if c.active => {
                c.retains += 1;
                d.primaries[&o]
            }
            _ => d.create_context(o, true)?,
        };
        out(pctx, h as CUcontext)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    with_driver("cuDevicePrimaryCtxRelease_v2", |d| {
        let o = d.ordinal(dev)?;
        let h = *d.primaries.get(&o).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        let c = d.contexts.get_mut(&h).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        if !c.active || c.retains == 0 {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        c.retains -= 1;
        if c.retains == 0 {
            d.destroy_context(h)?;
        }
        Ok(())
    })
}

/// Destroy the primary context of `dev` with everything in it, whatever its retain count
/// (the recovery after a sticky error; the runtime's `cudaDeviceReset`).
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    with_driver("cuDevicePrimaryCtxReset_v2", |d| {
        let o = d.ordinal(dev)?;
        if let Some(h) = d.primaries.get(&o).copied() {
            if d.ctx_live(h).is_ok() {
                d.destroy_context(h)?;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    with_driver("cuDevicePrimaryCtxGetState", |d| {
        let o = d.ordinal(dev)?;
        let on = d
            .primaries
            .get(&o)
            .and_then(|h| d.contexts.get(h))
            .is_some_and(|c| c.active);
        out(flags, 0)?;
        out(active, on as c_int)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    pctx: *mut CUcontext,
    _flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    with_driver("cuCtxCreate_v2", |d| {
        nonnull(pctx)?;
        let o = d.ordinal(dev)?;
        let h = d.create_context(o, false)?;
        CTX_STACK.with(|s| s.borrow_mut().push(h));
        out(pctx, h as CUcontext)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    _params: *mut c_void,
    _num_params: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    cuCtxCreate_v2(pctx, flags, dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    with_driver("cuCtxDestroy_v2", |d| {
        let h = ctx as usize;
        let c = d.ctx_live(h)?;
        if c.primary {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        d.destroy_context(h)?;
        CTX_STACK.with(|s| s.borrow_mut().retain(|x| *x != h));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    with_driver("cuCtxGetCurrent", |_| {
        out(pctx, current_ctx().unwrap_or(0) as CUcontext)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    with_driver("cuCtxSetCurrent", |d| {
        if ctx.is_null() {
            set_current(None);
            return Ok(());
        }
        d.settable(ctx as usize)?;
        set_current(Some(ctx as usize));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    with_driver("cuCtxPushCurrent_v2", |d| {
        d.settable(ctx as usize)?;
        CTX_STACK.with(|s| s.borrow_mut().push(ctx as usize));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    with_driver("cuCtxPopCurrent_v2", |_| {
        let h = CTX_STACK
            .with(|s| s.borrow_mut().pop())
            .ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        if !pctx.is_null() {
            out(pctx, h as CUcontext)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    with_driver("cuCtxGetDevice", |d| {
        let h = d.current()?;
        out(device, d.contexts[&h].ordinal as CUdevice)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    with_driver("cuCtxSynchronize", |d| {
        let h = d.current()?;
        d.check_device(d.contexts[&h].ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CUresult {
    with_driver("cuCtxGetStreamPriorityRange", |d| {
        d.current()?;
        if !least.is_null() {
            out(least, 0)?;
        }
        if !greatest.is_null() {
            out(greatest, -5)?;
        }
        Ok(())
    })
}

/// The context a call names (null: the current one).
fn named_or_current(d: &mut Driver, ctx: CUcontext) -> Result<usize, CUresult> {
    if ctx.is_null() {
        d.current()
    } else {
        d.ctx(ctx as usize)?;
        Ok(ctx as usize)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut c_uint) -> CUresult {
    with_driver("cuCtxGetApiVersion", |d| {
        named_or_current(d, ctx)?;
        // Contexts made through the _v2 API report 3020 (cuda.h).
        out(version, 3020)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetId(ctx: CUcontext, id: *mut u64) -> CUresult {
    with_driver("cuCtxGetId", |d| {
        let h = named_or_current(d, ctx)?;
        out(id, h as u64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    with_driver("cuCtxGetFlags", |d| {
        let h = d.current()?;
        out(flags, d.ctx_flags.get(&h).copied().unwrap_or(0))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetFlags(flags: c_uint) -> CUresult {
    with_driver("cuCtxSetFlags", |d| {
        let h = d.current()?;
        d.ctx_flags.insert(h, flags);
        Ok(())
    })
}

/// `cuDevicePrimaryCtxSetFlags`: the flags the primary context is (or will be) made with.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) -> CUresult {
    with_driver("cuDevicePrimaryCtxSetFlags_v2", |d| {
        let o = d.ordinal(dev)?;
        let h = d.primary_handle(o);
        d.ctx_flags.insert(h, flags);
        Ok(())
    })
}

/// Default `CUlimit` values of a current NVIDIA driver.
fn limit_default(limit: c_int) -> Option<usize> {
    Some(match limit {
        0 => 1024,    // STACK_SIZE
        1 => 1 << 20, // PRINTF_FIFO_SIZE
        2 => 8 << 20, // MALLOC_HEAP_SIZE
        3 => 2,       // DEV_RUNTIME_SYNC_DEPTH
        4 => 2048,    // DEV_RUNTIME_PENDING_LAUNCH_COUNT
        5 => 64,      // MAX_L2_FETCH_GRANULARITY
        6 => 0,       // PERSISTING_L2_CACHE_SIZE
        7 | 8 => 0,   // SHMEM_SIZE, CIG_ENABLED
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_int) -> CUresult {
    with_driver("cuCtxGetLimit", |d| {
        let h = d.current()?;
        let default = limit_default(limit).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        out(value, d.limits.get(&(h, limit)).copied().unwrap_or(default))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: c_int, value: usize) -> CUresult {
    with_driver("cuCtxSetLimit", |d| {
        let h = d.current()?;
        limit_default(limit).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        d.limits.insert((h, limit), value);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut c_uint) -> CUresult {
    with_driver("cuCtxGetCacheConfig", |d| {
        d.current()?;
        out(config, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCacheConfig(config: c_uint) -> CUresult {
    with_driver("cuCtxSetCacheConfig", |d| {
        d.current()?;
        if config > 4 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetSharedMemConfig(config: *mut c_uint) -> CUresult {
    with_driver("cuCtxGetSharedMemConfig", |d| {
        d.current()?;
        // CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE
        out(config, 1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxResetPersistingL2Cache() -> CUresult {
    with_driver("cuCtxResetPersistingL2Cache", |d| d.current().map(|_| ()))
}

/// CUDA 13's forms that name the context.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice_v2(device: *mut CUdevice, ctx: CUcontext) -> CUresult {
    with_driver("cuCtxGetDevice_v2", |d| {
        let h = named_or_current(d, ctx)?;
        out(device, d.contexts[&h].ordinal as CUdevice)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize_v2(ctx: CUcontext) -> CUresult {
    with_driver("cuCtxSynchronize_v2", |d| {
        let h = named_or_current(d, ctx)?;
        d.check_device(d.contexts[&h].ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuProfilerStart() -> CUresult {
    with_driver("cuProfilerStart", |_| Ok(()))
}

#[no_mangle]
pub unsafe extern "C" fn cuProfilerStop() -> CUresult {
    with_driver("cuProfilerStop", |_| Ok(()))
}

/// The unversioned names of the 7.0 forms (same signatures as the 11.0 `_v2`s): cuBLASLt
/// looks them up with `dlsym`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    cuDevicePrimaryCtxRelease_v2(dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset(dev: CUdevice) -> CUresult {
    cuDevicePrimaryCtxReset_v2(dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags(dev: CUdevice, flags: c_uint) -> CUresult {
    cuDevicePrimaryCtxSetFlags_v2(dev, flags)
}
