//! The typed PyTorch memory snapshot, read from a decoded pickle ([`super::pickle::Doc`]).
//!
//! The format is PyTorch's `torch.cuda.memory._snapshot()` dictionary, which
//! `torch.cuda.memory._dump_snapshot` pickles (torch/cuda/memory.py, the `Snapshot`,
//! `Segment`, `Block`, `Frame` and `TraceEntry` TypedDicts in `_snapshot`'s docstring,
//! pytorch/pytorch@00b65a04; the keys are the `py::str` names of
//! torch/csrc/cuda/memory_snapshot.cpp and Module.cpp). Fields read, and where they come from:
//! - snapshot: `segments`, `device_traces` (one list per device), `allocator_settings`
//!   (newer releases; `expandable_segments` in it).
//! - segment: `device`, `address`, `total_size`, `stream`, `segment_type` (`large`/`small`),
//!   `segment_pool_id` (a private pool such as a CUDA graph's when not `(0, 0)`),
//!   `is_expandable`, `blocks`.
//! - block: `address`, `size`, `requested_size`, `state` (`active_allocated`,
//!   `active_pending_free` / `active_awaiting_free`, `inactive`), `frames`; legacy snapshots
//!   (PyTorch 2.0) carry `history: [{addr, real_size, frames}]` instead of
//!   `frames`/`requested_size`/`address`, read as torch/cuda/_memory_viz.py's
//!   `_block_extra_legacy` reads them (block addresses then follow from the segment's).
//! - frame: `filename`, `line`, `name`.
//! - trace entry: `action` (`alloc`, `free_requested`, `free_completed`, `segment_alloc`,
//!   `segment_free`, `segment_map`, `segment_unmap`, `oom`, `snapshot`), `addr`, `size`,
//!   `stream`, `frames`, `device_free` (only on `oom`), `time_us` (newer releases).
//!
//! Missing optional fields take PyTorch's defaults; a missing required one is an error
//! naming the segment or entry. Frames are interned (PyTorch shares frame dicts between
//! tracebacks, so the pickle memoizes them; so does this table), and so are their strings
//! (one file name shared by many frames is held once) and stacks (one per distinct list).
//!
//! Bounded (issue 39 item 1): what the file shares by reference is shared here (strings,
//! frames, stacks), and the records that cannot be shared (segments, blocks, history
//! entries) are counted against [`record_budget`], one per dict in the file: a file that
//! repeats one segment or block by memo reference is refused before it is expanded.

use super::pickle::{Appends, Doc, Packed, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum FormatError {
    /// A field missing or of the wrong type.
    #[error("{0} (is this a file written by torch.cuda.memory._dump_snapshot?)")]
    Field(String),
    /// Past [`record_budget`].
    #[error("{0}")]
    Budget(String),
    /// History entries were converted as they were read and the file wrote to one of them
    /// afterwards ([`Doc::rewritten`]): read it whole instead ([`from_doc`]).
    #[error(
        "the pickle writes to a history entry after putting it in `device_traces`; read it whole"
    )]
    Rewritten,
}

/// One frame. Its strings are shared: frames naming one file hold one copy of its name.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub filename: Arc<str>,
    pub line: i64,
    pub name: Arc<str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    Allocated,
    PendingFree,
    Inactive,
}

#[derive(Debug, Clone)]
pub struct Block {
    pub address: u64,
    pub size: u64,
    pub requested: u64,
    pub state: BlockState,
    /// Index into [`Snapshot::stacks`].
    pub stack: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct Segment {
    pub device: u32,
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    pub large: bool,
    /// `(0, 0)`: the default pool; anything else a private pool (CUDA graphs, `MemPool`).
    pub pool: (i64, i64),
    pub expandable: bool,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    Oom,
    Other,
}

/// One history entry (48 bytes: a 1 GB snapshot holds millions; absent fields are kept as
/// sentinels behind the accessors).
#[derive(Debug, Clone)]
pub struct TraceEntry {
    pub action: Action,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    device_free: u64,
    time_us: i64,
    stack: u32,
}

impl TraceEntry {
    /// Free memory CUDA reported (`oom` entries).
    pub fn device_free(&self) -> Option<u64> {
        (self.device_free != u64::MAX).then_some(self.device_free)
    }
    pub fn time_us(&self) -> Option<i64> {
        (self.time_us != i64::MIN).then_some(self.time_us)
    }
    /// Index into [`Snapshot::stacks`].
    pub fn stack(&self) -> Option<u32> {
        (self.stack != u32::MAX).then_some(self.stack)
    }
}

/// Which generation of the format the file is (for the report and the fix's wording).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FieldSet {
    /// Blocks with `history` (PyTorch 2.0).
    Legacy,
    /// Blocks with `frames`, `requested_size`, `address` (PyTorch 2.1 and later).
    Current,
}

