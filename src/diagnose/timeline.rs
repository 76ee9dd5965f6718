//! Timeline fingerprints: pure functions from a [`Recording`] (device memory samples,
//! per-process per-device samples, markers, process starts and exits, errors, the job's end)
//! to [`Finding`]s with evidence and the documented fix text. `vramdoc run` builds a
//! recording from the user's job, the replay engine from each variant; both ask this module
//! which of the known failures the timeline shows. No I/O. Finding ids and thresholds are
//! documented in docs/findings.md.

use super::rules::{ev, ev_bytes};
use super::{fixes, ids};
use crate::inventory::{CVD_UNKNOWN, CVD_UNSET};
use crate::report::{
    Evidence, Finding, Marker, ProcessDeviceUsage, ProcessInfo, Severity, Timeline,
};
use crate::units::{format_bytes, GIB, MIB};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// Marker kinds the engine reads (other kinds are shown but not interpreted).
pub mod marker_kinds {
    /// The job says everything it loaded has been released (drives `not-released`).
    pub const RELEASE: &str = "release";
}

/// One GPU of the recording (NVML physical index).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedDevice {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub total: u64,
}

impl From<&crate::gpu::DeviceInfo> for RecordedDevice {
    fn from(d: &crate::gpu::DeviceInfo) -> Self {
        RecordedDevice {
            index: d.index,
            uuid: d.uuid.clone(),
            name: d.name.clone(),
            total: d.memory.total,
        }
    }
}

/// One process seen during the recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedProcess {
    pub pid: u32,
    /// `comm` or a short name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Milliseconds since the recording started.
    pub first_seen_ms: f64,
    /// When it exited (`None`: still running at the end, or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_ms: Option<f64>,
    /// Its `CUDA_VISIBLE_DEVICES` (`None`: unset or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_visible_devices: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_device_order: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_visible_devices: Option<String>,
    /// Part of the job (the recorded process tree, or the replay worker); other processes
    /// are neighbours, counted in device totals only.
    pub in_tree: bool,
}

/// What kind of error the job hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ErrorKind {
    /// An allocation failed (`CUDA out of memory`, `torch.OutOfMemoryError`, ...).
    OutOfMemory,
    /// Another CUDA / driver error (`CUDA error: unknown error`, device lost, ...).
    DriverError,
    /// A process of the job was killed by a signal (the OOM killer: 9).
    KilledBySignal { signal: i32 },
    /// Anything else worth placing on the timeline.
    Other,
}

/// An error the job hit, as parsed from its output or the worker's events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEvent {
    /// Milliseconds since the recording started.
    pub t_ms: f64,
    #[serde(flatten)]
    pub kind: ErrorKind,
    /// Physical device, when the error names one (`GPU 0`, `cuda:1` mapped already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// The process that printed it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The line as printed, already redacted.
    pub line: String,
    /// Bytes the failed allocation asked for (`Tried to allocate 2.00 GiB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_bytes: Option<u64>,
}

/// How the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobExit {
    Code(i32),
    Signal(i32),
}

/// Everything a recorded job (or a replayed variant) gives the engine.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Recording {
    pub devices: Vec<RecordedDevice>,
    /// Device series `[t_ms, used]`, markers (`step`, `marker`, `release`, `oom`, `error`,
    /// `end`, ...), per-process samples.
    pub timeline: Timeline,
    pub processes: Vec<RecordedProcess>,
    pub errors: Vec<ErrorEvent>,
    /// When the job ended (ms since the recording started).
    pub end_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<JobExit>,
}

/// Every threshold the timeline rules use; defaults documented per field and in
/// docs/findings.md.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineThresholds {
    /// A footprint at or below this is "context-sized" (stray-context). Default 1 GiB.
    pub context_sized_max: u64,
    /// The main work must exceed this for a small footprint elsewhere to be stray. 1 GiB.
    pub main_work_min: u64,
    /// A level change smaller than this and than `step_fraction` of total is noise. 256 MiB.
    pub step_min: u64,
    /// A level change smaller than this fraction of total is noise. Default 0.02.
    pub step_fraction: f64,
    /// Ratchets (rises without a release, the failing allocation counting as one) for
    /// `growth-without-release`. Default 3.
    pub growth_min_ratchets: usize,
    /// "Near full": used at or above this fraction of total. Default 0.95.
    pub near_full_fraction: f64,
    /// An OOM this long after the last ratchet (and more than 4 times the widest gap
    /// between ratchets) does not end the growth. Default 5 min.
    pub growth_stale_ms: f64,
    /// Residual above the pre-job level after a release marker, at least this (and
    /// `residual_fraction` of total) for `not-released`. Default 1 GiB.
    pub residual_min: u64,
    /// Default 0.05.
    pub residual_fraction: f64,
    /// Smallest load counted by `double-load`, as a fraction of the device. Default 0.10.
    pub load_min_fraction: f64,
    /// Two loads are "about the same size" when they differ by at most this. Default 0.10.
    pub load_tolerance: f64,
    /// Smallest single claim for `overcommit`, fraction of total. Default 0.20.
    pub claim_min_fraction: f64,
    /// The claiming process then holds at least this fraction of total. Default 0.80.
    pub budget_holder_fraction: f64,
    /// "Free memory near zero": at most this fraction of total. Default 0.10.
    pub near_zero_free_fraction: f64,
    /// Memory still used above the pre-job level this long after the job's last process
    /// exited is `held-after-exit`. Default 500 ms.
    pub exit_grace_ms: f64,
    /// ... when above this. Default 256 MiB.
    pub held_min: u64,
}

impl Default for TimelineThresholds {
    fn default() -> Self {
        TimelineThresholds {
            context_sized_max: GIB,
            main_work_min: GIB,
            step_min: 256 * MIB,
            step_fraction: 0.02,
            growth_min_ratchets: 3,
            near_full_fraction: 0.95,
            growth_stale_ms: 300_000.0,
            residual_min: GIB,
            residual_fraction: 0.05,
            load_min_fraction: 0.10,
            load_tolerance: 0.10,
            claim_min_fraction: 0.20,
            budget_holder_fraction: 0.80,
            near_zero_free_fraction: 0.10,
            exit_grace_ms: 500.0,
            held_min: 256 * MIB,
        }
    }
}

