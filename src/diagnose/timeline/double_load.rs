//! `double-load`: one load as a full copy on one GPU and again split across GPUs.

use super::prelude::*;

/// One process's footprint per device at its sample times.
pub(super) struct Footprint {
    pub(super) devices: Vec<u32>,
    pub(super) times: Vec<f64>,
    /// `vectors[i][k]`: bytes on `devices[k]` at `times[i]`.
    pub(super) vectors: Vec<Vec<u64>>,
    pub(super) totals: Vec<(f64, u64)>,
}

pub(super) fn footprint(per_dev: &BTreeMap<u32, ProcSeries>) -> Footprint {
    let devices: Vec<u32> = per_dev.keys().copied().collect();
    let mut events: Vec<(f64, usize, u64)> = Vec::new();
    for (k, s) in per_dev.values().enumerate() {
        for (t, u) in s {
            if let Some(u) = u {
                events.push((*t, k, *u));
            }
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut cur = vec![0u64; devices.len()];
    let mut times = Vec::new();
    let mut vectors = Vec::new();
    let mut totals = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        while i < events.len() && events[i].0 == t {
            cur[events[i].1] = events[i].2;
            i += 1;
        }
        times.push(t);
        totals.push((t, cur.iter().sum()));
        vectors.push(cur.clone());
    }
    Footprint {
        devices,
        times,
        vectors,
        totals,
    }
}

/// Shares of a load per device: `(device position, bytes)` above zero, and the total.
pub(super) fn load_of(a: &[u64], b: &[u64]) -> (Vec<u64>, u64) {
    let v: Vec<u64> = a.iter().zip(b).map(|(x, y)| y.saturating_sub(*x)).collect();
    let t = v.iter().sum();
    (v, t)
}

/// A full copy: one device holds at least this share of a load.
pub(super) const FULL_COPY_SHARE: f64 = 0.95;
/// A split copy: two or more devices hold at least this share of a load each.
pub(super) const SPLIT_PART_SHARE: f64 = 0.25;

/// The device holding a full copy of a load.
pub(super) fn concentrated(v: &[u64], total: u64) -> Option<usize> {
    v.iter()
        .position(|x| total > 0 && *x as f64 >= FULL_COPY_SHARE * total as f64)
}

/// Devices holding a part of a split load, when two or more do.
pub(super) fn split(v: &[u64], total: u64) -> Vec<usize> {
    let parts: Vec<usize> = (0..v.len())
        .filter(|k| total > 0 && v[*k] as f64 >= SPLIT_PART_SHARE * total as f64)
        .collect();
    if parts.len() >= 2 {
        parts
    } else {
        Vec::new()
    }
}

/// Cut points considered per chain: enough for any real load sequence, bounded work.
pub(super) const MAX_CUTS: usize = 96;

/// `double-load`: a process of the job loads about the same amount twice without a
/// release between, once as a full copy on one GPU and once split across GPUs including
/// that one (a full copy plus `device_map="auto"`): per device, a shard plus a full copy.
pub(super) fn double_load(cx: &Prepared) -> Vec<Finding> {
    let th = cx.th;
    let min_total = cx.devs.iter().map(|d| d.total).filter(|t| *t > 0).min();
    let Some(min_total) = min_total else {
        return Vec::new();
    };
    let load_min = (th.load_min_fraction * min_total as f64) as u64;
    let step = th
        .step_min
        .max((th.step_fraction * min_total as f64) as u64)
        .max(1);
    let mut out = Vec::new();
    for pid in &cx.tree {
        let Some(per_dev) = cx.procs_fine.get(pid) else {
            continue;
        };
        if per_dev.len() < 2 {
            continue;
        }
        let fp = footprint(per_dev);
        let levels = phase_levels(&fp.totals, &cx.marker_times, step / 4);
        // Vector at each phase level.
        let vec_at = |t: f64| -> Option<&Vec<u64>> {
            let i = fp.times.partition_point(|x| *x <= t);
            i.checked_sub(1).map(|i| &fp.vectors[i])
        };
        let mut found = None;
        'chains: for c in chains(&levels, step) {
            let mut cuts: Vec<usize> = Vec::new();
            for i in c.first..=c.last {
                let changed = cuts
                    .last()
                    .is_none_or(|p| levels[*p].1.abs_diff(levels[i].1) >= step / 4);
                if changed {
                    cuts.push(i);
                }
                if cuts.len() >= MAX_CUTS {
                    break;
                }
            }
            if c.last > c.first && cuts.last() != Some(&c.last) && cuts.len() < MAX_CUTS {
                cuts.push(c.last);
            }
            let vs: Vec<&Vec<u64>> = match cuts.iter().map(|i| vec_at(levels[*i].0)).collect() {
                Some(v) => v,
                None => continue,
            };
            for a in 0..cuts.len() {
                for b in a + 1..cuts.len() {
                    let (la, ta) = load_of(vs[a], vs[b]);
                    if ta < load_min {
                        continue;
                    }
                    for e in b + 1..cuts.len() {
                        let (lb, tb) = load_of(vs[b], vs[e]);
                        if tb < load_min {
                            continue;
                        }
                        let hi = ta.max(tb);
                        if ta.abs_diff(tb) as f64 > th.load_tolerance * hi as f64 {
                            continue;
                        }
                        let ok = |conc: &[u64], ct: u64, spl: &[u64], st: u64| {
                            concentrated(conc, ct).is_some_and(|m| split(spl, st).contains(&m))
                        };
                        if ok(&la, ta, &lb, tb) || ok(&lb, tb, &la, ta) {
                            found = Some((
                                (levels[cuts[a]].0, levels[cuts[b]].0, la, ta),
                                (levels[cuts[b]].0, levels[cuts[e]].0, lb, tb),
                                vs[e].clone(),
                            ));
                            break 'chains;
                        }
                    }
                }
            }
        }
        let Some((first, second, after)) = found else {
            continue;
        };
        let describe = |v: &[u64]| -> String {
            v.iter()
                .enumerate()
                .filter(|(_, b)| **b > 0)
                .map(|(k, b)| format!("GPU {}: {}", fp.devices[k], format_bytes(*b)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut evidence = vec![
            ev_bytes(
                format!(
                    "load 1, {} to {} ({})",
                    fmt_t(first.0),
                    fmt_t(first.1),
                    describe(&first.2)
                ),
                first.3,
            ),
            ev_bytes(
                format!(
                    "load 2, {} to {} ({})",
                    fmt_t(second.0),
                    fmt_t(second.1),
                    describe(&second.2)
                ),
                second.3,
            ),
        ];
        let mut devices = Vec::new();
        for (k, b) in after.iter().enumerate() {
            if *b == 0 {
                continue;
            }
            devices.push(fp.devices[k]);
            evidence.push(ev_bytes(
                format!("held on GPU {} after both", fp.devices[k]),
                *b,
            ));
            if let Some(d) = cx.dev(fp.devices[k]) {
                evidence.extend(uuid_ev(d));
            }
        }
        let total: u64 = after.iter().sum();
        evidence.push(ev_bytes("footprint across GPUs", total));
        out.push(Finding {
            id: ids::DOUBLE_LOAD.into(),
            severity: Severity::Warn,
            title: format!(
                "{} loaded about {} twice: once on one GPU, once split across GPUs {} ({} in \
                 all)",
                cx.who(*pid),
                format_bytes(first.3.max(second.3)),
                super::evidence::gpus(&devices),
                format_bytes(total)
            ),
            devices,
            pid: Some(*pid),
            evidence,
            fix: fixes::DOUBLE_LOAD.into(),
        });
    }
    out
}