#[derive(Debug, Default)]
pub struct Snapshot {
    pub segments: Vec<Segment>,
    /// `device_traces[d]`: the recorded history of device `d`, oldest first.
    pub traces: Vec<Vec<TraceEntry>>,
    pub frames: Vec<Frame>,
    pub stacks: Vec<Box<[u32]>>,
    /// `allocator_settings["expandable_segments"]`, when the file says.
    pub expandable_setting: Option<bool>,
    pub field_set: Option<FieldSet>,
}

/// Records (segments, blocks, history entries) a typed snapshot may hold beyond one per
/// dict in the file: room for a hand-made file that repeats a few by reference.
pub const RECORD_SLACK: u64 = 1 << 16;

/// The records a snapshot read from `doc` may hold: one per dict in the file (each segment,
/// block and history entry PyTorch writes is a dict of its own) plus [`RECORD_SLACK`].
pub fn record_budget(doc: &Doc) -> u64 {
    doc.dicts() as u64 + RECORD_SLACK
}

/// What outlives one [`Builder`]: the interning tables and the snapshot being built.
#[derive(Default)]
struct State {
    frame_by_dict: HashMap<u32, u32>,
    /// By the addresses of the interned strings (equal text, equal address) and the line.
    frame_by_text: HashMap<(usize, i64, usize), u32>,
    /// Strings by arena index, and by text (each distinct string hashed once).
    str_by_index: HashMap<u32, Arc<str>>,
    str_by_text: HashSet<Arc<str>>,
    /// Frames lists already seen, by arena index: one entry per distinct list in the file,
    /// so a list shared by many blocks is read once.
    stack_by_list: HashMap<u32, u32>,
    stack_by_frames: HashMap<Box<[u32]>, u32>,
    /// Records built so far, and the most allowed ([`record_budget`]).
    records: u64,
    budget: u64,
    out: Snapshot,
}

/// The refusal of a file holding more records than `budget` ([`record_budget`]).
fn over_budget(budget: u64) -> FormatError {
    FormatError::Budget(format!(
        "the file repeats segments, blocks or history entries by reference: more than \
         {} records from {} dicts, over the budget of one per dict plus {RECORD_SLACK} \
         (a PyTorch snapshot never shares them); refused as a precaution, see \
         docs/explain.md \"Safety\"",
        budget,
        budget.saturating_sub(RECORD_SLACK)
    ))
}

impl State {
    /// Count `n` more records, refusing past the budget.
    fn records(&mut self, n: u64) -> Result<(), FormatError> {
        self.records = self.records.saturating_add(n);
        if self.records > self.budget {
            return Err(over_budget(self.budget));
        }
        Ok(())
    }

    /// The shared copy of `text`.
    fn string_text(&mut self, text: &str) -> Arc<str> {
        match self.str_by_text.get(text) {
            Some(s) => s.clone(),
            None => {
                let s: Arc<str> = Arc::from(text);
                self.str_by_text.insert(s.clone());
                s
            }
        }
    }

    /// The shared copy of the string at arena index `i`.
    fn string(&mut self, doc: &Doc, v: Value) -> Option<Arc<str>> {
        let Value::Str(i) = v else {
            return None;
        };
        if let Some(s) = self.str_by_index.get(&i) {
            return Some(s.clone());
        }
        let s = self.string_text(doc.str_of(v)?);
        self.str_by_index.insert(i, s.clone());
        Some(s)
    }
}

struct Builder<'a> {
    doc: &'a Doc,
    st: &'a mut State,
}

fn int(v: Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(i),
        Value::Bool(b) => Some(b as i64),
        _ => None,
    }
}

fn uint(v: Value) -> Option<u64> {
    // Addresses and stream handles are unsigned in C++ but fit i64 in practice; a negative
    // one (a stream pointer with the top bit set) keeps its bit pattern.
    int(v).map(|i| i as u64)
}

/// A byte count: never negative (a negative one would read as 2^64 − 1, issue 39 item 5).
enum Size {
    Missing,
    Negative(i64),
    Bytes(u64),
}