/// Every fingerprint the recording shows, most severe first (stable within a severity:
/// rule order, then device / PID). Linear in the number of samples.
pub fn fingerprints(rec: &Recording, th: &TimelineThresholds) -> Vec<Finding> {
    let cx = Prepared::new(rec, th);
    let mut out = Vec::new();
    out.extend(out_of_memory(&cx));
    out.extend(stray_context(&cx));
    let double = double_load(&cx);
    // One diagnosis per device: the specific patterns explain growth on their devices.
    let mut explained: BTreeSet<u32> = double.iter().flat_map(|f| f.devices.clone()).collect();
    let over = overcommit(&cx, &double);
    explained.extend(over.iter().flat_map(|f| f.devices.clone()));
    out.extend(growth_without_release(&cx, &explained));
    out.extend(not_released(&cx));
    out.extend(double);
    out.extend(over);
    out.extend(held_after_exit(&cx));
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

// ---------------------------------------------------------------------------------------
// Prepared views of the recording (sorted series, baselines, per-process series).

/// `[t_ms, used]` samples of one device, in time order.
type Points<'a> = Cow<'a, [(f64, u64)]>;

struct Dev<'a> {
    index: u32,
    total: u64,
    uuid: Option<&'a str>,
    samples: Points<'a>,
    /// Used before the job (the first sample).
    baseline: u64,
    /// Level changes smaller than this are noise.
    step: u64,
}

impl Dev<'_> {
    fn level_at(&self, t: f64) -> Option<u64> {
        level_at(&self.samples, t)
    }

    fn label(&self) -> String {
        match self.uuid {
            Some(u) => format!("GPU {} ({u})", self.index),
            None => format!("GPU {}", self.index),
        }
    }

    fn pct(&self, b: u64) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            b as f64 * 100.0 / self.total as f64
        }
    }
}

/// One process's samples on one device, in time order (`None`: not available).
type ProcSeries = Vec<(f64, Option<u64>)>;

struct Prepared<'a> {
    rec: &'a Recording,
    th: &'a TimelineThresholds,
    devs: Vec<Dev<'a>>,
    /// Marker times, sorted.
    marker_times: Vec<f64>,
    /// pid -> device -> samples.
    procs: BTreeMap<u32, BTreeMap<u32, ProcSeries>>,
    /// Processes of the job.
    tree: BTreeSet<u32>,
    /// Devices the job used: where its processes held memory, else where memory rose.
    job_devices: BTreeSet<u32>,
}

/// Quiet time that ends a phase when no marker does (a plateau). Replays mark every step.
const QUIET_MS: f64 = 1000.0;

fn sorted_points(s: &[(f64, u64)]) -> Points<'_> {
    if s.windows(2).all(|w| w[0].0 <= w[1].0) {
        Cow::Borrowed(s)
    } else {
        let mut v = s.to_vec();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        Cow::Owned(v)
    }
}

/// The last sample at or before `t`.
fn level_at(s: &[(f64, u64)], t: f64) -> Option<u64> {
    let i = s.partition_point(|(ts, _)| *ts <= t);
    i.checked_sub(1).map(|i| s[i].1)
}

fn proc_level_at(s: &[(f64, Option<u64>)], t: f64) -> Option<u64> {
    let i = s.partition_point(|(ts, _)| *ts <= t);
    i.checked_sub(1).and_then(|i| s[i].1)
}

