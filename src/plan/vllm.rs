//! What vLLM does with memory at start-up, by version: the figures `plan vllm` models, each
//! with where it comes from (docs/plan.md "Sources"). Facts only; the arithmetic is in
//! [`super::plan_vllm`].

use crate::units::{GIB, MIB};

/// KV cache block size in tokens (`CacheConfig.block_size` default 16 on CUDA): vLLM
/// allocates, and reports, whole blocks.
pub const BLOCK_TOKENS: u64 = 16;

/// A vLLM release, `MAJOR.MINOR` (the patch does not change what is modelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

/// The newest generation modelled, what `--vllm-version latest` (the default) means.
pub const LATEST: Version = Version {
    major: 0,
    minor: 27,
};

impl Version {
    /// `0.11`, `0.11.2`, `v0.10.1`, `latest`.
    pub fn parse(s: &str) -> Result<Version, String> {
        let t = s.trim().trim_start_matches('v');
        if t == "latest" {
            return Ok(LATEST);
        }
        let mut it = t.split('.');
        let num = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok());
        match (num(it.next()), num(it.next())) {
            (Some(major), Some(minor)) => Ok(Version { major, minor }),
            _ => Err(format!(
                "vLLM version {s:?}: write MAJOR.MINOR (e.g. 0.11, 0.8.5) or latest"
            )),
        }
    }

    fn at_least(self, minor: u32) -> bool {
        self >= Version { major: 0, minor }
    }

    /// V1's worker refuses to start when free memory is below `ceil(U x total)`
    /// (`Worker.init_device`, vllm/v1/worker/gpu_worker.py, 0.9 on; `request_memory` in
    /// vllm/v1/worker/utils.py later). Before, the budget was taken without that check and
    /// the KV cache allocation itself failed (vllm#18854).
    pub fn checks_free_at_startup(self) -> bool {
        self.at_least(9)
    }

    /// vLLM's default `gpu_memory_utilization` (`CacheConfig`, vllm/config/cache.py): 0.92 in
    /// the newest generation modelled (`Field(default=0.92, gt=0, le=1)` at main 002f10e0,
    /// and `vllm serve --help` in the stable docs), 0.9 before (cache.py at c1d8642, and
    /// `EngineArgs` before the config moved there). The release that changed it is not
    /// pinned down: an earlier version gets 0.9.
    pub fn default_utilization(self) -> f64 {
        if self >= LATEST {
            0.92
        } else {
            0.9
        }
    }

    /// `--kv-cache-memory-bytes` (`CacheConfig.kv_cache_memory_bytes`, 0.11 on).
    pub fn has_kv_cache_memory_bytes(self) -> bool {
        self.at_least(11)
    }

    /// CUDA-graph memory estimated during profiling and taken from the KV cache
    /// (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`, vllm/envs.py). vLLM 0.17/0.18 announce it
    /// for 0.19 ("In v0.19, CUDA graph memory profiling will be enabled by default",
    /// vllm#30515, vllm#39559), but the releases that shipped it say "CUDA graph memory
    /// profiling is enabled (default since v0.21.0)" (0.27 logs: gpustack/runner#251,
    /// wtdcode/vllm-backport#15; eugr/spark-vllm-docker#396): modelled from 0.21. Before,
    /// graphs were captured after the KV cache was allocated, from memory outside the
    /// budget (vllm#49224, #53013).
    pub fn graphs_in_budget(self) -> bool {
        self.at_least(21)
    }

    /// V1, the default engine from 0.8 (`VLLM_USE_V1`); before, V0's `LLMEngine`.
    pub fn is_v1(self) -> bool {
        self.at_least(8)
    }

    pub fn label(self) -> String {
        format!("{}.{}", self.major, self.minor)
    }
}

/// `vllm serve`'s scheduler defaults (`EngineArgs._set_default_args`,
/// vllm/engine/arg_utils.py, V1): on GPUs of 70 GiB and more (not A100) 8192 batched tokens
/// and 1024 sequences, else 2048 and 256.
pub fn serve_defaults(cuda_total: u64, name: &str) -> (u64, u64) {
    if cuda_total >= 70 * GIB && !name.to_ascii_lowercase().contains("a100") {
        (8192, 1024)
    } else {
        (2048, 256)
    }
}

