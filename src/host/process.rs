//! One process, read from `/proc/PID`: [`stat`] (parent, comm, state, start time) and the
//! liveness built on it ([`start_time`], [`is_alive`]: a PID plus its kernel start time names
//! one process even when PIDs are reused; zombies count as exited), [`status`] (name, real
//! UID, `NSpid`), [`comm`], [`cmdline`], [`environ`], [`cgroup_paths`], [`fd_targets`]; and
//! [`pids`], every PID visible here. PIDs are `u32` as NVML reports them.
//!
//! Names, arguments and environment values are the process's to choose and need not be UTF-8
//! (a binary named `caf\xe9`, `prctl(PR_SET_NAME, "\xff\xfe")`): they are kept as the bytes
//! the kernel gave, never refused or dropped for it, and shown through
//! [`crate::term::escape_bytes`] (`caf\xe9`). The name is read from `/proc/PID/comm` (raw bytes)
//! rather than from `status`, whose `Name:` line the kernel escapes.

use super::HostError;
use procfs::process::Process;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

type Result<T> = std::result::Result<T, HostError>;

fn open(pid: u32) -> Result<Process> {
    let p = i32::try_from(pid).map_err(|_| HostError::Gone { pid })?;
    Process::new(p).map_err(|e| HostError::from_proc(Some(pid), e))
}

/// Every PID listed in `/proc` (processes of this PID namespace, as far as `hidepid` lets
/// us see), in no particular order.
pub fn pids() -> Result<Vec<u32>> {
    let dir = std::fs::read_dir("/proc")
        .map_err(|e| HostError::from_io(None, PathBuf::from("/proc"), e))?;
    Ok(dir
        .flatten()
        .filter_map(|d| d.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .collect())
}

/// What `/proc/PID/stat` says that vramdoc uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub pid: u32,
    /// Parent PID (0 for the namespace's init's parent).
    pub ppid: u32,
    /// The short command name (`comm`, at most 15 bytes, as the kernel gave them).
    pub comm: Vec<u8>,
    /// `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: char,
    /// Kernel start time, clock ticks since boot: with the PID, the process's identity.
    pub start_time: u64,
}

impl Stat {
    /// Exited: a zombie (not yet reaped) or dead. The driver returns a process's memory when
    /// it exits, not when it is reaped.
    pub fn is_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// `/proc/PID/stat`, read by path and parsed by procfs: one open and one read, two
/// syscalls fewer than `Process::new` + `stat()` (for scans of every process). The name is
/// taken from the same bytes (between the first `(` and the last `)`), not from procfs,
/// which replaces bytes that are not UTF-8.
pub fn stat(pid: u32) -> Result<Stat> {
    let path = PathBuf::from(format!("/proc/{pid}/stat"));
    let bytes = std::fs::read(&path).map_err(|e| HostError::from_io(Some(pid), path.clone(), e))?;
    let st = <procfs::process::Stat as procfs::FromRead>::from_read(bytes.as_slice())
        .map_err(|e| HostError::from_proc(Some(pid), e))?;
    let comm = match (
        bytes.iter().position(|b| *b == b'('),
        bytes.iter().rposition(|b| *b == b')'),
    ) {
        (Some(open), Some(close)) if open < close => bytes[open + 1..close].to_vec(),
        _ => {
            return Err(HostError::Malformed {
                path,
                reason: "no (comm)".into(),
            })
        }
    };
    Ok(Stat {
        pid,
        ppid: u32::try_from(st.ppid).unwrap_or(0),
        comm,
        state: st.state,
        start_time: st.starttime,
    })
}

/// Start time of `pid` in clock ticks since boot, or `None` when the process does not exist
/// or has exited (zombie).
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid)
        .ok()
        .filter(|s| !s.is_exited())
        .map(|s| s.start_time)
}

