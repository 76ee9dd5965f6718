//! Markers from the job: `vramdoc mark TEXT` appends one line to the file named by
//! `$VRAMDOC_MARKERS`, which the supervisor tails; each complete line becomes a marker
//! (`release` when its first word says so).

use crate::model::MarkerKind;
use std::io::{Read, Write};
use std::path::Path;
use thiserror::Error;

/// The environment variable naming the marker file.
pub const MARKERS_ENV: &str = "VRAMDOC_MARKERS";

/// Why `vramdoc mark` could not write its line.
#[derive(Debug, Error)]
pub enum MarkError {
    #[error("{MARKERS_ENV} is not set: `vramdoc mark` works inside a command started by `vramdoc run -- CMD`")]
    NotInRun,
    #[error("{path}: {source} (set by `vramdoc run` in {MARKERS_ENV})")]
    Open {
        path: String,
        source: std::io::Error,
    },
    /// The path is a FIFO, a socket or a device (a FIFO with no reader would block the
    /// job's `vramdoc mark` forever): `vramdoc run` always makes a regular file.
    #[error(
        "{path} is not a regular file (set by `vramdoc run` in {MARKERS_ENV}, which makes one)"
    )]
    NotAFile { path: String },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// Append `text` (newlines folded) as one line to `$VRAMDOC_MARKERS` ([`append_line`]).
pub fn mark(text: &str) -> Result<(), MarkError> {
    let path = std::env::var_os(MARKERS_ENV)
        .filter(|v| !v.is_empty())
        .ok_or(MarkError::NotInRun)?;
    append_line(Path::new(&path), text)
}

/// Append `text` (newlines folded) as one line to the marker file `path` (that of `vramdoc
/// run`, or of `run --pid`). The file is opened without blocking (`O_NONBLOCK`: a FIFO with
/// no reader fails at once with `ENXIO` instead of hanging the job) and refused unless it is a
/// regular file.
pub(super) fn append_line(path: &Path, text: &str) -> Result<(), MarkError> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display().to_string();
    let text = text.replace(['\n', '\r'], " ");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(libc::ENXIO) => MarkError::NotAFile {
                path: shown.clone(),
            },
            _ => MarkError::Open {
                path: shown.clone(),
                source,
            },
        })?;
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(MarkError::NotAFile { path: shown });
    }
    // One write, so concurrent markers from several processes never interleave.
    f.write_all(format!("{text}\n").as_bytes())
        .map_err(|source| MarkError::Write {
            path: shown,
            source,
        })
}

/// Markers recorded per run; the rest are counted ("N markers dropped" in the report), so a
/// burst of markers (a loop calling `vramdoc mark`) costs bounded time and memory.
pub const MAX_MARKERS: usize = 10_000;
/// Bytes read from the marker file per poll: the supervisor's loop gets back to signals and
/// reaping between reads.
const READ_BUDGET: u64 = 4 << 20;
/// A line longer than this is cut (a writer that never ends its line does not grow memory).
const MAX_PARTIAL: usize = 4096;

/// The marker file, tailed: complete lines appended since the last poll, at most
/// [`MAX_MARKERS`] in all.
pub struct MarkerTail {
    file: std::fs::File,
    partial: Vec<u8>,
    taken: usize,
    dropped: u64,
    /// The last poll read its whole budget: there may be more.
    more: bool,
    /// When the last poll read the file (ms since the job's start; [`Self::poll_at`]).
    polled_ms: f64,
}

impl MarkerTail {
    pub fn open(path: &Path) -> std::io::Result<MarkerTail> {
        Ok(MarkerTail {
            file: std::fs::File::open(path)?,
            partial: Vec::new(),
            taken: 0,
            dropped: 0,
            more: false,
            polled_ms: 0.0,
        })
    }

