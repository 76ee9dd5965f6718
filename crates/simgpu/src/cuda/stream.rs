//! Entry points: streams and events. All work runs synchronously when submitted, so every
//! stream and event is always complete; events timestamp submission.

use super::*;

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut CUstream, _flags: c_uint) -> CUresult {
    with_driver(|d| {
        nonnull(ph)?;
        let ctx = d.current()?;
        let h = d.mint();
        d.streams.insert(h, Stream { ctx });
        out(ph, h as CUstream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph: *mut CUstream,
    flags: c_uint,
    _priority: c_int,
) -> CUresult {
    cuStreamCreate(ph, flags)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CUresult {
    with_driver(|d| {
        d.streams
            .remove(&(stream as usize))
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: CUstream) -> CUresult {
    with_driver(|d| {
        let ctx = d.stream_ctx(stream)?;
        d.check_device(d.contexts[&ctx].ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(stream: CUstream) -> CUresult {
    cuStreamSynchronize(stream)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    stream: CUstream,
    event: CUevent,
    _flags: c_uint,
) -> CUresult {
    with_driver(|d| {
        d.stream_ctx(stream)?;
        d.events
            .get(&(event as usize))
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(ph: *mut CUevent, flags: c_uint) -> CUresult {
    with_driver(|d| {
        nonnull(ph)?;
        let ctx = d.current()?;
        let h = d.mint();
        d.events.insert(
            h,
            Event {
                ctx,
                timing: flags & CU_EVENT_DISABLE_TIMING == 0,
                recorded: None,
            },
        );
        out(ph, h as CUevent)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult {
    with_driver(|d| {
        let sctx = d.stream_ctx(stream)?;
        let e = d
            .events
            .get_mut(&(event as usize))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if e.ctx != sctx {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        e.recorded = Some(Instant::now());
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(event: CUevent) -> CUresult {
    with_driver(|d| {
        let e = d
            .events
            .get(&(event as usize))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        d.check_device(d.ctx(e.ctx)?.ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: CUevent) -> CUresult {
    cuEventQuery(event)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    ms: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    with_driver(|d| {
        nonnull(ms)?;
        let s = d
            .events
            .get(&(start as usize))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let e = d
            .events
            .get(&(end as usize))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if !s.timing || !e.timing {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let (Some(t0), Some(t1)) = (s.recorded, e.recorded) else {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        };
        let v = if t1 >= t0 {
            (t1 - t0).as_secs_f64() * 1e3
        } else {
            -((t0 - t1).as_secs_f64() * 1e3)
        };
        out(ms, v as f32)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    cuEventElapsedTime(ms, start, end)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: CUevent) -> CUresult {
    with_driver(|d| {
        d.events
            .remove(&(event as usize))
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}
