//! What a recording shows, per GPU the job used: the device series, the job's bytes over
//! time (used memory minus what was there before it and what other processes held), the
//! other processes as bounded neighbours with their presence, and what one context costs.
//! A list shows another process's change late (lists are read after the memory sampler
//! saw the move, later still on a loaded host): each change is placed where the device's
//! samples made that move, between the list that showed it and the one before. The others
//! of a GPU are merged into one series of changes, swept with one cursor beside the
//! device's samples: linear in the samples and the lists' gaps.

use super::limits::{
    CONTEXT_SIZED_MAX, DEFAULT_CONTEXT, MAX_NEIGHBOURS_PER_GPU, MIN_QUANTUM, PEAK_STEP_MIN,
};
use super::source::Source;
use super::ReproError;
use crate::model::{DeviceSeries, ProcessSample};
use std::collections::{BTreeMap, BTreeSet};

/// One GPU of the recording: its NVML index, total and sorted samples.
pub(super) struct Dev {
    pub(super) phys: u32,
    pub(super) total: u64,
    pub(super) samples: Vec<(f64, u64)>,
}

/// Samples of one process on one device, sorted, `None` readings left out.
type Series = Vec<(f64, u64)>;

/// Every process's readings, by (pid, device): one pass over the samples, then one sort
/// per series (O(n log n) in the samples, one copy of their numbers).
fn per_process(samples: &[ProcessSample]) -> BTreeMap<(u32, u32), Series> {
    let mut m: BTreeMap<(u32, u32), Series> = BTreeMap::new();
    for p in samples {
        if let Some(u) = p.used {
            m.entry((p.pid, p.device)).or_default().push((p.t_ms, u));
        }
    }
    for s in m.values_mut() {
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    m
}

/// When a process was on a device, as the lists showed it: from `start` (when the device's
/// samples made room for its first reading, or the start of the recording when it was in
/// the first process round) to `gone` (when the samples gave its last reading back, before
/// the device's next list that no longer showed it; `None`: it was still there when the
/// recording ended).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Presence {
    pub(super) start: f64,
    pub(super) gone: Option<f64>,
}

/// Where, in the device's `samples` after `from` and up to `to`, used memory first made a
/// move of `delta` (within a quarter of it) from its level at `from`: when a change a list
/// showed at `to`, and not at `from`, happened. A list is stamped when its call started
/// and may answer a little later, so `to` is given one process period more by callers.
/// `None`: no such move (another change hid it); the caller keeps its own estimate.
fn placed(samples: &[(f64, u64)], from: f64, to: f64, delta: i128) -> Option<f64> {
    if delta == 0 {
        return None;
    }
    let slack = delta.abs() / 4;
    let i = samples.partition_point(|(t, _)| *t <= from);
    let base = i128::from(match i.checked_sub(1) {
        Some(j) => samples[j].1,
        None => samples.first()?.1,
    });
    samples[i..]
        .iter()
        .take_while(|(t, _)| *t <= to)
        .find(|(_, u)| {
            let moved = i128::from(*u) - base;
            if delta > 0 {
                moved >= delta - slack
            } else {
                moved <= delta + slack
            }
        })
        .map(|p| p.0)
}

/// `s`'s presence on a device whose lists were read at `rounds` and whose memory is
/// `samples`; `lead`: how late a list is taken to be where the samples do not show the move.
fn presence(
    s: &Series,
    first_round: f64,
    lead: f64,
    rounds: &[f64],
    samples: &[(f64, u64)],
) -> Option<Presence> {
    let (first, last) = (s.first()?, s.last()?);
    let start = if first.0 <= first_round + 0.5 {
        f64::NEG_INFINITY
    } else {
        let before = rounds.partition_point(|r| *r < first.0);
        let from = before
            .checked_sub(1)
            .map_or(f64::NEG_INFINITY, |i| rounds[i]);
        placed(samples, from, first.0 + lead, i128::from(first.1))
            .unwrap_or((first.0 - lead).max(from))
    };
    let next = rounds.partition_point(|r| *r <= last.0);
    let gone = rounds
        .get(next)
        .map(|&g| placed(samples, last.0, g + lead, -i128::from(last.1)).unwrap_or(g));
    Some(Presence { start, gone })
}

/// A process's level as changes over time: `+first` at its start, each change where the
/// device's `samples` made it (else at its reading), `-last` when it was gone. Summed over
/// processes and swept with one cursor, they give the processes' total at any time in
/// O(changes).
fn changes(
    s: &Series,
    p: Presence,
    (samples, lead): (&[(f64, u64)], f64),
    out: &mut Vec<(f64, i128)>,
) {
    let mut prev = 0i128;
    let mut prev_t = f64::NEG_INFINITY;
    for (k, &(t, u)) in s.iter().enumerate() {
        let u = i128::from(u);
        let at = if k == 0 {
            p.start.min(t)
        } else {
            placed(samples, prev_t, t + lead, u - prev).unwrap_or(t)
        };
        if u != prev {
            out.push((at, u - prev));
            prev = u;
        }
        prev_t = t;
    }
    if let Some(g) = p.gone {
        if prev != 0 {
            out.push((g, -prev));
        }
    }
}

