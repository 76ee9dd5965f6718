//! Where the tests find the simulated driver libraries: crates/simgpu's `libsimgpu.so`,
//! installed under the real libraries' names (`libcuda.so`, `libcuda.so.1`,
//! `libnvidia-ml.so.1`, `libnvidia-ml.so`) in the directory `VRAMDOC_SIMGPU_DIR` names.
//!
//! `cargo test` does not build a cdylib's `.so`, and the tests never run cargo themselves:
//! `scripts/test` builds and installs the libraries once, then runs `cargo test` with the
//! variable set (`scripts/test --simgpu-dir` does only the first part and prints the
//! directory). A test that needs the libraries fails with that advice when the variable is
//! unset, when the directory lacks a library, or when the installed copy is older than the
//! simulator's sources (an edit to crates/ since the last install).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

/// The variable naming the directory of the installed simulated libraries.
pub const VAR: &str = "VRAMDOC_SIMGPU_DIR";

/// The names the library is installed under: what cudarc, nvml-wrapper, pynvml and ctypes
/// clients `dlopen`.
pub const NAMES: [&str; 4] = [
    "libcuda.so",
    "libcuda.so.1",
    "libnvidia-ml.so.1",
    "libnvidia-ml.so",
];

const HOW: &str = "run the tests with `scripts/test` (it builds crates/simgpu and sets the \
                   variable), or install the libraries and set it yourself: \
                   `export VRAMDOC_SIMGPU_DIR=$(scripts/test --simgpu-dir)`";

/// The directory holding the simulated libraries under their real names: point
/// `LD_LIBRARY_PATH` at it. Panics with how to get them when they are missing or stale.
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match DIR.get_or_init(find) {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    }
}

fn find() -> Result<PathBuf, String> {
    let Some(dir) = std::env::var_os(VAR).filter(|v| !v.is_empty()) else {
        return Err(format!(
            "{VAR} is not set: this test loads the simulated libcuda.so / libnvidia-ml.so.1; {HOW}"
        ));
    };
    let dir = PathBuf::from(dir);
    let mut oldest: Option<SystemTime> = None;
    for name in NAMES {
        let lib = dir.join(name);
        let modified = std::fs::metadata(&lib)
            .and_then(|m| m.modified())
            .map_err(|e| format!("{VAR}={}: {name}: {e}; {HOW}", dir.display()))?;
        oldest = Some(oldest.map_or(modified, |o| o.min(modified)));
    }
    if let (Some(installed), Some((source, changed))) = (oldest, newest_source()) {
        if changed > installed {
            return Err(format!(
                "the simulated libraries in {VAR}={} are older than {}: rebuild them; {HOW}",
                dir.display(),
                source.display()
            ));
        }
    }
    Ok(dir)
}

/// The most recently modified source of the library (crates/simgpu and the crates it is
/// built from), with its modification time.
fn newest_source() -> Option<(PathBuf, SystemTime)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut newest: Option<(PathBuf, SystemTime)> = None;
    let mut stack: Vec<PathBuf> = ["simgpu", "sim", "gpu-spec"]
        .iter()
        .flat_map(|c| [root.join(c).join("src"), root.join(c).join("Cargo.toml")])
        .collect();
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        } else if let Ok(t) = meta.modified() {
            if newest.as_ref().is_none_or(|(_, n)| t > *n) {
                newest = Some((p, t));
            }
        }
    }
    newest
}
