//! Following a log file that others append to and rotate: reads only what was appended since
//! the last poll, at most a byte budget per poll (the rest is skipped, and counted), whole
//! lines only, each cut to [`MAX_LINE`] bytes. Rotation (the kubelet renames `0.log` and
//! opens a new one; logrotate does the same with `kern.log`) is noticed by the file's inode
//! under the path: the old file, still open, is read to its end first, then the new one from
//! its start. A file that shrinks (truncated in place) is read again from its start.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Longest line kept (bytes); the rest of a longer line is dropped.
pub const MAX_LINE: usize = 4096;

/// One followed file.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    file: Option<File>,
    ino: u64,
    offset: u64,
    partial: Vec<u8>,
    /// Bytes skipped because a poll's budget was spent.
    pub skipped: u64,
}

impl LogTail {
    /// Follow `path` from its current end (what it holds already is the past).
    pub fn at_end(path: &Path) -> LogTail {
        let mut t = LogTail {
            path: path.to_path_buf(),
            file: None,
            ino: 0,
            offset: 0,
            partial: Vec::new(),
            skipped: 0,
        };
        if let Some((f, ino, len)) = open(path) {
            t.file = Some(f);
            t.ino = ino;
            t.offset = len;
        }
        t
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Switch to another file (a container restarted: `1.log` after `0.log`): what is
    /// left of the current one is read first; the new one is read from its start.
    pub fn switch(&mut self, path: &Path, budget: usize, out: &mut Vec<String>) {
        self.read_current(budget, out);
        self.flush_partial(out);
        self.path = path.to_path_buf();
        self.file = None;
        self.ino = 0;
        self.offset = 0;
    }

    /// The whole lines appended since the last poll, at most `budget` bytes of them.
    pub fn poll(&mut self, budget: usize) -> Vec<String> {
        let mut out = Vec::new();
        let now = std::fs::metadata(&self.path).ok();
        let rotated = match (&now, &self.file) {
            (Some(m), Some(_)) => m.ino() != self.ino,
            _ => false,
        };
        if rotated {
            // The rest of the old file, then the new one from its start.
            self.read_current(budget, &mut out);
            self.flush_partial(&mut out);
            self.file = None;
            self.offset = 0;
        }
        if self.file.is_none() {
            if let Some((f, ino, _)) = open(&self.path) {
                self.file = Some(f);
                self.ino = ino;
                self.offset = 0;
            }
        }
        if let (Some(m), Some(_)) = (&now, &self.file) {
            if m.len() < self.offset && m.ino() == self.ino {
                // Truncated in place.
                self.offset = 0;
                self.partial.clear();
            }
        }
        let left = budget.saturating_sub(out.iter().map(|l| l.len() + 1).sum());
        self.read_current(left, &mut out);
        out
    }

    fn read_current(&mut self, budget: usize, out: &mut Vec<String>) {
        let Some(f) = self.file.as_mut() else {
            return;
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(self.offset);
        if len <= self.offset {
            return;
        }
        let want = len - self.offset;
        if want > budget as u64 {
            // Too much at once: skip to the last `budget` bytes (the newest lines).
            self.skipped += want - budget as u64;
            self.offset = len - budget as u64;
            self.partial.clear();
        }
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::with_capacity((len - self.offset) as usize);
        if f.take(len - self.offset).read_to_end(&mut buf).is_err() {
            return;
        }
        self.offset += buf.len() as u64;
        for b in buf {
            if b == b'\n' {
                let line = std::mem::take(&mut self.partial);
                out.push(String::from_utf8_lossy(&line).into_owned());
            } else if self.partial.len() < MAX_LINE {
                self.partial.push(b);
            }
        }
    }

    /// A last line without its newline, at rotation.
    fn flush_partial(&mut self, out: &mut Vec<String>) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            out.push(String::from_utf8_lossy(&line).into_owned());
        }
    }
}

/// Open a regular file for reading: the file, its inode and its length.
fn open(path: &Path) -> Option<(File, u64, u64)> {
    let m = std::fs::metadata(path).ok()?;
    if !m.is_file() {
        return None;
    }
    let f = File::open(path).ok()?;
    let m = f.metadata().ok()?;
    Some((f, m.ino(), m.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(p: &Path, s: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap();
        f.write_all(s.as_bytes()).unwrap();
    }

    #[test]
    fn follows_appends_rotation_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.log");
        append(&p, "old line\n");
        let mut t = LogTail::at_end(&p);
        assert!(t.poll(1 << 20).is_empty(), "the past is not read");
        append(&p, "one\ntw");
        assert_eq!(t.poll(1 << 20), ["one"]);
        append(&p, "o\n");
        assert_eq!(t.poll(1 << 20), ["two"]);
        // Rotation: a line lands in the old file just before the rename.
        append(&p, "last of old\n");
        std::fs::rename(&p, dir.path().join("0.log.20260101-000000")).unwrap();
        append(&p, "first of new\n");
        assert_eq!(t.poll(1 << 20), ["last of old", "first of new"]);
        // Truncation in place.
        std::fs::write(&p, "").unwrap();
        append(&p, "again\n");
        assert_eq!(t.poll(1 << 20), ["again"]);
    }

    #[test]
    fn a_flood_is_cut_to_the_budget_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.log");
        std::fs::write(&p, "").unwrap();
        let mut t = LogTail::at_end(&p);
        let flood = "x".repeat(99) + "\n";
        append(&p, &flood.repeat(1000));
        append(&p, "the newest\n");
        let lines = t.poll(1000);
        assert_eq!(lines.last().map(String::as_str), Some("the newest"));
        assert!(lines.len() <= 11, "{}", lines.len());
        assert!(t.skipped >= 99_000, "{}", t.skipped);
        // A line longer than MAX_LINE is cut.
        append(&p, &("y".repeat(MAX_LINE * 2) + "\n"));
        assert_eq!(t.poll(1 << 20)[0].len(), MAX_LINE);
    }
}
