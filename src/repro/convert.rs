//! From a [`Source`] to a [`Scenario`]: the job's memory per GPU (the device series minus
//! what other processes held) cut into alloc/free steps at every change of at least one
//! quantum, a context where the job first touched a GPU, marker texts as phase steps, other
//! processes as neighbours, the failed allocation last, and the `bug` variant's expectations
//! from what the recording showed. Pure; bounded by [`MAX_STEPS`].

use super::label::safe_label;
use super::limits::MAX_QUANTUM;
pub use super::limits::{
    DEFAULT_CONTEXT, MARKER_LAG_MS, MAX_DEVICES, MAX_MARKER_STEPS, MAX_NEIGHBOURS_PER_GPU,
    MAX_SETTLE_MS, MAX_STEPS, MIN_QUANTUM, PEAK_STEP_MIN,
};
use super::picture::{picture, Picture};
use super::source::{Source, SourceError};
use super::ReproError;
use crate::model::MarkerKind;
use crate::scenario::{Expectation, Neighbour, Op, Scenario, SizeSpec, Step, Variant, VariantKind};
use crate::units::{format_bytes, GIB, MIB};
use std::collections::{BTreeMap, BTreeSet};

/// What the conversion did, beside the scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Level and marker steps before coalescing, and after.
    pub steps_before: usize,
    pub steps: usize,
    /// The quantum used on the first GPU (bytes).
    pub quantum: u64,
    /// Steps were merged to stay within [`MAX_STEPS`].
    pub coalesced: bool,
    pub fingerprints: Vec<String>,
    pub truncated: bool,
    /// Recorded NVML index of each scenario device.
    pub physical: Vec<u32>,
}

fn level_at(s: &[(f64, u64)], t: f64) -> Option<u64> {
    let i = s.partition_point(|(ts, _)| *ts <= t);
    i.checked_sub(1).map(|i| s[i].1)
}

fn size_text(b: u64) -> SizeSpec {
    SizeSpec::Bytes(b)
}

enum Event<'a> {
    Marker(usize, &'a str, MarkerKind),
    Level(usize, u64),
}

struct Builder {
    /// The first `limit` steps made ([`MAX_STEPS`] while converting: one with more is tried
    /// again at a coarser quantum, so the rest are counted, never held).
    steps: Vec<Step>,
    /// Steps made, kept or not.
    count: usize,
    /// Most steps kept.
    limit: usize,
    /// Per scenario device: context made, bytes allocated, live tags (LIFO).
    ctx: Vec<bool>,
    held: Vec<u64>,
    live: Vec<Vec<(String, u64)>>,
    next_tag: usize,
    phase: String,
    /// What one context costs.
    context: u64,
    /// When each step happened in the recording (the event it was made of), and now.
    times: Vec<f64>,
    now: f64,
}

impl Builder {
    /// Whether a step made now is still kept (its label worth writing).
    fn keeps(&self) -> bool {
        self.steps.len() < self.limit
    }

    /// The id of the next step.
    fn next_id(&self) -> String {
        format!("s{}", self.count + 1)
    }

    fn push(&mut self, id: String, label: String, op: Op) {
        self.count += 1;
        if !self.keeps() {
            return;
        }
        self.times.push(self.now);
        self.steps.push(Step {
            id,
            label,
            op,
            only: Vec::new(),
        });
    }

