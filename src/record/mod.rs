//! The one recording pipeline behind `run` and `replay`. A [`Recorder`] reads device memory
//! on the [`Sampler`]'s thread, process lists (and the job's process tree, through [`tree`])
//! on its process thread ([`processes`]), and takes what the job supervisor (`job/`) or the
//! replay engine feed it: markers and step boundaries (each with a memory reading, so a chart
//! shows a step shorter than one period), readings, error events and the job's processes.
//! With a sink, everything is streamed as JSON lines as it is taken ([`stream`]). Every NVML
//! call goes through [`lanes`] (a worker per device and kind of call, waited on with a
//! deadline), so no caller — the job's main loop included — ever waits on a hung driver: a
//! hung call is a gap on that GPU.
//! [`Recorder::finish`] returns the typed [`Recording`] the timeline rules judge, with the
//! timeline as reports show it and the per-device peaks: nothing else builds a recording.

pub mod bounded;
pub mod devmap;
pub mod holders;
pub mod lines;
pub mod membership;
pub mod mig;
pub mod policy;
pub mod processes;
pub mod reading;
pub mod recognise;
pub mod recording;
pub mod sampler;
mod shared;
pub mod stderr;
pub mod stream;
pub mod tree;

pub use reading::Reading;
pub use recording::{
    DeviceFileHolder, ErrorEvent, ErrorKind, JobExit, RecordedDevice, RecordedProcess, Recording,
    RulesOnly,
};
pub use stream::{StreamDevice, StreamLine, FLUSH_EVERY, STREAM_VERSION};

use crate::gpu::lanes::Lanes;
use crate::gpu::{DeviceInfo, Monitor};
use crate::model::{DevicePeak, DeviceSeries, Marker, MarkerKind, ProcessSample, Timeline};
use bounded::{ListRuns, Resolution, SeriesBuilder};
use policy::ListPolicy;
use processes::{ProcessLists, RoundInput};
use sampler::{ms_since, pace, Latest, Sampler, SamplerConfig, StopSignal};
use shared::{lock, lock_series, Series, Shared};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;
use stream::{lock_sink, Sink};
use tree::{ProcessTree, TreeProcess};

/// How to record.
pub struct RecorderConfig {
    /// Memory period, and the process-list period (`None`: no process lists, no tree).
    pub sampler: SamplerConfig,
    /// Physical indices whose process lists are read (replay: the worker's devices);
    /// `None`: every recorded device.
    pub process_devices: Option<Vec<u32>>,
    /// Which processes are the job's (`run`: the descendants of vramdoc itself, a child
    /// subreaper, and the processes its membership rules add; see [`tree::Scope`]).
    pub tree: Option<tree::Scope>,
    /// Take (and stream) a memory reading at every process round too (`run`).
    pub round_readings: bool,
    /// Which process lists a round reads: all of them, or only where they can have changed
    /// (the default: see [`policy`]).
    pub list_policy: ListPolicy,
    /// Where to stream JSON lines.
    pub sink: Option<Box<dyn Write + Send>>,
    /// The stream's first line, written before any thread starts.
    pub header: Option<StreamLine>,
    /// How finely device series and process samples are kept (`None`: every sample as
    /// taken). The default bounds a multi-day job ([`bounded`]).
    pub resolution: Option<Resolution>,
    /// Run on the sampler thread before each round's readings (`run`: the marker file).
    pub before_round: Option<sampler::BeforeRound>,
}

impl RecorderConfig {
    /// Memory and process lists at `sampler`'s cadence on every device; no tree, no stream.
    pub fn new(sampler: SamplerConfig) -> RecorderConfig {
        RecorderConfig {
            sampler,
            process_devices: None,
            tree: None,
            round_readings: false,
            list_policy: ListPolicy::OnChange(policy::OnChange::default()),
            sink: None,
            header: None,
            resolution: Some(Resolution::default()),
            before_round: None,
        }
    }
}

/// How the job ended, for the recording.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobEnd {
    /// When (ms since the recording's start).
    pub end_ms: f64,
    pub exit: Option<JobExit>,
}

