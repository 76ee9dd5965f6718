//! What a recording gives the converter, from either of its two forms: the `run` section of
//! a JSON report, or the `--samples` JSONL stream (also one cut short by a crash: every whole
//! line is used), read line by line in bounded memory ([`from_samples_reader`]). Command
//! lines, environments and process names are never read into it,
//! except to see whether an inference engine claims a share of the card (`engine_claim`:
//! only the engine's name and the word or flag that showed it are kept).

use super::ReproError;
use crate::diagnose::{self, ErrorEvent, ErrorKind, RecordedDevice, RecordedProcess, Recording};
use crate::model::{DeviceSeries, Marker, MarkerKind, ProcessSample, Report, Timeline};
use crate::record::bounded::{ListRuns, Resolution, SeriesBuilder};
use crate::record::stream::{StreamLine, STREAM_VERSION};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// One GPU of the recording (NVML index, product name, total bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceDevice {
    pub index: u32,
    pub name: String,
    pub total: u64,
}

/// An error the job hit, as much of it as a reproduction needs (never its text).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceError {
    pub t_ms: f64,
    pub out_of_memory: bool,
    pub device: Option<u32>,
    pub requested: Option<u64>,
    /// The GPU's free memory the line states (PyTorch's `… of which X is free`, 1.x's `X
    /// free`; `None`: it says none): the state a reproduction must show at the failure.
    pub free: Option<u64>,
}

/// The free memory an out-of-memory `line` states (see [`SourceError::free`]).
pub fn stated_free(out_of_memory: bool, line: &str) -> Option<u64> {
    if !out_of_memory {
        return None;
    }
    crate::record::recognise::oom_detail(line)
        .and_then(|d| d.free)
        .map(|f| f.min(MAX_READING))
}

/// A recording, reduced to the numbers and marker texts a reproduction is made of.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Source {
    pub devices: Vec<SourceDevice>,
    pub series: Vec<DeviceSeries>,
    /// Per-process samples of every process the lists showed (the job's and others').
    pub processes: Vec<ProcessSample>,
    /// PIDs of the job's process tree.
    pub tree: BTreeSet<u32>,
    pub markers: Vec<Marker>,
    pub errors: Vec<SourceError>,
    /// Fingerprint ids the recording raised, most severe first.
    pub findings: Vec<String>,
    /// The recording machine's host name (scrubbed from labels).
    pub hostname: Option<String>,
    /// The stream ended without its `end` line (vramdoc or the machine died).
    pub truncated: bool,
    /// The process-list period, milliseconds (0: unknown).
    pub process_period_ms: f64,
    /// The memory sampling period, milliseconds (0: unknown).
    pub period_ms: f64,
    /// When the command exited (`None`: not recorded, e.g. a crash).
    pub exit_ms: Option<f64>,
    /// An inference engine's claim seen in the job's command or processes (only its name
    /// and the word or flag that showed it are kept): only then do claims scale with the card.
    pub engine: Option<super::engine_claim::EngineClaim>,
}

/// The `run` section of a report. `file` names it in errors.
pub fn from_report(report: &Report, file: &str) -> Result<Source, ReproError> {
    // The body is typed by kind (model::Body): a run report always has its run section, and
    // a file that says `run` without one is refused when read, saying so.
    let Some(run) = report.run() else {
        return Err(ReproError::NotRun {
            file: file.to_string(),
            kind: format!("{:?}", report.kind()).to_ascii_lowercase(),
        });
    };
    let devices = run
        .timeline
        .devices
        .iter()
        .map(|s| SourceDevice {
            index: s.device,
            name: report
                .environment
                .devices
                .iter()
                .find(|d| d.index == s.device)
                .map(|d| d.name.clone())
                .unwrap_or_default(),
            total: s.total,
        })
        .collect();
    let findings = run
        .findings
        .iter()
        .filter(|f| diagnose::ids::FINGERPRINTS.contains(&f.id.as_str()))
        .map(|f| f.id.clone())
        .collect();
    Ok(Source {
        devices,
        series: run.timeline.devices.clone(),
        processes: run.timeline.processes.clone(),
        tree: run.processes.iter().map(|p| p.pid).collect(),
        markers: run.timeline.markers.clone(),
        errors: run
            .errors
            .iter()
            .map(|e| SourceError {
                t_ms: e.t_ms,
                out_of_memory: e.kind.is_out_of_memory(),
                device: e.device,
                requested: e.requested,
                free: stated_free(e.kind.is_out_of_memory(), &e.line),
            })
            .collect(),
        findings,
        hostname: Some(report.environment.hostname.clone()).filter(|h| !h.is_empty()),
        truncated: false,
        process_period_ms: run.process_period_us as f64 / 1000.0,
        period_ms: run.period_us as f64 / 1000.0,
        exit_ms: run
            .timeline
            .markers
            .iter()
            .find(|m| m.kind == MarkerKind::Exit)
            .map(|m| m.t_ms),
        engine: super::engine_claim::detect(
            run.command.iter().map(String::as_str).chain(
                run.processes
                    .iter()
                    .flat_map(|p| p.name.as_deref().into_iter().chain(p.cmdline.as_deref())),
            ),
        ),
    })
}

