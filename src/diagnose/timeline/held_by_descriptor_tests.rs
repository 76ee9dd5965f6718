//! `held-by-descriptor` on built recordings: the command (PID 10, `python3`) makes a context
//! and 2 GiB on GPU 0 and exits at 1 s; its forked child (PID 11) holds the device files.

use super::super::{
    fingerprints, DeviceFileHolder, JobExit, RecordedDevice, Recording, TimelineThresholds,
};
use crate::model::{DeviceSeries, Finding, Marker, MarkerKind, ProcessSample, Severity, Timeline};
use crate::record::RecordedProcess;

const GIB: u64 = 1 << 30;

/// How the shape varies.
struct Shape {
    /// NVML keeps listing the exited parent (older drivers, the simulator); else nobody.
    parent_listed: bool,
    /// The child exits then (the memory returns with it); `None`: still running at 2.5 s.
    child_exit: Option<f64>,
    /// The memory is returned at the parent's exit (the child holds no context).
    freed_at_exit: bool,
    /// NVML lists the child itself with the memory (a context of its own).
    child_listed: bool,
    markers: Vec<Marker>,
    exit: Option<JobExit>,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            parent_listed: true,
            child_exit: None,
            freed_at_exit: false,
            child_listed: false,
            markers: Vec::new(),
            exit: Some(JobExit::Code(0)),
        }
    }
}

fn recording(s: &Shape) -> Recording {
    let until = if s.freed_at_exit {
        1000.0
    } else {
        s.child_exit.unwrap_or(f64::INFINITY)
    };
    let mut samples = vec![(0.0, 0)];
    let mut processes = Vec::new();
    let mut t = 200.0;
    while t <= 2500.0 {
        let held = t < until;
        samples.push((t, if held { 2 * GIB } else { 0 }));
        let listed = if t < 1000.0 || (s.parent_listed && held) {
            Some(10)
        } else if s.child_listed && held {
            Some(11)
        } else {
            None
        };
        if let Some(pid) = listed.filter(|_| held) {
            processes.push(ProcessSample {
                t_ms: t,
                device: 0,
                pid,
                used: Some(2 * GIB),
            });
        }
        t += 100.0;
    }
    let proc_ = |pid, exit_ms, ppid| RecordedProcess {
        name: Some("python3".into()),
        exit_ms,
        ppid: Some(ppid),
        cmdline: Some("python3 train.py --token=\u{1b}[31m".into()),
        ..RecordedProcess::seen(pid, 100.0, true)
    };
    // Seen holding the files at the settle and at the end, while it ran.
    let holders = [1750.0, 2400.0]
        .into_iter()
        .filter(|t| s.child_exit.is_none_or(|x| *t < x))
        .map(|t_ms| DeviceFileHolder {
            pid: 11,
            t_ms,
            nodes: vec!["/dev/nvidia0".into(), "/dev/nvidiactl".into()],
            devices: vec![0],
            context: Some(true),
        })
        .collect();
    Recording {
        devices: vec![RecordedDevice {
            index: 0,
            uuid: "GPU-0".into(),
            name: "sim".into(),
            total: 16 * GIB,
            minor: None,
            label: None,
        }],
        timeline: Timeline {
            devices: vec![DeviceSeries {
                device: 0,
                total: 16 * GIB,
                samples,
            }],
            markers: s.markers.clone(),
            processes,
            gaps: Vec::new(),
        },
        processes: vec![proc_(10, Some(1000.0), 1), proc_(11, s.child_exit, 10)],
        errors: Vec::new(),
        end_ms: 1000.0,
        exit: s.exit,
        device_file_holders: holders,
        rules_only: Default::default(),
    }
}

fn all(s: &Shape) -> Vec<Finding> {
    fingerprints(&recording(s), &TimelineThresholds::default())
}

fn of(f: &[Finding], id: &str) -> Vec<Finding> {
    f.iter().filter(|f| f.id == id).cloned().collect()
}

fn evidence(f: &Finding, label: &str) -> Option<String> {
    f.evidence
        .iter()
        .find(|e| e.label == label)
        .map(|e| e.value.clone())
}

#[test]
fn an_unlisted_child_holding_the_files_is_the_one_warning_naming_it() {
    let found = all(&Shape::default());
    let f = of(&found, "held-by-descriptor");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!((f[0].severity, f[0].pid), (Severity::Warn, Some(11)));
    assert_eq!(f[0].devices, [0]);
    let title = &f[0].title;
    for want in [
        "GPU 0: 2.00 GiB held by PID 11 (python3)",
        "a child of the job that inherited the CUDA context's descriptors",
        "NVML lists PID 10 (python3) (exited)",
        "`kill 11`",
    ] {
        assert!(title.contains(want), "{want:?} in {title}");
    }
    assert_eq!(evidence(&f[0], "end it with").as_deref(), Some("kill 11"));
    assert_eq!(
        evidence(&f[0], "PID 11 holds open, at 2.40 s").as_deref(),
        Some("/dev/nvidia0, /dev/nvidiactl")
    );
    assert_eq!(
        evidence(&f[0], "PID 11: parent").as_deref(),
        Some("PID 10 (python3)")
    );
    let cmd = evidence(&f[0], "PID 11: command (redacted)").unwrap();
    assert!(!cmd.contains('\u{1b}'), "{cmd:?}");
    // Exactly one finding explains the memory.
    let ids: Vec<&str> = found.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["held-by-descriptor"], "{found:?}");
}

