//! Levels and phases: plateaus, the level at every phase boundary, and chains of phases
//! without a release with their ratchets (rises of at least one noise step).

use super::prepare::level_at;

/// Quiet time that ends a phase when no marker does (a plateau). Replays mark every step.
pub(super) const QUIET_MS: f64 = 1000.0;

/// Times where a phase ends: markers, and the start of every plateau (usage within
/// `noise` for [`QUIET_MS`]).
pub(super) fn plateau_starts(s: &[(f64, u64)], noise: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let Some(&(mut ta, mut va)) = s.first() else {
        return out;
    };
    let mut flagged = true;
    for &(t, v) in &s[1..] {
        if v.abs_diff(va) > noise {
            ta = t;
            va = v;
            flagged = false;
        } else if !flagged && t - ta >= QUIET_MS {
            out.push(t);
            flagged = true;
        }
    }
    out
}

/// The level at the start, at every phase boundary, and at the end.
pub(super) fn phase_levels(s: &[(f64, u64)], markers: &[f64], noise: u64) -> Vec<(f64, u64)> {
    let (Some(&first), Some(&last)) = (s.first(), s.last()) else {
        return Vec::new();
    };
    let mut times = plateau_starts(s, noise);
    let lo = markers.partition_point(|t| *t <= first.0);
    let hi = markers.partition_point(|t| *t <= last.0);
    times.extend_from_slice(&markers[lo..hi]);
    times.sort_by(f64::total_cmp);
    times.dedup();
    let mut out = Vec::with_capacity(times.len() + 2);
    out.push(first);
    for t in times {
        if t > first.0 && t < last.0 {
            if let Some(l) = level_at(s, t) {
                out.push((t, l));
            }
        }
    }
    out.push(last);
    out
}

/// A rise of at least one step between phases.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ratchet {
    pub(super) t: f64,
    pub(super) from: u64,
    pub(super) to: u64,
}

/// A run of phases with no release (no drop of a step or more below the highest level).
#[derive(Debug, Clone)]
pub(super) struct Chain {
    /// Indices into the phase levels, inclusive.
    pub(super) first: usize,
    pub(super) last: usize,
    pub(super) ratchets: Vec<Ratchet>,
    pub(super) top: u64,
    pub(super) max_seen: u64,
    pub(super) end_t: f64,
}

impl Chain {
    pub(super) fn new(i: usize, t: f64, l: u64) -> Chain {
        Chain {
            first: i,
            last: i,
            ratchets: Vec::new(),
            top: l,
            max_seen: l,
            end_t: t,
        }
    }
}

pub(super) fn chains(levels: &[(f64, u64)], step: u64) -> Vec<Chain> {
    let mut out = Vec::new();
    let Some(&(t0, l0)) = levels.first() else {
        return out;
    };
    let mut cur = Chain::new(0, t0, l0);
    for (i, &(t, l)) in levels.iter().enumerate().skip(1) {
        if l.saturating_add(step) <= cur.max_seen {
            cur.end_t = t;
            out.push(std::mem::replace(&mut cur, Chain::new(i, t, l)));
            continue;
        }
        if l >= cur.top.saturating_add(step) {
            cur.ratchets.push(Ratchet {
                t,
                from: cur.top,
                to: l,
            });
            cur.top = l;
        }
        cur.max_seen = cur.max_seen.max(l);
        cur.last = i;
        cur.end_t = t;
    }
    out.push(cur);
    out
}