/// Whether `text` is a `--samples` stream (its first line is a `header`).
pub fn looks_like_samples(text: &str) -> bool {
    first_line_is_header(text.lines().next().unwrap_or("").as_bytes())
}

/// Whether a stream's first line (without its newline) is a `header`.
pub fn first_line_is_header(first: &[u8]) -> bool {
    serde_json::from_slice::<StreamLine>(first)
        .is_ok_and(|l| matches!(l, StreamLine::Header { .. }))
}

/// Most bytes a reading may say (1 PiB): a stream is untrusted input, and sums of many
/// readings must not overflow.
const MAX_READING: u64 = 1 << 50;

/// Longest line of a `--samples` stream (a `start` line carries a process's command line,
/// at most the kernel's 2 MiB of arguments, escaped). A longer one is an error naming it.
pub const MAX_LINE_BYTES: usize = 8 << 20;
/// Markers kept of a stream: the last this many before its first out-of-memory error, and
/// the last this many after it (a conversion uses the last [`super::MAX_MARKER_STEPS`]
/// before the failure).
pub const MAX_MARKERS: usize = 4096;
/// Longest marker label kept, in bytes (a step label is at most
/// [`super::label::MAX_LABEL_CHARS`] characters).
pub const MAX_MARKER_LABEL: usize = 1024;
/// Errors kept of a stream: its first this many, and its first out-of-memory error.
pub const MAX_ERRORS: usize = 4096;
/// Most process samples kept from a stream (16 MiB of them, under the Vec's next doubling
/// at 2^19 with a list's worth of room): past it, every other list round of the older half
/// is dropped, so a stream whose lists keep changing (a new neighbour every few seconds,
/// for a week) converts in bounded memory, its oldest lists the sparsest.
pub const MAX_PROCESS_SAMPLES: usize = 500_000;

/// A `--samples` JSONL stream held in memory (see [`from_samples_reader`]).
pub fn from_samples(text: &str, file: &str) -> Result<Source, ReproError> {
    from_samples_reader(text.as_bytes(), file)
}

/// Why [`next_line`] gave no line.
#[derive(Debug)]
pub enum LineError {
    /// Longer than [`MAX_LINE_BYTES`].
    TooLong,
    Io(std::io::Error),
}

