//! The real CUDA backend: [`CudaDriver`] over cudarc's safe driver API, loading libcuda.so at
//! run time (the NVIDIA driver's, or whichever one `LD_LIBRARY_PATH` puts first). The fill
//! and checksum kernels are kernels/vramdoc.ptx, embedded here and loaded with
//! cuModuleLoadData, so users need no nvcc or NVRTC.
//!
//! Contexts are primary contexts (`cuDevicePrimaryCtxRetain`, as PyTorch and the CUDA runtime
//! use): creating one on ordinal N touches device N only. Two [`ContextId`]s on one ordinal
//! share that device's primary context. cudarc panics when libcuda.so or one of its symbols is
//! missing, so [`CudaDriver::open`] probes both first, and every call also runs under
//! `catch_unwind`: no panic leaves this module.

use super::{AllocId, ContextId, Driver, GpuError, Result};
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{result, CudaContext, CudaSlice, CudaStream, DevicePtrMut, DriverError};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// The kernels' PTX (see kernels/README.md); their names and what they compute are
/// `vramdoc_gpu_spec::kernel`.
pub const KERNELS_PTX: &str = include_str!("../../kernels/vramdoc.ptx");
pub const KERNEL_FILL: &str = vramdoc_gpu_spec::kernel::FILL;
pub const KERNEL_CHECKSUM: &str = vramdoc_gpu_spec::kernel::CHECKSUM;

/// libcuda.so entry points cudarc calls for what this backend does, by their dlsym names.
/// [`CudaDriver::open`] checks each is present before any is called.
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuEventDestroy_v2",
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuMemFree_v2",
    "cuMemFreeAsync",
    "cuMemsetD8Async",
    "cuMemcpyDtoHAsync_v2",
    "cuMemGetInfo_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
];

const LIBRARY: &str = "libcuda.so";
const MISSING_HINT: &str = "install the NVIDIA driver, or point LD_LIBRARY_PATH at it";

/// The PTX module loaded into one context (cuModuleLoadData) and its two functions.
/// cudarc's safe `load_module` is only built with its `nvrtc` feature, so this uses the
/// driver-API layer (`cudarc::driver::result`) directly: no NVRTC anywhere.
struct Kernels {
    module: sys::CUmodule,
    fill: sys::CUfunction,
    checksum: sys::CUfunction,
    ctx: Arc<CudaContext>,
}

