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
    let errors: Vec<ErrorEvent> = run
        .error
        .iter()
        .filter_map(|e| error_event(e, run.worker_pid, ordinals))
        .collect();
    let exit = errors.iter().find_map(|e| match e.kind {
        ErrorKind::KilledBySignal { signal } => Some(JobExit::Signal(signal)),
        _ => None,
    });
    Recording {
        devices: devices
            .iter()
            .map(|d| RecordedDevice {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                total: d.memory.total,
            })
            .collect(),
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
