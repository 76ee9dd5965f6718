//! `vramdoc explain`'s engine: a PyTorch memory snapshot (the pickle
//! `torch.cuda.memory._dump_snapshot` writes) read by a restricted reader that executes
//! nothing ([`pickle`], into a [`doc`]), typed ([`snapshot`]), and explained per device: the
//! numbers at the OOM, the cause they decide ([`causes`]), the allocation sites ([`sites`])
//! and the fix ([`fixes`]). [`inject`] is `run --torch-memory`: the `sitecustomize` that makes a job dump
//! a snapshot at its OOM, and the join of that snapshot with the run's findings.
//! Pure apart from reading the one file; renderers live in `report::explain*`.

pub mod causes;
pub mod doc;
pub mod explanation;
pub mod fixes;
pub mod inject;
pub mod pickle;
pub mod sites;
pub mod snapshot;

pub use explanation::*;

use snapshot::{BlockState, Snapshot};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Largest snapshot read unless `--max-size` says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Segments drawn in the segment map (the largest ones).
pub const MAX_MAP_SEGMENTS: usize = 256;
/// Blocks listed per mapped segment (the rest are merged into the last entry by state).
pub const MAX_MAP_BLOCKS: usize = 256;
/// Sites listed at the moment.
pub const TOP_SITES: usize = 5;

#[derive(Debug, Error)]
pub enum ExplainError {
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    #[error("{path}: {size} bytes, over the {limit}-byte limit for snapshots; raise it with --max-size (e.g. --max-size {suggest})")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
        suggest: String,
    },
    #[error("{path}: {source}")]
    Pickle {
        path: PathBuf,
        #[source]
        source: pickle::PickleError,
    },
    #[error("{path}: {source}")]
    Format {
        path: PathBuf,
        #[source]
        source: snapshot::FormatError,
    },
}

impl ExplainError {
    /// The file named a global or a constructor (the refusal the safety model is for).
    pub fn is_forbidden(&self) -> bool {
        matches!(
            self,
            ExplainError::Pickle {
                source: pickle::PickleError::Forbidden { .. },
                ..
            }
        )
    }
}

/// What besides the file the explanation may use.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Largest file read (0: [`DEFAULT_MAX_BYTES`]).
    pub max_bytes: u64,
    /// Device memory per device index (`--device-total`, or NVML in `run`).
    pub totals: BTreeMap<u32, u64>,
    /// NVML's usage of the process per device (`run --torch-memory`).
    pub process_used: BTreeMap<u32, u64>,
}

/// Read and decode `path` (bounded) into a typed snapshot.
pub fn read_snapshot(path: &Path, max_bytes: u64) -> Result<(Snapshot, u64), ExplainError> {
    let limit = if max_bytes == 0 {
        DEFAULT_MAX_BYTES
    } else {
        max_bytes
    };
    let (file, meta) = crate::input::open_regular(path)?;
    let size = meta.len();
    if size > limit {
        return Err(ExplainError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit,
            suggest: format!("{}MiB", size.div_ceil(1 << 20)),
        });
    }
    let decode = |file: std::fs::File, appends: &mut dyn pickle::Appends| {
        let reader = std::io::BufReader::with_capacity(1 << 20, file);
        pickle::decode_with(reader, size, pickle::Limits::for_len(size), appends).map_err(
            |source| ExplainError::Pickle {
                path: path.to_path_buf(),
                source,
            },
        )
    };
    let format = |source| ExplainError::Format {
        path: path.to_path_buf(),
        source,
    };
    // The history is converted as it is read (it is most of a snapshot).
    let mut stream = snapshot::TraceStream::default();
    let mut doc = decode(file, &mut stream)?;
    let snap = match snapshot::from_doc_streamed(&mut doc, stream) {
        // A file that writes to an entry after it was converted (no pickle PyTorch writes) is
        // read again, whole, within the same limits: what it says is what it ends with.
        Err(snapshot::FormatError::Rewritten) => {
            drop(doc);
            let (file, _) = crate::input::open_regular(path)?;
            let mut doc = decode(file, &mut pickle::KeepAll)?;
            snapshot::from_doc(&mut doc).map_err(format)?
        }
        other => other.map_err(format)?,
    };
    Ok((snap, size))
}