fn size_of(v: Option<Value>) -> Size {
    match v.and_then(int) {
        None => Size::Missing,
        Some(i) => u64::try_from(i).map_or(Size::Negative(i), Size::Bytes),
    }
}

impl<'a> Builder<'a> {
    fn field(&self, d: Value, key: &'static str) -> Option<Value> {
        self.doc.get(d, key)
    }

    fn req_u64(&self, d: Value, key: &'static str, what: &str) -> Result<u64, FormatError> {
        self.field(d, key)
            .and_then(uint)
            .ok_or_else(|| FormatError::Field(format!("{what} has no integer `{key}`")))
    }

    fn opt_u64(&self, d: Value, key: &'static str) -> Option<u64> {
        self.field(d, key).and_then(uint)
    }

    /// A required byte count of `what`: missing or negative is an error naming it.
    fn req_size(&self, d: Value, key: &'static str, what: &str) -> Result<u64, FormatError> {
        match size_of(self.field(d, key)) {
            Size::Bytes(b) => Ok(b),
            Size::Missing => Err(FormatError::Field(format!("{what} has no integer `{key}`"))),
            Size::Negative(i) => Err(FormatError::Field(format!(
                "{what} has a negative `{key}` ({i})"
            ))),
        }
    }

    /// An optional byte count: a negative one is left out, as if absent.
    fn opt_size(&self, d: Value, key: &'static str) -> Option<u64> {
        match size_of(self.field(d, key)) {
            Size::Bytes(b) => Some(b),
            _ => None,
        }
    }

    fn frame(&mut self, d: Value) -> Option<u32> {
        let Value::Dict(di) = d else {
            return None;
        };
        if let Some(id) = self.st.frame_by_dict.get(&di) {
            return Some(*id);
        }
        let doc = self.doc;
        let filename = self.st.string(doc, self.field(d, "filename")?)?;
        let name = match self.field(d, "name").and_then(|v| self.st.string(doc, v)) {
            Some(n) => n,
            None => self.st.string_text("??"),
        };
        let line = self.field(d, "line").and_then(int).unwrap_or(0);
        let key = (
            Arc::as_ptr(&filename) as *const u8 as usize,
            line,
            Arc::as_ptr(&name) as *const u8 as usize,
        );
        let id = match self.st.frame_by_text.get(&key) {
            Some(id) => *id,
            None => {
                let id = self.st.out.frames.len() as u32;
                self.st.out.frames.push(Frame {
                    filename,
                    line,
                    name,
                });
                self.st.frame_by_text.insert(key, id);
                id
            }
        };
        self.st.frame_by_dict.insert(di, id);
        Some(id)
    }

    /// The interned stack of a `frames` list (innermost first, as PyTorch lists them).
    fn stack(&mut self, frames: Option<Value>) -> Option<u32> {
        let list = frames?;
        let Value::List(li) = list else {
            return None;
        };
        if let Some(id) = self.st.stack_by_list.get(&li) {
            return Some(*id);
        }
        let doc = self.doc;
        let id = self.stack_items(doc.packed_seq(list)?)?;
        self.st.stack_by_list.insert(li, id);
        Some(id)
    }

    /// The interned stack of the items of a `frames` list.
    fn stack_items(&mut self, items: &[Packed]) -> Option<u32> {
        if items.is_empty() {
            return None;
        }
        let doc = self.doc;
        let ids: Box<[u32]> = items
            .iter()
            .filter_map(|f| self.frame(doc.unpack(*f)))
            .collect::<Vec<_>>()
            .into();
        let id = match self.st.stack_by_frames.get(&ids) {
            Some(id) => *id,
            None => {
                let id = self.st.out.stacks.len() as u32;
                self.st.out.stacks.push(ids.clone());
                self.st.stack_by_frames.insert(ids, id);
                id
            }
        };
        Some(id)
    }

