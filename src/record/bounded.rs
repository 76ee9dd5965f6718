//! Bounded device series for long jobs: every sample is kept at full resolution around
//! events (markers, errors, steps, and large changes of used memory to a level the last
//! window did not reach), and elsewhere folded
//! into min/max envelopes of [`Resolution::bucket_ms`] (each bucket keeps its first, lowest,
//! highest and last sample, in time order; a flat run of any length is two points). So the
//! peak, every level and every step larger than [`Resolution::change_min`] survive, while
//! memory and the report grow by at most [`Resolution::bound_per_hour`] points per GPU-hour,
//! and never past [`Resolution::max_points`] per GPU: a series that reaches it has its older
//! half (past the first samples) folded again into envelopes twice as wide as the last
//! folding, so a recording of any length is held in bounded memory, finest where it is newest.
//!
//! Samples are decided [`Resolution::window_ms`] after they are taken: an event reported a
//! little late (a marker read by the job's loop, a reading from another thread) still keeps
//! the samples before it.

use crate::model::ProcessSample;
use std::collections::VecDeque;

/// How finely a series is kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resolution {
    /// Samples within this of an event are kept as taken (ms, both sides).
    pub window_ms: f64,
    /// Width of one envelope bucket elsewhere (ms).
    pub bucket_ms: f64,
    /// A change of used memory between two samples at least this large is an event.
    pub change_min: u64,
    /// At most this many samples per GPU-hour are kept at full resolution; past it, events
    /// of that hour are kept as envelopes too.
    pub full_per_hour: usize,
    /// The recording's first this many samples are kept as taken (10 minutes at the default
    /// 100 ms period: a short job is not enveloped at all); not counted in `full_per_hour`.
    pub start_full: usize,
    /// At most this many points are kept per series, whatever the recording's length: past
    /// it, the older half (after the first `start_full` samples) is folded into coarser
    /// envelopes. At least `4 × start_full`.
    pub max_points: usize,
}

impl Default for Resolution {
    fn default() -> Self {
        Resolution {
            window_ms: 5_000.0,
            bucket_ms: 15_000.0,
            change_min: 256 << 20,
            full_per_hour: 6_000,
            start_full: 6_000,
            // Under 1 MiB of points per GPU however long the job ran (and under the Vec's
            // next doubling, 65,536 points: folding starts before it grows).
            max_points: 65_000,
        }
    }
}

const HOUR_MS: f64 = 3_600_000.0;

impl Resolution {
    /// The most points one GPU-hour can keep after the recording's first
    /// `start_full` samples: the full-resolution budget, plus four points per envelope bucket,
    /// plus the bucket boundaries that full-resolution stretches cut.
    pub fn bound_per_hour(&self) -> usize {
        let buckets = (HOUR_MS / self.bucket_ms).ceil() as usize;
        self.full_per_hour + 4 * buckets + 4 * self.full_per_hour.min(buckets)
    }
}

/// One envelope bucket being filled.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    index: i64,
    first: (f64, u64),
    lo: (f64, u64),
    hi: (f64, u64),
    last: (f64, u64),
}

/// One device's series, built sample by sample.
#[derive(Debug, Clone)]
pub struct SeriesBuilder {
    res: Resolution,
    /// Samples not yet decided (the last `window_ms`), in time order.
    recent: VecDeque<(f64, u64)>,
    /// Stretches kept at full resolution, `(from, until)`, in order.
    holds: VecDeque<(f64, f64)>,
    bucket: Option<Bucket>,
    kept: Vec<(f64, u64)>,
    /// Full-resolution samples kept in the hour `full.0`.
    full: (i64, usize),
    /// The last value pushed (for large changes).
    prev: Option<u64>,
    /// `kept` up to here holds a full-resolution sample last: never merged into a run.
    held_end: usize,
    /// Samples decided so far.
    decided: usize,
    /// Points of `kept` from the first `start_full` samples (never folded again).
    start_kept: Option<usize>,
    /// Width of the last folding of older points (ms; 0: none yet).
    coarse_ms: f64,
    /// Samples pushed.
    pub pushed: u64,
    /// The highest value pushed (a live status's peak so far).
    pub peak: u64,
}

impl SeriesBuilder {
    pub fn new(res: Resolution) -> SeriesBuilder {
        SeriesBuilder {
            res,
            recent: VecDeque::new(),
            holds: VecDeque::new(),
            bucket: None,
            kept: Vec::new(),
            full: (0, 0),
            prev: None,
            held_end: 0,
            start_kept: None,
            coarse_ms: 0.0,
            decided: 0,
            pushed: 0,
            peak: 0,
        }
    }

