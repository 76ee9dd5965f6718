//! The job's output as vramdoc reads it: the copy the pass-through process ([`super::pump`])
//! sends, stdout and stderr alike split into lines for a watcher each (`record::lines`, which
//! looks at the raw bytes first; vLLM logs its errors to stdout), which keeps the redacted
//! tail (stderr's is the report's) and recognises out-of-memory lines; each recognised line is sent, with when it was read, to
//! the supervisor's loop. vramdoc reads the copy to its end before the report is finished
//! ([`Output::wait_complete`]) and lets the pump finish the terminal before it prints its
//! summary ([`Output::wait_drained`]).

use super::markers::MarkerTail;
use super::pump::Frame;
use crate::record::lines::Lines;
use crate::record::stderr::ParsedError;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    /// The pump said both of the job's streams ended (or the copy ended).
    complete: bool,
    /// The copy pipe closed: the pump has written everything to the terminal.
    eof: bool,
    /// When the last bytes came.
    last: Option<Instant>,
}

/// The copy, read on a thread.
pub struct Output {
    state: Arc<(Mutex<State>, Condvar)>,
    stderr: Arc<Mutex<Lines>>,
    control: Option<File>,
    /// The pump's PID, reaped once it has written everything ([`Output::wait_drained`]).
    pump: Option<u32>,
}

/// Tick of the waits (signals are looked at in between).
const TICK: Duration = Duration::from_millis(20);
/// The longest [`Output::wait_complete`] waits while bytes keep coming (a background process
/// of the job that writes on after the command ended).
const MAX_COMPLETE_WAIT: Duration = Duration::from_secs(10);

/// The most bytes of one stream read as one batch ([`Frames::batch`]).
const BATCH: usize = 1 << 20;

/// The copy's frames, read through one buffer of [`BATCH`] bytes. The pump sends a frame for
/// each `tee` or read (often only a few KiB: a `tee` links no more than the terminal's pipe
/// has room for), so the frames of one stream that have already arrived are handed on as one
/// batch: the recogniser's cost per call (the tail's last lines, the search's set-up) and the
/// reads and wake-ups per frame are paid once per batch. A frame is never waited for: a
/// batch ends where the buffer does, so a line is read as soon as it comes, as before.
struct Frames {
    copy: BufReader<File>,
    /// A frame came cut short (the pump is gone): the batch before it is the last.
    broken: bool,
}

impl Frames {
    fn new(copy: File) -> Frames {
        Frames {
            copy: BufReader::with_capacity(BATCH, copy),
            broken: false,
        }
    }

    /// The next frame's tag and length, where its header is already in the buffer.
    fn buffered_head(&self) -> Option<(u8, usize)> {
        match *self.copy.buffer() {
            [tag, a, b, c, d, ..] => Some((tag, u32::from_le_bytes([a, b, c, d]) as usize)),
            _ => None,
        }
    }

    /// Append a frame's `len` bytes to `buf`; false if the copy ended first (`buf` as it was).
    fn payload(&mut self, buf: &mut Vec<u8>, len: usize) -> bool {
        let at = buf.len();
        let whole = (&mut self.copy)
            .take(len as u64)
            .read_to_end(buf)
            .is_ok_and(|n| n == len);
        if !whole {
            buf.truncate(at);
        }
        whole
    }

    /// The next batch: its tag, and in `buf` the bytes of one frame and of the frames of the
    /// same stream after it that are already here (up to [`BATCH`] bytes). `None` at the end
    /// of the copy (or at a frame cut short).
    fn batch(&mut self, buf: &mut Vec<u8>) -> Option<u8> {
        buf.clear();
        if self.broken {
            return None;
        }
        let mut head = [0u8; 5];
        self.copy.read_exact(&mut head).ok()?;
        let tag = head[0];
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if !self.payload(buf, len) {
            return None;
        }
        if tag == Frame::End as u8 {
            return Some(tag);
        }
        while let Some((t, len)) = self.buffered_head() {
            if t != tag || buf.len() + len > BATCH {
                break;
            }
            self.copy.consume(5);
            if !self.payload(buf, len) {
                self.broken = true;
                break;
            }
        }
        Some(tag)
    }
}

/// What the output thread tells the main loop, in the order it happened.
pub enum Seen {
    /// A marker line of the job's marker file, read before the error line after it.
    Marker(String),
    /// A recognised error line.
    Line(ParsedError),
}

