//! Entry point `cuGetExportTable`: the driver's private interfaces, tables of functions named
//! by a UUID, that NVIDIA's CUDA runtime (libcudart, and the copies of it linked statically
//! into cuBLAS, cuBLASLt, cuDNN, NCCL...) asks for before it makes its first context. A driver
//! without them cannot serve an unmodified runtime: `cudaGetDeviceCount` and everything after
//! it fail.
//!
//! What each table and slot is, and what the runtime expects of it, is not documented by
//! NVIDIA; the facts here come from ZLUDA's reading of the runtime (github vosen/ZLUDA,
//! `dark_api/src/lib.rs` and `zluda/src/impl/driver.rs`, CUDA 13.1 layout) and from what the
//! runtimes PyPI's PyTorch brings asked of this library (docs/simulator.md, "An unmodified
//! CUDA runtime"). A slot whose behaviour is not known is served by a function that records
//! the call in the box (`vramdoc sim status --calls`) and returns `CUDA_ERROR_NOT_SUPPORTED`,
//! never by NULL, so an unknown slot shows up instead of crashing the client.
//!
//! The runtime checks it is talking to a real driver with the integrity check (slot 1 of
//! `INTEGRITY_CHECK`): an HMAC-MD2 (RFC 1319, RFC 2104) under a fixed 16-byte key over the
//! driver's CUDA version, the version the caller asked for, the process and thread, the
//! addresses of two tables and of the check itself, the caller's clock and each device's UUID
//! and PCI location. Versions ending in 0 or 1 get fixed answers.

use super::*;
use hmac::{KeyInit, Mac, SimpleHmac};
use std::sync::OnceLock;

/// A 16-byte table id in the order cuda.h's `CUuuid` holds it.
type Id = [u8; 16];

/// Parse a table id written `XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX` (bytes in text order).
const fn id(text: &str) -> Id {
    let b = text.as_bytes();
    let mut out = [0u8; 16];
    let (mut i, mut n) = (0, 0);
    while i < b.len() {
        if b[i] != b'-' {
            out[n / 2] = out[n / 2] * 16 + hexval(b[i]);
            n += 1;
        }
        i += 1;
    }
    out
}

