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
    pub(super) ctl: File,
    /// `dev/nvidia<minor>` per physical device (by NVML index) this process made a context on.
    pub(super) nodes: HashMap<u32, File>,
    /// `dev/nvidia-uvm`, opened with the other driver files, as every real CUDA process holds
    /// `/dev/nvidia-uvm` from `cuInit` (docs/simulator.md, "Managed memory").
    pub(super) uvm: File,
    /// The 2 MiB mapping of `dev/nvidia-uvm` a real context makes ([`CONTEXT_UVM_MAPPING`]),
    /// and its mappings of `dev/nvidiactl` ([`CONTEXT_CTL_RANGES`]), while the process has a
    /// context.
    pub(super) context_map: Option<(UvmMapping, Vec<UvmMapping>)>,
}

/// How many ranges of `/dev/nvidiactl` a real context maps, and their size in all: 27,
/// 70 MiB (observed on an H200, 580.159.04, 2026-11-28; `cuInit` alone maps one 4 KiB range,
/// an NVML-only process none). Not marked MADV_DONTFORK: a forked child inherits them, which
/// is how its maps show the context it keeps alive.
pub const CONTEXT_CTL_RANGES: u64 = 27;
/// See [`CONTEXT_CTL_RANGES`].
pub const CONTEXT_CTL_BYTES: u64 = 70 * vramdoc_gpu_spec::units::MIB;

/// What a real CUDA context maps of `/dev/nvidia-uvm` by itself: one 2 MiB mapping (observed
/// on an H200, 580.159.04, 2026-11-28; docs/simulator.md, "Managed memory").
pub const CONTEXT_UVM_MAPPING: u64 = 2 * vramdoc_gpu_spec::units::MIB;

/// A mapping of one of the box's device files in this process's address space, as the real
/// driver maps `/dev/nvidia-uvm` for a context and for each managed allocation (of its size)
/// and `/dev/nvidiactl` for a context, so `/proc/PID/maps` shows what a real process's does.
/// `PROT_NONE`, private, never touched: address space only (mmap does not check the file's
/// length). `nvidia-uvm` ranges are MADV_DONTFORK, as libcuda marks them (VmFlags `dc`,
/// observed on the H200 above): a forked child does not inherit them. Unmapped when dropped
/// by the process that made it (a forked child's copy of this value unmaps nothing).
#[derive(Debug)]
pub(super) struct UvmMapping {
    addr: usize,
    len: usize,
    /// The process that mapped it.
    owner: u32,
}

impl UvmMapping {
    /// Map `len` bytes of `uvm` (the box's `dev/nvidia-uvm`, at `path`), not inherited by a
    /// forked child.
    pub(super) fn new(uvm: &File, path: &std::path::Path, len: u64) -> Result<Self, SimError> {
        UvmMapping::map(uvm, path, len, false)
    }

    /// Map `len` bytes of `file` (at `path`); `inherited`: kept by a forked child (else
    /// MADV_DONTFORK).
    pub(super) fn map(
        file: &File,
        path: &std::path::Path,
        len: u64,
        inherited: bool,
    ) -> Result<Self, SimError> {
        let uvm = file;
        use std::os::fd::AsRawFd;
        let io = |source| SimError::Io {
            path: path.to_path_buf(),
            source,
        };
        let len = usize::try_from(len.max(1))
            .map_err(|_| io(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
        // SAFETY: a new private PROT_NONE mapping chosen by the kernel: it aliases nothing and
        // is never read or written; `uvm` is an open file.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE,
                uvm.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io(std::io::Error::last_os_error()));
        }
        let map = UvmMapping {
            addr: addr as usize,
            len,
            owner: std::process::id(),
        };
        // SAFETY: advice on the mapping just made, which this value owns.
        if !inherited && unsafe { libc::madvise(addr, len, libc::MADV_DONTFORK) } != 0 {
            return Err(io(std::io::Error::last_os_error()));
        }
        Ok(map)
    }

    /// `count` mappings of `file` (at `path`), `total` bytes in all (page-rounded), kept by a
    /// forked child: a context's mappings of `dev/nvidiactl`.
    pub(super) fn ranges(
        file: &File,
        path: &std::path::Path,
        count: u64,
        total: u64,
    ) -> Result<Vec<Self>, SimError> {
        let each = (total / count.max(1)).next_multiple_of(4096);
        (0..count)
            .map(|_| UvmMapping::map(file, path, each, true))
            .collect()
    }
}

impl Drop for UvmMapping {
    fn drop(&mut self) {
        if self.owner != std::process::id() {
            // A forked child's copy: the range is not its own (MADV_DONTFORK) or is the
            // parent's inherited copy, left to the child's exit.
            return;
        }
        // SAFETY: the mapping this value made in this process, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}