    fn level_step(&mut self, dev: usize, total: u64, target: u64, quantum: u64) {
        let held = self.held[dev];
        let d = dev as u32;
        if target >= held.saturating_add(quantum) {
            let delta = target - held;
            self.next_tag += 1;
            let tag = format!("a{}", self.next_tag);
            let id = self.next_id();
            // vLLM-style claim: one rise of 20 %+ to a round share of the GPU.
            let one_claim =
                delta as f64 >= 0.2 * total as f64 && delta as f64 >= 0.6 * target as f64;
            let round = claim_share(target, self.context, total, quantum);
            if let (true, Some(round)) = (one_claim, round) {
                let label = if self.keeps() {
                    format!("{}: claim {:.0}% of GPU {d}", self.phase, round * 100.0)
                } else {
                    String::new()
                };
                self.push(
                    id,
                    label,
                    Op::ClaimUtilization {
                        tag: tag.clone(),
                        device: d,
                        fraction: round,
                    },
                );
            } else {
                let label = if self.keeps() {
                    format!("{}: +{} on GPU {d}", self.phase, format_bytes(delta))
                } else {
                    String::new()
                };
                self.push(
                    id,
                    label,
                    Op::Alloc {
                        tag: tag.clone(),
                        device: d,
                        size: size_text(delta),
                        allocator: None,
                        group: None,
                        fill: false,
                    },
                );
            }
            self.live[dev].push((tag, delta));
            self.held[dev] = target;
        } else if held >= target.saturating_add(quantum) {
            let want = held - target;
            let mut freed = 0u64;
            while freed < want {
                let Some((tag, bytes)) = self.live[dev].pop() else {
                    break;
                };
                freed = freed.saturating_add(bytes);
                let id = self.next_id();
                let label = if self.keeps() {
                    format!("{}: -{} on GPU {d}", self.phase, format_bytes(bytes))
                } else {
                    String::new()
                };
                self.push(id, label, Op::Free { tag });
            }
            self.held[dev] = held.saturating_sub(freed);
            // Freed past the target: the rest is allocated again.
            let rest = target.saturating_sub(self.held[dev]);
            if rest >= quantum / 4 {
                self.level_step(dev, total, target, quantum / 4);
            }
        }
    }
}

/// The markers that start phases, at the time the job wrote them (see [`MARKER_LAG_MS`]),
/// up to `t_end`.
fn phase_markers(src: &Source, t_end: f64) -> Vec<(f64, &crate::model::Marker)> {
    let lag = MARKER_LAG_MS + src.period_ms.max(0.0);
    src.markers
        .iter()
        .filter(|m| {
            matches!(
                m.kind,
                MarkerKind::Marker | MarkerKind::Release | MarkerKind::Step
            )
        })
        .map(|m| ((m.t_ms - lag).max(0.0), m))
        .filter(|(t, _)| *t <= t_end)
        .collect()
}

/// The round share (a multiple of 5 % from 50 % to 95 %) a level of `target` allocated bytes
/// stands for on a GPU of `total`, when it is one: `claim_utilization` claims that fraction
/// minus what the worker already allocated, so the worker's allocations reach it. vLLM's
/// budget also counts the process's context: a level whose allocations plus context are the
/// round share is one too where a context is within one step of the timeline rules (the
/// replay then holds one context more, inside the peak's tolerance).
fn claim_share(target: u64, context: u64, total: u64, quantum: u64) -> Option<f64> {
    let t = total.max(1) as f64;
    let near = |bytes: u64| {
        let share = bytes as f64 / t;
        let round = (share * 20.0).round() / 20.0;
        let close = (share - round).abs() * t <= quantum.max(total / 200) as f64;
        (close && (0.5..=0.95).contains(&round)).then_some(round)
    };
    let step = PEAK_STEP_MIN.max(total / 50);
    near(target).or_else(|| {
        (context.saturating_add(quantum) <= step)
            .then(|| near(target.saturating_add(context)))
            .flatten()
    })
}

/// The first out-of-memory error, else none.
fn first_oom(src: &Source) -> Option<&SourceError> {
    src.errors
        .iter()
        .filter(|e| e.out_of_memory)
        .min_by(|a, b| a.t_ms.total_cmp(&b.t_ms))
}

/// Marker and level events of a recording, in time order (built once, replayed at each
/// quantum the coalescing tries).
struct Events<'a> {
    markers: Vec<(f64, &'a str, MarkerKind)>,
    list: Vec<(f64, u8, Event<'a>)>,
}

fn events<'a>(src: &'a Source, pic: &Picture, t_end: f64) -> Events<'a> {
    let mut markers: Vec<(f64, &str, MarkerKind)> = phase_markers(src, t_end)
        .into_iter()
        .map(|(t, m)| (t, m.label.as_str(), m.kind.clone()))
        .collect();
    markers.sort_by(|a, b| a.0.total_cmp(&b.0));
    if markers.len() > MAX_MARKER_STEPS {
        markers.drain(..markers.len() - MAX_MARKER_STEPS);
    }
    let mut list: Vec<(f64, u8, Event)> = Vec::new();
    for (i, (t, label, kind)) in markers.iter().enumerate() {
        list.push((*t, 0, Event::Marker(i, label, kind.clone())));
    }
    for (dev, series) in pic.job.iter().enumerate() {
        for &(t, b) in series.iter().filter(|p| p.0 <= t_end) {
            list.push((t, 1, Event::Level(dev, b)));
        }
    }
    list.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    Events { markers, list }
}