const fn hexval(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

/// The runtime interface: fatbin module loading and the primary context without activation.
pub const CUDART_INTERFACE: Id = id("6BD5FB6C-5BF4-E74A-8987-D93912FD9DF9");
/// Tools thread-local storage (only its size is read).
pub const TOOLS_TLS: Id = id("42D85A81-23F6-CB47-8298-F6E78A3AECDC");
/// Buffers the tools (CUPTI) runtime callbacks write into.
pub const TOOLS_RUNTIME_CALLBACK_HOOKS: Id = id("A094798C-2E74-2E74-93F2-0800200C0A66");
/// Per-context storage the runtime keeps its own state in (put, delete, get).
pub const CONTEXT_LOCAL_STORAGE: Id = id("C693336E-1121-DF11-A8C3-68F355D89593");
/// `cuCtxCreate_v2` without the tools callbacks.
pub const CTX_CREATE_BYPASS: Id = id("0CA50B8C-1004-929A-89A7-D0DF10E77286");
/// The driver's device heap (the runtime's device-side malloc bookkeeping).
pub const HEAP_ACCESS: Id = id("195BCBF4-D67D-024A-ACC5-1D29CEA631AE");
/// Extended device attributes.
pub const DEVICE_EXTENDED_RT: Id = id("B10541E1-F7C7-C74A-9F64-F223BE99F1E2");
/// The runtime's check that the driver is NVIDIA's.
pub const INTEGRITY_CHECK: Id = id("D4082055-BDE6-704B-8D34-BA123C66E1F2");
/// Context checks (bits that are never set on a working context).
pub const CONTEXT_CHECKS: Id = id("263E8860-7CD2-6143-92F6-BBD5006DFA7E");
/// The tools' view of a context (NVIDIA's `CU_ETID_ToolsContext`), which cuBLASLt asks for
/// when it picks a matmul algorithm; 94 slots after the size on driver 595.
pub const TOOLS_CONTEXT: Id = id("21318C60-9714-3248-8CA6-41FF7324C8F2");

/// Every table served: id and number of slots.
const SERVED: [(Id, usize); 10] = [
    (CUDART_INTERFACE, 13),
    (TOOLS_TLS, 4),
    (TOOLS_RUNTIME_CALLBACK_HOOKS, 7),
    (CONTEXT_LOCAL_STORAGE, 4),
    (CTX_CREATE_BYPASS, 2),
    (HEAP_ACCESS, 3),
    (DEVICE_EXTENDED_RT, 26),
    (INTEGRITY_CHECK, 3),
    (CONTEXT_CHECKS, 4),
    (TOOLS_CONTEXT, 95),
];

/// Most slots of any served table (the stub rows below cover this many).
const MAX_SLOTS: usize = 96;

/// A slot without known behaviour: record it, answer `CUDA_ERROR_NOT_SUPPORTED`. Taking no
/// arguments and returning an integer is harmless for a caller of any signature under the
/// C calling conventions of x86-64 and AArch64 (arguments in registers, caller-cleaned).
extern "C" fn unknown_slot<const T: usize, const S: usize>() -> CUresult {
    record::unknown_slot(&SERVED[T].0, S);
    CUDA_ERROR_NOT_SUPPORTED
}

macro_rules! stub_row {
    ($t:literal) => {
        [
            unknown_slot::<$t, 0> as *const () as usize,
            unknown_slot::<$t, 1> as *const () as usize,
            unknown_slot::<$t, 2> as *const () as usize,
            unknown_slot::<$t, 3> as *const () as usize,
            unknown_slot::<$t, 4> as *const () as usize,
            unknown_slot::<$t, 5> as *const () as usize,
            unknown_slot::<$t, 6> as *const () as usize,
            unknown_slot::<$t, 7> as *const () as usize,
            unknown_slot::<$t, 8> as *const () as usize,
            unknown_slot::<$t, 9> as *const () as usize,
            unknown_slot::<$t, 10> as *const () as usize,
            unknown_slot::<$t, 11> as *const () as usize,
            unknown_slot::<$t, 12> as *const () as usize,
            unknown_slot::<$t, 13> as *const () as usize,
            unknown_slot::<$t, 14> as *const () as usize,
            unknown_slot::<$t, 15> as *const () as usize,
            unknown_slot::<$t, 16> as *const () as usize,
            unknown_slot::<$t, 17> as *const () as usize,
            unknown_slot::<$t, 18> as *const () as usize,
            unknown_slot::<$t, 19> as *const () as usize,
            unknown_slot::<$t, 20> as *const () as usize,
            unknown_slot::<$t, 21> as *const () as usize,
            unknown_slot::<$t, 22> as *const () as usize,
            unknown_slot::<$t, 23> as *const () as usize,
            unknown_slot::<$t, 24> as *const () as usize,
            unknown_slot::<$t, 25> as *const () as usize,
            unknown_slot::<$t, 26> as *const () as usize,
            unknown_slot::<$t, 27> as *const () as usize,
            unknown_slot::<$t, 28> as *const () as usize,
            unknown_slot::<$t, 29> as *const () as usize,
            unknown_slot::<$t, 30> as *const () as usize,
            unknown_slot::<$t, 31> as *const () as usize,
            unknown_slot::<$t, 32> as *const () as usize,
            unknown_slot::<$t, 33> as *const () as usize,
            unknown_slot::<$t, 34> as *const () as usize,
            unknown_slot::<$t, 35> as *const () as usize,
            unknown_slot::<$t, 36> as *const () as usize,
            unknown_slot::<$t, 37> as *const () as usize,
            unknown_slot::<$t, 38> as *const () as usize,
            unknown_slot::<$t, 39> as *const () as usize,
            unknown_slot::<$t, 40> as *const () as usize,
            unknown_slot::<$t, 41> as *const () as usize,
            unknown_slot::<$t, 42> as *const () as usize,
            unknown_slot::<$t, 43> as *const () as usize,
            unknown_slot::<$t, 44> as *const () as usize,
            unknown_slot::<$t, 45> as *const () as usize,
            unknown_slot::<$t, 46> as *const () as usize,
            unknown_slot::<$t, 47> as *const () as usize,
            unknown_slot::<$t, 48> as *const () as usize,
            unknown_slot::<$t, 49> as *const () as usize,
            unknown_slot::<$t, 50> as *const () as usize,
            unknown_slot::<$t, 51> as *const () as usize,
            unknown_slot::<$t, 52> as *const () as usize,
            unknown_slot::<$t, 53> as *const () as usize,
            unknown_slot::<$t, 54> as *const () as usize,
            unknown_slot::<$t, 55> as *const () as usize,
            unknown_slot::<$t, 56> as *const () as usize,
            unknown_slot::<$t, 57> as *const () as usize,
            unknown_slot::<$t, 58> as *const () as usize,
            unknown_slot::<$t, 59> as *const () as usize,
            unknown_slot::<$t, 60> as *const () as usize,
            unknown_slot::<$t, 61> as *const () as usize,
            unknown_slot::<$t, 62> as *const () as usize,
            unknown_slot::<$t, 63> as *const () as usize,
            unknown_slot::<$t, 64> as *const () as usize,
            unknown_slot::<$t, 65> as *const () as usize,
            unknown_slot::<$t, 66> as *const () as usize,
            unknown_slot::<$t, 67> as *const () as usize,
            unknown_slot::<$t, 68> as *const () as usize,
            unknown_slot::<$t, 69> as *const () as usize,
            unknown_slot::<$t, 70> as *const () as usize,
            unknown_slot::<$t, 71> as *const () as usize,
            unknown_slot::<$t, 72> as *const () as usize,
            unknown_slot::<$t, 73> as *const () as usize,
            unknown_slot::<$t, 74> as *const () as usize,
            unknown_slot::<$t, 75> as *const () as usize,
            unknown_slot::<$t, 76> as *const () as usize,
            unknown_slot::<$t, 77> as *const () as usize,
            unknown_slot::<$t, 78> as *const () as usize,
            unknown_slot::<$t, 79> as *const () as usize,
            unknown_slot::<$t, 80> as *const () as usize,
            unknown_slot::<$t, 81> as *const () as usize,
            unknown_slot::<$t, 82> as *const () as usize,
            unknown_slot::<$t, 83> as *const () as usize,
            unknown_slot::<$t, 84> as *const () as usize,
            unknown_slot::<$t, 85> as *const () as usize,
            unknown_slot::<$t, 86> as *const () as usize,
            unknown_slot::<$t, 87> as *const () as usize,
            unknown_slot::<$t, 88> as *const () as usize,
            unknown_slot::<$t, 89> as *const () as usize,
            unknown_slot::<$t, 90> as *const () as usize,
            unknown_slot::<$t, 91> as *const () as usize,
            unknown_slot::<$t, 92> as *const () as usize,
            unknown_slot::<$t, 93> as *const () as usize,
            unknown_slot::<$t, 94> as *const () as usize,
            unknown_slot::<$t, 95> as *const () as usize,
        ]
    };
}

/// The served tables, built once; their addresses are stable for the life of the process
/// (the integrity check hashes two of them).
fn tables() -> &'static [Box<[usize]>] {
    static TABLES: OnceLock<Vec<Box<[usize]>>> = OnceLock::new();
    TABLES.get_or_init(|| {
        let stubs: [[usize; MAX_SLOTS]; 10] = [
            stub_row!(0),
            stub_row!(1),
            stub_row!(2),
            stub_row!(3),
            stub_row!(4),
            stub_row!(5),
            stub_row!(6),
            stub_row!(7),
            stub_row!(8),
            stub_row!(9),
        ];
        SERVED
            .iter()
            .zip(stubs.iter())
            .map(|((tid, len), row)| {
                let mut t: Vec<usize> = row[..*len].to_vec();
                let size = len * std::mem::size_of::<usize>();
                let mut set = |slot: usize, f: usize| t[slot] = f;
                match *tid {
                    CUDART_INTERFACE => {
                        set(0, size);
                        set(1, rt_module_from_fatbin as *const () as usize);
                        set(2, rt_primary_context as *const () as usize);
                        set(6, rt_module_from_fatbin_ext as *const () as usize);
                        set(7, rt_noop as *const () as usize);
                        set(8, rt_module_from_fatbin_header as *const () as usize);
                        set(12, rt_load_compilers as *const () as usize);
                    }
                    TOOLS_TLS => {
                        set(0, size);
                        set(2, tools_tls_get as *const () as usize);
                    }
                    HEAP_ACCESS => set(0, size),
                    TOOLS_RUNTIME_CALLBACK_HOOKS => {
                        set(0, size);
                        set(2, hooks_buffer_small as *const () as usize);
                        set(4, hooks_no_callback as *const () as usize);
                        set(6, hooks_buffer_large as *const () as usize);
                    }
                    CONTEXT_LOCAL_STORAGE => {
                        set(0, cls_put as *const () as usize);
                        set(1, cls_delete as *const () as usize);
                        set(2, cls_get as *const () as usize);
                    }
                    CTX_CREATE_BYPASS => {
                        set(0, size);
                        set(1, ctx_create_bypass as *const () as usize);
                    }
                    DEVICE_EXTENDED_RT => {
                        set(0, size);
                        set(13, device_flag_byte as *const () as usize);
                    }
                    INTEGRITY_CHECK => {
                        set(0, size);
                        set(1, integrity_check as *const () as usize);
                        set(2, integrity_set_enabled as *const () as usize);
                    }
                    TOOLS_CONTEXT => {
                        set(0, size);
                        set(3, tools_context_device as *const () as usize);
                        set(4, tools_context_number as *const () as usize);
                    }
                    CONTEXT_CHECKS => {
                        set(0, size);
                        set(2, context_check as *const () as usize);
                        set(3, context_check_flags as *const () as usize);
                    }
                    _ => {}
                }
                t.into_boxed_slice()
            })
            .collect()
    })
}