    /// Every sample kept as taken (replays: short, and fine detail matters).
    pub fn unbounded() -> SeriesBuilder {
        SeriesBuilder::new(Resolution {
            window_ms: f64::INFINITY,
            bucket_ms: f64::INFINITY,
            change_min: 0,
            full_per_hour: usize::MAX,
            start_full: usize::MAX,
            max_points: usize::MAX,
        })
    }

    fn unbounded_mode(&self) -> bool {
        self.res.full_per_hour == usize::MAX
    }

    /// A sample at `t` (ms). Samples may come slightly out of order (other threads'
    /// readings); they are put in place.
    pub fn push(&mut self, t: f64, used: u64) {
        self.pushed += 1;
        self.peak = self.peak.max(used);
        if self.unbounded_mode() {
            self.kept.push((t, used));
            return;
        }
        // A large change to a level not seen in the last window (a step, a release; not
        // the swing of a sawtooth that keeps repeating) is an event.
        if self
            .prev
            .is_some_and(|p| p.abs_diff(used) >= self.res.change_min)
        {
            let lo = self.recent.iter().map(|x| x.1).min().unwrap_or(used);
            let hi = self.recent.iter().map(|x| x.1).max().unwrap_or(used);
            if used < lo || used > hi {
                self.event(t);
            }
        }
        self.prev = Some(used);
        let at = self.recent.partition_point(|(x, _)| *x <= t);
        self.recent.insert(at, (t, used));
        let newest = self.recent.back().map_or(t, |x| x.0);
        while let Some(&(ts, u)) = self.recent.front() {
            if ts >= newest - self.res.window_ms {
                break;
            }
            self.recent.pop_front();
            self.decide(ts, u);
        }
    }

    /// An event at `t`: the samples within `window_ms` of it are kept as taken.
    pub fn event(&mut self, t: f64) {
        if self.unbounded_mode() {
            return;
        }
        let (from, until) = (t - self.res.window_ms, t + self.res.window_ms);
        match self.holds.back_mut() {
            Some(h) if from <= h.1 => h.1 = h.1.max(until),
            _ => self.holds.push_back((from, until)),
        }
    }

    fn held(&mut self, t: f64) -> bool {
        if self.decided <= self.res.start_full {
            return true;
        }
        while self.holds.front().is_some_and(|h| h.1 < t) {
            self.holds.pop_front();
        }
        if !self.holds.front().is_some_and(|h| h.0 <= t) {
            return false;
        }
        let hour = (t / HOUR_MS).floor() as i64;
        if self.full.0 != hour {
            self.full = (hour, 0);
        }
        if self.full.1 >= self.res.full_per_hour {
            return false;
        }
        self.full.1 += 1;
        true
    }

    fn decide(&mut self, t: f64, used: u64) {
        self.decided += 1;
        if self.decided > self.res.start_full && self.start_kept.is_none() {
            self.start_kept = Some(self.kept.len());
        }
        if self.held(t) {
            self.flush();
            self.kept.push((t, used));
            self.held_end = self.kept.len();
            self.bound();
            return;
        }
        let index = (t / self.res.bucket_ms).floor() as i64;
        if self.bucket.is_some_and(|b| b.index != index) {
            self.flush();
        }
        let b = self.bucket.get_or_insert(Bucket {
            index,
            first: (t, used),
            lo: (t, used),
            hi: (t, used),
            last: (t, used),
        });
        if used < b.lo.1 {
            b.lo = (t, used);
        }
        if used > b.hi.1 {
            b.hi = (t, used);
        }
        b.last = (t, used);
    }

    fn flush(&mut self) {
        let Some(b) = self.bucket.take() else { return };
        envelope_points([b.first, b.lo, b.hi, b.last], |p| self.keep(p));
    }

    /// Append an envelope point (a flat run's third extends it instead), then bound.
    fn keep(&mut self, p: (f64, u64)) {
        append_point(&mut self.kept, self.held_end, p);
        self.bound();
    }

    /// Past [`Resolution::max_points`]: fold the older half of what was kept after the first
    /// samples into envelopes twice as wide as the last folding (at least four buckets
    /// wide), wider again until the series is back under three quarters of the bound.
    fn bound(&mut self) {
        if self.kept.len() <= self.res.max_points {
            return;
        }
        let start = self.start_kept.unwrap_or(0).min(self.kept.len());
        let mid = start + (self.kept.len() - start) / 2;
        let target = self.res.max_points / 4 * 3;
        let mut width = if self.coarse_ms > 0.0 {
            self.coarse_ms * 2.0
        } else {
            self.res.bucket_ms * 4.0
        };
        let region = &mut self.kept[start..mid];
        region.sort_by(|a, b| a.0.total_cmp(&b.0));
        let span = region.last().map_or(0.0, |p| p.0) - region.first().map_or(0.0, |p| p.0);
        let mut folded = fold(region, width);
        while start + folded.len() + (self.kept.len() - mid) > target && width <= span {
            width *= 2.0;
            folded = fold(&self.kept[start..mid], width);
        }
        self.coarse_ms = width;
        let removed = (mid - start) - folded.len();
        let folded_end = start + folded.len();
        self.kept.splice(start..mid, folded);
        self.held_end = if self.held_end > mid {
            self.held_end - removed
        } else {
            self.held_end.min(folded_end)
        };
    }

