//! Entry points: contexts (primary and created) and each thread's current-context stack.

use super::*;

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    with_driver(|d| {
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
    with_driver(|d| {
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
    with_driver(|d| {
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
    with_driver(|d| {
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
    with_driver(|d| {
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
    with_driver(|d| {
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
    with_driver(|_| out(pctx, current_ctx().unwrap_or(0) as CUcontext))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    with_driver(|d| {
        if ctx.is_null() {
            set_current(None);
            return Ok(());
        }
        d.ctx(ctx as usize)?;
        set_current(Some(ctx as usize));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    with_driver(|d| {
        d.ctx(ctx as usize)?;
        CTX_STACK.with(|s| s.borrow_mut().push(ctx as usize));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    with_driver(|_| {
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
    with_driver(|d| {
        let h = d.current()?;
        out(device, d.contexts[&h].ordinal as CUdevice)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    with_driver(|d| {
        let h = d.current()?;
        d.check_device(d.contexts[&h].ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CUresult {
    with_driver(|d| {
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