/// The steps kept, what each device holds at the end, marker step ids, each kept step's
/// time, and how many steps were made.
type Built = (
    Vec<Step>,
    Vec<u64>,
    BTreeMap<usize, String>,
    Vec<f64>,
    usize,
);

/// The steps at `quantum` (per device, scaled by total).
fn steps_at(ev: &Events, pic: &Picture, quantum: u64, t_end: f64, hostname: Option<&str>) -> Built {
    let n = pic.devs.len();
    let q: Vec<u64> = pic
        .devs
        .iter()
        .map(|d| quantum.max(d.total / 512))
        .collect();
    let markers = &ev.markers;
    let t_last = ev.list.last().map_or(0.0, |e| e.0).min(t_end);
    let mut b = Builder {
        steps: Vec::new(),
        count: 0,
        limit: MAX_STEPS,
        ctx: vec![false; n],
        held: vec![0; n],
        live: vec![Vec::new(); n],
        next_tag: 0,
        phase: "start".into(),
        context: pic.context,
        times: Vec::new(),
        now: f64::NEG_INFINITY,
    };
    // Marker step id by marker index, for expectations.
    let mut marker_ids = BTreeMap::new();
    for (t, _, ev) in &ev.list {
        b.now = *t;
        match ev {
            Event::Marker(i, label, kind) => {
                let text = safe_label(label, hostname);
                let id = format!("m{}", i + 1);
                b.phase = if text.is_empty() {
                    id.clone()
                } else {
                    text.clone()
                };
                let label = match kind {
                    MarkerKind::Release => format!("release marker: {text}"),
                    _ => format!("marker: {text}"),
                };
                b.push(id.clone(), label, Op::Pause { ms: 0 });
                if *kind == MarkerKind::Release {
                    // What a release is judged on comes after it: as long as recorded.
                    let t = markers[*i].0;
                    let next = markers.get(i + 1).map_or(t_last, |m| m.0).min(t_last);
                    let ms = (next - t).clamp(0.0, MAX_SETTLE_MS) as u64;
                    let settle = format!("{id}-settle");
                    let label = format!("after the release: {ms} ms, as recorded");
                    b.push(settle, label, Op::Pause { ms });
                }
                marker_ids.insert(*i, id);
            }
            Event::Level(dev, bytes) => {
                let dev = *dev;
                if !b.ctx[dev] {
                    if *bytes < q[dev].min(pic.context / 2).max(MIB) {
                        continue;
                    }
                    b.ctx[dev] = true;
                    let id = b.next_id();
                    let label = format!("{}: first use of GPU {dev} (context)", b.phase);
                    b.push(id, label, Op::Context { device: dev as u32 });
                }
                let target = bytes.saturating_sub(pic.context);
                b.level_step(dev, pic.devs[dev].total, target, q[dev]);
            }
        }
    }
    (b.steps, b.held, marker_ids, b.times, b.count)
}

