//! Liveness of processes for the simulator: a PID plus its start time (field 22 of
//! /proc/PID/stat) identifies one process even when PIDs are reused. Zombies count as exited,
//! because the real driver returns a process's memory when it exits, not when it is reaped.

use std::fs;

/// Start time of `pid` in clock ticks since boot, or `None` when the process does not exist
/// or has exited (zombie).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); field 22 (starttime) is rest[19].
    let state = *fields.first()?;
    if state == "Z" || state == "X" || state == "x" {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Whether the process recorded as (`pid`, `start`) is still running.
pub fn is_alive(pid: u32, start: u64) -> bool {
    match start_time(pid) {
        Some(s) => start == 0 || s == start,
        None => false,
    }
}

/// The short command name (`/proc/PID/comm`), or empty when unreadable. A name that is not
/// UTF-8 (`caf\xe9`) is kept with U+FFFD for the bytes that are not (the box state is JSON);
/// [`comm_bytes`] has the bytes.
pub fn comm(pid: u32) -> String {
    String::from_utf8_lossy(&comm_bytes(pid).unwrap_or_default()).into_owned()
}

/// The bytes of `/proc/PID/comm`, without the newline, UTF-8 or not.
pub fn comm_bytes(pid: u32) -> Option<Vec<u8>> {
    let mut b = fs::read(format!("/proc/{pid}/comm")).ok()?;
    if b.last() == Some(&b'\n') {
        b.pop();
    }
    Some(b)
}

/// This process's PID namespace: the inode of `/proc/self/ns/pid` (`None` where unreadable).
pub fn own_pidns() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19: a process whose name is not UTF-8 still has one (it was empty).
    #[test]
    fn a_name_that_is_not_utf8_is_kept() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
        std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
        let mut child = std::process::Command::new(&link).arg("30").spawn().unwrap();
        let pid = child.id();
        let mut got = None;
        for _ in 0..400 {
            got = comm_bytes(pid);
            if got.as_deref() == Some(b"caf\xe9") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let name = comm(pid);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(got.as_deref(), Some(&b"caf\xe9"[..]));
        assert_eq!(name, "caf\u{FFFD}");
    }

    #[test]
    fn own_process_is_alive_and_pid_reuse_is_detected() {
        let me = std::process::id();
        let start = start_time(me).expect("own start time");
        assert!(is_alive(me, start));
        assert!(!is_alive(me, start + 1));
    }

    #[test]
    fn exited_child_is_dead_even_before_reaping() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        // Wait until it has exited but do not reap yet: poll /proc.
        let mut dead = false;
        for _ in 0..200 {
            if start_time(pid).is_none() {
                dead = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(dead, "zombie child should count as exited");
        child.wait().expect("reap");
    }
}
