//! The machine-wide files that reading every process consults: `/etc/passwd` (user names),
//! `/proc/self/mountinfo` (where the v1 `devices` hierarchy is mounted) and each device
//! cgroup's `devices.list`. A [`HostFiles`] reads each at most once, so one scan of a box with
//! 32 GPU processes opens each once, not 32 times (issue 34). Make one per scan (or per
//! recording round): what it holds is as fresh as the reading that made it.

use super::devices::{self, DeviceCgroup};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// `/etc/passwd`.
const PASSWD: &str = "/etc/passwd";
/// This process's mount table.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// The files every process's reading shares, each read on first use.
#[derive(Debug, Default)]
pub struct HostFiles {
    /// Login names by uid (`None`: `/etc/passwd` not readable).
    users: OnceLock<Option<HashMap<u32, String>>>,
    /// The v1 `devices` hierarchy's mount point (`None`: none, or mountinfo not readable).
    devices_mount: OnceLock<Option<PathBuf>>,
    /// Each `devices.list` read, by path (`None`: not readable).
    lists: Mutex<HashMap<PathBuf, Option<DeviceCgroup>>>,
}

impl HostFiles {
    pub fn new() -> HostFiles {
        HostFiles::default()
    }

    /// The login name of `uid` from `/etc/passwd` (its first line for that uid, as
    /// `getpwuid` answers), or the number.
    pub fn user_name(&self, uid: u32) -> String {
        self.users
            .get_or_init(|| std::fs::read_to_string(PASSWD).ok().map(|t| users_of(&t)))
            .as_ref()
            .and_then(|u| u.get(&uid).cloned())
            .unwrap_or_else(|| uid.to_string())
    }

    /// The mount point of the v1 hierarchy carrying the `devices` controller.
    pub fn devices_mount(&self) -> Option<&Path> {
        self.devices_mount
            .get_or_init(|| {
                std::fs::read_to_string(MOUNTINFO)
                    .ok()
                    .and_then(|t| devices::devices_mount(&t))
            })
            .as_deref()
    }

    /// The allow-list at `path` (a cgroup directory's `devices.list`), read once.
    pub fn devices_list(&self, path: &Path) -> Option<DeviceCgroup> {
        let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        lists
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                std::fs::read_to_string(path)
                    .ok()
                    .map(|t| devices::parse_devices_list(&t))
            })
            .clone()
    }
}

/// Login names by uid from a passwd text; the first line of a uid wins.
pub fn users_of(text: &str) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    for l in text.lines() {
        let mut it = l.split(':');
        let (Some(name), Some(_pw), Some(id)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if let Ok(id) = id.parse::<u32>() {
            out.entry(id).or_insert_with(|| name.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_of_a_uid_names_it() {
        let u = users_of("root:x:0:0::/root:/bin/sh\nbad line\ntoor:x:0:0::/:/bin/sh\nal:x:1000:1000::/home/al:/bin/sh\n");
        assert_eq!(u.get(&0).map(String::as_str), Some("root"));
        assert_eq!(u.get(&1000).map(String::as_str), Some("al"));
        assert_eq!(u.len(), 2);
    }

    #[test]
    fn this_machine_once() {
        let f = HostFiles::new();
        assert_eq!(f.user_name(0), "root");
        assert_eq!(f.user_name(4_000_000_000), "4000000000");
        // Read once: a second answer comes from what the first read.
        assert!(f.users.get().is_some());
        assert_eq!(f.user_name(0), "root");
    }
}
