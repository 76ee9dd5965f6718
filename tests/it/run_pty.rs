//! `vramdoc run -- CMD` on a terminal (docs/run.md "Output"): the job's stdout and stderr are
//! pseudo-terminals where vramdoc's are terminals, so the job sees a terminal (isatty,
//! line-buffered stdio, the window size, kept in step) and its bytes pass unchanged; the
//! copy still reaches the report; `--no-pty` and a redirected stream give pipes; a `kill -9`
//! of vramdoc leaves the job its output. vramdoc itself runs on a pty the test opens.

use crate::common;

use crate::common::read_report as report;
use common::poll::{eventually, SECS_10};
use common::{vramdoc, KillOnDrop};
use rustix::pty::{grantpt, ioctl_tiocgptpeer, openpt, unlockpt, OpenptFlags};
use rustix::termios::{tcgetattr, tcsetattr, tcsetwinsize, OptionalActions, OutputModes, Winsize};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
GPU 0 has a total capacity of 15.00 GiB of which 1.00 GiB is free.";

/// A terminal for vramdoc: a pty whose master the test reads on a thread.
struct Term {
    master: Arc<OwnedFd>,
    slave: Option<OwnedFd>,
    seen: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Term {
    /// `raw`: no output post-processing (the bytes read are the bytes written).
    fn open(rows: u16, cols: u16, raw: bool) -> Term {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let master = openpt(flags).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let slave = ioctl_tiocgptpeer(&master, flags).unwrap();
        if raw {
            let mut t = tcgetattr(&slave).unwrap();
            t.output_modes.remove(OutputModes::OPOST);
            tcsetattr(&slave, OptionalActions::Now, &t).unwrap();
        }
        let master = Arc::new(master);
        let t = Term {
            master: master.clone(),
            slave: Some(slave),
            seen: Arc::default(),
            reader: None,
        };
        t.resize(rows, cols);
        let seen = t.seen.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once every slave descriptor (vramdoc's, the pump's, the job's) is closed.
            while let Ok(n) = rustix::io::read(&*master, &mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Term {
            reader: Some(reader),
            ..t
        }
    }

    fn resize(&self, rows: u16, cols: u16) {
        let ws = Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        tcsetwinsize(&*self.master, ws).unwrap();
    }

    fn stdio(&self) -> Stdio {
        Stdio::from(self.slave.as_ref().unwrap().try_clone().unwrap())
    }

    /// What came, `\r\n` read as `\n` (the terminal's own ONLCR) unless raw.
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).replace("\r\n", "\n")
    }

    fn bytes(&self) -> Vec<u8> {
        self.seen.lock().unwrap().clone()
    }

    /// Close the test's slave; wait until every other holder closed theirs (EOF).
    fn wait_closed(&mut self) {
        self.slave = None;
        let r = self.reader.take().unwrap();
        eventually(SECS_10, "the terminal's last writer closed it", || {
            r.is_finished()
        });
        r.join().unwrap();
    }
}

fn run_cmd(out: &Path) -> Command {
    let mut c = vramdoc();
    c.args([
        "--sim",
        "1x16GiB",
        "run",
        "--process-period",
        "100ms",
        "--out",
    ])
    .arg(out)
    .stdin(Stdio::null())
    // Python's own default buffering (the test environment may set it unbuffered).
    .env_remove("PYTHONUNBUFFERED");
    c
}

/// This process's controlling terminal (`tty_nr` of /proc/self/stat): the job's stays the
/// same (the pty is never made its controlling terminal).
fn own_ctty() -> String {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    after.split_whitespace().nth(4).unwrap().to_string()
}

/// The job reports what it sees, then waits for `go` before printing `after`.
fn probe(go: &Path) -> String {
    probe_then(go, "")
}

/// [`probe`], running the Python line `then` after its stderr line.
fn probe_then(go: &Path, then: &str) -> String {
    format!(
        "import os, sys, time\n\
         sz = os.get_terminal_size(1) if sys.stdout.isatty() else None\n\
         print('isatty', sys.stdout.isatty(), sys.stderr.isatty(), 'size', sz and (sz.lines, sz.columns))\n\
         print('ctty', open('/proc/self/stat').read().rsplit(')', 1)[1].split()[4])\n\
         print('to stderr', file=sys.stderr)\n\
         {then}\n\
         while not os.path.exists({go:?}): time.sleep(0.02)\n\
         print('after')\n",
        go = go.display().to_string()
    )
}

/// On a terminal the job sees one on stdout and stderr with the terminal's size (and keeps
/// its controlling terminal), and a
/// Python print without `-u` reaches the terminal while the job still runs (it waits for a
/// file the test creates only once it has read the line: with a pipe the line would sit in
/// Python's 8 KiB buffer and the run would time out).
#[test]
fn on_a_terminal_the_job_sees_one_and_its_output_is_not_block_buffered() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, go) = (tmp.path().join("r.json"), tmp.path().join("go"));
    let mut term = Term::open(40, 120, false);
    let mut child = KillOnDrop(
        run_cmd(&out)
            .args(["--", "python3", "-c", &probe(&go)])
            .stdout(term.stdio())
            .stderr(term.stdio())
            .spawn()
            .unwrap(),
    );
    eventually(SECS_10, "the job's first line, before it ends", || {
        term.text()
            .contains("isatty True True size (40, 120)\n")
            .then_some(())
            .ok_or_else(|| term.text())
    });
    assert!(!term.text().contains("after"));
    std::fs::write(&go, b"").unwrap();
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status}: {}", term.text());
    term.wait_closed();
    let text = term.text();
    // One terminal, one pty: the job's stdout and stderr keep the order it wrote them in.
    assert!(
        text.contains(&format!(
            "isatty True True size (40, 120)\nctty {}\nto stderr\nafter\n",
            own_ctty()
        )),
        "{text}"
    );
    assert_eq!(report(&out)["run"]["exit"]["code"], 0, "{text}");
}