/// The next line of `r` into `buf` (without its newline), at most [`MAX_LINE_BYTES`]:
/// `Some(true)` when it ended with a newline, `Some(false)` when the input ended inside it,
/// `None` at the end of the input.
pub fn next_line<R: std::io::BufRead>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<bool>, LineError> {
    buf.clear();
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LineError::Io(e)),
        };
        if chunk.is_empty() {
            return Ok((!buf.is_empty()).then_some(false));
        }
        let (take, done) = match chunk.iter().position(|c| *c == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if buf.len() + take > MAX_LINE_BYTES {
            return Err(LineError::TooLong);
        }
        buf.extend_from_slice(&chunk[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Some(true));
        }
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// A `--samples` JSONL stream, read line by line in bounded memory: the device series are
/// kept as the recorder keeps a long recording's (`record::bounded`: every sample of the
/// first 10 minutes and around events, envelopes elsewhere), of a run of identical process
/// lists only the first and the last, markers and errors up to [`MAX_MARKERS`] and
/// [`MAX_ERRORS`]. A last line cut in the middle (a crash) is left out, any other bad line
/// is an error naming it. Findings are decided here on what was kept.
pub fn from_samples_reader<R: std::io::BufRead>(r: R, file: &str) -> Result<Source, ReproError> {
    read_samples(r, file, true, MAX_PROCESS_SAMPLES)
}

/// A `--samples` stream with every sample and process list kept (what the reader did
/// before it was bounded: the reference the bounded reading is tested against).
#[cfg(test)]
pub(crate) fn from_samples_whole(text: &str, file: &str) -> Result<Source, ReproError> {
    read_samples(text.as_bytes(), file, false, usize::MAX)
}

/// [`from_samples_reader`] keeping at most `max_processes` process samples (the bound made
/// small, to test it on a small stream).
#[cfg(test)]
pub(crate) fn from_samples_keeping(
    text: &str,
    file: &str,
    max_processes: usize,
) -> Result<Source, ReproError> {
    read_samples(text.as_bytes(), file, true, max_processes)
}

fn read_samples<R: std::io::BufRead>(
    mut r: R,
    file: &str,
    bounded: bool,
    max_processes: usize,
) -> Result<Source, ReproError> {
    let bad_line = |line: usize, message: String| ReproError::BadLine {
        file: file.to_string(),
        line,
        message,
    };
    let mut st = Streamed {
        src: Source {
            truncated: true,
            ..Source::default()
        },
        bounded,
        max_processes,
        ..Streamed::default()
    };
    let mut buf = Vec::new();
    let mut i = 0usize;
    loop {
        let ended = match next_line(&mut r, &mut buf) {
            Ok(Some(ended)) => ended,
            Ok(None) => break,
            Err(LineError::TooLong) => {
                return Err(bad_line(
                    i + 1,
                    format!("longer than {MAX_LINE_BYTES} bytes"),
                ))
            }
            Err(LineError::Io(e)) => {
                return Err(ReproError::Read {
                    file: file.to_string(),
                    message: e.to_string(),
                })
            }
        };
        let n = i;
        i += 1;
        // The input ended inside this line (no newline after it): it is the last one.
        let last = !ended;
        if buf.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let line = match serde_json::from_slice::<StreamLine>(&buf) {
            Ok(l) => l,
            // The file of a crashed run may end inside a line: that line is lost, no more.
            Err(_) if last => break,
            Err(e) => return Err(bad_line(n + 1, e.to_string())),
        };
        if n == 0 && !matches!(line, StreamLine::Header { .. }) {
            return Err(ReproError::NotSamples {
                file: file.to_string(),
            });
        }
        st.line(n, line).map_err(|m| bad_line(m.0, m.1))?;
    }
    st.finish(file)
}

/// What a stream being read has given so far.
#[derive(Default)]
struct Streamed {
    src: Source,
    /// Series and process lists bounded (else every sample kept).
    bounded: bool,
    /// Most process samples kept ([`MAX_PROCESS_SAMPLES`]).
    max_processes: usize,
    series: Vec<SeriesBuilder>,
    runs: ListRuns,
    /// The process list being read: its device and time, and its entries.
    list: Option<(u32, u64, Vec<ProcessSample>)>,
    /// Markers before the first out-of-memory error (the last [`MAX_MARKERS`]), and after.
    before: VecDeque<Marker>,
    after: VecDeque<Marker>,
    first_oom: Option<f64>,
    /// The first out-of-memory error when it came past [`MAX_ERRORS`].
    late_oom: Option<SourceError>,
}

impl Streamed {
    /// The process list being read is complete.
    fn end_list(&mut self) {
        if let Some((device, _, list)) = self.list.take() {
            if self.bounded {
                let kept = self.runs.keep(device, list);
                self.src.processes.extend(kept);
                if self.src.processes.len() > self.max_processes {
                    thin_rounds(&mut self.src.processes);
                }
            } else {
                self.src.processes.extend(list);
            }
        }
    }

    fn event(&mut self, t: f64) {
        for s in &mut self.series {
            s.event(t);
        }
    }

    /// Line `i` (0-based); an error is `(line number, message)`.
    fn line(&mut self, i: usize, line: StreamLine) -> Result<(), (usize, String)> {
        if !matches!(line, StreamLine::Process { .. }) {
            self.end_list();
        }
        let src = &mut self.src;
        match line {
            StreamLine::Header {
                version,
                devices,
                command,
                process_period_us,
                period_us,
                hostname,
                ..
            } => {
                if src.engine.is_none() {
                    src.engine = super::engine_claim::detect(command.iter().map(String::as_str));
                }
                src.hostname = hostname.filter(|h| !h.is_empty());
                src.process_period_ms = process_period_us as f64 / 1000.0;
                src.period_ms = period_us as f64 / 1000.0;
                if i != 0 {
                    return Err((i + 1, "a second header line".into()));
                }
                if version > STREAM_VERSION {
                    return Err((
                        1,
                        format!("stream version {version} is newer than this vramdoc reads ({STREAM_VERSION}); convert it with the vramdoc that wrote it"),
                    ));
                }
                for d in devices {
                    let total = d.total.min(MAX_READING);
                    src.series.push(DeviceSeries {
                        device: d.index,
                        total,
                        samples: Vec::new(),
                    });
                    self.series.push(if self.bounded {
                        SeriesBuilder::new(Resolution::default())
                    } else {
                        SeriesBuilder::unbounded()
                    });
                    src.devices.push(SourceDevice {
                        index: d.index,
                        name: d.name,
                        total,
                    });
                }
            }
            StreamLine::Memory { t_ms, used } => {
                // `null`: that GPU gave no reading this time (a gap of it alone).
                for (s, u) in self.series.iter_mut().zip(used) {
                    if let Some(u) = u {
                        s.push(t_ms, u.min(MAX_READING));
                    }
                }
            }
            StreamLine::Process {
                t_ms,
                device,
                pid,
                used,
                tree,
            } => {
                if tree {
                    src.tree.insert(pid);
                }
                // One device's list of a round: its lines, one after the other, at one time.
                let key = (device, t_ms.to_bits());
                if self.list.as_ref().is_some_and(|l| (l.0, l.1) != key) {
                    self.end_list();
                }
                self.list
                    .get_or_insert_with(|| (device, key.1, Vec::new()))
                    .2
                    .push(ProcessSample {
                        t_ms,
                        device,
                        pid,
                        used: used.map(|u| u.min(MAX_READING)),
                    });
            }
            StreamLine::Start {
                pid, name, cmdline, ..
            } => {
                src.tree.insert(pid);
                if src.engine.is_none() {
                    src.engine = super::engine_claim::detect(
                        name.as_deref().into_iter().chain(cmdline.as_deref()),
                    );
                }
            }
            StreamLine::Marker { t_ms, kind, label } => {
                let m = Marker {
                    t_ms,
                    kind,
                    label: cut(label, MAX_MARKER_LABEL),
                    device: None,
                };
                let keep = match self.first_oom {
                    Some(oom) if t_ms > oom => &mut self.after,
                    _ => &mut self.before,
                };
                if keep.len() == MAX_MARKERS {
                    keep.pop_front();
                }
                keep.push_back(m);
                self.event(t_ms);
            }
            StreamLine::Error {
                t_ms,
                kind,
                device,
                requested,
                line,
            } => {
                let e = SourceError {
                    t_ms,
                    out_of_memory: kind.is_out_of_memory(),
                    device,
                    requested: requested.map(|r| r.min(MAX_READING)),
                    free: stated_free(kind.is_out_of_memory(), &line),
                };
                let first = e.out_of_memory && self.first_oom.is_none_or(|t| t_ms < t);
                if first {
                    self.first_oom = Some(t_ms);
                }
                if src.errors.len() < MAX_ERRORS {
                    src.errors.push(e);
                } else if first {
                    // The first failure is kept past the bound: it is what is reproduced.
                    self.late_oom = Some(e);
                }
                self.event(t_ms);
            }
            StreamLine::End { t_ms, .. } => {
                src.truncated = false;
                src.exit_ms = Some(t_ms);
            }
            StreamLine::Exit { .. } | StreamLine::Unknown => {}
        }
        Ok(())
    }

    fn finish(mut self, file: &str) -> Result<Source, ReproError> {
        self.end_list();
        let mut src = self.src;
        if src.devices.is_empty() && src.series.is_empty() {
            return Err(ReproError::NotSamples {
                file: file.to_string(),
            });
        }
        for (s, b) in src.series.iter_mut().zip(self.series) {
            s.samples = b.finish();
        }
        src.errors.extend(self.late_oom);
        src.processes.extend(self.runs.finish());
        // In the stream's order (rounds in time, devices in turn): the held lists of each
        // device's last run come back last.
        src.processes
            .sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms).then(a.device.cmp(&b.device)));
        let mut markers: Vec<Marker> = self.before.into_iter().chain(self.after).collect();
        markers.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        src.markers = markers;
        // The series and markers move into the recording the rules judge and back (a long
        // stream's series are its largest part: never two copies of them at once).
        let series = std::mem::take(&mut src.series);
        let markers = std::mem::take(&mut src.markers);
        let rec = recording_with(&src, series, markers);
        src.findings = diagnose::fingerprints(&rec, &diagnose::TimelineThresholds::default())
            .into_iter()
            .filter(|f| diagnose::ids::FINGERPRINTS.contains(&f.id.as_str()))
            .map(|f| f.id)
            .collect();
        src.series = rec.timeline.devices;
        src.markers = rec.timeline.markers;
        Ok(src)
    }
}