impl Kernels {
    fn load(ctx: &Arc<CudaContext>) -> Result<Kernels> {
        ctx.bind_to_thread()
            .map_err(|e| driver_err("cuCtxSetCurrent", e))?;
        let src = std::ffi::CString::new(KERNELS_PTX).map_err(|_| GpuError::Driver {
            call: "cuModuleLoadData".into(),
            code: "CUDA_ERROR_INVALID_IMAGE".into(),
            message: "embedded PTX contains a NUL byte".into(),
        })?;
        // SAFETY: a NUL-terminated PTX text, as cuModuleLoadData expects.
        let module = unsafe { result::module::load_data(src.as_ptr().cast()) }
            .map_err(|e| driver_err("cuModuleLoadData", e))?;
        let function = |name: &str| {
            let c = std::ffi::CString::new(name).map_err(|_| GpuError::Driver {
                call: "cuModuleGetFunction".into(),
                code: "CUDA_ERROR_INVALID_VALUE".into(),
                message: format!("bad kernel name {name:?}"),
            })?;
            // SAFETY: `module` was just loaded and is not unloaded before `Kernels` drops.
            unsafe { result::module::get_function(module, c) }
                .map_err(|e| driver_err("cuModuleGetFunction", e))
        };
        let loaded = function(KERNEL_FILL).and_then(|fill| Ok((fill, function(KERNEL_CHECKSUM)?)));
        match loaded {
            Ok((fill, checksum)) => Ok(Kernels {
                module,
                fill,
                checksum,
                ctx: ctx.clone(),
            }),
            Err(e) => {
                // SAFETY: loaded above, no function of it is kept.
                let _ = unsafe { result::module::unload(module) };
                Err(e)
            }
        }
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded in this context; its functions die with `self`.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

struct Context {
    ordinal: u32,
    stream: Arc<CudaStream>,
    /// The fill and checksum kernels, loaded with the context.
    kernels: Kernels,
    /// The checksum kernel's result word, allocated with the context: a fill never needs
    /// device memory beyond the allocation it fills (which may be the last free bytes).
    sum: CudaSlice<u64>,
    ctx: Arc<CudaContext>,
}

struct Allocation {
    ctx: ContextId,
    bytes: u64,
    slice: CudaSlice<u8>,
}

/// CUDA through cudarc. Dropping it frees its allocations and releases its contexts.
pub struct CudaDriver {
    // Field order is drop order: allocations before the contexts they live in.
    allocs: HashMap<AllocId, Allocation>,
    contexts: HashMap<ContextId, Context>,
    next_ctx: u32,
    next_alloc: u64,
    last_fill_ms: Option<f32>,
}

/// `CUDA_ERROR_...` name of a driver error.
fn name_of(e: &DriverError) -> String {
    format!("{:?}", e.0)
}

fn message_of(e: &DriverError) -> String {
    e.error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "no description".into())
}

fn driver_err(call: &str, e: DriverError) -> GpuError {
    super::cuda_error(call, e.0 as i32, &name_of(&e), &message_of(&e))
}

/// Driver calls whose result is read as a plain integer, never as cudarc's `CUresult` enum:
/// cudarc is built against the CUDA 12.0 headers, whose enum lacks codes newer drivers return
/// (226 `CUDA_ERROR_CONTAINED` from launches and synchronisation), and a value outside a Rust
/// enum is undefined behaviour. Used for every call where a device fault first shows.
mod raw {
    use super::sys;
    use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

    type SyncFn = unsafe extern "C" fn() -> c_int;
    type StreamSyncFn = unsafe extern "C" fn(sys::CUstream) -> c_int;
    type NameFn = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;
    type LaunchFn = unsafe extern "C" fn(
        sys::CUfunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        sys::CUstream,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> c_int;

    /// Look a driver entry point up with the integer-returning signature `F`.
    fn sym<F: Copy>(name: &[u8]) -> Option<F> {
        // SAFETY: CudaDriver::open checked the library is present; looking up does not call.
        unsafe { sys::culib().get::<F>(name).ok().map(|s| *s) }
    }

    /// `cuCtxSynchronize` on the current context.
    pub fn ctx_synchronize() -> c_int {
        match sym::<SyncFn>(b"cuCtxSynchronize") {
            // SAFETY: no arguments; the caller bound a context.
            Some(f) => unsafe { f() },
            None => super::super::cuda_codes::STUB_LIBRARY,
        }
    }

    /// `cuStreamSynchronize`.
    pub fn stream_synchronize(stream: sys::CUstream) -> c_int {
        match sym::<StreamSyncFn>(b"cuStreamSynchronize") {
            // SAFETY: a live stream of the current context.
            Some(f) => unsafe { f(stream) },
            None => super::super::cuda_codes::STUB_LIBRARY,
        }
    }

    /// `cuLaunchKernel` with kernel parameters, no `extra`.
    ///
    /// # Safety
    /// `params` must match the kernel's parameter list, as for `cuLaunchKernel`.
    pub unsafe fn launch(
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        stream: sys::CUstream,
        params: &mut [*mut c_void],
    ) -> c_int {
        match sym::<LaunchFn>(b"cuLaunchKernel") {
            Some(l) => l(
                f,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
            None => super::super::cuda_codes::STUB_LIBRARY,
        }
    }

    /// The driver's `(name, text)` for any code, or a placeholder for codes it does not know.
    pub fn describe(code: c_int) -> (String, String) {
        let get = |name: &[u8]| -> Option<String> {
            let f = sym::<NameFn>(name)?;
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: the driver writes a static string pointer (or NULL) into `p`.
            let rc = unsafe { f(code, &mut p) };
            // SAFETY: on success `p` is a NUL-terminated static string.
            (rc == 0 && !p.is_null())
                .then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        let name = get(b"cuGetErrorName")
            .or_else(|| super::super::cuda_code_name(code).map(str::to_string))
            .unwrap_or_else(|| format!("CUDA error {code}"));
        let text = get(b"cuGetErrorString").unwrap_or_else(|| "unknown error code".into());
        (name, text)
    }
}

/// A raw driver result: 0 is success, anything else an error with the driver's own words.
fn check_raw(call: &str, code: std::ffi::c_int) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let (name, text) = raw::describe(code);
    Err(super::cuda_error(call, code, &name, &text))
}

/// A driver error of an allocation-like call: out of memory becomes [`GpuError::OutOfMemory`].
fn alloc_err(call: &str, ordinal: u32, requested: u64, e: DriverError) -> GpuError {
    if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        GpuError::OutOfMemory {
            device: ordinal,
            requested,
            detail: format!("{call}: CUDA_ERROR_OUT_OF_MEMORY"),
        }
    } else {
        driver_err(call, e)
    }
}

/// Run `f`, turning a panic inside cudarc into an error.
fn guarded<T>(call: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        if msg.contains("Missing symbol") || msg.contains("Unable to dynamically load") {
            Err(GpuError::LibraryMissing {
                library: LIBRARY.into(),
                hint: msg,
            })
        } else {
            Err(GpuError::Driver {
                call: call.into(),
                code: "panic".into(),
                message: msg,
            })
        }
    })
}