/// What a recording holds at its end.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// What the timeline rules judge: the one timeline (device series — sampler and
    /// boundary readings merged, in time order —, markers, per-process samples and sampling
    /// gaps, as reports show it), the boundaries fed for the rules only, the job's
    /// processes, its errors and its end.
    pub recording: Recording,
    /// Peak used bytes per device, with when.
    pub peaks: Vec<DevicePeak>,
    /// Every process of the job's tree (empty without a tree).
    pub tree: Vec<TreeProcess>,
    /// Memory rounds of the sampler.
    pub rounds: u64,
    /// Failed queries (device lost, ...).
    pub errors: u64,
}

/// A running recording.
pub struct Recorder {
    t0: Instant,
    devices: Vec<RecordedDevice>,
    monitor: Arc<dyn Monitor>,
    lanes: Arc<Lanes>,
    sampler: Option<Sampler>,
    shared: Arc<Mutex<Shared>>,
    lists: Option<Arc<Mutex<ProcessLists>>>,
    latest: Latest,
    /// The devices as error lines are mapped onto them ([`devmap`]).
    map: Vec<devmap::MapDevice>,
    round_readings: bool,
    /// Set to stop the process thread (it wakes at once).
    stop: Arc<StopSignal>,
    process_thread: Option<JoinHandle<()>>,
}

/// Used bytes of every device in `devices` order (all at once, through the lanes); `None`
/// for a device whose query failed or hung.
fn read_memory(lanes: &Lanes, devices: &[RecordedDevice]) -> Vec<Option<u64>> {
    let indices: Vec<u32> = devices.iter().map(|d| d.index).collect();
    lanes
        .memory_all(&indices)
        .into_iter()
        .map(|r| r.ok().map(|m| m.used))
        .collect()
}

impl Recorder {
    /// Start recording `devices` through `monitor` (shared by the sampler thread, the
    /// process thread and the readings), times in ms since `t0`.
    pub fn start(
        monitor: Box<dyn Monitor>,
        devices: &[DeviceInfo],
        t0: Instant,
        cfg: RecorderConfig,
    ) -> Recorder {
        let monitor: Arc<dyn Monitor> = Arc::from(monitor);
        let lanes = Arc::new(Lanes::new(monitor.clone()));
        let recorded: Vec<RecordedDevice> = devices.iter().map(RecordedDevice::from).collect();
        let sink = cfg.sink.map(|out| Arc::new(Mutex::new(Sink::new(out))));
        let builder = || match cfg.resolution {
            Some(r) => SeriesBuilder::new(r),
            None => SeriesBuilder::unbounded(),
        };
        let series: Series = Arc::new(Mutex::new(devices.iter().map(|_| builder()).collect()));
        let shared = Arc::new(Mutex::new(Shared {
            tree: cfg.tree.map(|scope| {
                ProcessTree::with_scope(scope)
                    .with_dev_dir(crate::host::devices::dev_dir_of(&monitor.device_nodes()))
            }),
            sink: sink.clone(),
            series: series.clone(),
            list_runs: cfg.resolution.map(|_| ListRuns::default()),
            ..Shared::default()
        }));
        // The header first, before any thread can write.
        if let Some(h) = &cfg.header {
            lock(&shared).stream(h);
        }
        let period = cfg.sampler.period;
        let on_round = sink.map(|sink| {
            Box::new(move |t: f64, used: &[Option<u64>]| lock_sink(&sink).round(t, used, period))
                as sampler::OnRound
        });
        let hooks = sampler::Hooks {
            before: cfg.before_round,
            after: on_round,
        };
        let sampler = Sampler::start_with(
            lanes.clone(),
            series,
            devices.iter().map(|d| (d.index, d.memory.total)).collect(),
            t0,
            period,
            hooks,
        );
        let stop = Arc::new(StopSignal::default());
        let lists = cfg.sampler.process_period.map(|pp| {
            let which = cfg
                .process_devices
                .clone()
                .unwrap_or_else(|| recorded.iter().map(|d| d.index).collect());
            let lists = ProcessLists::with_policy(which, pp, cfg.list_policy);
            (pp, Arc::new(Mutex::new(lists)))
        });
        let latest = sampler.latest();
        let speeds: Vec<_> = recorded.iter().map(|d| lanes.speed(d.index)).collect();
        let map = recorded
            .iter()
            .zip(speeds)
            .map(|(d, p)| devmap::MapDevice {
                index: d.index,
                uuid: d.uuid.clone(),
                speed: p.wait().ok().flatten(),
            })
            .collect();
        let mut rec = Recorder {
            t0,
            devices: recorded,
            monitor,
            lanes,
            sampler: Some(sampler),
            shared,
            lists: lists.as_ref().map(|(_, l)| l.clone()),
            latest,
            map,
            round_readings: cfg.round_readings,
            stop,
            process_thread: None,
        };
        if let Some((pp, _)) = lists {
            rec.process_thread = rec.spawn_process_thread(pp);
        }
        rec
    }

