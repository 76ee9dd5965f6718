//! `vramdoc plan`'s flags (issue 35; docs/plan.md).

use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Will `vllm serve MODEL_DIR` start here, beside whoever holds GPU memory now?
    ///
    /// Reads MODEL_DIR's config.json and the headers of its *.safetensors files (never the
    /// weights), looks at the GPUs as they are now (CUDA's total and free memory, the other
    /// processes there), and works through vLLM's start-up: the free-memory check against
    /// gpu_memory_utilization x total, the weights per GPU, the profiling allowances
    /// (non-torch memory, activation peak, CUDA graphs), the KV cache that is left, its
    /// tokens and the concurrency at --max-model-len. Prints whether it starts, why not
    /// (what is short and who holds it) and flags that do start. Sources of every figure:
    /// docs/plan.md.
    #[command(
        after_help = "Exit codes: 0 starts, 1 does not start (the reason and suggested flags are printed), 2 bad flags or a bad model directory (the file is named), 3 environment (no driver, no GPU).\n\nExamples:\n  vramdoc plan vllm ~/models/Qwen2.5-7B-Instruct\n  vramdoc --sim h100 plan vllm ./Llama-3.1-70B --tp 2 --gpus 0,1 --max-model-len 32768\n  vramdoc plan vllm ./model --gpu-memory-utilization 0.5 --kv-cache-dtype fp8 --json"
    )]
    Vllm(VllmPlanArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvCacheDtype {
    /// The model's own dtype
    Auto,
    /// One byte per element
    Fp8,
}

#[derive(Debug, Args)]
pub struct VllmPlanArgs {
    /// The model directory (config.json and *.safetensors, as the Hub ships it)
    #[arg(value_name = "MODEL_DIR")]
    pub model_dir: PathBuf,
    /// Tensor-parallel size (vLLM's --tensor-parallel-size): GPUs the model is split over
    #[arg(long = "tp", visible_alias = "tensor-parallel-size", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub tp: u64,
    /// Pipeline-parallel size (vLLM's --pipeline-parallel-size): stages of consecutive
    /// decoder layers, each on --tp GPUs (--tp x --pp GPUs in all)
    #[arg(long = "pp", visible_alias = "pipeline-parallel-size", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub pp: u64,
    /// Longest request (default: the model's max_position_embeddings)
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub max_model_len: Option<u64>,
    /// Share of each GPU's total memory vLLM claims at start-up, 0 < U <= 1 (default:
    /// vLLM's, 0.92 for --vllm-version latest, 0.9 for earlier releases)
    #[arg(long, value_name = "U", value_parser = utilization)]
    pub gpu_memory_utilization: Option<f64>,
    #[arg(long, value_enum, default_value_t = KvCacheDtype::Auto)]
    pub kv_cache_dtype: KvCacheDtype,
    /// Most sequences per batch (default: vLLM's, 1024 on GPUs of 70 GiB and more, else 256)
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_num_seqs: Option<u64>,
    /// Most tokens per batch (default: vLLM's, 8192 on GPUs of 70 GiB and more, else 2048)
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub max_num_batched_tokens: Option<u64>,
    /// No CUDA graphs (vLLM's --enforce-eager)
    #[arg(long)]
    pub enforce_eager: bool,
    /// The vLLM release to model: MAJOR.MINOR (e.g. 0.8, 0.10, 0.11) or latest
    #[arg(long, value_name = "VERSION", default_value = "latest")]
    pub vllm_version: String,
    /// The GPUs, in the order vLLM numbers them: physical indices or UUIDs (default:
    /// CUDA_VISIBLE_DEVICES, else every GPU)
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,
    /// Print the plan as JSON (docs/json.md)
    #[arg(long)]
    pub json: bool,
}

fn utilization(s: &str) -> Result<f64, String> {
    let u: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number (e.g. 0.9)"))?;
    if u > 0.0 && u <= 1.0 {
        Ok(u)
    } else {
        Err(format!("{u} is outside 0 < U <= 1 (e.g. 0.9)"))
    }
}