/// `--no-pty`: pipes, as before: the job sees no terminal, and Python block-buffers its
/// stdout (the line is not on the terminal while the job waits, only once it exits).
#[test]
fn no_pty_gives_the_job_pipes() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, go) = (tmp.path().join("r.json"), tmp.path().join("go"));
    // Two terminals: with pipes, Python writes stdout at exit, after stderr.
    let mut term = Term::open(40, 120, false);
    let mut err = Term::open(40, 120, false);
    // After its lines, the job writes `raw` to its stdout descriptor itself, past Python's
    // buffer: whatever reached that descriptor before it is on the terminal before it.
    let job = probe_then(&go, "os.write(1, b'raw\\n')");
    let mut child = KillOnDrop(
        run_cmd(&out)
            .args(["--no-pty", "--", "python3", "-c", &job])
            .stdout(term.stdio())
            .stderr(err.stdio())
            .spawn()
            .unwrap(),
    );
    // stderr is line-buffered on a pipe too: the job printed its stdout line before this.
    eventually(SECS_10, "the job's stderr line", || {
        err.text().contains("to stderr\n")
    });
    eventually(SECS_10, "the job's direct write to its stdout", || {
        term.text().contains("raw\n")
    });
    // The stdout line printed before `raw` is still in Python's buffer.
    assert!(!term.text().contains("isatty"), "{}", term.text());
    std::fs::write(&go, b"").unwrap();
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status}");
    term.wait_closed();
    err.wait_closed();
    let text = term.text();
    assert!(text.contains("isatty False False size None\n"), "{text}");
    // Written at exit, after the direct write.
    assert!(
        text.find("raw\n") < text.find("isatty"),
        "the buffered line came out first: {text}"
    );
}

/// vramdoc's stdout on a terminal, its stderr to a file: only the job's stdout is a pty,
/// its stderr a pipe whose bytes land in the file.
#[test]
fn a_redirected_stderr_stays_a_pipe_and_separate() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, go) = (tmp.path().join("r.json"), tmp.path().join("go"));
    std::fs::write(&go, b"").unwrap();
    let err_file = tmp.path().join("err");
    let mut term = Term::open(30, 90, false);
    let status = run_cmd(&out)
        .args(["--", "python3", "-c", &probe(&go)])
        .stdout(term.stdio())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    term.wait_closed();
    let text = term.text();
    assert!(text.contains("isatty True False size (30, 90)\n"), "{text}");
    assert!(!text.contains("to stderr"), "{text}");
    let err = std::fs::read_to_string(&err_file).unwrap();
    assert!(err.contains("to stderr\n"), "{err}");
}

/// Every byte value passes unchanged through the pty (no `\n`→`\r\n`: output
/// post-processing is off on the job's side; the test's terminal is raw so it adds none
/// either), and the out-of-memory line the job prints on its stderr pty reaches the report.
#[test]
fn bytes_pass_unchanged_and_the_oom_line_reaches_the_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let mut o = Term::open(24, 80, true);
    let mut e = Term::open(24, 80, true);
    let job = format!(
        "import sys\n\
         sys.stdout.buffer.write(b'<<' + bytes(range(256)) * 64 + b'>>')\n\
         sys.stdout.flush()\n\
         print({OOM:?}, file=sys.stderr)\n\
         sys.exit(3)\n"
    );
    let status = run_cmd(&out)
        .args(["--", "python3", "-c", &job])
        .stdout(o.stdio())
        .stderr(e.stdio())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3));
    o.wait_closed();
    e.wait_closed();
    let mut want = b"<<".to_vec();
    for _ in 0..64 {
        want.extend(0..=255u8);
    }
    want.extend_from_slice(b">>");
    let got = o.bytes();
    assert!(
        got.windows(want.len()).any(|w| w == want.as_slice()),
        "the job's bytes changed on the way: {:?}",
        String::from_utf8_lossy(&got)
    );
    let err = String::from_utf8_lossy(&e.bytes()).into_owned();
    assert!(err.contains(&format!("{OOM}\n")), "{err}");
    let r = report(&out);
    let kinds: Vec<&str> = r["run"]["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"cuda-oom"), "{r}");
}