fn table_of(tid: &Id) -> Option<&'static [usize]> {
    SERVED
        .iter()
        .position(|(t, _)| t == tid)
        .map(|i| &*tables()[i])
}

#[no_mangle]
pub unsafe extern "C" fn cuGetExportTable(
    table: *mut *const c_void,
    table_id: *const [u8; 16],
) -> CUresult {
    guard("cuGetExportTable", || {
        if table.is_null() || table_id.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        // SAFETY: both checked non-null; cuda.h contract (a CUuuid is 16 bytes).
        let tid = unsafe { *table_id };
        record::trace(|| format!("cuGetExportTable({})", vramdoc_sim::calls::cuda::hex(&tid)));
        match table_of(&tid) {
            Some(t) => {
                unsafe { *table = t.as_ptr().cast() };
                CUDA_SUCCESS
            }
            None => {
                record::missing_table(&tid);
                unsafe { *table = std::ptr::null() };
                CUDA_ERROR_INVALID_VALUE
            }
        }
    })
}

/// Load a fatbin the runtime registered (`__cudaRegisterFatBinary`) as a module of the
/// current context: accepted whatever its kernels, which launch as no-ops.
fn load_fatbin(name: &str, module: *mut CUmodule, image: *const c_void) -> CUresult {
    with_driver(name, |d| {
        nonnull(module)?;
        nonnull(image)?;
        let h = d.load_fatbin()?;
        out(module, h as CUmodule)
    })
}

