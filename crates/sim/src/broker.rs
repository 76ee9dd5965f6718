//! The box's "kernel driver" side for PID namespaces. The real driver knows every process by
//! its host PID, whatever PID namespace it runs in, so NVML reports host PIDs even inside
//! containers. A process in a child PID namespace cannot learn its host PID by itself; the
//! kernel translates it for a listener in the host namespace. So `vramdoc sim init` starts a
//! small broker (`vramdoc sim driverd`, hidden) in the namespace it runs in, listening on
//! `driver.sock` in the box directory; a client connects and the broker answers with the
//! client's PID as `SO_PEERCRED` reports it — translated by the kernel into the broker's
//! namespace. No broker (boxes made in-process or by `--sim`, or a dead one): a process uses
//! its own PID, which is right whenever it shares the box creator's namespace.
//!
//! The broker exits when the box is removed (`box.json` or `lock` gone). It writes its PID to
//! `driver.pid` in the box.
//!
//! A broker that is stopped (SIGSTOP, a debugger) or wedged must not stall or hang the box's
//! clients: [`host_pid`] connects without blocking (a full backlog answers at once) and waits
//! at most [`ANSWER_TIMEOUT`] for the answer; without one the client uses its own PID, as
//! with no broker at all, and says so once on its stderr ([`BrokerError`]: which broker, what
//! it did not do, what to check).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Socket file of the broker inside a box directory.
pub const SOCKET: &str = "driver.sock";
/// File holding the broker's PID inside a box directory.
pub const PID_FILE: &str = "driver.pid";
/// Longest a client waits for the broker's answer (it answers in microseconds when running).
pub const ANSWER_TIMEOUT: Duration = Duration::from_millis(500);
/// Connections the kernel queues for the broker before refusing new ones.
const BACKLOG: i32 = 128;

/// Path of the broker socket of the box in `dir`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(SOCKET)
}

/// A broker that is there (its socket exists) but gave no PID.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Its backlog is full: it has not accepted a connection for a while.
    #[error("the box's driver broker (pid {}, {}) accepts no connection: its backlog is full (stopped or wedged? `kill -CONT {0}`)", fmt_pid(*.broker), .socket.display())]
    BacklogFull {
        socket: PathBuf,
        broker: Option<u32>,
    },
    /// It accepted the connection (or the kernel queued it) but wrote nothing in time.
    #[error("the box's driver broker (pid {}, {}) did not answer within {} ms (stopped or wedged? `kill -CONT {0}`)", fmt_pid(*.broker), .socket.display(), ANSWER_TIMEOUT.as_millis())]
    NoAnswer {
        socket: PathBuf,
        broker: Option<u32>,
    },
    /// Connecting or reading failed otherwise (a stale socket of a dead broker).
    #[error("the box's driver broker ({}): {source}", .socket.display())]
    Io {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn fmt_pid(pid: Option<u32>) -> String {
    pid.map_or_else(|| "?".to_string(), |p| p.to_string())
}

/// This process's PID as the box's broker sees it (its host PID): `Ok(None)` without a
/// broker, an error when there is one that gives no answer within [`ANSWER_TIMEOUT`].
pub fn query_host_pid(dir: &Path) -> Result<Option<u32>, BrokerError> {
    let socket = socket_path(dir);
    if !socket.exists() {
        return Ok(None);
    }
    let broker = || {
        std::fs::read_to_string(dir.join(PID_FILE))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    let io = |socket: &Path, source: std::io::Error| BrokerError::Io {
        socket: socket.to_path_buf(),
        source,
    };
    let s = match connect_nonblocking(&socket) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            return Err(BrokerError::BacklogFull {
                socket,
                broker: broker(),
            })
        }
        Err(e) => return Err(io(&socket, e)),
    };
    s.set_nonblocking(false).map_err(|e| io(&socket, e))?;
    s.set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(|e| io(&socket, e))?;
    let mut line = String::new();
    match BufReader::new(s.take(32)).read_line(&mut line) {
        Ok(_) => Ok(line.trim().parse().ok().filter(|p| *p > 0)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(BrokerError::NoAnswer {
                socket,
                broker: broker(),
            })
        }
        Err(e) => Err(io(&socket, e)),
    }
}

/// [`query_host_pid`] for a client: `None` without a broker or without an answer, in which
/// case the client uses its own PID. A broker that is there but does not answer is reported
/// once per process on stderr (a stale socket of a dead broker is not: it is the same as
/// none).
pub fn host_pid(dir: &Path) -> Option<u32> {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    match query_host_pid(dir) {
        Ok(pid) => pid,
        Err(BrokerError::Io { .. }) => None,
        Err(e) => {
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                let _ = writeln!(
                    std::io::stderr(),
                    "vramdoc sim: warning: {e}; this process uses its own PID"
                );
            }
            None
        }
    }
}