#[test]
fn with_nobody_listed_it_says_so() {
    let f = of(
        &all(&Shape {
            parent_listed: false,
            ..Shape::default()
        }),
        "held-by-descriptor",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Warn);
    assert!(
        f[0].title.contains("NVML lists no process of the job"),
        "{}",
        f[0].title
    );
}

#[test]
fn a_holder_that_exited_later_is_info_and_one_ended_by_kill_after_says_so() {
    let f = of(
        &all(&Shape {
            child_exit: Some(2000.0),
            ..Shape::default()
        }),
        "held-by-descriptor",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Info);
    assert!(
        f[0].title.contains("it exited 1.00 s later"),
        "{}",
        f[0].title
    );

    let m = Marker {
        t_ms: 1900.0,
        kind: MarkerKind::Signal,
        label: "kill-after: SIGTERM to 11 (still holding GPU memory after the command)".into(),
        device: None,
    };
    let f = of(
        &all(&Shape {
            child_exit: Some(2000.0),
            markers: vec![m],
            ..Shape::default()
        }),
        "held-by-descriptor",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Info);
    assert!(
        f[0].title.contains("was ended by --kill-after"),
        "{}",
        f[0].title
    );
}

#[test]
fn nothing_when_the_memory_was_returned_at_the_parent_s_exit() {
    let found = all(&Shape {
        freed_at_exit: true,
        ..Shape::default()
    });
    assert!(
        found
            .iter()
            .all(|f| f.severity == Severity::Info || f.id != "held-by-descriptor"),
        "{found:?}"
    );
    assert!(of(&found, "held-by-descriptor").is_empty(), "{found:?}");
}

#[test]
fn a_listed_live_child_is_outlived_command_s_not_this_rule_s() {
    let found = all(&Shape {
        parent_listed: false,
        child_listed: true,
        ..Shape::default()
    });
    assert!(of(&found, "held-by-descriptor").is_empty(), "{found:?}");
    assert_eq!(of(&found, "outlived-command").len(), 1, "{found:?}");
}

#[test]
fn nothing_when_attached() {
    assert!(of(
        &all(&Shape {
            exit: None,
            ..Shape::default()
        }),
        "held-by-descriptor"
    )
    .is_empty());
}

#[test]
fn a_holder_of_files_naming_no_gpu_of_the_job_counts_and_one_seen_before_the_end_does_not() {
    // `nvidia3`: a minor number that is no NVML index of this one-GPU recording.
    let mut r = recording(&Shape::default());
    for h in &mut r.device_file_holders {
        h.nodes = vec!["/dev/nvidia3".into()];
        h.devices = vec![3];
    }
    let found = fingerprints(&r, &TimelineThresholds::default());
    assert_eq!(of(&found, "held-by-descriptor").len(), 1, "{found:?}");
    // Only the control files: still the holder.
    for h in &mut r.device_file_holders {
        h.nodes = vec!["/dev/nvidiactl".into()];
        h.devices = vec![];
    }
    let found = fingerprints(&r, &TimelineThresholds::default());
    assert_eq!(of(&found, "held-by-descriptor").len(), 1, "{found:?}");
    // Sightings count after the command ended only.
    for h in &mut r.device_file_holders {
        h.t_ms = 500.0;
    }
    let found = fingerprints(&r, &TimelineThresholds::default());
    assert!(of(&found, "held-by-descriptor").is_empty(), "{found:?}");
}

/// An NVML client of the job (descriptors, no CUDA context mapped: `nvidia-smi -l` started
/// by it) is never the holder; one whose maps were not read is named at info only.
#[test]
fn an_nvml_client_is_no_holder_and_unread_maps_are_info() {
    let mut r = recording(&Shape::default());
    for h in &mut r.device_file_holders {
        h.context = Some(false);
    }
    let found = fingerprints(&r, &TimelineThresholds::default());
    assert!(of(&found, "held-by-descriptor").is_empty(), "{found:?}");
    for h in &mut r.device_file_holders {
        h.context = None;
    }
    let found = fingerprints(&r, &TimelineThresholds::default());
    let f = of(&found, "held-by-descriptor");
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].severity, Severity::Info, "{}", f[0].title);
    assert!(f[0].title.contains("maps not read"), "{}", f[0].title);
    assert!(evidence(&f[0], "PID 11: maps not read").is_some(), "{f:?}");
    // One sighting with a context is enough.
    r.device_file_holders[0].context = Some(true);
    let found = fingerprints(&r, &TimelineThresholds::default());
    assert_eq!(of(&found, "held-by-descriptor")[0].severity, Severity::Warn);
}
