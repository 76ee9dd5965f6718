//! The build without the simulator (`cargo build --no-default-features`, the real-only
//! binary: no vramdoc-sim linked). `scripts/test` builds it once, copies its binary to
//! `target/no-sim/vramdoc` and names that file in `VRAMDOC_NO_SIM_BIN`; the tests never run
//! cargo themselves. A test that needs it fails with what to do when the variable is unset,
//! the file is missing, or it is older than vramdoc's sources, unless `VRAMDOC_ALLOW_SKIP`
//! allows `no-sim-build`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The variable naming the binary built without the simulator.
pub const VAR: &str = "VRAMDOC_NO_SIM_BIN";

const HOW: &str = "run the tests with `scripts/test` (it builds `cargo build -p vramdoc \
                   --no-default-features` and sets the variable)";

/// The binary built without the simulator; `Err` says why there is none to run.
pub fn binary() -> Result<PathBuf, String> {
    let Some(bin) = std::env::var_os(VAR).filter(|v| !v.is_empty()) else {
        return Err(format!("{VAR} is not set; {HOW}"));
    };
    let bin = PathBuf::from(bin);
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .map_err(|e| format!("{VAR}={}: {e}; {HOW}", bin.display()))?;
    if let Some((source, changed)) = newest_source() {
        if changed > built {
            return Err(format!(
                "{VAR}={} is older than {}: rebuild it; {HOW}",
                bin.display(),
                source.display()
            ));
        }
    }
    Ok(bin)
}

/// The most recently modified source of that build (vramdoc's and crates/gpu-spec's), with
/// its modification time.
fn newest_source() -> Option<(PathBuf, SystemTime)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut newest: Option<(PathBuf, SystemTime)> = None;
    let mut stack: Vec<PathBuf> = ["src", "Cargo.toml", "crates/gpu-spec"]
        .iter()
        .map(|p| root.join(p))
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