extern "C" fn rt_module_from_fatbin(module: *mut CUmodule, wrapper: *const c_void) -> CUresult {
    load_fatbin("cudart:module_from_fatbin", module, wrapper)
}

extern "C" fn rt_module_from_fatbin_ext(
    module: *mut CUmodule,
    wrapper: *const c_void,
    _a: *mut c_void,
    _b: *mut c_void,
    _c: c_uint,
) -> CUresult {
    load_fatbin("cudart:module_from_fatbin_ext", module, wrapper)
}

extern "C" fn rt_module_from_fatbin_header(
    header: *const c_void,
    module: *mut CUmodule,
    _a: *mut c_void,
    _b: *mut c_void,
    _c: c_uint,
) -> CUresult {
    load_fatbin("cudart:module_from_fatbin_header", module, header)
}

/// The primary context's handle of `dev`, not activated: nothing is charged until the
/// runtime retains it (a real driver shows no memory for a process that only asked).
extern "C" fn rt_primary_context(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    with_driver("cudart:primary_context", |d| {
        nonnull(pctx)?;
        let o = d.ordinal(dev)?;
        let h = d.primary_handle(o);
        out(pctx, h as CUcontext)
    })
}

extern "C" fn rt_noop(_arg: usize) {}

extern "C" fn rt_load_compilers() -> CUresult {
    guard("cudart:load_compilers", || CUDA_SUCCESS)
}

