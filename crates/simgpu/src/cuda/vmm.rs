//! Entry points: the virtual memory management API (cuda.h "Virtual Memory Management"):
//! address ranges reserved with `cuMemAddressReserve`, physical memory made with `cuMemCreate`
//! and mapped into a range with `cuMemMap`. PyTorch's caching allocator uses it for
//! `expandable_segments:True`: one reserved range per stream, grown by mapping 2 MiB / 20 MiB
//! chunks and shrunk by unmapping and releasing them.
//!
//! Memory is charged when it is made (`cuMemCreate`, as an allocation of the process on the
//! device), not when it is reserved or mapped, and returned once its handle is released and
//! no mapping uses it any more — the order the CUDA driver API reference gives
//! (`cuMemRelease`: "memory will be freed when all outstanding mappings to it are unmapped").
//! Copies and memsets on mapped addresses reach the physical allocation behind them.

use super::*;

/// Granularity of physical allocations and of mappings (`cuMemGetAllocationGranularity`),
/// the driver's 2 MiB on every current GPU.
const GRANULARITY: usize = 2 << 20;
/// Reserved ranges are handed out from here up, apart from the core's allocation addresses.
pub(super) const RESERVE_BASE: u64 = 0x7e00_0000_0000;

/// `CUmemLocationType`: a device.
const CU_MEM_LOCATION_TYPE_DEVICE: u32 = 1;
/// `CUmemAllocationType`: pinned device memory.
const CU_MEM_ALLOCATION_TYPE_PINNED: u32 = 1;

/// One physical allocation (`CUmemGenericAllocationHandle`).
pub(super) struct Physical {
    /// The core's allocation holding its memory.
    pub(super) base: u64,
    pub(super) size: u64,
    pub(super) ordinal: u32,
    /// `cuMemRelease` was called: freed once the last mapping is gone.
    pub(super) released: bool,
}

/// One mapping of (part of) a physical allocation into a reserved range.
pub(super) struct Mapping {
    pub(super) size: u64,
    pub(super) handle: u64,
    pub(super) offset: u64,
}

/// The process's reserved ranges, physical allocations and mappings.
#[derive(Default)]
pub(super) struct Vmm {
    /// Reserved range start -> size.
    pub(super) reserved: std::collections::BTreeMap<u64, u64>,
    pub(super) physical: HashMap<u64, Physical>,
    /// Mapped address -> mapping.
    pub(super) mapped: std::collections::BTreeMap<u64, Mapping>,
    pub(super) next_reserve: u64,
    pub(super) next_handle: u64,
}

impl Vmm {
    /// The mapping containing `ptr` and the offset into it.
    pub(super) fn mapping_at(&self, ptr: u64) -> Option<(u64, &Mapping)> {
        let (start, m) = self.mapped.range(..=ptr).next_back()?;
        (ptr - start < m.size).then_some((*start, m))
    }
}

impl Driver {
    /// The core addresses behind `n` bytes at `ptr`: one piece for ordinary memory, one per
    /// mapping crossed for mapped memory (`CUDA_ERROR_INVALID_VALUE` past a mapping's end).
    pub(super) fn pieces(&self, ptr: u64, n: usize) -> Result<Vec<(u64, usize)>, CUresult> {
        if ptr < RESERVE_BASE || self.vmm.mapping_at(ptr).is_none() {
            return Ok(vec![(ptr, n)]);
        }
        let mut out = Vec::new();
        let (mut at, mut left) = (ptr, n as u64);
        while left > 0 {
            let (start, m) = self.vmm.mapping_at(at).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let phys = self
                .vmm
                .physical
                .get(&m.handle)
                .ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let into = at - start;
            let len = (m.size - into).min(left);
            out.push((phys.base + m.offset + into, len as usize));
            at += len;
            left -= len;
        }
        Ok(out)
    }

    /// Free a released physical allocation once nothing maps it.
    fn reap(&mut self, handle: u64) -> Result<(), CUresult> {
        let in_use = self.vmm.mapped.values().any(|m| m.handle == handle);
        let done = self
            .vmm
            .physical
            .get(&handle)
            .is_some_and(|p| p.released && !in_use);
        if done {
            if let Some(p) = self.vmm.physical.remove(&handle) {
                self.proc.free(p.base).map_err(code)?;
            }
        }
        Ok(())
    }
}