/// A cursor over sorted changes: the running total at nondecreasing times.
struct Sweep<'a> {
    changes: &'a [(f64, i128)],
    next: usize,
    total: i128,
}

impl<'a> Sweep<'a> {
    fn new(changes: &'a [(f64, i128)]) -> Self {
        Sweep {
            changes,
            next: 0,
            total: 0,
        }
    }

    /// The total at `t` (readings at `t` included); `t` never decreases between calls.
    fn at(&mut self, t: f64) -> u64 {
        while let Some(&(ct, d)) = self.changes.get(self.next) {
            if ct > t {
                break;
            }
            self.total += d;
            self.next += 1;
        }
        u64::try_from(self.total.max(0)).unwrap_or(u64::MAX)
    }
}

/// The job's processes the one replay worker stands for: the one on the most GPUs (then
/// the largest), and every other one that shares no GPU with it (ranks of their own GPUs).
/// A process of the job on a GPU the worker also uses (a helper holding memory beside it)
/// is replayed as a neighbour instead: one worker cannot be two processes on one GPU.
fn worker_pids(src: &Source, procs: &BTreeMap<(u32, u32), Series>) -> BTreeSet<u32> {
    let mut per: BTreeMap<u32, (BTreeSet<u32>, u64)> = BTreeMap::new();
    for ((pid, dev), s) in procs {
        let peak = s.iter().map(|p| p.1).max().unwrap_or(0);
        if src.tree.contains(pid) && peak > 0 {
            let e = per.entry(*pid).or_default();
            e.0.insert(*dev);
            e.1 = e.1.saturating_add(peak);
        }
    }
    let Some((main, (main_devs, _))) = per
        .iter()
        .max_by_key(|(pid, (devs, peak))| (devs.len(), *peak, std::cmp::Reverse(**pid)))
    else {
        // No per-process data: the device series is all there is.
        return src.tree.clone();
    };
    let mut out: BTreeSet<u32> = src.tree.clone();
    for (pid, (devs, _)) in &per {
        if pid != main && !devs.is_disjoint(main_devs) {
            out.remove(pid);
        }
    }
    out
}

/// Another process on a GPU the job used (or several merged), replayed beside the worker
/// while the recording showed it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Other {
    pub(super) device: u32,
    /// How many processes it stands for (more than one: merged, see
    /// [`MAX_NEIGHBOURS_PER_GPU`]); `None`: memory no process list showed.
    pub(super) processes: Option<usize>,
    pub(super) peak: u64,
    pub(super) presence: Presence,
}

/// The GPUs the job used and the rest of the picture.
pub(super) struct Picture {
    pub(super) devs: Vec<Dev>,
    /// Job bytes per scenario device at each of its samples.
    pub(super) job: Vec<Vec<(f64, u64)>>,
    pub(super) others: Vec<Other>,
    pub(super) context: u64,
}

