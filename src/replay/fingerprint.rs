//! Replays prove the fingerprints: a finished variant becomes a [`Recording`] (its
//! timeline, per-step readings of the worker, its error, release points) and the timeline
//! engine in `diagnose::timeline` is asked which fingerprints it shows. The scenario's
//! `fingerprint` must fire on its bug variant and stay silent on every fix variant; the
//! outcome is one more [`CheckResult`] of the variant. Nothing here decides a finding.

use crate::diagnose::timeline::marker_kinds;
use crate::diagnose::{
    fingerprints, ErrorEvent, ErrorKind, JobExit, RecordedDevice, RecordedProcess, Recording,
    TimelineThresholds,
};
use crate::gpu::DeviceInfo;
use crate::report::{CheckResult, Finding, Marker, ProcessSample, StepError, VariantRun};
use crate::scenario::{Expectation, Scenario, VariantKind};

/// Steps after which a scenario expects memory to be released: the `after` of its
/// `residual` checks (in any variant, so bug and fix are read at the same points).
pub fn release_steps(scn: &Scenario) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in &scn.variants {
        for e in &v.expect {
            if let Expectation::Residual { after, .. } = e {
                if !out.contains(after) {
                    out.push(after.clone());
                }
            }
        }
    }
    out
}

/// `N` in `... <word> N...` (e.g. `on device 1:` gives 1).
fn number_after(text: &str, word: &str) -> Option<u64> {
    let rest = &text[text.find(word)? + word.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// The worker's error as the engine reads it. `ordinals` maps the worker's CUDA ordinals to
/// physical indices.
fn error_event(e: &StepError, pid: Option<u32>, ordinals: &[u32]) -> Option<ErrorEvent> {
    let kind = match e.kind.as_str() {
        "out-of-memory" => ErrorKind::OutOfMemory,
        "killed" => ErrorKind::KilledBySignal {
            signal: number_after(&e.message, "signal").unwrap_or(0) as i32,
        },
        "interrupted" => return None,
        "device-lost" => ErrorKind::DriverError,
        _ => ErrorKind::Other,
    };
    let device = number_after(&e.message, "on device")
        .and_then(|o| ordinals.get(o as usize).copied())
        .or_else(|| number_after(&e.message, "on physical device").map(|d| d as u32));
    Some(ErrorEvent {
        t_ms: e.t_ms,
        kind,
        device,
        pid,
        line: format!("{}: {}", e.step_label, e.message),
        requested_bytes: number_after(&e.message, "requested"),
    })
}

/// Build the recording of a finished variant. `worker_cvd` is the worker's
/// `CUDA_VISIBLE_DEVICES`; `ordinals` the physical index of each CUDA ordinal it sees.
pub fn recording(
    run: &VariantRun,
    devices: &[DeviceInfo],
    worker_cvd: Option<&str>,
    ordinals: &[u32],
    release_after: &[String],
) -> Recording {
    let mut timeline = run.timeline.clone();
    let end_ms = timeline
        .markers
        .iter()
        .filter(|m| m.kind == "end")
        .map(|m| m.t_ms)
        .fold(run.duration_ms as f64, f64::min);
    // Every step's end is a phase boundary (its memory was read there; the next step's
    // start marker can come a little after its first allocation). Release points: the end
    // of each named step that completed.
    for r in &run.steps {
        if let Some(t) = r.end_ms {
            timeline.markers.push(Marker {
                t_ms: t,
                kind: "step-end".into(),
                label: format!("{} ended ({})", r.id, r.status),
                device: None,
            });
        }

        if let (true, Some(t), "ok") = (release_after.contains(&r.id), r.end_ms, r.status.as_str())
        {
            timeline.markers.push(Marker {
                t_ms: t,
                kind: marker_kinds::RELEASE.into(),
                label: format!("{}: {}", r.id, r.label),
                device: None,
            });
        }
    }
    let mut processes = Vec::new();
    if let Some(pid) = run.worker_pid {
        // The worker's own usage read at every step boundary.
        for r in &run.steps {
            let Some(t) = r.end_ms else { continue };
            for (i, used) in r.worker_after.iter().enumerate() {
                if let Some(d) = devices.get(i) {
                    timeline.processes.push(ProcessSample {
                        t_ms: t,
                        device: d.index,
                        pid,
                        used: Some(*used),
                    });
                }
            }
        }
        processes.push(RecordedProcess {
            pid,
            name: Some("vramdoc __worker".into()),
            first_seen_ms: 0.0,
            exit_ms: Some(end_ms),
            cuda_visible_devices: worker_cvd.map(String::from),
            cuda_device_order: None,
            nvidia_visible_devices: None,
            in_tree: true,
        });
    }
    let mut others: Vec<u32> = timeline
        .processes
        .iter()
        .map(|p| p.pid)
        .filter(|p| Some(*p) != run.worker_pid)
        .collect();
    others.sort_unstable();
    others.dedup();
    for pid in others {
        processes.push(RecordedProcess {
            pid,
            name: None,
            first_seen_ms: 0.0,
            exit_ms: None,
            cuda_visible_devices: None,
            cuda_device_order: None,
            nvidia_visible_devices: None,
            in_tree: false,
        });
    }
    // The failure happened during its step; the monitor hears of it a little later, when
    // the dying worker may already have returned its memory. The engine reads the state at
    // the error's time: use the last reading before the failing step (the previous step's
    // end, where the lockstep worker waited, alive, for its acknowledgement).
    let errors: Vec<ErrorEvent> = run
        .error
        .iter()
        .filter_map(|e| {
            let mut ev = error_event(e, run.worker_pid, ordinals)?;
            let failing = run
                .steps
                .iter()
                .rposition(|r| r.index == e.step && r.status == e.kind);
            let before = failing.and_then(|i| {
                let prev = i.checked_sub(1).and_then(|p| run.steps[p].end_ms);
                prev.map(|t| t + 0.001).or(Some(run.steps[i].start_ms))
            });
            if let Some(t) = before {
                ev.t_ms = ev.t_ms.min(t);
            }
            Some(ev)
        })
        .collect();
    let exit = errors.iter().find_map(|e| match e.kind {
        ErrorKind::KilledBySignal { signal } => Some(JobExit::Signal(signal)),
        _ => None,
    });
    Recording {
        devices: devices.iter().map(RecordedDevice::from).collect(),
        timeline,
        processes,
        errors,
        end_ms,
        exit,
    }
}

/// The fingerprint check of a variant (`None` when the scenario names no fingerprint), with
/// every finding the engine raised.
pub fn check(
    scn: &Scenario,
    kind: VariantKind,
    rec: &Recording,
) -> Option<(CheckResult, Vec<Finding>)> {
    let fp = scn.fingerprint.as_deref()?;
    let findings = fingerprints(rec, &TimelineThresholds::default());
    let fired: Vec<&Finding> = findings.iter().filter(|f| f.id == fp).collect();
    let others: Vec<&str> = findings
        .iter()
        .filter(|f| f.id != fp)
        .map(|f| f.id.as_str())
        .collect();
    let mut detail = match fired.first() {
        Some(f) => format!("fired: {}", f.title),
        None => "silent".to_string(),
    };
    if !others.is_empty() {
        detail.push_str(&format!("; also: {}", others.join(", ")));
    }
    let result = match kind {
        VariantKind::Bug => CheckResult {
            expectation: format!("the {fp} fingerprint fires"),
            passed: !fired.is_empty(),
            detail,
        },
        VariantKind::Fix => CheckResult {
            expectation: format!("the {fp} fingerprint stays silent"),
            passed: fired.is_empty(),
            detail,
        },
    };
    Some((result, findings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::MemoryInfo;
    use crate::report::{DeviceSeries, StepRecord, Timeline, Verdict};
    use crate::units::GIB;

    fn device(index: u32) -> DeviceInfo {
        DeviceInfo {
            index,
            name: "Test GPU".into(),
            uuid: format!("GPU-{index}"),
            pci_bus_id: String::new(),
            memory: MemoryInfo {
                total: 16 * GIB,
                reserved: 0,
                used: 0,
                free: 16 * GIB,
            },
            utilization_gpu: None,
            temperature_c: None,
            status: Default::default(),
        }
    }

    fn step(index: usize, id: &str, start: f64, end: f64, status: &str, held: u64) -> StepRecord {
        StepRecord {
            index,
            id: id.into(),
            label: id.into(),
            op: "alloc".into(),
            start_ms: start,
            end_ms: Some(end),
            status: status.into(),
            bytes: None,
            used_after: vec![held],
            worker_after: vec![held],
            held_after: held,
            peak_used: Vec::new(),
        }
    }

    /// Multi-size growth where the monitor hears of the OOM only after the dying worker's
    /// memory is gone: the fingerprint must still see the state before the failure.
    #[test]
    fn late_error_event_still_reads_the_state_before_the_failure() {
        let g = |x: f64| (x * GIB as f64) as u64;
        let samples = vec![
            (0.0, 0),
            (2.0, g(8.4)),
            (4.0, g(12.6)),
            (6.0, g(12.6)),
            (7.5, 0), // the worker died; its Failed event is handled at 9.0
            (9.0, 0),
        ];
        let steps = vec![
            step(0, "load", 1.0, 2.0, "ok", g(8.4)),
            step(1, "tune-a", 3.0, 4.0, "ok", g(12.6)),
            step(2, "tune-b", 8.0, 9.0, "out-of-memory", g(12.6)),
        ];
        let run = VariantRun {
            scenario: "multi-size-oom".into(),
            variant: "bug".into(),
            source: String::new(),
            verdict: Verdict::Reproduced,
            reason: None,
            checks: Vec::new(),
            worker_pid: Some(42),
            error: Some(StepError {
                step: 2,
                step_label: "tune-b".into(),
                kind: "out-of-memory".into(),
                message: "out of memory on device 0: requested 4682940416 bytes (x)".into(),
                t_ms: 9.0,
            }),
            peaks: Vec::new(),
            timeline: Timeline {
                devices: vec![DeviceSeries {
                    device: 0,
                    total: 16 * GIB,
                    samples,
                }],
                markers: vec![Marker {
                    t_ms: 9.5,
                    kind: "end".into(),
                    label: "worker gone".into(),
                    device: None,
                }],
                processes: Vec::new(),
                gaps: Vec::new(),
            },
            duration_ms: 10,
            steps,
        };
        let rec = recording(&run, &[device(0)], None, &[0], &[]);
        assert_eq!(rec.errors.len(), 1);
        assert_eq!(rec.errors[0].requested_bytes, Some(4_682_940_416));
        assert_eq!(rec.errors[0].device, Some(0));
        assert!(rec.errors[0].t_ms < 7.5, "{}", rec.errors[0].t_ms);
        let ids: Vec<String> = fingerprints(&rec, &TimelineThresholds::default())
            .into_iter()
            .map(|f| f.id)
            .collect();
        assert!(
            ids.contains(&"growth-without-release".to_string()),
            "{ids:?}"
        );
        assert!(ids.contains(&"out-of-memory".to_string()), "{ids:?}");
    }

    #[test]
    fn worker_errors_map_ordinals_to_physical_devices() {
        let e = StepError {
            step: 0,
            step_label: "s".into(),
            kind: "out-of-memory".into(),
            message: "out of memory on device 0: requested 12 bytes (3 bytes free)".into(),
            t_ms: 1.0,
        };
        // Under CUDA_VISIBLE_DEVICES=1, ordinal 0 is physical GPU 1.
        let ev = error_event(&e, Some(7), &[1]).unwrap();
        assert_eq!((ev.device, ev.requested_bytes), (Some(1), Some(12)));
        assert_eq!(ev.kind, ErrorKind::OutOfMemory);
        let killed = StepError {
            kind: "killed".into(),
            message: "worker killed by signal 9".into(),
            ..e.clone()
        };
        let ev = error_event(&killed, None, &[0]).unwrap();
        assert_eq!(ev.kind, ErrorKind::KilledBySignal { signal: 9 });
        let interrupted = StepError {
            kind: "interrupted".into(),
            ..e
        };
        assert!(error_event(&interrupted, None, &[0]).is_none());
        assert_eq!(number_after("x on device", "on device"), None);
    }
}