/// Drop every other list round of each device in the older half of `processes` (rounds:
/// the runs of samples of one device at one time, as the stream gives them).
fn thin_rounds(processes: &mut Vec<ProcessSample>) {
    let mid = processes.len() / 2;
    let mut seen: BTreeMap<u32, u64> = BTreeMap::new();
    let mut round: Option<(u32, u64)> = None;
    let mut keep_round = true;
    let mut i = 0usize;
    processes.retain(|p| {
        let older = i < mid;
        i += 1;
        let key = (p.device, p.t_ms.to_bits());
        if round != Some(key) {
            // A round that straddles the middle is judged by its first sample.
            round = Some(key);
            let n = seen.entry(p.device).or_insert(0);
            keep_round = !older || n.is_multiple_of(2);
            *n += 1;
        }
        keep_round
    });
}

/// The process samples the timeline rules read: the job's tree as recorded, and every
/// other process of a device merged into one under a PID no process has (`u32::MAX - device`):
/// their sum at each of that device's list rounds (0 where none was listed). The rules count
/// other processes in device totals only; one series per device keeps them linear however
/// many PIDs came and went (a stream of 100k neighbour PIDs).
fn merged_processes(src: &Source) -> Vec<ProcessSample> {
    let mut out: Vec<ProcessSample> = Vec::new();
    // Every round of every device, the others' sum in it (non-negative times: bits order).
    let mut others: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for p in &src.processes {
        let key = (p.device, p.t_ms.max(0.0).to_bits());
        let sum = others.entry(key).or_insert(0);
        if src.tree.contains(&p.pid) {
            out.push(p.clone());
        } else if let Some(u) = p.used {
            *sum = sum.saturating_add(u);
        }
    }
    let any_others: BTreeSet<u32> = src
        .processes
        .iter()
        .filter(|p| !src.tree.contains(&p.pid))
        .map(|p| p.device)
        .collect();
    for ((device, t), used) in others {
        if any_others.contains(&device) {
            out.push(ProcessSample {
                t_ms: f64::from_bits(t),
                device,
                pid: u32::MAX - device,
                used: Some(used),
            });
        }
    }
    out.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    out
}

