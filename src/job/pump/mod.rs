//! The pass-through process of `vramdoc run` (`vramdoc __pump`, started by [`start`]): it owns
//! the read ends of the job's stdout and stderr pipes, writes every byte to the real
//! stdout/stderr with blocking writes (a slow reader slows the job, as `cmd | less` would; no
//! byte is dropped), and sends a copy to vramdoc over a third pipe, framed
//! ([`Frame`]). It is vramdoc's child, in a process group of its own (a signal forwarded to
//! the job's group never reaches it), left out of the job's recorded tree by its PID
//! ([`crate::record::tree::Scope::helpers`]), and reaped by vramdoc once it has written
//! the job's last byte ([`super::stderr::Output::wait_drained`]): nothing of vramdoc's
//! outlives `run` (issue 39). It ignores SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGPIPE/SIGTTOU and does
//! not die with vramdoc: when vramdoc is gone (`kill -9`, the OOM killer), it keeps passing
//! the job's output through until EOF, then removes the marker directory vramdoc left. It
//! outlives a `run` only where a process of the job that outlived the command keeps the
//! job's output open (vramdoc stops waiting for it, docs/run.md "Output"): it passes that
//! process's output on until it closes it.
//!
//! When vramdoc's stdout (stderr) is a terminal and `--no-pty` was not given, the job's
//! stream is the slave side of a pseudo-terminal instead of a pipe and the pump reads the
//! master side ([`super::pty`]: bytes unchanged, window size kept in step by the pump).
//! When both are the same terminal, the job's stdout and stderr are one pty, read as its
//! stderr (their order stays exactly as the job wrote them).
//!
//! Flow control: the copy leads the terminal by at most [`LEAD`] bytes per stream; once
//! vramdoc says the command has ended (a byte on the control pipe), what is still in the
//! pipes is read at once (the copy completes, the report gets the last lines and the
//! out-of-memory line) and written to the terminal at its own pace. A stream whose reader
//! went away (`| head`) is closed, so the job gets EPIPE/SIGPIPE there as it would without
//! vramdoc.
//!
//! Zero copy (Linux, issue 34): where the job's stream and the pump's destination are both
//! pipes (not a pty), the pump copies no byte itself. It `tee`s what the job's pipe holds
//! into the terminal's pipe without consuming it, writes the frame header for exactly those
//! `n` bytes to the copy and `splice`s the same `n` bytes from the job's pipe into it
//! ([`super::splice`]). Where the terminal's pipe stays full for [`STALL`], or anything is
//! still queued for the terminal, or the command has ended, a chunk takes the read-and-write
//! path above instead, so the order stays exact and the [`LEAD`] and [`DRAIN_LEAD`] bounds
//! hold as they are; a refusal of `tee` (`EINVAL`, `ENOSYS`: not pipes, a seccomp policy)
//! leaves the stream on that path for good.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// The pump's descriptors: the job's stdout and stderr (read ends), the copy (write end),
/// the control pipe (read end).
const JOB_OUT: RawFd = 3;
const JOB_ERR: RawFd = 4;
const COPY: RawFd = 5;
const CONTROL: RawFd = 6;
/// How far the copy may run ahead of the terminal, per stream.
pub const LEAD: usize = 4 << 20;
/// The same once the command has ended (what is left in the pipes is read at once; a
/// background process of the job that keeps writing to a stalled terminal is held back
/// here, so the pump's memory stays bounded).
pub const DRAIN_LEAD: usize = 64 << 20;
/// One read (and at most one `tee`, so one frame).
const CHUNK: usize = 256 * 1024;
/// How long the terminal's pipe may stay full, or the queued bytes unwritten, before the
/// zero-copy path gives way to the read-and-write path for a chunk (the job then runs up to
/// [`LEAD`] ahead of a stalled terminal, as on that path): a reader that is only briefly
/// descheduled keeps the zero-copy path.
const STALL: std::time::Duration = std::time::Duration::from_millis(20);
/// What the job's pipes and the copy hold (the kernel's default is 64 KiB): a job writing
/// short lines fast is read in large chunks, with fewer wake-ups of the pump and of vramdoc
/// (Linux `F_SETPIPE_SZ`, up to `/proc/sys/fs/pipe-max-size`; a pipe that cannot grow stays
/// as it is).
const PIPE_BYTES: libc::c_int = 1 << 20;

