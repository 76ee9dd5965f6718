//! Entry points: init (reference counted), shutdown, error strings.

use super::*;

fn init(_flags: c_uint) -> nvmlReturn_t {
    let nvml = match SimBox::from_env().and_then(SimNvml::init) {
        Ok(n) => n,
        Err(e) => return sim_code(&e),
    };
    let mut lib = lock(&LIB);
    if lib.refcount == 0 {
        lib.nvml = Some(Arc::new(nvml));
    }
    lib.refcount += 1;
    NVML_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    guard("nvmlInit_v2", || init(0))
}

/// The v1 symbol, still exported by real drivers for binary compatibility.
#[no_mangle]
pub unsafe extern "C" fn nvmlInit() -> nvmlReturn_t {
    guard("nvmlInit", || init(0))
}

/// Flags (`NVML_INIT_FLAG_NO_GPUS`, `NVML_INIT_FLAG_NO_ATTACH`) change nothing here: a box
/// always has at least one device and nothing needs attaching.
#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(flags: c_uint) -> nvmlReturn_t {
    guard("nvmlInitWithFlags", || init(flags))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    guard("nvmlShutdown", || {
        let mut lib = lock(&LIB);
        if lib.refcount == 0 {
            return NVML_ERROR_UNINITIALIZED;
        }
        lib.refcount -= 1;
        if lib.refcount == 0 {
            lib.nvml = None;
        }
        NVML_SUCCESS
    })
}

fn error_text(result: nvmlReturn_t) -> &'static CStr {
    match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        11 => c"Interrupt request issue",
        12 => c"NVML Shared Library Not Found",
        13 => c"Function Not Found",
        14 => c"Corrupted infoROM",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        17 => c"The operating system has blocked the request.",
        18 => c"RM has detected an NVML/RM version mismatch.",
        19 => c"In use by another client",
        20 => c"Insufficient Memory",
        21 => c"No data",
        22 => c"The requested vgpu operation is not available on target device, becasue ECC is enabled",
        23 => c"Ran out of critical resources, other than memory",
        24 => c"The requested frequency is not supported",
        25 => c"The provided version is invalid/unsupported",
        26 => c"The requested functionality has been deprecated",
        27 => c"The system is not ready for the request",
        28 => c"The GPU was not found",
        29 => c"The object is in an invalid state",
        _ => c"Unknown Error",
    }
}

/// Static strings: valid for the life of the process, never to be freed (as in nvml.h).
#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    catch_unwind(|| {
        count("nvmlErrorString");
        error_text(result).as_ptr()
    })
    .unwrap_or(c"Unknown Error".as_ptr())
}