/// The typed recording the timeline rules judge, rebuilt from a source, with the source's
/// series and markers given (taken out of it: moved, never copied).
fn recording_with(src: &Source, series: Vec<DeviceSeries>, markers: Vec<Marker>) -> Recording {
    let processes = merged_processes(src);
    let end_ms = series
        .iter()
        .flat_map(|s| s.samples.last().map(|p| p.0))
        .fold(0.0, f64::max);
    // Each PID's first sighting, in one pass (not a search per PID).
    let mut first: BTreeMap<u32, f64> = BTreeMap::new();
    for p in &processes {
        let e = first.entry(p.pid).or_insert(p.t_ms);
        *e = e.min(p.t_ms);
    }
    let mut pids: BTreeSet<u32> = first.keys().copied().collect();
    pids.extend(src.tree.iter().copied());
    Recording {
        devices: src
            .devices
            .iter()
            .map(|d| RecordedDevice {
                index: d.index,
                uuid: String::new(),
                name: d.name.clone(),
                total: d.total,
                minor: None,
                label: None,
            })
            .collect(),
        timeline: Timeline {
            devices: series,
            markers,
            processes,
            gaps: Vec::new(),
        },
        processes: pids
            .into_iter()
            .map(|pid| {
                RecordedProcess::seen(
                    pid,
                    first.get(&pid).copied().unwrap_or(0.0),
                    src.tree.contains(&pid),
                )
            })
            .collect(),
        errors: src
            .errors
            .iter()
            .map(|e| ErrorEvent {
                t_ms: e.t_ms,
                kind: if e.out_of_memory {
                    ErrorKind::OutOfMemory
                } else {
                    ErrorKind::Other
                },
                device: e.device,
                pid: None,
                line: String::new(),
                requested_bytes: e.requested,
                facts: None,
            })
            .collect(),
        end_ms,
        exit: None,
        device_file_holders: Vec::new(),
        rules_only: Default::default(),
    }
}