/// Connect to a unix stream socket without blocking: a listener whose backlog is full (a
/// stopped broker) fails at once with `WouldBlock` instead of blocking in `connect(2)`.
pub fn connect_nonblocking(path: &Path) -> std::io::Result<UnixStream> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: plain POD initialisation.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, b) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *b as libc::c_char;
    }
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket we own; the stream closes it on every path below.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un of at least `len` bytes.
    let rc = unsafe {
        libc::connect(
            stream.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stream)
}

/// PID of the peer of a connected unix socket, in this process's PID namespace.
fn peer_pid(s: &UnixStream) -> Option<u32> {
    peer_cred(s).map(|c| c.pid as u32).filter(|p| *p > 0)
}

/// Credentials of the peer of a connected unix socket (`SO_PEERCRED`).
pub fn peer_cred(s: &UnixStream) -> Option<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of `len` bytes on a valid socket.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    // A peer outside our namespace's view reads as PID 0.
    (rc == 0).then_some(cred)
}

/// Serve the box in `dir` until it is removed ([`crate::box_present`]). Returns an error if the socket cannot
/// be bound.
pub fn serve(dir: &Path) -> std::io::Result<()> {
    let path = socket_path(dir);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    // An explicit, documented backlog (listen(2) again only changes it).
    // SAFETY: listen(2) on the socket we just bound.
    unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
    listener.set_nonblocking(true)?;
    let _ = std::fs::write(dir.join(PID_FILE), format!("{}\n", std::process::id()));
    loop {
        match listener.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                if let Some(pid) = peer_pid(&s) {
                    let _ = writeln!(s, "{pid}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if crate::daemon_idle(dir, &listener, &path, PID_FILE) {
                    return Ok(());
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A broker that never answers (stopped): clients give up within the timeout, and at once
    /// when its backlog is full, instead of blocking in connect(2) forever.
    #[test]
    fn a_stopped_broker_neither_stalls_nor_hangs_clients() {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(socket_path(dir.path())).unwrap();
        // SAFETY: listen(2) on our bound socket, shrinking its backlog.
        unsafe { libc::listen(listener.as_raw_fd(), 2) };
        let t = Instant::now();
        let e = query_host_pid(dir.path()).unwrap_err();
        assert!(matches!(e, BrokerError::NoAnswer { .. }), "{e}");
        assert!(
            e.to_string().contains("did not answer within 500 ms"),
            "{e}"
        );
        assert_eq!(host_pid(dir.path()), None);
        let waited = t.elapsed();
        assert!(waited >= ANSWER_TIMEOUT * 2, "{waited:?}");
        assert!(waited < ANSWER_TIMEOUT * 6, "{waited:?}");
        // Fill the backlog.
        let mut held = Vec::new();
        loop {
            match connect_nonblocking(&socket_path(dir.path())) {
                Ok(s) => held.push(s),
                Err(e) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
                    break;
                }
            }
            assert!(held.len() < 64, "backlog never filled");
        }
        let t = Instant::now();
        let e = query_host_pid(dir.path()).unwrap_err();
        assert!(matches!(e, BrokerError::BacklogFull { .. }), "{e}");
        assert!(e.to_string().contains("backlog is full"), "{e}");
        assert_eq!(host_pid(dir.path()), None);
        assert!(t.elapsed() < ANSWER_TIMEOUT, "{:?}", t.elapsed());
        // A socket nobody listens on any more (a dead broker): the same as no broker.
        drop(held);
        drop(listener);
        assert!(matches!(
            query_host_pid(dir.path()),
            Err(BrokerError::Io { .. })
        ));
    }

    #[test]
    fn a_running_broker_answers_the_peer_pid() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("box.json"), "{}").unwrap();
        std::fs::write(dir.path().join("lock"), "").unwrap();
        let d = dir.path().to_path_buf();
        let server = std::thread::spawn(move || serve(&d));
        let pid = (0..200).find_map(|_| {
            std::thread::sleep(Duration::from_millis(10));
            host_pid(dir.path())
        });
        assert_eq!(pid, Some(std::process::id()));
        let written = std::fs::read_to_string(dir.path().join(PID_FILE)).unwrap();
        assert_eq!(written.trim(), std::process::id().to_string());
        std::fs::remove_file(dir.path().join("box.json")).unwrap();
        server.join().unwrap().unwrap();
        assert!(!socket_path(dir.path()).exists());
    }
}