    fn block(&mut self, b: Value, at: u64, seg: usize, i: usize) -> Result<Block, FormatError> {
        let what = || format!("segment {seg} block {i}");
        let size = self.req_size(b, "size", &what())?;
        let state = match self.field(b, "state").and_then(|v| self.doc.str_of(v)) {
            Some("active_allocated") => BlockState::Allocated,
            Some("active_pending_free") | Some("active_awaiting_free") => BlockState::PendingFree,
            Some("inactive") => BlockState::Inactive,
            Some(other) => {
                return Err(FormatError::Field(format!(
                    "{} has an unknown state `{}`",
                    what(),
                    crate::term::one_line(other)
                )))
            }
            None => return Err(FormatError::Field(format!("{} has no `state`", what()))),
        };
        let (requested, stack) = if let Some(frames) = self.field(b, "frames") {
            let requested = self.opt_size(b, "requested_size").unwrap_or(size);
            self.st.out.field_set.get_or_insert(FieldSet::Current);
            (requested, self.stack(Some(frames)))
        } else if let Some(h) = self
            .field(b, "history")
            .and_then(|h| self.doc.seq_of(h)?.next())
        {
            // torch/cuda/_memory_viz.py `_block_extra_legacy`: history[0] holds the stack and
            // the size asked for.
            self.st.out.field_set.get_or_insert(FieldSet::Legacy);
            let requested = self.opt_size(h, "real_size").unwrap_or(size);
            let frames = self.field(h, "frames");
            (requested, self.stack(frames))
        } else {
            (self.opt_size(b, "requested_size").unwrap_or(size), None)
        };
        Ok(Block {
            address: self.opt_u64(b, "address").unwrap_or(at),
            size,
            requested,
            state: if state == BlockState::Allocated && size == 0 {
                BlockState::Inactive
            } else {
                state
            },
            stack,
        })
    }

    fn segment(&mut self, s: Value, n: usize) -> Result<Segment, FormatError> {
        let what = format!("segment {n}");
        let address = self.req_u64(s, "address", &what)?;
        let total_size = self.req_size(s, "total_size", &what)?;
        let pool = self
            .field(s, "segment_pool_id")
            .and_then(|p| self.doc.seq_of(p).map(|x| x.collect::<Vec<_>>()))
            .and_then(|p| match p[..] {
                [a, b] => Some((int(a)?, int(b)?)),
                _ => None,
            })
            .unwrap_or((0, 0));
        let blocks_v = self
            .field(s, "blocks")
            .and_then(|b| self.doc.seq_of(b).map(|x| x.collect::<Vec<_>>()))
            .ok_or_else(|| FormatError::Field(format!("{what} has no `blocks` list")))?;
        self.st.records(1 + blocks_v.len() as u64)?;
        let mut blocks = Vec::with_capacity(blocks_v.len());
        let mut at = address;
        for (i, b) in blocks_v.into_iter().enumerate() {
            let block = self.block(b, at, n, i)?;
            at = block.address.saturating_add(block.size);
            blocks.push(block);
        }
        Ok(Segment {
            device: match self.field(s, "device").and_then(int) {
                None => 0,
                Some(d) => u32::try_from(d).map_err(|_| {
                    FormatError::Field(format!("{what} has device {d} (not a device index)"))
                })?,
            },
            address,
            total_size,
            stream: self.opt_u64(s, "stream").unwrap_or(0),
            large: self
                .field(s, "segment_type")
                .and_then(|v| self.doc.str_of(v))
                .is_none_or(|t| t != "small"),
            pool,
            expandable: self
                .field(s, "is_expandable")
                .is_some_and(|v| v == Value::Bool(true)),
            blocks,
        })
    }

    fn entry(&mut self, e: Value, d: usize, i: usize) -> Result<TraceEntry, FormatError> {
        let (mut entry, frames) = entry_fields(self.doc, e).ok_or_else(|| no_action(d, i))?;
        entry.stack = self.stack(frames).unwrap_or(u32::MAX);
        Ok(entry)
    }
}

fn no_action(d: usize, i: usize) -> FormatError {
    FormatError::Field(format!("device_traces[{d}][{i}] has no `action`"))
}

/// The keys of a history entry read, in [`entry_fields`]' order.
const ENTRY_KEYS: [&str; 7] = [
    "action",
    "addr",
    "size",
    "stream",
    "device_free",
    "time_us",
    "frames",
];