/// The terminal is resized while the job runs: the job's pty follows (the pass-through
/// process compares the sizes, so this holds after a `kill -9` of vramdoc too).
#[test]
fn the_window_size_follows_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, go) = (tmp.path().join("r.json"), tmp.path().join("go"));
    let mut term = Term::open(40, 120, false);
    let job = format!(
        "import os, time\n\
         print('size', tuple(os.get_terminal_size(1)), flush=True)\n\
         while not os.path.exists({go:?}): time.sleep(0.02)\n\
         end = time.time() + 8\n\
         while tuple(os.get_terminal_size(1)) == (120, 40) and time.time() < end: time.sleep(0.02)\n\
         print('size', tuple(os.get_terminal_size(1)))\n",
        go = go.display().to_string()
    );
    let mut child = KillOnDrop(
        run_cmd(&out)
            // Its private box in the test's directory: nothing left in the system's.
            .env("TMPDIR", tmp.path())
            .args(["--", "python3", "-c", &job])
            .stdout(term.stdio())
            .stderr(term.stdio())
            .spawn()
            .unwrap(),
    );
    eventually(SECS_10, "the job's first size", || {
        term.text().contains("size (120, 40)\n")
    });
    term.resize(50, 132);
    std::fs::write(&go, b"").unwrap();
    assert!(child.0.wait().unwrap().success());
    term.wait_closed();
    assert!(term.text().contains("size (132, 50)\n"), "{}", term.text());
}

/// `kill -9` of vramdoc on a terminal: the job keeps its pty, writes all of its output,
/// which still reaches the terminal, its pty follows a resize of the terminal; the
/// pass-through process then sees the pty's end (EIO) and exits (the terminal's last
/// writer closes it).
#[test]
fn kill_9_of_vramdoc_leaves_the_job_its_terminal_output() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, go) = (tmp.path().join("r.json"), tmp.path().join("go"));
    let flag = tmp.path().join("finished");
    let job = format!(
        "import os, sys, time\n\
         print('started', sys.stdout.isatty())\n\
         while not os.path.exists({go:?}): time.sleep(0.02)\n\
         for i in range(300): print('out', i); print('err', i, file=sys.stderr)\n\
         end = time.time() + 8\n\
         while tuple(os.get_terminal_size(1)) == (120, 40) and time.time() < end: time.sleep(0.02)\n\
         print('size', tuple(os.get_terminal_size(1)))\n\
         open({f:?}, 'w').write('done')\n",
        go = go.display().to_string(),
        f = flag.display().to_string()
    );
    let mut term = Term::open(40, 120, false);
    let mut child = KillOnDrop(
        run_cmd(&out)
            .args(["--", "python3", "-c", &job])
            .stdout(term.stdio())
            .stderr(term.stdio())
            .spawn()
            .unwrap(),
    );
    eventually(SECS_10, "the job started", || {
        term.text().contains("started True\n")
    });
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    term.resize(50, 132); // followed by the pass-through process alone now
    std::fs::write(&go, b"").unwrap();
    eventually(SECS_10, "the job wrote all of its output", || flag.exists());
    term.wait_closed();
    let text = term.text();
    let want: String = (0..300).map(|i| format!("out {i}\nerr {i}\n")).collect();
    assert!(
        text.contains(&format!("started True\n{want}size (132, 50)\n")),
        "{text}"
    );
}

/// vramdoc started as a shell starts a job: the test's terminal is its controlling
/// terminal (and stdin), its process group the foreground one. The job's controlling
/// terminal stays that terminal (not its own pty), and a Ctrl-C typed on it reaches the
/// job as it would without vramdoc; the report is still written.
#[test]
fn job_control_stays_with_the_users_terminal() {
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r.json");
    let term = Term::open(40, 120, false);
    let name = rustix::pty::ptsname(&*term.master, Vec::new()).unwrap();
    let name = name.to_str().unwrap().to_string();
    let job = "import os, signal, sys, time\n\
               signal.signal(signal.SIGINT, signal.SIG_DFL)\n\
               ctty = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[4])\n\
               print('stdin', os.ttyname(0), 'ctty is stdin', ctty == os.fstat(0).st_rdev,\n\
                     'stdout its own', os.ttyname(1) != os.ttyname(0))\n\
               time.sleep(30)\n";
    let mut cmd = run_cmd(&out);
    cmd.args(["--", "python3", "-c", job])
        .stdin(term.stdio())
        .stdout(term.stdio())
        .stderr(term.stdio());
    // SAFETY: setsid and ioctl are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    let want = format!("stdin {name} ctty is stdin True stdout its own True\n");
    eventually(SECS_10, "the job's terminals", || {
        term.text()
            .contains(&want)
            .then_some(())
            .ok_or_else(|| term.text())
    });
    rustix::io::write(&*term.master, b"\x03").unwrap(); // Ctrl-C
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{}", term.text());
    let r = report(&out);
    assert_eq!(r["run"]["exit"]["signal_name"], "SIGINT", "{r}");
}