    /// [`Self::poll`] at `now_ms`, with the earliest time the lines can have been written:
    /// the previous poll's (a line written before it would have been read then). That is
    /// the time a marker is recorded at: the level at a phase boundary is memory before the
    /// marker was written, never memory the next phase allocated while vramdoc had not yet
    /// looked (a job claims memory microseconds after its marker).
    pub fn poll_at(&mut self, now_ms: f64) -> (f64, Vec<String>) {
        let since = self.polled_ms.min(now_ms);
        self.polled_ms = now_ms;
        (since, self.poll())
    }

    /// Lines over [`MAX_MARKERS`], counted and not recorded.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Whether the last poll stopped at its read budget (more may be waiting).
    pub fn more(&self) -> bool {
        self.more
    }

    /// The lines completed since the last poll (from at most 4 MiB read), cleaned and
    /// redacted; linear in what was read.
    pub fn poll(&mut self) -> Vec<String> {
        let mut buf = Vec::new();
        let n = (&mut self.file)
            .take(READ_BUDGET)
            .read_to_end(&mut buf)
            .unwrap_or(0);
        self.more = n as u64 == READ_BUDGET;
        let mut lines = Vec::new();
        let mut rest = &buf[..];
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            let seg = &rest[..i];
            rest = &rest[i + 1..];
            if self.taken >= MAX_MARKERS {
                // Over the cap: counted only (a partial line is dropped with it).
                self.partial.clear();
                self.dropped += 1;
                continue;
            }
            let room = MAX_PARTIAL.saturating_sub(self.partial.len());
            self.partial.extend_from_slice(&seg[..seg.len().min(room)]);
            let text = marker_text(&String::from_utf8_lossy(&self.partial));
            self.partial.clear();
            if !text.is_empty() {
                self.taken += 1;
                lines.push(text);
            }
        }
        let room = MAX_PARTIAL.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&rest[..rest.len().min(room)]);
        lines
    }
}

/// A marker line as shown: cleaned, redacted, at most 200 characters.
pub fn marker_text(line: &str) -> String {
    let clean = crate::term::one_line(line.trim());
    crate::redact::redact_text(clean.trim())
        .chars()
        .take(200)
        .collect()
}

/// `release` for a line whose first word is `release` (drives `not-released`), else `marker`.
pub fn marker_kind(text: &str) -> MarkerKind {
    let first = text.split_whitespace().next().unwrap_or("");
    if first.eq_ignore_ascii_case("release") || first.eq_ignore_ascii_case("release:") {
        MarkerKind::Release
    } else {
        MarkerKind::Marker
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_markers_and_marker_text() {
        assert_eq!(marker_kind("release model"), MarkerKind::Release);
        assert_eq!(marker_kind("Release: shards"), MarkerKind::Release);
        assert_eq!(marker_kind("released"), MarkerKind::Marker);
        assert_eq!(marker_kind("load model"), MarkerKind::Marker);
        assert_eq!(
            marker_text("  load\x1b[31m --token=abcdefgh123  "),
            "load [31m --token=«redacted»"
        );
    }

    #[test]
    fn the_tail_yields_complete_lines_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m");
        std::fs::write(&path, b"").unwrap();
        let mut tail = MarkerTail::open(&path).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"one\ntw").unwrap();
        assert_eq!(tail.poll(), vec!["one".to_string()]);
        f.write_all(b"o\n").unwrap();
        assert_eq!(tail.poll(), vec!["two".to_string()]);
        assert!(tail.poll().is_empty());
    }

    #[test]
    fn a_burst_of_markers_is_capped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m");
        let burst: String = (0..MAX_MARKERS + 2500).map(|i| format!("m{i}\n")).collect();
        std::fs::write(&path, burst).unwrap();
        let mut tail = MarkerTail::open(&path).unwrap();
        let lines = tail.poll();
        assert_eq!(lines.len(), MAX_MARKERS);
        assert_eq!(lines.last().map(String::as_str), Some("m9999"));
        assert_eq!(tail.dropped(), 2500);
        assert!(!tail.more());
    }
}
