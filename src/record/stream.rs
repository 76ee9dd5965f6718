//! The JSONL sample stream (`vramdoc run --samples FILE.jsonl`): one [`StreamLine`] per
//! reading, process entry, tree change, marker and error as it is taken, written through a
//! buffer flushed at every line that is not a sampler round and at least every
//! [`FLUSH_EVERY`], so a crash of the job or of vramdoc loses at most that much. The file
//! only ever ends between lines.

use crate::model::{MarkerKind, RunErrorKind};
use serde::Serialize;
use std::io::Write;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest time a streamed sampler round waits in the buffer before it reaches the file.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Version of the JSONL sample stream (the `header` line's `version`).
pub const STREAM_VERSION: u32 = 1;

/// One line of the JSONL sample stream (`--samples FILE.jsonl`); `type` names the variant.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StreamLine {
    /// First line: the devices (by index and UUID) every `memory` line lists in order.
    Header {
        version: u32,
        created_unix_ms: u64,
        devices: Vec<StreamDevice>,
        command: Vec<String>,
        period_us: u64,
        process_period_us: u64,
    },
    /// Used bytes of every device, in header order; `null` for a device that gave no
    /// reading this time (lost, no permission, hung: a gap of that device only).
    Memory { t_ms: f64, used: Vec<Option<u64>> },
    /// One entry of a device's process list; `tree`: the PID belongs to the job.
    Process {
        t_ms: f64,
        device: u32,
        pid: u32,
        used: Option<u64>,
        tree: bool,
    },
    /// A process of the job's tree was first seen.
    Start {
        t_ms: f64,
        pid: u32,
        ppid: Option<u32>,
        nspid: Vec<u32>,
        name: Option<String>,
        cmdline: Option<String>,
    },
    /// A process of the job's tree was seen gone.
    Exit { t_ms: f64, pid: u32 },
    Marker {
        t_ms: f64,
        kind: MarkerKind,
        label: String,
    },
    /// An error line recognised in stderr.
    Error {
        t_ms: f64,
        kind: RunErrorKind,
        device: Option<u32>,
        requested: Option<u64>,
        line: String,
    },
    /// The command ended with this status.
    End { t_ms: f64, status: i32 },
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamDevice {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub total: u64,
}

/// The stream's writer, shared by the process thread, the markers and the sampler's memory
/// thread (which takes this lock alone, never the recorder's, so a slow process-list round
/// never delays a memory sample).
pub(super) struct Sink {
    out: std::io::BufWriter<Box<dyn Write + Send>>,
    /// A write failed, or the `end` line was written: nothing more is written.
    failed: bool,
    last_flush: Instant,
    /// One line, serialised whole before it enters the buffer (so the file only ever ends
    /// between lines, whatever the buffer does).
    line: Vec<u8>,
}

/// A sampler round as a `memory` line, without copying the readings.
#[derive(Serialize)]
struct MemoryLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    t_ms: f64,
    used: &'a [Option<u64>],
}

impl Sink {
    pub(super) fn new(out: Box<dyn Write + Send>) -> Sink {
        Sink {
            out: std::io::BufWriter::with_capacity(64 * 1024, out),
            failed: false,
            last_flush: Instant::now(),
            line: Vec::with_capacity(256),
        }
    }

    fn write<T: Serialize>(&mut self, line: &T, flush: bool) {
        if self.failed {
            return;
        }
        self.line.clear();
        let mut ok = serde_json::to_writer(&mut self.line, line).is_ok();
        self.line.push(b'\n');
        ok = ok && self.out.write_all(&self.line).is_ok();
        if ok && flush {
            ok = self.out.flush().is_ok();
            self.last_flush = Instant::now();
        }
        if !ok {
            // A full disk must not stop the job or the recording in memory.
            self.failed = true;
        }
    }

    /// A line, flushed (with it, any sampler rounds still in the buffer). `end` is the last
    /// line: sampler rounds still to come are not streamed.
    pub(super) fn line(&mut self, line: &StreamLine) {
        self.write(line, true);
        if matches!(line, StreamLine::End { .. }) {
            self.failed = true;
        }
    }

    /// A sampler round; flushed when the next round (one `period` away) would come later
    /// than [`FLUSH_EVERY`] after the last flush.
    pub(super) fn round(&mut self, t_ms: f64, used: &[Option<u64>], period: Duration) {
        let flush = self.last_flush.elapsed() + period >= FLUSH_EVERY;
        self.write(
            &MemoryLine {
                kind: "memory",
                t_ms,
                used,
            },
            flush,
        );
    }

    /// Flush what is buffered (at the end of the recording).
    pub(super) fn flush(&mut self) {
        if !self.failed {
            let _ = self.out.flush();
        }
    }
}

pub(super) fn lock_sink(m: &Mutex<Sink>) -> MutexGuard<'_, Sink> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