impl<'a> Prepared<'a> {
    fn new(rec: &'a Recording, th: &'a TimelineThresholds) -> Prepared<'a> {
        let devs: Vec<Dev> = rec
            .timeline
            .devices
            .iter()
            .filter(|s| !s.samples.is_empty())
            .map(|s| {
                let info = rec.devices.iter().find(|d| d.index == s.device);
                let total = if s.total > 0 {
                    s.total
                } else {
                    info.map(|d| d.total).unwrap_or(0)
                };
                let samples = sorted_points(&s.samples);
                let baseline = samples.first().map(|p| p.1).unwrap_or(0);
                let step = th
                    .step_min
                    .max((th.step_fraction * total as f64).round() as u64)
                    .max(1);
                Dev {
                    index: s.device,
                    total,
                    uuid: info.map(|d| d.uuid.as_str()).filter(|u| !u.is_empty()),
                    samples,
                    baseline,
                    step,
                }
            })
            .collect();
        let mut marker_times: Vec<f64> = rec.timeline.markers.iter().map(|m| m.t_ms).collect();
        marker_times.sort_by(f64::total_cmp);
        let mut procs: BTreeMap<u32, BTreeMap<u32, ProcSeries>> = BTreeMap::new();
        for p in &rec.timeline.processes {
            procs
                .entry(p.pid)
                .or_default()
                .entry(p.device)
                .or_default()
                .push((p.t_ms, p.used));
        }
        // A process that exited holds nothing any more (NVML drops it from its lists).
        for rp in &rec.processes {
            if let (Some(t), Some(per_dev)) = (rp.exit_ms, procs.get_mut(&rp.pid)) {
                for s in per_dev.values_mut() {
                    s.push((t, Some(0)));
                }
            }
        }
        for per_dev in procs.values_mut() {
            for s in per_dev.values_mut() {
                if !s.windows(2).all(|w| w[0].0 <= w[1].0) {
                    s.sort_by(|a, b| a.0.total_cmp(&b.0));
                }
            }
        }
        let tree: BTreeSet<u32> = rec
            .processes
            .iter()
            .filter(|p| p.in_tree)
            .map(|p| p.pid)
            .collect();
        let mut job_devices: BTreeSet<u32> = BTreeSet::new();
        for pid in &tree {
            if let Some(per_dev) = procs.get(pid) {
                for (d, s) in per_dev {
                    if s.iter().any(|(_, u)| u.is_some_and(|u| u > 0)) {
                        job_devices.insert(*d);
                    }
                }
            }
        }
        if job_devices.is_empty() {
            for d in &devs {
                let peak = d.samples.iter().map(|p| p.1).max().unwrap_or(0);
                if peak >= d.baseline.saturating_add(d.step) {
                    job_devices.insert(d.index);
                }
            }
        }
        Prepared {
            rec,
            th,
            devs,
            marker_times,
            procs,
            tree,
            job_devices,
        }
    }

    fn dev(&self, index: u32) -> Option<&Dev<'a>> {
        self.devs.iter().find(|d| d.index == index)
    }

    /// Whether any process of the job has per-process samples (on any device).
    fn tree_has_samples(&self) -> bool {
        self.tree.iter().any(|p| self.procs.contains_key(p))
    }

    /// What the job's processes held on `device` at `t` (`None`: no per-process data).
    fn tree_usage_at(&self, device: u32, t: f64) -> Option<u64> {
        let mut any = false;
        let mut sum = 0u64;
        for pid in &self.tree {
            if let Some(s) = self.procs.get(pid).and_then(|m| m.get(&device)) {
                if let Some(u) = proc_level_at(s, t) {
                    any = true;
                    sum = sum.saturating_add(u);
                }
            }
        }
        any.then_some(sum)
    }

    /// The job's process holding the most on `device` at `t`.
    fn top_holder_at(&self, device: u32, t: f64) -> Option<(u32, u64)> {
        self.tree
            .iter()
            .filter_map(|pid| {
                let s = self.procs.get(pid)?.get(&device)?;
                proc_level_at(s, t).map(|u| (*pid, u))
            })
            .max_by_key(|(pid, u)| (*u, u32::MAX - *pid))
    }

    fn process(&self, pid: u32) -> Option<&RecordedProcess> {
        self.rec.processes.iter().find(|p| p.pid == pid)
    }

    fn who(&self, pid: u32) -> String {
        match self.process(pid).and_then(|p| p.name.as_deref()) {
            Some(n) => format!("PID {pid} ({n})"),
            None => format!("PID {pid}"),
        }
    }

    /// The label of the last step / marker at or before `t`.
    fn phase_at(&self, t: f64) -> Option<&str> {
        self.rec
            .timeline
            .markers
            .iter()
            .filter(|m| m.t_ms <= t && matches!(m.kind.as_str(), "step" | "marker" | "release"))
            .max_by(|a, b| a.t_ms.total_cmp(&b.t_ms))
            .map(|m| m.label.as_str())
    }

    /// The device an error happened on: the one it names, else the job's device with the
    /// least free memory at that moment.
    fn error_device(&self, e: &ErrorEvent) -> Option<u32> {
        if let Some(d) = e.device {
            return Some(d);
        }
        let pool: Vec<&Dev> = if self.job_devices.is_empty() {
            self.devs.iter().collect()
        } else {
            self.devs
                .iter()
                .filter(|d| self.job_devices.contains(&d.index))
                .collect()
        };
        pool.into_iter()
            .filter_map(|d| d.level_at(e.t_ms).map(|u| (d, d.total.saturating_sub(u))))
            .min_by_key(|(d, free)| (*free, d.index))
            .map(|(d, _)| d.index)
    }

    fn ooms(&self) -> impl Iterator<Item = &ErrorEvent> {
        self.rec
            .errors
            .iter()
            .filter(|e| e.kind == ErrorKind::OutOfMemory)
    }
}

// ---------------------------------------------------------------------------------------
// Phases and ratchets.

/// Times where a phase ends: markers, and the start of every plateau (usage within
/// `noise` for [`QUIET_MS`]).
fn plateau_starts(s: &[(f64, u64)], noise: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let Some(&(mut ta, mut va)) = s.first() else {
        return out;
    };
    let mut flagged = true;
    for &(t, v) in &s[1..] {
        if v.abs_diff(va) > noise {
            ta = t;
            va = v;
            flagged = false;
        } else if !flagged && t - ta >= QUIET_MS {
            out.push(t);
            flagged = true;
        }
    }
    out
}

/// The level at the start, at every phase boundary, and at the end.
fn phase_levels(s: &[(f64, u64)], markers: &[f64], noise: u64) -> Vec<(f64, u64)> {
    let (Some(&first), Some(&last)) = (s.first(), s.last()) else {
        return Vec::new();
    };
    let mut times = plateau_starts(s, noise);
    let lo = markers.partition_point(|t| *t <= first.0);
    let hi = markers.partition_point(|t| *t <= last.0);
    times.extend_from_slice(&markers[lo..hi]);
    times.sort_by(f64::total_cmp);
    times.dedup();
    let mut out = Vec::with_capacity(times.len() + 2);
    out.push(first);
    for t in times {
        if t > first.0 && t < last.0 {
            if let Some(l) = level_at(s, t) {
                out.push((t, l));
            }
        }
    }
    out.push(last);
    out
}

/// A rise of at least one step between phases.
#[derive(Debug, Clone, Copy)]
struct Ratchet {
    t: f64,
    from: u64,
    to: u64,
}

/// A run of phases with no release (no drop of a step or more below the highest level).
#[derive(Debug, Clone)]
struct Chain {
    /// Indices into the phase levels, inclusive.
    first: usize,
    last: usize,
    ratchets: Vec<Ratchet>,
    top: u64,
    max_seen: u64,
    end_t: f64,
}

impl Chain {
    fn new(i: usize, t: f64, l: u64) -> Chain {
        Chain {
            first: i,
            last: i,
            ratchets: Vec::new(),
            top: l,
            max_seen: l,
            end_t: t,
        }
    }
}

fn chains(levels: &[(f64, u64)], step: u64) -> Vec<Chain> {
    let mut out = Vec::new();
    let Some(&(t0, l0)) = levels.first() else {
        return out;
    };
    let mut cur = Chain::new(0, t0, l0);
    for (i, &(t, l)) in levels.iter().enumerate().skip(1) {
        if l.saturating_add(step) <= cur.max_seen {
            cur.end_t = t;
            out.push(std::mem::replace(&mut cur, Chain::new(i, t, l)));
            continue;
        }
        if l >= cur.top.saturating_add(step) {
            cur.ratchets.push(Ratchet {
                t,
                from: cur.top,
                to: l,
            });
            cur.top = l;
        }
        cur.max_seen = cur.max_seen.max(l);
        cur.last = i;
        cur.end_t = t;
    }
    out.push(cur);
    out
}

