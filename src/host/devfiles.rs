//! Which of the driver's device files a process holds open (`/proc/PID/fd`), as `fuser -v`
//! answers for `/dev/nvidia*`: the one reader behind scan's node holders
//! (`inventory::node_holders`) and `run`'s record of the job's processes that keep memory
//! alive through a descriptor after the command ended (`record::holders`).

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

#[cfg(test)]
mod tests {
    use super::*;

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