/// A history entry's fields but its stack, and its `frames`; `None` when it has no `action`.
/// A small dict (all PyTorch writes) is read in one pass over its entries.
fn entry_fields(doc: &Doc, e: Value) -> Option<(TraceEntry, Option<Value>)> {
    let mut f: [Option<Value>; 7] = [None; 7];
    match doc.small_map(e) {
        Some(map) => {
            for (k, v) in map {
                let Some(key) = doc.str_of(doc.unpack(*k)) else {
                    continue;
                };
                if let Some(at) = ENTRY_KEYS.iter().position(|x| *x == key) {
                    f[at] = Some(doc.unpack(*v));
                }
            }
        }
        None => {
            for (at, key) in ENTRY_KEYS.iter().enumerate() {
                f[at] = doc.get(e, key);
            }
        }
    }
    let action = match f[0].and_then(|v| doc.str_of(v)) {
        Some("alloc") => Action::Alloc,
        Some("free_requested") => Action::FreeRequested,
        Some("free_completed") => Action::FreeCompleted,
        Some("segment_alloc") | Some("segment_map") => Action::SegmentAlloc,
        Some("segment_free") | Some("segment_unmap") => Action::SegmentFree,
        Some("oom") => Action::Oom,
        Some(_) => Action::Other,
        None => return None,
    };
    let sz = |v: Option<Value>| match size_of(v) {
        Size::Bytes(b) => Some(b),
        _ => None,
    };
    let entry = TraceEntry {
        action,
        addr: f[1].and_then(uint).unwrap_or(0),
        size: sz(f[2]).unwrap_or(0),
        stream: f[3].and_then(uint).unwrap_or(0),
        device_free: sz(f[4]).unwrap_or(u64::MAX),
        time_us: f[5].and_then(int).unwrap_or(i64::MIN),
        stack: u32::MAX,
    };
    Some((entry, f[6]))
}

/// One `device_traces[d]` list whose entries were converted as they were read.
#[derive(Default)]
struct StreamedList {
    /// Converted entries; their `stack` is their frames list, made [`Doc::share`]d
    /// (`u32::MAX`: none).
    entries: Vec<TraceEntry>,
    /// Entries appended (with those not converted after an error).
    count: u64,
    /// The first entry without an `action` (index among the streamed ones).
    error_at: Option<u64>,
}

/// History entries converted while the pickle is read ([`Appends`]): the items appended to a
/// list that sits right above `"device_traces"`'s list on the stack (the place Python's
/// pickler writes each device's history) become [`TraceEntry`]s at once, their dicts are
/// released and their frames lists held once per distinct content ([`Doc::share`]), so the
/// entries' dicts are never all in memory (a 1 GB snapshot is mostly history). What
/// [`from_doc_streamed`] makes of it is what [`from_doc`] makes of the whole document, the
/// entries' order and stacks included.
///
/// Bounded like the rest: the entries taken may not pass one per dict read so far plus
/// [`RECORD_SLACK`] (a file that repeats one entry by reference is refused, see
/// [`record_budget`]).
#[derive(Default)]
pub struct TraceStream {
    lists: HashMap<u32, StreamedList>,
    taken: u64,
    /// The budget the entries taken went past, when they did.
    over: Option<u64>,
}

/// Whether `under` (the stack below a list) is `"device_traces"` and its list.
fn in_device_traces(doc: &Doc, under: &[Packed]) -> bool {
    let n = under.len();
    n >= 2
        && matches!(doc.unpack(under[n - 1]), Value::List(_))
        && doc.str_of(doc.unpack(under[n - 2])) == Some("device_traces")
}

impl Appends for TraceStream {
    fn take(&mut self, doc: &mut Doc, list: u32, under: &[Packed], items: &[Packed]) -> bool {
        if !self.lists.contains_key(&list) && !in_device_traces(doc, under) {
            return false;
        }
        if self.over.is_some() {
            // Refused already (by `from_doc_streamed`): nothing more is kept.
            return true;
        }
        let budget = record_budget(doc);
        self.taken = self.taken.saturating_add(items.len() as u64);
        if self.taken > budget {
            self.over = Some(budget);
            self.lists.clear();
            return true;
        }
        let mut l = self.lists.remove(&list).unwrap_or_default();
        for p in items {
            let e = doc.unpack(*p);
            if l.error_at.is_none() {
                match entry_fields(doc, e) {
                    Some((mut entry, frames)) => {
                        // Its frames list, shared with the lists of the same content (the
                        // list may be a live block's too: it still reads the same). The entry
                        // keeps the list, not the content: a file may write to the list again
                        // later, and what it reads as is what the file leaves in it.
                        if let Some(Value::List(li)) = frames {
                            if doc.share(Value::List(li)).is_some() {
                                entry.stack = li;
                            }
                        }
                        l.entries.push(entry);
                    }
                    None => l.error_at = Some(l.count),
                }
            }
            l.count += 1;
            // Converted: its dict is not needed again (unless the file writes to it).
            doc.release(e);
        }
        self.lists.insert(list, l);
        true
    }
}

