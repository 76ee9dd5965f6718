//! The simulated driver libraries a job on a simulated box loads in place of NVIDIA's:
//! crates/simgpu's `libsimgpu.so`, installed for the box's driver profile under the real
//! names (`libcuda.so.1`, `libnvidia-ml.so.1`, ...) in the box's `driver-libs/`, and put first
//! on the job's own `LD_LIBRARY_PATH` — so `vramdoc --sim 2xh100 run -- python train.py` runs
//! an unmodified CUDA program (PyTorch from PyPI, cudarc, ctypes) on the box with nothing else
//! typed. vramdoc's own environment is never changed.
//!
//! Where the library comes from, first found: `VRAMDOC_SIMGPU_LIB` (a path to a build of
//! `libsimgpu.so`), `VRAMDOC_SIMGPU_DIR` (a directory already holding the libraries under
//! their real names, as scripts/test installs them), `libsimgpu.so` beside the vramdoc
//! executable (`cargo build --release --workspace` puts it there).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A path to a build of crates/simgpu (`libsimgpu.so`).
pub const SIMGPU_LIB_ENV: &str = "VRAMDOC_SIMGPU_LIB";
/// A directory holding the simulated libraries under the real names.
pub const SIMGPU_DIR_ENV: &str = "VRAMDOC_SIMGPU_DIR";
/// The directory of the installed libraries inside a box.
const DIR: &str = "driver-libs";

/// Why a job on a box cannot be given the simulated driver (said in one line, the job still
/// runs: a job that loads no CUDA library does not need it).
#[derive(Debug, thiserror::Error)]
pub enum LibsError {
    #[error("no simulated driver library to give the job: build it (cargo build --release -p vramdoc-simgpu, next to vramdoc) or name it with {SIMGPU_LIB_ENV}=PATH/libsimgpu.so; CUDA programs in the job will not see the box")]
    NotFound,
    #[error("{SIMGPU_LIB_ENV}={0}: no such file")]
    Named(PathBuf),
    #[error("installing the simulated driver into {0}: {1}")]
    Install(PathBuf, String),
}

/// Where the library comes from.
enum Source {
    /// A build to install for the box's profile.
    Build(PathBuf),
    /// A directory already holding the real names.
    Installed(PathBuf),
}

fn source(
    exe: Option<PathBuf>,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<Source, LibsError> {
    if let Some(p) = var(SIMGPU_LIB_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(Source::Build(p))
        } else {
            Err(LibsError::Named(p))
        };
    }
    if let Some(d) = var(SIMGPU_DIR_ENV).filter(|v| !v.is_empty()) {
        let d = PathBuf::from(d);
        if d.join("libcuda.so.1").is_file() {
            return Ok(Source::Installed(d));
        }
    }
    exe.and_then(|e| e.parent().map(|d| d.join("libsimgpu.so")))
        .filter(|p| p.is_file())
        .map(Source::Build)
        .ok_or(LibsError::NotFound)
}

/// The directory to put first on a job's `LD_LIBRARY_PATH` for the box at `box_dir` whose
/// driver is `driver_version`: installed on first use (and again when the build changed).
pub fn driver_libs(box_dir: &Path, driver_version: &str) -> Result<PathBuf, LibsError> {
    let exe = std::env::current_exe().ok();
    match source(exe, |k| std::env::var_os(k))? {
        Source::Installed(d) => Ok(d),
        Source::Build(src) => {
            let dir = box_dir.join(DIR);
            let stamp = dir.join(".source");
            let meta = std::fs::metadata(&src)
                .map_err(|e| LibsError::Install(dir.clone(), format!("{}: {e}", src.display())))?;
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            let want = format!(
                "{}\n{}\n{mtime}\n{driver_version}\n",
                src.display(),
                meta.len()
            );
            let fresh = std::fs::read_to_string(&stamp).is_ok_and(|s| s == want)
                && dir.join("libcuda.so.1").is_file();
            if !fresh {
                vramdoc_sim::libs::install(&src, &dir, driver_version)
                    .map_err(|e| LibsError::Install(dir.clone(), e.to_string()))?;
                std::fs::write(&stamp, want)
                    .map_err(|e| LibsError::Install(dir.clone(), e.to_string()))?;
            }
            Ok(dir)
        }
    }
}

/// `LD_LIBRARY_PATH` with `first` ahead of `existing`.
pub fn library_path(first: &Path, existing: Option<OsString>) -> OsString {
    let mut v = first.as_os_str().to_os_string();
    if let Some(e) = existing.filter(|e| !e.is_empty()) {
        v.push(":");
        v.push(e);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_found_in_order_and_a_named_one_must_exist() {
        let t = tempfile::tempdir().unwrap();
        let exe_dir = t.path().join("release");
        std::fs::create_dir_all(&exe_dir).unwrap();
        let exe = Some(exe_dir.join("vramdoc"));
        let none = |_: &str| None;
        assert!(matches!(
            source(exe.clone(), none),
            Err(LibsError::NotFound)
        ));
        std::fs::write(exe_dir.join("libsimgpu.so"), b"x").unwrap();
        assert!(
            matches!(source(exe.clone(), none), Ok(Source::Build(p)) if p == exe_dir.join("libsimgpu.so"))
        );
        // A directory of installed libraries wins over the one beside vramdoc.
        let libs = t.path().join("libs");
        std::fs::create_dir_all(&libs).unwrap();
        std::fs::write(libs.join("libcuda.so.1"), b"x").unwrap();
        let l = libs.clone();
        let dir_var = move |k: &str| (k == SIMGPU_DIR_ENV).then(|| l.clone().into_os_string());
        assert!(matches!(source(exe.clone(), &dir_var), Ok(Source::Installed(d)) if d == libs));
        // A named build that is not there is said, not skipped.
        let gone = t.path().join("gone.so");
        let g = gone.clone();
        let lib_var = move |k: &str| (k == SIMGPU_LIB_ENV).then(|| g.clone().into_os_string());
        assert!(matches!(source(exe, lib_var), Err(LibsError::Named(p)) if p == gone));
    }

    #[test]
    fn the_box_libraries_go_first_on_the_path() {
        let p = Path::new("/box/driver-libs");
        assert_eq!(library_path(p, None), OsString::from("/box/driver-libs"));
        assert_eq!(
            library_path(p, Some("/usr/lib:/opt".into())),
            OsString::from("/box/driver-libs:/usr/lib:/opt")
        );
    }
}
