//! `--kill-after DURATION`: after the command ends, the job's processes that still hold GPU
//! memory (a forked DataLoader worker, a detached child, a container that carries the job's
//! marker file; see `super::ours_to_signal`), or the driver's device files that keep it
//! allocated (`record::holders`), are ended as GNU `timeout -k` ends a command:
//! SIGTERM, then SIGKILL to those still running `DURATION` later (at once when vramdoc itself
//! gets a signal meanwhile). Each step is a marker on the timeline (`kill-after: …`), which
//! the `outlived-command` finding reads. Without the flag nothing is ended and the finding
//! says how to end them.

use super::{process, Feed, TICK};
use crate::model::MarkerKind;
use crate::record::Recorder;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The first word of every marker this module adds.
pub const MARKER_PREFIX: &str = "kill-after:";

/// End the job's processes still holding memory: SIGTERM now, SIGKILL after `grace` to
/// those still alive. Whether any was signalled.
pub fn end_holders(
    recorder: &Recorder,
    grace: Duration,
    feed: &mut Feed<'_>,
    live: &mut super::live::Live,
) -> bool {
    let members = recorder.live_members();
    let mut holders: BTreeMap<u32, u64> = BTreeMap::new();
    for (pid, _, used) in recorder.job_holders() {
        *holders.entry(pid).or_default() += used;
    }
    // And those holding the driver's device files (a forked worker keeping an exited
    // parent's context alive through inherited descriptors: NVML does not list it).
    let file_holders = recorder.device_file_holder_pids();
    let targets: Vec<(u32, u64)> = members
        .iter()
        .filter(|m| holders.contains_key(&m.pid) || file_holders.contains(&m.pid))
        .filter(|m| super::ours_to_signal(m))
        .filter(|m| crate::host::is_alive(m.pid, m.start_time))
        .map(|m| (m.pid, m.start_time))
        .collect();
    if targets.is_empty() {
        return false;
    }
    for (pid, _) in &targets {
        process::send(*pid, libc::SIGTERM);
    }
    let pids: Vec<String> = targets.iter().map(|(p, _)| p.to_string()).collect();
    recorder.mark(
        MarkerKind::Signal,
        &format!(
            "{MARKER_PREFIX} SIGTERM to {} (still holding GPU memory after the command)",
            pids.join(", ")
        ),
        None,
    );
    let deadline = Instant::now() + grace;
    let alive = |t: &[(u32, u64)]| -> Vec<(u32, u64)> {
        t.iter()
            .copied()
            .filter(|(p, s)| crate::host::is_alive(*p, *s))
            .collect()
    };
    let mut left = alive(&targets);
    // A signal to vramdoc meanwhile (Ctrl-C, a scheduler's SIGTERM) cuts the grace short.
    while !left.is_empty()
        && Instant::now() < deadline
        && super::signals::take_received().is_empty()
    {
        feed.take();
        live.tick(recorder);
        process::reap(0);
        std::thread::sleep(TICK);
        left = alive(&left);
    }
    if !left.is_empty() {
        for (pid, _) in &left {
            process::send(*pid, libc::SIGKILL);
        }
        let pids: Vec<String> = left.iter().map(|(p, _)| p.to_string()).collect();
        recorder.mark(
            MarkerKind::Signal,
            &format!(
                "{MARKER_PREFIX} SIGKILL to {} (still running {} after SIGTERM)",
                pids.join(", "),
                crate::units::format_duration(grace)
            ),
            None,
        );
    }
    true
}
