//! Allocation sites: which Python frame a block or history entry belongs to, the sites
//! holding the most live memory at the moment, and live memory per site over the recorded
//! history (its growth, and the series the HTML timeline draws).
//!
//! A site is the innermost Python frame outside torch itself (as pytorch.org/memory_viz's
//! `_frame_filter` hides the allocator's own frames): user code, not `torch/nn/functional.py`.
//! PyTorch's default stacks interleave C++ and Python frames (`context="all"`): a frame of a
//! shared object or an executable (`libpython3.11.so.1.0`, `libtorch_cuda.so`) is never a
//! site while the stack holds a Python line.

use super::explanation::{History, Series, Site, SiteGrowth};
use super::snapshot::{Action, BlockState, Snapshot, TraceEntry};
use std::collections::HashMap;
use std::sync::Arc;

/// Label of blocks with no Python stack (recording off, or C++-only allocations).
pub const NO_STACK: &str = "<no Python stack recorded>";
/// Points of each timeline series.
const POINTS: usize = 200;

fn is_torch_internal(filename: &str) -> bool {
    filename.contains("/torch/")
        || filename.starts_with("torch/")
        || filename.starts_with('<')
        || filename == "??"
}

/// A frame of native code: a shared object (`.so`, `.so.N`) or any file that is not Python
/// source (an executable, `libc.so.6`).
fn is_native(filename: &str) -> bool {
    let base = filename.rsplit('/').next().unwrap_or(filename);
    base.ends_with(".so")
        || base.contains(".so.")
        || (filename.starts_with('/') && !base.ends_with(".py"))
}

/// What a frame's strings say, worked out once per distinct string (frames share them: one
/// long file name in a thousand frames is read once, issue 39 item 1).
#[derive(Default)]
struct Strings {
    /// By the address of the shared string: (user Python, neither torch's nor native,
    /// native, its text as shown).
    by_ptr: HashMap<usize, (bool, bool, bool, Arc<str>)>,
}

/// The longest piece of a frame shown (a file name or a function name).
const MAX_PIECE: usize = 300;

impl Strings {
    fn of(&mut self, s: &Arc<str>) -> &(bool, bool, bool, Arc<str>) {
        self.by_ptr
            .entry(Arc::as_ptr(s) as *const u8 as usize)
            .or_insert_with(|| {
                let shown: String = crate::redact::redact_text(&crate::term::one_line(s))
                    .chars()
                    .take(MAX_PIECE)
                    .collect();
                (
                    s.ends_with(".py") && !is_torch_internal(s),
                    !is_torch_internal(s) && !is_native(s),
                    is_native(s),
                    Arc::from(shown),
                )
            })
    }
}

/// Where a stack's site is: its innermost user Python frame, else its innermost frame that is
/// neither torch's nor native, else its first.
fn site_frame(s: &Snapshot, strings: &mut Strings, stack: &[u32]) -> usize {
    let mut kind = |f: &u32| {
        s.frames
            .get(*f as usize)
            .map(|fr| {
                let k = strings.of(&fr.filename);
                (k.0, k.1)
            })
            .unwrap_or((false, false))
    };
    stack
        .iter()
        .position(|f| kind(f).0)
        .or_else(|| stack.iter().position(|f| kind(f).1))
        .unwrap_or(0)
}

fn frame_label(s: &Snapshot, strings: &mut Strings, f: u32) -> String {
    match s.frames.get(f as usize) {
        Some(fr) => {
            let name = strings.of(&fr.name).3.clone();
            let file = strings.of(&fr.filename).3.clone();
            format!("{name} ({file}:{})", fr.line)
                .chars()
                .take(MAX_PIECE)
                .collect()
        }
        None => NO_STACK.to_string(),
    }
}

/// Site labels of every interned stack: `site_of[stack]` indexes `labels`.
pub struct Sites {
    pub labels: Vec<String>,
    site_of: Vec<u32>,
    callers: Vec<Vec<String>>,
}

