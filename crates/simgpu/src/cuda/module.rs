//! Entry points: modules (PTX images, read for their `.entry` names) and kernel launches.

use super::*;

/// A module image: PTX text, or compiled code (a cubin, a fatbin, a fatbin wrapper, what
/// `cuLinkComplete` produced), which is accepted as a module whose kernels launch as no-ops.
enum Image {
    Ptx(String),
    Compiled,
}

/// Magic numbers of compiled images: ELF (cubin), fatbin wrapper, fatbin (little-endian).
const COMPILED_MAGIC: [&[u8]; 3] = [
    b"\x7fELF",
    &[0xb1, 0x43, 0x62, 0x46],
    &[0x50, 0xed, 0x55, 0xba],
];

fn image(image: *const c_void) -> Result<Image, CUresult> {
    nonnull(image)?;
    // SAFETY: a module image is a NUL-terminated PTX string, or a binary whose first 4 bytes
    // are its magic (cuModuleLoadData's contract); no byte past a NUL is read before the
    // magic is known.
    let mut head = Vec::with_capacity(4);
    for i in 0..4 {
        let b = unsafe { *(image as *const u8).add(i) };
        head.push(b);
        if b == 0 {
            break;
        }
    }
    if COMPILED_MAGIC.iter().any(|m| head == *m) {
        return Ok(Image::Compiled);
    }
    let bytes = unsafe { CStr::from_ptr(image as *const c_char) }.to_bytes();
    String::from_utf8(bytes.to_vec())
        .map(Image::Ptx)
        .map_err(|_| CUDA_ERROR_INVALID_IMAGE)
}

impl Driver {
    fn load_image(&mut self, img: Image) -> Result<usize, CUresult> {
        match img {
            Image::Ptx(text) => self.load_module(&text),
            Image::Compiled => self.load_fatbin(),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CUresult {
    with_driver("cuModuleLoadData", |d| {
        nonnull(module)?;
        let img = self::image(image)?;
        let h = d.load_image(img)?;
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
        let bytes = std::fs::read(&path).map_err(|_| CUDA_ERROR_FILE_NOT_FOUND)?;
        let img = if COMPILED_MAGIC.iter().any(|m| bytes.starts_with(m)) {
            Image::Compiled
        } else {
            Image::Ptx(String::from_utf8(bytes).map_err(|_| CUDA_ERROR_INVALID_IMAGE)?)
        };
        let h = d.load_image(img)?;
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

/// JIT linking (`cuLinkCreate`, `cuLinkAddData`, `cuLinkComplete`): cuBLASLt links some of its
/// kernels at run time. Nothing is compiled: the link state collects nothing, and completion
/// hands out a small image with a cubin's magic, which `cuModuleLoadData` accepts as a module
/// of no-op kernels.
static LINKED_IMAGE: [u8; 16] = *b"\x7fELF\x02\x01\x01\0vramdoc\0";

#[no_mangle]
pub unsafe extern "C" fn cuLinkCreate_v2(
    _num_options: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
    state: *mut *mut c_void,
) -> CUresult {
    with_driver("cuLinkCreate_v2", |d| {
        d.current()?;
        let h = d.mint();
        out(state, h as *mut c_void)
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLinkAddData_v2(
    state: *mut c_void,
    _kind: c_uint,
    data: *mut c_void,
    _size: usize,
    _name: *const c_char,
    _num_options: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
) -> CUresult {
    with_driver("cuLinkAddData_v2", |_| {
        nonnull(state)?;
        nonnull(data)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkAddFile_v2(
    state: *mut c_void,
    _kind: c_uint,
    path: *const c_char,
    _num_options: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
) -> CUresult {
    with_driver("cuLinkAddFile_v2", |_| {
        nonnull(state)?;
        nonnull(path)?;
        // SAFETY: NUL-terminated path per cuda.h.
        let p = unsafe { CStr::from_ptr(path) }
            .to_string_lossy()
            .into_owned();
        if std::path::Path::new(&p).is_file() {
            Ok(())
        } else {
            Err(CUDA_ERROR_FILE_NOT_FOUND)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkComplete(
    state: *mut c_void,
    cubin: *mut *mut c_void,
    size: *mut usize,
) -> CUresult {
    with_driver("cuLinkComplete", |_| {
        nonnull(state)?;
        out(cubin, LINKED_IMAGE.as_ptr() as *mut c_void)?;
        out(size, LINKED_IMAGE.len())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkDestroy(state: *mut c_void) -> CUresult {
    with_driver("cuLinkDestroy", |_| nonnull(state))
}
