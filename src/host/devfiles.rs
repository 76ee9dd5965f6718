//! Which of the driver's device files a process holds open (`/proc/PID/fd`), as `fuser -v`
//! answers for `/dev/nvidia*`: the one reader behind scan's node holders
//! (`inventory::node_holders`) and `run`'s record of the job's processes that keep memory
//! alive through a descriptor after the command ended (`record::holders`); and how many
//! bytes a process has mapped from the UVM device file (`/proc/PID/maps`), the evidence of
//! its managed memory ([`uvm_mapped_bytes`]).

use super::process::fd_targets;
use super::HostError;
use std::path::{Path, PathBuf};

/// Device files as the descriptor links of `/proc/PID/fd` name them: canonical paths (a
/// file that cannot be resolved is kept as given).
pub fn canonical_nodes(nodes: &[PathBuf]) -> Vec<PathBuf> {
    nodes
        .iter()
        .map(|n| std::fs::canonicalize(n).unwrap_or_else(|_| n.clone()))
        .collect()
}

/// The files of `nodes` (canonical, see [`canonical_nodes`]) that `pid` holds open, sorted,
/// each once. An error when its descriptors cannot be read (gone, another user's).
pub fn held_nodes(pid: u32, nodes: &[PathBuf]) -> Result<Vec<PathBuf>, HostError> {
    let mut held: Vec<PathBuf> = fd_targets(pid)?
        .into_iter()
        .filter(|t| nodes.iter().any(|n| n == t))
        .collect();
    held.sort();
    held.dedup();
    Ok(held)
}

/// The device index a device file names: `nvidiaN` → `N` (`/dev/nvidia3`, or the simulated
/// box's `dev/nvidia3`); `None` for the control files (`nvidiactl`, `nvidia-uvm`). On the real
/// driver `N` is the file's minor number.
pub fn node_index(node: &Path) -> Option<u32> {
    node.file_name()?
        .to_str()?
        .strip_prefix("nvidia")?
        .parse()
        .ok()
}

/// The file name of the UVM device file (`/dev/nvidia-uvm`, a simulated box's
/// `dev/nvidia-uvm`).
pub const UVM_NODE: &str = "nvidia-uvm";

/// Whether `node` is a UVM device file (its file name is [`UVM_NODE`]).
pub fn is_uvm_node(node: &Path) -> bool {
    node.file_name().is_some_and(|f| f == UVM_NODE)
}

/// Most of `/proc/PID/maps` read (a process with a million mappings has ~100 MiB of it):
/// past this the sum is a lower bound.
const MAPS_LIMIT: u64 = 16 << 20;

/// Bytes `pid` has mapped from a UVM device file ([`is_uvm_node`]), summed over its
/// mappings in `/proc/PID/maps`; `None` when the file cannot be read (gone, another user's
/// process, `hidepid`). Read by hand and bounded ([`MAPS_LIMIT`]): procfs's `maps()` reads
/// the whole file and parses every field, and only the ranges and paths matter here. On a
/// real driver every CUDA context maps 2 MiB of `/dev/nvidia-uvm` and each managed
/// allocation maps its size (docs/simulator.md, "Managed memory").
pub fn uvm_mapped_bytes(pid: u32) -> Option<u64> {
    use std::io::Read;
    let mut text = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/maps"))
        .ok()?
        .take(MAPS_LIMIT)
        .read_to_end(&mut text)
        .ok()?;
    Some(uvm_bytes_in_maps(&String::from_utf8_lossy(&text)))
}

/// [`uvm_mapped_bytes`] of a `/proc/PID/maps` text: lines
/// `start-end perms offset dev inode path`; malformed lines count nothing.
fn uvm_bytes_in_maps(text: &str) -> u64 {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let path = fields.nth(4)?.trim_start();
            if !is_uvm_node(Path::new(path)) {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            end.checked_sub(start)
        })
        .fold(0u64, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvm_mappings_are_summed_from_maps() {
        let text = "\
7f0000000000-7f0000200000 rw-s 00000000 00:05 123    /dev/nvidia-uvm
7f0000200000-7f0000400000 rw-s 00000000 00:05 124    /dev/nvidiactl
7f1000000000-7f1080200000 ---p 00000000 00:05 123    /tmp/box/dev/nvidia-uvm
7f2000000000-7f2000001000 r--p 00000000 00:05 125    /dev/nvidia-uvm-tools
garbage line
7f3000000000-7f3000001000 rw-p 00000000 00:00 0 
";
        assert_eq!(uvm_bytes_in_maps(text), (2 << 20) + (2 << 30) + (2 << 20));
    }

    #[test]
    fn own_mapping_of_a_uvm_file_is_read_from_proc() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join(UVM_NODE);
        // mmap needs the file open for reading.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&node)
            .unwrap();
        let me = std::process::id();
        let before = uvm_mapped_bytes(me).unwrap();
        let len = 6 << 20;
        // SAFETY: a fresh PROT_NONE mapping of our own file, never touched, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        let during = uvm_mapped_bytes(me).unwrap();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr, len) };
        // Other tests of this binary may map or unmap uvm files at the same time; this one's
        // file is its own, so at least its bytes are there.
        assert!(during >= len as u64, "{before} -> {during}");
        assert_eq!(uvm_mapped_bytes(u32::MAX), None, "no such process");
    }

    #[test]
    fn a_child_holding_an_inherited_descriptor_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let (node, other) = (dir.path().join("nvidia0"), dir.path().join("nvidiactl"));
        std::fs::write(&node, b"").unwrap();
        std::fs::write(&other, b"").unwrap();
        let nodes = canonical_nodes(&[node.clone(), other]);
        // `sleep` holds nvidia0 (its stdin), not nvidiactl.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::fs::File::open(&node).unwrap())
            .spawn()
            .unwrap();
        let held = held_nodes(child.id(), &nodes);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(held.unwrap(), [std::fs::canonicalize(&node).unwrap()]);
        assert!(held_nodes(u32::MAX, &nodes).is_err(), "no such process");
    }

    #[test]
    fn device_files_name_their_index() {
        assert_eq!(node_index(Path::new("/dev/nvidia3")), Some(3));
        assert_eq!(node_index(Path::new("/tmp/box/dev/nvidia12")), Some(12));
        assert_eq!(node_index(Path::new("/dev/nvidiactl")), None);
        assert_eq!(node_index(Path::new("/dev/nvidia-uvm")), None);
    }
}