/// Whether a libcuda.so can be loaded by name (the loader's search path, `LD_LIBRARY_PATH`).
pub fn library_present() -> bool {
    // SAFETY: dlopen by name; the library's initialisers run as in any CUDA program.
    unsafe { sys::is_culib_present() }
}

impl CudaDriver {
    /// Load libcuda.so, check it has every entry point we call, initialise it and check it
    /// sees a device. Missing library or symbols: [`GpuError::LibraryMissing`]; cuInit failure
    /// or zero devices: [`GpuError::NoDevice`].
    pub fn open() -> Result<CudaDriver> {
        if !library_present() {
            return Err(GpuError::LibraryMissing {
                library: LIBRARY.into(),
                hint: MISSING_HINT.into(),
            });
        }
        guarded("open", || {
            // SAFETY: the library is present (checked above), so culib() does not panic.
            let lib = unsafe { sys::culib() };
            let missing: Vec<&str> = REQUIRED_SYMBOLS
                .iter()
                .copied()
                // SAFETY: looking a symbol up does not call it.
                .filter(|s| unsafe { lib.get::<unsafe extern "C" fn()>(s.as_bytes()) }.is_err())
                .collect();
            if !missing.is_empty() {
                let more = match missing.len() {
                    1 => String::new(),
                    n => format!(" (+{} more)", n - 1),
                };
                return Err(GpuError::LibraryMissing {
                    library: LIBRARY.into(),
                    hint: format!(
                        "lacks {}{more}: needs an NVIDIA driver for CUDA 12 (525+)",
                        missing[0]
                    ),
                });
            }
            cudarc::driver::result::init().map_err(|e| match driver_err("cuInit", e) {
                env @ GpuError::Environment { .. } => env,
                GpuError::Driver { code, message, .. } => {
                    GpuError::NoDevice(format!("cuInit failed: {code}: {message}"))
                }
                other => other,
            })?;
            let n = CudaContext::device_count().map_err(|e| {
                GpuError::NoDevice(format!("cuDeviceGetCount failed: {}", name_of(&e)))
            })?;
            if n <= 0 {
                return Err(GpuError::NoDevice(
                    "the CUDA driver sees no device (check CUDA_VISIBLE_DEVICES)".into(),
                ));
            }
            Ok(CudaDriver {
                allocs: HashMap::new(),
                contexts: HashMap::new(),
                next_ctx: 1,
                next_alloc: 1,
                last_fill_ms: None,
            })
        })
    }

