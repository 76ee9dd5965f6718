//! `held-after-exit`: memory still held after every process of the job exited.

use super::prelude::*;

/// Coherent-memory GPUs by the name NVML gives them (Grace Hopper GH200, Grace Blackwell
/// GB200/GB300): their memory is a NUMA node of the host. A recording keeps the name, not
/// the NUMA node (`DeviceInfo::numa_node`, which scan reads).
pub(super) fn coherent_memory_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["GH200", "GB200", "GB300"].iter().any(|m| n.contains(m))
}

/// `held-after-exit`: every process of the job has exited, yet `exit_grace_ms` later a
/// device it used still holds more than `held_min` above its pre-job level (growth of
/// other processes taken out).
pub(super) fn held_after_exit(cx: &Prepared) -> Vec<Finding> {
    let th = cx.th;
    // A job process still running that holds the device files with no CUDA context (an NVML
    // client, e.g. `nvidia-smi -l` the job started) keeps no memory: not waited for.
    let nvml_client = |p: &RecordedProcess| {
        p.exit_ms.is_none()
            && cx
                .rec
                .device_file_holders
                .iter()
                .any(|h| h.pid == p.pid && h.context == Some(false))
    };
    let tree: Vec<&RecordedProcess> = cx
        .rec
        .processes
        .iter()
        .filter(|p| p.in_tree && !nvml_client(p))
        .collect();
    if tree.is_empty() || tree.iter().any(|p| p.exit_ms.is_none()) {
        return Vec::new();
    }
    let last_exit = tree
        .iter()
        .filter_map(|p| p.exit_ms)
        .fold(f64::NEG_INFINITY, f64::max);
    let from = last_exit + th.exit_grace_ms;
    let mut out = Vec::new();
    for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
        let lo = d.samples.partition_point(|(t, _)| *t < from);
        let Some(after) = d.samples[lo..].iter().map(|p| p.1).min() else {
            continue;
        };
        let t_end = d.samples.last().map(|p| p.0).unwrap_or(from);
        // Others' growth since before the job (`Prepared::others_growth`).
        let others_growth = cx.others_growth(d, t_end);
        let held = after
            .saturating_sub(d.baseline)
            .saturating_sub(others_growth);
        if held < th.held_min {
            continue;
        }
        let mut evidence: Vec<Evidence> = uuid_ev(d).into_iter().collect();
        evidence.push(ev("the job's last process exited", fmt_t(last_exit)));
        evidence.push(ev_bytes("used before the job", d.baseline));
        evidence.push(ev_bytes(
            format!("used at least, from {} on", fmt_t(from)),
            after,
        ));
        if others_growth > 0 {
            evidence.push(ev_bytes(
                "growth of other processes (not counted)",
                others_growth,
            ));
        }
        evidence.push(ev_bytes("not returned", held));
        let still: Vec<String> = tree
            .iter()
            .filter(|p| {
                cx.procs
                    .get(&p.pid)
                    .and_then(|m| m.get(&d.index))
                    .is_some_and(|s| {
                        let i = s.partition_point(|(t, _)| *t < from);
                        s[i..].iter().any(|(_, u)| u.is_some_and(|u| u > 0))
                    })
            })
            .map(|p| cx.who(p.pid))
            .collect();
        if !still.is_empty() {
            evidence.push(ev("exited, still listed by NVML", still.join(", ")));
        }
        // Coherent memory (GH200/GB200): NVML keeps pages freed by an exited process counted
        // as used until they are reclaimed (nvml.h, nvmlDeviceGetMemoryInfo). With no process
        // of the job still listed, that is what the bytes are: information, not lost memory.
        let coherent = still.is_empty()
            && cx
                .rec
                .devices
                .iter()
                .find(|r| r.index == d.index)
                .is_some_and(|r| coherent_memory_name(&r.name));
        out.push(Finding {
            id: ids::HELD_AFTER_EXIT.into(),
            severity: if coherent {
                Severity::Info
            } else {
                Severity::Error
            },
            title: if coherent {
                format!(
                    "GPU {}: {} still counted as used {} after the job exited: a coherent-memory \
                     GPU keeps freed pages counted until they are reclaimed",
                    d.name,
                    format_bytes(held),
                    fmt_t(from - last_exit)
                )
            } else {
                format!(
                    "GPU {}: {} still used {} after the job's processes exited",
                    d.name,
                    format_bytes(held),
                    fmt_t(from - last_exit)
                )
            },
            devices: vec![d.index],
            pid: None,
            evidence,
            fix: if coherent {
                fixes::COHERENT_UNRECLAIMED.into()
            } else {
                fixes::HELD_AFTER_EXIT.into()
            },
        });
    }
    out
}
