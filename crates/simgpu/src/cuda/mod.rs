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
//!
//! Here: the C types and codes, the library's state and the helpers every entry point uses.
//! The state's operations are in `driver`; the entry points, one file per group of cuda.h, in
//! `init`, `device`, `context`, `stream` (streams and events), `memory` and `module`
//! (modules and launches).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use vramdoc_gpu_spec::kernel;
use vramdoc_sim::{SimError, SimProcess};

mod context;
mod device;
mod driver;
mod export_table;
mod graph;
mod init;
mod library;
mod memory;
mod module;
mod peer;
mod pointer;
mod proc_address;
mod record;
mod stream;
#[cfg(test)]
mod tests;
mod vmm;

pub use context::*;
pub use device::*;
pub use export_table::cuGetExportTable;
pub use graph::*;
pub use init::*;
pub use library::*;
pub use memory::*;
pub use module::*;
pub use peer::*;
pub use pointer::*;
pub use proc_address::*;
pub use stream::*;
pub use vmm::*;

/// `CUresult` (cuda.h `enum cudaError_enum`); only the codes this library returns.
pub type CUresult = c_uint;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;

/// The codes and their cuda.h names come from the simulator's core (`vramdoc_sim::codes`).
pub use vramdoc_sim::codes::cuda::*;

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
    /// A kernel fault left the context unusable: every call on it returns this code
    /// (`CUDA_ERROR_ILLEGAL_ADDRESS`: "any further CUDA work will return the same error").
    sticky: Option<CUresult>,
}

struct Stream {
    ctx: usize,
    flags: c_uint,
    priority: c_int,
    /// The graph this stream is capturing into (`cuStreamBeginCapture`), if any.
    capture: Option<usize>,
    id: u64,
}

struct Event {
    ctx: usize,
    timing: bool,
    recorded: Option<Instant>,
}

struct Module {
    ctx: usize,
    entries: Vec<String>,
    /// A fatbin the CUDA runtime registered: any kernel name resolves, launches are no-ops.
    fatbin: bool,
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
    /// Allocations made from a stream-ordered pool (`cuMemAllocAsync`): not exportable.
    pooled: std::collections::HashSet<u64>,
    /// (context, peer context) pairs with peer access enabled (`cuCtxEnablePeerAccess`).
    peers: std::collections::HashSet<(usize, usize)>,
    /// Opened IPC handles -> the context that opened them.
    imports: HashMap<u64, usize>,
    /// The runtime's context-local storage: (context, key) -> (value, destructor).
    cls: HashMap<(usize, usize), (usize, export_table::ClsDtor)>,
    /// Client callbacks to run once the driver's lock is released (context-storage
    /// destructors, host functions): a callback may call back into the driver.
    deferred: Vec<Deferred>,
    /// Function attributes set (`cuFuncSetAttribute`, `cuKernelSetAttribute`): (function or
    /// kernel handle, attribute) -> value.
    func_attrs: HashMap<(usize, c_int), c_int>,
    /// Limits set per context (`cuCtxSetLimit`): (context, limit) -> value.
    limits: HashMap<(usize, c_int), usize>,
    /// Flags per context (`cuCtxSetFlags`, `cuDevicePrimaryCtxSetFlags`), by context handle.
    ctx_flags: HashMap<usize, c_uint>,
    /// Graphs made by stream capture, and their instantiations (`graph`).
    graphs: HashMap<usize, graph::Graph>,
    /// Libraries loaded context-independently (`cuLibraryLoadData`) -> their module per context.
    libraries: HashMap<usize, HashMap<usize, usize>>,
    /// Kernels of a library (`cuLibraryGetKernel`) -> (library, name).
    kernels: HashMap<usize, (usize, String)>,
    /// Device variables of modules and libraries, by address (`library`).
    globals: std::collections::BTreeMap<u64, library::Global>,
    /// Pinned or registered host memory: start -> size.
    host: std::collections::BTreeMap<u64, u64>,
    /// Reserved ranges, physical allocations and mappings (`vmm`).
    vmm: vmm::Vmm,
    next_handle: usize,
}

/// A client callback: a C function and its two or three arguments.
enum Deferred {
    ClsDtor(
        extern "C" fn(CUcontext, *mut c_void, *mut c_void),
        usize,
        usize,
        usize,
    ),
    Host(extern "C" fn(*mut c_void), usize),
    StreamCallback(extern "C" fn(CUstream, CUresult, *mut c_void), usize, usize),
}

// SAFETY: the deferred callbacks hold plain addresses the client gave; they are only called,
// on the thread that made the call that queued them.
unsafe impl Send for Deferred {}

impl Deferred {
    fn run(self) {
        match self {
            Deferred::ClsDtor(f, ctx, key, value) => {
                f(ctx as CUcontext, key as *mut c_void, value as *mut c_void)
            }
            Deferred::Host(f, data) => f(data as *mut c_void),
            Deferred::StreamCallback(f, stream, data) => {
                f(stream as CUstream, CUDA_SUCCESS, data as *mut c_void)
            }
        }
    }
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

/// Run the body of the entry point `name`: no panic crosses the C ABI, and the call and its
/// result are recorded in the box (`record`).
fn guard(name: &str, f: impl FnOnce() -> CUresult) -> CUresult {
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or(CUDA_ERROR_UNKNOWN);
    record::call(name, r);
    r
}

/// Run `f` on the initialised driver (`CUDA_ERROR_NOT_INITIALIZED` before a successful
/// cuInit), as the entry point `name`.
fn with_driver(name: &str, f: impl FnOnce(&mut Driver) -> Result<(), CUresult>) -> CUresult {
    guard(name, || {
        let mut g = lock();
        let (r, later) = match g.as_mut() {
            None => (CUDA_ERROR_NOT_INITIALIZED, Vec::new()),
            Some(d) => {
                let r = match f(d) {
                    Ok(()) => CUDA_SUCCESS,
                    Err(code) => code,
                };
                (r, std::mem::take(&mut d.deferred))
            }
        };
        drop(g);
        for cb in later {
            cb.run();
        }
        r
    })
}

/// CUresult of a simulator error (the core decides it: [`SimError::cuda_code`]).
fn code(e: SimError) -> CUresult {
    e.cuda_code()
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