    /// Kernel time of the last [`Driver::fill`] (fill plus checksum), from CUDA events.
    pub fn last_fill_ms(&self) -> Option<f32> {
        self.last_fill_ms
    }

    fn context(&self, ctx: ContextId) -> Result<&Context> {
        self.contexts.get(&ctx).ok_or_else(|| GpuError::Driver {
            call: "context".into(),
            code: "CUDA_ERROR_INVALID_CONTEXT".into(),
            message: format!("unknown context {}", ctx.0),
        })
    }

    /// Bind the context and synchronise it with a raw call: a sticky device error (lost,
    /// contained) shows here as an integer code before any cudarc call could meet it.
    fn healthy(&self, ctx: ContextId) -> Result<()> {
        let c = self.context(ctx)?;
        c.ctx
            .bind_to_thread()
            .map_err(|e| driver_err("cuCtxSetCurrent", e))?;
        check_raw("cuCtxSynchronize", raw::ctx_synchronize())
    }

    fn fill_inner(&mut self, alloc: AllocId, value: u32) -> Result<u64> {
        let ctx_id = self
            .allocs
            .get(&alloc)
            .map(|a| a.ctx)
            .ok_or_else(|| unknown_alloc("fill", alloc))?;
        self.healthy(ctx_id)?;
        let c = self
            .contexts
            .get_mut(&ctx_id)
            .ok_or_else(|| unknown_ctx(ctx_id))?;
        let stream = c.stream.clone();
        let k = &c.kernels;
        let a = self
            .allocs
            .get_mut(&alloc)
            .ok_or_else(|| unknown_alloc("fill", alloc))?;
        let n_words: u64 = a.bytes / 4;
        let blocks = n_words.div_ceil(256).clamp(1, 4096) as u32;
        let sum = &mut c.sum;
        stream
            .memset_zeros(sum)
            .map_err(|e| driver_err("cuMemsetD8Async", e))?;
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = c
            .ctx
            .new_event(timing)
            .map_err(|e| driver_err("cuEventCreate", e))?;
        let end = c
            .ctx
            .new_event(timing)
            .map_err(|e| driver_err("cuEventCreate", e))?;
        start
            .record(&stream)
            .map_err(|e| driver_err("cuEventRecord", e))?;
        let grid = (blocks, 1, 1);
        let block = (256, 1, 1);
        {
            let (data, _sync_data) = a.slice.device_ptr_mut(&stream);
            let (out_ptr, _sync_out) = sum.device_ptr_mut(&stream);
            let (mut data, mut n, mut v, mut out_ptr) = (data, n_words, value, out_ptr);
            let mut fill_args: [*mut std::ffi::c_void; 3] = [
                (&mut data as *mut sys::CUdeviceptr).cast(),
                (&mut n as *mut u64).cast(),
                (&mut v as *mut u32).cast(),
            ];
            // SAFETY: the arguments match vramdoc_fill_u32(u32*, u64, u32) in
            // kernels/vramdoc.cu, and n_words * 4 <= the allocation's length.
            check_raw("cuLaunchKernel", unsafe {
                raw::launch(k.fill, grid, block, stream.cu_stream(), &mut fill_args)
            })?;
            let mut check_args: [*mut std::ffi::c_void; 3] = [
                (&mut data as *mut sys::CUdeviceptr).cast(),
                (&mut n as *mut u64).cast(),
                (&mut out_ptr as *mut sys::CUdeviceptr).cast(),
            ];
            // SAFETY: matches vramdoc_checksum_u32(const u32*, u64, u64*); `sum` holds one u64.
            check_raw("cuLaunchKernel", unsafe {
                raw::launch(k.checksum, grid, block, stream.cu_stream(), &mut check_args)
            })?;
        }
        end.record(&stream)
            .map_err(|e| driver_err("cuEventRecord", e))?;
        let out = stream
            .clone_dtoh(&*sum)
            .map_err(|e| driver_err("cuMemcpyDtoHAsync", e))?;
        check_raw(
            "cuStreamSynchronize",
            raw::stream_synchronize(stream.cu_stream()),
        )?;
        self.last_fill_ms = start.elapsed_ms(&end).ok();
        out.first().copied().ok_or_else(|| GpuError::Driver {
            call: "cuMemcpyDtoHAsync".into(),
            code: "CUDA_ERROR_INVALID_VALUE".into(),
            message: "empty checksum read back".into(),
        })
    }
}