/// Explain the snapshot at `path`.
pub fn explain_file(path: &Path, opts: &Options) -> Result<Explanation, ExplainError> {
    let (snap, size) = read_snapshot(path, opts.max_bytes)?;
    let shown = crate::term::one_line(&path.display().to_string());
    Ok(explain(&snap, shown, size, opts))
}

/// The devices a snapshot talks about: those with segments or a recorded history.
fn devices(s: &Snapshot) -> Vec<u32> {
    let mut d: Vec<u32> = s.segments.iter().map(|g| g.device).collect();
    d.extend(
        s.traces
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.is_empty())
            .map(|(i, _)| i as u32),
    );
    d.sort_unstable();
    d.dedup();
    d
}

fn segment_map(s: &Snapshot, device: u32) -> (Vec<SegmentMap>, usize) {
    let mut segs: Vec<&snapshot::Segment> =
        s.segments.iter().filter(|g| g.device == device).collect();
    segs.sort_by(|a, b| {
        b.total_size
            .cmp(&a.total_size)
            .then(a.address.cmp(&b.address))
    });
    let left = segs.len().saturating_sub(MAX_MAP_SEGMENTS);
    segs.truncate(MAX_MAP_SEGMENTS);
    segs.sort_by_key(|g| g.address);
    let state = |st: BlockState| match st {
        BlockState::Allocated => "allocated",
        BlockState::PendingFree => "pending-free",
        BlockState::Inactive => "free",
    };
    let map = segs
        .into_iter()
        .map(|g| {
            let mut blocks: Vec<(u64, &'static str)> = Vec::new();
            for (i, blk) in g.blocks.iter().enumerate() {
                let st = state(blk.state);
                match blocks.last_mut() {
                    // Neighbours in one state merge; past the cap everything merges.
                    Some(last) if last.1 == st || i >= MAX_MAP_BLOCKS => {
                        last.0 = last.0.saturating_add(blk.size)
                    }
                    _ => blocks.push((blk.size, st)),
                }
            }
            SegmentMap {
                address: g.address,
                total_size: g.total_size,
                stream: g.stream,
                private_pool: g.pool != (0, 0),
                blocks,
            }
        })
        .collect();
    (map, left)
}

/// Explain a typed snapshot (`file`: how to name it in the report).
pub fn explain(s: &Snapshot, file: String, file_bytes: u64, opts: &Options) -> Explanation {
    let sites = sites::Sites::new(s);
    let expandable_on =
        s.expandable_setting == Some(true) || s.segments.iter().any(|g| g.expandable);
    let devices = devices(s)
        .into_iter()
        .map(|device| {
            let n = causes::numbers(
                s,
                device,
                opts.totals.get(&device).copied(),
                opts.process_used.get(&device).copied(),
            );
            let top_sites = sites::top_sites(s, &sites, device, TOP_SITES);
            let watch: Vec<String> = top_sites.iter().map(|t| t.site.clone()).collect();
            let trace = s.traces.get(device as usize).map_or(&[][..], |t| &t[..]);
            let (history, growing_sites) = sites::history(trace, &sites, &watch);
            let (cause, because) = causes::decide(&n, history.growing);
            let fixes = fixes::choose(
                cause,
                &n,
                &fixes::Context {
                    field_set: s.field_set,
                    expandable_on,
                    top_sites: &top_sites,
                    growing_sites: &growing_sites,
                },
            );
            let (segment_map, segments_not_mapped) = segment_map(s, device);
            DeviceExplanation {
                device,
                at: if n.requested.is_some() {
                    Moment::Oom
                } else {
                    Moment::Snapshot
                },
                numbers: n,
                cause,
                because,
                top_sites,
                growing_sites,
                fixes,
                history,
                segment_map,
                segments_not_mapped,
            }
        })
        .collect();
    Explanation {
        schema: EXPLAIN_SCHEMA,
        file,
        file_bytes,
        field_set: s.field_set,
        expandable_segments: s.expandable_setting,
        devices,
    }
}