    fn spawn_process_thread(&self, period: std::time::Duration) -> Option<JoinHandle<()>> {
        let (shared, stop, lists) = (self.shared.clone(), self.stop.clone(), self.lists.clone()?);
        let (lanes, devices, t0) = (self.lanes.clone(), self.devices.clone(), self.t0);
        let (readings, latest) = (self.round_readings, self.latest.clone());
        std::thread::Builder::new()
            .name("vramdoc-processes".into())
            .spawn(move || {
                let mut next = Instant::now();
                while !stop.is_set() {
                    let cx = RoundCx {
                        lanes: &lanes,
                        devices: &devices,
                        latest: &latest,
                        t0,
                        readings,
                    };
                    round(&shared, &lists, &cx, false);
                    pace(&mut next, period, &stop);
                }
            })
            .ok()
    }

    /// Milliseconds since the recording's start instant.
    pub fn t_ms(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1000.0
    }

    /// The monitor the recording reads through (for the caller's own queries: those run on
    /// the caller's thread, without the lanes' deadline).
    pub fn monitor(&self) -> &dyn Monitor {
        self.monitor.as_ref()
    }

    /// Stream a line (an error line, the end, ...).
    pub fn stream(&self, line: &StreamLine) {
        lock(&self.shared).stream(line);
    }

    /// A marker now, with a memory reading at that moment; returns its time.
    pub fn mark(&self, kind: MarkerKind, label: &str, device: Option<u32>) -> f64 {
        let t = self.t_ms();
        let used = read_memory(&self.lanes, &self.devices);
        let mut s = lock(&self.shared);
        s.point(t, used, true);
        s.stream(&StreamLine::Marker {
            t_ms: t,
            kind: kind.clone(),
            label: label.to_string(),
        });
        s.markers.push(Marker {
            t_ms: t,
            kind,
            label: label.to_string(),
            device,
        });
        t
    }

    /// A marker at the time it happened (replay: the worker's own clock), without reading.
    pub fn marker(&self, marker: Marker) {
        let mut s = lock(&self.shared);
        s.event(marker.t_ms);
        s.stream(&StreamLine::Marker {
            t_ms: marker.t_ms,
            kind: marker.kind.clone(),
            label: marker.label.clone(),
        });
        // In time order: a marker stamped by another thread can arrive after a later one.
        let at = s.markers.partition_point(|m| m.t_ms <= marker.t_ms);
        s.markers.insert(at, marker);
    }

    /// A phase boundary the rules read but reports do not show (replay: every step's end,
    /// and release points).
    pub fn boundary(&self, t_ms: f64, kind: MarkerKind, label: String) {
        let mut s = lock(&self.shared);
        s.event(t_ms);
        s.boundaries.push(Marker {
            t_ms,
            kind,
            label,
            device: None,
        });
    }

    /// Read every device's memory now and keep it (one boundary point, with the devices
    /// that answered); `None` when a query failed.
    pub fn reading(&self) -> Option<Vec<u64>> {
        let t = self.t_ms();
        let used = read_memory(&self.lanes, &self.devices);
        lock(&self.shared).point(t, used.clone(), true);
        used.into_iter().collect()
    }