fn unknown_alloc(call: &str, alloc: AllocId) -> GpuError {
    GpuError::Driver {
        call: call.into(),
        code: "CUDA_ERROR_INVALID_VALUE".into(),
        message: format!("unknown allocation {}", alloc.0),
    }
}

impl Driver for CudaDriver {
    fn backend(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&mut self) -> Result<u32> {
        guarded("cuDeviceGetCount", || {
            CudaContext::device_count()
                .map(|n| n.max(0) as u32)
                .map_err(|e| driver_err("cuDeviceGetCount", e))
        })
    }

    fn create_context(&mut self, ordinal: u32) -> Result<ContextId> {
        guarded("cuDevicePrimaryCtxRetain", || {
            // CudaContext::new: cuInit, cuDeviceGet(ordinal), cuDevicePrimaryCtxRetain(that
            // device), cuDeviceGetAttribute, cuCtxSetCurrent: nothing on any other device.
            let ctx = CudaContext::new(ordinal as usize).map_err(|e| match e.0 {
                CUresult::CUDA_ERROR_INVALID_DEVICE => GpuError::InvalidDevice(ordinal),
                _ => alloc_err("cuDevicePrimaryCtxRetain", ordinal, 0, e),
            })?;
            let stream = ctx
                .new_stream()
                .map_err(|e| driver_err("cuStreamCreate", e))?;
            // The module and the checksum word come with the context, as a framework loads
            // its kernels at initialisation: later fills need no memory of their own.
            let kernels = Kernels::load(&ctx)?;
            let sum = stream
                .alloc_zeros::<u64>(1)
                .map_err(|e| alloc_err("cuMemAllocAsync", ordinal, 8, e))?;
            let id = ContextId(self.next_ctx);
            self.next_ctx += 1;
            self.contexts.insert(
                id,
                Context {
                    ordinal,
                    stream,
                    kernels,
                    sum,
                    ctx,
                },
            );
            Ok(id)
        })
    }

    fn destroy_context(&mut self, ctx: ContextId) -> Result<()> {
        guarded("cuDevicePrimaryCtxRelease", || {
            self.context(ctx)?;
            self.allocs.retain(|_, a| a.ctx != ctx);
            let c = self.contexts.remove(&ctx).ok_or_else(|| unknown_ctx(ctx))?;
            let synced = c
                .ctx
                .bind_to_thread()
                .map_err(|e| driver_err("cuCtxSetCurrent", e))
                .and_then(|_| {
                    check_raw(
                        "cuStreamSynchronize",
                        raw::stream_synchronize(c.stream.cu_stream()),
                    )
                });
            let pending = c.ctx.check_err();
            // Dropping the last handle releases the primary context (and its memory).
            drop(c);
            synced?;
            pending.map_err(|e| driver_err("cuMemFreeAsync", e))
        })
    }

