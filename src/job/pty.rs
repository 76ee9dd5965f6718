//! Pseudo-terminals for the job's stdout and stderr (docs/run.md "Output"): when vramdoc's
//! own stdout (stderr) is a terminal, the job writes to the slave side of a pty of its own
//! and the pass-through process ([`super::pump`]) reads the master side, so the job sees a
//! terminal (line-buffered stdio, colours, progress bars) as it would without vramdoc.
//!
//! - Output post-processing is off on the slave (no `OPOST`, so no `ONLCR` `\n`→`\r\n`):
//!   the bytes the pump reads are the bytes the job wrote; the real terminal does its own
//!   post-processing when the pump writes them, as it would for the job.
//! - The slave is opened `O_NOCTTY` and never made a controlling terminal (no `TIOCSCTTY`,
//!   no `setsid`): the job's controlling terminal, stdin and job control stay the user's.
//! - When vramdoc's stdout and stderr are the same terminal the job gets one pty for both
//!   (as the terminal is one): its writes to either reach the terminal in the order it made
//!   them. The copy then holds both streams as stderr.
//! - The window size is copied from the real terminal at start and kept in step
//!   ([`follow_window_size`]) by vramdoc (in the terminal's foreground process group, so it
//!   gets SIGWINCH) and by the pump, which outlives a `kill -9` of vramdoc.
//!
//! A read of the master fails with `EIO` once the last slave descriptor is closed: that is
//! the stream's end (the pump treats every read error as EOF).

use rustix::pty::{grantpt, ioctl_tiocgptpeer, openpt, unlockpt, OpenptFlags};
use rustix::termios::{tcgetattr, tcgetwinsize, tcsetattr, tcsetwinsize, OptionalActions};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

/// How often the pump compares the window sizes when no SIGWINCH reaches it (it is not
/// in the terminal's foreground process group).
pub const WINSIZE_POLL: Duration = Duration::from_millis(100);

/// A pty for one of the job's streams.
pub struct Pty {
    /// The pump's side.
    pub master: OwnedFd,
    /// The job's stdout or stderr.
    pub slave: OwnedFd,
}

/// Whether `fd` is a terminal.
pub fn is_terminal(fd: BorrowedFd<'_>) -> bool {
    rustix::termios::isatty(fd)
}

/// Whether vramdoc's stdout and stderr are the same terminal (one character device).
pub fn same_terminal() -> bool {
    // SAFETY: 1 and 2 are open for the process's lifetime.
    let (o, e) = unsafe { (BorrowedFd::borrow_raw(1), BorrowedFd::borrow_raw(2)) };
    if !is_terminal(o) || !is_terminal(e) {
        return false;
    }
    match (rustix::fs::fstat(o), rustix::fs::fstat(e)) {
        (Ok(a), Ok(b)) => a.st_rdev == b.st_rdev,
        _ => false,
    }
}

/// A pty whose slave passes bytes unchanged and has the window size of `terminal`.
pub fn open(terminal: BorrowedFd<'_>) -> std::io::Result<Pty> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    // TIOCGPTPEER (Linux 4.13): the slave of this very master, without a path lookup.
    let slave = ioctl_tiocgptpeer(&master, flags)?;
    let mut t = tcgetattr(&slave)?;
    t.output_modes.remove(rustix::termios::OutputModes::OPOST);
    tcsetattr(&slave, OptionalActions::Now, &t)?;
    if let Ok(ws) = tcgetwinsize(terminal) {
        tcsetwinsize(&master, ws)?;
    }
    Ok(Pty { master, slave })
}

/// Copy `terminal`'s window size to `master` when it differs from the last one copied.
fn sync(terminal: BorrowedFd<'_>, master: BorrowedFd<'_>, last: &Mutex<Option<(u16, u16)>>) {
    let Ok(ws) = tcgetwinsize(terminal) else {
        return;
    };
    let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
    if *last != Some((ws.ws_row, ws.ws_col)) && tcsetwinsize(master, ws).is_ok() {
        *last = Some((ws.ws_row, ws.ws_col));
    }
}

/// A terminal, the master that follows its size, the last size copied (rows, columns).
type Followed = (OwnedFd, OwnedFd, Mutex<Option<(u16, u16)>>);

/// In vramdoc and in the pump: keep each master's window size in step with its terminal (the pairs are
/// (terminal, master)), at once on SIGWINCH and every [`WINSIZE_POLL`] otherwise. Runs on
/// threads of its own until the process exits.
pub fn follow_window_size(pairs: Vec<(OwnedFd, OwnedFd)>) {
    if pairs.is_empty() {
        return;
    }
    let pairs: &'static [Followed] = Box::leak(
        pairs
            .into_iter()
            .map(|(t, m)| (t, m, Mutex::new(None)))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let sync_all = move || {
        for (t, m, last) in pairs {
            sync(t.as_fd(), m.as_fd(), last);
        }
    };
    sync_all();
    if let Ok(mut signals) = signal_hook::iterator::Signals::new([libc::SIGWINCH]) {
        let _ = std::thread::Builder::new()
            .name("pump-winch".into())
            .spawn(move || {
                for _ in signals.forever() {
                    sync_all();
                }
            });
    }
    let _ = std::thread::Builder::new()
        .name("pump-winsize".into())
        .spawn(move || loop {
            std::thread::sleep(WINSIZE_POLL);
            sync_all();
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn the_slave_passes_bytes_unchanged_and_takes_the_window_size() {
        // The "real terminal" is itself a pty here.
        let term = open(std::io::stdin().as_fd()).unwrap();
        tcsetwinsize(
            &term.master,
            rustix::termios::Winsize {
                ws_row: 33,
                ws_col: 101,
                ws_xpixel: 0,
                ws_ypixel: 0,
            },
        )
        .unwrap();
        let p = open(term.slave.as_fd()).unwrap();
        let ws = tcgetwinsize(&p.slave).unwrap();
        assert_eq!((ws.ws_row, ws.ws_col), (33, 101));
        assert!(is_terminal(p.slave.as_fd()));
        let mut w = std::fs::File::from(p.slave);
        w.write_all(b"a\nb\r\n\x1b[31mc\xff\n").unwrap();
        drop(w);
        let mut r = std::fs::File::from(p.master);
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                // EIO: the last slave is closed.
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
                    break;
                }
            }
        }
        assert_eq!(got, b"a\nb\r\n\x1b[31mc\xff\n");
    }
}
