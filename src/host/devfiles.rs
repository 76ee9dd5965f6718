//! Which of the driver's device files a process holds open (`/proc/PID/fd`), as `fuser -v`
//! answers for `/dev/nvidia*`: the one reader behind scan's node holders
//! (`inventory::node_holders`) and `run`'s record of the job's processes that keep memory
//! alive through a descriptor after the command ended (`record::holders`); and what a
//! process maps of them (`/proc/PID/maps`, one pass: [`device_maps`]): whether it has a CUDA
//! context (the only way a process holds GPU memory through the files: descriptors alone
//! are what every NVML monitor holds) and how many bytes it maps from the UVM device file,
//! the evidence of its managed memory.

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

/// The file name of the driver's control file (`/dev/nvidiactl`, a simulated box's
/// `dev/nvidiactl`).
pub const CTL_NODE: &str = "nvidiactl";

/// Ranges of `/dev/nvidiactl` `cuInit` maps by itself, without a context: one (4 KiB),
/// observed on an H200, 580.159.04, 2026-11-28 (docs/simulator.md, "Who holds memory
/// through the device files"). A context maps many more (27 ranges, 70 MiB there), and a
/// forked child inherits them.
pub const CUINIT_CTL_RANGES: u32 = 1;

/// Most of `/proc/PID/maps` read (a process with a million mappings has ~100 MiB of it):
/// past this the counts are lower bounds.
const MAPS_LIMIT: u64 = 16 << 20;

/// What one process maps of the driver's device files, from one read of `/proc/PID/maps`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceMaps {
    /// Ranges of the control file (`nvidiactl`) mapped.
    pub ctl_ranges: u32,
    /// Bytes mapped from the UVM device file (`nvidia-uvm`): 2 MiB per context, plus each
    /// managed allocation's size (docs/simulator.md, "Managed memory").
    pub uvm_bytes: u64,
}

impl DeviceMaps {
    /// Whether these maps show a CUDA context: a mapping of `nvidia-uvm`, or more of
    /// `nvidiactl` than `cuInit` maps alone ([`CUINIT_CTL_RANGES`]). An NVML-only process
    /// (nvidia-smi, dcgm-exporter, nvitop, vramdoc) maps none of the device files; a context
    /// maps both; a child forked after the context inherits the `nvidiactl` ranges (libcuda
    /// marks its `nvidia-uvm` ranges MADV_DONTFORK), all observed on an H200, 580.159.04.
    pub fn has_context(&self) -> bool {
        self.uvm_bytes > 0 || self.ctl_ranges > CUINIT_CTL_RANGES
    }
}

/// What `pid` maps of the driver's device files ([`DeviceMaps`]), from one bounded read of
/// `/proc/PID/maps` ([`MAPS_LIMIT`]); `None` when it cannot be read (gone, another user's
/// process, `hidepid`). Read by hand: procfs's `maps()` reads the whole file and parses every
/// field, and only the ranges and paths matter here.
pub fn device_maps(pid: u32) -> Option<DeviceMaps> {
    use std::io::Read;
    let mut text = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/maps"))
        .ok()?
        .take(MAPS_LIMIT)
        .read_to_end(&mut text)
        .ok()?;
    Some(device_maps_in(&String::from_utf8_lossy(&text)))
}

/// Bytes `pid` has mapped from a UVM device file ([`is_uvm_node`]): [`device_maps`]'s
/// `uvm_bytes`; `None` when its maps cannot be read.
pub fn uvm_mapped_bytes(pid: u32) -> Option<u64> {
    device_maps(pid).map(|m| m.uvm_bytes)
}

/// [`DeviceMaps`] of a `/proc/PID/maps` text: lines `start-end perms offset dev inode path`;
/// malformed lines count nothing.
fn device_maps_in(text: &str) -> DeviceMaps {
    let mut out = DeviceMaps::default();
    for line in text.lines() {
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(path)) = (fields.next(), fields.nth(4)) else {
            continue;
        };
        let path = Path::new(path.trim_start());
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        let Some(len) = end.checked_sub(start) else {
            continue;
        };
        if is_uvm_node(path) {
            out.uvm_bytes = out.uvm_bytes.saturating_add(len);
        } else if path.file_name().is_some_and(|f| f == CTL_NODE) {
            out.ctl_ranges = out.ctl_ranges.saturating_add(1);
        }
    }
    out
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
        let m = device_maps_in(text);
        assert_eq!(m.uvm_bytes, (2 << 20) + (2 << 30) + (2 << 20));
        assert_eq!(m.ctl_ranges, 1);
        assert!(m.has_context());
    }

    /// The three shapes observed on an H200 (580.159.04): an NVML-only process maps no
    /// device file; `cuInit` alone maps one range of nvidiactl (no context); a child forked
    /// after a context inherits its nvidiactl ranges but not its nvidia-uvm ones.
    #[test]
    fn a_context_is_told_from_nvml_only_and_cuinit_only_maps() {
        let nvml_only = "\
55d0c0000000-55d0c0021000 r-xp 00000000 08:01 42     /usr/bin/nvidia-smi
7f0000000000-7f0000001000 rw-p 00000000 00:00 0 
";
        assert_eq!(device_maps_in(nvml_only), DeviceMaps::default());
        assert!(!device_maps_in(nvml_only).has_context());
        let cuinit = "\
7f0000000000-7f0000010000 rw-s 00000000 00:05 201    /dev/nvidia0
7f0000010000-7f0000020000 rw-s 00000000 00:05 201    /dev/nvidia0
7f0000020000-7f0000021000 rw-s 00000000 00:05 200    /dev/nvidiactl
";
        let m = device_maps_in(cuinit);
        assert_eq!((m.ctl_ranges, m.uvm_bytes), (1, 0));
        assert!(!m.has_context(), "cuInit alone is no context");
        let mut forked_child = String::new();
        for i in 0..27u64 {
            let a = 0x7f10_0000_0000u64 + i * 0x40_0000;
            forked_child.push_str(&format!(
                "{a:x}-{:x} rw-s 00000000 00:05 200    /dev/nvidiactl\n",
                a + 0x20_0000
            ));
        }
        let m = device_maps_in(&forked_child);
        assert_eq!((m.ctl_ranges, m.uvm_bytes), (27, 0));
        assert!(m.has_context(), "inherited nvidiactl ranges are a context");
        let context = "7f0000000000-7f0000200000 rw-s 00000000 00:05 123    /dev/nvidia-uvm\n";
        assert!(device_maps_in(context).has_context());
        assert_eq!(device_maps_in("").uvm_bytes, 0);
        assert_eq!(
            device_maps_in("zz-10 rw-s 0 0 0 /dev/nvidiactl\n").ctl_ranges,
            0
        );
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
        assert!(device_maps(me).unwrap().has_context(), "a uvm mapping");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr, len) };
        // Other tests of this binary may map or unmap uvm files at the same time; this one's
        // file is its own, so at least its bytes are there.
        assert!(during >= len as u64, "{before} -> {during}");
        assert_eq!(uvm_mapped_bytes(u32::MAX), None, "no such process");
        assert_eq!(device_maps(u32::MAX), None, "no such process");
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