    fn alloc(&mut self, ctx: ContextId, bytes: u64) -> Result<AllocId> {
        guarded("cuMemAllocAsync", || {
            let c = self.context(ctx)?;
            let len = usize::try_from(bytes).map_err(|_| GpuError::OutOfMemory {
                device: c.ordinal,
                requested: bytes,
                detail: "size does not fit this host's address space".into(),
            })?;
            // SAFETY: the memory is uninitialised until filled; nothing reads it before.
            let slice = unsafe { c.stream.alloc::<u8>(len) }
                .map_err(|e| alloc_err("cuMemAllocAsync", c.ordinal, bytes, e))?;
            let id = AllocId(self.next_alloc);
            self.next_alloc += 1;
            self.allocs.insert(id, Allocation { ctx, bytes, slice });
            Ok(id)
        })
    }

    fn free(&mut self, alloc: AllocId) -> Result<()> {
        guarded("cuMemFreeAsync", || {
            let a = self
                .allocs
                .remove(&alloc)
                .ok_or_else(|| unknown_alloc("free", alloc))?;
            let c = self.context(a.ctx)?;
            let (ctx, stream) = (c.ctx.clone(), c.stream.clone());
            drop(a);
            // The free is stream-ordered: wait for it so the memory is back when we return.
            check_raw(
                "cuStreamSynchronize",
                raw::stream_synchronize(stream.cu_stream()),
            )?;
            ctx.check_err().map_err(|e| driver_err("cuMemFreeAsync", e))
        })
    }

    fn fill(&mut self, alloc: AllocId, value: u32) -> Result<u64> {
        guarded("cuLaunchKernel", || self.fill_inner(alloc, value))
    }

    fn mem_info(&mut self, ctx: ContextId) -> Result<(u64, u64)> {
        guarded("cuMemGetInfo", || {
            let c = self.context(ctx)?;
            let (free, total) = c
                .ctx
                .mem_get_info()
                .map_err(|e| driver_err("cuMemGetInfo", e))?;
            Ok((free as u64, total as u64))
        })
    }

    fn device_uuid(&mut self, ordinal: u32) -> Result<String> {
        guarded("cuDeviceGetUuid", || {
            let dev = result::device::get(ordinal as i32).map_err(|e| match e.0 {
                CUresult::CUDA_ERROR_INVALID_DEVICE => GpuError::InvalidDevice(ordinal),
                _ => driver_err("cuDeviceGet", e),
            })?;
            let uuid =
                result::device::get_uuid(dev).map_err(|e| driver_err("cuDeviceGetUuid", e))?;
            let bytes: [u8; 16] = uuid.bytes.map(|b| b as u8);
            Ok(super::format_gpu_uuid(&bytes))
        })
    }

    fn synchronize(&mut self, ctx: ContextId) -> Result<()> {
        guarded("cuCtxSynchronize", || {
            let c = self.context(ctx)?;
            c.ctx
                .bind_to_thread()
                .map_err(|e| driver_err("cuCtxSetCurrent", e))?;
            check_raw(
                "cuStreamSynchronize",
                raw::stream_synchronize(c.stream.cu_stream()),
            )?;
            check_raw("cuCtxSynchronize", raw::ctx_synchronize())
        })
    }
}

fn unknown_ctx(ctx: ContextId) -> GpuError {
    GpuError::Driver {
        call: "context".into(),
        code: "CUDA_ERROR_INVALID_CONTEXT".into(),
        message: format!("unknown context {}", ctx.0),
    }
}

impl Drop for CudaDriver {
    fn drop(&mut self) {
        // cudarc's Drop impls record errors rather than panic; guard anyway, a panic in drop
        // during unwinding would abort.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            self.allocs.clear();
            self.contexts.clear();
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_ptx_has_both_kernels() {
        assert!(KERNELS_PTX.contains(&format!(".entry {KERNEL_FILL}(")));
        assert!(KERNELS_PTX.contains(&format!(".entry {KERNEL_CHECKSUM}(")));
        assert!(
            KERNELS_PTX.contains(".version 8.0"),
            "PTX ISA 8.0: any CUDA 12 driver JITs it"
        );
    }
}
