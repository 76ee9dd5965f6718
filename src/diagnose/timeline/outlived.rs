//! `outlived-command`: a process of the job still holds GPU memory after the command ended
//! (a forked DataLoader worker, a detached child, a container the command started).

use super::prelude::*;

/// The first word of the markers `run --kill-after` adds (`job::outlived`).
const KILL_AFTER: &str = "kill-after:";

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
    let kill_markers: Vec<&Marker> = rec
        .timeline
        .markers
        .iter()
        .filter(|m| m.label.starts_with(KILL_AFTER))
        .collect();
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
