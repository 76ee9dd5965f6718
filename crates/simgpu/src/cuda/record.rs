//! What this process asked of the simulated libcuda, written to its counter file in the box
//! (`vramdoc_sim::calls::cuda`): every call of an entry point, every failing result, every
//! name `cuGetProcAddress` could not serve and every export table or table slot without
//! behaviour — so a CUDA runtime, cuBLAS or PyTorch that stops on the box shows where
//! (`vramdoc sim status --calls`), never as a silent NULL.
//!
//! The file is opened at the first recorded call of a process whose `VRAMDOC_SIM_DIR` names
//! a box; without one nothing is recorded. Counting is an atomic add in a shared mapping.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use vramdoc_sim::calls::{cuda as keys, Counter};

static COUNTER: Mutex<Option<(PathBuf, u32, Counter)>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<(PathBuf, u32, Counter)>> {
    COUNTER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Count `key` in this process's file of the box `VRAMDOC_SIM_DIR` names. A forked child
/// (another PID) opens its own file.
fn count(key: &str) {
    let Some(dir) = std::env::var_os(vramdoc_sim::SIM_DIR_ENV).filter(|d| !d.is_empty()) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let own = std::process::id();
    let mut c = lock();
    if c.as_ref()
        .is_none_or(|(d, pid, _)| *d != dir || *pid != own)
    {
        if !dir.join("box.json").exists() {
            return;
        }
        let host = vramdoc_sim::broker::host_pid(&dir).unwrap_or(own);
        *c = Counter::open_cuda(&dir, host, own)
            .ok()
            .map(|k| (dir, own, k));
    }
    if let Some((_, _, k)) = c.as_mut() {
        k.count(key);
    }
}

/// Whether `VRAMDOC_SIM_CUDA_TRACE=1` asks for every call on standard error, in order.
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VRAMDOC_SIM_CUDA_TRACE").is_some_and(|v| v == "1"))
}

/// A line for the trace, when it is on.
pub(super) fn trace(line: impl FnOnce() -> String) {
    if tracing() {
        eprintln!("simgpu: {}", line());
    }
}

/// One call of the entry point `name` and its result.
pub(super) fn call(name: &str, result: u32) {
    if tracing() {
        eprintln!("simgpu: {name} -> {result}");
    }
    count(&keys::call_key(name));
    if result != 0 {
        count(&keys::failure_key(name, result));
    }
}

/// `cuGetProcAddress` was asked for `name` at `version` and had nothing to give.
pub(super) fn missing(name: &str, version: i32) {
    if tracing() {
        eprintln!("simgpu: cuGetProcAddress({name}, {version}) -> not served");
    }
    count(&keys::missing_key(name, version));
}

/// `cuGetExportTable` was asked for a table it does not serve.
pub(super) fn missing_table(uuid: &[u8; 16]) {
    count(&keys::missing_table_key(uuid));
}

/// A slot of a served export table without behaviour was called.
pub(super) fn unknown_slot(uuid: &[u8; 16], slot: usize) {
    count(&keys::unknown_slot_key(uuid, slot));
}