    /// Points held now (kept, undecided and the open bucket).
    pub fn len(&self) -> usize {
        self.kept.len() + self.recent.len() + if self.bucket.is_some() { 4 } else { 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The series, in time order.
    pub fn finish(mut self) -> Vec<(f64, u64)> {
        while let Some((t, u)) = self.recent.pop_front() {
            self.decide(t, u);
        }
        self.flush();
        let mut out = self.kept;
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }
}

/// A bucket's first, lowest, highest and last points, in time order, each time once.
fn envelope_points(mut pts: [(f64, u64); 4], mut keep: impl FnMut((f64, u64))) {
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut last_t = f64::NAN;
    for p in pts {
        if p.0 != last_t {
            keep(p);
            last_t = p.0;
        }
    }
}

/// Append `p` to `out`; where the two points before it (at or after `floor`) have its
/// value, the flat run is extended to `p` instead.
fn append_point(out: &mut Vec<(f64, u64)>, floor: usize, p: (f64, u64)) {
    let n = out.len();
    if n >= floor + 2 && out[n - 1].1 == p.1 && out[n - 2].1 == p.1 {
        out[n - 1].0 = p.0;
    } else {
        out.push(p);
    }
}

/// Time-sorted points folded into envelopes of `width` ms, as the builder folds samples:
/// each bucket's [`envelope_points`], a flat run of three or more its first and last.
fn fold(points: &[(f64, u64)], width: f64) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = Vec::new();
    let mut i = 0;
    while i < points.len() {
        let index = (points[i].0 / width).floor();
        let mut j = i;
        let (mut lo, mut hi) = (points[i], points[i]);
        while j < points.len() && (points[j].0 / width).floor() == index {
            if points[j].1 < lo.1 {
                lo = points[j];
            }
            if points[j].1 > hi.1 {
                hi = points[j];
            }
            j += 1;
        }
        envelope_points([points[i], lo, hi, points[j - 1]], |p| {
            append_point(&mut out, 0, p)
        });
        i = j;
    }
    out
}

/// Process lists of a bounded recording: of a run of identical lists of one device (same
/// PIDs, same usage) only the first and the last are kept, so a job that holds still for
/// days adds nothing, while every change, and the state just before it, is kept.
#[derive(Debug, Default)]
pub struct ListRuns {
    runs: std::collections::BTreeMap<u32, ListRun>,
}

#[derive(Debug, Default)]
struct ListRun {
    last: Vec<(u32, Option<u64>)>,
    held: Option<Vec<ProcessSample>>,
}

impl ListRuns {
    /// One device's list of a round (its samples, all of `device`): what to keep now.
    pub fn keep(&mut self, device: u32, list: Vec<ProcessSample>) -> Vec<ProcessSample> {
        let key: Vec<(u32, Option<u64>)> = list.iter().map(|p| (p.pid, p.used)).collect();
        let run = self.runs.entry(device).or_default();
        if run.last == key {
            run.held = Some(list);
            return Vec::new();
        }
        run.last = key;
        let mut out = run.held.take().unwrap_or_default();
        out.extend(list);
        out
    }