// ---------------------------------------------------------------------------------------
// Formatting helpers.

fn fmt_t(ms: f64) -> String {
    if ms.abs() < 1000.0 {
        format!("{ms:.1} ms")
    } else if ms.abs() < 120_000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        format!("{:.1} min", ms / 60_000.0)
    }
}

fn uuid_ev(d: &Dev) -> Option<Evidence> {
    d.uuid.map(|u| ev(format!("GPU {} UUID", d.index), u))
}

// ---------------------------------------------------------------------------------------
// The rules.

/// `out-of-memory`: the first allocation failure, where (phase), on which device, free
/// memory at that moment and the parsed error line.
fn out_of_memory(cx: &Prepared) -> Vec<Finding> {
    let mut ooms = cx.ooms();
    let Some(e) = ooms.next() else {
        return Vec::new();
    };
    let more = ooms.count();
    let device = cx.error_device(e);
    let dev = device.and_then(|d| cx.dev(d));
    let mut evidence = vec![ev("when", fmt_t(e.t_ms))];
    if let Some(p) = cx.phase_at(e.t_ms) {
        evidence.push(ev("during", p));
    }
    let mut title = format!("Out of memory at {}", fmt_t(e.t_ms));
    if let Some(d) = dev {
        evidence.push(ev(
            "device",
            if e.device.is_some() {
                d.label()
            } else {
                format!(
                    "{} (not named by the error: the job's GPU with least free)",
                    d.label()
                )
            },
        ));
        if let Some(used) = d.level_at(e.t_ms) {
            let free = d.total.saturating_sub(used);
            evidence.push(ev_bytes("total", d.total));
            evidence.push(ev_bytes("used at that moment", used));
            evidence.push(ev_bytes("free at that moment", free));
            title = format!(
                "Out of memory on GPU {} at {} ({} free of {})",
                d.index,
                fmt_t(e.t_ms),
                format_bytes(free),
                format_bytes(d.total)
            );
        }
    }
    if let Some(r) = e.requested_bytes {
        evidence.push(ev_bytes("the failed allocation asked for", r));
    }
    if let Some(pid) = e.pid {
        evidence.push(ev("process", cx.who(pid)));
    }
    evidence.push(ev("error line", e.line.clone()));
    if more > 0 {
        evidence.push(ev("further out-of-memory errors", more.to_string()));
    }
    vec![Finding {
        id: ids::OUT_OF_MEMORY.into(),
        severity: Severity::Error,
        title,
        devices: device.into_iter().collect(),
        pid: e.pid,
        evidence,
        fix: fixes::OUT_OF_MEMORY.into(),
    }]
}

/// `stray-context`, over time: scan's rule ([`super::rules::stray_context_of`]) applied to
/// the most each process of the job held on each device during the recording.
fn stray_context(cx: &Prepared) -> Vec<Finding> {
    // UUIDs by physical index (CUDA_VISIBLE_DEVICES maps onto positions in this list).
    let n = cx
        .rec
        .devices
        .iter()
        .map(|d| d.index)
        .chain(cx.devs.iter().map(|d| d.index))
        .max()
        .map_or(0, |m| m as usize + 1)
        .min(1024);
    let mut gpus_info = vec![(String::new(), String::new()); n];
    for d in &cx.rec.devices {
        if let Some(u) = gpus_info.get_mut(d.index as usize) {
            *u = (d.uuid.clone(), d.name.clone());
        }
    }
    let mut out = Vec::new();
    for rp in cx.rec.processes.iter().filter(|p| p.in_tree) {
        let Some(per_dev) = cx.procs.get(&rp.pid) else {
            continue;
        };
        let mut peaks: Vec<ProcessDeviceUsage> = Vec::new();
        let mut seen: Vec<(u32, f64, f64)> = Vec::new();
        for (d, s) in per_dev {
            let held: Vec<&(f64, Option<u64>)> =
                s.iter().filter(|(_, u)| u.is_some_and(|u| u > 0)).collect();
            let peak = s.iter().filter_map(|(_, u)| *u).max();
            if held.is_empty() && peak.is_some() {
                continue; // listed with 0 only (or after exit): not on this device.
            }
            if let (Some(a), Some(b)) = (held.first(), held.last()) {
                seen.push((*d, a.0, b.0));
            }
            peaks.push(ProcessDeviceUsage {
                device: *d,
                used: peak,
            });
        }
        let raw_cvd = rp.cuda_visible_devices.as_deref();
        let ambiguous = raw_cvd.is_some_and(|c| {
            super::rules::index_order_ambiguous(
                c,
                rp.cuda_device_order.as_deref(),
                cx.rec.devices.iter().map(|d| d.name.as_str()),
            )
        });
        let cvd = match raw_cvd {
            Some(c) if !ambiguous => c.to_string(),
            Some(_) => CVD_UNKNOWN.to_string(),
            None => CVD_UNSET.to_string(),
        };
        let view = ProcessInfo {
            pid: rp.pid,
            visible: true,
            user: None,
            name: rp.name.clone(),
            cmdline: None,
            cuda_visible_devices: cvd,
            container: None,
            devices: peaks,
        };
        let env = crate::inventory::GpuEnv {
            cuda_device_order: rp.cuda_device_order.clone(),
            nvidia_visible_devices: rp.nvidia_visible_devices.clone(),
        };
        let Some(mut f) = super::rules::stray_context_of(
            &view,
            Some(&env),
            &gpus_info,
            cx.th.context_sized_max,
            cx.th.main_work_min,
        ) else {
            continue;
        };
        f.title.push_str(" (peak over the recording)");
        if ambiguous {
            f.evidence.push(ev(
                "CUDA_VISIBLE_DEVICES (not used: CUDA_DEVICE_ORDER is not PCI_BUS_ID on a \
                 mixed box)",
                raw_cvd.unwrap_or_default(),
            ));
        }
        for d in f.devices.clone() {
            if let Some(dv) = cx.dev(d) {
                f.evidence.extend(uuid_ev(dv));
            }
            if let Some((_, a, b)) = seen.iter().find(|(x, _, _)| *x == d) {
                f.evidence.push(ev(
                    format!("held on GPU {d}"),
                    format!(
                        "from {} to {} ({} in all)",
                        fmt_t(*a),
                        fmt_t(*b),
                        fmt_t(b - a)
                    ),
                ));
            }
        }
        // Branch (a) of the rule already shows it ("... (its container's GPUs)").
        let shown = f
            .evidence
            .iter()
            .any(|e| e.label.starts_with("NVIDIA_VISIBLE_DEVICES"));
        if let (Some(n), false) = (&rp.nvidia_visible_devices, shown) {
            f.evidence.push(ev("NVIDIA_VISIBLE_DEVICES", n.clone()));
        }
        out.push(f);
    }
    out
}

