//! The numbers of a device at its OOM (or at the snapshot) and the cause they decide.
//!
//! The request's pool is what PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp)
//! could have served it from: the default pool's blocks of the same stream and size class
//! (`small` for requests up to 1 MiB, `large` above: `kSmallSize`). At an OOM the allocator
//! has already returned every wholly free segment to CUDA (`release_cached_blocks`) and
//! retried, so the inactive blocks left are pieces of split segments. Rules, in order:
//! 1. fragmentation: the pool has at least the request free, but no block that large;
//! 2. cache on another stream / in a private pool: free blocks there would cover the request
//!    and the request's own pool would not;
//! 3. outside PyTorch: memory outside the reserve (known from `--device-total` or NVML) is
//!    at least the request and at least a fifth of the device;
//! 4. growth: live memory's lows rose in each quarter of the recorded history;
//! 5. live tensors: otherwise (the device is full of what tensors hold).
//!
//! Thresholds are named constants below; docs/explain.md states them.

use super::explanation::{Cause, Numbers};
use super::snapshot::{Action, BlockState, Snapshot};
use vramdoc_gpu_spec::units::format_bytes as b;

/// Requests up to this size come from the small pool (`kSmallSize`).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Memory outside PyTorch is the cause when it is at least this fraction of the device.
pub const OUTSIDE_FRACTION: f64 = 0.2;

/// The device's OOM: the last `oom` entry of its history (`size` asked for, `stream`,
/// `device_free`).
pub fn oom_of(s: &Snapshot, device: u32) -> Option<(u64, u64, Option<u64>)> {
    s.traces
        .get(device as usize)?
        .iter()
        .rev()
        .find(|e| e.action == Action::Oom)
        .map(|e| (e.size, e.stream, e.device_free()))
}

/// The numbers for `device`; `total` and `process_used` (NVML's view of the process on that
/// device) refine what is outside PyTorch.
pub fn numbers(
    s: &Snapshot,
    device: u32,
    total: Option<u64>,
    process_used: Option<u64>,
) -> Numbers {
    let oom = oom_of(s, device);
    let mut n = Numbers {
        requested: oom.map(|o| o.0),
        stream: oom.map(|o| o.1),
        device_free: oom.and_then(|o| o.2),
        device_total: total,
        ..Numbers::default()
    };
    let large = n.requested.is_none_or(|r| r > SMALL_SIZE);
    for seg in s.segments.iter().filter(|g| g.device == device) {
        n.segments = n.segments.saturating_add(1);
        n.reserved = n.reserved.saturating_add(seg.total_size);
        let same_pool = seg.pool == (0, 0) && seg.large == large;
        for blk in &seg.blocks {
            match blk.state {
                BlockState::Allocated => n.allocated = n.allocated.saturating_add(blk.size),
                BlockState::PendingFree => n.pending_free = n.pending_free.saturating_add(blk.size),
                BlockState::Inactive => {
                    n.cached_free = n.cached_free.saturating_add(blk.size);
                    if seg.pool != (0, 0) {
                        n.private_pools_free = n.private_pools_free.saturating_add(blk.size);
                    } else if n.stream.is_none_or(|st| st == seg.stream) {
                        if same_pool {
                            n.pool_free = n.pool_free.saturating_add(blk.size);
                            n.pool_largest_free = n.pool_largest_free.max(blk.size);
                        }
                    } else {
                        n.other_streams_free = n.other_streams_free.saturating_add(blk.size);
                    }
                }
            }
        }
    }
    n.outside_pytorch = match (process_used, total, n.device_free) {
        // NVML's usage of the process: its context, NCCL and cuBLAS workspaces on top. Below
        // PyTorch's own reserve, NVML's samples missed the process at its peak (it exited
        // between two process lists): that says nothing of what was outside.
        (Some(used), _, _) if used >= n.reserved => Some(used - n.reserved),
        // The device's: everything not PyTorch's, other processes included.
        (None, Some(t), Some(free)) => Some(t.saturating_sub(free).saturating_sub(n.reserved)),
        _ => None,
    };
    n
}

