//! Entry points: what a pointer is under unified addressing (`cuPointerGetAttribute(s)`,
//! `cuMemGetAddressRange`), pinned and registered host memory, and the copies that take their
//! direction from the pointers (`cuMemcpy`, `cuMemcpyAsync`, `cuMemcpy2D*`) — the forms the
//! CUDA runtime's `cudaMemcpy*` reach the driver through.

use super::*;

/// `CUmemorytype`.
const CU_MEMORYTYPE_HOST: c_uint = 1;
const CU_MEMORYTYPE_DEVICE: c_uint = 2;
const CU_MEMORYTYPE_UNIFIED: c_uint = 4;

/// What an address is to this process.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Place {
    /// Device memory: the allocation's start and size, its CUDA ordinal and context.
    Device {
        base: u64,
        size: u64,
        ordinal: u32,
        ctx: usize,
        managed: bool,
    },
    /// Pinned or registered host memory: start and size.
    Pinned { base: u64, size: u64 },
    /// Anything else (pageable host memory, or nothing).
    Other,
}

impl Driver {
    /// Where `ptr` points: an allocation, a mapped virtual-memory range, pinned host memory.
    pub(super) fn place(&mut self, ptr: u64) -> Place {
        if let Some((start, m)) = self.vmm.mapping_at(ptr) {
            let (start, size, handle) = (start, m.size, m.handle);
            if let Some(p) = self.vmm.physical.get(&handle) {
                let ordinal = p.ordinal;
                let ctx = self.primaries.get(&ordinal).copied().unwrap_or(0);
                return Place::Device {
                    base: start,
                    size,
                    ordinal,
                    ctx,
                    managed: false,
                };
            }
        }
        if let Some((start, _)) = self.globals.range(..=ptr).next_back() {
            let start = *start;
            if ptr - start < super::library::GLOBAL_BYTES as u64 {
                let ctx = current_ctx().unwrap_or(0);
                let ordinal = self.contexts.get(&ctx).map_or(0, |c| c.ordinal);
                return Place::Device {
                    base: start,
                    size: super::library::GLOBAL_BYTES as u64,
                    ordinal,
                    ctx,
                    managed: false,
                };
            }
        }
        if let Some(base) = self.proc.allocation_base(ptr) {
            let size = self.proc.allocation_size(base).unwrap_or(0);
            let ordinal = self.proc.ordinal_of(base).unwrap_or(0);
            let ctx = self.allocations.get(&base).copied().unwrap_or(0);
            let managed = self.proc.is_managed(base);
            return Place::Device {
                base,
                size,
                ordinal,
                ctx,
                managed,
            };
        }
        if let Some((base, size)) = self.host.range(..=ptr).next_back() {
            if ptr - base < (*size).max(1) {
                return Place::Pinned {
                    base: *base,
                    size: *size,
                };
            }
        }
        Place::Other
    }

    /// A copy of `n` bytes whose direction the pointers decide (unified addressing).
    pub(super) fn memcpy_any(&mut self, dst: u64, src: u64, n: usize) -> Result<(), CUresult> {
        let on_dev = |p: Place| matches!(p, Place::Device { .. });
        match (on_dev(self.place(dst)), on_dev(self.place(src))) {
            (true, true) => self.memcpy_dtod(dst, src, n),
            (true, false) => self.memcpy_htod(dst, src as *const c_void, n),
            (false, true) => self.memcpy_dtoh(dst as *mut c_void, src, n),
            (false, false) => {
                if n > 0 {
                    if src == 0 || dst == 0 {
                        return Err(CUDA_ERROR_INVALID_VALUE);
                    }
                    // SAFETY: two host ranges of n bytes per the caller's contract.
                    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
                }
                Ok(())
            }
        }
    }
}

