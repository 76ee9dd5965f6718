//! Entry points: peer access between devices and CUDA IPC (`cuIpc*`), and copies between
//! contexts (`cuMemcpyPeer`). A handle opened from another process lists this process on the
//! memory's device in NVML (0 bytes of its own), without charging the memory twice.

use super::*;
use vramdoc_sim::process::IPC_HANDLE_SIZE;

/// `CUipcMemHandle`: 64 opaque bytes, passed by value to `cuIpcOpenMemHandle`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUipcMemHandle {
    pub reserved: [u8; IPC_HANDLE_SIZE],
}

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 0x1;

#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    can: *mut c_int,
    dev: CUdevice,
    peer: CUdevice,
) -> CUresult {
    with_driver("cuDeviceCanAccessPeer", |d| {
        let a = d.proc.physical(d.ordinal(dev)?).map_err(code)?;
        let b = d.proc.physical(d.ordinal(peer)?).map_err(code)?;
        out(can, d.proc.sim().can_access_peer(a, b) as c_int)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxEnablePeerAccess(peer: CUcontext, flags: c_uint) -> CUresult {
    with_driver("cuCtxEnablePeerAccess", |d| {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let me = d.current()?;
        let p = peer as usize;
        // "CUDA_ERROR_INVALID_CONTEXT if … the current context is peerContext".
        if p == me {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        let po = d.ctx(p)?.ordinal;
        let mo = d.contexts[&me].ordinal;
        let (a, b) = (
            d.proc.physical(mo).map_err(code)?,
            d.proc.physical(po).map_err(code)?,
        );
        // "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED if cuDeviceCanAccessPeer() indicates that the
        // CUdevice of the current context cannot directly access memory from … peerContext".
        if !d.proc.sim().can_access_peer(a, b) {
            return Err(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
        }
        if !d.peers.insert((me, p)) {
            return Err(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDisablePeerAccess(peer: CUcontext) -> CUresult {
    with_driver("cuCtxDisablePeerAccess", |d| {
        let me = d.current()?;
        if !d.peers.remove(&(me, peer as usize)) {
            return Err(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcGetMemHandle(
    handle: *mut CUipcMemHandle,
    dptr: CUdeviceptr,
) -> CUresult {
    with_driver("cuIpcGetMemHandle", |d| {
        nonnull(handle)?;
        let h = *d.allocations.get(&dptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        d.ctx(h)?;
        if d.pooled.contains(&dptr) {
            // Stream-ordered pool memory cannot be exported this way (cudarc#521).
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let bytes = d.proc.ipc_export(dptr).map_err(code)?;
        out(handle, CUipcMemHandle { reserved: bytes })
    })
}

fn ipc_open(
    d: &mut Driver,
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    flags: c_uint,
) -> Result<(), CUresult> {
    nonnull(pdptr)?;
    if flags & !CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let me = d.current()?;
    let ordinal = d.contexts[&me].ordinal;
    let mine = d.proc.physical(ordinal).map_err(code)?;
    let (va, device) = d.proc.ipc_open(&handle.reserved, ordinal).map_err(code)?;
    if device != mine && !d.proc.sim().can_access_peer(mine, device) {
        let _ = d.proc.ipc_close(va);
        return Err(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
    }
    d.imports.insert(va, me);
    out(pdptr, va)
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    flags: c_uint,
) -> CUresult {
    with_driver("cuIpcOpenMemHandle_v2", |d| {
        ipc_open(d, pdptr, handle, flags)
    })
}

/// The pre-CUDA 11 symbol, same signature.
#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle(
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    flags: c_uint,
) -> CUresult {
    with_driver("cuIpcOpenMemHandle", |d| ipc_open(d, pdptr, handle, flags))
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcCloseMemHandle(dptr: CUdeviceptr) -> CUresult {
    with_driver("cuIpcCloseMemHandle", |d| {
        let h = *d.imports.get(&dptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        d.ctx(h)?;
        d.proc.ipc_close(dptr).map_err(code)?;
        if d.proc.import_at(dptr).is_none() {
            d.imports.remove(&dptr);
        }
        Ok(())
    })
}

/// A copy between two contexts' memory: works with or without peer access (the driver
/// stages it when there is none).
fn memcpy_peer(
    d: &mut Driver,
    dst: u64,
    dctx: CUcontext,
    src: u64,
    sctx: CUcontext,
    n: usize,
) -> Result<(), CUresult> {
    d.ctx(dctx as usize)?;
    d.ctx(sctx as usize)?;
    d.memcpy_dtod(dst, src, n)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyPeer(
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    n: usize,
) -> CUresult {
    with_driver("cuMemcpyPeer", |d| {
        memcpy_peer(d, dst, dst_ctx, src, src_ctx, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyPeerAsync(
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemcpyPeerAsync", |d| {
        d.stream_ctx(stream)?;
        memcpy_peer(d, dst, dst_ctx, src, src_ctx, n)
    })
}
