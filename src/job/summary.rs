//! A finished job as the report's `run` section: per-process peaks, the peak of the job's
//! own processes per device, the lowest free memory per device, with the findings the
//! caller had `diagnose/` decide on the recording.

use super::signals::signal_name;
use super::{process::Exit, JobRun};
use crate::gpu::DeviceInfo;
use crate::model::{
    DeviceMinFree, DevicePeak, Finding, ProcessPeak, RunExit, RunProcess, RunResult,
};
use std::collections::{BTreeMap, HashSet};

/// How the command ended, for the report.
pub fn run_exit(exit: Exit) -> RunExit {
    match exit {
        Exit::Signal(sig) => RunExit {
            status: exit.status(),
            code: None,
            signal: Some(sig),
            signal_name: Some(signal_name(sig)),
        },
        Exit::Code(code) => RunExit {
            status: code,
            code: Some(code),
            signal: None,
            signal_name: None,
        },
    }
}

/// The report's `run` section (without the command line and cadence the caller knows).
pub struct Numbers {
    pub processes: Vec<RunProcess>,
    pub tree_peaks: Vec<DevicePeak>,
    pub min_free: Vec<DeviceMinFree>,
}

/// The numbers of a finished job. Pure.
pub fn numbers(run: &JobRun, devices: &[DeviceInfo]) -> Numbers {
    let rec = &run.recorded;
    let tree_pids: HashSet<u32> = rec.tree.iter().map(|t| t.pid).collect();
    let uuid = |d: u32| {
        devices
            .iter()
            .find(|x| x.index == d)
            .map(|x| x.uuid.clone())
            .unwrap_or_default()
    };
    // Per-process peaks and the tree's sum per device.
    let mut peak: BTreeMap<(u32, u32), (Option<u64>, f64)> = BTreeMap::new();
    let mut sums: BTreeMap<(u32, u64), (f64, u64)> = BTreeMap::new();
    for p in rec
        .recording
        .timeline
        .processes
        .iter()
        .filter(|p| tree_pids.contains(&p.pid))
    {
        let e = peak.entry((p.pid, p.device)).or_insert((p.used, p.t_ms));
        if p.used > e.0 {
            *e = (p.used, p.t_ms);
        }
        let s = sums
            .entry((p.device, p.t_ms.to_bits()))
            .or_insert((p.t_ms, 0));
        s.1 += p.used.unwrap_or(0);
    }
    let processes = rec
        .tree
        .iter()
        .map(|t| RunProcess {
            member: t.via.clone(),
            pod: t.pod.as_deref().cloned(),
            pid: t.pid,
            ppid: t.ppid,
            nspid: t.nspid.clone(),
            name: t.name.clone(),
            cmdline: t.cmdline.clone(),
            start_ms: t.start_ms,
            end_ms: t.end_ms,
            devices: peak
                .range((t.pid, 0)..=(t.pid, u32::MAX))
                .map(|((_, d), (used, at))| ProcessPeak {
                    device: *d,
                    uuid: uuid(*d),
                    peak: *used,
                    t_ms: *at,
                })
                .collect(),
        })
        .collect();
    let tree_peaks = devices
        .iter()
        .map(|d| {
            let (t_ms, peak_used) = sums
                .iter()
                .filter(|((dev, _), _)| *dev == d.index)
                .map(|(_, v)| *v)
                .max_by_key(|(_, v)| *v)
                .unwrap_or((0.0, 0));
            DevicePeak {
                device: d.index,
                total: d.memory.total,
                peak_used,
                t_ms,
            }
        })
        .collect();
    let min_free = rec
        .recording
        .timeline
        .devices
        .iter()
        .map(|s| {
            let reserved = devices
                .iter()
                .find(|d| d.index == s.device)
                .map_or(0, |d| d.memory.reserved);
            let free = |used: u64| s.total.saturating_sub(reserved).saturating_sub(used);
            let (t_ms, min_free) = s
                .samples
                .iter()
                .filter(|(t, _)| *t <= run.end_ms)
                .map(|(t, u)| (*t, free(*u)))
                .min_by_key(|(_, f)| *f)
                .unwrap_or((0.0, free(0)));
            DeviceMinFree {
                device: s.device,
                uuid: uuid(s.device),
                total: s.total,
                min_free,
                t_ms,
            }
        })
        .collect();
    Numbers {
        processes,
        tree_peaks,
        min_free,
    }
}

/// The report's `run` section: `command` (redacted), cadence in µs, the job, its devices and
/// the findings decided on its recording.
pub fn run_result(
    command: Vec<String>,
    cadence_us: (u64, u64),
    run: JobRun,
    devices: &[DeviceInfo],
    findings: Vec<Finding>,
    samples_file: Option<String>,
) -> RunResult {
    let n = numbers(&run, devices);
    RunResult {
        command,
        period_us: cadence_us.0,
        process_period_us: cadence_us.1,
        duration_ms: run.end_ms.max(0.0) as u64,
        exit: if run.attached.is_some() {
            // Not vramdoc's child: how it ended is not known.
            RunExit {
                status: 0,
                code: None,
                signal: None,
                signal_name: None,
            }
        } else {
            run_exit(run.exit)
        },
        peaks: run.recorded.peaks,
        tree_peaks: n.tree_peaks,
        min_free: n.min_free,
        processes: n.processes,
        errors: run.errors,
        findings,
        timeline: run.recorded.recording.timeline,
        stderr_tail: run.stderr_tail,
        samples_file,
        attached: run.attached,
        vantage: None,
    }
}
