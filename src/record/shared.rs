//! What the recorder's threads (memory sampler, process thread) and the feeding calls
//! (markers, readings, errors) share: the device series, the process samples, the tree, the
//! markers and errors, the stream; and how a process round and a reading are recorded.

use super::bounded::{ListRuns, SeriesBuilder};
use super::processes::Lists;
use super::stream::{lock_sink, Sink, StreamLine};
use super::tree::{ProcessTree, TreeChange};
use super::{ErrorEvent, RecordedProcess};
use crate::model::{Marker, ProcessSample};
use std::sync::{Arc, Mutex, MutexGuard};

/// What the threads and the feeding calls share.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) markers: Vec<Marker>,
    /// Phase boundaries for the rules only (replay's step ends and release points).
    pub(super) boundaries: Vec<Marker>,
    /// The device series (recorded-device order), shared with the sampler thread: its
    /// rounds, and the readings of markers, step boundaries and process rounds.
    pub(super) series: Series,
    /// Bounded recordings keep the first and last of a run of identical process lists.
    pub(super) list_runs: Option<ListRuns>,
    /// The latest readings besides the sampler's (markers, process rounds), at most
    /// [`RECENT_READINGS`], and how many were ever taken: for a live status.
    pub(super) recent_readings: std::collections::VecDeque<Vec<Option<u64>>>,
    pub(super) readings_taken: usize,
    pub(super) processes: Vec<ProcessSample>,
    /// Process usage read at boundaries, for the rules only.
    pub(super) boundary_processes: Vec<ProcessSample>,
    pub(super) tree: Option<ProcessTree>,
    /// Processes of the job fed by the caller (replay's worker).
    pub(super) job: Vec<RecordedProcess>,
    pub(super) errors: Vec<ErrorEvent>,
    /// The job's processes seen holding the driver's device files (after the command).
    pub(super) device_file_holders: Vec<super::DeviceFileHolder>,
    pub(super) sink: Option<Arc<Mutex<Sink>>>,
    pub(super) failed_queries: u64,
}

pub(super) fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(super) fn stream(&mut self, line: &StreamLine) {
        if let Some(s) = self.sink.as_ref() {
            lock_sink(s).line(line);
        }
    }

    pub(super) fn tree_changes(&mut self, changes: Vec<TreeChange>) {
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

    /// Keep (and stream) a reading; a failed device counts as a failed query. `event`: a
    /// marker's or a boundary's (the series keeps full resolution around it).
    pub(super) fn point(&mut self, t: f64, used: Vec<Option<u64>>, event: bool) {
        let each: Vec<Option<(f64, u64)>> = used.into_iter().map(|u| u.map(|u| (t, u))).collect();
        self.point_each(&each, t, event);
    }

    /// [`Shared::point`] with each device's value at its own time (`None`: no reading); the
    /// stream's line, which has one time, carries `first`, the earliest.
    pub(super) fn point_each(&mut self, each: &[Option<(f64, u64)>], first: f64, event: bool) {
        self.failed_queries += each.iter().filter(|u| u.is_none()).count() as u64;
        {
            let mut series = lock_series(&self.series);
            for (b, u) in series.iter_mut().zip(each) {
                let t = u.map_or(first, |(t, _)| t);
                if event {
                    b.event(t);
                }
                if let Some((t, u)) = u {
                    b.push(*t, *u);
                }
            }
        }
        let used: Vec<Option<u64>> = each.iter().map(|u| u.map(|(_, u)| u)).collect();
        if self.recent_readings.len() >= RECENT_READINGS {
            self.recent_readings.pop_front();
        }
        self.recent_readings.push_back(used.clone());
        self.readings_taken += 1;
        self.stream(&StreamLine::Memory { t_ms: first, used });
    }

    /// Keep one device's list of a round (bounded recordings: see [`ListRuns`]).
    pub(super) fn keep_list(&mut self, device: u32, list: Vec<ProcessSample>) {
        match self.list_runs.as_mut() {
            Some(runs) => self.processes.extend(runs.keep(device, list)),
            None => self.processes.extend(list),
        }
    }

    /// An event at `t` (a marker, an error, a boundary): the series keep full resolution
    /// around it.
    pub(super) fn event(&mut self, t: f64) {
        for b in lock_series(&self.series).iter_mut() {
            b.event(t);
        }
    }

    /// Refresh the tree at `t`; whether it changed.
    pub(super) fn refresh_tree(&mut self, t: f64) -> bool {
        let Some(tree) = self.tree.as_mut() else {
            return false;
        };
        let changes = tree.refresh(t);
        let changed = !changes.is_empty();
        self.tree_changes(changes);
        changed
    }

    /// One process round: a reading (`reading`, with when it was taken), then the lists
    /// (each with when its calls ran).
    pub(super) fn round(&mut self, reading: Option<(f64, Vec<Option<u64>>)>, lists: Lists) {
        if let Some((t_reading, used)) = reading {
            self.point(t_reading, used, false);
        }
        for (device, t_list, list) in lists {
            let mut kept = Vec::with_capacity(list.len());
            for p in list {
                let (pid, tree) = match self.tree.as_mut() {
                    Some(tree) => {
                        let (member, change) = tree.resolve(p.pid, t_list);
                        self.tree_changes(change.into_iter().collect());
                        (member.unwrap_or(p.pid), member.is_some())
                    }
                    None => (p.pid, false),
                };
                kept.push(ProcessSample {
                    t_ms: t_list,
                    device,
                    pid,
                    used: p.used,
                });
                self.stream(&StreamLine::Process {
                    t_ms: t_list,
                    device,
                    pid,
                    used: p.used,
                    tree,
                });
            }
            self.keep_list(device, kept);
        }
    }
}

/// Readings kept for [`Recorder::peaks_since`].
pub(super) const RECENT_READINGS: usize = 4096;

/// Device series shared by the sampler thread and the readings.
pub(crate) type Series = Arc<Mutex<Vec<SeriesBuilder>>>;

pub(crate) fn lock_series(m: &Mutex<Vec<SeriesBuilder>>) -> MutexGuard<'_, Vec<SeriesBuilder>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