/// Whether the process recorded as (`pid`, `start_time`) still runs (not a zombie, and the
/// PID not reused by another process). `start_time` 0 means unknown: any live `pid`.
pub fn is_alive(pid: u32, start_time: u64) -> bool {
    self::start_time(pid).is_some_and(|s| start_time == 0 || s == start_time)
}

/// What `/proc/PID/status` says that vramdoc uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The command name: the bytes of `/proc/PID/comm` (see [`comm`]).
    pub name: Vec<u8>,
    /// Real user ID.
    pub ruid: u32,
    /// First letter of the state (`Z` zombie, `X` dead).
    pub state: char,
    /// The PID in each PID namespace, outermost (ours) first; empty on kernels before 4.1.
    pub nspid: Vec<u32>,
}

impl Status {
    /// Exited: a zombie or dead.
    pub fn is_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// `status` of `pid` (`None`: this process). The file is read as bytes and parsed with the
/// name's bytes replaced (procfs refuses a file that is not UTF-8, which a name may make it);
/// the name itself comes from `comm`.
fn status_of(pid: Option<u32>) -> Result<Status> {
    let dir = pid.map_or_else(|| "self".to_string(), |p| p.to_string());
    let read = |file: &str| {
        let path = PathBuf::from(format!("/proc/{dir}/{file}"));
        std::fs::read(&path).map_err(|e| HostError::from_io(pid, path, e))
    };
    let bytes = read("status")?;
    let text = String::from_utf8_lossy(&bytes);
    let s = <procfs::process::Status as procfs::FromRead>::from_read(text.as_bytes())
        .map_err(|e| HostError::from_proc(pid, e))?;
    let mut name = read("comm")?;
    if name.last() == Some(&b'\n') {
        name.pop();
    }
    Ok(Status {
        state: s.state.chars().next().unwrap_or('?'),
        nspid: s
            .nspid
            .unwrap_or_default()
            .into_iter()
            .filter_map(|x| u32::try_from(x).ok())
            .collect(),
        name,
        ruid: s.ruid,
    })
}

/// `/proc/PID/status`.
pub fn status(pid: u32) -> Result<Status> {
    status_of(Some(pid))
}

/// `NSpid` of `pid`: its PID in each nested PID namespace, outermost (ours) first.
pub fn nspid(pid: u32) -> Result<Vec<u32>> {
    Ok(status(pid)?.nspid)
}

/// This process's `NSpid` (outermost first); empty when /proc does not say.
pub fn own_nspid() -> Vec<u32> {
    status_of(None).map(|s| s.nspid).ok().unwrap_or_default()
}

/// The link text of `/proc/self/ns/pid` (`pid:[4026531836]`): which PID namespace this
/// process is in. `None` where it cannot be read (no /proc, a kernel without namespaces).
pub fn own_pidns_link() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The short command name, `/proc/PID/comm`, without its newline: the bytes the process
/// chose (its binary's name, or `prctl(PR_SET_NAME)`), UTF-8 or not.
pub fn comm(pid: u32) -> Result<Vec<u8>> {
    let path = PathBuf::from(format!("/proc/{pid}/comm"));
    let mut name = std::fs::read(&path).map_err(|e| HostError::from_io(Some(pid), path, e))?;
    if name.last() == Some(&b'\n') {
        name.pop();
    }
    Ok(name)
}

/// The command line, one byte string per argument (empty arguments kept, UTF-8 or not);
/// empty for kernel threads and zombies. Not redacted: pass it through [`crate::redact`]
/// (after [`crate::term::escape_args`]) before it is shown or stored.
pub fn cmdline(pid: u32) -> Result<Vec<OsString>> {
    use std::os::unix::ffi::OsStrExt;
    let path = PathBuf::from(format!("/proc/{pid}/cmdline"));
    let bytes = std::fs::read(&path).map_err(|e| HostError::from_io(Some(pid), path, e))?;
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(&bytes);
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    Ok(bytes
        .split(|b| *b == 0)
        .map(|a| OsStr::from_bytes(a).to_os_string())
        .collect())
}

/// A process's environment (`/proc/PID/environ`, as it was at exec). Values are secrets as
/// often as not: pass what is shown through [`crate::redact::redact_env`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environ(HashMap<OsString, OsString>);

impl Environ {
    /// Parse the bytes of an environ file: NUL-separated `KEY=VALUE` entries.
    pub fn from_bytes(bytes: &[u8]) -> Environ {
        use std::os::unix::ffi::OsStrExt;
        let mut map = HashMap::new();
        for entry in bytes.split(|b| *b == 0) {
            let mut kv = entry.splitn(2, |b| *b == b'=');
            if let (Some(k), Some(v)) = (kv.next(), kv.next()) {
                map.entry(OsStr::from_bytes(k).to_os_string())
                    .or_insert_with(|| OsStr::from_bytes(v).to_os_string());
            }
        }
        Environ(map)
    }

