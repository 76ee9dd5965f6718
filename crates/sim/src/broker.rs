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
//! The broker exits when the box's `box.json` disappears (box removed).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Socket file of the broker inside a box directory.
pub const SOCKET: &str = "driver.sock";

/// Path of the broker socket of the box in `dir`.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(SOCKET)
}

/// This process's PID as the box's broker sees it (its host PID), or `None` without a broker.
pub fn host_pid(dir: &Path) -> Option<u32> {
    let path = socket_path(dir);
    if !path.exists() {
        return None;
    }
    let s = UnixStream::connect(&path).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    line.trim().parse().ok().filter(|p| *p > 0)
}

/// PID of the peer of a connected unix socket, in this process's PID namespace.
fn peer_pid(s: &UnixStream) -> Option<u32> {
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
    // A peer outside our namespace's view reads as 0.
    (rc == 0 && cred.pid > 0).then_some(cred.pid as u32)
}

/// Serve the box in `dir` until its box.json is gone. Returns an error if the socket cannot
/// be bound.
pub fn serve(dir: &Path) -> std::io::Result<()> {
    let path = socket_path(dir);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    listener.set_nonblocking(true)?;
    let marker = dir.join("box.json");
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
                if !marker.exists() {
                    let _ = std::fs::remove_file(&path);
                    return Ok(());
                }
                // Wait for a client (or half a second, to notice the box going away).
                let mut fd = libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut fd, 1, 500) };
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