impl Sites {
    pub fn new(s: &Snapshot) -> Sites {
        let mut strings = Strings::default();
        let mut labels = vec![NO_STACK.to_string()];
        let mut callers = vec![Vec::new()];
        let mut by_label: HashMap<String, u32> = HashMap::new();
        by_label.insert(NO_STACK.to_string(), 0);
        let mut site_of = Vec::with_capacity(s.stacks.len());
        for stack in &s.stacks {
            let pick = site_frame(s, &mut strings, stack);
            let label = match stack.get(pick) {
                Some(f) => frame_label(s, &mut strings, *f),
                None => NO_STACK.to_string(),
            };
            let id = match by_label.get(&label) {
                Some(id) => *id,
                None => {
                    let mut up = Vec::new();
                    for f in stack.iter().skip(pick + 1) {
                        if up.len() == 4 {
                            break;
                        }
                        let native = s
                            .frames
                            .get(*f as usize)
                            .is_some_and(|fr| strings.of(&fr.filename).2);
                        if !native {
                            up.push(frame_label(s, &mut strings, *f));
                        }
                    }
                    callers.push(up);
                    labels.push(label.clone());
                    let id = (labels.len() - 1) as u32;
                    by_label.insert(label, id);
                    id
                }
            };
            site_of.push(id);
        }
        Sites {
            labels,
            site_of,
            callers,
        }
    }

    pub fn of(&self, stack: Option<u32>) -> u32 {
        stack
            .and_then(|st| self.site_of.get(st as usize).copied())
            .unwrap_or(0)
    }
}

/// The sites holding the most allocated bytes on `device`, largest first (at most `n`).
pub fn top_sites(s: &Snapshot, sites: &Sites, device: u32, n: usize) -> Vec<Site> {
    let mut by: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut total = 0u64;
    for seg in s.segments.iter().filter(|g| g.device == device) {
        for b in seg
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::Allocated)
        {
            let e = by.entry(sites.of(b.stack)).or_default();
            e.0 = e.0.saturating_add(b.size);
            e.1 = e.1.saturating_add(1);
            total = total.saturating_add(b.size);
        }
    }
    let mut v: Vec<(u32, (u64, u64))> = by.into_iter().collect();
    v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    v.into_iter()
        .take(n)
        .map(|(id, (bytes, blocks))| Site {
            site: sites.labels[id as usize].clone(),
            bytes,
            blocks,
            share: if total == 0 {
                0.0
            } else {
                bytes as f64 / total as f64
            },
            callers: sites.callers[id as usize].clone(),
        })
        .collect()
}

/// Live bytes per site through a device's history: allocations add, completed frees of
/// allocations seen in the window subtract (frees of older ones are not known and are
/// skipped: the ring buffer may have dropped their `alloc`).
struct Replay<'a> {
    sites: &'a Sites,
    live: HashMap<u64, (u64, u32), foldhash::fast::RandomState>,
    per_site: Vec<u64>,
    total: u64,
}

impl Replay<'_> {
    fn step(&mut self, e: &TraceEntry) {
        match e.action {
            Action::Alloc => {
                let site = self.sites.of(e.stack());
                if let Some((old, old_site)) = self.live.insert(e.addr, (e.size, site)) {
                    self.per_site[old_site as usize] =
                        self.per_site[old_site as usize].saturating_sub(old);
                    self.total = self.total.saturating_sub(old);
                }
                self.per_site[site as usize] = self.per_site[site as usize].saturating_add(e.size);
                self.total = self.total.saturating_add(e.size);
            }
            Action::FreeCompleted => {
                if let Some((size, site)) = self.live.remove(&e.addr) {
                    self.per_site[site as usize] =
                        self.per_site[site as usize].saturating_sub(size);
                    self.total = self.total.saturating_sub(size);
                }
            }
            _ => {}
        }
    }
}

/// Fewest allocations in a history for its growth to be judged.
const MIN_ALLOCS: usize = 40;