/// The copy's frames: a tag byte, a little-endian `u32` length, the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Frame {
    Stdout = 1,
    Stderr = 2,
    /// Both of the job's streams reached EOF: the copy is complete (length 0). The pump
    /// closes the copy pipe once the terminal has everything.
    End = 3,
}

/// A started pump, as vramdoc holds it.
pub struct Started {
    /// Its PID: vramdoc's child, reaped by [`super::process::wait_helper`].
    pub pid: u32,
    /// Write ends for the job's stdout and stderr.
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// The copy (read end).
    pub copy: File,
    /// Control (write end): one byte says the command has ended; closing it without one
    /// says vramdoc is gone.
    pub control: File,
    /// (vramdoc's terminal, the master of the job's pty) for each stream that is a pty:
    /// vramdoc keeps their window sizes in step too while it runs
    /// ([`super::pty::follow_window_size`]), so a SIGWINCH reaches a pty at once even where
    /// the pump is not in the terminal's foreground process group.
    pub winsize: Vec<(OwnedFd, OwnedFd)>,
}

/// (terminal, master) for each of the pump's streams `(fd, read end)` that is a pty to a
/// terminal (close-on-exec duplicates).
fn ptys_to_terminals(streams: [(RawFd, &OwnedFd); 2]) -> Vec<(OwnedFd, OwnedFd)> {
    let mut v = Vec::new();
    for (fd, src) in streams {
        // SAFETY: 1 and 2 are open for the process's lifetime.
        let term = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if super::pty::is_terminal(src.as_fd()) && super::pty::is_terminal(term) {
            if let (Ok(t), Ok(m)) = (term.try_clone_to_owned(), src.try_clone()) {
                v.push((t, m));
            }
        }
    }
    v
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both are fresh, open and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A pipe that holds [`PIPE_BYTES`] where the kernel allows it.
fn big_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = pipe()?;
    // SAFETY: fcntl on a descriptor we own; a refusal leaves the pipe as it was.
    unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
    Ok((r, w))
}

/// The pump's and the job's ends of the job's stream `fd` (1 or 2): a pty's master and
/// slave when `pty` and vramdoc's own `fd` is a terminal, else a pipe's read and write ends.
/// A pty that cannot be opened (no /dev/ptmx in a container, the pty limit reached) leaves
/// a pipe and a note on stderr.
fn stream(fd: RawFd, pty: bool) -> std::io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: 1 and 2 are open for the process's lifetime (std opens /dev/null if not).
    let term = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    if pty && super::pty::is_terminal(term) {
        match super::pty::open(term) {
            Ok(p) => return Ok((p.master, p.slave)),
            Err(e) => no_pty(&e),
        }
    }
    big_pipe()
}

fn no_pty(e: &std::io::Error) {
    crate::term::eprint_line(&format!(
        "vramdoc: no pseudo-terminal for the command ({e}); its output goes through a pipe"
    ));
}

/// The job's stdout and stderr as one pty (vramdoc's are the same terminal): the pump's
/// stdout is a pipe with no writer, its stderr the master.
fn shared() -> std::io::Result<(OwnedFd, OwnedFd, OwnedFd, OwnedFd)> {
    // SAFETY: 2 is open for the process's lifetime.
    let p = super::pty::open(unsafe { std::os::fd::BorrowedFd::borrow_raw(2) })?;
    let (none_r, _none_w) = pipe()?;
    let slave2 = p.slave.try_clone()?;
    Ok((none_r, p.slave, p.master, slave2))
}