    /// Every device's memory now, not kept (0 where a query failed): for a reading kept
    /// only when the job is still alive after it was taken ([`Recorder::point`]).
    /// `None` where the query failed or passed its deadline: a failed reading is no reading,
    /// never 0 bytes (a 0 in the middle of a job breaks every staircase the rules look for).
    pub fn memory_now(&self) -> Vec<Option<u64>> {
        read_memory(&self.lanes, &self.devices)
    }

    /// [`Recorder::memory_now`] with when each device's call ran on its lane (ms since the
    /// start), not when the caller got round to stamping it: keep it with
    /// [`Recorder::keep`]. A reading stamped after it was taken puts an old level after
    /// newer readings, which breaks the staircases the rules look for; and the devices'
    /// lanes do not start together (one may still be in a process list's driver call, or
    /// wait for a CPU), so one stamp for every device would place some device's value later
    /// (or earlier) than it was read.
    pub fn memory_now_at(&self) -> Reading {
        let indices: Vec<u32> = self.devices.iter().map(|d| d.index).collect();
        let devices = self
            .lanes
            .memory_all_at(&indices)
            .into_iter()
            .map(|r| {
                r.ok().map(|(ran, m)| {
                    let t = ran.saturating_duration_since(self.t0).as_secs_f64() * 1000.0;
                    (t, m.used)
                })
            })
            .collect();
        Reading {
            devices,
            asked: self.t_ms(),
        }
    }

    /// Keep a reading of [`Recorder::memory_now_at`]: each device's value at the time its
    /// call ran (a boundary's reading: the series keep full resolution around it).
    pub fn keep(&self, r: &Reading) {
        lock(&self.shared).point_each(&r.devices, r.first(), true);
    }

    /// Keep a reading taken at `t_ms` (device order); `None` keeps nothing for that device.
    pub fn point(&self, t_ms: f64, used: Vec<Option<u64>>) {
        lock(&self.shared).point(t_ms, used, true);
    }

    /// What `pid` holds on every device now, from the process lists (0 where it is not
    /// listed or a query failed). Slow on real drivers: for step boundaries only.
    pub fn usage_of(&self, pid: Option<u32>) -> Vec<u64> {
        let Some(pid) = pid else {
            return vec![0; self.devices.len()];
        };
        let pending: Vec<_> = self
            .devices
            .iter()
            .map(|d| self.lanes.processes(d.index))
            .collect();
        pending
            .into_iter()
            .map(|p| {
                p.wait()
                    .ok()
                    .and_then(|l| l.into_iter().find(|p| p.pid == pid))
                    .and_then(|p| p.used)
                    .unwrap_or(0)
            })
            .collect()
    }

    /// What `pid` held on every device (device order) at a boundary, for the rules only.
    pub fn boundary_usage(&self, t_ms: f64, pid: u32, used: &[u64]) {
        let mut s = lock(&self.shared);
        for (d, u) in self.devices.iter().zip(used) {
            s.boundary_processes.push(ProcessSample {
                t_ms,
                device: d.index,
                pid,
                used: Some(*u),
            });
        }
    }

