//! `held-by-descriptor`: after the command ended, memory stays held on a GPU while NVML lists
//! no live process of the job there (only exited ones, or nobody), and a live process of the
//! job holds the driver's device files: a worker forked after CUDA was initialised keeps the
//! exited creator's context alive through the descriptors it inherited (issue 25, item 9).
//! `outlived-command` covers a *listed* live process; this rule the unlisted holder.
//!
//! A holder is one whose maps showed a CUDA context (a forked worker inherits the context's
//! `nvidiactl` mappings); descriptors alone are what every NVML client holds (an
//! `nvidia-smi -l` the job started), so such a process is never the holder. One whose maps
//! were not read is named at info only, saying so (docs/findings.md, `held-by-descriptor`).

use super::prelude::*;

/// One holder's sightings after the command ended.
struct Sighting<'a> {
    pid: u32,
    /// Its last sighting holding the files.
    last_ms: f64,
    devices: BTreeSet<u32>,
    nodes: BTreeSet<&'a str>,
    /// Whether a sighting's maps showed a CUDA context (`Some(true)` if any did; `None` if
    /// none did and some were not read).
    context: Option<bool>,
}

/// One device whose memory the holders keep.
struct Row<'a> {
    dev: &'a Dev<'a>,
    held: u64,
    others_growth: u64,
    /// The job's exited processes NVML still lists with memory there after the end.
    listed_dead: Vec<u32>,
}