    /// The value of `key` (bytes that are not UTF-8 escaped as `\xNN`), when set.
    pub fn get(&self, key: &str) -> Option<String> {
        use std::os::unix::ffi::OsStrExt;
        self.0
            .get(OsStr::new(key))
            .map(|v| crate::term::escape_bytes(v.as_bytes()))
    }
}

/// `/proc/PID/environ` (readable for our own user's processes, or as root). Read here rather
/// than through procfs's `environ()`, whose map keeps the last of a repeated key where
/// `getenv` (what the process itself sees) finds the first.
pub fn environ(pid: u32) -> Result<Environ> {
    let path = PathBuf::from(format!("/proc/{pid}/environ"));
    std::fs::read(&path)
        .map(|bytes| Environ::from_bytes(&bytes))
        .map_err(|e| HostError::from_io(Some(pid), path, e))
}

/// The cgroup path of `pid` in each hierarchy (`/proc/PID/cgroup`), e.g.
/// `/kubepods/burstable/pod.../...` or `/system.slice/docker-ID.scope`.
pub fn cgroup_paths(pid: u32) -> Result<Vec<String>> {
    let groups = open(pid)?
        .cgroups()
        .map_err(|e| HostError::from_proc(Some(pid), e))?;
    Ok(groups.into_iter().map(|g| g.pathname).collect())
}

/// The files `pid` has open (`/proc/PID/fd`), as the paths the descriptor links name
/// (canonical paths); sockets, pipes and anonymous inodes are left out. Descriptors closed
/// while being read are skipped. One `readlink` per descriptor, by hand: procfs's `fd()`
/// opens and stats each descriptor too (four syscalls instead of one), and a scan reads every
/// descriptor of every process.
pub fn fd_targets(pid: u32) -> Result<Vec<PathBuf>> {
    let dir = PathBuf::from(format!("/proc/{pid}/fd"));
    let fds = std::fs::read_dir(&dir).map_err(|e| HostError::from_io(Some(pid), dir, e))?;
    Ok(fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.is_absolute())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_pid_reuse_is_detected() {
        let me = std::process::id();
        let start = start_time(me).expect("own start time");
        assert!(is_alive(me, start));
        assert!(is_alive(me, 0), "unknown start: any live process");
        assert!(!is_alive(me, start + 1));
        let st = stat(me).unwrap();
        assert_eq!(st.ppid, std::os::unix::process::parent_id());
        assert_eq!(st.comm, comm(me).unwrap());
    }

    #[test]
    fn exited_child_is_dead_even_before_reaping() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let mut dead = false;
        for _ in 0..200 {
            if start_time(pid).is_none() {
                dead = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(dead, "a zombie counts as exited");
        assert!(stat(pid).unwrap().is_exited(), "still there, as a zombie");
        child.wait().unwrap();
        assert!(stat(pid).unwrap_err().is_gone(), "reaped: gone");
    }

    #[test]
    fn a_child_s_identity_environment_and_open_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("held");
        std::fs::write(&file, b"").unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("CUDA_VISIBLE_DEVICES", "1")
            .stdin(std::fs::File::open(&file).unwrap())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Wait until it has exec'd (before that /proc shows the test binary).
        let mut args = Vec::new();
        for _ in 0..400 {
            args = cmdline(pid).unwrap_or_default();
            if args.first().map(|a| a.as_os_str()) == Some(OsStr::new("sleep")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let env = environ(pid);
        let fds = fd_targets(pid);
        let st = status(pid);
        let groups = cgroup_paths(pid);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(args, ["sleep", "30"]);
        assert_eq!(
            env.unwrap().get("CUDA_VISIBLE_DEVICES").as_deref(),
            Some("1")
        );
        let held = std::fs::canonicalize(&file).unwrap();
        assert!(fds.unwrap().contains(&held));
        let st = st.unwrap();
        assert_eq!(st.name, b"sleep");
        assert_eq!(st.nspid.first(), Some(&pid), "outermost NSpid is our PID");
        assert!(!groups.unwrap().is_empty());
        // Reaped: every read says gone.
        assert!(status(pid).unwrap_err().is_gone());
        assert!(environ(pid).unwrap_err().is_gone());
        assert!(cmdline(pid).unwrap_err().is_gone());
        assert!(comm(pid).unwrap_err().is_gone());
        assert!(status(u32::MAX).unwrap_err().is_gone(), "out of range");
    }

    /// Issue 19: a name and arguments that are not UTF-8 are read as the bytes they are; an
    /// empty argument is kept.
    #[test]
    fn names_and_arguments_that_are_not_utf8_are_read_as_bytes() {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join(OsStr::from_bytes(b"caf\xe9"));
        std::os::unix::fs::symlink("/bin/sh", &link).unwrap();
        let mut child = std::process::Command::new(&link)
            // Not the last command: the shell forks `sleep` and stays itself (with `-c "sleep
            // 30"` dash execs sleep, and a read during that exec sees an empty cmdline).
            .args(["-c", "sleep 30; exit 0"])
            .arg(OsStr::from_bytes(b"x\xffy"))
            .arg("")
            .arg("z")
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut name = Vec::new();
        for _ in 0..400 {
            name = comm(pid).unwrap_or_default();
            // The kernel names the process before it sets up the new arguments (exec's
            // `begin_new_exec`, then the ELF tables): wait for both.
            if name == b"caf\xe9" && cmdline(pid).is_ok_and(|a| !a.is_empty()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (st, stat, args) = (status(pid), stat(pid), cmdline(pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(name, b"caf\xe9");
        assert_eq!(st.unwrap().name, b"caf\xe9", "status of a non-UTF-8 name");
        assert_eq!(stat.unwrap().comm, b"caf\xe9");
        let args: Vec<Vec<u8>> = args.unwrap().into_iter().map(OsString::into_vec).collect();
        let want: Vec<Vec<u8>> = vec![
            link.as_os_str().as_bytes().to_vec(),
            b"-c".to_vec(),
            b"sleep 30; exit 0".to_vec(),
            b"x\xffy".to_vec(),
            Vec::new(),
            b"z".to_vec(),
        ];
        assert_eq!(args, want);
    }

    #[test]
    fn environ_bytes_keep_the_first_of_a_repeated_key() {
        let e = Environ::from_bytes(b"A=1\0B=x=y\0A=2\0junk\0");
        assert_eq!(e.get("A").as_deref(), Some("1"));
        assert_eq!(e.get("B").as_deref(), Some("x=y"));
        assert_eq!(e.get("junk"), None);
    }

    #[test]
    fn own_nspid_and_pids() {
        let me = std::process::id();
        assert_eq!(own_nspid().first(), Some(&me));
        assert!(pids().unwrap().contains(&me));
    }
}