    /// The physical GPU that CUDA ordinal `ordinal` in an error `line` means: through the
    /// variables of the process the line's prefix names (`(VllmWorker pid=…)`), else of the
    /// command, else vramdoc's own ([`devmap`]).
    pub fn error_device(&self, line: &str, ordinal: u32) -> Option<u32> {
        use crate::gpu::visible::{CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES};
        let t = self.t_ms();
        let env = {
            let mut s = lock(&self.shared);
            // A printer that started since the tree was last read (a worker that prints
            // before the next process round): read the tree now, while it is still alive,
            // rather than fall back to the command's variables.
            let pid = match devmap::printer(line) {
                Some(devmap::Printer::Pid(pid)) => Some(pid),
                _ => None,
            };
            let named = |tree: &ProcessTree, pid: u32| tree.all().iter().any(|t| t.named_by(pid));
            if let (Some(pid), Some(tree)) = (pid, s.tree.as_ref()) {
                if !named(tree, pid) {
                    s.refresh_tree(t);
                }
            }
            s.tree.as_ref().and_then(|tree| {
                let all = tree.all();
                let named = pid.and_then(|pid| all.iter().find(|t| t.named_by(pid)));
                // Else the command: the first process of the tree.
                named
                    .or(all.first())
                    .map(|t| (t.env(CUDA_VISIBLE_DEVICES), t.env(CUDA_DEVICE_ORDER)))
            })
        };
        let (cvd, order) = env.unwrap_or_else(|| {
            (
                std::env::var(CUDA_VISIBLE_DEVICES).ok(),
                std::env::var(CUDA_DEVICE_ORDER).ok(),
            )
        });
        devmap::physical(ordinal, cvd.as_deref(), order.as_deref(), &self.map)
    }

    /// An error the job hit, for the rules.
    pub fn error(&self, event: ErrorEvent) {
        let mut s = lock(&self.shared);
        s.event(event.t_ms);
        s.errors.push(event);
    }

    /// A process of the job that is not in the tree (replay's worker).
    pub fn process(&self, process: RecordedProcess) {
        lock(&self.shared).job.push(process);
    }

    /// One process round now (tree, reading, every process list), e.g. right after the job
    /// ends.
    pub fn round(&self) {
        if let Some(lists) = &self.lists {
            let cx = RoundCx {
                lanes: &self.lanes,
                devices: &self.devices,
                latest: &self.latest,
                t0: self.t0,
                readings: self.round_readings,
            };
            round(&self.shared, lists, &cx, true);
        }
    }

    // --- What the job supervisor asks while the job runs (issue 17: signals reach the
    // whole job, outliving processes, --live). Read from what the threads recorded; no
    // driver call.

    /// Whether the job has left nothing to wait for: its process tree read again now (no
    /// driver call) holds no live process, and every device's memory, read now and not kept,
    /// is at or below `pre` (the pre-job reading, device order). A device that does not
    /// answer is not back.
    pub fn nothing_left(&self, pre: &[u64]) -> bool {
        let t = self.t_ms();
        lock(&self.shared).refresh_tree(t);
        if !self.live_members().is_empty() {
            return false;
        }
        let now = self.memory_now();
        now.len() == pre.len() && now.iter().zip(pre).all(|(n, p)| n.is_some_and(|n| n <= *p))
    }

    /// The job's processes still running (empty without a tree).
    pub fn live_members(&self) -> Vec<TreeProcess> {
        lock(&self.shared)
            .tree
            .as_ref()
            .map(ProcessTree::live)
            .unwrap_or_default()
    }

    /// `(pid, device, used)` of every process of the job listed with memory in the latest
    /// process list of its device.
    pub fn job_holders(&self) -> Vec<(u32, u32, u64)> {
        let s = lock(&self.shared);
        let Some(tree) = s.tree.as_ref() else {
            return Vec::new();
        };
        let live: HashSet<u32> = tree.live_pids().into_iter().collect();
        let mut latest: BTreeMap<u32, f64> = BTreeMap::new();
        for p in &s.processes {
            let t = latest.entry(p.device).or_insert(p.t_ms);
            *t = t.max(p.t_ms);
        }
        s.processes
            .iter()
            .filter(|p| latest.get(&p.device) == Some(&p.t_ms) && live.contains(&p.pid))
            .filter_map(|p| Some((p.pid, p.device, p.used.filter(|u| *u > 0)?)))
            .collect()
    }

    /// The command `pid`, just spawned by vramdoc (the tree's root): the job's from now on,
    /// also if it exits before the first process round (issue 37).
    pub fn spawned(&self, pid: u32) {
        let t = self.t_ms();
        let mut s = lock(&self.shared);
        if let Some(change) = s.tree.as_mut().and_then(|tr| tr.spawned(pid, t)) {
            s.tree_changes(vec![change]);
        }
    }

