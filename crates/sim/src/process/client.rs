//! The driver files a process holds open, like the real driver's descriptors: memory of the
//! process stays allocated while any process (a forked child) still holds its token.

use crate::SimError;
use std::collections::HashMap;
use std::fs::File;

/// Token files of this process, per box `dev/` directory (see [`ClientFiles::token`]).
static TOKENS: std::sync::Mutex<Vec<(std::path::PathBuf, std::sync::Arc<File>)>> =
    std::sync::Mutex::new(Vec::new());

/// This process's token file for the box whose `dev/` is `dev`: opened and locked once.
pub(super) fn token_file(
    dev: &std::path::Path,
    token: &str,
) -> Result<std::sync::Arc<File>, SimError> {
    let mut tokens = TOKENS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, f)) = tokens.iter().find(|(d, _)| d == dev) {
        return Ok(f.clone());
    }
    let clients = dev.join(crate::CLIENTS_DIR);
    std::fs::create_dir_all(&clients).map_err(crate::io_err(&clients))?;
    let path = clients.join(token);
    let tok = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(crate::io_err(&path))?;
    // flock(2): the lock stays while any process (a forked child) holds the descriptor.
    tok.lock().map_err(|source| SimError::Io { path, source })?;
    let tok = std::sync::Arc::new(tok);
    tokens.push((dev.to_path_buf(), tok.clone()));
    Ok(tok)
}

/// Drop this process's token of a box (its last `SimProcess` released everything).
pub(super) fn forget_token(dev: &std::path::Path) {
    let mut tokens = TOKENS.lock().unwrap_or_else(|e| e.into_inner());
    tokens.retain(|(d, _)| d != dev);
}

/// The driver files a process holds open, like the real driver's descriptors: memory of the
/// process stays allocated while any process (a forked child included) holds them.
#[derive(Debug)]
pub(super) struct ClientFiles {
    /// `dev/clients/<pid>-<start>`, flock'ed: its lock outlives this process in forked
    /// children that inherited the descriptor. Shared by every `SimProcess` of this process
    /// on the box (a second lock from the same process would wait for the first forever).
    pub(super) token: std::sync::Arc<File>,
    /// `dev/nvidiactl`.
    pub(super) _ctl: File,
    /// `dev/nvidia<minor>` per physical device (by NVML index) this process made a context on.
    pub(super) nodes: HashMap<u32, File>,
    /// `dev/nvidia-uvm`, opened at the first managed allocation, as a real UVM client holds
    /// `/dev/nvidia-uvm` (docs/simulator.md, "Managed memory").
    pub(super) uvm: Option<File>,
}
