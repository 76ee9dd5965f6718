//! Entry points: initialisation, versions, errors.

use super::*;

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    guard("cuInit", || {
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
            pooled: Default::default(),
            peers: Default::default(),
            imports: HashMap::new(),
            cls: HashMap::new(),
            deferred: Vec::new(),
            func_attrs: HashMap::new(),
            limits: HashMap::new(),
            ctx_flags: HashMap::new(),
            graphs: HashMap::new(),
            libraries: HashMap::new(),
            kernels: HashMap::new(),
            globals: Default::default(),
            host: Default::default(),
            vmm: Default::default(),
            next_handle: 0x5100_0000,
        });
        CUDA_SUCCESS
    })
}

/// The core's answer to `cuInit` on the box `VRAMDOC_SIM_DIR` names
/// ([`vramdoc_sim::cuda::init`]: the toolkit's stub, a library/kernel-module mismatch).
fn init_fault() -> Option<CUresult> {
    let sim = vramdoc_sim::SimBox::from_env().ok()?;
    vramdoc_sim::cuda::init(&sim).err().map(|e| e.cuda_code())
}

/// Whether the box's libcuda.so is the toolkit's stub (every call fails).
fn stub() -> bool {
    vramdoc_sim::SimBox::from_env().is_ok_and(|sim| vramdoc_sim::cuda::is_stub(&sim))
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    guard("cuDriverGetVersion", || {
        if stub() {
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
    guard("cuGetErrorName", || {
        match ERRORS.iter().find(|(c, _, _)| *c == error) {
            Some((_, name, _)) => match out(p_str, name.as_ptr()) {
                Ok(()) => CUDA_SUCCESS,
                Err(c) => c,
            },
            None => {
                let _ = out(p_str, std::ptr::null());
                CUDA_ERROR_INVALID_VALUE
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, p_str: *mut *const c_char) -> CUresult {
    guard("cuGetErrorString", || {
        match ERRORS.iter().find(|(c, _, _)| *c == error) {
            Some((_, _, text)) => match out(p_str, text.as_ptr()) {
                Ok(()) => CUDA_SUCCESS,
                Err(c) => c,
            },
            None => {
                let _ = out(p_str, std::ptr::null());
                CUDA_ERROR_INVALID_VALUE
            }
        }
    })
}