/// `growth-without-release`: on a device of the job, usage ratchets up at successive
/// plateaus and never returns, ending in an out-of-memory error (the failing allocation is
/// the last ratchet; when its size is known, it alone would have fit on top of the first
/// plateau) or near full while still growing.
fn growth_without_release(cx: &Prepared, explained: &BTreeSet<u32>) -> Vec<Finding> {
    let th = cx.th;
    let mut out = Vec::new();
    for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
        if explained.contains(&d.index) || d.total == 0 {
            continue;
        }
        let levels = phase_levels(&d.samples, &cx.marker_times, d.step / 4);
        let oom = cx
            .ooms()
            .find(|e| cx.error_device(e) == Some(d.index) && e.t_ms >= d.samples[0].0);
        let mut hit: Option<(Chain, Option<&ErrorEvent>)> = None;
        if let Some(e) = oom {
            let n = levels.partition_point(|(t, _)| *t < e.t_ms);
            if let Some(c) = chains(&levels[..n], d.step).pop() {
                let fits = match (c.ratchets.first(), e.requested_bytes) {
                    (Some(r), Some(req)) => r.to.saturating_add(req) <= d.total,
                    _ => true,
                };
                // The failure must come as the next step of the growth, not long after it
                // stopped (a job that grew in its first minute and failed an hour later).
                let mut prev = levels[c.first].0;
                let mut widest = 0.0f64;
                for r in &c.ratchets {
                    widest = widest.max(r.t - prev);
                    prev = r.t;
                }
                let fresh = e.t_ms - prev <= (4.0 * widest).max(th.growth_stale_ms);
                if c.ratchets.len() + 1 >= th.growth_min_ratchets
                    && c.ratchets.len() >= 2
                    && fits
                    && fresh
                {
                    hit = Some((c, Some(e)));
                }
            }
        } else {
            let full = (th.near_full_fraction * d.total as f64) as u64;
            hit = chains(&levels, d.step)
                .into_iter()
                .find(|c| {
                    let (Some(a), Some(b)) = (c.ratchets.first(), c.ratchets.last()) else {
                        return false;
                    };
                    c.ratchets.len() >= th.growth_min_ratchets
                        && c.top >= full
                        && c.end_t - b.t <= b.t - a.t
                })
                .map(|c| (c, None));
        }
        let Some((c, e)) = hit else {
            continue;
        };
        let mut evidence: Vec<Evidence> = uuid_ev(d).into_iter().collect();
        evidence.push(ev_bytes("before the growth", c.ratchets[0].from));
        for (k, r) in c.ratchets.iter().enumerate() {
            let mut label = format!("plateau {} from {}", k + 1, fmt_t(r.t));
            if let Some(p) = cx.phase_at(r.t) {
                label.push_str(&format!(" ({p})"));
            }
            evidence.push(ev_bytes(label, r.to));
        }
        evidence.push(ev(
            "returned below an earlier plateau",
            "never (no drop of a step or more)",
        ));
        evidence.push(ev_bytes("a step is at least", d.step));
        let title = match e {
            Some(e) => {
                evidence.push(ev(
                    "ended in",
                    format!("out of memory at {}", fmt_t(e.t_ms)),
                ));
                if let Some(req) = e.requested_bytes {
                    evidence.push(ev_bytes("the failed allocation asked for", req));
                    evidence.push(ev(
                        "alone it would fit",
                        format!(
                            "{} (first plateau) + {} <= {} total",
                            format_bytes(c.ratchets[0].to),
                            format_bytes(req),
                            format_bytes(d.total)
                        ),
                    ));
                }
                format!(
                    "GPU {}: usage ratcheted up {} times without release ({} to {}), then out of \
                     memory",
                    d.index,
                    c.ratchets.len(),
                    format_bytes(c.ratchets[0].from),
                    format_bytes(c.top)
                )
            }
            None => {
                evidence.push(ev(
                    "ended",
                    format!(
                        "near full: {:.1}% of {}",
                        d.pct(c.top),
                        format_bytes(d.total)
                    ),
                ));
                format!(
                    "GPU {}: usage ratcheted up {} times without release, to {:.1}% of total",
                    d.index,
                    c.ratchets.len(),
                    d.pct(c.top)
                )
            }
        };
        out.push(Finding {
            id: ids::GROWTH_WITHOUT_RELEASE.into(),
            severity: if e.is_some() {
                Severity::Error
            } else {
                Severity::Warn
            },
            title,
            devices: vec![d.index],
            pid: cx.top_holder_at(d.index, c.end_t).map(|(p, _)| p),
            evidence,
            fix: fixes::GROWTH_WITHOUT_RELEASE.into(),
        });
    }
    out
}

/// Settling time after a release marker (bounded by the next marker).
const RELEASE_SETTLE_MS: f64 = 2000.0;