/// Convert. `process_period_ms`: the recording's process-list period (0 when unknown).
pub fn convert(
    src: &Source,
    process_period_ms: f64,
    recorded_on: Option<String>,
) -> Result<(Scenario, Summary), ReproError> {
    // Limits first: a crafted recording must not make work before it is refused.
    let gpus = src.series.iter().filter(|s| !s.samples.is_empty()).count();
    if gpus > MAX_DEVICES {
        return Err(ReproError::TooManyDevices { gpus });
    }
    let pic = picture(src, process_period_ms)?;
    let oom = first_oom(src);
    // Up to the OOM, else to the command's exit: what its processes' teardown frees, the
    // replay's worker frees by exiting too.
    let t_end = oom.map_or(src.exit_ms.unwrap_or(f64::INFINITY), |e| e.t_ms);
    let hostname = src.hostname.as_deref();
    let ev = events(src, &pic, t_end);
    let mut quantum = MIN_QUANTUM;
    let (mut steps, mut held, mut marker_ids, mut times, mut count) =
        steps_at(&ev, &pic, quantum, t_end, hostname);
    let steps_before = count;
    // At most ~25 passes, each linear in the events: at MAX_QUANTUM only contexts and
    // markers are left (at most MAX_DEVICES + 2 * MAX_MARKER_STEPS steps).
    while count + 2 > MAX_STEPS && quantum < MAX_QUANTUM {
        quantum = quantum.saturating_mul(2);
        (steps, held, marker_ids, times, count) = steps_at(&ev, &pic, quantum, t_end, hostname);
    }
    if count + 2 > MAX_STEPS {
        return Err(ReproError::TooManySteps { steps: count });
    }
    drop(ev);
    let mut expect = Vec::new();
    let mut missed: Option<Missed> = None;
    let phys: Vec<u32> = pic.devs.iter().map(|d| d.phys).collect();
    if let Some(e) = oom {
        // The phase the OOM happened in: its last marker step, else the last level step.
        let phase = steps
            .iter()
            .rev()
            .find(|s| s.id.starts_with('m'))
            .or_else(|| steps.last())
            .map(|s| s.id.clone());
        let dev = oom_device(e, &pic);
        let total = pic.devs[dev].total;
        let last = pic.job[dev]
            .iter()
            .rfind(|p| p.0 <= e.t_ms)
            .map_or(0, |p| p.1);
        let free = total.saturating_sub(
            pic.devs[dev]
                .samples
                .iter()
                .rfind(|p| p.0 <= e.t_ms)
                .map_or(0, |p| p.1),
        );
        // The free memory the line states, where the samples saw more (a holder that came
        // and went between two readings): that state is what failed, and is reproduced.
        let q = MIN_QUANTUM.max(total / 512);
        missed = e
            .free
            .filter(|stated| free > stated.saturating_add(q))
            .map(|stated| Missed {
                dev,
                stated,
                seen: free,
            });
        let free = missed.as_ref().map_or(free, |m| m.stated);
        let bytes = e.requested.unwrap_or(free.saturating_add(MIN_QUANTUM));
        // Exactly the recorded level before the failing allocation.
        let target = last.saturating_sub(pic.context);
        let mut b = Builder {
            count: steps.len(),
            limit: usize::MAX,
            steps: std::mem::take(&mut steps),
            ctx: vec![true; pic.devs.len()],
            held: held.clone(),
            live: vec![Vec::new(); pic.devs.len()],
            next_tag: 100_000,
            phase: "before the failure".into(),
            context: pic.context,
            times: std::mem::take(&mut times),
            now: e.t_ms,
        };
        if target > b.held[dev] {
            b.level_step(dev, total, target, MIB);
        }
        b.push(
            "failed-alloc".into(),
            format!(
                "the allocation that failed: {} on GPU {dev}",
                format_bytes(bytes)
            ),
            Op::Alloc {
                tag: "failed".into(),
                device: dev as u32,
                size: size_text(bytes),
                allocator: None,
                group: None,
                fill: false,
            },
        );
        steps = b.steps;
        held = b.held;
        times = b.times;
        expect.push(Expectation::Oom {
            at_or_after: phase,
            before: None,
        });
    } else {
        // Frees at the very end are the exit's: the worker's exit frees them as well.
        while steps
            .last()
            .is_some_and(|s| matches!(s.op, Op::Free { .. }))
        {
            steps.pop();
        }
        times.truncate(steps.len());
        expect.push(Expectation::Completes);
    }
    let _ = held;
    for (i, d) in pic.devs.iter().enumerate() {
        let peak = d
            .samples
            .iter()
            .filter(|p| p.0 <= t_end)
            .map(|p| p.1)
            .max()
            .unwrap_or(0);
        // The holder the samples missed is there only from just before the failed
        // allocation (see [`Missed`]), beside the job's level for a moment a sampler may or
        // may not catch: the peak lies between the recorded one and that sum.
        let top = match missed.as_ref().filter(|m| m.dev == i) {
            Some(m) => peak.max(
                d.total
                    .saturating_sub(m.seen)
                    .saturating_add(m.modelled(pic.context)),
            ),
            None => peak,
        };
        let tol = PEAK_STEP_MIN.max(d.total / 50);
        // Whole MiB, outward.
        let min = peak.saturating_sub(tol) / MIB * MIB;
        let max = top.saturating_add(tol).div_ceil(MIB).saturating_mul(MIB);
        expect.push(Expectation::Peak {
            device: i as u32,
            min: Some(size_text(min)),
            max: Some(size_text(max)),
        });
    }
    let fingerprint = primary_fingerprint(&src.findings);
    if fingerprint.as_deref() == Some(crate::diagnose::ids::NOT_RELEASED) {
        if let Some(r) = residual(src, &pic, &marker_ids, t_end) {
            expect.push(r);
        }
    }
    let fps = src.findings.clone();
    let mut description = if fps.is_empty() {
        "A recorded job replayed without its model: no fingerprint was raised.".to_string()
    } else {
        // A full stop before the scaling sentence that follows (issue 39 item 7).
        format!(
            "A recorded job replayed without its model; the recording raised {}.",
            fps.join(", ")
        )
    };
    // Only an engine's claim scales with the card (issue 26): src/repro/engine_claim.rs.
    let totals: Vec<u64> = pic.devs.iter().map(|d| d.total).collect();
    let (steps, scaling) = super::engine_claim::apply(steps, src.engine.as_ref(), &totals);
    if let Some(m) = &missed {
        description.push_str(&m.sentence(pic.context));
    }
    description.push_str(&scaling);
    let mut neighbours = neighbours(&pic, &steps, &times);
    neighbours.extend(missed.as_ref().map(|m| m.neighbour(pic.context)));
    let scenario = Scenario {
        id: "repro".into(),
        title: match &fingerprint {
            Some(f) => format!("Reproduction of a recorded job ({f})"),
            None => "Reproduction of a recorded job".into(),
        },
        description,
        source: "vramdoc run recording, converted by `vramdoc scenario from`".into(),
        devices: pic.devs.len() as u32,
        fingerprint,
        recorded_on,
        env: BTreeMap::new(),
        neighbours,
        steps,
        variants: vec![Variant {
            name: "bug".into(),
            kind: VariantKind::Bug,
            description: "as recorded".into(),
            env: BTreeMap::new(),
            skip: Vec::new(),
            reorder: Vec::new(),
            patches: BTreeMap::new(),
            patch_labels: BTreeMap::new(),
            expect,
        }],
    };
    let summary = Summary {
        steps_before,
        steps: scenario.steps.len(),
        quantum: quantum.max(pic.devs[0].total / 512),
        coalesced: quantum != MIN_QUANTUM,
        fingerprints: fps,
        truncated: src.truncated,
        physical: phys,
    };
    Ok((scenario, summary))
}