/// The markers written so far (when there is a line to stamp), then the lines, each stamped
/// with the time it was read.
fn send(
    tx: &mpsc::Sender<(f64, Seen)>,
    found: &mut Vec<ParsedError>,
    t0: Instant,
    markers: &Mutex<MarkerTail>,
) {
    if found.is_empty() {
        return;
    }
    let t = t0.elapsed().as_secs_f64() * 1000.0;
    let (_, texts) = (markers.lock().unwrap_or_else(|e| e.into_inner())).poll_at(t);
    for text in texts {
        let _ = tx.send((t, Seen::Marker(text)));
    }
    let t = t0.elapsed().as_secs_f64() * 1000.0;
    for f in found.drain(..) {
        let _ = tx.send((t, Seen::Line(f)));
    }
}

impl Output {
    /// Read `copy` on a thread; recognised lines go to `tx` with their time in ms since `t0`.
    ///
    /// Before a recognised line is stamped, the marker file is read (`markers`): a job
    /// writes its phase marker before it prints the error of that phase, so the marker is
    /// there and is stamped before the line, however late the sampler's next read of the
    /// marker file would have come. Those markers go to `tx` first, in file order.
    pub fn start(
        copy: File,
        control: File,
        tx: mpsc::Sender<(f64, Seen)>,
        t0: Instant,
        markers: Arc<Mutex<MarkerTail>>,
    ) -> Output {
        let state: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let stderr: Arc<Mutex<Lines>> = Arc::default();
        let (st, err) = (state.clone(), stderr.clone());
        let _ = std::thread::Builder::new()
            .name("vramdoc-output".into())
            .spawn(move || {
                let mut stdout = Lines::default();
                let mut copy = Frames::new(copy);
                let mut buf = Vec::new();
                let mut found = Vec::new();
                while let Some(kind) = copy.batch(&mut buf) {
                    match kind {
                        t if t == Frame::Stdout as u8 => stdout.feed(&buf, &mut found),
                        t if t == Frame::Stderr as u8 => err
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .feed(&buf, &mut found),
                        t if t == Frame::End as u8 => {
                            stdout.finish(&mut found);
                            err.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .finish(&mut found);
                        }
                        _ => break,
                    }
                    send(&tx, &mut found, t0, &markers);
                    let end = kind == Frame::End as u8;
                    let mut s = st.0.lock().unwrap_or_else(|e| e.into_inner());
                    s.last = Some(Instant::now());
                    if end && !s.complete {
                        // The waits look at `last` on their tick; only the end wakes them.
                        s.complete = true;
                        st.1.notify_all();
                    }
                }
                stdout.finish(&mut found);
                err.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .finish(&mut found);
                send(&tx, &mut found, t0, &markers);
                let mut s = st.0.lock().unwrap_or_else(|e| e.into_inner());
                s.complete = true;
                s.eof = true;
                st.1.notify_all();
            });
        Output {
            state,
            stderr,
            control: Some(control),
            pump: None,
        }
    }

    /// The pump `pid` sends the copy: reaped once it has written everything.
    pub fn with_pump(mut self, pid: u32) -> Output {
        self.pump = Some(pid);
        self
    }

    /// The command has ended: the pump reads what is left in the pipes at once.
    pub fn command_ended(&mut self) {
        if let Some(mut c) = self.control.take() {
            let _ = c.write_all(b"E");
            self.control = Some(c);
        }
    }