/// The scheduler defaults of the engine `version` runs, `(max_num_batched_tokens,
/// max_num_seqs)`, which size the profiling batch. V1 (0.8 on): [`serve_defaults`]. V0:
/// 256 sequences, and without chunked prefill `max(max_model_len, 2048)` tokens — the
/// whole longest request in one batch (`SchedulerConfig`, vllm/config.py: "If
/// max_model_len is too short, use 2048 as the default value"); V0 turns chunked prefill
/// on by itself from 0.5 when `max_model_len` exceeds 32768 (`use_long_context` in
/// `EngineArgs.create_engine_config`), and then batches 512 tokens (0.5) or 2048 (0.6 on;
/// 0.6.6's `SchedulerConfig.__post_init__`). Seen in vllm#10517 (V0 0.6.4, RTX 3090,
/// Llama-3.1-8B): the profiling peak grows with `--max-model-len` (2.07 GiB at 20000,
/// 2.99 GiB at 29000) and drops to 0.06 GiB at 35000.
pub fn scheduler_defaults(
    version: Version,
    cuda_total: u64,
    name: &str,
    max_model_len: u64,
) -> (u64, u64) {
    if version.is_v1() {
        return serve_defaults(cuda_total, name);
    }
    let chunked = version.at_least(5) && max_model_len > 32768;
    let tokens = match (chunked, version.at_least(6)) {
        (true, true) => 2048,
        (true, false) => 512,
        (false, _) => max_model_len.max(2048),
    };
    (tokens, 256)
}

/// Memory outside PyTorch that profiling adds (NCCL buffers, cuBLAS workspaces; vLLM's
/// `non_torch_memory`): an allowance. One GPU: 256 MiB (logs show 0.03-0.35 GiB); tensor
/// parallel: 768 MiB (NCCL and custom all-reduce buffers). V0 from 0.7 takes its baseline
/// snapshot after the distributed set-up and counts only what grows during the profiling
/// run (vllm#12126, "further polish memory profiling", in 0.7.0; `memory_profiling` in
/// vllm/utils.py): the NCCL buffers are then in the baseline, and tensor-parallel logs of
/// that engine print 0.25 GiB at TP 2 (vllm#13061, 0.7.2) and 0.20 GiB per worker
/// (vllm#14447, V0 worker): 256 MiB whatever the TP there.
pub fn non_torch_allowance(version: Version, tp: u64) -> u64 {
    let v0_after_12126 = version.at_least(7) && !version.is_v1();
    if tp > 1 && !v0_after_12126 {
        768 * MIB
    } else {
        256 * MIB
    }
}

/// The activation peak of the profiling forward pass (vLLM's `torch_peak_increase`): a
/// dummy batch of `tokens` tokens through one layer's live tensors (residual and hidden
/// state, the MLP's gate/up and down activations, split by tensor parallelism) plus the
/// sampler's float32 logits and probabilities for `seqs` sequences (gathered: the whole
/// vocabulary on every GPU).
pub fn activation_estimate(
    tokens: u64,
    seqs: u64,
    hidden: u64,
    intermediate: u64,
    vocab: u64,
    tp: u64,
    dtype_bytes: u64,
) -> u64 {
    let tp = tp.max(1);
    let layer = tokens * (2 * hidden + 3 * intermediate / tp) * dtype_bytes;
    let sampler = seqs.min(tokens) * vocab * 4 * 2;
    layer + sampler
}

/// CUDA-graph memory: 16 MiB per layer, between 256 MiB and 2 GiB (logs of the default
/// capture sizes show 0.4 GiB at 24 layers, 0.5 GiB at 32); none with `--enforce-eager`.
pub fn cudagraph_allowance(layers: u64, eager: bool) -> u64 {
    if eager {
        0
    } else {
        (layers * 16 * MIB).clamp(256 * MIB, 2 * GIB)
    }
}
