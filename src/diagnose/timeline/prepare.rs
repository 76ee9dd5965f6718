//! Prepared views of a recording shared by every rule: sorted device series with their
//! baselines and noise steps, per-process per-device series, the job's processes and devices,
//! and the formatting helpers the rules' evidence uses.

use super::evidence::ev;
use super::{ErrorEvent, ErrorKind, RecordedProcess, Recording, TimelineThresholds};
use crate::model::{Evidence, MarkerKind};
use crate::record::stderr::OomDetail;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// `[t_ms, used]` samples of one device, in time order.
pub(super) type Points<'a> = Cow<'a, [(f64, u64)]>;

pub(super) struct Dev<'a> {
    pub(super) index: u32,
    pub(super) total: u64,
    pub(super) uuid: Option<&'a str>,
    pub(super) samples: Points<'a>,
    /// Used before the job (the first sample).
    pub(super) baseline: u64,
    /// Level changes smaller than this are noise.
    pub(super) step: u64,
    /// How it is named in titles: its index, or `0/1` for a MIG instance (as scan names it).
    pub(super) name: String,
}

impl Dev<'_> {
    pub(super) fn level_at(&self, t: f64) -> Option<u64> {
        level_at(&self.samples, t)
    }

    pub(super) fn label(&self) -> String {
        match self.uuid {
            Some(u) => format!("GPU {} ({u})", self.name),
            None => format!("GPU {}", self.name),
        }
    }

    pub(super) fn pct(&self, b: u64) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            b as f64 * 100.0 / self.total as f64
        }
    }
}

/// One process's samples on one device, in time order (`None`: not available).
pub(super) type ProcSeries = Vec<(f64, Option<u64>)>;

pub(super) struct Prepared<'a> {
    pub(super) rec: &'a Recording,
    pub(super) th: &'a TimelineThresholds,
    pub(super) devs: Vec<Dev<'a>>,
    /// Marker times, sorted.
    pub(super) marker_times: Vec<f64>,
    /// pid -> device -> samples.
    pub(super) procs: BTreeMap<u32, BTreeMap<u32, ProcSeries>>,
    /// [`Self::procs`] with a sole holder's series at the device's resolution
    /// ([`sole_holder_at_device_resolution`]), for the rules that read one process's
    /// phases shorter than a list round (`double-load`, `overcommit`'s budget holder).
    pub(super) procs_fine: BTreeMap<u32, BTreeMap<u32, ProcSeries>>,
    /// Processes of the job.
    pub(super) tree: BTreeSet<u32>,
    /// Devices the job used: where its processes held memory, else where memory rose.
    pub(super) job_devices: BTreeSet<u32>,
}

/// Where one process is the only one NVML lists on a device with memory, and every list
/// sample of it accounts for the device's whole rise above its first reading (no holder NVML
/// does not list: within one noise step), its series there is refined with the device's
/// readings between its first and last list sample: memory is read every period, process
/// lists only where they can have changed (issue 36), so without this a process's phases
/// shorter than the list period are invisible to the per-process rules (`double-load`).
fn sole_holder_at_device_resolution(d: &Dev, procs: &mut BTreeMap<u32, BTreeMap<u32, ProcSeries>>) {
    let holders: Vec<u32> = (procs.iter())
        .filter(|(_, per)| {
            per.get(&d.index)
                .is_some_and(|s| s.iter().any(|(_, u)| u.is_some_and(|u| u > 0)))
        })
        .map(|(pid, _)| *pid)
        .collect();
    let [pid] = holders[..] else {
        return;
    };
    let Some(series) = procs.get_mut(&pid).and_then(|m| m.get_mut(&d.index)) else {
        return;
    };
    let listed: Vec<(f64, u64)> = (series.iter())
        .filter_map(|(t, u)| u.map(|u| (*t, u)))
        .collect();
    let (Some(first), Some(last)) = (listed.first(), listed.last()) else {
        return;
    };
    // A list call runs between two readings: it agrees with either (usage moving fast).
    let agrees = listed.iter().all(|(t, u)| {
        let after = d.samples.iter().find(|(ts, _)| *ts > *t).map(|p| p.1);
        [d.level_at(*t), after]
            .into_iter()
            .flatten()
            .any(|l| l.saturating_sub(d.baseline).abs_diff(*u) <= d.step)
    });
    if !agrees || listed.len() < 2 {
        return;
    }
    let (from, to) = (first.0, last.0);
    series.extend(
        (d.samples.iter())
            .filter(|(t, _)| *t > from && *t < to)
            .map(|(t, l)| (*t, Some(l.saturating_sub(d.baseline)))),
    );
    series.sort_by(|a, b| a.0.total_cmp(&b.0));
}

pub(super) fn sorted_points(s: &[(f64, u64)]) -> Points<'_> {
    if s.windows(2).all(|w| w[0].0 <= w[1].0) {
        Cow::Borrowed(s)
    } else {
        let mut v = s.to_vec();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        Cow::Owned(v)
    }
}