/// The device a `CUmemAllocationProp` names (its `location`).
unsafe fn prop_device(prop: *const c_void) -> Result<CUdevice, CUresult> {
    nonnull(prop)?;
    // CUmemAllocationProp: type, requestedHandleTypes, location { type, id }, ...
    let words = prop as *const u32;
    // SAFETY: a CUmemAllocationProp is at least 32 bytes (cuda.h).
    let (ty, loc_ty, id) = unsafe { (*words, *words.add(2), *(words.add(3) as *const i32)) };
    if ty != CU_MEM_ALLOCATION_TYPE_PINNED || loc_ty != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(id)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const c_void,
    _option: c_uint,
) -> CUresult {
    with_driver("cuMemGetAllocationGranularity", |d| {
        let dev = unsafe { prop_device(prop) }?;
        d.ordinal(dev)?;
        out(granularity, GRANULARITY)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    _addr: CUdeviceptr,
    _flags: u64,
) -> CUresult {
    with_driver("cuMemAddressReserve", |d| {
        nonnull(ptr)?;
        if size == 0 || !size.is_multiple_of(GRANULARITY) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let align = (alignment.max(GRANULARITY)) as u64;
        if d.vmm.next_reserve == 0 {
            d.vmm.next_reserve = RESERVE_BASE;
        }
        let start = d.vmm.next_reserve.div_ceil(align) * align;
        let end = start
            .checked_add(size as u64)
            .ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        // A gap after each range, as the driver leaves between reservations.
        d.vmm.next_reserve = end + GRANULARITY as u64;
        d.vmm.reserved.insert(start, size as u64);
        out(ptr, start)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    with_driver("cuMemAddressFree", |d| {
        match d.vmm.reserved.get(&ptr) {
            Some(s) if *s == size as u64 => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        if d.vmm.mapped.range(ptr..ptr + size as u64).next().is_some() {
            // Still mapped: cuMemUnmap first.
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        d.vmm.reserved.remove(&ptr);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const c_void,
    flags: u64,
) -> CUresult {
    with_driver("cuMemCreate", |d| {
        nonnull(handle)?;
        if flags != 0 || size == 0 || !size.is_multiple_of(GRANULARITY) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let dev = unsafe { prop_device(prop) }?;
        let o = d.ordinal(dev)?;
        if !d.proc.has_context(o) {
            // The memory is charged to the process's context on that device.
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        let base = d.proc.alloc(o, size as u64).map_err(code)?;
        d.vmm.next_handle += 1;
        let h = d.vmm.next_handle;
        d.vmm.physical.insert(
            h,
            Physical {
                base,
                size: size as u64,
                ordinal: o,
                released: false,
            },
        );
        out(handle, h)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: u64) -> CUresult {
    with_driver("cuMemRelease", |d| {
        let p = d
            .vmm
            .physical
            .get_mut(&handle)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if p.released {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        p.released = true;
        d.reap(handle)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> CUresult {
    with_driver("cuMemMap", |d| {
        if flags != 0
            || size == 0
            || !size.is_multiple_of(GRANULARITY)
            || !ptr.is_multiple_of(GRANULARITY as u64)
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let p = d
            .vmm
            .physical
            .get(&handle)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if p.released || (offset + size) as u64 > p.size {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let end = ptr + size as u64;
        let inside = d
            .vmm
            .reserved
            .range(..=ptr)
            .next_back()
            .is_some_and(|(s, len)| end <= s + len);
        if !inside {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let overlaps = d
            .vmm
            .mapped
            .range(..end)
            .next_back()
            .is_some_and(|(s, m)| s + m.size > ptr);
        if overlaps {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        d.vmm.mapped.insert(
            ptr,
            Mapping {
                size: size as u64,
                handle,
                offset: offset as u64,
            },
        );
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    with_driver("cuMemUnmap", |d| {
        let end = ptr + size as u64;
        let gone: Vec<u64> = d.vmm.mapped.range(ptr..end).map(|(s, _)| *s).collect();
        if gone.is_empty() || gone[0] != ptr {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut handles = Vec::new();
        for s in gone {
            if let Some(m) = d.vmm.mapped.remove(&s) {
                handles.push(m.handle);
            }
        }
        for h in handles {
            d.reap(h)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const c_void,
    count: usize,
) -> CUresult {
    with_driver("cuMemSetAccess", |d| {
        if count == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        nonnull(desc)?;
        let mapped = d.vmm.mapping_at(ptr).is_some()
            && (size == 0 || d.vmm.mapping_at(ptr + size as u64 - 1).is_some());
        if mapped {
            Ok(())
        } else {
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut u64,
    addr: *mut c_void,
) -> CUresult {
    with_driver("cuMemRetainAllocationHandle", |d| {
        let (_, m) = d
            .vmm
            .mapping_at(addr as u64)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        out(handle, m.handle)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationPropertiesFromHandle(
    prop: *mut c_void,
    handle: u64,
) -> CUresult {
    with_driver("cuMemGetAllocationPropertiesFromHandle", |d| {
        nonnull(prop)?;
        let p = d
            .vmm
            .physical
            .get(&handle)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let mut bytes = [0u8; 32];
        bytes[0..4].copy_from_slice(&CU_MEM_ALLOCATION_TYPE_PINNED.to_ne_bytes());
        bytes[8..12].copy_from_slice(&CU_MEM_LOCATION_TYPE_DEVICE.to_ne_bytes());
        bytes[12..16].copy_from_slice(&(p.ordinal as i32).to_ne_bytes());
        // SAFETY: a CUmemAllocationProp is 32 bytes (cuda.h), checked non-null.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), prop as *mut u8, 32) };
        Ok(())
    })
}

/// Sharing a physical allocation with another process through a file descriptor or fabric
/// handle (PyTorch uses it to send expandable segments over CUDA IPC). The simulator does not
/// pass memory between processes this way: the call is there (c10 requires the name) and
/// answers `CUDA_ERROR_NOT_SUPPORTED`, recorded on the box.
#[no_mangle]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    _shareable: *mut c_void,
    handle: u64,
    _kind: c_uint,
    _flags: u64,
) -> CUresult {
    with_driver("cuMemExportToShareableHandle", |d| {
        d.vmm
            .physical
            .get(&handle)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        Err(CUDA_ERROR_NOT_SUPPORTED)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemImportFromShareableHandle(
    _handle: *mut u64,
    _shareable: *mut c_void,
    _kind: c_uint,
) -> CUresult {
    with_driver("cuMemImportFromShareableHandle", |_| {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    })
}

/// Multicast objects need an NVSwitch fabric (`CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED` reads
/// 0 here): every multicast call answers `CUDA_ERROR_NOT_SUPPORTED`, as on a PCIe machine.
#[no_mangle]
pub unsafe extern "C" fn cuMulticastCreate(_handle: *mut u64, _prop: *const c_void) -> CUresult {
    with_driver("cuMulticastCreate", |_| Err(CUDA_ERROR_NOT_SUPPORTED))
}

#[no_mangle]
pub unsafe extern "C" fn cuMulticastAddDevice(_handle: u64, _dev: CUdevice) -> CUresult {
    with_driver("cuMulticastAddDevice", |_| Err(CUDA_ERROR_NOT_SUPPORTED))
}

#[no_mangle]
pub unsafe extern "C" fn cuMulticastBindMem(
    _handle: u64,
    _mc_offset: usize,
    _mem: u64,
    _mem_offset: usize,
    _size: usize,
    _flags: u64,
) -> CUresult {
    with_driver("cuMulticastBindMem", |_| Err(CUDA_ERROR_NOT_SUPPORTED))
}

#[no_mangle]
pub unsafe extern "C" fn cuMulticastUnbind(
    _handle: u64,
    _dev: CUdevice,
    _mc_offset: usize,
    _size: usize,
) -> CUresult {
    with_driver("cuMulticastUnbind", |_| Err(CUDA_ERROR_NOT_SUPPORTED))
}
