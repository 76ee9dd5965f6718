//! Which GPU device files a process can open, read from the host (issue 25): the
//! `nvidia<minor>` files in its own view of the device directory (`/proc/PID/root/dev`: a
//! container runtime mounts only the chosen GPUs' files), and its cgroup v1 device
//! controller's allow-list (`devices.list`: Slurm's `ConstrainDevices`, Docker's device
//! rules). cgroup v2 controls devices by an eBPF program that cannot be read back: unknown.
//! Minor numbers only; `diagnose::devset` maps them to GPUs and decides what they mean.

use super::{HostError, HostFiles};
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, HostError>;

/// The character-device major of the NVIDIA GPU files (`/dev/nvidia0`…, `/dev/nvidiactl`):
/// NVIDIA's open-gpu-kernel-modules `NV_MAJOR_DEVICE_NUMBER`.
pub const NVIDIA_MAJOR: u32 = 195;

/// The minor numbers of the `nvidia<N>` files in directory `dev_dir` (an absolute path, as
/// the process sees it: `/dev`, or a simulated box's `dev/`) inside `pid`'s mount namespace
/// (`/proc/PID/root`: the same permission as reading its environment), sorted.
pub fn node_minors(pid: u32, dev_dir: &Path) -> Result<Vec<u32>> {
    let rel = dev_dir.strip_prefix("/").unwrap_or(dev_dir);
    let path = PathBuf::from(format!("/proc/{pid}/root")).join(rel);
    let rd = std::fs::read_dir(&path).map_err(|e| HostError::from_io(Some(pid), path, e))?;
    let mut out: Vec<u32> = rd
        .flatten()
        .filter_map(|e| minor_of_name(&e.file_name().to_string_lossy()))
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The directory holding the GPU device files among `nodes` (a backend's
/// `Monitor::device_nodes`: `/dev`, or a simulated box's `dev/`), canonical, as a process in
/// another mount namespace sees it at the same path. A backend lists the files it adds to
/// `/dev`'s last (a simulated box's, under the real NVML backend): those win.
pub fn dev_dir_of(nodes: &[PathBuf]) -> Option<PathBuf> {
    let node = nodes.iter().rev().find(|n| {
        n.file_name()
            .is_some_and(|f| minor_of_name(&f.to_string_lossy()).is_some() || f == "nvidiactl")
    })?;
    let dir = node.parent()?;
    Some(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()))
}

/// What `pid` can open among the GPU files, as far as it can be read: the minors of the
/// files in its view of `dev_dir` (`None`: not readable, or no directory), and those its v1
/// device cgroup allows (`None`: all of them, or not known). The machine-wide files (the
/// mount table, a cgroup's list) come through `files`, read once for all processes. Never
/// an error: a fact that cannot be read stays unknown.
pub fn access(
    pid: u32,
    dev_dir: Option<&Path>,
    files: &HostFiles,
) -> (Option<Vec<u32>>, Option<Vec<u32>>) {
    let nodes = dev_dir.and_then(|d| node_minors(pid, d).ok());
    let cgroup = match device_cgroup(pid, files) {
        Ok(DeviceCgroup::Minors(m)) => Some(m),
        _ => None,
    };
    (nodes, cgroup)
}

/// `nvidia<N>` → `N` (not `nvidiactl`, `nvidia-uvm`, `nvidia-caps`).
pub fn minor_of_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("nvidia")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What a process's cgroup v1 device controller lets it open among the GPU files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceCgroup {
    /// No restriction on the GPU files (`a *:* rwm`, `c 195:* …`, or no device controller
    /// line that restricts them).
    All,
    /// Only these minors of major 195.
    Minors(Vec<u32>),
    /// Not readable here: cgroup v2 (an eBPF program), or no v1 device hierarchy mounted.
    Unknown,
}

/// `pid`'s device cgroup among the GPU files: its `devices` controller path from
/// /proc/PID/cgroup, under the v1 `devices` hierarchy's mount point, `devices.list` (the
/// mount point and the list through `files`).
pub fn device_cgroup(pid: u32, files: &HostFiles) -> Result<DeviceCgroup> {
    let path = PathBuf::from(format!("/proc/{pid}/cgroup"));
    let text =
        std::fs::read_to_string(&path).map_err(|e| HostError::from_io(Some(pid), path, e))?;
    // A path outside this cgroup namespace (`/../…`) names no directory of our mount.
    let Some(rel) = devices_path(&text).filter(|r| !r.split('/').any(|c| c == "..")) else {
        return Ok(DeviceCgroup::Unknown);
    };
    let Some(root) = files.devices_mount() else {
        return Ok(DeviceCgroup::Unknown);
    };
    let list = root.join(rel.trim_start_matches('/')).join("devices.list");
    files
        .devices_list(&list)
        .ok_or_else(|| HostError::Malformed {
            path: list,
            reason: "not readable".into(),
        })
}

