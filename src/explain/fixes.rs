//! The fix, chosen from the cause and its numbers.
//!
//! Names of settings as the PyTorch release honours them: `expandable_segments` is read from
//! `PYTORCH_CUDA_ALLOC_CONF` since PyTorch 2.1 (recent releases deprecate that variable for
//! `PYTORCH_ALLOC_CONF`, so the fix names both) (the snapshot format with per-block `frames`
//! appeared in the same release; a legacy snapshot is older and gets `max_split_size_mb`,
//! which 2.0 honours); when the snapshot says expandable segments are already on (its
//! `allocator_settings`, or segments marked `is_expandable`) it is not advised again
//! (pytorch/pytorch#173049) and the split limit is offered instead.

use super::explanation::{Cause, Fix, Numbers, Site, SiteGrowth};
use super::snapshot::FieldSet;
use vramdoc_gpu_spec::units::format_bytes as b;

/// What the fixes are chosen from besides the numbers.
pub struct Context<'a> {
    pub field_set: Option<FieldSet>,
    /// Expandable segments already on (settings or segments say so).
    pub expandable_on: bool,
    pub top_sites: &'a [Site],
    pub growing_sites: &'a [SiteGrowth],
}

/// A site holds "most" of the live memory from this share on.
pub const DOMINANT_SHARE: f64 = 0.5;

fn mib_up(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20).max(1)
}

pub fn choose(cause: Cause, n: &Numbers, cx: &Context) -> Vec<Fix> {
    let req = n.requested.unwrap_or(0);
    let mut out = Vec::new();
    match cause {
        Cause::Fragmentation => {
            if cx.expandable_on {
                out.push(Fix {
                    id: "max-split-size",
                    text: format!(
                        "expandable segments are already on; cap block splitting so large blocks stay whole: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{}",
                        mib_up(req)
                    ),
                });
            } else if cx.field_set == Some(FieldSet::Legacy) {
                out.push(Fix {
                    id: "max-split-size",
                    text: format!(
                        "this PyTorch predates expandable segments (2.1): set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{} so blocks of the request's size are not split, or upgrade and use expandable_segments:True",
                        mib_up(req)
                    ),
                });
            } else {
                out.push(Fix {
                    id: "expandable-segments",
                    text: "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before the process starts (PyTorch 2.1+; releases that deprecate that variable read PYTORCH_ALLOC_CONF): segments grow in place instead of splitting, so the free memory becomes one block".into(),
                });
            }
            out.push(Fix {
                id: "empty-cache",
                text: format!(
                    "or call torch.cuda.empty_cache() where the allocation pattern changes (between phases or input shapes), returning the {} of split, partly free segments",
                    b(n.cached_free)
                ),
            });
        }
        Cause::CacheOnOtherStream => out.push(Fix {
            id: "empty-cache",
            text: format!(
                "{} is cached by another stream's blocks, which this stream cannot use: call torch.cuda.empty_cache() after that stream's work ends (it returns whole free segments), or allocate on one stream and use Tensor.record_stream() for the other",
                b(n.other_streams_free)
            ),
        }),
        Cause::CacheInPrivatePool => out.push(Fix {
            id: "release-graph-pool",
            text: format!(
                "{} is cached in a CUDA graph's private pool: delete graphs you no longer replay, then torch.cuda.empty_cache(); or capture the graphs into one shared pool (torch.cuda.graph_pool_handle())",
                b(n.private_pools_free)
            ),
        }),
        Cause::OutsidePytorch => out.push(Fix {
            id: "outside-memory",
            text: format!(
                "{} is used outside PyTorch's allocator: NCCL buffers (NCCL_BUFFSIZE), cuBLAS workspaces (CUBLAS_WORKSPACE_CONFIG), extra CUDA contexts, other processes on the GPU; shrink or move those, or budget PyTorch below them (torch.cuda.set_per_process_memory_fraction)",
                b(n.outside_pytorch.unwrap_or(0))
            ),
        }),
        Cause::Growth => {
            let site = cx.growing_sites.first();
            out.push(Fix {
                id: "free-references",
                text: match site {
                    Some(g) => format!(
                        "live memory allocated at {} grew from {} to {}: something keeps its tensors across iterations (a list of losses or outputs kept without .detach()/.item(), a cache); drop those references there",
                        g.site,
                        b(g.from),
                        b(g.to)
                    ),
                    None => "something keeps tensors across iterations: drop references to outputs and losses kept between steps (.item(), .detach())".into(),
                },
            });
        }
        Cause::LiveTensors => {
            let top = cx.top_sites.first().filter(|s| s.share >= DOMINANT_SHARE);
            if let Some(s) = top {
                out.push(Fix {
                    id: "free-references",
                    text: format!(
                        "{} of the {} allocated is held by tensors from {}: free them before this allocation (del, or keep a smaller copy), or allocate less there",
                        b(s.bytes),
                        b(n.allocated),
                        s.site
                    ),
                });
                let forward = s.site.contains("forward")
                    || s.callers.iter().any(|c| c.contains("forward"));
                if forward {
                    out.push(Fix {
                        id: "activation-checkpointing",
                        text: "it is in a forward pass: activations kept for backward; use activation checkpointing (torch.utils.checkpoint) on that module".into(),
                    });
                }
            }
            out.push(Fix {
                id: "smaller-batches",
                text: format!(
                    "live tensors fill the device: use smaller micro-batches (gradient accumulation keeps the effective batch), lower precision, or a larger GPU; the request was {}",
                    b(req)
                ),
            });
        }
        Cause::None => {}
    }
    out
}
