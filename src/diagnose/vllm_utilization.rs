//! vLLM's `--gpu-memory-utilization`: the one convention by which vramdoc suggests a value
//! for it. Scan's headroom (`max_gpu_memory_utilization`), the over-commit finding's fix,
//! `run`'s hint from vLLM's own start-up error and `plan vllm`'s suggested flags all call
//! [`fitting_hundredths`] (docs/plan.md, "One utilisation convention").
//!
//! **The convention**, from vLLM's start-up check (V1 from 0.9: `request_memory` in
//! vllm/v1/worker/utils.py, earlier inline in `Worker.init_device`,
//! vllm/v1/worker/gpu_worker.py). Once its own CUDA context exists, vLLM takes a snapshot of
//! CUDA's `(free, total)` (`MemorySnapshot`, `torch.cuda.mem_get_info`) and refuses to start
//! when `free < ceil(total × U)`. That budget, `U × total`, is the whole of what vLLM may
//! use — weights, the profiling peak, non-torch memory, the KV cache (and from 0.21 the
//! CUDA graphs) — and what other processes hold counts against `free`, never inside the
//! budget. So the largest `U` that starts is the largest hundredth with
//! `ceil(total × U) ≤ free`, where
//!
//! - `total` is CUDA's total (NVML's total less the driver's reservation), the figure vLLM
//!   multiplies, not NVML's;
//! - `free` is what vLLM's snapshot will see: CUDA's free memory less the new process's own
//!   CUDA context, and less whatever the server allocates beside its budget before the
//!   check matters (CUDA graphs before vLLM 0.21: the caller subtracts it).
//!
//! The floor is taken in integers and then checked against vLLM's own floating-point
//! `ceil(total × U)`, so a suggestion never rounds up past what is free. Below 0.01 no
//! budget fits, and 1.0 is the most (vLLM's `CacheConfig.gpu_memory_utilization` is
//! `Field(default=0.9, gt=0, le=1)`, vllm/config/cache.py). Whether the weights and the KV
//! cache fit in that budget is the planner's question (`plan vllm`), not this one's.

/// The budget vLLM asks for at utilisation `u` on a GPU of CUDA total `total` bytes,
/// computed as vLLM computes it: `math.ceil(total_memory * gpu_memory_utilization)`, in
/// double precision.
pub fn budget(u: f64, total: u64) -> u64 {
    let b = (total as f64 * u).ceil();
    if b.is_finite() && b > 0.0 {
        b as u64
    } else {
        0
    }
}

/// The largest `gpu_memory_utilization`, in hundredths (0 to 100), whose [`budget`] fits in
/// `free` bytes on a GPU of CUDA total `total` bytes: `floor(100 × free / total)`, lowered
/// while vLLM's floating-point budget would exceed `free`. 0 where `total` is 0 or nothing
/// fits.
pub fn fitting_hundredths(total: u64, free: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    let mut h = (free.min(total) as u128 * 100 / total as u128) as u64;
    while h > 0 && budget(h as f64 / 100.0, total) > free {
        h -= 1;
    }
    h
}

/// [`fitting_hundredths`] as the value to pass (`0.01` to `1.0`), `None` where no budget
/// fits beside what the other processes hold.
pub fn fitting(total: u64, free: u64) -> Option<f64> {
    let h = fitting_hundredths(total, free);
    (h > 0).then(|| h as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{GIB, MIB};

    #[test]
    fn the_largest_hundredth_whose_budget_fits_in_free() {
        // 79.14 GiB CUDA total, 18.20 GiB free: 0.22 × 79.14 = 17.41 fits, 0.23 (18.20) not.
        let total = 84_978_434_048;
        let free = (18.20 * GIB as f64) as u64;
        assert_eq!(fitting_hundredths(total, free), 22);
        assert!(budget(0.22, total) <= free);
        assert!(budget(0.23, total) > free);
        // A whole GPU free: 1.0 (vLLM's `le=1`), never more, even if `free` says more.
        assert_eq!(fitting(total, total), Some(1.0));
        assert_eq!(fitting(total, total + GIB), Some(1.0));
    }

    #[test]
    fn neighbours_holding_nearly_everything_leave_no_budget() {
        let total = 16 * GIB;
        // 99.5 % held: 0.5 % free rounds down to 0: nothing fits.
        assert_eq!(fitting(total, total / 200), None);
        assert_eq!(fitting(total, 0), None);
        assert_eq!(fitting(0, 0), None);
        assert_eq!(fitting(0, GIB), None);
        // Exactly one hundredth free: 0.01 fits, exactly.
        assert_eq!(fitting(100 * MIB, MIB), Some(0.01));
    }

    #[test]
    fn the_floor_never_rounds_up_past_free() {
        // Where 100 × free / total is a whole number the integer floor is exact, but vLLM's
        // double-precision `total × 0.07` can round past it: the budget is checked as vLLM
        // computes it, so the suggestion still passes vLLM's check.
        for total in [
            100u64,
            8 * GIB,
            24 * GIB - 430 * MIB,
            84_978_434_048,
            85_060_000_000,
            192 * GIB,
        ] {
            for h in 1..=100u64 {
                let free = budget(h as f64 / 100.0, total);
                for f in [free.saturating_sub(1), free, free + 1] {
                    let got = fitting_hundredths(total, f);
                    assert!(
                        budget(got as f64 / 100.0, total) <= f,
                        "{total} {f} -> {got}"
                    );
                    // And it is the largest: one hundredth more does not fit.
                    if got < 100 {
                        assert!(budget((got + 1) as f64 / 100.0, total) > f, "{total} {f}");
                    }
                }
            }
        }
    }
}