/// Start the pump (`/proc/self/exe __pump`), which removes `marker_dir` if vramdoc is gone
/// when the job's output ends; with `pty`, the job's stdout and stderr are ptys where
/// vramdoc's are terminals; with `stdout_to_stderr`, the job's stdout is copied to vramdoc's
/// stderr (`run --json`, whose stdout is the report's). The pump is vramdoc's child, in a
/// process group of its own; vramdoc reaps it ([`super::process::wait_helper`]).
pub fn start(marker_dir: &Path, pty: bool, stdout_to_stderr: bool) -> std::io::Result<Started> {
    use std::os::unix::process::CommandExt;
    // One terminal: one pty for both, so the job's writes keep their order exactly.
    let one = if pty && super::pty::same_terminal() {
        shared().map_err(|e| no_pty(&e)).ok()
    } else {
        None
    };
    let (out_r, out_w, err_r, err_w) = match one {
        Some(fds) => fds,
        None => {
            let pty = pty && !super::pty::same_terminal();
            let (out_r, out_w) = stream(if stdout_to_stderr { 2 } else { 1 }, pty)?;
            let (err_r, err_w) = stream(2, pty)?;
            (out_r, out_w, err_r, err_w)
        }
    };
    let (copy_r, copy_w) = big_pipe()?;
    let (ctl_r, ctl_w) = pipe()?;
    let winsize = ptys_to_terminals([(1, &out_r), (2, &err_r)]);
    let map = [
        (out_r.as_raw_fd(), JOB_OUT),
        (err_r.as_raw_fd(), JOB_ERR),
        (copy_w.as_raw_fd(), COPY),
        (ctl_r.as_raw_fd(), CONTROL),
    ];
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg("__pump")
        .arg("--marker-dir")
        .arg(marker_dir)
        .stdin(std::process::Stdio::null());
    // SAFETY: dup2 and fcntl are async-signal-safe. Each source is first moved above the
    // targets' range so that no dup2 overwrites a source not yet placed.
    unsafe {
        cmd.pre_exec(move || {
            // A group of its own: a signal forwarded to the job's group (vramdoc's) never
            // reaches the pump, and the pump is no member of the caller's group.
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The pump's stdout is vramdoc's stderr: the job's stdout is copied there.
            if stdout_to_stderr && libc::dup2(2, 1) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut high = [0; 4];
            for (i, (src, _)) in map.iter().enumerate() {
                let h = libc::fcntl(*src, libc::F_DUPFD_CLOEXEC, 16);
                if h < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                high[i] = h;
            }
            for (i, (_, dst)) in map.iter().enumerate() {
                // dup2 clears close-on-exec on the target.
                if libc::dup2(high[i], *dst) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = child.id();
    // Reaped by `process::reap` / `process::wait_helper`, never by std.
    super::process::adopt_helper(pid);
    drop(child);
    Ok(Started {
        pid,
        stdout: out_w,
        stderr: err_w,
        copy: File::from(copy_r),
        control: File::from(ctl_w),
        winsize,
    })
}

/// A stream's bytes on their way to the terminal.
struct Queue {
    state: Mutex<QueueState>,
    cv: Condvar,
}

#[derive(Default)]
struct QueueState {
    chunks: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Bytes queued or being written: the zero-copy path waits for 0 (order).
    unwritten: usize,
    /// The reader is done.
    closed: bool,
    /// The terminal's reader went away: stop reading the job's stream.
    gone: bool,
}

impl Queue {
    fn new() -> Queue {
        Queue {
            state: Mutex::new(QueueState::default()),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `chunk`, waiting while [`LEAD`] bytes are queued ([`DRAIN_LEAD`] once `drain`).
    /// False when the terminal's reader is gone.
    fn push(&self, chunk: Vec<u8>, drain: &AtomicBool) -> bool {
        let mut s = self.lock();
        let limit = |d: &AtomicBool| {
            if d.load(Ordering::SeqCst) {
                DRAIN_LEAD
            } else {
                LEAD
            }
        };
        while s.bytes >= limit(drain) && !s.gone {
            s = self
                .cv
                .wait_timeout(s, std::time::Duration::from_millis(50))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        if s.gone {
            return false;
        }
        s.bytes += chunk.len();
        s.unwritten += chunk.len();
        s.chunks.push_back(chunk);
        self.cv.notify_all();
        true
    }

    fn close(&self) {
        self.lock().closed = true;
        self.cv.notify_all();
    }

    /// The next chunk; `None` once closed and empty.
    fn pop(&self) -> Option<Vec<u8>> {
        let mut s = self.lock();
        loop {
            if let Some(c) = s.chunks.pop_front() {
                s.bytes -= c.len();
                self.cv.notify_all();
                return Some(c);
            }
            if s.closed {
                return None;
            }
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn set_gone(&self) {
        let mut s = self.lock();
        s.gone = true;
        s.chunks.clear();
        s.bytes = 0;
        s.unwritten = 0;
        self.cv.notify_all();
    }

    /// `n` bytes of a popped chunk are written (or dropped).
    fn written(&self, n: usize) {
        let mut s = self.lock();
        s.unwritten = s.unwritten.saturating_sub(n);
        self.cv.notify_all();
    }

    /// Whether every queued byte has been written within `timeout` (at once when none is
    /// queued): only then may bytes bypass the queue.
    fn wait_written(&self, timeout: std::time::Duration) -> bool {
        let s = self.lock();
        if s.unwritten == 0 {
            return true;
        }
        let (s, _) = self
            .cv
            .wait_timeout_while(s, timeout, |s| s.unwritten > 0)
            .unwrap_or_else(|e| e.into_inner());
        s.unwritten == 0
    }
}

/// The copy to vramdoc; dead once vramdoc stopped reading it.
struct Copy {
    file: Mutex<Option<File>>,
}

impl Copy {
    fn send(&self, tag: Frame, bytes: &[u8]) {
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let Some(file) = f.as_mut() else { return };
        let mut head = [0u8; 5];
        head[0] = tag as u8;
        head[1..].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        if write_frame(file, &head, bytes).is_err() {
            // EPIPE: vramdoc is gone; the job's output still reaches the terminal.
            *f = None;
        }
    }

    /// Whether vramdoc still reads the copy (a pipe whose read end is closed polls POLLERR).
    fn reader_alive(&self) -> bool {
        let f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let Some(file) = f.as_ref() else {
            return false;
        };
        let mut p = libc::pollfd {
            fd: file.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd, no wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        !(n > 0 && p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0)
    }

    fn close(&self) {
        *self.file.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn alive(&self) -> bool {
        self.file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// A frame of the next `n` bytes in the pipe `src` (just `tee`d to the terminal), spliced
    /// from there: the header, then exactly those `n` bytes, put together in `staging` (when
    /// there is one) and moved to the copy in one piece, so vramdoc's reader wakes once per
    /// frame rather than at the header and again at the bytes. Where vramdoc is gone (before
    /// or during), what was not moved is read into `scratch` and dropped (the terminal has
    /// it already), so `src` and `staging` hold no byte of this frame afterwards.
    fn send_spliced(
        &self,
        tag: Frame,
        src: &File,
        n: usize,
        staging: Option<&Staging>,
        scratch: &mut [u8],
    ) {
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let mut left = n;
        let mut staged = 0;
        if let Some(file) = f.as_mut() {
            let mut head = [0u8; 5];
            head[0] = tag as u8;
            head[1..].copy_from_slice(&(n as u32).to_le_bytes());
            let sent = match staging {
                Some(st) => st.frame(&head, src, file, &mut left, &mut staged),
                None => file
                    .write_all(&head)
                    .and_then(|()| splice_all(src, file, &mut left)),
            };
            if sent.is_err() {
                // EPIPE: vramdoc is gone; the job's output still reaches the terminal.
                *f = None;
            }
        }
        drop(f);
        if let Some(st) = staging {
            discard(&st.r, staged, scratch);
        }
        discard(src, left, scratch);
    }
}

/// A pipe of the pump's own, one per stream, in which a frame is put together before it
/// goes to the copy (see [`Copy::send_spliced`]); empty between frames.
struct Staging {
    r: File,
    w: File,
}

impl Staging {
    fn new() -> Option<Staging> {
        let (r, w) = big_pipe().ok()?;
        Some(Staging {
            r: r.into(),
            w: w.into(),
        })
    }

    /// `head`, then `left` bytes of `src`, to `copy` by way of this pipe; `left` and `staged`
    /// (bytes here) count down as they move. A staging pipe that fills up before the frame
    /// is whole is moved on first (the frame then reaches vramdoc in two parts, in order).
    fn frame(
        &self,
        head: &[u8],
        src: &File,
        copy: &File,
        left: &mut usize,
        staged: &mut usize,
    ) -> std::io::Result<()> {
        // An empty pipe: the header fits.
        (&self.w).write_all(head)?;
        *staged += head.len();
        while *left > 0 {
            match super::splice::splice(src.as_fd(), self.w.as_fd(), *left, true) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(m) => {
                    let m = m.min(*left);
                    *left -= m;
                    *staged += m;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    splice_all(&self.r, copy, staged)?
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        splice_all(&self.r, copy, staged)
    }
}

/// Splice `left` bytes from pipe `from` to pipe `to`, waiting for room; `left` counts down.
fn splice_all(from: &File, to: &File, left: &mut usize) -> std::io::Result<()> {
    while *left > 0 {
        match super::splice::splice(from.as_fd(), to.as_fd(), *left, false) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(m) => *left -= m.min(*left),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Read `n` bytes that are in pipe `from` and drop them.
fn discard(from: &File, mut n: usize, scratch: &mut [u8]) {
    while n > 0 {
        let want = n.min(scratch.len());
        match (&*from).read(&mut scratch[..want]) {
            Ok(0) => break,
            Ok(m) => n -= m.min(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// `head` then `bytes`, in one write where the pipe takes both at once.
fn write_frame(file: &mut File, head: &[u8], bytes: &[u8]) -> std::io::Result<()> {
    let n = loop {
        match file.write_vectored(&[std::io::IoSlice::new(head), std::io::IoSlice::new(bytes)]) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r?,
        }
    };
    if n < head.len() {
        file.write_all(&head[n..])?;
        file.write_all(bytes)
    } else {
        file.write_all(&bytes[n - head.len()..])
    }
}

fn ignore_signals() {
    for s in [
        libc::SIGPIPE,
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        // A write to the terminal from a background group (vramdoc's caller's, when
        // vramdoc made a group of its own) under `stty tostop`.
        libc::SIGTTOU,
    ] {
        // SAFETY: setting a signal's disposition to SIG_IGN.
        unsafe { libc::signal(s, libc::SIG_IGN) };
    }
}

/// `vramdoc __pump`: run the pump (see the module's doc); returns the exit status.
pub fn main(marker_dir: Option<&Path>) -> i32 {
    ignore_signals();
    // SAFETY: the descriptors `start` placed; each is owned once here.
    let (mut out, mut err, copy, control) = unsafe {
        (
            File::from_raw_fd(JOB_OUT),
            File::from_raw_fd(JOB_ERR),
            File::from_raw_fd(COPY),
            File::from_raw_fd(CONTROL),
        )
    };
    // The streams that are ptys (their master side here) to a terminal: window sizes.
    let winsize = {
        let (o, e) = (OwnedFd::from(out), OwnedFd::from(err));
        let w = ptys_to_terminals([(1, &o), (2, &e)]);
        out = File::from(o);
        err = File::from(e);
        w
    };
    super::pty::follow_window_size(winsize);
    let copy = Arc::new(Copy {
        file: Mutex::new(Some(copy)),
    });
    let drain = Arc::new(AtomicBool::new(false));
    let queues = [Arc::new(Queue::new()), Arc::new(Queue::new())];
    {
        let drain = drain.clone();
        let queues = queues.clone();
        let _ = std::thread::Builder::new()
            .name("pump-control".into())
            .spawn(move || {
                let mut control = control;
                let mut b = [0u8; 1];
                // A byte: the command ended. EOF: vramdoc is gone (flow control stays).
                if matches!(control.read(&mut b), Ok(1)) {
                    drain.store(true, Ordering::SeqCst);
                    for q in &queues {
                        q.cv.notify_all();
                    }
                }
            });
    }
    let mut readers = Vec::new();
    let mut writers = Vec::new();
    for (i, (src, tag, fd)) in [(out, Frame::Stdout, 1), (err, Frame::Stderr, 2)]
        .into_iter()
        .enumerate()
    {
        let q = queues[i].clone();
        let (c, d) = (copy.clone(), drain.clone());
        readers.push(std::thread::spawn(move || {
            read_stream(src, fd, tag, &c, &q, &d)
        }));
        let q = queues[i].clone();
        writers.push(std::thread::spawn(move || write_stream(fd, &q)));
    }
    for r in readers {
        let _ = r.join();
    }
    copy.send(Frame::End, &[]);
    for w in writers {
        let _ = w.join();
    }
    let vramdoc_alive = copy.reader_alive();
    copy.close();
    if !vramdoc_alive {
        if let Some(dir) = marker_dir.filter(|d| d.exists()) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    0
}

/// The bytes of one stream the pump passed on, by path.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Moved {
    /// `tee`d to the terminal and spliced to the copy (or spliced to the terminal once
    /// vramdoc is gone): no byte copied by the pump.
    zero_copy: u64,
    /// Read into the pump's buffer and queued for the terminal.
    copied: u64,
}

/// One step of the zero-copy path.
enum Pass {
    /// `n` bytes reached the terminal's pipe and the copy.
    Moved(usize),
    /// The job's stream ended.
    Eof,
    /// The terminal's reader went away.
    Gone,
    /// The terminal's pipe stayed full for [`STALL`]: this chunk takes the other path.
    Full,
    /// `tee`/`splice` refused (not pipes, no such call): the other path for good.
    Unsupported,
}

/// Pass the bytes in the job's pipe `src` on to the terminal's pipe `dst` and the copy
/// without copying them (see the module's doc).
fn pass_zero_copy(
    src: &File,
    dst: std::os::fd::BorrowedFd<'_>,
    tag: Frame,
    copy: &Copy,
    staging: Option<&Staging>,
    scratch: &mut [u8],
) -> Pass {
    loop {
        // With vramdoc gone there is no copy: the bytes are moved to the terminal.
        let to_copy = copy.alive();
        let r = if to_copy {
            super::splice::tee(src.as_fd(), dst, CHUNK)
        } else {
            super::splice::splice(src.as_fd(), dst, CHUNK, true)
        };
        match r {
            Ok(0) => return Pass::Eof,
            Ok(n) => {
                if to_copy {
                    copy.send_spliced(tag, src, n, staging, scratch);
                }
                return Pass::Moved(n);
            }
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => {
                    // Either the job's pipe is empty (wait for its next bytes or its EOF,
                    // as a read would) or the terminal's is full (wait a little for room).
                    if !super::splice::ready(src.as_fd(), libc::POLLIN, 0) {
                        super::splice::ready(src.as_fd(), libc::POLLIN, -1);
                    } else if !super::splice::ready(dst, libc::POLLOUT, STALL.as_millis() as i32) {
                        return Pass::Full;
                    }
                }
                Some(libc::EPIPE) => return Pass::Gone,
                _ => return Pass::Unsupported,
            },
        }
    }
}

/// Pass the job's stream `src` on to the terminal `dst` (the writer's descriptor) and the
/// copy: the zero-copy path where both are pipes, else (and chunk by chunk where the
/// module's doc says) read into a buffer, sent to the copy and queued for the writer.
fn read_stream(
    mut src: File,
    dst: RawFd,
    tag: Frame,
    copy: &Copy,
    q: &Queue,
    drain: &AtomicBool,
) -> Moved {
    // SAFETY: `dst` stays open for the pump's lifetime (the process's stdout/stderr, or the
    // caller's descriptor in tests); it is only borrowed here.
    let dst = unsafe { std::os::fd::BorrowedFd::borrow_raw(dst) };
    let mut zero_copy = super::splice::is_pipe(src.as_fd()) && super::splice::is_pipe(dst);
    let staging = if zero_copy { Staging::new() } else { None };
    let mut moved = Moved::default();
    // One buffer for the reads; the queue gets exactly the bytes read.
    let mut buf = vec![0u8; CHUNK];
    loop {
        if zero_copy && !drain.load(Ordering::SeqCst) && q.wait_written(STALL) {
            match pass_zero_copy(&src, dst, tag, copy, staging.as_ref(), &mut buf) {
                Pass::Moved(n) => {
                    moved.zero_copy += n as u64;
                    continue;
                }
                Pass::Eof => break,
                // Closing `src`: the job gets EPIPE on this stream, as without vramdoc.
                Pass::Gone => break,
                Pass::Full => {}
                Pass::Unsupported => zero_copy = false,
            }
        }
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A pty's master: EIO once the job's last slave descriptor is closed.
            Err(_) => break,
        };
        copy.send(tag, &buf[..n]);
        moved.copied += n as u64;
        if !q.push(buf[..n].to_vec(), drain) {
            break; // closing `src`: the job gets EPIPE on this stream, as without vramdoc
        }
    }
    q.close();
    moved
}

fn write_stream(fd: RawFd, q: &Queue) {
    // SAFETY: borrowing the process's stdout/stderr for the pump's lifetime; ManuallyDrop
    // keeps it open.
    let mut out = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
    let mut failed = false;
    while let Some(chunk) = q.pop() {
        if !failed {
            match out.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    q.set_gone();
                }
                // A terminal hung up (EIO), a full disk: the bytes are dropped, the job keeps
                // running and its copy still reaches the report.
                Err(_) => failed = true,
            }
        }
        q.written(chunk.len());
    }
}

#[cfg(test)]
mod tests;
