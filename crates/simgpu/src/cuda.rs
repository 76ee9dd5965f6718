//! The CUDA driver API (cuda.h, CUDA 12) over the simulated box: every entry point cudarc
//! 0.19's safe API calls, under the exact symbol names cudarc resolves with dlsym
//! (`cuMemAlloc_v2`, `cuDevicePrimaryCtxRelease_v2`, ...). One global [`Driver`] behind a
//! mutex, created by `cuInit` from `VRAMDOC_SIM_DIR` and `CUDA_VISIBLE_DEVICES`; a per-thread
//! current-context stack. Handles (`CUcontext`, `CUstream`, `CUevent`, `CUmodule`,
//! `CUfunction`) are opaque non-null values minted here. All work runs synchronously when
//! submitted, so streams and events only order nothing and events timestamp submission.
//!
//! Kernels are emulated by name (see kernels/vramdoc.cu): `vramdoc_fill_u32` and
//! `vramdoc_checksum_u32`; any other kernel launches fail with `CUDA_ERROR_NOT_FOUND`.
//! Return codes follow cuda.h; the choices where the simulator must pick one (a lost device,
//! an unreadable box) are documented in docs/simulator.md. No entry point panics across the
//! C ABI: every body runs under `catch_unwind` and a panic becomes `CUDA_ERROR_UNKNOWN`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use vramdoc_gpu_spec::kernel;
use vramdoc_sim::{SimError, SimProcess};

