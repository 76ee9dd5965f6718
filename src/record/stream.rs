//! The JSONL sample stream (`vramdoc run --samples FILE.jsonl`): one [`StreamLine`] per
//! reading, process entry, tree change, marker and error as it is taken, written through a
//! buffer flushed at every line that is not a sampler round and at least every
//! [`FLUSH_EVERY`], so a crash of the job or of vramdoc loses at most that much. The file
//! only ever ends between lines. [`StreamLine`] is the format's one schema: this writer and
//! the reader (`repro::source`) both use it.

use crate::model::{MarkerKind, RunErrorKind};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest time a streamed sampler round waits in the buffer before it reaches the file.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Version of the JSONL sample stream (the `header` line's `version`).
pub const STREAM_VERSION: u32 = 1;

/// One line of the JSONL sample stream (`--samples FILE.jsonl`); `type` names the variant.
/// Written by [`Sink`], read back by `repro::source` (fields a reader may miss in an older
/// or hand-made stream default; a line type this version does not know reads as
/// [`StreamLine::Unknown`], never written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StreamLine {
    /// First line: the devices (by index and UUID) every `memory` line lists in order.
    Header {
        version: u32,
        #[serde(default)]
        created_unix_ms: u64,
        devices: Vec<StreamDevice>,
        #[serde(default)]
        command: Vec<String>,
        #[serde(default)]
        period_us: u64,
        #[serde(default)]
        process_period_us: u64,
        /// The recording machine's host name (a converter scrubs it from labels).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hostname: Option<String>,
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
        #[serde(default)]
        tree: bool,
    },
    /// A process of the job's tree was first seen.
    Start {
        #[serde(default)]
        t_ms: f64,
        pid: u32,
        #[serde(default)]
        ppid: Option<u32>,
        #[serde(default)]
        nspid: Vec<u32>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
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
        #[serde(default)]
        device: Option<u32>,
        #[serde(default)]
        requested: Option<u64>,
        #[serde(default)]
        line: String,
    },
    /// The command ended with this status.
    End {
        t_ms: f64,
        #[serde(default)]
        status: i32,
    },
    /// A line type this version does not know (a newer writer's): read, skipped; never
    /// written.
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamDevice {
    pub index: u32,
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
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
        // The one schema: a copy of a few readings per round.
        self.write(
            &StreamLine::Memory {
                t_ms,
                used: used.to_vec(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line the writer makes reads back as itself, gaps (`null`) included.
    #[test]
    fn lines_round_trip_through_the_one_schema_gaps_included() {
        let lines = vec![
            StreamLine::Header {
                version: STREAM_VERSION,
                created_unix_ms: 1,
                devices: vec![StreamDevice {
                    index: 0,
                    uuid: "GPU-0".into(),
                    name: "T4".into(),
                    total: 16,
                }],
                command: vec!["python".into()],
                period_us: 100_000,
                process_period_us: 500_000,
                hostname: Some("node7".into()),
            },
            StreamLine::Memory {
                t_ms: 1.5,
                used: vec![Some(3), None],
            },
            StreamLine::Process {
                t_ms: 2.0,
                device: 1,
                pid: 7,
                used: None,
                tree: true,
            },
            StreamLine::Exit { t_ms: 3.0, pid: 7 },
            StreamLine::End {
                t_ms: 4.0,
                status: 1,
            },
        ];
        let mut out: Vec<u8> = Vec::new();
        {
            let buf = std::sync::Arc::new(Mutex::new(Vec::new()));
            struct W(std::sync::Arc<Mutex<Vec<u8>>>);
            impl Write for W {
                fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                    lock(&self.0).extend_from_slice(b);
                    Ok(b.len())
                }
                fn flush(&mut self) -> std::io::Result<()> {
                    Ok(())
                }
            }
            fn lock(m: &Mutex<Vec<u8>>) -> MutexGuard<'_, Vec<u8>> {
                m.lock().unwrap_or_else(|e| e.into_inner())
            }
            let mut sink = Sink::new(Box::new(W(buf.clone())));
            sink.line(&lines[0]);
            sink.round(1.5, &[Some(3), None], Duration::from_secs(1));
            for l in &lines[2..] {
                sink.line(l);
            }
            sink.flush();
            out.extend_from_slice(&lock(&buf));
        }
        let text = String::from_utf8(out).unwrap();
        let back: Vec<StreamLine> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, lines);
        let unknown: StreamLine = serde_json::from_str(r#"{"type":"later","x":1}"#).unwrap();
        assert_eq!(unknown, StreamLine::Unknown);
    }
}