/// A zeroed buffer the tools callbacks may write into, and its size in the units ZLUDA
/// observed (`units` of at most 4 bytes; each unit is given 8 here, so any reading of the
/// size as a count of words or bytes stays inside it).
fn hooks_buffer(
    buf: &'static OnceLock<Box<[u64]>>,
    units: usize,
    ptr: *mut *mut c_void,
    size: *mut usize,
) {
    let b = buf.get_or_init(|| vec![0u64; units].into_boxed_slice());
    if !ptr.is_null() {
        // SAFETY: non-null output pointers per the table's contract.
        unsafe { *ptr = b.as_ptr() as *mut c_void };
    }
    if !size.is_null() {
        unsafe { *size = units };
    }
}

/// The tools' thread-local state (`TOOLS_TLS` slot 2): none, no profiler is attached.
/// cuBLASLt asks on every heuristic query and stops on an error.
extern "C" fn tools_tls_get(out: *mut *mut c_void) -> CUresult {
    guard("cudart:tools_tls_get", || {
        if out.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        // SAFETY: checked non-null; the table's output.
        unsafe { *out = std::ptr::null_mut() };
        CUDA_SUCCESS
    })
}

/// Slot 4 of the callback hooks: no callback is registered (writes 0).
extern "C" fn hooks_no_callback(_input: *const c_void, out: *mut u64) -> CUresult {
    guard("cudart:hooks_callback", || {
        if out.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        // SAFETY: checked non-null.
        unsafe { *out = 0 };
        CUDA_SUCCESS
    })
}

/// Slot 3 of the tools' context table: the device of a context (null: the current one).
extern "C" fn tools_context_device(ctx: CUcontext, dev: *mut CUdevice) -> CUresult {
    with_driver("cudart:tools_context_device", |d| {
        let h = if ctx.is_null() {
            d.current()?
        } else {
            ctx as usize
        };
        let c = d.contexts.get(&h).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        out(dev, c.ordinal as CUdevice)
    })
}

