//! Entry points: streams and events. All work runs synchronously when submitted, so every
//! stream and event is always complete; events timestamp submission.

use super::*;

fn create_stream(name: &str, ph: *mut CUstream, flags: c_uint, priority: c_int) -> CUresult {
    with_driver(name, |d| {
        nonnull(ph)?;
        let ctx = d.current()?;
        let h = d.mint();
        d.streams.insert(
            h,
            Stream {
                ctx,
                flags,
                // Clamped to the range cuCtxGetStreamPriorityRange reports, as the driver does.
                priority: priority.clamp(-5, 0),
                capture: None,
                id: h as u64,
            },
        );
        out(ph, h as CUstream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut CUstream, flags: c_uint) -> CUresult {
    create_stream("cuStreamCreate", ph, flags, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    create_stream("cuStreamCreateWithPriority", ph, flags, priority)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags(stream: CUstream, flags: *mut c_uint) -> CUresult {
    with_driver("cuStreamGetFlags", |d| {
        d.stream_ctx(stream)?;
        let f = d.streams.get(&(stream as usize)).map_or(0, |s| s.flags);
        out(flags, f)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority(stream: CUstream, priority: *mut c_int) -> CUresult {
    with_driver("cuStreamGetPriority", |d| {
        d.stream_ctx(stream)?;
        let p = d.streams.get(&(stream as usize)).map_or(0, |s| s.priority);
        out(priority, p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetId(stream: CUstream, id: *mut u64) -> CUresult {
    with_driver("cuStreamGetId", |d| {
        d.stream_ctx(stream)?;
        let v = match d.streams.get(&(stream as usize)) {
            Some(s) => s.id,
            // The legacy default stream is 0; the per-thread one is told apart by its handle.
            None => (stream as usize == CU_STREAM_PER_THREAD) as u64,
        };
        out(id, v)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(stream: CUstream, pctx: *mut CUcontext) -> CUresult {
    with_driver("cuStreamGetCtx", |d| {
        let ctx = d.stream_ctx(stream)?;
        out(pctx, ctx as CUcontext)
    })
}

/// CUDA 12.5's form, which also names the green context (none here).
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx_v2(
    stream: CUstream,
    pctx: *mut CUcontext,
    pgreen: *mut *mut c_void,
) -> CUresult {
    with_driver("cuStreamGetCtx_v2", |d| {
        let ctx = d.stream_ctx(stream)?;
        out(pctx, ctx as CUcontext)?;
        if !pgreen.is_null() {
            out(pgreen, std::ptr::null_mut())?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetDevice(stream: CUstream, device: *mut CUdevice) -> CUresult {
    with_driver("cuStreamGetDevice", |d| {
        let ctx = d.stream_ctx(stream)?;
        out(device, d.contexts[&ctx].ordinal as CUdevice)
    })
}

/// `cuStreamAddCallback`: the callback runs once the work before it is done — at once here,
/// after the driver's lock is released (it may call the driver).
#[no_mangle]
pub unsafe extern "C" fn cuStreamAddCallback(
    stream: CUstream,
    callback: Option<extern "C" fn(CUstream, CUresult, *mut c_void)>,
    data: *mut c_void,
    flags: c_uint,
) -> CUresult {
    with_driver("cuStreamAddCallback", |d| {
        let f = callback.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        d.stream_ctx(stream)?;
        d.deferred
            .push(Deferred::StreamCallback(f, stream as usize, data as usize));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(
    stream: CUstream,
    func: Option<extern "C" fn(*mut c_void)>,
    data: *mut c_void,
) -> CUresult {
    with_driver("cuLaunchHostFunc", |d| {
        let f = func.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        d.stream_ctx(stream)?;
        if d.capturing(stream).is_some() {
            // Captured into the graph: it runs when the graph is launched (never, here).
            return Ok(());
        }
        d.deferred.push(Deferred::Host(f, data as usize));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags(
    event: CUevent,
    stream: CUstream,
    _flags: c_uint,
) -> CUresult {
    cuEventRecord(event, stream)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CUresult {
    with_driver("cuStreamDestroy_v2", |d| {
        d.streams
            .remove(&(stream as usize))
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: CUstream) -> CUresult {
    with_driver("cuStreamSynchronize", |d| {
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
    with_driver("cuStreamWaitEvent", |d| {
        d.stream_ctx(stream)?;
        d.events
            .get(&(event as usize))
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(ph: *mut CUevent, flags: c_uint) -> CUresult {
    with_driver("cuEventCreate", |d| {
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
    with_driver("cuEventRecord", |d| {
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
    with_driver("cuEventQuery", |d| {
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
    with_driver("cuEventElapsedTime", |d| {
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
    with_driver("cuEventDestroy_v2", |d| {
        d.events
            .remove(&(event as usize))
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}

/// `cuStreamWriteValue32`: the value is written into device memory when the stream reaches
/// it — at once here.
#[no_mangle]
pub unsafe extern "C" fn cuStreamWriteValue32(
    stream: CUstream,
    addr: CUdeviceptr,
    value: u32,
    _flags: c_uint,
) -> CUresult {
    with_driver("cuStreamWriteValue32", |d| {
        d.stream_ctx(stream)?;
        let v = value.to_le_bytes();
        d.memcpy_htod(addr, v.as_ptr() as *const c_void, v.len())
    })
}

/// `cuStreamWaitValue32`: work after it waits until the word satisfies the condition.
/// Streams run at submission here, so the wait is already over.
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitValue32(
    stream: CUstream,
    addr: CUdeviceptr,
    _value: u32,
    _flags: c_uint,
) -> CUresult {
    with_driver("cuStreamWaitValue32", |d| {
        d.stream_ctx(stream)?;
        let mut w = [0u8; 4];
        d.memcpy_dtoh(w.as_mut_ptr() as *mut c_void, addr, 4)
    })
}

/// Green contexts (SM partitions, CUDA 12.4): the simulator models no SM resources, so the
/// calls answer `CUDA_ERROR_NOT_SUPPORTED`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDevResource(
    _dev: CUdevice,
    _resource: *mut c_void,
    _kind: c_uint,
) -> CUresult {
    with_driver("cuDeviceGetDevResource", |_| Err(CUDA_ERROR_NOT_SUPPORTED))
}

#[no_mangle]
pub unsafe extern "C" fn cuGreenCtxCreate(
    _ctx: *mut *mut c_void,
    _desc: *mut c_void,
    _dev: CUdevice,
    _flags: c_uint,
) -> CUresult {
    with_driver("cuGreenCtxCreate", |_| Err(CUDA_ERROR_NOT_SUPPORTED))
}

/// `cuLogsRegisterCallback`: the simulated driver writes no log lines, so a callback is
/// registered and never called.
#[no_mangle]
pub unsafe extern "C" fn cuLogsRegisterCallback(
    _callback: *mut c_void,
    _data: *mut c_void,
    handle: *mut usize,
) -> CUresult {
    with_driver("cuLogsRegisterCallback", |d| {
        let h = d.mint();
        if !handle.is_null() {
            out(handle, h)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLogsUnregisterCallback(_handle: usize) -> CUresult {
    with_driver("cuLogsUnregisterCallback", |_| Ok(()))
}

/// `cuStreamBatchMemOp`: an array of 48-byte `CUstreamBatchMemOpParams` unions (operation at
/// offset 0, address at 8, value at 16): writes are made at once, waits are already over
/// (streams run at submission), flushes and barriers do nothing.
#[no_mangle]
pub unsafe extern "C" fn cuStreamBatchMemOp(
    stream: CUstream,
    count: c_uint,
    ops: *const u8,
    _flags: c_uint,
) -> CUresult {
    with_driver("cuStreamBatchMemOp", |d| {
        d.stream_ctx(stream)?;
        if count == 0 {
            return Ok(());
        }
        nonnull(ops)?;
        for i in 0..count as usize {
            // SAFETY: `count` params of 48 bytes each per cuda.h.
            let op = unsafe { ops.add(i * 48) };
            let (kind, addr) = unsafe { (*(op as *const u32), *(op.add(8) as *const u64)) };
            match kind {
                // WRITE_VALUE_32, WRITE_VALUE_64
                2 => {
                    let v = unsafe { *(op.add(16) as *const u32) }.to_le_bytes();
                    d.memcpy_htod(addr, v.as_ptr() as *const c_void, 4)?;
                }
                5 => {
                    let v = unsafe { *(op.add(16) as *const u64) }.to_le_bytes();
                    d.memcpy_htod(addr, v.as_ptr() as *const c_void, 8)?;
                }
                // WAIT_VALUE_32/64, FLUSH_REMOTE_WRITES, BARRIER
                1 | 3 | 4 | 6 => {}
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            }
        }
        Ok(())
    })
}
