//! `--live`: one status line on the terminal while the job runs (elapsed time, the peak so
//! far of every GPU, the job's process count), redrawn in place every [`REDRAW`] as memray's
//! live mode does; off when stderr is not a terminal. The peaks come from the readings the
//! recorder kept (process rounds and markers), not from a driver call of its own.

use crate::record::Recorder;
use crate::units::format_bytes;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often the line is redrawn.
pub const REDRAW: Duration = Duration::from_millis(250);

/// The live status line (does nothing when off).
pub struct Live {
    on: bool,
    /// Physical index of each recorded device, in order.
    indices: Vec<u32>,
    peaks: Vec<u64>,
    /// Readings of the recorder already folded into `peaks`.
    seen: usize,
    last: Option<Instant>,
    started: Instant,
    drawn: bool,
}

impl Live {
    /// On when asked for and stderr is a terminal.
    pub fn new(asked: bool, indices: Vec<u32>) -> Live {
        Live {
            on: asked && std::io::stderr().is_terminal(),
            peaks: vec![0; indices.len()],
            indices,
            seen: 0,
            last: None,
            started: Instant::now(),
            drawn: false,
        }
    }

    /// Redraw when [`REDRAW`] has passed.
    pub fn tick(&mut self, recorder: &Recorder) {
        if !self.on || self.last.is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        self.last = Some(Instant::now());
        let (new, seen) = recorder.peaks_since(self.seen);
        self.seen = seen;
        for (p, n) in self.peaks.iter_mut().zip(new) {
            *p = (*p).max(n);
        }
        let peaks: Vec<(u32, u64)> = self
            .indices
            .iter()
            .copied()
            .zip(self.peaks.clone())
            .collect();
        let line = status_line(
            self.started.elapsed(),
            &peaks,
            recorder.live_members().len(),
            terminal_width(),
        );
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{line}");
        let _ = err.flush();
        self.drawn = true;
    }

    /// Erase the line (before the summary).
    pub fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The status text, at most `width` characters. Pure.
pub fn status_line(
    elapsed: Duration,
    peaks: &[(u32, u64)],
    processes: usize,
    width: usize,
) -> String {
    let mut s = format!("vramdoc {:.1}s", elapsed.as_secs_f64());
    s.push_str(&format!(
        " | {processes} process{}",
        if processes == 1 { "" } else { "es" }
    ));
    s.push_str(" | peak");
    for (i, p) in peaks {
        s.push_str(&format!(" GPU{i} {}", format_bytes(*p)));
    }
    s.chars().take(width.max(10)).collect()
}

/// Columns of the terminal on stderr (80 when unknown), less one so the line never wraps.
fn terminal_width() -> usize {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills a winsize; a failure leaves it zeroed.
    let rc = unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut ws) };
    let cols = if rc == 0 && ws.ws_col > 0 {
        ws.ws_col as usize
    } else {
        80
    };
    cols.saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_every_gpu_s_peak_and_fits_the_width() {
        let l = status_line(
            Duration::from_millis(12_340),
            &[(0, 4 << 30), (2, 0)],
            3,
            200,
        );
        assert_eq!(
            l,
            "vramdoc 12.3s | 3 processes | peak GPU0 4.00 GiB GPU2 0 B"
        );
        let eight: Vec<(u32, u64)> = (0..8).map(|i| (i, 1 << 30)).collect();
        assert_eq!(
            status_line(Duration::ZERO, &eight, 1, 30).chars().count(),
            30
        );
        assert!(status_line(Duration::ZERO, &[], 1, 80).contains("1 process |"));
    }

    #[test]
    fn off_when_stderr_is_not_a_terminal_or_not_asked() {
        assert!(!Live::new(false, vec![0, 1]).on);
        if !std::io::stderr().is_terminal() {
            assert!(!Live::new(true, vec![0, 1]).on);
        }
    }
}