/// The other processes of one GPU as at most [`MAX_NEIGHBOURS_PER_GPU`]: the largest
/// ones alone, the rest as one whose peak is the most they held together.
fn bounded_others(
    index: u32,
    mut each: Vec<(u64, Presence, &Series)>,
    (samples, lead): (&[(f64, u64)], f64),
) -> Vec<Other> {
    each.sort_by_key(|e| std::cmp::Reverse(e.0));
    let keep = if each.len() > MAX_NEIGHBOURS_PER_GPU {
        MAX_NEIGHBOURS_PER_GPU - 1
    } else {
        each.len()
    };
    let rest = each.split_off(keep);
    let mut out: Vec<Other> = each
        .into_iter()
        .map(|(peak, presence, _)| Other {
            device: index,
            processes: Some(1),
            peak,
            presence,
        })
        .collect();
    if !rest.is_empty() {
        let mut ch = Vec::new();
        let mut start = f64::INFINITY;
        let mut gone = Some(f64::NEG_INFINITY);
        for (_, p, s) in &rest {
            changes(s, *p, (samples, lead), &mut ch);
            start = start.min(p.start);
            gone = match (gone, p.gone) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
        ch.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut sweep = Sweep::new(&ch);
        let peak = ch.iter().map(|c| sweep.at(c.0)).max().unwrap_or(0);
        out.push(Other {
            device: index,
            processes: Some(rest.len()),
            peak,
            presence: Presence { start, gone },
        });
    }
    out
}

pub(super) fn picture(src: &Source, process_period_ms: f64) -> Result<Picture, ReproError> {
    let procs = per_process(&src.processes);
    let first_round = src
        .processes
        .iter()
        .map(|p| p.t_ms)
        .fold(f64::INFINITY, f64::min);
    // When each device's process list was read (whoever it showed).
    let mut rounds: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for p in &src.processes {
        rounds.entry(p.device).or_default().push(p.t_ms);
    }
    for r in rounds.values_mut() {
        r.sort_by(f64::total_cmp);
        r.dedup();
    }
    let worker = worker_pids(src, &procs);
    let tree_has_samples = procs.keys().any(|(pid, _)| src.tree.contains(pid));
    // Each device's processes, the worker's and the others', in one pass.
    type OnDev<'a> = (Vec<(u32, &'a Series)>, Vec<(u32, &'a Series)>);
    let mut by_dev: BTreeMap<u32, OnDev> = BTreeMap::new();
    for ((pid, dev), s) in &procs {
        let e = by_dev.entry(*dev).or_default();
        if worker.contains(pid) {
            e.0.push((*pid, s));
        } else {
            e.1.push((*pid, s));
        }
    }
    let mut all: Vec<&DeviceSeries> = src
        .series
        .iter()
        .filter(|s| !s.samples.is_empty())
        .collect();
    all.sort_by_key(|s| s.device);
    if all.is_empty() {
        return Err(ReproError::NoSamples);
    }
    let no_lists = Vec::new();
    let mut devs = Vec::new();
    let mut job = Vec::new();
    let mut others = Vec::new();
    for s in all {
        let mut samples = s.samples.clone();
        samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total = if s.total > 0 {
            s.total
        } else {
            src.devices
                .iter()
                .find(|d| d.index == s.device)
                .map_or(0, |d| d.total)
        };
        let d = Dev {
            phys: s.device,
            total,
            samples,
        };
        let (mine, theirs) = by_dev
            .get(&d.phys)
            .map_or((&no_lists, &no_lists), |e| (&e.0, &e.1));
        let r = rounds.get(&d.phys).map_or(&[][..], |r| r.as_slice());
        let mut their_changes = Vec::new();
        let mut each = Vec::new();
        for (_, sr) in theirs.iter() {
            if let Some(p) = presence(sr, first_round, process_period_ms, r, &d.samples) {
                changes(sr, p, (&d.samples, process_period_ms), &mut their_changes);
                each.push((sr.iter().map(|x| x.1).max().unwrap_or(0), p, *sr));
            }
        }
        their_changes.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut my_changes = Vec::new();
        for (_, sr) in mine.iter() {
            if let Some(p) = presence(sr, first_round, process_period_ms, r, &d.samples) {
                changes(sr, p, (&d.samples, process_period_ms), &mut my_changes);
            }
        }
        my_changes.sort_by(|a, b| a.0.total_cmp(&b.0));
        // The job's bytes: used minus what was there before it that no list shows, minus
        // what other processes held at that moment. What was there before it is the first
        // reading less the others' and the job's own first levels (a job attached to with
        // `run --pid` already holds memory at the first reading).
        let (t0, used0) = d.samples[0];
        let unattributed = used0
            .saturating_sub(Sweep::new(&their_changes).at(t0))
            .saturating_sub(Sweep::new(&my_changes).at(t0));
        let mut sweep = Sweep::new(&their_changes);
        let series: Vec<(f64, u64)> = d
            .samples
            .iter()
            .map(|&(t, used)| {
                (
                    t,
                    used.saturating_sub(unattributed.saturating_add(sweep.at(t))),
                )
            })
            .collect();
        let used_by_tree = mine.iter().any(|(_, sr)| sr.iter().any(|p| p.1 > 0));
        let step = PEAK_STEP_MIN.max(d.total / 50);
        let rose = series.iter().any(|p| p.1 >= step);
        if !(used_by_tree || (!tree_has_samples && rose)) {
            continue;
        }
        let index = devs.len() as u32;
        each.retain(|e| e.0 > 0);
        others.extend(bounded_others(index, each, (&d.samples, process_period_ms)));
        if unattributed >= MIN_QUANTUM {
            others.push(Other {
                device: index,
                processes: None,
                peak: unattributed,
                presence: Presence {
                    start: f64::NEG_INFINITY,
                    gone: None,
                },
            });
        }
        devs.push(d);
        job.push(series);
    }
    if devs.is_empty() {
        return Err(ReproError::NoJobMemory);
    }
    // What one context cost: the job's first footprint on a GPU when that was a context
    // alone, else the default.
    let context = procs
        .iter()
        .filter(|((pid, dev), _)| worker.contains(pid) && devs.iter().any(|d| d.phys == *dev))
        .filter_map(|(_, s)| s.iter().find(|p| p.1 > 0).map(|p| p.1))
        .filter(|b| *b <= CONTEXT_SIZED_MAX)
        .min()
        .unwrap_or(DEFAULT_CONTEXT);
    Ok(Picture {
        devs,
        job,
        others,
        context,
    })
}
