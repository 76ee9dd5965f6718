//! Process helpers shared by `run`'s job supervisor and replay's workers: a child that dies
//! with vramdoc, becoming a child subreaper, reaping, stopping a child with a grace period,
//! how a child ended, and (for `run`, as GNU `timeout`) a process group of the job's own
//! ([`own_group`]) that forwarded signals reach as a whole ([`send_group`]).

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    /// From a `waitpid` status.
    pub fn from_raw(raw: libc::c_int) -> Exit {
        Exit::from(ExitStatus::from_raw(raw))
    }

    /// The status a shell would give: the code, or 128 + N for signal N.
    pub fn status(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }
}

impl From<ExitStatus> for Exit {
    fn from(s: ExitStatus) -> Exit {
        match (s.signal(), s.code()) {
            (Some(sig), _) => Exit::Signal(sig),
            (None, Some(c)) => Exit::Code(c),
            (None, None) => Exit::Code(0),
        }
    }
}

/// `PR_SET_PDEATHSIG`: the kernel sends SIGKILL to the child when the thread that spawned it
/// exits. If the parent is already gone by the time the child runs (the race between fork
/// and prctl), the child exits at once.
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and _exit are async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(137);
            }
            Ok(())
        });
    }
}

/// Make this process a child subreaper: orphaned descendants are re-parented to it (so the
/// job's grandchildren stay in its tree, and are reaped by [`reap`]).
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Children of vramdoc's own that it waits for itself (`run`'s output pump): PID, and how
/// it ended once [`reap`] reaped it.
static HELPERS: Mutex<Vec<(u32, Option<Exit>)>> = Mutex::new(Vec::new());

fn helpers() -> std::sync::MutexGuard<'static, Vec<(u32, Option<Exit>)>> {
    HELPERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `pid`, a child just started, is a helper of vramdoc's: [`reap`] keeps how it ended and
/// [`wait_helper`] reaps it.
pub fn adopt_helper(pid: u32) {
    helpers().push((pid, None));
}

/// Reap the helper `pid` ([`adopt_helper`]): with `block`, wait until it has ended (call
/// it only when it is ending); else only if it has. Whether it is reaped (or not vramdoc's
/// child at all).
pub fn wait_helper(pid: u32, block: bool) -> bool {
    let mut h = helpers();
    let Some(i) = h.iter().position(|(p, _)| *p == pid) else {
        return true;
    };
    if h[i].1.is_none() {
        let mut status: libc::c_int = 0;
        let flags = if block { 0 } else { libc::WNOHANG };
        loop {
            // SAFETY: waitpid of our own child with a valid out pointer.
            let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, flags) };
            if r == 0 {
                return false;
            }
            if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Reaped now, or ECHILD: reaped by a `reap` that found no entry yet.
            break;
        }
    }
    h.remove(i);
    true
}

/// Reap every exited child (as a subreaper, orphaned descendants too); how `child` ended
/// when it is among them. A helper's end is kept for [`wait_helper`].
pub fn reap(child: u32) -> Option<Exit> {
    reap_each(child, |_| {})
}

/// [`reap`], calling `ending(pid)` for each exited child before it is reaped, while it is
/// still a zombie whose `/proc` entry keeps its last name.
pub fn reap_each(child: u32, mut ending: impl FnMut(u32)) -> Option<Exit> {
    let mut found = None;
    loop {
        // SAFETY: an all-zero siginfo_t is valid; waitid with WNOWAIT only looks.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by waitid for an exited child (0 when none has exited).
        let pid = unsafe { info.si_pid() };
        if r != 0 || pid <= 0 {
            return found;
        }
        ending(pid as u32);
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid of the child waitid named, with a valid out pointer.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != pid {
            return found;
        }
        if pid as u32 == child {
            found = Some(Exit::from_raw(status));
        }
        if let Some(h) = helpers().iter_mut().find(|(p, _)| *p == pid as u32) {
            h.1 = Some(Exit::from_raw(status));
        }
    }
}

/// Send `signal` to `pid` (a child not reaped yet).
pub fn send(pid: u32, signal: i32) {
    // SAFETY: kill with a PID we started and have not reaped.
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

/// Send `signal` to every process of the group `pgid`.
pub fn send_group(pgid: u32, signal: i32) {
    // SAFETY: kill with a negative PID signals the process group; pgid > 1 is checked so a
    // 0 or 1 never turns into "every process".
    if pgid > 1 {
        unsafe { libc::kill(-(pgid as libc::pid_t), signal) };
    }
}

/// The process group of `pid` (`None` when it is gone).
pub fn group_of(pid: u32) -> Option<u32> {
    // SAFETY: getpgid with an integer argument.
    let g = unsafe { libc::getpgid(pid as libc::pid_t) };
    u32::try_from(g).ok().filter(|g| *g > 0)
}

/// vramdoc in a process group of its own, which the command inherits, as GNU `timeout`
/// does: a signal forwarded to the group reaches every process of the job still in it (a
/// shell's children included), and never the caller's group (a script or a test harness
/// that started vramdoc). From an interactive shell vramdoc leads its group already and
/// nothing changes. When vramdoc shared the terminal's foreground group, the new group is
/// made the foreground one (so the job still reads the terminal and gets its Ctrl-C), and
/// the old one is given the terminal back on drop.
pub struct OwnGroup {
    pub pgid: u32,
    /// The terminal descriptor and the group that had it in the foreground.
    restore: Option<(libc::c_int, libc::pid_t)>,
}

/// Put vramdoc in a process group of its own (see [`OwnGroup`]).
pub fn own_group() -> OwnGroup {
    // SAFETY: getpid/getpgrp/setpgid/isatty/tcgetpgrp/tcsetpgrp/signal with integer
    // arguments; SIGTTOU is ignored only around tcsetpgrp (a background group setting the
    // foreground would otherwise be stopped), then restored.
    unsafe {
        let me = libc::getpid();
        let old = libc::getpgrp();
        if old == me {
            return OwnGroup {
                pgid: me as u32,
                restore: None,
            };
        }
        let tty = [0, 2, 1]
            .into_iter()
            .find(|fd| libc::isatty(*fd) == 1 && libc::tcgetpgrp(*fd) == old);
        if libc::setpgid(0, 0) != 0 {
            return OwnGroup {
                pgid: libc::getpgrp() as u32,
                restore: None,
            };
        }
        let restore = tty.map(|fd| {
            let prev = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(fd, me);
            libc::signal(libc::SIGTTOU, prev);
            (fd, old)
        });
        OwnGroup {
            pgid: me as u32,
            restore,
        }
    }
}

impl Drop for OwnGroup {
    fn drop(&mut self) {
        if let Some((fd, old)) = self.restore.take() {
            // SAFETY: as in `own_group`.
            unsafe {
                let prev = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(fd, old);
                libc::signal(libc::SIGTTOU, prev);
            }
        }
    }
}

/// Give `child` `grace` to exit, then kill it; reap it.
pub fn stop(child: &mut Child, grace: Duration) {
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_decode_codes_and_signals() {
        let mut c = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        assert_eq!(Exit::from(c.wait().unwrap()), Exit::Code(3));
        let mut c = Command::new("sh")
            .args(["-c", "kill -9 $$"])
            .spawn()
            .unwrap();
        let e = Exit::from(c.wait().unwrap());
        assert_eq!((e, e.status()), (Exit::Signal(9), 137));
    }
}