    fn wait_until(&self, done: impl Fn(&State) -> bool, give_up: impl Fn(&State) -> bool) {
        let (m, cv) = &*self.state;
        let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
        while !done(&s) && !give_up(&s) {
            if super::signals::pending() {
                return;
            }
            s = cv
                .wait_timeout(s, TICK)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Wait until the copy is complete (both of the job's streams ended), or no byte came
    /// for `quiet` (a background process of the job still holds the pipes), or a signal
    /// came. The copy is never dropped for a slow terminal: the pump reads the pipes at once
    /// after [`Output::command_ended`].
    pub fn wait_complete(&self, quiet: Duration) {
        let since = Instant::now();
        self.wait_until(
            |s| s.complete,
            |s| {
                s.last.unwrap_or(since).max(since).elapsed() >= quiet
                    || since.elapsed() >= MAX_COMPLETE_WAIT
            },
        );
    }

    /// When the copy is complete, wait until the pump has written everything to the
    /// terminal (as long as the terminal takes, as `cmd | less` would; a signal stops the
    /// wait), so that vramdoc's summary comes after the job's output; then reap the pump,
    /// which is exiting (issue 39: nothing of vramdoc's outlives `run`).
    pub fn wait_drained(&self) {
        let complete = {
            let s = self.state.0.lock().unwrap_or_else(|e| e.into_inner());
            s.complete
        };
        if complete {
            self.wait_until(|s| s.eof, |_| false);
        }
        let eof = self.state.0.lock().unwrap_or_else(|e| e.into_inner()).eof;
        if let Some(pid) = self.pump.filter(|_| eof) {
            // The copy pipe closed: the pump has written the job's last byte and exits.
            super::process::wait_helper(pid, true);
        }
    }

    /// The last lines of the job's stderr (redacted).
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr
            .lock()
            .map(|l| l.tail())
            .unwrap_or_else(|e| e.into_inner().tail())
    }
}

impl Drop for Output {
    /// A pump that has ended is reaped; one still passing a survivor's output on is left
    /// to do so (module doc of [`super::pump`]).
    fn drop(&mut self) {
        if let Some(pid) = self.pump {
            super::process::wait_helper(pid, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: Frame, bytes: &[u8]) -> Vec<u8> {
        let mut f = vec![tag as u8];
        f.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        f.extend_from_slice(bytes);
        f
    }

    #[test]
    fn frames_of_one_stream_that_are_here_are_read_as_one_batch_in_order() {
        let (r, mut w) = std::io::pipe().expect("a pipe");
        let mut copy = Vec::new();
        for part in [&b"a\n"[..], b"bb\n", b"ccc"] {
            copy.extend(frame(Frame::Stdout, part));
        }
        copy.extend(frame(Frame::Stderr, b"err\n"));
        copy.extend(frame(Frame::Stdout, b"\nd"));
        copy.extend(frame(Frame::End, b""));
        w.write_all(&copy).expect("write the copy");
        let mut frames = Frames::new(File::from(std::os::fd::OwnedFd::from(r)));
        let mut buf = Vec::new();
        let mut got = Vec::new();
        // The copy is not closed yet: a batch never waits for a frame that has not come.
        while got.len() < 4 {
            let tag = frames.batch(&mut buf).expect("a batch");
            got.push((tag, String::from_utf8_lossy(&buf).into_owned()));
        }
        assert_eq!(
            got,
            [
                (Frame::Stdout as u8, "a\nbb\nccc".to_string()),
                (Frame::Stderr as u8, "err\n".to_string()),
                (Frame::Stdout as u8, "\nd".to_string()),
                (Frame::End as u8, String::new()),
            ]
        );
        drop(w);
        assert_eq!(frames.batch(&mut buf), None);
    }

    #[test]
    fn a_frame_cut_short_ends_the_copy_after_the_whole_frames_before_it() {
        let mut copy = frame(Frame::Stderr, b"whole\n");
        copy.extend(frame(Frame::Stderr, b"cut short"));
        copy.truncate(copy.len() - 3);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("copy");
        std::fs::write(&path, &copy).expect("write the copy");
        let mut frames = Frames::new(File::open(&path).expect("open the copy"));
        let mut buf = Vec::new();
        assert_eq!(frames.batch(&mut buf), Some(Frame::Stderr as u8));
        assert_eq!(buf, b"whole\n");
        assert_eq!(frames.batch(&mut buf), None);
        assert!(buf.is_empty());
    }

    #[test]
    fn a_batch_holds_at_most_its_bound() {
        let big = vec![b'x'; BATCH / 2 + 1];
        let mut copy = frame(Frame::Stdout, &big);
        copy.extend(frame(Frame::Stdout, &big));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("copy");
        std::fs::write(&path, &copy).expect("write the copy");
        let mut frames = Frames::new(File::open(&path).expect("open the copy"));
        let mut buf = Vec::new();
        for _ in 0..2 {
            assert_eq!(frames.batch(&mut buf), Some(Frame::Stdout as u8));
            assert_eq!(buf.len(), big.len());
        }
        assert_eq!(frames.batch(&mut buf), None);
    }

    #[test]
    fn lines_split_on_newlines_and_carriage_returns_across_chunks() {
        let mut l = Lines::default();
        let mut found = Vec::new();
        l.feed(
            b"step 1\rstep 2\ntorch.OutOfMemoryError: CUDA out of mem",
            &mut found,
        );
        assert!(found.is_empty());
        l.feed(b"ory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.00 GiB of which 1.00 GiB is free.\n\xff tail", &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].device, Some(0));
        assert_eq!(found[0].requested, Some(2 << 30));
        l.finish(&mut found);
        let tail = l.tail();
        assert_eq!(tail.first().map(String::as_str), Some("step 1"));
        assert_eq!(tail.last().map(String::as_str), Some("\u{fffd} tail"));
    }
}