/// The path of the v1 `devices` controller in a /proc/PID/cgroup text (`4:devices:/slurm/…`).
fn devices_path(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let _id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        controllers
            .split(',')
            .any(|c| c == "devices")
            .then(|| path.to_string())
    })
}

/// The mount point of the v1 hierarchy carrying the `devices` controller, from a mountinfo
/// text (filesystem type `cgroup`, `devices` among its super options).
pub(super) fn devices_mount(text: &str) -> Option<PathBuf> {
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut r = right.split(' ');
        if r.next()? != "cgroup" {
            return None;
        }
        let _source = r.next()?;
        let opts = r.next()?;
        if !opts.split(',').any(|o| o == "devices") {
            return None;
        }
        let mount = left.split(' ').nth(4)?.replace("\\040", " ");
        Some(PathBuf::from(mount))
    })
}

/// A `devices.list` text (`TYPE MAJOR:MINOR ACCESS` per line, `*` for any) reduced to the
/// GPU files: `All` when any line allows every character device of major 195.
pub fn parse_devices_list(text: &str) -> DeviceCgroup {
    let mut minors = Vec::new();
    for l in text.lines() {
        let mut p = l.split_whitespace();
        let (Some(kind), Some(num)) = (p.next(), p.next()) else {
            continue;
        };
        if kind != "a" && kind != "c" {
            continue;
        }
        let Some((major, minor)) = num.split_once(':') else {
            continue;
        };
        let major_ok = major == "*" || major.parse::<u32>().ok() == Some(NVIDIA_MAJOR);
        if !major_ok {
            continue;
        }
        if kind == "a" || minor == "*" {
            return DeviceCgroup::All;
        }
        if let Ok(m) = minor.parse::<u32>() {
            minors.push(m);
        }
    }
    minors.sort_unstable();
    minors.dedup();
    DeviceCgroup::Minors(minors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_give_minors_and_nothing_else() {
        assert_eq!(minor_of_name("nvidia3"), Some(3));
        assert_eq!(minor_of_name("nvidia12"), Some(12));
        for n in [
            "nvidiactl",
            "nvidia-uvm",
            "nvidia-caps",
            "nvidia",
            "nvidia3x",
            "nv3",
        ] {
            assert_eq!(minor_of_name(n), None, "{n}");
        }
    }

    #[test]
    fn node_minors_reads_our_own_view() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in ["nvidia2", "nvidiactl", "nvidia0", "nvidia-uvm"] {
            std::fs::write(dir.path().join(n), b"").expect("write");
        }
        let got = node_minors(std::process::id(), dir.path()).expect("read");
        assert_eq!(got, vec![0, 2]);
        assert!(node_minors(std::process::id(), &dir.path().join("missing")).is_err());
    }

    #[test]
    fn devices_list_forms() {
        assert_eq!(parse_devices_list("a *:* rwm\n"), DeviceCgroup::All);
        assert_eq!(parse_devices_list("c 195:* rwm\n"), DeviceCgroup::All);
        // Slurm ConstrainDevices on GPU minor 1: nvidiactl (255) and the GPU's file.
        let slurm = "c 1:3 rwm\nc 195:255 rwm\nc 195:1 rwm\nc 510:0 rwm\n";
        assert_eq!(
            parse_devices_list(slurm),
            DeviceCgroup::Minors(vec![1, 255])
        );
        assert_eq!(parse_devices_list(""), DeviceCgroup::Minors(vec![]));
    }

    #[test]
    fn the_devices_controller_and_its_mount_are_found() {
        let cg = "12:memory:/slurm/uid_1/job_7\n4:devices:/slurm/uid_1/job_7/step_0\n0::/x\n";
        assert_eq!(
            devices_path(cg).as_deref(),
            Some("/slurm/uid_1/job_7/step_0")
        );
        assert_eq!(devices_path("0::/user.slice\n"), None);
        let mi = "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                  31 25 0:27 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices\n";
        assert_eq!(
            devices_mount(mi),
            Some(PathBuf::from("/sys/fs/cgroup/devices"))
        );
        assert_eq!(
            devices_mount("29 1 0:25 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"),
            None
        );
    }
}
