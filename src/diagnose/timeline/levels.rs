//! Levels and phases: plateaus, the level at every phase boundary, chains of phases without
//! a release with their ratchets (rises of at least one noise step), and the split of a
//! chain's rises into its set-up (context, load) and the steps after it.

use super::prepare::level_at;

/// Quiet time that ends a phase when no marker does (a plateau). Replays mark every step.
pub(super) const QUIET_MS: f64 = 1000.0;

/// A shorter quiet time that ends a phase after an abrupt step: a rise or drop of a full
/// noise step (4 x `noise`) between two consecutive samples, then level for this long and at
/// least [`SHORT_QUIET_SAMPLES`] samples. A fast staircase (sub-second phases, each one new
/// allocation held) has such treads; a ramp (allocations spread over the phase) does not.
pub(super) const SHORT_QUIET_MS: f64 = 250.0;
/// Samples a short tread needs.
pub(super) const SHORT_QUIET_SAMPLES: usize = 5;

/// Times where a phase ends: markers, and the start of every plateau (usage within `noise`
/// for [`QUIET_MS`], or for [`SHORT_QUIET_MS`] after an abrupt step).
pub(super) fn plateau_starts(s: &[(f64, u64)], noise: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let Some(&(mut ta, mut va)) = s.first() else {
        return out;
    };
    let step = noise.saturating_mul(4).max(1);
    let mut flagged = true;
    let mut abrupt = false;
    let mut since = 0usize;
    let mut prev = va;
    for &(t, v) in &s[1..] {
        if v.abs_diff(va) > noise {
            abrupt = v.abs_diff(prev) >= step;
            ta = t;
            va = v;
            flagged = false;
            since = 0;
        } else {
            since += 1;
            let quiet = t - ta;
            if !flagged
                && (quiet >= QUIET_MS
                    || (abrupt && quiet >= SHORT_QUIET_MS && since >= SHORT_QUIET_SAMPLES))
            {
                out.push(t);
                flagged = true;
            }
        }
        prev = v;
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

/// Where a chain's rises after its set-up start: the leading context-sized rises (a CUDA
/// context, NCCL's first buffers: together at most `context_max` above the chain's start) and
/// then one more, the load (weights, the first working set). What comes after is work that
/// added memory phase after phase.
pub(super) fn load_end(c: &Chain, context_max: u64) -> usize {
    let Some(first) = c.ratchets.first() else {
        return 0;
    };
    let k = c
        .ratchets
        .iter()
        .take_while(|r| r.to.saturating_sub(first.from) <= context_max)
        .count();
    (k + 1).min(c.ratchets.len())
}