/// The last sample at or before `t`.
pub(super) fn level_at(s: &[(f64, u64)], t: f64) -> Option<u64> {
    let i = s.partition_point(|(ts, _)| *ts <= t);
    i.checked_sub(1).map(|i| s[i].1)
}

pub(super) fn proc_level_at(s: &[(f64, Option<u64>)], t: f64) -> Option<u64> {
    let i = s.partition_point(|(ts, _)| *ts <= t);
    i.checked_sub(1).and_then(|i| s[i].1)
}

impl<'a> Prepared<'a> {
    pub(super) fn new(rec: &'a Recording, th: &'a TimelineThresholds) -> Prepared<'a> {
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
                    name: info
                        .and_then(|d| d.label.clone())
                        .unwrap_or_else(|| s.device.to_string()),
                }
            })
            .collect();
        let mut marker_times: Vec<f64> = rec.judged_markers().iter().map(|m| m.t_ms).collect();
        marker_times.sort_by(f64::total_cmp);
        let mut procs: BTreeMap<u32, BTreeMap<u32, ProcSeries>> = BTreeMap::new();
        for p in rec.judged_processes() {
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
        let mut procs_fine = procs.clone();
        for d in &devs {
            sole_holder_at_device_resolution(d, &mut procs_fine);
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
            procs_fine,
            tree,
            job_devices,
        }
    }

    pub(super) fn dev(&self, index: u32) -> Option<&Dev<'a>> {
        self.devs.iter().find(|d| d.index == index)
    }

    /// Whether any process of the job has per-process samples (on any device).
    /// What the processes outside the job hold on `device` at `t` (their last listed
    /// usage at or before it), summed: the growth of others is taken out of what the job
    /// left behind.
    pub(super) fn others_level_at(&self, device: u32, t: f64) -> u64 {
        self.procs
            .iter()
            .filter(|(pid, _)| !self.tree.contains(pid))
            .filter_map(|(_, per_dev)| per_dev.get(&device))
            .filter_map(|s| proc_level_at(s, t))
            .sum()
    }

    /// How much other processes' memory on `d` grew from before the job to `t`, as their
    /// lists show it. What the first process round lists was in the baseline (the first
    /// sample) as far as used had not risen by then: a neighbour, or an exited process's
    /// memory a driver kept, listed a little after the first sample is no growth; one that
    /// came in between (used rose) is.
    pub(super) fn others_growth(&self, d: &Dev, t: f64) -> u64 {
        let t0 = d.samples.first().map_or(0.0, |p| p.0);
        let first_round = self
            .procs
            .values()
            .filter_map(|m| m.get(&d.index)?.first().map(|p| p.0))
            .fold(f64::INFINITY, f64::min);
        let mut before = self.others_level_at(d.index, t0);
        if first_round.is_finite() {
            let rose = d
                .level_at(first_round)
                .unwrap_or(0)
                .saturating_sub(d.baseline);
            let in_baseline = self
                .others_level_at(d.index, first_round)
                .saturating_sub(rose)
                .min(d.baseline);
            before = before.max(in_baseline);
        }
        self.others_level_at(d.index, t).saturating_sub(before)
    }

    pub(super) fn tree_has_samples(&self) -> bool {
        self.tree.iter().any(|p| self.procs.contains_key(p))
    }

    /// What the job's processes held on `device` at `t` (`None`: no per-process data).
    pub(super) fn tree_usage_at(&self, device: u32, t: f64) -> Option<u64> {
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

    /// The job's own usage of `device` over time: the device's samples less what other
    /// processes held at each moment by their per-process samples (a neighbour's growth on a
    /// shared GPU is not the job's). `None`: no other process has per-process numbers there
    /// (use the device as it is).
    pub(super) fn job_points(&self, device: u32) -> Option<Vec<(f64, u64)>> {
        let d = self.dev(device)?;
        let others: Vec<&ProcSeries> = self
            .procs
            .iter()
            .filter(|(pid, _)| !self.tree.contains(pid))
            .filter_map(|(_, m)| m.get(&device))
            .filter(|s| s.iter().any(|(_, u)| u.is_some_and(|u| u > 0)))
            .collect();
        if others.is_empty() {
            return None;
        }
        Some(
            d.samples
                .iter()
                .map(|&(t, used)| {
                    let held: u64 = others
                        .iter()
                        .filter_map(|s| proc_level_at(s, t))
                        .fold(0u64, u64::saturating_add);
                    (t, used.saturating_sub(held))
                })
                .collect(),
        )
    }

    /// The job's process holding the most on `device` at `t`.
    pub(super) fn top_holder_at(&self, device: u32, t: f64) -> Option<(u32, u64)> {
        self.top_holder_in(&self.procs, device, t)
    }

    /// [`Self::top_holder_at`] over [`Self::procs_fine`] (`overcommit`: who holds the
    /// budget right after one claim, between two list rounds).
    pub(super) fn top_holder_fine_at(&self, device: u32, t: f64) -> Option<(u32, u64)> {
        self.top_holder_in(&self.procs_fine, device, t)
    }

    fn top_holder_in(
        &self,
        procs: &BTreeMap<u32, BTreeMap<u32, ProcSeries>>,
        device: u32,
        t: f64,
    ) -> Option<(u32, u64)> {
        self.tree
            .iter()
            .filter_map(|pid| {
                let s = procs.get(pid)?.get(&device)?;
                proc_level_at(s, t).map(|u| (*pid, u))
            })
            .max_by_key(|(pid, u)| (*u, u32::MAX - *pid))
    }

    pub(super) fn process(&self, pid: u32) -> Option<&RecordedProcess> {
        self.rec.processes.iter().find(|p| p.pid == pid)
    }

    pub(super) fn who(&self, pid: u32) -> String {
        match self.process(pid).map(|p| (p.name.as_deref(), p.in_tree)) {
            Some((Some(n), _)) => format!("PID {pid} ({n})"),
            // The job's process whose name could not be vouched for (read only before a
            // list named it, `record::tree`): said, never guessed (issue 39).
            Some((None, true)) => format!("PID {pid} (name unknown)"),
            _ => format!("PID {pid}"),
        }
    }

    /// The label of the last step / marker at or before `t`.
    pub(super) fn phase_at(&self, t: f64) -> Option<&str> {
        self.rec
            .judged_markers()
            .into_iter()
            .filter(|m| {
                m.t_ms <= t
                    && matches!(
                        m.kind,
                        MarkerKind::Step | MarkerKind::Marker | MarkerKind::Release
                    )
            })
            .max_by(|a, b| a.t_ms.total_cmp(&b.t_ms))
            .map(|m| m.label.as_str())
    }

    /// The device an error happened on: the one it names, else the job's device with the
    /// least free memory at that moment.
    pub(super) fn error_device(&self, e: &ErrorEvent) -> Option<u32> {
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

    /// The job's `PYTORCH_CUDA_ALLOC_CONF` as the process behind `e` saw it: the process that
    /// printed it, else the job's largest holder on its device then, else the first process
    /// of the job where it was seen set (children inherit it).
    pub(super) fn alloc_conf(&self, e: &ErrorEvent) -> Option<&str> {
        let conf = |pid: u32| {
            self.process(pid)
                .and_then(|p| p.pytorch_cuda_alloc_conf.as_deref())
        };
        e.pid
            .and_then(conf)
            .or_else(|| {
                let d = self.error_device(e)?;
                conf(self.top_holder_at(d, e.t_ms)?.0)
            })
            .or_else(|| {
                self.rec
                    .processes
                    .iter()
                    .filter(|p| p.in_tree)
                    .find_map(|p| p.pytorch_cuda_alloc_conf.as_deref())
            })
    }

    /// The job's `PYTORCH_ALLOC_CONF` (PyTorch 2.8+'s name), from the first of its processes
    /// where it was seen set.
    pub(super) fn alloc_conf_new_name(&self) -> Option<&str> {
        self.rec
            .processes
            .iter()
            .filter(|p| p.in_tree)
            .find_map(|p| p.pytorch_alloc_conf.as_deref())
    }

    pub(super) fn ooms(&self) -> impl Iterator<Item = &ErrorEvent> {
        self.rec
            .errors
            .iter()
            .filter(|e| e.kind == ErrorKind::OutOfMemory)
    }
}

// ---------------------------------------------------------------------------------------
// Formatting helpers.

/// What a PyTorch out-of-memory line states, as the recogniser read it
/// ([`ErrorEvent::facts`]: the same for a live recording and one rebuilt from a report).
pub(super) fn oom_detail(e: &ErrorEvent) -> Option<OomDetail> {
    if e.kind == ErrorKind::OutOfMemory {
        e.facts().detail.clone()
    } else {
        None
    }
}

/// Whether a `PYTORCH_CUDA_ALLOC_CONF` value turns expandable segments on
/// (`expandable_segments:True`, any case, among comma-separated options).
pub(super) fn expandable_on(conf: &str) -> bool {
    conf.split(',').any(|opt| {
        let mut kv = opt.splitn(2, ':');
        let (k, v) = (
            kv.next().unwrap_or("").trim(),
            kv.next().unwrap_or("").trim(),
        );
        k.eq_ignore_ascii_case("expandable_segments") && v.eq_ignore_ascii_case("true")
    })
}

pub(super) fn fmt_t(ms: f64) -> String {
    if ms.abs() < 1000.0 {
        format!("{ms:.1} ms")
    } else if ms.abs() < 120_000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        format!("{:.1} min", ms / 60_000.0)
    }
}

pub(super) fn uuid_ev(d: &Dev) -> Option<Evidence> {
    d.uuid.map(|u| ev(format!("GPU {} UUID", d.index), u))
}