/// `held-by-descriptor`: see the module. Warn while a holder still runs at the end of the
/// recording (ending it returns the memory); info when every holder exited afterwards, on
/// its own or by `--kill-after`.
pub(super) fn held_by_descriptor(cx: &Prepared) -> Vec<Finding> {
    let rec = cx.rec;
    if rec.exit.is_none() || rec.device_file_holders.is_empty() {
        return Vec::new();
    }
    let (end, th) = (rec.end_ms, cx.th);
    // Whether the job's `pid` is listed with memory on `dev` after the command ended while
    // it was alive (exited processes stay listed when a descriptor keeps their memory).
    let listed_live = |pid: u32, dev: u32| -> bool {
        let exit = cx.process(pid).and_then(|p| p.exit_ms);
        cx.procs
            .get(&pid)
            .and_then(|m| m.get(&dev))
            .is_some_and(|s| {
                s.iter().any(|(t, u)| {
                    *t > end && exit.is_none_or(|x| *t < x) && u.is_some_and(|u| u > 0)
                })
            })
    };
    // `nvidiaN` names a minor number, not an NVML index (minors need not follow NVML
    // order): mapped through the recorded minors; N itself where the driver gave none. A
    // minor of no recorded GPU names none of the job's GPUs.
    let index_of_minor = |n: u32| -> Option<u32> {
        if rec.devices.iter().all(|d| d.minor.is_none()) {
            return Some(n);
        }
        rec.devices
            .iter()
            .find(|d| d.minor == Some(n))
            .map(|d| d.index)
    };
    let mut sightings: BTreeMap<u32, Sighting> = BTreeMap::new();
    for h in rec.device_file_holders.iter().filter(|h| h.t_ms >= end) {
        if !cx.tree.contains(&h.pid) {
            continue;
        }
        let s = sightings.entry(h.pid).or_insert_with(|| Sighting {
            pid: h.pid,
            last_ms: h.t_ms,
            devices: BTreeSet::new(),
            nodes: BTreeSet::new(),
            context: Some(false),
        });
        s.context = match (s.context, h.context) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (None, _) | (_, None) => None,
            _ => Some(false),
        };
        s.last_ms = s.last_ms.max(h.t_ms);
        s.devices
            .extend(h.devices.iter().filter_map(|n| index_of_minor(*n)));
        s.nodes.extend(h.nodes.iter().map(String::as_str));
    }
    // A holder NVML lists with memory itself is `outlived-command`'s; one with no CUDA
    // context mapped (an NVML client) holds nothing.
    sightings.retain(|pid, s| {
        s.context != Some(false) && !cx.devs.iter().any(|d| listed_live(*pid, d.index))
    });
    // Rows per set of holders.
    let mut groups: BTreeMap<Vec<u32>, Vec<Row>> = BTreeMap::new();
    for d in cx.devs.iter().filter(|d| cx.job_devices.contains(&d.index)) {
        // Holders of this GPU's file; or of files that name none of the job's GPUs (only the
        // control files, or `nvidiaN` whose minor N is not an NVML index of the job's GPUs:
        // minors need not follow NVML order).
        let here: Vec<&Sighting> = sightings
            .values()
            .filter(|s| {
                s.devices.contains(&d.index)
                    || !s.devices.iter().any(|x| cx.job_devices.contains(x))
            })
            .collect();
        if here.is_empty() || cx.tree.iter().any(|pid| listed_live(*pid, d.index)) {
            continue;
        }
        let from = end + th.exit_grace_ms;
        let to = here
            .iter()
            .map(|s| s.last_ms)
            .fold(f64::NEG_INFINITY, f64::max);
        let lo = d.samples.partition_point(|(t, _)| *t < from);
        let hi = d.samples.partition_point(|(t, _)| *t <= to);
        let window = d.samples.get(lo..hi).unwrap_or_default();
        let Some(after) = window.iter().map(|p| p.1).chain(d.level_at(to)).min() else {
            continue;
        };
        let others_growth = cx.others_growth(d, to);
        let held = after
            .saturating_sub(d.baseline)
            .saturating_sub(others_growth);
        if held < th.held_min {
            continue;
        }
        let listed_dead: Vec<u32> = cx
            .tree
            .iter()
            .copied()
            .filter(|pid| {
                let Some(x) = cx.process(*pid).and_then(|p| p.exit_ms) else {
                    return false;
                };
                cx.procs
                    .get(pid)
                    .and_then(|m| m.get(&d.index))
                    .is_some_and(|s| {
                        s.iter()
                            .any(|(t, u)| *t > end.max(x) && u.is_some_and(|u| u > 0))
                    })
            })
            .collect();
        groups
            .entry(here.iter().map(|s| s.pid).collect())
            .or_default()
            .push(Row {
                dev: d,
                held,
                others_growth,
                listed_dead,
            });
    }
    let kill_markers = super::outlived::kill_after_markers(rec);
    groups
        .into_iter()
        .map(|(pids, rows)| {
            let who: Vec<&Sighting> = pids.iter().filter_map(|p| sightings.get(p)).collect();
            finding(cx, &who, &rows, &kill_markers)
        })
        .collect()
}