/// `CUresult` (cuda.h `enum cudaError_enum`); only the codes this library returns.
pub type CUresult = c_uint;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_STUB_LIBRARY: CUresult = 34;
pub const CUDA_ERROR_DEVICE_UNAVAILABLE: CUresult = 46;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_IMAGE: CUresult = 200;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_INVALID_PTX: CUresult = 218;
/// Newer than some client headers: cuda.h 12.0 ends its JIT codes at 222, but 221 exists
/// since CUDA 11.1; 226 arrived with CUDA 12.4 (CUDA 12.0 clients do not know it).
pub const CUDA_ERROR_JIT_COMPILER_NOT_FOUND: CUresult = 221;
pub const CUDA_ERROR_CONTAINED: CUresult = 226;
pub const CUDA_ERROR_FILE_NOT_FOUND: CUresult = 301;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
pub const CUDA_ERROR_LAUNCH_FAILED: CUresult = 719;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: CUresult = 803;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// cuda.h names and descriptions (cuGetErrorName / cuGetErrorString) of the codes above and
/// the other common ones.
const ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (
        34,
        c"CUDA_ERROR_STUB_LIBRARY",
        c"CUDA driver is a stub library",
    ),
    (
        100,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (
        46,
        c"CUDA_ERROR_DEVICE_UNAVAILABLE",
        c"CUDA-capable device(s) is/are busy or unavailable",
    ),
    (
        221,
        c"CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
        c"PTX JIT compiler library not found",
    ),
    (
        226,
        c"CUDA_ERROR_CONTAINED",
        c"uncorrectable error was contained",
    ),
    (
        803,
        c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        c"system has unsupported display driver / cuda driver combination",
    ),
    (
        200,
        c"CUDA_ERROR_INVALID_IMAGE",
        c"device kernel image is invalid",
    ),
    (
        201,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        218,
        c"CUDA_ERROR_INVALID_PTX",
        c"a PTX JIT compilation failed",
    ),
    (
        222,
        c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        c"the provided PTX was compiled with an unsupported toolchain.",
    ),
    (301, c"CUDA_ERROR_FILE_NOT_FOUND", c"file not found"),
    (
        400,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (
        700,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (
        709,
        c"CUDA_ERROR_CONTEXT_IS_DESTROYED",
        c"context is destroyed",
    ),
    (
        719,
        c"CUDA_ERROR_LAUNCH_FAILED",
        c"unspecified launch failure",
    ),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

/// Kernels the simulator emulates, by PTX entry name.
pub const KERNEL_FILL: &str = kernel::FILL;
pub const KERNEL_CHECKSUM: &str = kernel::CHECKSUM;

/// Event flag: no timing data (cuda.h `CU_EVENT_DISABLE_TIMING`).
const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
/// Stream handles with a meaning of their own: legacy and per-thread default streams.
const CU_STREAM_LEGACY: usize = 0x1;
const CU_STREAM_PER_THREAD: usize = 0x2;

struct Context {
    ordinal: u32,
    primary: bool,
    /// Primary contexts keep their handle after release; `active` says whether one exists.
    active: bool,
    retains: u32,
}

struct Stream {
    ctx: usize,
}

struct Event {
    ctx: usize,
    timing: bool,
    recorded: Option<Instant>,
}

struct Module {
    ctx: usize,
    entries: Vec<String>,
}

struct Function {
    module: usize,
    name: String,
}

/// The driver state of this process.
struct Driver {
    proc: SimProcess,
    contexts: HashMap<usize, Context>,
    /// Primary context handle per ordinal (minted on first retain, stable afterwards).
    primaries: HashMap<u32, usize>,
    streams: HashMap<usize, Stream>,
    events: HashMap<usize, Event>,
    modules: HashMap<usize, Module>,
    functions: HashMap<usize, Function>,
    /// Allocation base pointer -> owning context handle.
    allocations: HashMap<u64, usize>,
    next_handle: usize,
}

static DRIVER: Mutex<Option<Driver>> = Mutex::new(None);

thread_local! {
    /// This thread's context stack; the top is the current context.
    static CTX_STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn current_ctx() -> Option<usize> {
    CTX_STACK.with(|s| s.borrow().last().copied())
}

fn set_current(ctx: Option<usize>) {
    CTX_STACK.with(|s| {
        let mut s = s.borrow_mut();
        match ctx {
            Some(c) => match s.last_mut() {
                Some(top) => *top = c,
                None => s.push(c),
            },
            None => {
                s.pop();
            }
        }
    });
}

fn lock() -> MutexGuard<'static, Option<Driver>> {
    DRIVER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run an entry point body: no panic crosses the C ABI.
fn guard(f: impl FnOnce() -> CUresult) -> CUresult {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(CUDA_ERROR_UNKNOWN)
}

/// Run `f` on the initialised driver (`CUDA_ERROR_NOT_INITIALIZED` before a successful cuInit).
fn with_driver(f: impl FnOnce(&mut Driver) -> Result<(), CUresult>) -> CUresult {
    guard(|| {
        let mut g = lock();
        match g.as_mut() {
            None => CUDA_ERROR_NOT_INITIALIZED,
            Some(d) => match f(d) {
                Ok(()) => CUDA_SUCCESS,
                Err(code) => code,
            },
        }
    })
}

/// CUresult of a simulator error. A lost device gives `CUDA_ERROR_UNKNOWN` here; launches
/// and synchronisation use [`sync_code`] instead.
fn code(e: SimError) -> CUresult {
    match e {
        SimError::InvalidDevice(_) => CUDA_ERROR_INVALID_DEVICE,
        SimError::DeviceLost(_) => CUDA_ERROR_UNKNOWN,
        SimError::OutOfMemory { .. } => CUDA_ERROR_OUT_OF_MEMORY,
        SimError::NoContext(_) => CUDA_ERROR_INVALID_CONTEXT,
        SimError::InvalidPointer(_) | SimError::OutOfBounds { .. } => CUDA_ERROR_INVALID_VALUE,
        SimError::Unsupported(_) => CUDA_ERROR_NOT_SUPPORTED,
        SimError::NoBox => CUDA_ERROR_NO_DEVICE,
        // NVML-only (MIG parent, unmounted device): CUDA never sees such a device.
        SimError::NoPermission(_) => CUDA_ERROR_INVALID_DEVICE,
        SimError::DeviceBusy(_) => CUDA_ERROR_DEVICE_UNAVAILABLE,
        SimError::Contained(_) => CUDA_ERROR_CONTAINED,
        SimError::BadBox { .. }
        | SimError::Io { .. }
        | SimError::Spec(_)
        | SimError::Profile(_) => CUDA_ERROR_UNKNOWN,
    }
}

/// CUresult of a failure seen by a launch or a synchronisation: work on a device that fell off
/// the bus reports `CUDA_ERROR_LAUNCH_FAILED` ("unspecified launch failure").
fn sync_code(e: SimError) -> CUresult {
    match e {
        SimError::DeviceLost(_) => CUDA_ERROR_LAUNCH_FAILED,
        other => code(other),
    }
}

fn out<T>(p: *mut T, v: T) -> Result<(), CUresult> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: caller-provided output pointer, checked non-null; cuda.h contract.
    unsafe { p.write(v) };
    Ok(())
}

fn nonnull<T>(p: *const T) -> Result<(), CUresult> {
    if p.is_null() {
        Err(CUDA_ERROR_INVALID_VALUE)
    } else {
        Ok(())
    }
}

/// Write `s` as a NUL-terminated string into `buf` of `len` bytes (truncating).
fn write_cstr(buf: *mut c_char, len: c_int, s: &str) -> Result<(), CUresult> {
    if buf.is_null() || len <= 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let bytes = s.as_bytes();
    let n = bytes.len().min(len as usize - 1);
    // SAFETY: buf holds len bytes per the caller's contract; we write n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
    Ok(())
}

/// PTX `.entry` names of a module image.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = ptx;
    while let Some(i) = rest.find(".entry") {
        let after = &rest[i + ".entry".len()..];
        // `.entry` must be a whole directive, followed by whitespace.
        if after.starts_with(|c: char| c.is_whitespace()) {
            let name: String = after
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$' || *c == '.')
                .collect();
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
        }
        rest = after;
    }
    names
}

impl Driver {
    fn mint(&mut self) -> usize {
        let h = self.next_handle;
        self.next_handle += 0x10;
        h
    }

    fn ordinal(&self, dev: CUdevice) -> Result<u32, CUresult> {
        if dev < 0 || dev as u32 >= self.proc.device_count() {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        Ok(dev as u32)
    }

    /// A live context handle, else `CUDA_ERROR_INVALID_CONTEXT`.
    fn ctx(&self, h: usize) -> Result<&Context, CUresult> {
        match self.contexts.get(&h) {
            Some(c) if c.active => Ok(c),
            _ => Err(CUDA_ERROR_INVALID_CONTEXT),
        }
    }

    /// The calling thread's current context, which must be live.
    fn current(&self) -> Result<usize, CUresult> {
        let h = current_ctx().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        self.ctx(h)?;
        Ok(h)
    }

    /// Context of a stream handle (null and the special default streams: the current one).
    fn stream_ctx(&self, stream: CUstream) -> Result<usize, CUresult> {
        let s = stream as usize;
        if s == 0 || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD {
            return self.current();
        }
        let st = self.streams.get(&s).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        self.ctx(st.ctx)?;
        Ok(st.ctx)
    }

    /// Create a context on `ordinal` (charging its overhead on that device only).
    fn create_context(&mut self, ordinal: u32, primary: bool) -> Result<usize, CUresult> {
        self.proc.create_context(ordinal).map_err(code)?;
        let h = if primary {
            match self.primaries.get(&ordinal) {
                Some(h) => *h,
                None => {
                    let h = self.mint();
                    self.primaries.insert(ordinal, h);
                    h
                }
            }
        } else {
            self.mint()
        };
        self.contexts.insert(
            h,
            Context {
                ordinal,
                primary,
                active: true,
                retains: 1,
            },
        );
        Ok(h)
    }

    /// Destroy a context: its allocations, streams, events and modules go with it.
    fn destroy_context(&mut self, h: usize) -> Result<(), CUresult> {
        let ordinal = self.ctx(h)?.ordinal;
        let mine: Vec<u64> = self
            .allocations
            .iter()
            .filter(|(_, c)| **c == h)
            .map(|(p, _)| *p)
            .collect();
        for p in mine {
            self.allocations.remove(&p);
            self.proc.free(p).map_err(code)?;
        }
        self.streams.retain(|_, s| s.ctx != h);
        self.events.retain(|_, e| e.ctx != h);
        let modules: Vec<usize> = self
            .modules
            .iter()
            .filter(|(_, m)| m.ctx == h)
            .map(|(k, _)| *k)
            .collect();
        self.functions.retain(|_, f| !modules.contains(&f.module));
        self.modules.retain(|_, m| m.ctx != h);
        self.proc.destroy_context(ordinal).map_err(code)?;
        if let Some(c) = self.contexts.get_mut(&h) {
            c.active = false;
            c.retains = 0;
        }
        if !self.contexts.get(&h).is_some_and(|c| c.primary) {
            self.contexts.remove(&h);
        }
        Ok(())
    }

    /// Allocate in context `h`.
    fn alloc(&mut self, h: usize, bytes: usize) -> Result<u64, CUresult> {
        if bytes == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let ordinal = self.ctx(h)?.ordinal;
        let ptr = self.proc.alloc(ordinal, bytes as u64).map_err(code)?;
        self.allocations.insert(ptr, h);
        Ok(ptr)
    }

    fn free(&mut self, ptr: u64) -> Result<(), CUresult> {
        if ptr == 0 || !self.allocations.contains_key(&ptr) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        self.proc.free(ptr).map_err(code)?;
        self.allocations.remove(&ptr);
        Ok(())
    }

    /// Fail when the device behind an ordinal is lost (work that would run there).
    fn check_device(&self, ordinal: u32) -> Result<(), CUresult> {
        self.proc.check(ordinal).map_err(sync_code)
    }

    fn check_ptr(&mut self, ptr: u64) -> Result<u32, CUresult> {
        let ordinal = self.proc.ordinal_of(ptr).map_err(code)?;
        self.proc.check(ordinal).map_err(code)?;
        Ok(ordinal)
    }

    fn memcpy_htod(&mut self, dst: u64, src: *const c_void, n: usize) -> Result<(), CUresult> {
        if n == 0 {
            return Ok(());
        }
        nonnull(src)?;
        self.check_ptr(dst)?;
        // SAFETY: src holds n bytes per the caller's contract, checked non-null.
        let data = unsafe { std::slice::from_raw_parts(src as *const u8, n) };
        self.proc.write(dst, data).map_err(code)
    }

    fn memcpy_dtoh(&mut self, dst: *mut c_void, src: u64, n: usize) -> Result<(), CUresult> {
        if n == 0 {
            return Ok(());
        }
        nonnull(dst)?;
        self.check_ptr(src)?;
        // SAFETY: dst holds n bytes per the caller's contract, checked non-null.
        let buf = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, n) };
        self.proc.read(src, buf).map_err(code)
    }

    fn memcpy_dtod(&mut self, dst: u64, src: u64, n: usize) -> Result<(), CUresult> {
        if n == 0 {
            return Ok(());
        }
        self.check_ptr(src)?;
        self.check_ptr(dst)?;
        let mut buf = vec![0u8; n];
        self.proc.read(src, &mut buf).map_err(code)?;
        self.proc.write(dst, &buf).map_err(code)
    }

    fn memset8(&mut self, dst: u64, v: u8, n: usize) -> Result<(), CUresult> {
        if n == 0 {
            return Ok(());
        }
        self.check_ptr(dst)?;
        self.proc.memset8(dst, v, n as u64).map_err(code)
    }

    fn memset32(&mut self, dst: u64, v: u32, n: usize) -> Result<(), CUresult> {
        if !dst.is_multiple_of(4) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if n == 0 {
            return Ok(());
        }
        self.check_ptr(dst)?;
        self.proc.fill_u32(dst, v, n as u64).map_err(code)
    }

    fn load_module(&mut self, image: &str) -> Result<usize, CUresult> {
        let ctx = self.current()?;
        let entries = ptx_entries(image);
        if !image.contains(".version") || !image.contains(".target") {
            return Err(CUDA_ERROR_INVALID_PTX);
        }
        // PTX needs the JIT compiler library (libnvidia-ptxjitcompiler.so).
        if self.proc.sim().faults().map_err(code)?.no_ptx_jit {
            return Err(CUDA_ERROR_JIT_COMPILER_NOT_FOUND);
        }
        let h = self.mint();
        self.modules.insert(h, Module { ctx, entries });
        Ok(h)
    }

    /// Run an emulated kernel. Kernel faults (bad pointer, wrong device) give
    /// `CUDA_ERROR_ILLEGAL_ADDRESS` as a real launch would report them.
    fn launch(
        &mut self,
        f: usize,
        stream: CUstream,
        params: *mut *mut c_void,
    ) -> Result<(), CUresult> {
        let func = self.functions.get(&f).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let module = self
            .modules
            .get(&func.module)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let ctx = module.ctx;
        let name = func.name.clone();
        let ordinal = self.ctx(ctx)?.ordinal;
        let sctx = self.stream_ctx(stream)?;
        if sctx != ctx {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        self.check_device(ordinal)?;
        nonnull(params)?;
        // SAFETY: kernelParams holds one pointer per kernel parameter (cuda.h contract); both
        // emulated kernels take three, each pointing at a value of the PTX parameter's type.
        let arg = |i: usize| -> Result<*mut c_void, CUresult> {
            let p = unsafe { *params.add(i) };
            if p.is_null() {
                Err(CUDA_ERROR_INVALID_VALUE)
            } else {
                Ok(p)
            }
        };
        let on_device = |d: &mut Driver, ptr: u64| -> Result<(), CUresult> {
            match d.proc.ordinal_of(ptr) {
                Ok(o) if o == ordinal => Ok(()),
                _ => Err(CUDA_ERROR_ILLEGAL_ADDRESS),
            }
        };
        let fault = |e: SimError| match e {
            SimError::InvalidPointer(_) | SimError::OutOfBounds { .. } => {
                CUDA_ERROR_ILLEGAL_ADDRESS
            }
            other => sync_code(other),
        };
        match name.as_str() {
            KERNEL_FILL => {
                // SAFETY: parameter types per kernels/vramdoc.cu: (u32*, u64, u32).
                let (ptr, n, value) = unsafe {
                    (
                        *(arg(0)? as *const u64),
                        *(arg(1)? as *const u64),
                        *(arg(2)? as *const u32),
                    )
                };
                if n == 0 {
                    return Ok(());
                }
                on_device(self, ptr)?;
                self.proc.fill_u32(ptr, value, n).map_err(fault)
            }
            KERNEL_CHECKSUM => {
                // SAFETY: parameter types per kernels/vramdoc.cu: (const u32*, u64, u64*).
                let (ptr, n, outp) = unsafe {
                    (
                        *(arg(0)? as *const u64),
                        *(arg(1)? as *const u64),
                        *(arg(2)? as *const u64),
                    )
                };
                on_device(self, outp)?;
                let sum = if n == 0 {
                    0
                } else {
                    on_device(self, ptr)?;
                    self.proc.checksum_u32(ptr, n).map_err(fault)?
                };
                let mut cur = [0u8; 8];
                self.proc.read(outp, &mut cur).map_err(fault)?;
                let total = u64::from_le_bytes(cur).wrapping_add(sum);
                self.proc.write(outp, &total.to_le_bytes()).map_err(fault)
            }
            _ => Err(CUDA_ERROR_NOT_FOUND),
        }
    }
}

use vramdoc_sim::spec::arch_of;

fn pci_parts(bus_id: &str) -> (i32, i32, i32) {
    // NVML form `00000000:17:00.0`: domain, bus, device.
    let mut it = bus_id.split([':', '.']);
    let domain = it
        .next()
        .and_then(|s| i32::from_str_radix(s, 16).ok())
        .unwrap_or(0);
    let bus = it
        .next()
        .and_then(|s| i32::from_str_radix(s, 16).ok())
        .unwrap_or(0);
    let dev = it
        .next()
        .and_then(|s| i32::from_str_radix(s, 16).ok())
        .unwrap_or(0);
    (domain, bus, dev)
}

/// The 16 bytes of a `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` UUID (zeros if malformed;
/// the box's UUIDs never are).
pub fn uuid_bytes(uuid: &str) -> [u8; 16] {
    vramdoc_gpu_spec::uuid::parse_gpu_uuid(uuid).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Initialisation, versions, errors

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    guard(|| {
        if flags != 0 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let mut g = lock();
        if g.is_some() {
            return CUDA_SUCCESS;
        }
        if let Some(c) = init_fault() {
            return c;
        }
        let proc = match SimProcess::from_env() {
            Ok(p) => p,
            Err(SimError::NoBox) => return CUDA_ERROR_NO_DEVICE,
            Err(_) => return CUDA_ERROR_NOT_INITIALIZED,
        };
        if proc.device_count() == 0 {
            return CUDA_ERROR_NO_DEVICE;
        }
        *g = Some(Driver {
            proc,
            contexts: HashMap::new(),
            primaries: HashMap::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            allocations: HashMap::new(),
            next_handle: 0x5100_0000,
        });
        CUDA_SUCCESS
    })
}

/// Box faults that make the library unusable as a whole: the toolkit's stub shadowing the
/// driver (every call `CUDA_ERROR_STUB_LIBRARY`), a library/kernel-module mismatch.
fn init_fault() -> Option<CUresult> {
    let faults = vramdoc_sim::SimBox::from_env().ok()?.faults().ok()?;
    if faults.cuda_stub_library {
        Some(CUDA_ERROR_STUB_LIBRARY)
    } else if faults.driver_version_mismatch {
        Some(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
    } else {
        None
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    guard(|| {
        if init_fault() == Some(CUDA_ERROR_STUB_LIBRARY) {
            return CUDA_ERROR_STUB_LIBRARY;
        }
        let v = match lock().as_ref() {
            Some(d) => d.proc.sim().config().cuda_driver_version,
            None => vramdoc_sim::SimBox::from_env()
                .map(|b| b.config().cuda_driver_version)
                .unwrap_or(vramdoc_sim::InitOptions::default().cuda_driver_version),
        };
        match out(version, v) {
            Ok(()) => CUDA_SUCCESS,
            Err(c) => c,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, p_str: *mut *const c_char) -> CUresult {
    guard(|| match ERRORS.iter().find(|(c, _, _)| *c == error) {
        Some((_, name, _)) => match out(p_str, name.as_ptr()) {
            Ok(()) => CUDA_SUCCESS,
            Err(c) => c,
        },
        None => {
            let _ = out(p_str, std::ptr::null());
            CUDA_ERROR_INVALID_VALUE
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, p_str: *mut *const c_char) -> CUresult {
    guard(|| match ERRORS.iter().find(|(c, _, _)| *c == error) {
        Some((_, _, text)) => match out(p_str, text.as_ptr()) {
            Ok(()) => CUDA_SUCCESS,
            Err(c) => c,
        },
        None => {
            let _ = out(p_str, std::ptr::null());
            CUDA_ERROR_INVALID_VALUE
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Devices

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    with_driver(|d| out(count, d.proc.device_count() as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    with_driver(|d| {
        d.ordinal(ordinal)?;
        out(device, ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        let n = d.proc.device(o).map_err(code)?.name.clone();
        write_cstr(name, len, &n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        let u = uuid_bytes(&d.proc.device(o).map_err(code)?.uuid);
        out(uuid, u)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    cuDeviceGetUuid(uuid, dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        // The same total cuMemGetInfo reports for the device.
        out(bytes, d.proc.mem_info(o).map_err(code)?.1 as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(
    bus_id: *mut c_char,
    len: c_int,
    dev: CUdevice,
) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        let (domain, bus, device) = pci_parts(&d.proc.device(o).map_err(code)?.pci_bus_id);
        // CUDA's form: 4-digit domain, `0000:17:00.0`.
        write_cstr(
            bus_id,
            len,
            &format!("{domain:04x}:{bus:02x}:{device:02x}.0"),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    dev: CUdevice,
) -> CUresult {
    with_driver(|d| {
        let o = d.ordinal(dev)?;
        let info = d.proc.device(o).map_err(code)?;
        let ((major, minor), sms) = arch_of(&info.name);
        let (domain, bus, device) = pci_parts(&info.pci_bus_id);
        let v = match attrib {
            1 => 1024,       // MAX_THREADS_PER_BLOCK
            2 | 3 => 1024,   // MAX_BLOCK_DIM_X / Y
            4 => 64,         // MAX_BLOCK_DIM_Z
            5 => i32::MAX,   // MAX_GRID_DIM_X
            6 | 7 => 65535,  // MAX_GRID_DIM_Y / Z
            8 => 48 * 1024,  // MAX_SHARED_MEMORY_PER_BLOCK
            9 => 64 * 1024,  // TOTAL_CONSTANT_MEMORY
            10 => 32,        // WARP_SIZE
            12 => 65536,     // MAX_REGISTERS_PER_BLOCK
            13 => 1_410_000, // CLOCK_RATE (kHz)
            16 => sms,       // MULTIPROCESSOR_COUNT
            18 => 0,         // INTEGRATED
            20 => 0,         // COMPUTE_MODE: default
            31 => 1,         // CONCURRENT_KERNELS
            32 => 1,         // ECC_ENABLED
            33 => bus,       // PCI_BUS_ID
            34 => device,    // PCI_DEVICE_ID
            39 => 2048,      // MAX_THREADS_PER_MULTIPROCESSOR
            41 => 1,         // UNIFIED_ADDRESSING
            50 => domain,    // PCI_DOMAIN_ID
            75 => major,     // COMPUTE_CAPABILITY_MAJOR
            76 => minor,     // COMPUTE_CAPABILITY_MINOR
            83 => 1,         // MANAGED_MEMORY
            115 => 1,        // MEMORY_POOLS_SUPPORTED: cudarc then uses cuMemAllocAsync
            a if (1..256).contains(&a) => 0,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        out(pi, v)
    })
}

// ---------------------------------------------------------------------------------------------
// Contexts

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
        let c = d.ctx(h)?;
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

// ---------------------------------------------------------------------------------------------
// Streams and events

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

// ---------------------------------------------------------------------------------------------
// Memory

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    with_driver(|d| {
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
    with_driver(|d| {
        nonnull(dptr)?;
        let ctx = d.stream_ctx(stream)?;
        let p = d.alloc(ctx, bytes)?;
        out(dptr, p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    with_driver(|d| d.free(dptr))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    with_driver(|d| {
        d.stream_ctx(stream)?;
        d.free(dptr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    with_driver(|d| {
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
    with_driver(|d| {
        nonnull(pp)?;
        d.current()?;
        // SAFETY: plain host allocation, released by cuMemFreeHost.
        let p = unsafe { libc::malloc(bytes.max(1)) };
        if p.is_null() {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
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
    with_driver(|_| {
        nonnull(p)?;
        // SAFETY: p came from cuMemAllocHost_v2 / cuMemHostAlloc (libc::malloc).
        unsafe { libc::free(p) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, uc: u8, n: usize) -> CUresult {
    with_driver(|d| d.memset8(dst, uc, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    uc: u8,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver(|d| {
        d.stream_ctx(stream)?;
        d.memset8(dst, uc, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: CUdeviceptr, ui: c_uint, n: usize) -> CUresult {
    with_driver(|d| d.memset32(dst, ui, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: CUdeviceptr,
    ui: c_uint,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver(|d| {
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
    with_driver(|d| d.memcpy_htod(dst, src, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver(|d| {
        d.stream_ctx(stream)?;
        d.memcpy_htod(dst, src, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    with_driver(|d| d.memcpy_dtoh(dst, src, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver(|d| {
        d.stream_ctx(stream)?;
        d.memcpy_dtoh(dst, src, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    with_driver(|d| d.memcpy_dtod(dst, src, n))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: CUstream,
) -> CUresult {
    with_driver(|d| {
        d.stream_ctx(stream)?;
        d.memcpy_dtod(dst, src, n)
    })
}

// ---------------------------------------------------------------------------------------------
// Modules and launches

fn image_text(image: *const c_void) -> Result<String, CUresult> {
    nonnull(image)?;
    // SAFETY: a module image is a NUL-terminated PTX string (or a binary, whose header holds
    // a NUL within its first 8 bytes), per cuModuleLoadData's contract.
    let bytes = unsafe { CStr::from_ptr(image as *const c_char) }.to_bytes();
    if bytes.starts_with(b"\x7fELF") || bytes.starts_with(&[0xb1, 0x43, 0x62, 0x46]) {
        // cubin / fatbin: the simulator emulates PTX modules only.
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| CUDA_ERROR_INVALID_IMAGE)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CUresult {
    with_driver(|d| {
        nonnull(module)?;
        let text = image_text(image)?;
        let h = d.load_module(&text)?;
        out(module, h as CUmodule)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut CUmodule,
    image: *const c_void,
    _num_options: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
) -> CUresult {
    cuModuleLoadData(module, image)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char) -> CUresult {
    with_driver(|d| {
        nonnull(module)?;
        nonnull(fname)?;
        // SAFETY: NUL-terminated file name per cuda.h.
        let path = unsafe { CStr::from_ptr(fname) }
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).map_err(|_| CUDA_ERROR_FILE_NOT_FOUND)?;
        let h = d.load_module(&text)?;
        out(module, h as CUmodule)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(module: CUmodule) -> CUresult {
    with_driver(|d| {
        let h = module as usize;
        d.modules.remove(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        d.functions.retain(|_, f| f.module != h);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    hfunc: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> CUresult {
    with_driver(|d| {
        nonnull(hfunc)?;
        nonnull(name)?;
        // SAFETY: NUL-terminated function name per cuda.h.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let m = d
            .modules
            .get(&(module as usize))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if !m.entries.contains(&name) {
            return Err(CUDA_ERROR_NOT_FOUND);
        }
        let existing = d
            .functions
            .iter()
            .find(|(_, f)| f.module == module as usize && f.name == name)
            .map(|(h, _)| *h);
        let h = match existing {
            Some(h) => h,
            None => {
                let h = d.mint();
                d.functions.insert(
                    h,
                    Function {
                        module: module as usize,
                        name,
                    },
                );
                h
            }
        };
        out(hfunc, h as CUfunction)
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    _shared_mem_bytes: c_uint,
    stream: CUstream,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    with_driver(|d| {
        if [grid_x, grid_y, grid_z, block_x, block_y, block_z].contains(&0)
            || (block_x as u64) * (block_y as u64) * (block_z as u64) > 1024
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if kernel_params.is_null() {
            // Parameters packed through `extra` are not emulated.
            return Err(if extra.is_null() {
                CUDA_ERROR_INVALID_VALUE
            } else {
                CUDA_ERROR_NOT_SUPPORTED
            });
        }
        d.launch(f as usize, stream, kernel_params)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null_mut;

    #[test]
    fn entries_are_parsed_from_ptx() {
        let ptx = include_str!("../../../kernels/vramdoc.ptx");
        assert_eq!(ptx_entries(ptx), vec![KERNEL_FILL, KERNEL_CHECKSUM]);
        assert_eq!(
            ptx_entries(".entry  foo (\n) .entry\tbar_1(\n.entryx baz("),
            vec!["foo", "bar_1"]
        );
    }

    #[test]
    fn uuid_bytes_parse() {
        let b = uuid_bytes("GPU-01234567-89ab-cdef-0011-223344556677");
        assert_eq!(b[0], 0x01);
        assert_eq!(b[15], 0x77);
    }

    #[test]
    fn error_names_and_strings() {
        let mut p: *const c_char = std::ptr::null();
        unsafe {
            assert_eq!(
                cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &mut p),
                CUDA_SUCCESS
            );
            assert_eq!(
                CStr::from_ptr(p).to_str().unwrap(),
                "CUDA_ERROR_OUT_OF_MEMORY"
            );
            assert_eq!(
                cuGetErrorString(CUDA_ERROR_INVALID_CONTEXT, &mut p),
                CUDA_SUCCESS
            );
            assert_eq!(
                CStr::from_ptr(p).to_str().unwrap(),
                "invalid device context"
            );
            assert_eq!(cuGetErrorName(12345, &mut p), CUDA_ERROR_INVALID_VALUE);
            assert!(p.is_null());
            assert_eq!(cuGetErrorName(0, null_mut()), CUDA_ERROR_INVALID_VALUE);
        }
    }

    /// The whole ABI in one sequence: the driver is one global per process, so one test owns it.
    #[test]
    fn driver_api_sequence_over_a_box() {
        let dir = tempfile::tempdir().unwrap();
        let b = vramdoc_sim::SimBox::create(dir.path(), "2x16GiB", &Default::default()).unwrap();
        unsafe {
            let mut n = 0;
            assert_eq!(cuDeviceGetCount(&mut n), CUDA_ERROR_NOT_INITIALIZED);
            std::env::set_var("VRAMDOC_SIM_DIR", dir.path());
            std::env::set_var("CUDA_VISIBLE_DEVICES", "1");
            assert_eq!(cuInit(1), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuInit(0), CUDA_SUCCESS);
            assert_eq!(cuDeviceGetCount(&mut n), CUDA_SUCCESS);
            assert_eq!(n, 1, "CUDA_VISIBLE_DEVICES=1 leaves one ordinal");
            let mut dev = -1;
            assert_eq!(cuDeviceGet(&mut dev, 1), CUDA_ERROR_INVALID_DEVICE);
            assert_eq!(cuDeviceGet(&mut dev, 0), CUDA_SUCCESS);
            let mut name = [0 as c_char; 64];
            assert_eq!(cuDeviceGetName(name.as_mut_ptr(), 64, dev), CUDA_SUCCESS);
            assert_eq!(
                CStr::from_ptr(name.as_ptr()).to_str().unwrap(),
                b.devices()[1].name
            );
            let mut uuid = [0u8; 16];
            assert_eq!(cuDeviceGetUuid(&mut uuid, dev), CUDA_SUCCESS);
            assert_eq!(
                uuid,
                uuid_bytes(&b.devices()[1].uuid),
                "ordinal 0 is physical 1"
            );

            // No current context yet.
            let mut p: CUdeviceptr = 0;
            assert_eq!(cuMemAlloc_v2(&mut p, 1024), CUDA_ERROR_INVALID_CONTEXT);
            assert_eq!(
                cuDevicePrimaryCtxRelease_v2(dev),
                CUDA_ERROR_INVALID_CONTEXT
            );

            // Retain twice: one context, one overhead, on physical 1 only.
            let overhead = b.device(1).unwrap().context_overhead;
            let mut ctx: CUcontext = null_mut();
            let mut ctx2: CUcontext = null_mut();
            assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, dev), CUDA_SUCCESS);
            assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx2, dev), CUDA_SUCCESS);
            assert_eq!(ctx, ctx2);
            assert_eq!(b.memory(1).unwrap().used, overhead);
            assert_eq!(b.memory(0).unwrap().used, 0);
            assert_eq!(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
            let mut cur: CUcontext = null_mut();
            assert_eq!(cuCtxGetCurrent(&mut cur), CUDA_SUCCESS);
            assert_eq!(cur, ctx);

            // Streams, events, async alloc, copies, memset.
            let mut s: CUstream = null_mut();
            assert_eq!(cuStreamCreate(&mut s, 1), CUDA_SUCCESS);
            let (mut e0, mut e1): (CUevent, CUevent) = (null_mut(), null_mut());
            assert_eq!(cuEventCreate(&mut e0, 0), CUDA_SUCCESS);
            assert_eq!(cuEventCreate(&mut e1, 0), CUDA_SUCCESS);
            let mut ms = 0f32;
            assert_eq!(
                cuEventElapsedTime(&mut ms, e0, e1),
                CUDA_ERROR_INVALID_HANDLE,
                "not recorded"
            );
            assert_eq!(cuEventRecord(e0, s), CUDA_SUCCESS);
            assert_eq!(cuMemAllocAsync(&mut p, 3 << 20, s), CUDA_SUCCESS);
            assert_eq!(
                b.memory(1).unwrap().used,
                overhead + (4 << 20),
                "rounded to 2 MiB"
            );
            let words: Vec<u32> = (0..256).collect();
            assert_eq!(
                cuMemcpyHtoDAsync_v2(p, words.as_ptr() as _, 1024, s),
                CUDA_SUCCESS
            );
            let mut back = vec![0u32; 256];
            assert_eq!(
                cuMemcpyDtoH_v2(back.as_mut_ptr() as _, p, 1024),
                CUDA_SUCCESS
            );
            assert_eq!(back, words);
            assert_eq!(cuMemsetD32Async(p, 9, 256, s), CUDA_SUCCESS);
            assert_eq!(
                cuMemcpyDtoHAsync_v2(back.as_mut_ptr() as _, p, 1024, s),
                CUDA_SUCCESS
            );
            assert!(back.iter().all(|w| *w == 9));
            assert_eq!(
                cuMemcpyDtoH_v2(back.as_mut_ptr() as _, p + (3 << 20), 8),
                CUDA_ERROR_INVALID_VALUE
            );

            // Module, functions, launches.
            let ptx = std::ffi::CString::new(include_str!("../../../kernels/vramdoc.ptx")).unwrap();
            let mut m: CUmodule = null_mut();
            assert_eq!(cuModuleLoadData(&mut m, ptx.as_ptr() as _), CUDA_SUCCESS);
            let (mut fill, mut sum): (CUfunction, CUfunction) = (null_mut(), null_mut());
            assert_eq!(
                cuModuleGetFunction(&mut fill, m, c"nope".as_ptr()),
                CUDA_ERROR_NOT_FOUND
            );
            assert_eq!(
                cuModuleGetFunction(&mut fill, m, c"vramdoc_fill_u32".as_ptr()),
                CUDA_SUCCESS
            );
            assert_eq!(
                cuModuleGetFunction(&mut sum, m, c"vramdoc_checksum_u32".as_ptr()),
                CUDA_SUCCESS
            );
            let mut outp: CUdeviceptr = 0;
            assert_eq!(cuMemAlloc_v2(&mut outp, 8), CUDA_SUCCESS);
            assert_eq!(cuMemsetD8Async(outp, 0, 8, s), CUDA_SUCCESS);
            let n_words: u64 = (3 << 20) / 4;
            let value: u32 = 0xdead_beef;
            let mut args: [*mut c_void; 3] = [
                &p as *const u64 as _,
                &n_words as *const u64 as _,
                &value as *const u32 as _,
            ];
            assert_eq!(
                cuLaunchKernel(
                    fill,
                    64,
                    1,
                    1,
                    2048,
                    1,
                    1,
                    0,
                    s,
                    args.as_mut_ptr(),
                    null_mut()
                ),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuLaunchKernel(
                    fill,
                    64,
                    1,
                    1,
                    256,
                    1,
                    1,
                    0,
                    s,
                    args.as_mut_ptr(),
                    null_mut()
                ),
                CUDA_SUCCESS
            );
            let mut args2: [*mut c_void; 3] = [
                &p as *const u64 as _,
                &n_words as *const u64 as _,
                &outp as *const u64 as _,
            ];
            assert_eq!(
                cuLaunchKernel(
                    sum,
                    64,
                    1,
                    1,
                    256,
                    1,
                    1,
                    0,
                    s,
                    args2.as_mut_ptr(),
                    null_mut()
                ),
                CUDA_SUCCESS
            );
            let mut total = 0u64;
            assert_eq!(
                cuMemcpyDtoHAsync_v2(&mut total as *mut u64 as _, outp, 8, s),
                CUDA_SUCCESS
            );
            assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
            assert_eq!(total, kernel::expected_checksum(3 << 20, value));
            let bogus: u64 = 0x10;
            args[0] = &bogus as *const u64 as _;
            assert_eq!(
                cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, args.as_mut_ptr(), null_mut()),
                CUDA_ERROR_ILLEGAL_ADDRESS
            );
            let other =
                std::ffi::CString::new(".version 8.0\n.target sm_52\n.visible .entry mine(\n)")
                    .unwrap();
            let mut m2: CUmodule = null_mut();
            let mut mine: CUfunction = null_mut();
            assert_eq!(cuModuleLoadData(&mut m2, other.as_ptr() as _), CUDA_SUCCESS);
            assert_eq!(
                cuModuleGetFunction(&mut mine, m2, c"mine".as_ptr()),
                CUDA_SUCCESS
            );
            assert_eq!(
                cuLaunchKernel(mine, 1, 1, 1, 1, 1, 1, 0, s, args.as_mut_ptr(), null_mut()),
                CUDA_ERROR_NOT_FOUND
            );
            assert_eq!(
                cuModuleLoadData(&mut m2, c"garbage".as_ptr() as _),
                CUDA_ERROR_INVALID_PTX
            );

            assert_eq!(cuEventRecord(e1, s), CUDA_SUCCESS);
            assert_eq!(cuEventElapsedTime(&mut ms, e0, e1), CUDA_SUCCESS);
            assert!(ms >= 0.0);

            // mem info, OOM, free.
            let (mut free, mut tot) = (0usize, 0usize);
            assert_eq!(cuMemGetInfo_v2(&mut free, &mut tot), CUDA_SUCCESS);
            assert_eq!(tot as u64, b.device(1).unwrap().total);
            assert_eq!(free as u64, b.memory(1).unwrap().free);
            let mut big: CUdeviceptr = 0;
            assert_eq!(cuMemAlloc_v2(&mut big, free + 1), CUDA_ERROR_OUT_OF_MEMORY);
            assert_eq!(cuMemFreeAsync(p, s), CUDA_SUCCESS);
            assert_eq!(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE, "double free");
            assert_eq!(cuMemFree_v2(0), CUDA_ERROR_INVALID_VALUE);

            // Lost device: launches and syncs fail as launch failures, allocations as unknown.
            b.set_faults(&vramdoc_sim::Faults {
                lost_devices: vec![1],
                ..Default::default()
            })
            .unwrap();
            assert_eq!(cuCtxSynchronize(), CUDA_ERROR_LAUNCH_FAILED);
            assert_eq!(cuMemAlloc_v2(&mut big, 1024), CUDA_ERROR_UNKNOWN);
            b.set_faults(&Default::default()).unwrap();

            // Release to zero destroys the context and everything in it.
            assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
            assert_eq!(cuEventDestroy_v2(e0), CUDA_SUCCESS);
            assert_eq!(cuModuleUnload(m), CUDA_SUCCESS);
            assert_eq!(cuDevicePrimaryCtxRelease_v2(dev), CUDA_SUCCESS);
            assert_eq!(
                b.memory(1).unwrap().used,
                overhead + (2 << 20),
                "outp still held"
            );
            assert_eq!(cuDevicePrimaryCtxRelease_v2(dev), CUDA_SUCCESS);
            assert_eq!(b.memory(1).unwrap().used, 0);
            assert!(b.state().unwrap().processes.is_empty());
            assert_eq!(
                cuMemAlloc_v2(&mut big, 1024),
                CUDA_ERROR_INVALID_CONTEXT,
                "current ctx is gone"
            );
            assert_eq!(cuEventRecord(e1, null_mut()), CUDA_ERROR_INVALID_CONTEXT);
        }
    }
}