/// Memory the samples missed at the failure: the out-of-memory line states less free memory
/// (`stated`) on scenario device `dev` than the last reading before it showed (`seen`), as
/// where a holder came and went between two readings. Modelled as one more neighbour, held
/// from just before the failed allocation on, so the replay fails in the state the line
/// reports (issue 37 item 7).
struct Missed {
    dev: usize,
    stated: u64,
    seen: u64,
}

impl Missed {
    /// Bytes the samples missed.
    fn bytes(&self) -> u64 {
        self.seen.saturating_sub(self.stated)
    }

    /// The neighbour's size: what was missed less the context its replay makes (at least
    /// 1 MiB).
    fn size(&self, context: u64) -> u64 {
        self.bytes().saturating_sub(context).max(MIB)
    }

    /// What the neighbour holds in the replay, its context included.
    fn modelled(&self, context: u64) -> u64 {
        self.size(context).saturating_add(context)
    }

    fn neighbour(&self, context: u64) -> Neighbour {
        Neighbour {
            label: format!(
                "memory on GPU {} the samples missed (the out-of-memory line says {} free)",
                self.dev,
                format_bytes(self.stated)
            ),
            device: self.dev as u32,
            size: size_text(self.size(context)),
            from: Some("failed-alloc".into()),
            until: None,
        }
    }

    /// The description's sentence (after a full stop).
    fn sentence(&self, context: u64) -> String {
        format!(
            " The out-of-memory line says GPU {} had {} free where the last sample before it \
             saw {}: the {} the samples missed is modelled as one more holder, a neighbour of \
             {} (its context included) started just before the failed allocation, so the \
             replay fails in the state the line reports.",
            self.dev,
            format_bytes(self.stated),
            format_bytes(self.seen),
            format_bytes(self.bytes()),
            format_bytes(self.modelled(context)),
        )
    }
}