/// Slot 4 of the tools' context table: the context's number, unique in the process (0 for
/// no context). cuBLASLt asks it for every algorithm query.
extern "C" fn tools_context_number(ctx: CUcontext, number: *mut u64) -> CUresult {
    with_driver("cudart:tools_context_number", |d| {
        if ctx.is_null() {
            return out(number, 0);
        }
        let h = ctx as usize;
        if !d.contexts.contains_key(&h) {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        out(number, h as u64)
    })
}

/// Slot 2 of the integrity table: turning the check on or off; accepted.
extern "C" fn integrity_set_enabled(_enabled: c_int) -> CUresult {
    guard("cudart:integrity_set_enabled", || CUDA_SUCCESS)
}

extern "C" fn hooks_buffer_small(ptr: *mut *mut c_void, size: *mut usize) {
    static B: OnceLock<Box<[u64]>> = OnceLock::new();
    hooks_buffer(&B, 1024, ptr, size);
}

extern "C" fn hooks_buffer_large(ptr: *mut *mut c_void, size: *mut usize) {
    static B: OnceLock<Box<[u64]>> = OnceLock::new();
    hooks_buffer(&B, 14, ptr, size);
}

/// Destructor a context-local value carries, called when its context is destroyed or reset.
pub type ClsDtor = Option<extern "C" fn(CUcontext, *mut c_void, *mut c_void)>;

extern "C" fn cls_put(
    ctx: CUcontext,
    key: *mut c_void,
    value: *mut c_void,
    dtor: ClsDtor,
) -> CUresult {
    with_driver("cudart:context_storage_put", |d| {
        let h = d.cls_context(ctx)?;
        d.cls.insert((h, key as usize), (value as usize, dtor));
        Ok(())
    })
}

extern "C" fn cls_delete(ctx: CUcontext, key: *mut c_void) -> CUresult {
    with_driver("cudart:context_storage_delete", |d| {
        let h = d.cls_context(ctx)?;
        d.cls.remove(&(h, key as usize));
        Ok(())
    })
}

extern "C" fn cls_get(value: *mut *mut c_void, ctx: CUcontext, key: *mut c_void) -> CUresult {
    with_driver("cudart:context_storage_get", |d| {
        nonnull(value)?;
        let h = d.cls_context(ctx)?;
        match d.cls.get(&(h, key as usize)) {
            Some((v, _)) => out(value, *v as *mut c_void),
            // Absent: the runtime then puts its state (ZLUDA: INVALID_HANDLE).
            None => Err(CUDA_ERROR_INVALID_HANDLE),
        }
    })
}

extern "C" fn ctx_create_bypass(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult {
    // SAFETY: the same contract as cuCtxCreate_v2.
    unsafe { cuCtxCreate_v2(pctx, flags, dev) }
}

extern "C" fn device_flag_byte(result: *mut u8, dev: CUdevice) -> CUresult {
    with_driver("cudart:device_flag", |d| {
        d.ordinal(dev)?;
        out(result, 0)
    })
}

extern "C" fn context_check(
    _ctx: CUcontext,
    result: *mut u32,
    _extra: *mut *const c_void,
) -> CUresult {
    guard("cudart:context_check", || {
        if !result.is_null() {
            // SAFETY: non-null output per the table's contract.
            unsafe { *result = 0 };
        }
        CUDA_SUCCESS
    })
}

extern "C" fn context_check_flags() -> u32 {
    0
}

/// The integrity check's key (16 bytes, one MD2 block).
const INTEGRITY_KEY: [u8; 16] = [
    0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52, 0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F,
];

/// What one device contributes to the integrity check.
pub struct DeviceId {
    pub uuid: [u8; 16],
    pub pci_domain: i32,
    pub pci_bus: i32,
    pub pci_device: i32,
}

/// The inputs of the integrity check other than the devices.
pub struct IntegrityInput {
    pub driver_version: u32,
    pub version: u32,
    pub pid: u32,
    pub thread: u32,
    pub runtime_table: u64,
    pub integrity_table: u64,
    pub check_fn: u64,
    pub unix_seconds: u64,
}

/// The integrity check's answer for `input` and `devices` (in CUDA ordinal order).
pub fn integrity_answer(input: &IntegrityInput, devices: &[DeviceId]) -> [u64; 2] {
    match input.version % 10 {
        0 => return [0x3341181C03CB675C, 0x8ED383AA1F4CD1E8],
        1 => return [0x1841181C03CB675C, 0x8ED383AA1F4CD1E8],
        _ => {}
    }
    let mut msg = Vec::with_capacity(48 + 28 * devices.len());
    for v in [input.driver_version, input.version, input.pid, input.thread] {
        msg.extend_from_slice(&v.to_ne_bytes());
    }
    for v in [
        input.runtime_table,
        input.integrity_table,
        input.check_fn,
        input.unix_seconds,
    ] {
        msg.extend_from_slice(&v.to_ne_bytes());
    }
    for d in devices {
        msg.extend_from_slice(&d.uuid);
        for v in [d.pci_domain, d.pci_bus, d.pci_device] {
            msg.extend_from_slice(&v.to_ne_bytes());
        }
    }
    let mut mac = match SimpleHmac::<md2::Md2>::new_from_slice(&INTEGRITY_KEY) {
        Ok(m) => m,
        // A 16-byte key is always accepted; an all-zero answer fails the runtime's check.
        Err(_) => return [0, 0],
    };
    mac.update(&msg);
    let digest = mac.finalize().into_bytes();
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&digest[..8]);
    hi.copy_from_slice(&digest[8..16]);
    [u64::from_ne_bytes(lo), u64::from_ne_bytes(hi)]
}

extern "C" fn integrity_check(version: u32, unix_seconds: u64, result: *mut [u64; 2]) -> CUresult {
    with_driver("cudart:integrity_check", |d| {
        nonnull(result)?;
        let devices = (0..d.proc.device_count())
            .map(|o| {
                let info = d.proc.device(o).map_err(code)?;
                let (pci_domain, pci_bus, pci_device) = device::pci_parts(&info.pci_bus_id);
                Ok(DeviceId {
                    uuid: device::uuid_bytes(&info.uuid),
                    pci_domain,
                    pci_bus,
                    pci_device,
                })
            })
            .collect::<Result<Vec<_>, CUresult>>()?;
        let idx = |t: &Id| SERVED.iter().position(|(x, _)| x == t).unwrap_or(0);
        let all = tables();
        let check = &all[idx(&INTEGRITY_CHECK)];
        let input = IntegrityInput {
            driver_version: d.proc.sim().config().cuda_driver_version as u32,
            version,
            pid: std::process::id(),
            // SAFETY: pthread_self has no preconditions.
            thread: unsafe { libc::pthread_self() } as u32,
            runtime_table: all[idx(&CUDART_INTERFACE)].as_ptr() as u64,
            integrity_table: check.as_ptr() as u64,
            check_fn: check[1] as u64,
            unix_seconds,
        };
        out(result, integrity_answer(&input, &devices))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MD2 as RFC 1319 specifies it, written out here so the check is against an
    /// implementation independent of the crates the library uses.
    fn md2(msg: &[u8]) -> [u8; 16] {
        // RFC 1319's S-table: digits of pi.
        const S: [u8; 256] = [
            41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19, 98, 167, 5, 243,
            192, 199, 115, 140, 152, 147, 43, 217, 188, 76, 130, 202, 30, 155, 87, 60, 253, 212,
            224, 22, 103, 66, 111, 24, 138, 23, 229, 18, 190, 78, 196, 214, 218, 158, 222, 73, 160,
            251, 245, 142, 187, 47, 238, 122, 169, 104, 121, 145, 21, 178, 7, 63, 148, 194, 16,
            137, 11, 34, 95, 33, 128, 127, 93, 154, 90, 144, 50, 39, 53, 62, 204, 231, 191, 247,
            151, 3, 255, 25, 48, 179, 72, 165, 181, 209, 215, 94, 146, 42, 172, 86, 170, 198, 79,
            184, 56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4, 241, 69, 157, 112,
            89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45, 168, 2, 27, 96, 37, 173, 174, 176,
            185, 246, 28, 70, 97, 105, 52, 64, 126, 15, 85, 71, 163, 35, 221, 81, 175, 58, 195, 92,
            249, 206, 186, 197, 234, 38, 44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205, 244, 65,
            129, 77, 82, 106, 220, 55, 200, 108, 193, 171, 250, 36, 225, 123, 8, 12, 189, 177, 74,
            120, 136, 149, 139, 227, 99, 232, 109, 233, 203, 213, 254, 59, 0, 29, 57, 242, 239,
            183, 14, 102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10, 49, 68, 80, 180, 143,
            237, 31, 26, 219, 153, 141, 51, 159, 17, 131, 20,
        ];
        let mut m = msg.to_vec();
        let pad = 16 - m.len() % 16;
        m.extend(std::iter::repeat_n(pad as u8, pad));
        let mut c = [0u8; 16];
        let mut l = 0u8;
        for block in m.chunks(16) {
            for j in 0..16 {
                c[j] ^= S[(block[j] ^ l) as usize];
                l = c[j];
            }
        }
        m.extend_from_slice(&c);
        let mut x = [0u8; 48];
        for block in m.chunks(16) {
            for j in 0..16 {
                x[16 + j] = block[j];
                x[32 + j] = x[16 + j] ^ x[j];
            }
            let mut t = 0u8;
            for j in 0..18u8 {
                for k in x.iter_mut() {
                    *k ^= S[t as usize];
                    t = *k;
                }
                t = t.wrapping_add(j);
            }
        }
        x[..16].try_into().unwrap()
    }

    fn hmac_md2(key: &[u8; 16], msg: &[u8]) -> [u8; 16] {
        let inner: Vec<u8> = key
            .iter()
            .map(|b| b ^ 0x36)
            .chain(msg.iter().copied())
            .collect();
        let outer: Vec<u8> = key.iter().map(|b| b ^ 0x5c).chain(md2(&inner)).collect();
        md2(&outer)
    }

    #[test]
    fn the_independent_md2_is_rfc_1319s() {
        // RFC 1319, A.5 test suite.
        let hex = |d: [u8; 16]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(hex(md2(b"")), "8350e5a3e24c153df2275c9f80692773");
        assert_eq!(hex(md2(b"abc")), "da853b0d3f88d99b30283a69e6ded6bb");
        assert_eq!(
            hex(md2(b"abcdefghijklmnopqrstuvwxyz")),
            "4e8ddff3650292ab5a4108c3aa47940b"
        );
    }

    #[test]
    fn the_integrity_answer_is_hmac_md2_of_the_call_and_the_devices() {
        let input = IntegrityInput {
            driver_version: 13000,
            version: 13022,
            pid: 0x2fa423,
            thread: 0xf79c_1000,
            runtime_table: 0x7fff_f695_8240,
            integrity_table: 0x7fff_f695_8220,
            check_fn: 0x7fff_f2aa_f4a0,
            unix_seconds: 0x682b_9cee,
        };
        let devices = [DeviceId {
            uuid: [
                0x9a, 0xfe, 0x2b, 0x8a, 0xac, 0x25, 0x2d, 0x38, 0xea, 0x37, 0xae, 0xc5, 0x6d, 0x71,
                0x32, 0x5f,
            ],
            pci_domain: 0,
            pci_bus: 2,
            pci_device: 0,
        }];
        let mut msg = Vec::new();
        for v in [13000u32, 13022, 0x2fa423, 0xf79c_1000] {
            msg.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            0x7fff_f695_8240u64,
            0x7fff_f695_8220,
            0x7fff_f2aa_f4a0,
            0x682b_9cee,
        ] {
            msg.extend_from_slice(&v.to_le_bytes());
        }
        msg.extend_from_slice(&devices[0].uuid);
        for v in [0i32, 2, 0] {
            msg.extend_from_slice(&v.to_le_bytes());
        }
        let want = hmac_md2(&INTEGRITY_KEY, &msg);
        let got = integrity_answer(&input, &devices);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&got[0].to_le_bytes());
        bytes[8..].copy_from_slice(&got[1].to_le_bytes());
        assert_eq!(bytes, want);
        // Another device changes the answer.
        assert_ne!(integrity_answer(&input, &[]), got);
        // Versions ending in 0 and 1 get the fixed answers.
        let fixed = IntegrityInput {
            version: 13020,
            ..input
        };
        assert_eq!(
            integrity_answer(&fixed, &devices),
            [0x3341181C03CB675C, 0x8ED383AA1F4CD1E8]
        );
    }

    #[test]
    fn table_ids_read_in_text_order() {
        assert_eq!(CUDART_INTERFACE[..4], [0x6b, 0xd5, 0xfb, 0x6c]);
        assert_eq!(INTEGRITY_CHECK[15], 0xf2);
    }
}