/// Write one pointer attribute into `data` (`CUpointer_attribute`); `Err(None)`: the
/// attribute does not apply to such a pointer.
unsafe fn attribute(
    d: &mut Driver,
    attrib: c_int,
    data: *mut c_void,
    ptr: u64,
) -> Result<(), CUresult> {
    let place = d.place(ptr);
    match (attrib, place) {
        // CONTEXT
        (1, Place::Device { ctx, .. }) => out(data as *mut CUcontext, ctx as CUcontext),
        // MEMORY_TYPE
        (2, Place::Device { managed, .. }) => out(
            data as *mut c_uint,
            if managed {
                CU_MEMORYTYPE_UNIFIED
            } else {
                CU_MEMORYTYPE_DEVICE
            },
        ),
        (2, Place::Pinned { .. }) => out(data as *mut c_uint, CU_MEMORYTYPE_HOST),
        // DEVICE_POINTER: the same address under unified addressing.
        (3, Place::Device { .. } | Place::Pinned { .. }) => out(data as *mut u64, ptr),
        // HOST_POINTER
        (4, Place::Pinned { .. }) => out(data as *mut u64, ptr),
        (4, Place::Device { managed: true, .. }) => out(data as *mut u64, ptr),
        // SYNC_MEMOPS, IS_LEGACY_CUDA_IPC_CAPABLE, MAPPED
        (6 | 10 | 13, Place::Device { .. }) => out(data as *mut c_int, 1),
        // BUFFER_ID: the allocation's start, unique while it lives.
        (7, Place::Device { base, .. } | Place::Pinned { base, .. }) => out(data as *mut u64, base),
        // IS_MANAGED
        (8, Place::Device { managed, .. }) => out(data as *mut c_int, managed as c_int),
        (8, Place::Pinned { .. }) => out(data as *mut c_int, 0),
        // DEVICE_ORDINAL
        (9, Place::Device { ordinal, .. }) => out(data as *mut c_int, ordinal as c_int),
        // RANGE_START_ADDR, RANGE_SIZE, MAPPING_SIZE, MAPPING_BASE_ADDR
        (11 | 19, Place::Device { base, .. } | Place::Pinned { base, .. }) => {
            out(data as *mut u64, base)
        }
        (12 | 18, Place::Device { size, .. } | Place::Pinned { size, .. }) => {
            out(data as *mut u64, size)
        }
        // ALLOWED_HANDLE_TYPES, IS_GPU_DIRECT_RDMA_CAPABLE, MEMPOOL_HANDLE
        (14 | 15, Place::Device { .. }) => out(data as *mut c_int, 0),
        (17, Place::Device { .. }) => out(data as *mut u64, 0),
        // ACCESS_FLAGS: read-write.
        (16, Place::Device { .. } | Place::Pinned { .. }) => out(data as *mut c_int, 3),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attrib: c_int,
    ptr: CUdeviceptr,
) -> CUresult {
    with_driver("cuPointerGetAttribute", |d| {
        nonnull(data)?;
        unsafe { attribute(d, attrib, data, ptr) }
    })
}

/// Unlike the single form, an address that is not CUDA's is no error: each attribute gets its
/// empty value (type 0, null context, ordinal -2, as the driver API reference says).
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttributes(
    count: c_uint,
    attribs: *const c_int,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    with_driver("cuPointerGetAttributes", |d| {
        nonnull(attribs)?;
        nonnull(data)?;
        for i in 0..count as usize {
            // SAFETY: `count` attributes and data pointers per cuda.h.
            let (a, slot) = unsafe { (*attribs.add(i), *data.add(i)) };
            if slot.is_null() {
                continue;
            }
            if unsafe { attribute(d, a, slot, ptr) }.is_err() {
                let empty_width = match a {
                    1 | 3 | 4 | 7 | 11 | 12 | 17 | 18 | 19 | 20 => 8,
                    _ => 4,
                };
                if a == 9 {
                    unsafe { *(slot as *mut c_int) = -2 };
                } else if empty_width == 8 {
                    unsafe { *(slot as *mut u64) = 0 };
                } else {
                    unsafe { *(slot as *mut c_uint) = 0 };
                }
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CUdeviceptr,
    size: *mut usize,
    ptr: CUdeviceptr,
) -> CUresult {
    with_driver("cuMemGetAddressRange_v2", |d| match d.place(ptr) {
        Place::Device {
            base: b, size: s, ..
        } => {
            if !base.is_null() {
                out(base, b)?;
            }
            if !size.is_null() {
                out(size, s as usize)?;
            }
            Ok(())
        }
        _ => Err(CUDA_ERROR_NOT_FOUND),
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostRegister_v2(
    p: *mut c_void,
    bytes: usize,
    _flags: c_uint,
) -> CUresult {
    with_driver("cuMemHostRegister_v2", |d| {
        nonnull(p)?;
        if bytes == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        d.current()?;
        let start = p as u64;
        if matches!(d.place(start), Place::Pinned { .. }) {
            // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
            return Err(712);
        }
        d.host.insert(start, bytes as u64);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    with_driver("cuMemHostUnregister", |d| {
        d.host
            .remove(&(p as u64))
            .map(|_| ())
            // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
            .ok_or(713)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    dptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    with_driver("cuMemHostGetDevicePointer_v2", |d| {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        match d.place(p as u64) {
            Place::Pinned { .. } => out(dptr, p as u64),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetFlags(flags: *mut c_uint, p: *mut c_void) -> CUresult {
    with_driver("cuMemHostGetFlags", |d| match d.place(p as u64) {
        Place::Pinned { .. } => out(flags, 0),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    with_driver("cuMemcpy", |d| d.memcpy_any(dst, src, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemcpyAsync", |d| {
        d.stream_ctx(stream)?;
        d.memcpy_any(dst, src, n)
    })
}

/// `CUDA_MEMCPY2D` (cuda.h).
#[repr(C)]
pub struct CUDA_MEMCPY2D {
    pub src_x_bytes: usize,
    pub src_y: usize,
    pub src_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub src_pitch: usize,
    pub dst_x_bytes: usize,
    pub dst_y: usize,
    pub dst_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub dst_pitch: usize,
    pub width_bytes: usize,
    pub height: usize,
}

fn copy_2d(d: &mut Driver, c: &CUDA_MEMCPY2D) -> Result<(), CUresult> {
    let addr = |ty: c_uint, host: u64, dev: u64| -> Result<u64, CUresult> {
        match ty {
            CU_MEMORYTYPE_HOST => Ok(host),
            CU_MEMORYTYPE_DEVICE => Ok(dev),
            CU_MEMORYTYPE_UNIFIED => Ok(dev),
            // CUDA arrays (textures) are not simulated.
            _ => Err(CUDA_ERROR_NOT_SUPPORTED),
        }
    };
    let src = addr(c.src_type, c.src_host as u64, c.src_device)?;
    let dst = addr(c.dst_type, c.dst_host as u64, c.dst_device)?;
    if c.width_bytes > c.src_pitch.max(c.width_bytes)
        || c.width_bytes > c.dst_pitch.max(c.width_bytes)
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    for row in 0..c.height {
        let s = src + ((c.src_y + row) * c.src_pitch + c.src_x_bytes) as u64;
        let t = dst + ((c.dst_y + row) * c.dst_pitch + c.dst_x_bytes) as u64;
        d.memcpy_any(t, s, c.width_bytes)?;
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy2D_v2(copy: *const CUDA_MEMCPY2D) -> CUresult {
    with_driver("cuMemcpy2D_v2", |d| {
        nonnull(copy)?;
        // SAFETY: checked non-null; cuda.h layout.
        copy_2d(d, unsafe { &*copy })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy2DUnaligned_v2(copy: *const CUDA_MEMCPY2D) -> CUresult {
    with_driver("cuMemcpy2DUnaligned_v2", |d| {
        nonnull(copy)?;
        copy_2d(d, unsafe { &*copy })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy2DAsync_v2(
    copy: *const CUDA_MEMCPY2D,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemcpy2DAsync_v2", |d| {
        nonnull(copy)?;
        d.stream_ctx(stream)?;
        copy_2d(d, unsafe { &*copy })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16_v2(dst: CUdeviceptr, us: u16, n: usize) -> CUresult {
    with_driver("cuMemsetD16_v2", |d| d.memset16(dst, us, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async(
    dst: CUdeviceptr,
    us: u16,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemsetD16Async", |d| {
        d.stream_ctx(stream)?;
        d.memset16(dst, us, n)
    })
}

impl Driver {
    fn memset16(&mut self, dst: u64, v: u16, n: usize) -> Result<(), CUresult> {
        if !dst.is_multiple_of(2) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let [a, b] = v.to_le_bytes();
        if a == b {
            return self.memset8(dst, a, n.saturating_mul(2));
        }
        // Two halves of a 32-bit pattern where aligned; the pattern is the same.
        let word = u32::from(v) | (u32::from(v) << 16);
        if dst.is_multiple_of(4) && n.is_multiple_of(2) {
            return self.memset32(dst, word, n / 2);
        }
        let bytes: Vec<u8> = std::iter::repeat_n(v.to_le_bytes(), n.min(1 << 20))
            .flatten()
            .collect();
        let mut done = 0usize;
        while done < n * 2 {
            let len = (n * 2 - done).min(bytes.len());
            self.memcpy_htod(dst + done as u64, bytes.as_ptr() as *const c_void, len)?;
            done += len;
        }
        Ok(())
    }
}

/// `cuMemPrefetchAsync` (both forms) and `cuMemAdvise`: hints about managed memory, which the
/// simulator keeps resident on its device already.
#[no_mangle]
pub unsafe extern "C" fn cuMemPrefetchAsync_v2(
    ptr: CUdeviceptr,
    _count: usize,
    _location: u64,
    _flags: c_uint,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemPrefetchAsync_v2", |d| {
        d.stream_ctx(stream)?;
        match d.place(ptr) {
            Place::Device { managed: true, .. } => Ok(()),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAdvise_v2(
    ptr: CUdeviceptr,
    _count: usize,
    _advice: c_uint,
    _location: u64,
) -> CUresult {
    with_driver("cuMemAdvise_v2", |d| match d.place(ptr) {
        Place::Device { managed: true, .. } => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    })
}

/// `CUDA_MEMCPY3D` (cuda.h): every field is 8 bytes wide (the memory types padded).
#[repr(C)]
pub struct CUDA_MEMCPY3D {
    pub src_x_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_type: u64,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub reserved0: *mut c_void,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_type: u64,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

fn copy_3d(d: &mut Driver, c: &CUDA_MEMCPY3D) -> Result<(), CUresult> {
    for z in 0..c.depth {
        let plane = CUDA_MEMCPY2D {
            src_x_bytes: c.src_x_bytes,
            src_y: c.src_y + (c.src_z + z) * c.src_height.max(c.height),
            src_type: c.src_type as c_uint,
            src_host: c.src_host,
            src_device: c.src_device,
            src_array: c.src_array,
            src_pitch: c.src_pitch,
            dst_x_bytes: c.dst_x_bytes,
            dst_y: c.dst_y + (c.dst_z + z) * c.dst_height.max(c.height),
            dst_type: c.dst_type as c_uint,
            dst_host: c.dst_host,
            dst_device: c.dst_device,
            dst_array: c.dst_array,
            dst_pitch: c.dst_pitch,
            width_bytes: c.width_bytes,
            height: c.height,
        };
        copy_2d(d, &plane)?;
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3D_v2(copy: *const CUDA_MEMCPY3D) -> CUresult {
    with_driver("cuMemcpy3D_v2", |d| {
        nonnull(copy)?;
        // SAFETY: checked non-null; cuda.h layout.
        copy_3d(d, unsafe { &*copy })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3DAsync_v2(
    copy: *const CUDA_MEMCPY3D,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemcpy3DAsync_v2", |d| {
        nonnull(copy)?;
        d.stream_ctx(stream)?;
        copy_3d(d, unsafe { &*copy })
    })
}

/// `cuMemcpyBatchAsync` (CUDA 13 form): `count` copies, each taking its direction from its
/// pointers; the attributes only hint at the source's access order.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuMemcpyBatchAsync_v2(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    _attrs: *const c_void,
    _attr_idxs: *const usize,
    _num_attrs: usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemcpyBatchAsync", |d| {
        d.stream_ctx(stream)?;
        batch(d, dsts, srcs, sizes, count, std::ptr::null_mut())
    })
}

/// The CUDA 12.8 form, which also reports the index of a failing copy.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuMemcpyBatchAsync(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    _attrs: *const c_void,
    _attr_idxs: *const usize,
    _num_attrs: usize,
    fail_idx: *mut usize,
    stream: CUstream,
) -> CUresult {
    with_driver("cuMemcpyBatchAsync", |d| {
        d.stream_ctx(stream)?;
        batch(d, dsts, srcs, sizes, count, fail_idx)
    })
}

fn batch(
    d: &mut Driver,
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    fail_idx: *mut usize,
) -> Result<(), CUresult> {
    if count == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    nonnull(dsts)?;
    nonnull(srcs)?;
    nonnull(sizes)?;
    for i in 0..count {
        // SAFETY: `count` entries in each array per cuda.h.
        let (dst, src, n) = unsafe { (*dsts.add(i), *srcs.add(i), *sizes.add(i)) };
        if let Err(e) = d.memcpy_any(dst, src, n) {
            if !fail_idx.is_null() {
                out(fail_idx, i)?;
            }
            return Err(e);
        }
    }
    if !fail_idx.is_null() {
        out(fail_idx, usize::MAX)?;
    }
    Ok(())
}

/// The 8.0 form: (pointer, count, destination device, stream).
#[no_mangle]
pub unsafe extern "C" fn cuMemPrefetchAsync(
    ptr: CUdeviceptr,
    count: usize,
    _device: CUdevice,
    stream: CUstream,
) -> CUresult {
    cuMemPrefetchAsync_v2(ptr, count, 0, 0, stream)
}
