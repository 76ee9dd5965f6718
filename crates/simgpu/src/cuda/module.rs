//! Entry points: modules (PTX images, read for their `.entry` names) and kernel launches.

use super::*;

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
    with_driver("cuModuleLoadData", |d| {
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
    with_driver("cuModuleLoad", |d| {
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
    with_driver("cuModuleUnload", |d| {
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
    with_driver("cuModuleGetFunction", |d| {
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
        if !m.fatbin && !m.entries.contains(&name) {
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
    with_driver("cuLaunchKernel", |d| {
        if [grid_x, grid_y, grid_z, block_x, block_y, block_z].contains(&0)
            || (block_x as u64) * (block_y as u64) * (block_z as u64) > 1024
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if kernel_params.is_null()
            && !d
                .as_function(f as usize)
                .is_ok_and(|f| d.is_fatbin_function(f))
        {
            // Parameters packed through `extra` are not emulated.
            return Err(if extra.is_null() {
                CUDA_ERROR_INVALID_VALUE
            } else {
                CUDA_ERROR_NOT_SUPPORTED
            });
        }
        let f = d.as_function(f as usize)?;
        d.launch(f, stream, kernel_params)
    })
}
