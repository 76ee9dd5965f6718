//! Entry points: the context-independent loading of CUDA 12 (`cuLibrary*`, `cuKernel*`),
//! the loading mode, function and kernel attributes, occupancy, and the launch forms the
//! runtime and cuBLAS use besides `cuLaunchKernel` (`cuLaunchKernelEx`, cooperative
//! launches). A library is loaded into a context as a fatbin module the first time one of its
//! kernels is asked for there; its kernels launch as no-ops (docs/simulator.md, "What is
//! faithful").

use super::*;

/// `CUmoduleLoadingMode`: `CU_MODULE_LAZY_LOADING`, the default since CUDA 12.2 (the
/// `CUDA_MODULE_LOADING` variable says otherwise: `EAGER` → 1).
const CU_MODULE_EAGER_LOADING: c_uint = 1;
const CU_MODULE_LAZY_LOADING: c_uint = 2;

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetLoadingMode(mode: *mut c_uint) -> CUresult {
    with_driver("cuModuleGetLoadingMode", |_| {
        let eager = std::env::var("CUDA_MODULE_LOADING").is_ok_and(|v| v == "EAGER");
        out(
            mode,
            if eager {
                CU_MODULE_EAGER_LOADING
            } else {
                CU_MODULE_LAZY_LOADING
            },
        )
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLibraryLoadData(
    library: *mut usize,
    code: *const c_void,
    _jit_options: *mut c_void,
    _jit_values: *mut *mut c_void,
    _num_jit: c_uint,
    _lib_options: *mut c_void,
    _lib_values: *mut *mut c_void,
    _num_lib: c_uint,
) -> CUresult {
    with_driver("cuLibraryLoadData", |d| {
        nonnull(library)?;
        nonnull(code)?;
        let h = d.mint();
        d.libraries.insert(h, HashMap::new());
        out(library, h)
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLibraryLoadFromFile(
    library: *mut usize,
    file: *const c_char,
    _jit_options: *mut c_void,
    _jit_values: *mut *mut c_void,
    _num_jit: c_uint,
    _lib_options: *mut c_void,
    _lib_values: *mut *mut c_void,
    _num_lib: c_uint,
) -> CUresult {
    with_driver("cuLibraryLoadFromFile", |d| {
        nonnull(library)?;
        nonnull(file)?;
        // SAFETY: NUL-terminated path per cuda.h.
        let path = unsafe { CStr::from_ptr(file) }
            .to_string_lossy()
            .into_owned();
        if !std::path::Path::new(&path).is_file() {
            return Err(CUDA_ERROR_FILE_NOT_FOUND);
        }
        let h = d.mint();
        d.libraries.insert(h, HashMap::new());
        out(library, h)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryUnload(library: usize) -> CUresult {
    with_driver("cuLibraryUnload", |d| {
        let per_ctx = d
            .libraries
            .remove(&library)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        for m in per_ctx.values() {
            d.modules.remove(m);
            d.functions.retain(|_, f| f.module != *m);
        }
        d.kernels.retain(|_, (l, _)| *l != library);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetKernel(
    kernel: *mut usize,
    library: usize,
    name: *const c_char,
) -> CUresult {
    with_driver("cuLibraryGetKernel", |d| {
        nonnull(kernel)?;
        nonnull(name)?;
        if !d.libraries.contains_key(&library) {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        // SAFETY: NUL-terminated name per cuda.h.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let existing = d
            .kernels
            .iter()
            .find(|(_, (l, n))| *l == library && *n == name)
            .map(|(h, _)| *h);
        let h = match existing {
            Some(h) => h,
            None => {
                let h = d.mint();
                d.kernels.insert(h, (library, name));
                h
            }
        };
        out(kernel, h)
    })
}

impl Driver {
    /// The module of `library` in the current context, loaded there on first use.
    fn library_module(&mut self, library: usize) -> Result<usize, CUresult> {
        let ctx = self.current()?;
        if let Some(m) = self
            .libraries
            .get(&library)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?
            .get(&ctx)
        {
            if self.modules.contains_key(m) {
                return Ok(*m);
            }
        }
        let m = self.load_fatbin()?;
        if let Some(per_ctx) = self.libraries.get_mut(&library) {
            per_ctx.insert(ctx, m);
        }
        Ok(m)
    }

    /// The function handle of `name` in module `m` (minted once).
    pub(super) fn function_in(&mut self, m: usize, name: &str) -> usize {
        let existing = self
            .functions
            .iter()
            .find(|(_, f)| f.module == m && f.name == name)
            .map(|(h, _)| *h);
        match existing {
            Some(h) => h,
            None => {
                let h = self.mint();
                self.functions.insert(
                    h,
                    Function {
                        module: m,
                        name: name.to_string(),
                    },
                );
                h
            }
        }
    }

    /// A `CUfunction` or `CUkernel` handle as a function of the current context.
    pub(super) fn as_function(&mut self, f: usize) -> Result<usize, CUresult> {
        if self.functions.contains_key(&f) {
            return Ok(f);
        }
        let (library, name) = self
            .kernels
            .get(&f)
            .cloned()
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let m = self.library_module(library)?;
        Ok(self.function_in(m, &name))
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetModule(module: *mut CUmodule, library: usize) -> CUresult {
    with_driver("cuLibraryGetModule", |d| {
        nonnull(module)?;
        let m = d.library_module(library)?;
        out(module, m as CUmodule)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetFunction(func: *mut CUfunction, kernel: usize) -> CUresult {
    with_driver("cuKernelGetFunction", |d| {
        nonnull(func)?;
        let f = d.as_function(kernel)?;
        out(func, f as CUfunction)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetName(name: *mut *const c_char, kernel: usize) -> CUresult {
    with_driver("cuKernelGetName", |d| {
        nonnull(name)?;
        let (_, n) = d.kernels.get(&kernel).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        // The name lives as long as the process: kernels are few and named once.
        let c = std::ffi::CString::new(n.as_str()).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        out(name, Box::leak(c.into_boxed_c_str()).as_ptr())
    })
}

/// `CUfunction_attribute` values the occupancy rules read.
const MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
const PREFERRED_SHARED_MEMORY_CARVEOUT: c_int = 9;
/// Shared memory the driver reserves per block (CUDA C++ Programming Guide: 1 KB since 8.0).
const RESERVED_SMEM: c_int = 1024;
/// Registers each simulated kernel uses per thread.
const REGS_PER_THREAD: c_int = 32;

impl Driver {
    /// The architecture limits of the device behind CUDA ordinal `ordinal`.
    fn limits_of(&self, ordinal: u32) -> Result<device::ArchLimits, CUresult> {
        let info = self.proc.device(ordinal).map_err(code)?;
        let (cc, _) = vramdoc_sim::spec::arch_of(&info.name);
        Ok(device::arch_limits(cc))
    }

    /// The largest dynamic shared memory a launch of `f` may ask for: what was set for it,
    /// else the 48 KiB every kernel may use without opting in.
    fn max_dynamic_smem(&self, f: usize) -> c_int {
        self.func_attrs
            .get(&(f, MAX_DYNAMIC_SHARED_SIZE_BYTES))
            .copied()
            .unwrap_or(48 * 1024)
    }

    /// Blocks of `block` threads using `smem` bytes of dynamic shared memory that one
    /// multiprocessor holds at once (the occupancy calculator's rules: threads, blocks,
    /// registers and shared memory per multiprocessor; none past the kernel's limit).
    fn resident_blocks(
        &self,
        f: usize,
        block: c_int,
        smem: usize,
        ordinal: u32,
    ) -> Result<c_int, CUresult> {
        if block <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let a = self.limits_of(ordinal)?;
        if smem > self.max_dynamic_smem(f).max(0) as usize || block > 1024 {
            return Ok(0);
        }
        let warps = (block + 31) / 32 * 32;
        let by_threads = a.threads_per_sm / warps;
        let by_regs = 65536 / (warps * REGS_PER_THREAD);
        let by_smem = a.smem_per_sm / (smem as c_int + RESERVED_SMEM);
        Ok(by_threads
            .min(by_regs)
            .min(by_smem)
            .min(a.blocks_per_sm)
            .max(0))
    }

    /// The device a function handle runs on: its module's context (a library kernel: the
    /// current context).
    fn function_ordinal(&mut self, f: usize) -> Result<u32, CUresult> {
        if let Some(func) = self.functions.get(&f) {
            let ctx = self
                .modules
                .get(&func.module)
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?
                .ctx;
            return Ok(self.ctx(ctx)?.ordinal);
        }
        if self.kernels.contains_key(&f) {
            let ctx = self.current()?;
            return Ok(self.contexts[&ctx].ordinal);
        }
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

/// A function attribute (`CUfunction_attribute`): what a small compiled kernel reports on
/// the device's architecture, or what was set for it.
fn function_attribute(
    d: &Driver,
    f: usize,
    attrib: c_int,
    ordinal: u32,
) -> Result<c_int, CUresult> {
    let info = d.proc.device(ordinal).map_err(code)?;
    let ((major, minor), _) = vramdoc_sim::spec::arch_of(&info.name);
    if let Some(v) = d.func_attrs.get(&(f, attrib)) {
        return Ok(*v);
    }
    Ok(match attrib {
        0 => 1024,                   // MAX_THREADS_PER_BLOCK
        1..=3 => 0,                  // SHARED_SIZE_BYTES, CONST_SIZE_BYTES, LOCAL_SIZE_BYTES
        4 => REGS_PER_THREAD,        // NUM_REGS
        5 | 6 => major * 10 + minor, // PTX_VERSION, BINARY_VERSION
        7 => 0,                      // CACHE_MODE_CA
        MAX_DYNAMIC_SHARED_SIZE_BYTES => d.max_dynamic_smem(f),
        PREFERRED_SHARED_MEMORY_CARVEOUT => -1,
        10..=15 => 0, // cluster attributes
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    func: CUfunction,
) -> CUresult {
    with_driver("cuFuncGetAttribute", |d| {
        let f = func as usize;
        let o = d.function_ordinal(f)?;
        let v = function_attribute(d, f, attrib, o)?;
        out(pi, v)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    kernel: usize,
    dev: CUdevice,
) -> CUresult {
    with_driver("cuKernelGetAttribute", |d| {
        known_function(d, kernel)?;
        let o = d.ordinal(dev)?;
        let v = function_attribute(d, kernel, attrib, o)?;
        out(pi, v)
    })
}

fn known_function(d: &Driver, f: usize) -> Result<(), CUresult> {
    if d.functions.contains_key(&f) || d.kernels.contains_key(&f) {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

/// Set a settable function attribute: the dynamic shared memory limit (at most the device's
/// opt-in maximum), the carveout (-1 or a percentage), the cluster settings.
fn set_function_attribute(
    d: &mut Driver,
    f: usize,
    attrib: c_int,
    value: c_int,
    ordinal: u32,
) -> Result<(), CUresult> {
    let a = d.limits_of(ordinal)?;
    let ok = match attrib {
        MAX_DYNAMIC_SHARED_SIZE_BYTES => (0..=a.smem_optin).contains(&value),
        PREFERRED_SHARED_MEMORY_CARVEOUT => (-1..=100).contains(&value),
        10..=15 => value >= 0,
        _ => false,
    };
    if !ok {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.func_attrs.insert((f, attrib), value);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(
    func: CUfunction,
    attrib: c_int,
    value: c_int,
) -> CUresult {
    with_driver("cuFuncSetAttribute", |d| {
        let f = func as usize;
        let o = d.function_ordinal(f)?;
        set_function_attribute(d, f, attrib, value, o)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelSetAttribute(
    attrib: c_int,
    value: c_int,
    kernel: usize,
    dev: CUdevice,
) -> CUresult {
    with_driver("cuKernelSetAttribute", |d| {
        known_function(d, kernel)?;
        let o = d.ordinal(dev)?;
        set_function_attribute(d, kernel, attrib, value, o)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetCacheConfig(func: CUfunction, _config: c_uint) -> CUresult {
    with_driver("cuFuncSetCacheConfig", |d| known_function(d, func as usize))
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelSetCacheConfig(
    kernel: usize,
    _config: c_uint,
    dev: CUdevice,
) -> CUresult {
    with_driver("cuKernelSetCacheConfig", |d| {
        known_function(d, kernel)?;
        d.ordinal(dev).map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetName(name: *mut *const c_char, func: CUfunction) -> CUresult {
    with_driver("cuFuncGetName", |d| {
        nonnull(name)?;
        let f = d
            .functions
            .get(&(func as usize))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let c = std::ffi::CString::new(f.name.as_str()).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        out(name, Box::leak(c.into_boxed_c_str()).as_ptr())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetModule(module: *mut CUmodule, func: CUfunction) -> CUresult {
    with_driver("cuFuncGetModule", |d| {
        let f = d
            .functions
            .get(&(func as usize))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        out(module, f.module as CUmodule)
    })
}

/// Bytes given to each device variable of a module or library: the simulator reads no
/// module's symbol table, so it cannot know a variable's size; every variable the libraries
/// of PyPI's PyTorch were seen to use fits (docs/simulator.md, "What is faithful").
pub(super) const GLOBAL_BYTES: usize = 64 * 1024;
/// Device variables live at addresses from here up, apart from allocations and ranges.
const GLOBALS_BASE: u64 = 0x7d00_0000_0000;

impl Driver {
    /// The address of the device variable `name` of module or library `owner`, host-backed
    /// and charged to no one (a module's variables are part of the memory its context holds).
    fn global(&mut self, owner: usize, name: &str) -> u64 {
        if let Some((at, _)) = self
            .globals
            .iter()
            .find(|(_, g)| g.owner == owner && g.name == name)
        {
            return *at;
        }
        let at = GLOBALS_BASE + (self.globals.len() * GLOBAL_BYTES) as u64;
        self.globals.insert(
            at,
            Global {
                owner,
                name: name.to_string(),
                bytes: vec![0; GLOBAL_BYTES],
            },
        );
        at
    }

    /// The device variable holding `ptr`, and the offset into it.
    pub(super) fn global_at(&mut self, ptr: u64) -> Option<(&mut Vec<u8>, usize)> {
        let (start, g) = self.globals.range_mut(..=ptr).next_back()?;
        let off = (ptr - start) as usize;
        (off < g.bytes.len()).then_some((&mut g.bytes, off))
    }
}

/// A device variable (`cuModuleGetGlobal`, `cuLibraryGetGlobal`).
pub(super) struct Global {
    owner: usize,
    name: String,
    bytes: Vec<u8>,
}

fn get_global(
    d: &mut Driver,
    owner: usize,
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    name: *const c_char,
) -> Result<(), CUresult> {
    nonnull(name)?;
    // SAFETY: NUL-terminated name per cuda.h.
    let name = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    let at = d.global(owner, &name);
    if !dptr.is_null() {
        out(dptr, at)?;
    }
    if !bytes.is_null() {
        out(bytes, GLOBAL_BYTES)?;
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    module: CUmodule,
    name: *const c_char,
) -> CUresult {
    with_driver("cuModuleGetGlobal_v2", |d| {
        let m = d
            .modules
            .get(&(module as usize))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if !m.fatbin {
            // A PTX module of the simulator's own kernels declares no variables.
            return Err(CUDA_ERROR_NOT_FOUND);
        }
        get_global(d, module as usize, dptr, bytes, name)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetGlobal(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    library: usize,
    name: *const c_char,
) -> CUresult {
    with_driver("cuLibraryGetGlobal", |d| {
        d.libraries.get(&library).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        get_global(d, library, dptr, bytes, name)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    blocks: *mut c_int,
    func: CUfunction,
    block: c_int,
    dynamic_smem: usize,
) -> CUresult {
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block, dynamic_smem, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    blocks: *mut c_int,
    func: CUfunction,
    block: c_int,
    dynamic_smem: usize,
    _flags: c_uint,
) -> CUresult {
    with_driver("cuOccupancyMaxActiveBlocksPerMultiprocessor", |d| {
        let f = func as usize;
        let o = d.function_ordinal(f)?;
        let n = d.resident_blocks(f, block, dynamic_smem, o)?;
        out(blocks, n)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSize(
    min_grid: *mut c_int,
    block: *mut c_int,
    func: CUfunction,
    _smem_of_block: *mut c_void,
    dynamic_smem: usize,
    limit: c_int,
) -> CUresult {
    with_driver("cuOccupancyMaxPotentialBlockSize", |d| {
        let f = func as usize;
        let o = d.function_ordinal(f)?;
        let info = d.proc.device(o).map_err(code)?;
        let (_, sms) = vramdoc_sim::spec::arch_of(&info.name);
        let cap = if limit > 0 { limit.min(1024) } else { 1024 };
        // The block size with the most resident threads, largest first on ties.
        let mut best = (0, 0);
        for b in (32..=cap).rev().step_by(32) {
            let n = d.resident_blocks(f, b, dynamic_smem, o)?;
            if n * b > best.0 * best.1 {
                best = (n, b);
            }
        }
        out(min_grid, sms * best.0)?;
        out(block, best.1)
    })
}

/// The most dynamic shared memory a block may use so that `blocks` blocks fit on one
/// multiprocessor (capped at the device's opt-in maximum).
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyAvailableDynamicSMemPerBlock(
    smem: *mut usize,
    func: CUfunction,
    blocks: c_int,
    block: c_int,
) -> CUresult {
    with_driver("cuOccupancyAvailableDynamicSMemPerBlock", |d| {
        let f = func as usize;
        let o = d.function_ordinal(f)?;
        if blocks <= 0 || block <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let a = d.limits_of(o)?;
        let per = (a.smem_per_sm / blocks - RESERVED_SMEM).clamp(0, a.smem_optin);
        out(smem, per as usize)
    })
}

/// The launch of a kernel the simulator does not emulate (a fatbin's, a library's): checked
/// like a real launch for its configuration, stream and device, then nothing runs.
fn launch_any(
    name: &str,
    f: usize,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    stream: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    with_driver(name, |d| {
        if grid.contains(&0)
            || block.contains(&0)
            || block.iter().map(|b| *b as u64).product::<u64>() > 1024
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let f = d.as_function(f)?;
        if d.is_fatbin_function(f) {
            d.launch(f, stream, params)
        } else {
            nonnull(params)?;
            d.launch(f, stream, params)
        }
    })
}

/// `CUlaunchConfig`: grid and block dimensions, shared memory, stream, attributes.
#[repr(C)]
pub struct CUlaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_mem_bytes: c_uint,
    pub stream: CUstream,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> CUresult {
    if config.is_null() {
        return guard("cuLaunchKernelEx", || CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: checked non-null; cuda.h layout.
    let c = unsafe { &*config };
    launch_any(
        "cuLaunchKernelEx",
        f as usize,
        c.grid,
        c.block,
        c.stream,
        params,
    )
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLaunchCooperativeKernel(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    _smem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    launch_any(
        "cuLaunchCooperativeKernel",
        f as usize,
        [gx, gy, gz],
        [bx, by, bz],
        stream,
        params,
    )
}

/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION` and the size of one `CUlaunchAttribute` (id,
/// padding, a 64-byte value).
const CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: u32 = 4;
const LAUNCH_ATTRIBUTE_BYTES: usize = 72;
/// Non-portable cluster size attribute of a function (`CUfunction_attribute` 14).
const NON_PORTABLE_CLUSTER_SIZE_ALLOWED: c_int = 14;

/// The cluster dimensions a launch configuration asks for (1 without the attribute).
unsafe fn cluster_blocks(config: &CUlaunchConfig) -> c_int {
    if config.attrs.is_null() {
        return 1;
    }
    for i in 0..config.num_attrs as usize {
        // SAFETY: `num_attrs` attributes of cuda.h's layout at `attrs`.
        let at = unsafe { (config.attrs as *const u8).add(i * LAUNCH_ATTRIBUTE_BYTES) };
        let id = unsafe { *(at as *const u32) };
        if id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION {
            let dims = unsafe { std::slice::from_raw_parts(at.add(8) as *const u32, 3) };
            return dims.iter().map(|d| (*d).max(1) as c_int).product();
        }
    }
    1
}

/// `cuOccupancyMaxPotentialClusterSize`: thread block clusters exist from compute capability
/// 9.0 (8 blocks portably, 16 where the kernel allows non-portable sizes, CUDA C++
/// Programming Guide "Thread Block Clusters").
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialClusterSize(
    size: *mut c_int,
    func: CUfunction,
    config: *const CUlaunchConfig,
) -> CUresult {
    with_driver("cuOccupancyMaxPotentialClusterSize", |d| {
        nonnull(config)?;
        let f = func as usize;
        let o = d.function_ordinal(f)?;
        let info = d.proc.device(o).map_err(code)?;
        let ((major, _), _) = vramdoc_sim::spec::arch_of(&info.name);
        if major < 9 {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let wide = d
            .func_attrs
            .get(&(f, NON_PORTABLE_CLUSTER_SIZE_ALLOWED))
            .is_some_and(|v| *v != 0);
        out(size, if wide { 16 } else { 8 })
    })
}

/// `cuOccupancyMaxActiveClusters`: how many clusters of the configuration's size run at
/// once, from the blocks each multiprocessor holds.
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveClusters(
    clusters: *mut c_int,
    func: CUfunction,
    config: *const CUlaunchConfig,
) -> CUresult {
    with_driver("cuOccupancyMaxActiveClusters", |d| {
        nonnull(config)?;
        // SAFETY: checked non-null; cuda.h layout.
        let c = unsafe { &*config };
        let f = func as usize;
        let o = d.function_ordinal(f)?;
        let info = d.proc.device(o).map_err(code)?;
        let ((major, _), sms) = vramdoc_sim::spec::arch_of(&info.name);
        if major < 9 {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let block = c.block.iter().map(|b| *b as c_int).product::<c_int>();
        let per_sm = d.resident_blocks(f, block, c.shared_mem_bytes as usize, o)?;
        let size = unsafe { cluster_blocks(c) };
        out(clusters, sms * per_sm / size.max(1))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetLibrary(library: *mut usize, kernel: usize) -> CUresult {
    with_driver("cuKernelGetLibrary", |d| {
        let (l, _) = d.kernels.get(&kernel).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        out(library, *l)
    })
}