/// The history of one device: troughs in four parts, whether it grew, the sites that grew,
/// and the timeline of `all` and of `watch` (site labels).
pub fn history(
    trace: &[TraceEntry],
    sites: &Sites,
    watch: &[String],
) -> (History, Vec<SiteGrowth>) {
    let mut h = History {
        entries: trace.len(),
        ..History::default()
    };
    if let (Some(a), Some(b)) = (
        trace.first().and_then(|e| e.time_us()),
        trace.last().and_then(|e| e.time_us()),
    ) {
        h.span_us = Some((a, b));
    }
    let new_replay = || Replay {
        sites,
        live: HashMap::default(),
        per_site: vec![0; sites.labels.len()],
        total: 0,
    };
    // Pass 1: the four troughs and where the first one is.
    let mut r = new_replay();
    let quarter = trace.len().div_ceil(4).max(1);
    let mut troughs = [u64::MAX; 4];
    let mut first_trough_at = 0usize;
    for (i, e) in trace.iter().enumerate() {
        r.step(e);
        let q = (i / quarter).min(3);
        if r.total < troughs[q] {
            troughs[q] = r.total;
            if q == 0 {
                first_trough_at = i;
            }
        }
    }
    let peak_end = r.total;
    let allocs = trace.iter().filter(|e| e.action == Action::Alloc).count();
    let troughs: Vec<u64> = troughs.iter().copied().filter(|t| *t != u64::MAX).collect();
    let rise = match (troughs.first(), troughs.last()) {
        (Some(a), Some(b)) => b.saturating_sub(*a),
        _ => 0,
    };
    h.growing = allocs >= MIN_ALLOCS
        && troughs.len() == 4
        && troughs.windows(2).all(|w| w[1] > w[0])
        && rise >= (1 << 20)
        && rise * 10 >= peak_end.max(1);
    h.troughs = troughs;

    // Pass 2: per-site live at the first trough and at the end; the timeline samples.
    let watch_ids: Vec<Option<usize>> = watch
        .iter()
        .map(|w| sites.labels.iter().position(|l| l == w))
        .collect();
    let mut series: Vec<Vec<u64>> = vec![Vec::new(); 1 + watch.len()];
    let step = trace.len().div_ceil(POINTS).max(1);
    let mut r = new_replay();
    let mut at_trough = vec![0u64; sites.labels.len()];
    for (i, e) in trace.iter().enumerate() {
        r.step(e);
        if i == first_trough_at {
            at_trough.clone_from(&r.per_site);
        }
        if i % step == step - 1 || i + 1 == trace.len() {
            h.x.push(i as u64);
            series[0].push(r.total);
            for (k, id) in watch_ids.iter().enumerate() {
                series[k + 1].push(id.map_or(0, |id| r.per_site[id]));
            }
        }
    }
    h.series = std::iter::once("all".to_string())
        .chain(watch.iter().cloned())
        .zip(series)
        .map(|(name, bytes)| Series { name, bytes })
        .collect();
    let mut grew: Vec<SiteGrowth> = r
        .per_site
        .iter()
        .enumerate()
        .filter(|(id, end)| **end > at_trough[*id])
        .map(|(id, end)| SiteGrowth {
            site: sites.labels[id].clone(),
            from: at_trough[id],
            to: *end,
        })
        .collect();
    grew.sort_by(|a, b| {
        (b.to.saturating_sub(b.from))
            .cmp(&(a.to.saturating_sub(a.from)))
            .then(a.site.cmp(&b.site))
    });
    grew.truncate(5);
    (h, grew)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::snapshot::Frame;

    fn frame(name: &str, filename: &str, line: i64) -> Frame {
        Frame {
            filename: filename.into(),
            line,
            name: name.into(),
        }
    }

    /// A stack as PyTorch 2.15 records it by default (`context="all"`): C++ frames of torch,
    /// then libpython's, then the user's line, then more of libpython and libc.
    #[test]
    fn a_site_is_the_users_python_line_never_a_native_frame() {
        let lib = "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so";
        let py = "/usr/lib/libpython3.11.so.1.0";
        let s = Snapshot {
            frames: vec![
                frame("at::detail::empty_cuda", lib, 16775566),
                frame("??", py, 1731810),
                frame("_PyObject_MakeTpCall", py, 1410588),
                frame("<module>", "/work/train.py", 13),
                frame("_PyEval_EvalFrameDefault", py, 1038786),
                frame("main", "/work/run.py", 40),
                frame(
                    "__libc_start_main",
                    "/lib/x86_64-linux-gnu/libc.so.6",
                    160516,
                ),
            ],
            stacks: vec![(0..7).collect::<Vec<u32>>().into_boxed_slice()],
            ..Snapshot::default()
        };
        let sites = Sites::new(&s);
        assert_eq!(
            sites.labels[sites.of(Some(0)) as usize],
            "<module> (/work/train.py:13)"
        );
        // Its callers skip the interpreter's own frames.
        assert_eq!(
            sites.callers[sites.of(Some(0)) as usize],
            vec!["main (/work/run.py:40)"]
        );
    }

    #[test]
    fn a_stack_of_native_frames_only_falls_back_to_its_first() {
        let s = Snapshot {
            frames: vec![frame("??", "/usr/lib/libc10_cuda.so", 1)],
            stacks: vec![vec![0u32].into_boxed_slice()],
            ..Snapshot::default()
        };
        let sites = Sites::new(&s);
        assert_eq!(
            sites.labels[sites.of(Some(0)) as usize],
            "?? (/usr/lib/libc10_cuda.so:1)"
        );
    }
}
