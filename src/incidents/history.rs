//! The bounded memory history of every GPU: one point per collection (each GPU's used and
//! total bytes, each process's bytes per GPU), kept for a time window and at most
//! [`MAX_POINTS`] points, and the pod each GPU process was last seen in. Its size is
//! [`History::approx_bytes`]; docs/fleet.md gives it per GPU-hour.

use crate::model::{DeviceSeries, PodRef, ProcessSample, ScanResult, Timeline};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Points kept at most, whatever the window.
pub const MAX_POINTS: usize = 4096;
/// Processes kept per point at most.
pub const MAX_PROCESSES: usize = 256;

/// One GPU at one collection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DevicePoint {
    pub index: u32,
    pub used: u64,
    pub total: u64,
}

/// One process's memory on one GPU at one collection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessPoint {
    pub pid: u32,
    pub device: u32,
    pub used: Option<u64>,
}

/// One collection.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub t_unix: f64,
    pub devices: Vec<DevicePoint>,
    pub processes: Vec<ProcessPoint>,
}

/// The history.
#[derive(Debug, Clone)]
pub struct History {
    window: Duration,
    points: VecDeque<Point>,
    /// GPU products by index (name, total), for the scenario's box.
    pub names: BTreeMap<u32, (String, u64)>,
    /// The pod each PID was last seen in.
    pods: BTreeMap<u32, (PodRef, f64)>,
}

impl History {
    pub fn new(window: Duration) -> History {
        History {
            window,
            points: VecDeque::new(),
            names: BTreeMap::new(),
            pods: BTreeMap::new(),
        }
    }

    /// Add one collection's scan seen at `t_unix`; drop what is older than the window.
    pub fn push(&mut self, scan: &ScanResult, t_unix: f64) {
        let devices = scan
            .devices
            .iter()
            .map(|d| DevicePoint {
                index: d.index,
                used: d.memory.used,
                total: d.memory.total,
            })
            .collect();
        for d in &scan.devices {
            if d.memory.total > 0 {
                self.names.insert(d.index, (d.name.clone(), d.memory.total));
            }
        }
        let mut processes = Vec::new();
        for p in &scan.processes {
            for u in &p.devices {
                if processes.len() < MAX_PROCESSES {
                    processes.push(ProcessPoint {
                        pid: p.pid,
                        device: u.device,
                        used: u.used,
                    });
                }
            }
            if let Some(pod) = &p.pod {
                self.pods.insert(p.pid, (pod.clone(), t_unix));
            }
        }
        self.points.push_back(Point {
            t_unix,
            devices,
            processes,
        });
        let oldest = t_unix - self.window.as_secs_f64();
        while self.points.len() > MAX_POINTS
            || self.points.front().is_some_and(|p| p.t_unix < oldest)
        {
            self.points.pop_front();
        }
        self.pods.retain(|_, (_, seen)| *seen >= oldest);
    }

    /// The pod `pid` was last seen in, within the window.
    pub fn pod_of(&self, pid: u32) -> Option<&PodRef> {
        self.pods.get(&pid).map(|(p, _)| p)
    }

    /// PIDs seen in the pod with this UID, within the window.
    pub fn pids_of_pod(&self, uid: &str) -> Vec<u32> {
        self.pods
            .iter()
            .filter(|(_, (p, _))| p.uid == uid)
            .map(|(pid, _)| *pid)
            .collect()
    }

    /// GPUs the given PIDs held memory on, within the window, sorted.
    pub fn devices_of(&self, pids: &[u32]) -> Vec<u32> {
        let mut d: Vec<u32> = self
            .points
            .iter()
            .flat_map(|p| p.processes.iter())
            .filter(|p| pids.contains(&p.pid) && p.used.is_none_or(|b| b > 0))
            .map(|p| p.device)
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }

    /// Whether `pid` held GPU memory within the window.
    pub fn held_memory(&self, pid: u32) -> bool {
        self.points
            .iter()
            .any(|p| p.processes.iter().any(|q| q.pid == pid))
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The window as a timeline (`t_ms` since the first point) and that first point's time.
    pub fn timeline(&self) -> (Timeline, f64) {
        let start = self.points.front().map_or(0.0, |p| p.t_unix);
        let mut series: BTreeMap<u32, DeviceSeries> = BTreeMap::new();
        let mut processes = Vec::new();
        for p in &self.points {
            let t_ms = ((p.t_unix - start) * 1000.0).max(0.0);
            for d in &p.devices {
                let s = series.entry(d.index).or_insert_with(|| DeviceSeries {
                    device: d.index,
                    total: d.total,
                    samples: Vec::new(),
                });
                s.total = s.total.max(d.total);
                s.samples.push((t_ms, d.used));
            }
            processes.extend(p.processes.iter().map(|q| ProcessSample {
                t_ms,
                device: q.device,
                pid: q.pid,
                used: q.used,
            }));
        }
        (
            Timeline {
                devices: series.into_values().collect(),
                markers: Vec::new(),
                processes,
                gaps: Vec::new(),
            },
            start,
        )
    }

    /// Heap bytes held, approximately (the points, their lists and the pod table).
    pub fn approx_bytes(&self) -> usize {
        let points: usize = self
            .points
            .iter()
            .map(|p| {
                std::mem::size_of::<Point>()
                    + p.devices.capacity() * std::mem::size_of::<DevicePoint>()
                    + p.processes.capacity() * std::mem::size_of::<ProcessPoint>()
            })
            .sum();
        let pods: usize = self
            .pods
            .values()
            .map(|(p, _)| {
                64 + p.uid.len()
                    + p.namespace.as_ref().map_or(0, String::len)
                    + p.name.as_ref().map_or(0, String::len)
                    + p.container.as_ref().map_or(0, String::len)
                    + p.container_id.as_ref().map_or(0, String::len)
            })
            .sum();
        points + pods
    }
}
