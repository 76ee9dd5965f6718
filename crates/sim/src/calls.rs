//! Per-client call counters of the simulated driver libraries: the simulated NVML counts every
//! call it answers, by entry point (its C name) and by client (host PID), so the cost of any
//! NVML client — vramdoc, nvitop, gpustat, an exporter — can be measured on the box
//! (`vramdoc sim status --calls`); the simulated libcuda counts its calls the same way, with
//! each failing result and every entry point or export table a client asked for and did not
//! get ([`cuda`]), so a CUDA runtime that stops can be read off the box.
//!
//! Each client process writes its own file `calls/<pid>-<start time>` (NVML) or
//! `calls-cuda/<pid>-<start time>` (CUDA) in the box: a [`HEADER`]-byte header then
//! [`SLOTS`] slots of [`SLOT`] bytes (a key, NUL-padded, and its count). The file is mapped shared and counts are atomic increments in
//! place, so a call costs no system call and the numbers survive the client being killed.
//! Readers parse the files with plain reads ([`read_all`]).

use crate::{io_err, procinfo, SimError};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub mod cuda;

/// Directory of the NVML counter files inside a box.
pub const DIR: &str = "calls";
/// Directory of the CUDA driver API counter files inside a box.
pub const CUDA_DIR: &str = "calls-cuda";
const MAGIC: &[u8; 8] = b"VDCALLS1";
/// Header bytes: magic, pid, pid in its namespace, start time, first and last call (µs since
/// the epoch), comm (16 bytes).
pub const HEADER: usize = 64;
/// Bytes of one slot: name (56 bytes, NUL-padded) and count (u64).
pub const SLOT: usize = 64;
const NAME_LEN: usize = 56;
/// Keys one client file can count (the simulated NVML exports fewer entry points; the CUDA
/// file also holds failing results and missing names).
pub const SLOTS: usize = 1024;
const FILE_LEN: usize = HEADER + SLOTS * SLOT;

/// The calls of one client, as read back from its file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClientCalls {
    /// Host PID (what NVML reports for it).
    pub pid: u32,
    /// PID in its own namespace, when it differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<u32>,
    pub start_time: u64,
    pub name: String,
    /// Whether the process still runs.
    pub alive: bool,
    /// First and last counted call, microseconds since the Unix epoch.
    pub first_call_us: u64,
    pub last_call_us: u64,
    /// Calls per entry point (C name).
    pub calls: BTreeMap<String, u64>,
}

impl ClientCalls {
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The writer side: one mapped file per client process and box.
#[derive(Debug)]
pub struct Counter {
    base: *mut u8,
    path: PathBuf,
    /// Slot of each name counted so far by this process.
    slots: BTreeMap<String, usize>,
    used: usize,
}

// SAFETY: the mapping is only touched through atomics (counts, times) or under the owner's
// lock (slot names); it lives until `Drop`.
unsafe impl Send for Counter {}

impl Counter {
    /// Create (or reopen, after a re-init) this process's NVML counter file in the box `dir`.
    /// `pid` is the host PID, `own_pid` the PID in this process's namespace.
    pub fn open(dir: &Path, pid: u32, own_pid: u32) -> Result<Counter, SimError> {
        Counter::open_in(dir, DIR, pid, own_pid)
    }

    /// The same for the CUDA driver API's counters ([`CUDA_DIR`]).
    pub fn open_cuda(dir: &Path, pid: u32, own_pid: u32) -> Result<Counter, SimError> {
        Counter::open_in(dir, CUDA_DIR, pid, own_pid)
    }

    fn open_in(dir: &Path, sub: &str, pid: u32, own_pid: u32) -> Result<Counter, SimError> {
        let calls = dir.join(sub);
        fs::create_dir_all(&calls).map_err(io_err(&calls))?;
        let start = procinfo::start_time(own_pid).unwrap_or(0);
        let path = calls.join(format!("{pid}-{start}"));
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        file.set_len(FILE_LEN as u64).map_err(io_err(&path))?;
        use std::os::fd::AsRawFd;
        // SAFETY: mapping FILE_LEN bytes of a file we just sized to FILE_LEN.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(SimError::Io {
                path,
                source: std::io::Error::last_os_error(),
            });
        }
        let base = base.cast::<u8>();
        let mut c = Counter {
            base,
            path,
            slots: BTreeMap::new(),
            used: 0,
        };
        // SAFETY: all offsets below lie inside the FILE_LEN-byte mapping.
        unsafe {
            let hdr = std::slice::from_raw_parts_mut(base, HEADER);
            if &hdr[..8] != MAGIC {
                hdr[..8].copy_from_slice(MAGIC);
                hdr[8..12].copy_from_slice(&pid.to_le_bytes());
                let ns = if own_pid == pid { 0 } else { own_pid };
                hdr[12..16].copy_from_slice(&ns.to_le_bytes());
                hdr[16..24].copy_from_slice(&start.to_le_bytes());
                let comm = procinfo::comm(own_pid);
                let n = comm.len().min(15);
                hdr[40..40 + n].copy_from_slice(&comm.as_bytes()[..n]);
            }
            // Pick up the slots an earlier session of this process named.
            for i in 0..SLOTS {
                let name = slot_name(std::slice::from_raw_parts(
                    base.add(HEADER + i * SLOT),
                    SLOT,
                ));
                if name.is_empty() {
                    break;
                }
                c.used = i + 1;
            }
        }
        Ok(c)
    }

    /// Path of this process's counter file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn atomic(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is 8-aligned inside the mapping (page-aligned base); AtomicU64 has
        // the layout of u64.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    /// Count one call of `name` (a key longer than a slot holds is cut at a character
    /// boundary).
    pub fn count(&mut self, name: &str) {
        let slot = match self.slots.get(name) {
            Some(s) => *s,
            None => match self.find_or_claim(name) {
                Some(s) => s,
                None => return,
            },
        };
        let now = now_us();
        let _ = self
            .atomic(24)
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        self.atomic(32).store(now, Ordering::Relaxed);
        self.atomic(HEADER + slot * SLOT + NAME_LEN)
            .fetch_add(1, Ordering::Relaxed);
    }

    fn find_or_claim(&mut self, name: &str) -> Option<usize> {
        let mut end = name.len().min(NAME_LEN - 1);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let bytes = &name.as_bytes()[..end];
        // SAFETY: slots lie inside the mapping; only this process writes this file.
        unsafe {
            for i in 0..self.used {
                let s = std::slice::from_raw_parts(self.base.add(HEADER + i * SLOT), SLOT);
                if slot_name(s).as_bytes() == bytes {
                    self.slots.insert(name.to_string(), i);
                    return Some(i);
                }
            }
            if self.used >= SLOTS {
                return None;
            }
            let i = self.used;
            let s = std::slice::from_raw_parts_mut(self.base.add(HEADER + i * SLOT), NAME_LEN);
            s[..bytes.len()].copy_from_slice(bytes);
            self.used += 1;
            self.slots.insert(name.to_string(), i);
            Some(i)
        }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `open`.
        unsafe { libc::munmap(self.base.cast(), FILE_LEN) };
    }
}

