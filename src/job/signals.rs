//! The process's one signal handler, through signal-hook: SIGINT, SIGTERM and SIGHUP are
//! caught once per process (installed on first use) and handled on one thread, as the
//! command in progress chose ([`Mode`]):
//! - [`Mode::Exit`] (the default): end at once — the private `--sim` box removed, one line
//!   on stderr, exit 1;
//! - [`Mode::Graceful`] (replay, serve): set the flag the command polls; it stops cleanly
//!   and writes what it has;
//! - [`Mode::Forward`] (run): also queue the signal with where it came from, so the job
//!   supervisor forwards one sent by another process (`kill`, a scheduler) to the command
//!   and only notes a terminal's Ctrl-C (the kernel, `SI_KERNEL`, which already signalled
//!   the command's process group). A signal vramdoc sent its own process group (the
//!   job's, see `process::own_group`) comes back to it too: it is dropped, not queued.

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::origin::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::{Cause, Origin};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What a caught signal does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Exit = 0,
    Graceful = 1,
    Forward = 2,
}

/// A signal caught in [`Mode::Forward`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub signal: i32,
    /// Sent by the kernel for a terminal (Ctrl-C): the command's process group has it
    /// already. Otherwise sent by a process, to forward.
    pub from_terminal: bool,
}

static MODE: AtomicU8 = AtomicU8::new(Mode::Exit as u8);
static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();
static RECEIVED: Mutex<Vec<Received>> = Mutex::new(Vec::new());
/// The private simulated boxes of this process (`--sim`, `whatif`'s), removed when a signal
/// ends it.
static PRIVATE_BOX: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// `SIGKILL`, `SIGTERM`, … for a signal number (`signal N` when it has no name).
pub fn signal_name(sig: i32) -> String {
    signal_hook::low_level::signal_name(sig)
        .map(str::to_string)
        .unwrap_or_else(|| format!("signal {sig}"))
}

/// The flag SIGINT, SIGTERM and SIGHUP set, with the handler installed (once per process).
pub fn interrupt_flag() -> Arc<AtomicBool> {
    INTERRUPTED
        .get_or_init(|| {
            let flag = Arc::new(AtomicBool::new(false));
            match SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP]) {
                Ok(mut signals) => {
                    let f = flag.clone();
                    let _ = std::thread::Builder::new()
                        .name("vramdoc-signals".into())
                        .spawn(move || {
                            for origin in signals.forever() {
                                on_signal(&f, &origin);
                            }
                        });
                }
                Err(e) => crate::term::eprint_line(&format!(
                    "warning: signal handlers not installed ({e}); a signal ends vramdoc at once"
                )),
            }
            flag
        })
        .clone()
}

fn on_signal(flag: &AtomicBool, origin: &Origin) {
    let own = origin
        .process
        .as_ref()
        .is_some_and(|p| p.pid == std::process::id() as libc::pid_t);
    if own && MODE.load(Ordering::SeqCst) == Mode::Forward as u8 {
        return;
    }
    flag.store(true, Ordering::SeqCst);
    match MODE.load(Ordering::SeqCst) {
        m if m == Mode::Graceful as u8 => {}
        m if m == Mode::Forward as u8 => {
            let received = Received {
                signal: origin.signal,
                from_terminal: matches!(origin.cause, Cause::Kernel),
            };
            RECEIVED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(received);
        }
        _ => {
            remove_private_box();
            crate::term::eprint_line("interrupted");
            std::process::exit(crate::exit::FINDINGS);
        }
    }
}

/// Install the handler in `mode`; returns the flag.
pub fn handle(mode: Mode) -> Arc<AtomicBool> {
    MODE.store(mode as u8, Ordering::SeqCst);
    interrupt_flag()
}

/// For a command that stops cleanly on a signal itself (and writes what it has): the flag
/// to poll.
pub fn handle_gracefully() -> Arc<AtomicBool> {
    handle(Mode::Graceful)
}

/// The signals caught in [`Mode::Forward`] since the last call, in order.
pub fn take_received() -> Vec<Received> {
    std::mem::take(&mut *RECEIVED.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Whether a signal caught in [`Mode::Forward`] waits to be taken (the waits after the
/// command ended stop for it: vramdoc never ignores SIGTERM for long).
pub fn pending() -> bool {
    !RECEIVED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_empty()
}

/// Remove `dir` (a private simulated box) if a signal ends the process; installs the
/// handler.
pub fn remove_on_exit(dir: PathBuf) {
    PRIVATE_BOX
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(dir);
    interrupt_flag();
}

/// `dir` was removed by its owner: a signal has nothing to remove there any more.
pub fn forget_on_exit(dir: &std::path::Path) {
    PRIVATE_BOX
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|d| d != dir);
}

fn remove_private_box() {
    let dirs = PRIVATE_BOX
        .lock()
        .map(|mut p| std::mem::take(&mut *p))
        .unwrap_or_default();
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_by_signal_hook() {
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(0), "signal 0");
    }
}
