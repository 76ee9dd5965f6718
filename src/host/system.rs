//! The machine, from `/proc` (and `/etc/passwd` for user names): [`hostname`],
//! [`kernel_release`], the `/proc` mount's `hidepid` option ([`proc_hidepid`], from our
//! mountinfo through procfs), and [`user_name`].

use super::HostError;
use procfs::process::{MountInfo, Process};
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, HostError>;

fn read_trim(path: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| HostError::from_io(None, PathBuf::from(path), e))
}

/// `/proc/sys/kernel/hostname` (the UTS namespace's name).
pub fn hostname() -> Result<String> {
    read_trim("/proc/sys/kernel/hostname")
}

/// `/proc/sys/kernel/osrelease`, as written (e.g. `6.1.0-18-amd64`,
/// `5.15.153.1-microsoft-standard-WSL2`; procfs's `Version` would keep only the numbers).
pub fn kernel_release() -> Result<String> {
    read_trim("/proc/sys/kernel/osrelease")
}

/// The `hidepid=` option of the `/proc` mount this process sees, when set to other than
/// `0`/`off` (then other users' processes, kernel threads included, are hidden).
pub fn proc_hidepid() -> Result<Option<String>> {
    let mounts = Process::myself()
        .and_then(|p| p.mountinfo())
        .map_err(|e| HostError::from_proc(None, e))?;
    Ok(hidepid_of(&mounts.0))
}

/// The `hidepid=` option of the `/proc` mount among `mounts` (per-mount or superblock
/// options), when not `0`/`off`.
pub fn hidepid_of(mounts: &[MountInfo]) -> Option<String> {
    let m = mounts
        .iter()
        .find(|m| m.fs_type == "proc" && m.mount_point == Path::new("/proc"))?;
    m.mount_options
        .get("hidepid")
        .or_else(|| m.super_options.get("hidepid"))
        .cloned()
        .flatten()
        .filter(|v| !matches!(v.as_str(), "0" | "off"))
}

/// The login name of `uid` from `/etc/passwd`, or the number (one read of the file: for
/// many processes, [`super::HostFiles::user_name`] reads it once for all).
pub fn user_name(uid: u32) -> String {
    super::HostFiles::new().user_name(uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounts(text: &str) -> Vec<MountInfo> {
        text.lines()
            .map(|l| MountInfo::from_line(l).unwrap())
            .collect()
    }

    #[test]
    fn hidepid_of_the_proc_mount() {
        let mi = "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc \
                  rw,hidepid=2\n23 1 0:5 / /dev rw - devtmpfs udev rw";
        assert_eq!(hidepid_of(&mounts(mi)).as_deref(), Some("2"));
        let inv = "22 1 0:21 / /proc rw - proc proc rw,hidepid=invisible";
        assert_eq!(hidepid_of(&mounts(inv)).as_deref(), Some("invisible"));
        assert_eq!(
            hidepid_of(&mounts("22 1 0:21 / /proc rw - proc proc rw")),
            None
        );
        let zero = "22 1 0:21 / /proc rw - proc proc rw,hidepid=0";
        assert_eq!(hidepid_of(&mounts(zero)), None);
        // Another procfs mount elsewhere does not count.
        let other = "22 1 0:21 / /mnt/proc rw - proc proc rw,hidepid=2";
        assert_eq!(hidepid_of(&mounts(other)), None);
    }

    #[test]
    fn this_machine() {
        assert!(!kernel_release().unwrap().is_empty());
        assert!(hostname().is_ok());
        assert!(proc_hidepid().is_ok());
        assert_eq!(user_name(0), "root");
        assert_eq!(user_name(4_000_000_000), "4000000000");
    }
}