/// `not-released`: after a `release` marker, every device the job used still holds more
/// than [`TimelineThresholds::residual_min`] (and `residual_fraction` of total) above its
/// pre-job level. One finding, for the first such marker.
fn not_released(cx: &Prepared) -> Vec<Finding> {
    let th = cx.th;
    let mut releases: Vec<&Marker> = cx
        .rec
        .timeline
        .markers
        .iter()
        .filter(|m| m.kind == marker_kinds::RELEASE)
        .collect();
    releases.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    let has_proc = cx.tree_has_samples();
    for m in releases {
        let t = m.t_ms;
        let next = cx
            .marker_times
            .iter()
            .copied()
            .find(|x| *x > t)
            .unwrap_or(f64::INFINITY)
            .min(t + RELEASE_SETTLE_MS);
        let mut rows: Vec<(&Dev, u64, u64, Option<u64>)> = Vec::new();
        let mut all = true;
        for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
            if m.device.is_some_and(|x| x != d.index) {
                continue;
            }
            let threshold = th
                .residual_min
                .max((th.residual_fraction * d.total as f64) as u64);
            // Participating: the job held more than a context there before the release.
            let participated = if has_proc {
                cx.tree.iter().any(|pid| {
                    cx.procs
                        .get(pid)
                        .and_then(|m| m.get(&d.index))
                        .is_some_and(|s| {
                            s.iter()
                                .take_while(|(ts, _)| *ts <= t)
                                .any(|(_, u)| u.is_some_and(|u| u > th.context_sized_max))
                        })
                })
            } else {
                let n = d.samples.partition_point(|(ts, _)| *ts <= t);
                d.samples[..n].iter().map(|p| p.1).max().unwrap_or(0)
                    >= d.baseline.saturating_add(threshold)
            };
            if !participated {
                continue;
            }
            let lo = d.samples.partition_point(|(ts, _)| *ts < t);
            let hi = d.samples.partition_point(|(ts, _)| *ts <= next);
            let after = d.samples[lo..hi]
                .iter()
                .map(|p| p.1)
                .min()
                .or_else(|| d.level_at(t))
                .unwrap_or(0);
            let residual = after.saturating_sub(d.baseline);
            let held = cx.tree_usage_at(d.index, next.min(cx.rec.end_ms.max(t)));
            let counted = residual >= threshold && held.is_none_or(|h| h >= threshold);
            all &= counted;
            rows.push((d, residual, threshold, held));
        }
        if rows.is_empty() || !all {
            continue;
        }
        let mut evidence = vec![ev("release marker", format!("{} at {}", m.label, fmt_t(t)))];
        for (d, residual, _, held) in &rows {
            evidence.extend(uuid_ev(d));
            evidence.push(ev_bytes(
                format!("GPU {}: still held above the pre-job level", d.index),
                *residual,
            ));
            if let Some(h) = held {
                evidence.push(ev_bytes(
                    format!("GPU {}: held by the job's processes", d.index),
                    *h,
                ));
            }
        }
        let hi = rows.iter().map(|r| r.1).max().unwrap_or(0);
        let lo = rows.iter().map(|r| r.1).min().unwrap_or(0);
        if rows.len() > 1 && hi > 0 {
            evidence.push(ev(
                "spread between devices",
                format!(
                    "{:.1}% of the largest",
                    (hi - lo) as f64 * 100.0 / hi as f64
                ),
            ));
        }
        evidence.push(ev_bytes(
            "residual counts from",
            rows.iter().map(|r| r.2).min().unwrap_or(0),
        ));
        let devices: Vec<u32> = rows.iter().map(|r| r.0.index).collect();
        return vec![Finding {
            id: ids::NOT_RELEASED.into(),
            severity: Severity::Warn,
            title: format!(
                "After the release at {}, GPU {} still hold{} {} above the pre-job level",
                fmt_t(t),
                super::rules::gpus(&devices),
                if devices.len() == 1 { "s" } else { "" },
                if rows.len() == 1 || hi == lo {
                    format_bytes(hi)
                } else {
                    format!("{} to {}", format_bytes(lo), format_bytes(hi))
                }
            ),
            devices,
            pid: None,
            evidence,
            fix: fixes::NOT_RELEASED.into(),
        }];
    }
    Vec::new()
}

/// One process's footprint per device at its sample times.
struct Footprint {
    devices: Vec<u32>,
    times: Vec<f64>,
    /// `vectors[i][k]`: bytes on `devices[k]` at `times[i]`.
    vectors: Vec<Vec<u64>>,
    totals: Vec<(f64, u64)>,
}

