//! `outlived-command`: a process of the job still holds GPU memory after the command ended
//! (a forked DataLoader worker, a detached child, a container the command started).

use super::prelude::*;

/// The first word of the markers `run --kill-after` adds (`job::outlived`).
const KILL_AFTER: &str = "kill-after:";

/// The markers `run --kill-after` added when it ended processes of the job that outlived
/// the command (read by `outlived-command` and `held-by-descriptor`).
pub(super) fn kill_after_markers(rec: &crate::record::Recording) -> Vec<&Marker> {
    rec.judged_markers()
        .into_iter()
        .filter(|m| m.label.starts_with(KILL_AFTER))
        .collect()
}

/// `outlived-command`: after the command ended (`rec.exit` set: `run -- CMD`, not attach),
/// a process of the job is listed with memory. Warn while it still runs at the end of the
/// recording (the memory is not lost yet: ending it returns it); info when it was ended
/// afterwards by `--kill-after` (the markers say so) or exited on its own more than
/// `exit_grace_ms` after the command.
pub(super) fn outlived_command(cx: &Prepared) -> Vec<Finding> {
    let rec = cx.rec;
    if rec.exit.is_none() {
        return Vec::new();
    }
    let end = rec.end_ms;
    let kill_markers = kill_after_markers(rec);
    let mut out = Vec::new();
    for p in rec.processes.iter().filter(|p| p.in_tree) {
        let outlived = match p.exit_ms {
            None => true,
            Some(x) => x > end + cx.th.exit_grace_ms || (x > end && !kill_markers.is_empty()),
        };
        if !outlived {
            continue;
        }
        // What it held per device in its last listing after the command ended.
        let mut held: Vec<(u32, u64, f64)> = Vec::new();
        for (dev, series) in cx.procs.get(&p.pid).into_iter().flatten() {
            // (The views end an exited process's series with a 0 at its exit.)
            let last = series
                .iter()
                .rev()
                .filter(|(t, _)| *t > end && p.exit_ms.is_none_or(|x| *t < x))
                .find_map(|(t, u)| Some((*t, u.filter(|u| *u > 0)?)));
            if let Some((t, u)) = last {
                held.push((*dev, u, t));
            }
        }
        if held.is_empty() {
            continue;
        }
        let gpus: Vec<String> = held
            .iter()
            .map(|(d, u, _)| format!("{} on GPU {d}", format_bytes(*u)))
            .collect();
        let who = cx.who(p.pid);
        let mut evidence = vec![ev("the command ended", fmt_t(end))];
        for (d, u, t) in &held {
            evidence.push(ev_bytes(format!("GPU {d}, listed at {}", fmt_t(*t)), *u));
        }
        if let Some(pp) = p.ppid {
            evidence.push(ev("parent", cx.who(pp)));
        }
        if let Some(c) = &p.cmdline {
            evidence.push(ev("command (redacted)", crate::term::one_line(c)));
        }
        let pid_s = p.pid.to_string();
        let ended_by = kill_markers
            .iter()
            .filter(|m| m.label.split([' ', ',']).any(|w| w == pid_s))
            .map(|m| m.label.clone())
            .collect::<Vec<_>>();
        let (severity, title) = match p.exit_ms {
            None => (
                Severity::Warn,
                format!(
                    "{who} outlived the command and still holds {}: end it with `kill {}` \
                     (or run with --kill-after)",
                    gpus.join(", "),
                    p.pid
                ),
            ),
            Some(x) => {
                evidence.push(ev("exited", fmt_t(x)));
                for m in &ended_by {
                    evidence.push(ev("ended by", crate::term::one_line(m)));
                }
                let how = if ended_by.is_empty() {
                    "exited".to_string()
                } else {
                    "was ended by --kill-after".to_string()
                };
                (
                    Severity::Info,
                    format!(
                        "{who} outlived the command holding {}; it {how} {} later",
                        gpus.join(", "),
                        fmt_t(x - end)
                    ),
                )
            }
        };
        out.push(Finding {
            id: ids::OUTLIVED_COMMAND.into(),
            severity,
            title,
            devices: held.iter().map(|h| h.0).collect(),
            pid: Some(p.pid),
            evidence,
            fix: fixes::OUTLIVED_COMMAND.into(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{fingerprints, JobExit, RecordedDevice, Recording, TimelineThresholds};
    use crate::model::{DeviceSeries, Marker, MarkerKind, ProcessSample, Severity, Timeline};
    use crate::record::RecordedProcess;

    const GIB: u64 = 1 << 30;

    /// The command (pid 10) ends at 1 s; its child 11 (`python worker.py`) holds 2 GiB on
    /// GPU 0 from 0.2 s until `child_exit` (or the end, 2.5 s); `markers` on the timeline.
    fn recording(
        child_exit: Option<f64>,
        markers: Vec<Marker>,
        exit: Option<JobExit>,
    ) -> Recording {
        let until = child_exit.unwrap_or(2500.0);
        let mut samples = vec![(0.0, 0)];
        let mut processes = Vec::new();
        let mut t = 200.0;
        while t <= 2500.0 {
            let held = t < until;
            samples.push((t, if held { 2 * GIB } else { 0 }));
            if held {
                processes.push(ProcessSample {
                    t_ms: t,
                    device: 0,
                    pid: 11,
                    used: Some(2 * GIB),
                });
            }
            t += 100.0;
        }
        let proc_ = |pid, exit_ms, ppid, cmd: &str| RecordedProcess {
            name: Some(if pid == 10 { "sh" } else { "python3" }.into()),
            exit_ms,
            ppid: Some(ppid),
            cmdline: Some(cmd.into()),
            ..RecordedProcess::seen(pid, 100.0, true)
        };
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
                markers,
                processes,
                gaps: Vec::new(),
            },
            processes: vec![
                proc_(10, Some(1000.0), 1, "sh -c python3 worker.py &"),
                proc_(11, child_exit, 10, "python3 worker.py --token=\u{1b}[31m"),
            ],
            errors: Vec::new(),
            end_ms: 1000.0,
            exit,
            device_file_holders: Vec::new(),
            rules_only: Default::default(),
        }
    }

    fn outlived(r: &Recording) -> Vec<crate::model::Finding> {
        fingerprints(r, &TimelineThresholds::default())
            .into_iter()
            .filter(|f| f.id == "outlived-command")
            .collect()
    }

    #[test]
    fn a_child_still_holding_memory_after_the_command_is_a_warning_naming_it() {
        let f = outlived(&recording(None, vec![], Some(JobExit::Code(0))));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].severity, f[0].pid), (Severity::Warn, Some(11)));
        assert_eq!(f[0].devices, [0]);
        assert!(f[0].title.contains("PID 11 (python3)"), "{}", f[0].title);
        assert!(f[0].title.contains("2.00 GiB on GPU 0"), "{}", f[0].title);
        assert!(f[0].title.contains("kill 11"), "{}", f[0].title);
        let ev = |l: &str| {
            f[0].evidence
                .iter()
                .find(|e| e.label == l)
                .map(|e| e.value.clone())
        };
        assert_eq!(ev("parent").as_deref(), Some("PID 10 (sh)"));
        let cmd = ev("command (redacted)").unwrap();
        assert!(
            cmd.starts_with("python3 worker.py") && !cmd.contains('\u{1b}'),
            "{cmd:?}"
        );
    }

    #[test]
    fn ended_by_kill_after_it_is_info_and_says_so() {
        let m = Marker {
            t_ms: 1800.0,
            kind: MarkerKind::Signal,
            label: "kill-after: SIGTERM to 11 (still holding GPU memory after the command)".into(),
            device: None,
        };
        let f = outlived(&recording(Some(1900.0), vec![m], Some(JobExit::Code(0))));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].title.contains("ended by --kill-after"),
            "{}",
            f[0].title
        );
    }

    #[test]
    fn nothing_when_the_child_ends_with_the_command_or_when_attached() {
        // Gone 200 ms after the command: within the grace, no finding.
        assert!(outlived(&recording(Some(1200.0), vec![], Some(JobExit::Code(0)))).is_empty());
        // Attached (no command of vramdoc's): no finding.
        assert!(outlived(&recording(None, vec![], None)).is_empty());
    }
}
