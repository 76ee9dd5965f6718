//! Entry points: system queries (driver, NVML and CUDA versions, process names).

use super::*;

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard("nvmlSystemGetDriverVersion", || {
        done((|| {
            let nvml = current()?;
            let sim = nvml.sim();
            write_str(version, length, &sim.config().driver_version)
        })())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard("nvmlSystemGetNVMLVersion", || {
        let v = match any_box() {
            Some(b) => b.config().nvml_version.clone(),
            None => default_nvml_version(),
        };
        done(write_str(version, length, &v))
    })
}

fn default_nvml_version() -> String {
    let o = vramdoc_sim::InitOptions::default();
    format!("{}.{}", o.cuda_driver_version / 1000, o.driver_version)
}

fn cuda_version(out_v: *mut c_int) -> nvmlReturn_t {
    let v = match any_box() {
        Some(b) => b.config().cuda_driver_version,
        None => vramdoc_sim::InitOptions::default().cuda_driver_version,
    };
    // SAFETY: checked for NULL by `out`.
    done(unsafe { out(out_v, v) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(
    cudaDriverVersion: *mut c_int,
) -> nvmlReturn_t {
    guard("nvmlSystemGetCudaDriverVersion", || {
        cuda_version(cudaDriverVersion)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(
    cudaDriverVersion: *mut c_int,
) -> nvmlReturn_t {
    guard("nvmlSystemGetCudaDriverVersion_v2", || {
        cuda_version(cudaDriverVersion)
    })
}

/// The name the box recorded for `pid`, else (or when the recorded one lost bytes that are
/// not UTF-8) the bytes of `/proc/PID/comm`, as the real driver returns them; cropped to
/// `length`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    guard("nvmlSystemGetProcessName", || {
        done((|| {
            let nvml = current()?;
            let sim = nvml.sim();
            if name.is_null() || length == 0 {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
            let st = sim.state().map_err(|e| sim_code(&e))?;
            let recorded = st
                .processes
                .get(&pid)
                .map(|p| p.name.clone())
                .filter(|n| !n.is_empty());
            let n: Vec<u8> = match recorded {
                Some(n) if !n.contains('\u{FFFD}') => n.into_bytes(),
                _ => vramdoc_sim::procinfo::comm_bytes(pid).ok_or(NVML_ERROR_NOT_FOUND)?,
            };
            let cut = n.len().min(length as usize - 1);
            // SAFETY: the caller gives a buffer of `length` bytes (checked non-null above);
            // `cut + 1 <= length`.
            std::ptr::copy_nonoverlapping(n.as_ptr() as *const c_char, name, cut);
            *name.add(cut) = 0;
            Ok(())
        })())
    })
}