/// The snapshot in a decoded pickle. The history's entries are released from `doc` as they
/// are converted, so the two are not both whole in memory at once.
pub fn from_doc(doc: &mut Doc) -> Result<Snapshot, FormatError> {
    from_doc_streamed(doc, TraceStream::default())
}

/// The snapshot in a pickle decoded with `stream` taking the history's entries.
pub fn from_doc_streamed(doc: &mut Doc, mut stream: TraceStream) -> Result<Snapshot, FormatError> {
    if doc.rewritten() {
        return Err(FormatError::Rewritten);
    }
    let root = doc
        .root
        .ok_or_else(|| FormatError::Field("the pickle is empty".into()))?;
    // Very old releases dumped the bare list of segments.
    let (segments_v, traces_v) = match root {
        Value::Dict(_) => (
            doc.get(root, "segments")
                .ok_or_else(|| FormatError::Field("the pickle has no `segments`".into()))?,
            doc.get(root, "device_traces"),
        ),
        Value::List(_) => (root, None),
        _ => {
            return Err(FormatError::Field(
                "the pickle is not a dict of segments".into(),
            ))
        }
    };
    let mut st = State {
        budget: record_budget(doc),
        ..State::default()
    };
    {
        let mut b = Builder {
            doc: &*doc,
            st: &mut st,
        };
        let segs: Vec<Value> = doc
            .seq_of(segments_v)
            .ok_or_else(|| FormatError::Field("`segments` is not a list".into()))?
            .collect();
        b.st.out.segments.reserve_exact(segs.len());
        for (n, s) in segs.into_iter().enumerate() {
            let seg = b.segment(s, n)?;
            b.st.out.segments.push(seg);
        }
    }
    if let Some(budget) = stream.over {
        return Err(over_budget(budget));
    }
    // Each shared frames copy's stack, interned when first used (in the order of
    // `from_doc`'s walk: the same ids).
    let mut stacks: HashMap<u32, Option<u32>, foldhash::fast::RandomState> = HashMap::default();
    if let Some(t) = traces_v {
        let devices: Vec<Value> = doc
            .seq_of(t)
            .ok_or_else(|| FormatError::Field("`device_traces` is not a list".into()))?
            .collect();
        for (d, entries) in devices.into_iter().enumerate() {
            let streamed = match entries {
                Value::List(li) => stream.lists.remove(&li),
                _ => None,
            };
            let list = doc
                .take_seq(entries)
                .ok_or_else(|| FormatError::Field(format!("`device_traces[{d}]` is not a list")))?;
            st.records(list.len() as u64 + streamed.as_ref().map_or(0, |s| s.count))?;
            let mut out =
                Vec::with_capacity(list.len() + streamed.as_ref().map_or(0, |s| s.entries.len()));
            let first = list.len();
            for (i, p) in list.into_iter().enumerate() {
                let e = doc.unpack(p);
                let mut b = Builder {
                    doc: &*doc,
                    st: &mut st,
                };
                let frames = b.field(e, "frames");
                out.push(b.entry(e, d, i)?);
                // Converted: its dict and frames list are not needed again.
                doc.free(e);
                if let Some(f) = frames {
                    doc.free(f);
                }
            }
            if let Some(s) = streamed {
                if let Some(j) = s.error_at {
                    return Err(no_action(d, first + j as usize));
                }
                let mut b = Builder {
                    doc: &*doc,
                    st: &mut st,
                };
                for mut e in s.entries {
                    if e.stack != u32::MAX {
                        let list = Value::List(e.stack);
                        // A list still holding its shared copy reads as the copy (interned
                        // once per copy); one written to since reads as `from_doc` reads it.
                        let id = match doc.shared_id(list) {
                            Some(k) => match stacks.get(&k) {
                                Some(id) => *id,
                                None => {
                                    let id = b.stack_items(doc.shared_items(k));
                                    stacks.insert(k, id);
                                    id
                                }
                            },
                            None => b.stack(Some(list)),
                        };
                        e.stack = id.unwrap_or(u32::MAX);
                    }
                    out.push(e);
                }
            }
            st.out.traces.push(out);
        }
    }
    if let Some(settings) = doc.get(root, "allocator_settings") {
        st.out.expandable_setting =
            doc.get(settings, "expandable_segments")
                .and_then(|v| match v {
                    Value::Bool(x) => Some(x),
                    Value::Int(i) => Some(i != 0),
                    _ => None,
                });
    }
    Ok(st.out)
}
