//! What `vramdoc explain` says about a snapshot: the typed result every renderer (terminal,
//! JSON, Markdown, HTML) and `run --torch-memory`'s join read. `--json` is this, serialized.

use super::snapshot::FieldSet;
use serde::Serialize;

/// Version of the JSON document `explain --json` prints.
pub const EXPLAIN_SCHEMA: &str = "vramdoc-explain/1";

#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub schema: &'static str,
    /// The snapshot file, as given.
    pub file: String,
    pub file_bytes: u64,
    /// Which generation of PyTorch's snapshot format the file is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_set: Option<FieldSet>,
    /// `allocator_settings.expandable_segments`, when the snapshot carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expandable_segments: Option<bool>,
    pub devices: Vec<DeviceExplanation>,
}

/// The moment the numbers describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Moment {
    /// The last `oom` entry of the device's history (the snapshot an OOM observer dumps).
    Oom,
    /// The snapshot itself (no `oom` recorded).
    Snapshot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// Enough free in the request's pool, no block large enough.
    Fragmentation,
    /// The free cache sits in another stream's blocks.
    CacheOnOtherStream,
    /// The free cache sits in a private pool (CUDA graphs, `torch.cuda.MemPool`).
    CacheInPrivatePool,
    /// Live memory kept growing across the recorded history.
    Growth,
    /// Memory held outside PyTorch's allocator (contexts, NCCL, cuBLAS, other processes).
    OutsidePytorch,
    /// The device is full of live tensors.
    LiveTensors,
    /// No out-of-memory recorded, nothing abnormal.
    None,
}

impl Cause {
    pub fn id(self) -> &'static str {
        match self {
            Cause::Fragmentation => "fragmentation",
            Cause::CacheOnOtherStream => "cache-on-other-stream",
            Cause::CacheInPrivatePool => "cache-in-private-pool",
            Cause::Growth => "growth",
            Cause::OutsidePytorch => "outside-pytorch",
            Cause::LiveTensors => "live-tensors",
            Cause::None => "none",
        }
    }
}

/// The numbers of one device at the moment.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Numbers {
    /// Bytes the failed allocation asked for (at an OOM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested: Option<u64>,
    /// The stream the request came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<u64>,
    /// Free memory CUDA reported at the OOM (`device_free`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free: Option<u64>,
    /// The device's memory, when known (`--device-total`, or NVML in `run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_total: Option<u64>,
    /// Sum of the segments (what PyTorch holds from CUDA).
    pub reserved: u64,
    /// Blocks in use by tensors.
    pub allocated: u64,
    /// Blocks freed but still in use by a stream (`active_pending_free`).
    pub pending_free: u64,
    /// Cached but free (inactive blocks).
    pub cached_free: u64,
    /// Free in the request's pool: the default pool, its stream, its size class.
    pub pool_free: u64,
    pub pool_largest_free: u64,
    /// Free in the default pool on other streams.
    pub other_streams_free: u64,
    /// Free in private pools (CUDA graphs).
    pub private_pools_free: u64,
    pub segments: usize,
    /// Memory on the device outside PyTorch's reserve, when it can be told.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_pytorch: Option<u64>,
}

/// An allocation site: the innermost Python frame outside torch itself.
#[derive(Debug, Clone, Serialize)]
pub struct Site {
    pub site: String,
    pub bytes: u64,
    pub blocks: u64,
    /// Of the device's allocated bytes.
    pub share: f64,
    /// The next frames out (callers), innermost first, at most four.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SiteGrowth {
    pub site: String,
    /// Live bytes at the history's first low point and at its end.
    pub from: u64,
    pub to: u64,
}

/// Live memory over the recorded history (within the window the ring buffer kept).
#[derive(Debug, Clone, Default, Serialize)]
pub struct History {
    pub entries: usize,
    /// `time_us` of the first and last entries, when recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_us: Option<(i64, i64)>,
    /// The lows of the live series in four equal parts of the history.
    pub troughs: Vec<u64>,
    pub growing: bool,
    /// Sample positions (entry index) and, per series, live bytes there.
    pub x: Vec<u64>,
    pub series: Vec<Series>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// `all` or a site.
    pub name: String,
    pub bytes: Vec<u64>,
}

/// One segment for the segment map: its blocks as `(size, state)` in address order.
#[derive(Debug, Clone, Serialize)]
pub struct SegmentMap {
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    pub private_pool: bool,
    /// `(bytes, "allocated" | "pending-free" | "free")`.
    pub blocks: Vec<(u64, &'static str)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Fix {
    /// Stable id: `expandable-segments`, `max-split-size`, `empty-cache`, `release-graph-pool`,
    /// `free-references`, `smaller-batches`, `activation-checkpointing`, `outside-memory`.
    pub id: &'static str,
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceExplanation {
    pub device: u32,
    pub at: Moment,
    pub numbers: Numbers,
    pub cause: Cause,
    /// The cause in one sentence, with its numbers.
    pub because: String,
    pub top_sites: Vec<Site>,
    pub growing_sites: Vec<SiteGrowth>,
    pub fixes: Vec<Fix>,
    pub history: History,
    /// The largest segments (at most [`super::MAX_MAP_SEGMENTS`]), for the segment map.
    pub segment_map: Vec<SegmentMap>,
    /// Segments left out of `segment_map`.
    pub segments_not_mapped: usize,
}
