//! Liveness of processes for the simulator: a PID plus its start time (field 22 of
//! /proc/PID/stat) identifies one process even when PIDs are reused. Zombies count as exited,
//! because the real driver returns a process's memory when it exits, not when it is reaped.

use std::fs;

/// Start time of `pid` in clock ticks since boot, or `None` when the process does not exist
/// or has exited (zombie). Without allocating: the path and the file's text are on the stack.
pub fn start_time(pid: u32) -> Option<u64> {
    let f = open_stat(pid)?;
    let mut buf = [0u8; STAT_BUF];
    let n = read_stat(&f, &mut buf).ok()?;
    stat_start(&buf[..n])
}

/// Room for one stat line: at most ~1.1 KB (52 numeric fields and a 15-byte name).
const STAT_BUF: usize = 4096;

/// `/proc/PID/stat`, opened (the path formatted on the stack).
fn open_stat(pid: u32) -> Option<fs::File> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut name = [0u8; 32];
    let len = {
        let mut w = &mut name[..];
        write!(w, "/proc/{pid}/stat").ok()?;
        32 - w.len()
    };
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&name[..len]));
    fs::File::open(path).ok()
}

/// The whole stat line of an open `/proc/PID/stat`, from its start (`pread`, so a kept
/// descriptor is read again as it is). Fails (`ESRCH`) once the process it was opened on is
/// gone (reaped), even when its PID has been reused since.
fn read_stat(f: &fs::File, buf: &mut [u8; STAT_BUF]) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Most `/proc/PID/stat` descriptors [`is_alive`] keeps open; past it they are all closed
/// and kept afresh (those of processes long gone among them).
const KEPT_STATS: usize = 256;

/// The `/proc/PID/stat` descriptors [`is_alive`] keeps, by PID.
static KEPT: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<u32, std::sync::Arc<fs::File>>>,
> = std::sync::LazyLock::new(Default::default);

fn kept() -> std::sync::MutexGuard<'static, std::collections::HashMap<u32, std::sync::Arc<fs::File>>>
{
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`start_time`] through a kept descriptor: one `pread` instead of an open, reads and a
/// close. The same answer: while the process it was opened on exists (a zombie included)
/// its PID cannot name another, so the line read is the path's; once that process is gone
/// the read fails and the path is opened again (a new process under the PID, or none).
fn kept_start_time(pid: u32) -> Option<u64> {
    let mut buf = [0u8; STAT_BUF];
    let held = kept().get(&pid).cloned();
    if let Some(f) = held {
        if let Ok(n) = read_stat(&f, &mut buf) {
            return stat_start(&buf[..n]);
        }
        kept().remove(&pid);
    }
    let f = open_stat(pid)?;
    let n = read_stat(&f, &mut buf).ok()?;
    let mut all = kept();
    if all.len() >= KEPT_STATS {
        all.clear();
    }
    all.insert(pid, std::sync::Arc::new(f));
    drop(all);
    stat_start(&buf[..n])
}

/// The start time in a `/proc/PID/stat` line, `None` for a zombie or a line that is not
/// one. Bytes, plain loops: the simulated library is built without optimisation in tests,
/// where char iterators over the line cost more than the read.
fn stat_start(stat: &[u8]) -> Option<u64> {
    // The command name is in parentheses and may contain spaces and parentheses: the fields
    // start after the last ')'.
    let mut i = stat.len();
    loop {
        if i == 0 {
            return None;
        }
        i -= 1;
        if stat[i] == b')' {
            break;
        }
    }
    // Field 3 (state) is the first after it; field 22 (starttime) the 20th.
    let mut field = 0;
    let mut j = i + 1;
    while j < stat.len() {
        if stat[j].is_ascii_whitespace() {
            j += 1;
            continue;
        }
        let start = j;
        while j < stat.len() && !stat[j].is_ascii_whitespace() {
            j += 1;
        }
        let word = &stat[start..j];
        if field == 0 && matches!(word, b"Z" | b"X" | b"x") {
            return None;
        }
        if field == 19 {
            let mut v: u64 = 0;
            for d in word {
                if !d.is_ascii_digit() {
                    return None;
                }
                v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            }
            return (!word.is_empty()).then_some(v);
        }
        field += 1;
    }
    None
}

/// Whether the process recorded as (`pid`, `start`) is still running.
///
/// Asked for every process of a box on every NVML memory query, so through a kept
/// descriptor of its stat file ([`kept_start_time`]).
pub fn is_alive(pid: u32, start: u64) -> bool {
    match kept_start_time(pid) {
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
    fn a_stat_line_is_read_after_the_last_parenthesis() {
        let line = |state: &str| {
            format!(
                "42 (a) b (c)) {state} 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 977 19 20\n"
            )
        };
        assert_eq!(stat_start(line("S").as_bytes()), Some(977));
        assert_eq!(
            stat_start(line("Z").as_bytes()),
            None,
            "a zombie has exited"
        );
        assert_eq!(stat_start(b"42 (x) S 1 2"), None, "too short");
        assert_eq!(stat_start(b"no parenthesis"), None);
        // A name that is not UTF-8 is before the fields.
        assert_eq!(
            stat_start(b"7 (caf\xe9) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 5 0"),
            Some(5)
        );
    }

    #[test]
    fn own_process_is_alive_and_pid_reuse_is_detected() {
        let me = std::process::id();
        let start = start_time(me).expect("own start time");
        assert!(is_alive(me, start));
        assert!(!is_alive(me, start + 1));
    }

    /// A kept descriptor answers as the path does: alive, then dead as a zombie, then dead
    /// once reaped (its PID free for another process).
    #[test]
    fn a_kept_descriptor_sees_the_exit_and_the_reaping() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = start_time(pid).unwrap();
        assert!(is_alive(pid, start));
        assert!(
            KEPT.lock().unwrap().contains_key(&pid),
            "kept after the first ask"
        );
        assert_eq!(kept_start_time(pid), Some(start));
        child.kill().unwrap();
        let mut zombie = false;
        for _ in 0..400 {
            if start_time(pid).is_none() {
                zombie = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(zombie);
        assert!(!is_alive(pid, start), "a zombie has exited");
        child.wait().unwrap();
        assert!(!is_alive(pid, start), "reaped");
        assert!(!is_alive(pid, 0), "no process under the PID");
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