/// The cause, and one sentence saying it with its numbers.
pub fn decide(n: &Numbers, growing: bool) -> (Cause, String) {
    let Some(req) = n.requested else {
        return if growing {
            (
                Cause::Growth,
                format!(
                    "no out-of-memory recorded, but live memory rose through the history; {} allocated of {} reserved",
                    b(n.allocated),
                    b(n.reserved)
                ),
            )
        } else {
            (
                Cause::None,
                format!(
                    "no out-of-memory recorded: {} allocated, {} cached free of {} reserved",
                    b(n.allocated),
                    b(n.cached_free),
                    b(n.reserved)
                ),
            )
        };
    };
    if n.pool_free >= req && n.pool_largest_free < req {
        return (
            Cause::Fragmentation,
            format!(
                "fragmentation: {} was requested and the pool had {} free, but its largest free block was {} ({} free blocks in split segments)",
                b(req),
                b(n.pool_free),
                b(n.pool_largest_free),
                b(n.cached_free)
            ),
        );
    }
    if n.pool_free < req && (n.other_streams_free >= req || n.private_pools_free >= req) {
        return if n.private_pools_free >= n.other_streams_free {
            (
                Cause::CacheInPrivatePool,
                format!(
                    "the cache is held by a private pool (CUDA graphs): {} free there, {} free in the request's pool, {} requested",
                    b(n.private_pools_free),
                    b(n.pool_free),
                    b(req)
                ),
            )
        } else {
            (
                Cause::CacheOnOtherStream,
                format!(
                    "the cache is held by another stream: {} free in other streams' blocks, {} free on the request's stream, {} requested",
                    b(n.other_streams_free),
                    b(n.pool_free),
                    b(req)
                ),
            )
        };
    }
    if let (Some(out), Some(total)) = (n.outside_pytorch, n.device_total) {
        if out >= req && out as f64 >= OUTSIDE_FRACTION * total as f64 {
            return (
                Cause::OutsidePytorch,
                format!(
                    "memory outside PyTorch: {} of the {} device is held outside PyTorch's {} reserve (contexts, NCCL, cuBLAS workspaces{}); {} requested",
                    b(out),
                    b(total),
                    b(n.reserved),
                    if n.device_free.is_some() { ", other processes" } else { "" },
                    b(req)
                ),
            );
        }
    }
    if growing {
        return (
            Cause::Growth,
            format!(
                "memory growing across iterations: live memory's lows rose through the history, ending with {} allocated of {} reserved when {} was requested",
                b(n.allocated),
                b(n.reserved),
                b(req)
            ),
        );
    }
    (
        Cause::LiveTensors,
        format!(
            "exhaustion by live tensors: {} allocated by tensors of {} reserved, {} cached free, {} requested{}",
            b(n.allocated),
            b(n.reserved),
            b(n.cached_free),
            b(req),
            n.device_free
                .map(|f| format!(", {} free on the device", b(f)))
                .unwrap_or_default()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::snapshot::{Block, BlockState, Segment};

    /// Sizes are untrusted (a snapshot arrives with a ticket): sums that pass 2^64 saturate
    /// instead of overflowing (found by the bounded fuzz of the reader).
    #[test]
    fn sizes_past_u64_saturate() {
        let block = |state| Block {
            address: 0,
            size: u64::MAX / 2 + 1,
            requested: 0,
            state,
            stack: None,
        };
        let seg = Segment {
            device: 0,
            address: 0,
            total_size: u64::MAX,
            stream: 0,
            large: true,
            pool: (0, 0),
            expandable: false,
            blocks: vec![
                block(BlockState::Allocated),
                block(BlockState::Allocated),
                block(BlockState::Inactive),
                block(BlockState::Inactive),
            ],
        };
        let s = Snapshot {
            segments: vec![seg.clone(), seg],
            ..Snapshot::default()
        };
        let n = numbers(&s, 0, None, None);
        assert_eq!(n.reserved, u64::MAX);
        assert_eq!(n.allocated, u64::MAX);
        assert_eq!(n.cached_free, u64::MAX);
        assert_eq!(n.segments, 2);
    }
}
