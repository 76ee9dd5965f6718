//! Failures that are not GPU memory, named as such however full the GPU was:
//! `collective-timeout` (PyTorch's NCCL watchdog aborted the job), `host-oom-kill`
//! (SIGKILL with no GPU out-of-memory error: most likely the host's OOM killer) and
//! `cuda-error` (a CUDA failure that is not an allocation failure: illegal address,
//! device-side assert, driver too old).

use super::prelude::*;

/// How full each of the job's devices was at `t` (evidence that fill is not the cause).
fn fill_at(cx: &Prepared, t: f64) -> Vec<Evidence> {
    cx.devs
        .iter()
        .filter(|d| cx.job_devices.contains(&d.index) && d.total > 0)
        .filter_map(|d| {
            let used = d.level_at(t)?;
            Some(ev(
                format!("GPU {} used at that moment", d.index),
                format!(
                    "{} of {} ({:.1}%)",
                    format_bytes(used),
                    format_bytes(d.total),
                    d.pct(used)
                ),
            ))
        })
        .collect()
}

fn job_devices(cx: &Prepared) -> Vec<u32> {
    cx.job_devices.iter().copied().collect()
}

fn signal_of<'a>(cx: &Prepared<'a>, signal: i32) -> Option<&'a ErrorEvent> {
    cx.rec
        .errors
        .iter()
        .find(|e| e.kind == ErrorKind::KilledBySignal { signal })
}

/// `collective-timeout`: the job's output shows PyTorch's NCCL watchdog catching a
/// collective operation timeout ("Watchdog caught collective operation timeout",
/// ProcessGroupNCCL), after which the process aborts (SIGABRT). A failure that happened, and
/// not a GPU memory one: `error`.
pub(super) fn collective_timeout(cx: &Prepared) -> Vec<Finding> {
    let Some(e) = cx
        .rec
        .errors
        .iter()
        .find(|e| e.kind == ErrorKind::CollectiveTimeout)
    else {
        return Vec::new();
    };
    let mut evidence = vec![ev("when", fmt_t(e.t_ms)), ev("error line", e.line.clone())];
    let abort = signal_of(cx, 6);
    if let Some(a) = abort {
        evidence.push(ev("then", format!("at {}: {}", fmt_t(a.t_ms), a.line)));
    }
    evidence.extend(fill_at(cx, e.t_ms));
    evidence.push(ev(
        "GPU memory",
        "not the cause: an allocation failure raises an out-of-memory error; the watchdog \
         aborts on a collective that never completed",
    ));
    vec![Finding {
        id: ids::COLLECTIVE_TIMEOUT.into(),
        severity: Severity::Error,
        title: format!(
            "A collective operation timed out at {} and PyTorch's NCCL watchdog {} the job: not \
             a GPU memory failure",
            fmt_t(e.t_ms),
            if abort.is_some() {
                "aborted (SIGABRT)"
            } else {
                "aborts"
            }
        ),
        devices: job_devices(cx),
        pid: e.pid,
        evidence,
        fix: fixes::COLLECTIVE_TIMEOUT.into(),
    }]
}

/// `host-oom-kill`: the job (or one of its ranks, from torchrun's exit table, or a DataLoader
/// worker, from PyTorch's `is killed by signal: Killed`) was killed by SIGKILL — or the command,
/// a shell, exited 137 —, no GPU out-of-memory error was seen, and vramdoc did not forward a SIGKILL from
/// the user and no stop was asked for before it (a SIGTERM first: a scheduler's time limit or
/// preemption): most likely the kernel's OOM killer (host RAM or the container's memory limit).
/// Said as "likely", with the evidence; a failure that happened: `error`.
pub(super) fn host_oom_kill(cx: &Prepared) -> Vec<Finding> {
    // The command itself a shell that reports its child's SIGKILL as status 128 + 9.
    let shell_137 = cx.rec.exit == Some(JobExit::Code(137));
    let (t, line, pid) = match signal_of(cx, 9) {
        Some(k) => (k.t_ms, k.line.clone(), k.pid),
        None if shell_137 => (
            cx.rec.end_ms,
            "the command exited with status 137 (128 + SIGKILL, as a shell reports a child \
             killed by SIGKILL)"
                .to_string(),
            None,
        ),
        None => return Vec::new(),
    };
    if cx.ooms().next().is_some() {
        return Vec::new();
    }
    // A stop asked for before the kill (a SIGKILL sent through vramdoc, or a SIGTERM/SIGINT
    // first, as Slurm and Kubernetes stop jobs: SIGTERM, then SIGKILL after a grace period).
    let asked = cx
        .rec
        .judged_markers()
        .into_iter()
        .any(|m| m.kind == MarkerKind::Signal && m.t_ms <= t);
    if asked {
        return Vec::new();
    }
    let mut evidence = vec![
        ev("when", fmt_t(t)),
        ev("killed", line),
        ev(
            "GPU out-of-memory error in the job's output",
            "none (a GPU allocation failure raises an error; it does not SIGKILL)",
        ),
    ];
    evidence.extend(fill_at(cx, t));
    evidence.push(ev(
        "confirm",
        "dmesg -T | grep -i -E 'killed process|out of memory' (or the container's OOMKilled \
         status)",
    ));
    vec![Finding {
        id: ids::HOST_OOM_KILL.into(),
        severity: Severity::Error,
        title: format!(
            "Killed by SIGKILL at {} with no GPU out-of-memory error: likely the host's OOM \
             killer (host RAM), not GPU memory",
            fmt_t(t)
        ),
        devices: job_devices(cx),
        pid,
        evidence,
        fix: fixes::HOST_OOM_KILL.into(),
    }]
}

/// `cuda-error`: the job's output shows a CUDA failure that is not an allocation failure
/// (an illegal memory access, a device-side assert, a driver too old for the framework, NCCL's
/// CUDA check on another error) and no out-of-memory error: said to be *not* a memory
/// failure, so nobody chases memory. `error` when the job failed; `info` when it exited 0
/// (a warning printed by a job that then ran, e.g. on the CPU).
pub(super) fn cuda_error(cx: &Prepared) -> Vec<Finding> {
    let mut faults = cx
        .rec
        .errors
        .iter()
        .filter(|e| e.kind == ErrorKind::CudaFault);
    let Some(e) = faults.next() else {
        return Vec::new();
    };
    if cx.ooms().next().is_some() {
        return Vec::new();
    }
    let more = faults.count();
    let mut evidence = vec![ev("when", fmt_t(e.t_ms)), ev("error line", e.line.clone())];
    if let Some(p) = e.facts().pattern {
        evidence.push(ev(
            "recognised as",
            format!("{} ({}; {})", p.framework.name(), p.id, p.source),
        ));
    }
    if more > 0 {
        evidence.push(ev("further CUDA errors of this kind", more.to_string()));
    }
    evidence.extend(fill_at(cx, e.t_ms));
    evidence.push(ev(
        "GPU memory",
        "not the cause: an allocation failure says out of memory; this error names another \
         fault",
    ));
    let ran = cx.rec.exit == Some(JobExit::Code(0));
    vec![Finding {
        id: ids::CUDA_ERROR.into(),
        severity: if ran { Severity::Info } else { Severity::Error },
        title: format!(
            "A CUDA error that is not a memory failure at {}{}",
            fmt_t(e.t_ms),
            if ran {
                " (the job went on and exited 0)"
            } else {
                ""
            }
        ),
        devices: e.device.into_iter().collect(),
        pid: e.pid,
        evidence,
        fix: fixes::CUDA_ERROR.into(),
    }]
}
