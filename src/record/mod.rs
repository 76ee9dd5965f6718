//! The shared recorder behind `replay` and `run`: the [`Sampler`] (device memory every
//! period) plus a tracker thread (per-process lists, the job's process tree through
//! [`tree`], one memory reading per round) plus the event and marker stream. Every marker
//! and every step boundary also takes a memory reading, so a chart shows each step even
//! when it lasts less than one period. With a sink, every reading (each sampler round
//! included), process, marker and error is streamed as one JSON line as it is taken, through
//! a buffer flushed at every line that is not a sampler round and at least every
//! [`FLUSH_EVERY`], so a crash of the job or of vramdoc loses at most that much.

pub mod recording;
pub mod sampler;
pub mod stderr;
pub mod tree;

use crate::gpu::{DeviceInfo, Monitor};
use crate::report::{DevicePeak, DeviceSeries, Marker, ProcessSample, Timeline};
use sampler::{pace, Sampler, SamplerConfig, StopSignal};
use serde::Serialize;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tree::{ProcessTree, TreeChange, TreeProcess};

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
    /// Used bytes of every device, in header order.
    Memory { t_ms: f64, used: Vec<u64> },
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
        kind: String,
        label: String,
    },
    /// An error line recognised in stderr.
    Error {
        t_ms: f64,
        kind: String,
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

/// How to record.
pub struct RecorderConfig {
    pub sampler: SamplerConfig,
    /// Track the descendants of this PID (`run`: vramdoc itself, a child subreaper).
    pub tree_root: Option<u32>,
    /// Period of the tracker thread (process lists, tree, streamed memory); `None`: no
    /// tracker thread (replay reads process lists through the sampler).
    pub track_period: Option<Duration>,
    /// Where to stream JSON lines.
    pub sink: Option<Box<dyn Write + Send>>,
    /// The stream's first line, written before any thread starts.
    pub header: Option<StreamLine>,
    /// Physical indices whose process lists the sampler reads on its own thread (replay:
    /// the worker's devices); `None`: every recorded device. Empty: none.
    pub process_devices: Option<Vec<u32>>,
}

impl RecorderConfig {
    /// What replay uses: the sampler alone, no tree, no stream.
    pub fn sampler_only(sampler: SamplerConfig) -> RecorderConfig {
        RecorderConfig {
            sampler,
            tree_root: None,
            track_period: None,
            sink: None,
            header: None,
            process_devices: None,
        }
    }
}

/// The JSONL stream: a buffered writer shared by the tracker, the markers and the
/// sampler's memory thread (which takes this lock alone, never [`Shared`]'s, so a slow
/// process-list round never delays a memory sample).
struct Sink {
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
    used: &'a [u64],
}

impl Sink {
    fn new(out: Box<dyn Write + Send>) -> Sink {
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

    /// A sampler round; flushed when the next round (one `period` away) would come later
    /// than [`FLUSH_EVERY`] after the last flush.
    fn round(&mut self, t_ms: f64, used: &[u64], period: Duration) {
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
}

fn lock_sink(m: &Mutex<Sink>) -> MutexGuard<'_, Sink> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Shared {
    markers: Vec<Marker>,
    /// Readings besides the sampler's: marker and step boundaries, tracker rounds.
    points: Vec<(f64, Vec<u64>)>,
    processes: Vec<ProcessSample>,
    tree: Option<ProcessTree>,
    sink: Option<Arc<Mutex<Sink>>>,
    monitor: Option<Box<dyn Monitor>>,
    errors: u64,
}

impl Shared {
    /// Stream a line and flush (with it, any sampler rounds still in the buffer).
    fn stream(&mut self, line: &StreamLine) {
        if let Some(s) = self.sink.as_ref() {
            let mut sink = lock_sink(s);
            sink.write(line, true);
            // `end` is the last line: sampler rounds still to come are not streamed.
            if matches!(line, StreamLine::End { .. }) {
                sink.failed = true;
            }
        }
    }

    fn read_memory(&mut self, devices: &[u32], t: f64) -> Option<Vec<u64>> {
        let mon = self.monitor.as_ref()?;
        let mut used = Vec::with_capacity(devices.len());
        for d in devices {
            match mon.memory(*d) {
                Ok(m) => used.push(m.used),
                Err(_) => {
                    self.errors += 1;
                    return None;
                }
            }
        }
        self.points.push((t, used.clone()));
        self.stream(&StreamLine::Memory {
            t_ms: t,
            used: used.clone(),
        });
        Some(used)
    }

    fn tree_changes(&mut self, changes: Vec<TreeChange>) {
        for c in changes {
            let line = match c {
                TreeChange::Started(tp) => StreamLine::Start {
                    t_ms: tp.start_ms,
                    pid: tp.pid,
                    ppid: tp.ppid,
                    nspid: tp.nspid,
                    name: tp.name,
                    cmdline: tp.cmdline,
                },
                TreeChange::Exited { pid, t_ms } => StreamLine::Exit { t_ms, pid },
            };
            self.stream(&line);
        }
    }

    /// One tracker round: the tree, then memory and process lists.
    fn round(&mut self, devices: &[u32], t: f64) {
        if let Some(tree) = self.tree.as_mut() {
            let changes = tree.refresh(t);
            self.tree_changes(changes);
        }
        self.read_memory(devices, t);
        for d in devices {
            let Some(list) = self.monitor.as_ref().map(|m| m.processes(*d)) else {
                return;
            };
            let Ok(list) = list else {
                self.errors += 1;
                continue;
            };
            for p in list {
                let (pid, tree) = match self.tree.as_mut() {
                    Some(tree) => {
                        let (member, change) = tree.resolve(p.pid, t);
                        self.tree_changes(change.into_iter().collect());
                        (member.unwrap_or(p.pid), member.is_some())
                    }
                    None => (p.pid, false),
                };
                self.processes.push(ProcessSample {
                    t_ms: t,
                    device: *d,
                    pid,
                    used: p.used,
                });
                self.stream(&StreamLine::Process {
                    t_ms: t,
                    device: *d,
                    pid,
                    used: p.used,
                    tree,
                });
            }
        }
    }
}

/// A running recording.
pub struct Recorder {
    t0: Instant,
    devices: Vec<u32>,
    totals: Vec<u64>,
    sampler: Option<Sampler>,
    shared: Arc<Mutex<Shared>>,
    /// Set to stop the tracker thread (it wakes at once).
    stop: Arc<StopSignal>,
    tracker: Option<JoinHandle<()>>,
}

/// What a recording holds at its end.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// Device series (sampler and boundary readings merged, in time order), markers and
    /// per-process samples.
    pub timeline: Timeline,
    /// Peak used bytes per device, with when.
    pub peaks: Vec<DevicePeak>,
    /// Every process of the job's tree (empty without a tree).
    pub tree: Vec<TreeProcess>,
    /// Sampler memory rounds.
    pub rounds: u64,
    /// Failed queries (device lost, ...).
    pub errors: u64,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Recorder {
    /// Start recording `devices`. `sampler_monitor` is the sampler thread's own;
    /// `monitor` (optional) serves boundary readings and the tracker thread.
    pub fn start(
        sampler_monitor: Box<dyn Monitor>,
        monitor: Option<Box<dyn Monitor>>,
        devices: &[DeviceInfo],
        t0: Instant,
        cfg: RecorderConfig,
    ) -> Recorder {
        let indices: Vec<u32> = devices.iter().map(|d| d.index).collect();
        let totals: Vec<u64> = devices.iter().map(|d| d.memory.total).collect();
        let process_devices = cfg
            .process_devices
            .clone()
            .unwrap_or_else(|| indices.clone());
        let sink = cfg.sink.map(|out| Arc::new(Mutex::new(Sink::new(out))));
        let shared = Arc::new(Mutex::new(Shared {
            markers: Vec::new(),
            points: Vec::new(),
            processes: Vec::new(),
            tree: cfg.tree_root.map(|r| ProcessTree::new(r, false)),
            sink: sink.clone(),
            monitor,
            errors: 0,
        }));
        // The header first, before any thread can write.
        if let Some(h) = &cfg.header {
            lock(&shared).stream(h);
        }
        let period = cfg.sampler.period;
        let on_round = sink.map(|sink| {
            Box::new(move |t: f64, used: &[u64]| lock_sink(&sink).round(t, used, period))
                as crate::record::sampler::OnRound
        });
        let sampler = Sampler::start_with(
            sampler_monitor,
            indices
                .iter()
                .copied()
                .zip(totals.iter().copied())
                .collect(),
            process_devices,
            t0,
            cfg.sampler,
            on_round,
        );
        let stop = Arc::new(StopSignal::default());
        let tracker = cfg.track_period.and_then(|period| {
            let (shared, stop, devs) = (shared.clone(), stop.clone(), indices.clone());
            std::thread::Builder::new()
                .name("vramdoc-tracker".into())
                .spawn(move || {
                    let mut next = Instant::now();
                    while !stop.is_set() {
                        let t = t0.elapsed().as_secs_f64() * 1000.0;
                        lock(&shared).round(&devs, t);
                        pace(&mut next, period, &stop);
                    }
                })
                .ok()
        });
        Recorder {
            t0,
            devices: indices,
            totals,
            sampler: Some(sampler),
            shared,
            stop,
            tracker,
        }
    }

    /// Milliseconds since the recording's start instant.
    pub fn t_ms(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1000.0
    }

    /// Stream a line (header, error, end, ...).
    pub fn stream(&self, line: &StreamLine) {
        lock(&self.shared).stream(line);
    }

    /// Add a marker, with a memory reading at that moment (when the recorder has a monitor).
    pub fn mark(&self, kind: &str, label: &str, device: Option<u32>) -> f64 {
        let t = self.t_ms();
        let mut s = lock(&self.shared);
        s.read_memory(&self.devices, t);
        s.markers.push(Marker {
            t_ms: t,
            kind: kind.to_string(),
            label: label.to_string(),
            device,
        });
        s.stream(&StreamLine::Marker {
            t_ms: t,
            kind: kind.to_string(),
            label: label.to_string(),
        });
        t
    }

    /// Add a memory reading taken elsewhere (replay's step boundaries), in device order.
    pub fn point(&self, t_ms: f64, used: Vec<u64>) {
        lock(&self.shared).points.push((t_ms, used));
    }

    /// Read every device's memory now through the recorder's monitor (one boundary point).
    pub fn reading(&self) -> Option<Vec<u64>> {
        let t = self.t_ms();
        lock(&self.shared).read_memory(&self.devices, t)
    }

    /// One tracker round now (tree, memory, process lists), e.g. right after the job ends.
    pub fn round(&self) {
        let t = self.t_ms();
        lock(&self.shared).round(&self.devices, t);
    }

    /// Stop every thread and return the recording.
    pub fn finish(mut self) -> Recorded {
        self.stop.set();
        if let Some(h) = self.tracker.take() {
            let _ = h.join();
        }
        let samples = self.sampler.take().map(Sampler::stop).unwrap_or_default();
        let t_end = self.t_ms();
        let mut s = lock(&self.shared);
        if let Some(sink) = s.sink.as_ref() {
            let mut sink = lock_sink(sink);
            if !sink.failed {
                let _ = sink.out.flush();
            }
        }
        let mut devices: Vec<DeviceSeries> = if samples.devices.len() == self.devices.len() {
            samples.devices
        } else {
            self.devices
                .iter()
                .zip(&self.totals)
                .map(|(d, t)| DeviceSeries {
                    device: *d,
                    total: *t,
                    samples: Vec::new(),
                })
                .collect()
        };
        for (t, used) in &s.points {
            for (i, series) in devices.iter_mut().enumerate() {
                if let Some(u) = used.get(i) {
                    series.samples.push((*t, *u));
                }
            }
        }
        for series in devices.iter_mut() {
            series.samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let peaks = devices
            .iter()
            .map(|series| {
                let (t_ms, peak_used) = series
                    .samples
                    .iter()
                    .copied()
                    .max_by_key(|(_, u)| *u)
                    .unwrap_or((0.0, 0));
                DevicePeak {
                    device: series.device,
                    total: series.total,
                    peak_used,
                    t_ms,
                }
            })
            .collect();
        let mut processes = std::mem::take(&mut s.processes);
        processes.extend(samples.processes);
        processes.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        let tree = match s.tree.as_mut() {
            Some(tree) => {
                tree.end_all(t_end);
                tree.all()
            }
            None => Vec::new(),
        };
        let mut markers = std::mem::take(&mut s.markers);
        markers.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        Recorded {
            timeline: Timeline {
                devices,
                markers,
                processes,
                gaps: samples.gaps,
            },
            peaks,
            tree,
            rounds: samples.rounds,
            errors: samples.errors + s.errors,
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.set();
        if let Some(h) = self.tracker.take() {
            let _ = h.join();
        }
    }
}
