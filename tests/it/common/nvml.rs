//! The simulated `libnvidia-ml.so.1` loaded into this test process.
//!
//! The library is loaded once per process (every `dlopen` of it returns the same copy, with
//! one reference-counted init) and reads `VRAMDOC_SIM_DIR` when NVML is initialised. So every
//! test that initialises it in-process holds a [`Session`]: the lock that serialises them,
//! with the variable pointing at its box, removed again when the session ends. Drop the
//! monitor (which shuts NVML down) before the session: declare the session first.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

static LOCK: Mutex<()> = Mutex::new(());

/// An in-process NVML session on one box (or on none); see the module documentation.
pub struct Session {
    _guard: MutexGuard<'static, ()>,
}

/// Take the in-process NVML lock and point the simulated library at `dir` (or at no box).
pub fn session(dir: Option<&Path>) -> Session {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    match dir {
        Some(d) => std::env::set_var("VRAMDOC_SIM_DIR", d),
        None => std::env::remove_var("VRAMDOC_SIM_DIR"),
    }
    Session { _guard: guard }
}

impl Drop for Session {
    fn drop(&mut self) {
        std::env::remove_var("VRAMDOC_SIM_DIR");
    }
}

/// The simulated `libnvidia-ml.so.1`, to open by path.
pub fn lib_path() -> PathBuf {
    super::simgpu_lib_dir().join("libnvidia-ml.so.1")
}
