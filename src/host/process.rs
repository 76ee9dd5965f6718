//! One process, read from `/proc/PID`: [`stat`] (parent, comm, state, start time) and the
//! liveness built on it ([`start_time`], [`is_alive`]: a PID plus its kernel start time names
//! one process even when PIDs are reused; zombies count as exited), [`status`] (name, real
//! UID, `NSpid`), [`comm`], [`cmdline`], [`environ`], [`cgroup_paths`], [`fd_targets`]; and
//! [`pids`], every PID visible here. PIDs are `u32` as NVML reports them.

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
    /// The short command name (`comm`, at most 15 bytes).
    pub comm: String,
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

/// `/proc/PID/stat`, opened by path and parsed by procfs: one open and one read, two
/// syscalls fewer than `Process::new` + `stat()` (for scans of every process).
pub fn stat(pid: u32) -> Result<Stat> {
    let path = PathBuf::from(format!("/proc/{pid}/stat"));
    let file = std::fs::File::open(&path).map_err(|e| HostError::from_io(Some(pid), path, e))?;
    let st = <procfs::process::Stat as procfs::FromRead>::from_read(file)
        .map_err(|e| HostError::from_proc(Some(pid), e))?;
    Ok(Stat {
        pid,
        ppid: u32::try_from(st.ppid).unwrap_or(0),
        comm: st.comm,
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
    /// The command name (as `comm`).
    pub name: String,
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

fn status_of(pid: Option<u32>, p: &Process) -> Result<Status> {
    let s = p.status().map_err(|e| HostError::from_proc(pid, e))?;
    Ok(Status {
        state: s.state.chars().next().unwrap_or('?'),
        nspid: s
            .nspid
            .unwrap_or_default()
            .into_iter()
            .filter_map(|x| u32::try_from(x).ok())
            .collect(),
        name: s.name,
        ruid: s.ruid,
    })
}

/// `/proc/PID/status`.
pub fn status(pid: u32) -> Result<Status> {
    status_of(Some(pid), &open(pid)?)
}

/// `NSpid` of `pid`: its PID in each nested PID namespace, outermost (ours) first.
pub fn nspid(pid: u32) -> Result<Vec<u32>> {
    Ok(status(pid)?.nspid)
}

/// This process's `NSpid` (outermost first); empty when /proc does not say.
pub fn own_nspid() -> Vec<u32> {
    Process::myself()
        .ok()
        .and_then(|p| status_of(None, &p).ok())
        .map(|s| s.nspid)
        .unwrap_or_default()
}

/// The short command name, `/proc/PID/comm`, without its newline.
pub fn comm(pid: u32) -> Result<String> {
    let path = PathBuf::from(format!("/proc/{pid}/comm"));
    std::fs::read_to_string(&path)
        .map(|s| s.trim_end_matches('\n').to_string())
        .map_err(|e| HostError::from_io(Some(pid), path, e))
}

/// The command line, one string per argument; empty for kernel threads and zombies.
/// Not redacted: pass it through [`crate::redact`] before it is shown or stored.
pub fn cmdline(pid: u32) -> Result<Vec<String>> {
    open(pid)?
        .cmdline()
        .map_err(|e| HostError::from_proc(Some(pid), e))
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

    /// The value of `key` (invalid UTF-8 replaced), when set.
    pub fn get(&self, key: &str) -> Option<String> {
        self.0
            .get(OsStr::new(key))
            .map(|v| v.to_string_lossy().into_owned())
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
            if args.first().map(String::as_str) == Some("sleep") {
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
        assert_eq!(st.name, "sleep");
        assert_eq!(st.nspid.first(), Some(&pid), "outermost NSpid is our PID");
        assert!(!groups.unwrap().is_empty());
        // Reaped: every read says gone.
        assert!(status(pid).unwrap_err().is_gone());
        assert!(environ(pid).unwrap_err().is_gone());
        assert!(cmdline(pid).unwrap_err().is_gone());
        assert!(comm(pid).unwrap_err().is_gone());
        assert!(status(u32::MAX).unwrap_err().is_gone(), "out of range");
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