    /// `pid`, a child of vramdoc's, has ended and is about to be reaped: a member's final
    /// name is read now (from its zombie).
    pub fn ending(&self, pid: u32) {
        if let Some(tree) = lock(&self.shared).tree.as_mut() {
            tree.ending(pid);
        }
    }

    /// The job's process `pid` was reaped at `t_ms` (the command, by vramdoc): its exit is
    /// recorded at that time, not at the next process round.
    pub fn reaped(&self, pid: u32, t_ms: f64) {
        let mut s = lock(&self.shared);
        if let Some(change) = s.tree.as_mut().and_then(|t| t.ended(pid, t_ms)) {
            s.tree_changes(vec![change]);
        }
    }

    /// Note which of the job's live processes hold the driver's device files open now
    /// ([`holders`]): called after the command ended, it names whoever keeps memory alive
    /// through an inherited descriptor. Reads /proc only, no driver call.
    pub fn note_device_file_holders(&self) {
        let nodes = crate::host::canonical_nodes(&self.monitor.device_nodes());
        let live = self.live_members();
        let found = holders::device_file_holders(&live, &nodes, self.t_ms());
        lock(&self.shared).device_file_holders.extend(found);
    }

    /// PIDs of the job's processes noted holding the driver's device files
    /// ([`Recorder::note_device_file_holders`]) that may keep memory: not those whose maps
    /// showed no CUDA context (NVML clients).
    pub fn device_file_holder_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = lock(&self.shared)
            .device_file_holders
            .iter()
            .filter(|h| h.context != Some(false))
            .map(|h| h.pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Peak used bytes per device (device order) over the readings kept since the
    /// `from`-th (process rounds and markers), and how many there are now: a live status
    /// keeps the running peak and asks only for what is new. Only the last
    /// `shared::RECENT_READINGS` are kept (memory stays bounded on a long job).
    pub fn peaks_since(&self, from: usize) -> (Vec<u64>, usize) {
        let s = lock(&self.shared);
        let mut peaks = vec![0; self.devices.len()];
        let first = s.readings_taken - s.recent_readings.len();
        for used in s.recent_readings.iter().skip(from.saturating_sub(first)) {
            for (p, u) in peaks.iter_mut().zip(used) {
                *p = (*p).max(u.unwrap_or(0));
            }
        }
        (peaks, s.readings_taken)
    }

    /// Stop every thread and return the recording.
    pub fn finish(mut self, end: JobEnd) -> Recorded {
        self.stop.set();
        if let Some(h) = self.process_thread.take() {
            let _ = h.join();
        }
        let samples = self.sampler.take().map(Sampler::stop).unwrap_or_default();
        let t_end = self.t_ms();
        let (list_gaps, list_errors) = match self.lists.take() {
            Some(l) => {
                let l = match Arc::try_unwrap(l) {
                    Ok(m) => m.into_inner().unwrap_or_else(|e| e.into_inner()),
                    Err(_) => ProcessLists::new(Vec::new(), std::time::Duration::from_secs(1)),
                };
                let errors = l.errors;
                (l.finish(t_end), errors)
            }
            None => (Vec::new(), 0),
        };
        let mut s = lock(&self.shared);
        if let Some(sink) = s.sink.as_ref() {
            lock_sink(sink).flush();
        }
        let builders = std::mem::take(&mut *lock_series(&s.series));
        let mut builders = builders.into_iter();
        let devices: Vec<DeviceSeries> = self
            .devices
            .iter()
            .map(|d| DeviceSeries {
                device: d.index,
                total: d.total,
                samples: builders
                    .next()
                    .map(SeriesBuilder::finish)
                    .unwrap_or_default(),
            })
            .collect();
        if let Some(runs) = s.list_runs.take() {
            let held = runs.finish();
            s.processes.extend(held);
        }
        let peaks = devices.iter().map(peak).collect();
        let mut processes = std::mem::take(&mut s.processes);
        processes.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        let mut gaps = samples.gaps;
        gaps.extend(list_gaps);
        gaps.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        let tree = match s.tree.as_mut() {
            Some(tree) => {
                tree.end_all(t_end);
                tree.all()
            }
            None => Vec::new(),
        };
        let mut markers = std::mem::take(&mut s.markers);
        markers.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        let timeline = Timeline {
            devices,
            markers,
            processes,
            gaps,
        };
        let rules_only = RulesOnly {
            markers: std::mem::take(&mut s.boundaries),
            processes: std::mem::take(&mut s.boundary_processes),
        };
        let recording = Recording {
            devices: self.devices.clone(),
            processes: job_processes(&tree, std::mem::take(&mut s.job), &timeline),
            timeline,
            errors: std::mem::take(&mut s.errors),
            end_ms: end.end_ms,
            exit: end.exit,
            device_file_holders: std::mem::take(&mut s.device_file_holders),
            rules_only,
        };
        Recorded {
            recording,
            peaks,
            tree,
            rounds: samples.rounds,
            errors: samples.errors + list_errors + s.failed_queries,
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.set();
        if let Some(h) = self.process_thread.take() {
            let _ = h.join();
        }
    }
}

/// What a process round reads through.
struct RoundCx<'a> {
    lanes: &'a Lanes,
    devices: &'a [RecordedDevice],
    latest: &'a Latest,
    t0: Instant,
    readings: bool,
}

/// One process round: the tree (cheap, /proc), then the lists where they can have changed
/// (`force`: all), read without holding the shared state (a slow driver never delays a
/// marker), then recorded.
fn round(shared: &Mutex<Shared>, lists: &Mutex<ProcessLists>, cx: &RoundCx, force: bool) {
    let tree_changed = lock(shared).refresh_tree(ms_since(cx.t0));
    let latest = cx.latest.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let used = |d: u32| {
        let i = cx.devices.iter().position(|x| x.index == d)?;
        latest.get(i).copied().flatten()
    };
    let input = RoundInput {
        used: &used,
        tree_changed,
        force,
    };
    let (_, read) = lists
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .round(cx.lanes, cx.t0, &input);
    // Stamped when it is taken (after the lists), not at the round's start: a newer level
    // placed earlier would move a change into the phase before it.
    let reading = cx
        .readings
        .then(|| (ms_since(cx.t0), read_memory(cx.lanes, cx.devices)));
    lock(shared).round(reading, read);
}

/// Peak used bytes of a series, with when.
fn peak(series: &DeviceSeries) -> DevicePeak {
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
}

/// The job's processes (its tree, or those fed), then every other PID the process lists
/// showed (neighbours, counted in device totals only), by PID.
fn job_processes(
    tree: &[TreeProcess],
    fed: Vec<RecordedProcess>,
    timeline: &Timeline,
) -> Vec<RecordedProcess> {
    let mut out: Vec<RecordedProcess> = tree
        .iter()
        .map(|t| RecordedProcess {
            pid: t.pid,
            // Never a name it exec'd away from before the lists named it (issue 39).
            name: t.known_name().map(String::from),
            first_seen_ms: t.start_ms,
            exit_ms: t.end_ms,
            cuda_visible_devices: t.env("CUDA_VISIBLE_DEVICES"),
            gpu_env: t.gpu_env(),
            pytorch_cuda_alloc_conf: t.env("PYTORCH_CUDA_ALLOC_CONF"),
            pytorch_alloc_conf: t.env("PYTORCH_ALLOC_CONF"),
            in_tree: true,
            ppid: t.ppid,
            cmdline: t.cmdline.clone(),
        })
        .collect();
    out.extend(fed);
    let known: HashSet<u32> = out.iter().map(|p| p.pid).collect();
    let mut others: BTreeMap<u32, f64> = BTreeMap::new();
    for p in timeline
        .processes
        .iter()
        .filter(|p| !known.contains(&p.pid))
    {
        let first = others.entry(p.pid).or_insert(p.t_ms);
        *first = first.min(p.t_ms);
    }
    out.extend(
        others
            .into_iter()
            .map(|(pid, first)| RecordedProcess::seen(pid, first, false)),
    );
    out
}

#[cfg(test)]
pub(crate) mod tests;