/// The finding for `rows` kept by the holders `who`.
fn finding(cx: &Prepared, who: &[&Sighting], rows: &[Row], kill_markers: &[&Marker]) -> Finding {
    let end = cx.rec.end_ms;
    let pids: Vec<String> = who.iter().map(|s| s.pid.to_string()).collect();
    let names: Vec<String> = who.iter().map(|s| cx.who(s.pid)).collect();
    let kill = format!("kill {}", pids.join(" "));
    let amounts: Vec<String> = rows
        .iter()
        .map(|r| format!("GPU {}: {}", r.dev.name, format_bytes(r.held)))
        .collect();
    let mut dead: Vec<u32> = rows.iter().flat_map(|r| r.listed_dead.clone()).collect();
    dead.sort_unstable();
    dead.dedup();
    let nvml = if dead.is_empty() {
        "NVML lists no process of the job".to_string()
    } else {
        let d: Vec<String> = dead
            .iter()
            .map(|p| format!("{} (exited)", cx.who(*p)))
            .collect();
        format!("NVML lists {}", d.join(", "))
    };
    let mut evidence = vec![ev("the command ended", fmt_t(end))];
    for r in rows {
        evidence.extend(uuid_ev(r.dev));
        evidence.push(ev_bytes(
            format!("GPU {}: used before the job", r.dev.index),
            r.dev.baseline,
        ));
        if r.others_growth > 0 {
            evidence.push(ev_bytes(
                format!(
                    "GPU {}: growth of other processes (not counted)",
                    r.dev.index
                ),
                r.others_growth,
            ));
        }
        evidence.push(ev_bytes(
            format!("GPU {}: held above the pre-job level", r.dev.index),
            r.held,
        ));
    }
    evidence.push(ev("NVML", nvml.clone()));
    let mut exits: Vec<f64> = Vec::new();
    let mut alive = false;
    // Whether some holder's maps showed a CUDA context: else none is named above info.
    let context = who.iter().any(|s| s.context == Some(true));
    for s in who {
        if s.context.is_none() {
            evidence.push(ev(
                format!("PID {}: maps not read", s.pid),
                "whether it has a CUDA context is not known (descriptors alone are what \
                 every NVML client holds)",
            ));
        }
        let p = cx.process(s.pid);
        let files: Vec<String> = s.nodes.iter().map(|n| crate::term::one_line(n)).collect();
        evidence.push(ev(
            format!("PID {} holds open, at {}", s.pid, fmt_t(s.last_ms)),
            files.join(", "),
        ));
        // Its parent when first seen, if that was a process of the job (one seen only after
        // the command exited was re-parented to vramdoc, the subreaper).
        if let Some(pp) = p.and_then(|p| p.ppid).filter(|pp| cx.tree.contains(pp)) {
            evidence.push(ev(format!("PID {}: parent", s.pid), cx.who(pp)));
        }
        if let Some(c) = p.and_then(|p| p.cmdline.as_deref()) {
            evidence.push(ev(
                format!("PID {}: command (redacted)", s.pid),
                crate::term::one_line(c),
            ));
        }
        match p.and_then(|p| p.exit_ms) {
            Some(x) => {
                evidence.push(ev(format!("PID {}: exited", s.pid), fmt_t(x)));
                exits.push(x);
            }
            None => alive = true,
        }
    }
    let (severity, title) = if alive && !context {
        (
            Severity::Info,
            format!(
                "{} held after the command ended while {} of the job {} the device files \
                 open, with maps not read (a CUDA context or only NVML: not known); {}",
                amounts.join(", "),
                names.join(", "),
                if who.len() == 1 { "holds" } else { "hold" },
                nvml,
            ),
        )
    } else if alive {
        evidence.push(ev("end it with", kill.clone()));
        (
            Severity::Warn,
            format!(
                "{} held by {}, {} that inherited the CUDA context's descriptors; {}: end {} \
                 with `{kill}` (or run with --kill-after)",
                amounts.join(", "),
                names.join(", "),
                if who.len() == 1 {
                    "a child of the job"
                } else {
                    "children of the job"
                },
                nvml,
                if who.len() == 1 { "it" } else { "them" },
            ),
        )
    } else {
        let ended: Vec<String> = kill_markers
            .iter()
            .filter(|m| {
                m.label
                    .split([' ', ','])
                    .any(|w| pids.iter().any(|p| p == w))
            })
            .map(|m| crate::term::one_line(&m.label))
            .collect();
        for m in &ended {
            evidence.push(ev("ended by", m.clone()));
        }
        let how = if ended.is_empty() {
            "exited"
        } else {
            "was ended by --kill-after"
        };
        let last = exits.iter().copied().fold(end, f64::max);
        (
            Severity::Info,
            format!(
                "{} was held after the command ended by {} through the CUDA context's \
                 inherited descriptors ({}); it {how} {} later",
                amounts.join(", "),
                names.join(", "),
                nvml,
                fmt_t(last - end)
            ),
        )
    };
    Finding {
        id: ids::HELD_BY_DESCRIPTOR.into(),
        severity,
        title,
        devices: rows.iter().map(|r| r.dev.index).collect(),
        pid: who.first().map(|s| s.pid),
        evidence,
        fix: fixes::HELD_BY_DESCRIPTOR.into(),
    }
}

#[cfg(test)]
#[path = "held_by_descriptor_tests.rs"]
mod tests;
