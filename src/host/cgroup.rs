//! What job membership reads beyond one process's files (issue 17): where the cgroup
//! hierarchies are mounted ([`cgroup_mounts`], from `/proc/self/mountinfo`) and the kernel's
//! clock in the unit of a process's start time ([`ticks_since_boot`], [`ticks_per_second`]),
//! to tell a process started during a recording from one that was there before. Nothing here
//! decides membership: `record::tree` does.

use super::HostError;
use std::path::PathBuf;

type Result<T> = std::result::Result<T, HostError>;

/// The mount points of the cgroup hierarchies (v1 controllers and v2), from
/// `/proc/self/mountinfo` (field 5 of the lines whose filesystem type is `cgroup` or
/// `cgroup2`).
pub fn cgroup_mounts() -> Result<Vec<PathBuf>> {
    let path = PathBuf::from("/proc/self/mountinfo");
    let text =
        std::fs::read_to_string(&path).map_err(|e| HostError::from_io(None, path.clone(), e))?;
    Ok(parse_cgroup_mounts(&text))
}

/// The cgroup mount points a mountinfo text names.
fn parse_cgroup_mounts(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let fstype = right.split(' ').next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            // Octal escapes (`\040` for a space) as the kernel writes them.
            let mount = left.split(' ').nth(4)?.replace("\\040", " ");
            Some(PathBuf::from(mount))
        })
        .collect()
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux), the unit of a process's
/// start time.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf with a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|h| *h > 0).unwrap_or(100)
}

/// Clock ticks since boot now (`CLOCK_BOOTTIME` in `sysconf(_SC_CLK_TCK)` units), the unit
/// and origin of a process's start time in `/proc/PID/stat`.
pub fn ticks_since_boot() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid out pointer; sysconf with a constant.
    let (rc, hz) = unsafe {
        (
            libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts),
            libc::sysconf(libc::_SC_CLK_TCK),
        )
    };
    if rc != 0 || hz <= 0 {
        return None;
    }
    let hz = hz as u64;
    Some(ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_mounts_are_read_from_mountinfo() {
        let text =
            "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory\n\
                    31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                    32 25 0:28 / /proc rw - proc proc rw\n\
                    33 25 0:29 / /mnt/a\\040b rw - cgroup2 none rw\n";
        assert_eq!(
            parse_cgroup_mounts(text),
            [
                PathBuf::from("/sys/fs/cgroup/memory"),
                PathBuf::from("/sys/fs/cgroup/unified"),
                PathBuf::from("/mnt/a b"),
            ]
        );
        assert!(cgroup_mounts().is_ok());
    }

    #[test]
    fn a_child_started_now_has_a_start_time_near_the_clock() {
        let before = ticks_since_boot().expect("CLOCK_BOOTTIME");
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let start = crate::host::start_time(c.id());
        let after = ticks_since_boot().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
        let start = start.expect("the child runs");
        assert!(
            start + 1 >= before && start <= after + 1,
            "{before} <= {start} <= {after}"
        );
    }
}