/// The other processes as the scenario's neighbours, numbered in order (PIDs are the
/// recording machine's); each makes a context of its own in the replay. Each holds memory
/// while the recording showed it: started before the first step at or after it appeared
/// (`from`), stopped after the last step before it was gone (`until`); one that held
/// nothing while the job's steps ran is left out.
fn neighbours(pic: &Picture, steps: &[Step], times: &[f64]) -> Vec<Neighbour> {
    let mut k = 0;
    let mut out = Vec::new();
    for o in &pic.others {
        let first = times.partition_point(|t| *t < o.presence.start);
        let last = match o.presence.gone {
            Some(g) => times.partition_point(|t| *t < g),
            None => times.len(),
        };
        if first >= last {
            continue;
        }
        let label = match o.processes {
            None => format!(
                "memory in use on GPU {} before the job, no process listed",
                o.device
            ),
            Some(1) => {
                k += 1;
                format!("another process on GPU {} ({k})", o.device)
            }
            Some(n) => format!("{n} other processes on GPU {} together", o.device),
        };
        out.push(Neighbour {
            label,
            device: o.device,
            size: size_text(o.peak.saturating_sub(pic.context).max(MIB)),
            from: (first > 0).then(|| steps[first].id.clone()),
            until: (last < steps.len()).then(|| steps[last - 1].id.clone()),
        });
    }
    out
}

/// The scenario device the OOM happened on: the one the error names, else the job's device
/// with the least free memory at that moment.
fn oom_device(e: &SourceError, pic: &Picture) -> usize {
    if let Some(i) = e
        .device
        .and_then(|d| pic.devs.iter().position(|x| x.phys == d))
    {
        return i;
    }
    (0..pic.devs.len())
        .min_by_key(|&i| {
            let d = &pic.devs[i];
            d.total
                .saturating_sub(level_at(&d.samples, e.t_ms).unwrap_or(0))
        })
        .unwrap_or(0)
}

/// The fingerprint the bug variant must fire: the most severe one a replay can show
/// (`held-after-exit` needs a driver that keeps memory after the worker is gone; plain
/// `out-of-memory` only when nothing more specific was raised).
pub fn primary_fingerprint(findings: &[String]) -> Option<String> {
    use crate::diagnose::ids;
    let replayable: Vec<&String> = findings
        .iter()
        .filter(|f| f.as_str() != ids::HELD_AFTER_EXIT)
        .collect();
    replayable
        .iter()
        .find(|f| f.as_str() != ids::OUT_OF_MEMORY)
        .or_else(|| replayable.first())
        .map(|f| f.to_string())
}

/// `not-released`: after the last release marker, each GPU still holds at least half of
/// what the recording showed there.
fn residual(
    src: &Source,
    pic: &Picture,
    marker_ids: &BTreeMap<usize, String>,
    t_end: f64,
) -> Option<Expectation> {
    let mut markers: Vec<(f64, MarkerKind)> = phase_markers(src, t_end)
        .into_iter()
        .map(|(t, m)| (t, m.kind.clone()))
        .collect();
    markers.sort_by(|a, b| a.0.total_cmp(&b.0));
    let skip = markers.len().saturating_sub(MAX_MARKER_STEPS);
    let (i, (t, _)) = markers
        .iter()
        .enumerate()
        .skip(skip)
        .rfind(|(_, m)| m.1 == MarkerKind::Release)?;
    let id = marker_ids.get(&(i - skip))?.clone();
    // The settled level: the last reading before the next marker or the end, less the time
    // a teardown may already show in the samples.
    let next = markers.get(i + 1).map_or(t_end, |m| m.0).min(t_end);
    let settled = next - MARKER_LAG_MS - src.period_ms.max(0.0);
    let mut devices = BTreeSet::new();
    let mut least = u64::MAX;
    for (k, series) in pic.job.iter().enumerate() {
        let after = series
            .iter()
            .filter(|p| p.0 >= *t && p.0 < next)
            .take_while(|p| p.0 <= settled.max(*t))
            .last()
            .map_or(0, |p| p.1);
        if after >= GIB {
            devices.insert(k as u32);
            least = least.min(after);
        }
    }
    (!devices.is_empty()).then(|| Expectation::Residual {
        after: id,
        devices: devices.into_iter().collect(),
        min: Some(size_text(least / 2)),
        max: None,
        spread: None,
    })
}