fn footprint(per_dev: &BTreeMap<u32, ProcSeries>) -> Footprint {
    let devices: Vec<u32> = per_dev.keys().copied().collect();
    let mut events: Vec<(f64, usize, u64)> = Vec::new();
    for (k, s) in per_dev.values().enumerate() {
        for (t, u) in s {
            if let Some(u) = u {
                events.push((*t, k, *u));
            }
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut cur = vec![0u64; devices.len()];
    let mut times = Vec::new();
    let mut vectors = Vec::new();
    let mut totals = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        while i < events.len() && events[i].0 == t {
            cur[events[i].1] = events[i].2;
            i += 1;
        }
        times.push(t);
        totals.push((t, cur.iter().sum()));
        vectors.push(cur.clone());
    }
    Footprint {
        devices,
        times,
        vectors,
        totals,
    }
}

/// Shares of a load per device: `(device position, bytes)` above zero, and the total.
fn load_of(a: &[u64], b: &[u64]) -> (Vec<u64>, u64) {
    let v: Vec<u64> = a.iter().zip(b).map(|(x, y)| y.saturating_sub(*x)).collect();
    let t = v.iter().sum();
    (v, t)
}

/// A full copy: one device holds at least this share of a load.
const FULL_COPY_SHARE: f64 = 0.95;
/// A split copy: two or more devices hold at least this share of a load each.
const SPLIT_PART_SHARE: f64 = 0.25;

/// The device holding a full copy of a load.
fn concentrated(v: &[u64], total: u64) -> Option<usize> {
    v.iter()
        .position(|x| total > 0 && *x as f64 >= FULL_COPY_SHARE * total as f64)
}

/// Devices holding a part of a split load, when two or more do.
fn split(v: &[u64], total: u64) -> Vec<usize> {
    let parts: Vec<usize> = (0..v.len())
        .filter(|k| total > 0 && v[*k] as f64 >= SPLIT_PART_SHARE * total as f64)
        .collect();
    if parts.len() >= 2 {
        parts
    } else {
        Vec::new()
    }
}

/// Cut points considered per chain: enough for any real load sequence, bounded work.
const MAX_CUTS: usize = 96;

/// `double-load`: a process of the job loads about the same amount twice without a
/// release between, once as a full copy on one GPU and once split across GPUs including
/// that one (a full copy plus `device_map="auto"`): per device, a shard plus a full copy.
fn double_load(cx: &Prepared) -> Vec<Finding> {
    let th = cx.th;
    let min_total = cx.devs.iter().map(|d| d.total).filter(|t| *t > 0).min();
    let Some(min_total) = min_total else {
        return Vec::new();
    };
    let load_min = (th.load_min_fraction * min_total as f64) as u64;
    let step = th
        .step_min
        .max((th.step_fraction * min_total as f64) as u64)
        .max(1);
    let mut out = Vec::new();
    for pid in &cx.tree {
        let Some(per_dev) = cx.procs.get(pid) else {
            continue;
        };
        if per_dev.len() < 2 {
            continue;
        }
        let fp = footprint(per_dev);
        let levels = phase_levels(&fp.totals, &cx.marker_times, step / 4);
        // Vector at each phase level.
        let vec_at = |t: f64| -> Option<&Vec<u64>> {
            let i = fp.times.partition_point(|x| *x <= t);
            i.checked_sub(1).map(|i| &fp.vectors[i])
        };
        let mut found = None;
        'chains: for c in chains(&levels, step) {
            let mut cuts: Vec<usize> = Vec::new();
            for i in c.first..=c.last {
                let changed = cuts
                    .last()
                    .is_none_or(|p| levels[*p].1.abs_diff(levels[i].1) >= step / 4);
                if changed {
                    cuts.push(i);
                }
                if cuts.len() >= MAX_CUTS {
                    break;
                }
            }
            if c.last > c.first && cuts.last() != Some(&c.last) && cuts.len() < MAX_CUTS {
                cuts.push(c.last);
            }
            let vs: Vec<&Vec<u64>> = match cuts.iter().map(|i| vec_at(levels[*i].0)).collect() {
                Some(v) => v,
                None => continue,
            };
            for a in 0..cuts.len() {
                for b in a + 1..cuts.len() {
                    let (la, ta) = load_of(vs[a], vs[b]);
                    if ta < load_min {
                        continue;
                    }
                    for e in b + 1..cuts.len() {
                        let (lb, tb) = load_of(vs[b], vs[e]);
                        if tb < load_min {
                            continue;
                        }
                        let hi = ta.max(tb);
                        if ta.abs_diff(tb) as f64 > th.load_tolerance * hi as f64 {
                            continue;
                        }
                        let ok = |conc: &[u64], ct: u64, spl: &[u64], st: u64| {
                            concentrated(conc, ct).is_some_and(|m| split(spl, st).contains(&m))
                        };
                        if ok(&la, ta, &lb, tb) || ok(&lb, tb, &la, ta) {
                            found = Some((
                                (levels[cuts[a]].0, levels[cuts[b]].0, la, ta),
                                (levels[cuts[b]].0, levels[cuts[e]].0, lb, tb),
                                vs[e].clone(),
                            ));
                            break 'chains;
                        }
                    }
                }
            }
        }
        let Some((first, second, after)) = found else {
            continue;
        };
        let describe = |v: &[u64]| -> String {
            v.iter()
                .enumerate()
                .filter(|(_, b)| **b > 0)
                .map(|(k, b)| format!("GPU {}: {}", fp.devices[k], format_bytes(*b)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut evidence = vec![
            ev_bytes(
                format!(
                    "load 1, {} to {} ({})",
                    fmt_t(first.0),
                    fmt_t(first.1),
                    describe(&first.2)
                ),
                first.3,
            ),
            ev_bytes(
                format!(
                    "load 2, {} to {} ({})",
                    fmt_t(second.0),
                    fmt_t(second.1),
                    describe(&second.2)
                ),
                second.3,
            ),
        ];
        let mut devices = Vec::new();
        for (k, b) in after.iter().enumerate() {
            if *b == 0 {
                continue;
            }
            devices.push(fp.devices[k]);
            evidence.push(ev_bytes(
                format!("held on GPU {} after both", fp.devices[k]),
                *b,
            ));
            if let Some(d) = cx.dev(fp.devices[k]) {
                evidence.extend(uuid_ev(d));
            }
        }
        let total: u64 = after.iter().sum();
        evidence.push(ev_bytes("footprint across GPUs", total));
        out.push(Finding {
            id: ids::DOUBLE_LOAD.into(),
            severity: Severity::Warn,
            title: format!(
                "{} loaded about {} twice: once on one GPU, once split across GPUs {} ({} in \
                 all)",
                cx.who(*pid),
                format_bytes(first.3.max(second.3)),
                super::rules::gpus(&devices),
                format_bytes(total)
            ),
            devices,
            pid: Some(*pid),
            evidence,
            fix: fixes::DOUBLE_LOAD.into(),
        });
    }
    out
}

/// An error that ends dynamic work: out of memory, a driver error, or a crash signal
/// (SIGKILL from the OOM killer, SIGABRT, SIGBUS, SIGSEGV). A stop asked for (SIGINT,
/// SIGTERM, SIGHUP) is not a failure.
fn is_failure(kind: &ErrorKind) -> bool {
    match kind {
        ErrorKind::OutOfMemory | ErrorKind::DriverError => true,
        ErrorKind::KilledBySignal { signal } => matches!(signal, 6 | 7 | 9 | 11),
        ErrorKind::Other => false,
    }
}

/// `overcommit`: one claim (a single phase's rise of at least `claim_min_fraction` of
/// total) leaves free memory near zero with one process of the job holding at least
/// `budget_holder_fraction` of the device, and a failure (out of memory, driver error,
/// kill) follows in later work while the claim is still held.
fn overcommit(cx: &Prepared, double: &[Finding]) -> Vec<Finding> {
    let th = cx.th;
    let has_proc = cx.tree_has_samples();
    let mut out = Vec::new();
    for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
        if d.total == 0 {
            continue;
        }
        let total = d.total as f64;
        let levels = phase_levels(&d.samples, &cx.marker_times, d.step / 4);
        let mut hit = None;
        for i in 1..levels.len() {
            let (t0, l0) = levels[i - 1];
            let (t1, l1) = levels[i];
            let claim = l1.saturating_sub(l0);
            let free = d.total.saturating_sub(l1);
            if (claim as f64) < th.claim_min_fraction * total
                || free as f64 > th.near_zero_free_fraction * total
            {
                continue;
            }
            // A failure after the claim while it is still held.
            let Some(e) = cx.rec.errors.iter().find(|e| {
                e.t_ms >= t0
                    && is_failure(&e.kind)
                    && e.device.is_none_or(|x| x == d.index)
                    && levels
                        .iter()
                        .filter(|(t, _)| *t > t1 && *t < e.t_ms)
                        .all(|(_, l)| l.saturating_add(d.step) > l1)
            }) else {
                continue;
            };
            // Who holds the budget: per-process lists lag the device reading, so the
            // largest holder from the claim up to the failure.
            let holder = if has_proc {
                [t1, e.t_ms]
                    .iter()
                    .filter_map(|t| cx.top_holder_at(d.index, *t))
                    .max_by_key(|(pid, u)| (*u, u32::MAX - *pid))
            } else {
                None
            };
            let held = match holder {
                Some((_, h)) => h,
                None if has_proc => 0,
                None => l1.saturating_sub(d.baseline),
            };
            if (held as f64) < th.budget_holder_fraction * total {
                continue;
            }
            if let Some((pid, _)) = holder {
                if double
                    .iter()
                    .any(|f| f.pid == Some(pid) && f.devices.contains(&d.index))
                {
                    continue;
                }
            }
            hit = Some((t1, l0, l1, claim, free, holder, held, e));
            break;
        }
        let Some((t1, l0, l1, claim, free, holder, held, e)) = hit else {
            continue;
        };
        let util = held as f64 / total;
        let mut evidence: Vec<Evidence> = uuid_ev(d).into_iter().collect();
        evidence.push(ev_bytes(format!("one claim at {}", fmt_t(t1)), claim));
        if let Some(p) = cx.phase_at(t1) {
            evidence.push(ev("during", p));
        }
        evidence.push(ev_bytes("used before the claim", l0));
        evidence.push(ev_bytes("used after the claim", l1));
        evidence.push(ev_bytes("free after the claim", free));
        evidence.push(ev_bytes(
            match holder {
                Some((pid, _)) => format!("{} then held ({util:.2} x total)", cx.who(pid)),
                None => format!("the job then held ({util:.2} x total)"),
            },
            held,
        ));
        evidence.push(ev(
            "then failed",
            format!("at {}: {}", fmt_t(e.t_ms), e.line),
        ));
        out.push(Finding {
            id: ids::OVERCOMMIT.into(),
            severity: Severity::Error,
            title: format!(
                "GPU {}: one claim of {} left {} free ({:.2} x total held), then the job failed",
                d.index,
                format_bytes(claim),
                format_bytes(free),
                util
            ),
            devices: vec![d.index],
            pid: holder.map(|(p, _)| p),
            evidence,
            fix: fixes::OVERCOMMIT.into(),
        });
    }
    out
}

/// `held-after-exit`: every process of the job has exited, yet `exit_grace_ms` later a
/// device it used still holds more than `held_min` above its pre-job level (growth of
/// other processes taken out).
fn held_after_exit(cx: &Prepared) -> Vec<Finding> {
    let th = cx.th;
    let tree: Vec<&RecordedProcess> = cx.rec.processes.iter().filter(|p| p.in_tree).collect();
    if tree.is_empty() || tree.iter().any(|p| p.exit_ms.is_none()) {
        return Vec::new();
    }
    let last_exit = tree
        .iter()
        .filter_map(|p| p.exit_ms)
        .fold(f64::NEG_INFINITY, f64::max);
    let from = last_exit + th.exit_grace_ms;
    let others: Vec<u32> = cx
        .procs
        .keys()
        .copied()
        .filter(|p| !cx.tree.contains(p))
        .collect();
    let others_at = |dev: u32, t: f64| -> u64 {
        others
            .iter()
            .filter_map(|p| cx.procs.get(p)?.get(&dev))
            .filter_map(|s| proc_level_at(s, t))
            .sum()
    };
    let mut out = Vec::new();
    for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
        let lo = d.samples.partition_point(|(t, _)| *t < from);
        let Some(after) = d.samples[lo..].iter().map(|p| p.1).min() else {
            continue;
        };
        let t_end = d.samples.last().map(|p| p.0).unwrap_or(from);
        // Others' growth since the pre-job reading (a process that was already there but
        // listed a little later counts as growth: the safe direction).
        let others_growth =
            others_at(d.index, t_end).saturating_sub(others_at(d.index, d.samples[0].0));
        let held = after
            .saturating_sub(d.baseline)
            .saturating_sub(others_growth);
        if held < th.held_min {
            continue;
        }
        let mut evidence: Vec<Evidence> = uuid_ev(d).into_iter().collect();
        evidence.push(ev("the job's last process exited", fmt_t(last_exit)));
        evidence.push(ev_bytes("used before the job", d.baseline));
        evidence.push(ev_bytes(
            format!("used at least, from {} on", fmt_t(from)),
            after,
        ));
        if others_growth > 0 {
            evidence.push(ev_bytes(
                "growth of other processes (not counted)",
                others_growth,
            ));
        }
        evidence.push(ev_bytes("not returned", held));
        let still: Vec<String> = tree
            .iter()
            .filter(|p| {
                cx.procs
                    .get(&p.pid)
                    .and_then(|m| m.get(&d.index))
                    .is_some_and(|s| {
                        let i = s.partition_point(|(t, _)| *t < from);
                        s[i..].iter().any(|(_, u)| u.is_some_and(|u| u > 0))
                    })
            })
            .map(|p| cx.who(p.pid))
            .collect();
        if !still.is_empty() {
            evidence.push(ev("exited, still listed by NVML", still.join(", ")));
        }
        out.push(Finding {
            id: ids::HELD_AFTER_EXIT.into(),
            severity: Severity::Error,
            title: format!(
                "GPU {}: {} still used {} after the job's processes exited",
                d.index,
                format_bytes(held),
                fmt_t(from - last_exit)
            ),
            devices: vec![d.index],
            pid: None,
            evidence,
            fix: fixes::HELD_AFTER_EXIT.into(),
        });
    }
    out
}

#[cfg(test)]
mod tests;
