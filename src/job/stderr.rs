//! The command's stderr: passed through to vramdoc's own stderr as it comes (the tee), and
//! split into lines for [`StderrWatcher`], which keeps the redacted tail and recognises
//! out-of-memory lines; each recognised line is sent, with when it was read, to the
//! supervisor's loop.

use crate::record::stderr::{ParsedError, StderrWatcher};
use std::io::{Read, Write};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Longest line kept for recognition (the rest of a longer line is passed through only).
const MAX_LINE: usize = 64 * 1024;

/// Tee `pipe` to stderr on a thread, feeding `watcher`; recognised lines go to `tx` with
/// their time in ms since `t0`.
pub fn tee(
    mut pipe: std::process::ChildStderr,
    watcher: Arc<Mutex<StderrWatcher>>,
    tx: mpsc::Sender<(f64, ParsedError)>,
    t0: Instant,
) {
    let _ = std::thread::Builder::new()
        .name("vramdoc-stderr".into())
        .spawn(move || {
            let mut buf = [0u8; 8192];
            let mut line: Vec<u8> = Vec::new();
            let take = |line: &mut Vec<u8>| {
                if line.is_empty() {
                    return;
                }
                let text = String::from_utf8_lossy(line).into_owned();
                line.clear();
                let found = watcher
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .line(&text);
                if let Some(f) = found {
                    let _ = tx.send((t0.elapsed().as_secs_f64() * 1000.0, f));
                }
            };
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                // Pass through first: the user sees the command's stderr as it comes.
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(&buf[..n]).and_then(|_| err.flush());
                drop(err);
                for b in &buf[..n] {
                    match b {
                        b'\n' | b'\r' => take(&mut line),
                        _ if line.len() < MAX_LINE => line.push(*b),
                        _ => {}
                    }
                }
            }
            take(&mut line);
        });
}
