//! Safe wrappers over Linux's `tee(2)`, `splice(2)` and `poll(2)` for the pass-through
//! process's zero-copy path ([`super::pump`]): the job's bytes are duplicated from its pipe
//! into the terminal's pipe and then moved into the copy for vramdoc, without the pump
//! reading or writing any of them itself.
//!
//! The kernel facts this relies on (Linux man-pages 6.03, `tee(2)` and `splice(2)`,
//! <https://man7.org/linux/man-pages/man2/tee.2.html>,
//! <https://man7.org/linux/man-pages/man2/splice.2.html>):
//! - `tee` needs both descriptors to be pipes (else `EINVAL`, as for the same pipe twice);
//!   it duplicates up to `len` bytes **without consuming** them, so the same bytes can then be
//!   moved by a `splice` of the source; it returns how many it duplicated, and 0 only when
//!   the source is empty and has no writer left (the job's EOF);
//! - `SPLICE_F_NONBLOCK` makes both the wait for bytes in the source and the wait for room in
//!   the destination fail with `EAGAIN` instead of blocking, so the caller tells the two
//!   apart itself ([`ready`]); a destination with no reader fails with `EPIPE` (SIGPIPE is
//!   ignored in the pump);
//! - `splice` between two pipes (Linux ≥ 2.6.31) moves up to `len` bytes, possibly fewer
//!   (the destination filled up), and a part of a pipe buffer where `len` ends inside one;
//!   both need a NULL offset for a pipe.
//!
//! Only Linux has these calls; anything else (or a kernel/seccomp policy that refuses them,
//! `ENOSYS`/`EPERM`) leaves the pump on its read-and-write path.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Whether `fd` is a pipe (or FIFO).
pub fn is_pipe(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: fstat fills a zeroed stat for a descriptor the caller keeps open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO
}

fn result(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Duplicate up to `len` of the bytes in pipe `src` into pipe `dst` without consuming them,
/// never blocking (`SPLICE_F_NONBLOCK`): how many; 0 at the source's EOF; `EAGAIN` when the
/// source is empty or the destination full.
#[cfg(target_os = "linux")]
pub fn tee(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    // SAFETY: two descriptors the caller keeps open; no memory is passed.
    result(unsafe {
        libc::tee(
            src.as_raw_fd(),
            dst.as_raw_fd(),
            len,
            libc::SPLICE_F_NONBLOCK,
        )
    })
}

#[cfg(not(target_os = "linux"))]
pub fn tee(_: BorrowedFd<'_>, _: BorrowedFd<'_>, _: usize) -> io::Result<usize> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// Move up to `len` bytes from pipe `src` to pipe `dst`: how many (maybe fewer than `len`);
/// with `nonblock`, `EAGAIN` instead of waiting for bytes or room.
#[cfg(target_os = "linux")]
pub fn splice(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    len: usize,
    nonblock: bool,
) -> io::Result<usize> {
    let flags = if nonblock { libc::SPLICE_F_NONBLOCK } else { 0 };
    // SAFETY: two descriptors the caller keeps open; NULL offsets, as pipes require.
    result(unsafe {
        libc::splice(
            src.as_raw_fd(),
            std::ptr::null_mut(),
            dst.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            flags,
        )
    })
}

#[cfg(not(target_os = "linux"))]
pub fn splice(_: BorrowedFd<'_>, _: BorrowedFd<'_>, _: usize, _: bool) -> io::Result<usize> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// Whether `fd` is ready for `events` (`libc::POLLIN`, `libc::POLLOUT`) within
/// `timeout_ms` (-1: wait as long as it takes). A hang-up or an error counts as ready: the
/// next call on `fd` reports it. An interrupted wait answers false.
pub fn ready(fd: BorrowedFd<'_>, events: libc::c_short, timeout_ms: libc::c_int) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: poll on one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    n > 0 && p.revents != 0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, OwnedFd};

    fn pipe() -> (std::fs::File, std::fs::File) {
        let (r, w): (OwnedFd, OwnedFd) =
            std::io::pipe().map(|(r, w)| (r.into(), w.into())).unwrap();
        (r.into(), w.into())
    }

    #[test]
    fn tee_duplicates_without_consuming_and_splice_then_moves_the_same_bytes() {
        let (src_r, mut src_w) = pipe();
        let (mut dst_r, dst_w) = pipe();
        let (mut cp_r, cp_w) = pipe();
        assert!(is_pipe(src_r.as_fd()) && is_pipe(dst_w.as_fd()));
        assert_eq!(
            tee(src_r.as_fd(), dst_w.as_fd(), 100).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "an empty source with a writer: EAGAIN"
        );
        src_w.write_all(b"hello, world").unwrap();
        assert_eq!(tee(src_r.as_fd(), dst_w.as_fd(), 5).unwrap(), 5);
        assert_eq!(splice(src_r.as_fd(), cp_w.as_fd(), 5, false).unwrap(), 5);
        assert!(
            ready(src_r.as_fd(), libc::POLLIN, 0),
            "the rest is still there"
        );
        drop((src_w, dst_w, cp_w));
        let (mut a, mut b) = (String::new(), String::new());
        dst_r.read_to_string(&mut a).unwrap();
        cp_r.read_to_string(&mut b).unwrap();
        assert_eq!((a.as_str(), b.as_str()), ("hello", "hello"));
        let (mut d2_r, d2_w) = pipe();
        assert_eq!(tee(src_r.as_fd(), d2_w.as_fd(), 100).unwrap(), 7);
        drop(d2_w);
        let mut c = String::new();
        d2_r.read_to_string(&mut c).unwrap();
        assert_eq!(c, ", world");
    }

    #[test]
    fn tee_refuses_what_is_not_a_pipe() {
        let (src_r, mut src_w) = pipe();
        src_w.write_all(b"x").unwrap();
        let f = tempfile::tempfile().unwrap();
        assert!(!is_pipe(f.as_fd()));
        let e = tee(src_r.as_fd(), f.as_fd(), 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    }
}