fn slot_name(slot: &[u8]) -> String {
    let name = &slot[..NAME_LEN];
    let end = name.iter().position(|b| *b == 0).unwrap_or(NAME_LEN);
    String::from_utf8_lossy(&name[..end]).into_owned()
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// Parse one counter file (`None`: not a counter file).
pub fn parse(bytes: &[u8]) -> Option<ClientCalls> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return None;
    }
    let pid = le_u32(&bytes[8..12]);
    let ns = le_u32(&bytes[12..16]);
    let start_time = le_u64(&bytes[16..24]);
    let comm = &bytes[40..56];
    let end = comm.iter().position(|b| *b == 0).unwrap_or(comm.len());
    let mut calls = BTreeMap::new();
    for slot in bytes[HEADER..].chunks_exact(SLOT) {
        let name = slot_name(slot);
        if name.is_empty() {
            break;
        }
        let n = le_u64(&slot[NAME_LEN..]);
        if n > 0 {
            *calls.entry(name).or_insert(0) += n;
        }
    }
    Some(ClientCalls {
        pid,
        ns_pid: (ns != 0).then_some(ns),
        start_time,
        name: String::from_utf8_lossy(&comm[..end]).into_owned(),
        alive: false,
        first_call_us: le_u64(&bytes[24..32]),
        last_call_us: le_u64(&bytes[32..40]),
        calls,
    })
}

/// Every client that made counted NVML calls on the box in `dir`, by PID.
pub fn read_all(dir: &Path) -> Result<Vec<ClientCalls>, SimError> {
    read_dir(dir, DIR)
}

/// Every client that made counted CUDA driver API calls on the box in `dir`, by PID.
pub fn read_all_cuda(dir: &Path) -> Result<Vec<cuda::CudaCalls>, SimError> {
    Ok(read_dir(dir, CUDA_DIR)?
        .into_iter()
        .map(cuda::CudaCalls::from)
        .collect())
}

fn read_dir(dir: &Path, sub: &str) -> Result<Vec<ClientCalls>, SimError> {
    let calls = dir.join(sub);
    let entries = match fs::read_dir(&calls) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(&calls)(e)),
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Ok(bytes) = fs::read(e.path()) else {
            continue;
        };
        if let Some(mut c) = parse(&bytes) {
            c.alive = procinfo::is_alive(c.pid, c.start_time)
                || c.ns_pid
                    .is_some_and(|_| procinfo::start_time(c.pid).is_some());
            out.push(c);
        }
    }
    out.sort_by_key(|c| (c.pid, c.start_time));
    Ok(out)
}

/// Remove every counter file of the box in `dir`, NVML's and CUDA's (clients still running
/// start new ones at their next call only after they re-open the library).
pub fn reset(dir: &Path) -> Result<(), SimError> {
    for sub in [DIR, CUDA_DIR] {
        let calls = dir.join(sub);
        match fs::remove_dir_all(&calls) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&calls)(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_survive_in_the_file_and_parse_back() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let mut c = Counter::open(dir.path(), me, me).unwrap();
        for _ in 0..3 {
            c.count("nvmlDeviceGetMemoryInfo_v2");
        }
        c.count("nvmlInit_v2");
        let all = read_all(dir.path()).unwrap();
        assert_eq!(all.len(), 1);
        let got = &all[0];
        assert_eq!(got.pid, me);
        assert!(got.alive);
        assert_eq!(got.calls["nvmlDeviceGetMemoryInfo_v2"], 3);
        assert_eq!(got.calls["nvmlInit_v2"], 1);
        assert_eq!(got.total(), 4);
        assert!(got.first_call_us > 0 && got.last_call_us >= got.first_call_us);
        // A second session of the same process continues the same slots.
        drop(c);
        let mut c = Counter::open(dir.path(), me, me).unwrap();
        c.count("nvmlInit_v2");
        let all = read_all(dir.path()).unwrap();
        assert_eq!(all[0].calls["nvmlInit_v2"], 2);
        reset(dir.path()).unwrap();
        assert!(read_all(dir.path()).unwrap().is_empty());
    }
}