    /// The lists still held back (the last of each run).
    pub fn finish(self) -> Vec<ProcessSample> {
        self.runs
            .into_values()
            .flat_map(|r| r.held.unwrap_or_default())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// The default, without the full-resolution start.
    const LATER: Resolution = Resolution {
        window_ms: 5_000.0,
        bucket_ms: 15_000.0,
        change_min: 256 << 20,
        full_per_hour: 6_000,
        start_full: 0,
        max_points: usize::MAX,
    };

    /// 1 GiB (or `base`) with a 1 MiB wobble every other sample: nothing is flat.
    fn wobble(base: u64, i: u64) -> u64 {
        base + (i % 2) * MIB
    }

    #[test]
    fn the_first_minutes_are_kept_as_taken() {
        let mut b = SeriesBuilder::new(Resolution::default());
        for i in 0..7_200 {
            b.push(i as f64 * 100.0, 1 << 30);
        }
        let out = b.finish();
        assert_eq!(out.iter().filter(|p| p.0 < 600_000.0).count(), 6_000);
        assert!(out.iter().filter(|p| p.0 >= 600_000.0).count() < 10);
    }

    #[test]
    fn a_flat_day_is_a_handful_of_points_and_the_peak_survives() {
        let mut b = SeriesBuilder::new(LATER);
        let spike_at = 12.0 * HOUR_MS;
        let mut i: u64 = 0;
        loop {
            let t = i as f64 * 100.0;
            if t >= 24.0 * HOUR_MS {
                break;
            }
            let used = if t == spike_at {
                3 << 30
            } else {
                wobble(1 << 30, i)
            };
            b.push(t, used);
            i += 1;
        }
        let out = b.finish();
        assert!(
            out.len() <= 24 * LATER.bound_per_hour() / 10,
            "{}",
            out.len()
        );
        assert_eq!(out.iter().map(|p| p.1).max(), Some(3 << 30));
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        // Around the spike (a large change, an event): every sample as taken.
        let near = out
            .iter()
            .filter(|p| (p.0 - spike_at).abs() <= 4_000.0)
            .count();
        assert_eq!(near, 81, "samples within 4 s of the spike");
    }

    #[test]
    fn the_full_resolution_budget_bounds_an_hour_of_events() {
        let mut b = SeriesBuilder::new(LATER);
        // A step up of 300 MiB every second (a new level each time): events everywhere.
        for i in 0..36_000u64 {
            b.push(i as f64 * 100.0, wobble((i / 10) * 300 * MIB, i));
        }
        let out = b.finish();
        let bound = LATER.bound_per_hour();
        assert!(out.len() <= bound, "{} > {bound}", out.len());
        assert!(out.len() >= LATER.full_per_hour, "{}", out.len());
    }

    #[test]
    fn a_recording_of_any_length_stays_under_the_point_bound() {
        let res = Resolution {
            max_points: 30_000,
            ..Resolution::default()
        };
        let mut b = SeriesBuilder::new(res);
        // 100 hours at one sample a second: a 600 MiB step every 5 minutes (an event each
        // time: full resolution around it), one peak at hour 30 and one trough at hour 70.
        let (peak_at, trough_at) = (30.0 * HOUR_MS + 1_000.0, 70.0 * HOUR_MS + 1_000.0);
        let mut most = 0;
        for i in 0..360_000u64 {
            let t = i as f64 * 1_000.0;
            let used = if t == peak_at {
                60 << 30
            } else if t == trough_at {
                MIB
            } else {
                wobble((2 << 30) + ((i / 300) % 2) * 600 * MIB, i)
            };
            b.push(t, used);
            most = most.max(b.kept.len());
        }
        assert!(most <= res.max_points, "{most} points held at once");
        let out = b.finish();
        assert!(out.len() <= res.max_points, "{}", out.len());
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        // The first samples as taken, the extremes wherever they were.
        let first: Vec<f64> = out.iter().take(6_000).map(|p| p.0).collect();
        assert_eq!(
            first,
            (0..6_000).map(|i| i as f64 * 1_000.0).collect::<Vec<_>>()
        );
        assert!(out.contains(&(peak_at, 60 << 30)), "the peak survives");
        assert!(out.contains(&(trough_at, MIB)), "the trough survives");
        // The newest hour is still as finely kept as an unbounded hour would be.
        let last_hour = out.iter().filter(|p| p.0 >= 99.0 * HOUR_MS).count();
        assert!(last_hour >= 480, "{last_hour} points in the last hour");
        // Without the bound the same recording holds far more.
        let mut unbounded = SeriesBuilder::new(Resolution::default());
        for i in 0..360_000u64 {
            unbounded.push(
                i as f64 * 1_000.0,
                wobble((2 << 30) + ((i / 300) % 2) * 600 * MIB, i),
            );
        }
        assert!(unbounded.finish().len() > res.max_points);
    }

    #[test]
    fn a_late_event_keeps_the_samples_before_it() {
        let mut b = SeriesBuilder::new(LATER);
        for i in 0..600u64 {
            b.push(i as f64 * 100.0, wobble(1 << 30, i));
        }
        // A marker at 59 s, reported after the sample of 59.9 s: the samples still
        // undecided (the last 5 s) and those up to 5 s after it are kept.
        b.event(59_000.0);
        for i in 600..1200u64 {
            b.push(i as f64 * 100.0, wobble(1 << 30, i));
        }
        let out = b.finish();
        let near = out
            .iter()
            .filter(|p| (54_900.0..=64_000.0).contains(&p.0))
            .count();
        assert_eq!(near, 92);
    }
}
