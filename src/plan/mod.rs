//! The planner behind `vramdoc plan vllm MODEL_DIR` (issue 35; docs/plan.md): will a vLLM
//! server start on these GPUs, beside whoever holds memory there now, and with which flags.
//! `model` reads the model directory (config.json and safetensors headers only); the plan
//! itself ([`plan_vllm`]) is a pure function of that, the flags and a scan report (CUDA's
//! view of each GPU, its other processes, the headroom `diagnose` computed).

pub mod arch;
pub mod model;
pub mod safetensors;
pub mod vllm;

#[cfg(test)]
mod tests;

use crate::diagnose::vllm_utilization;
use crate::model::{Headroom, Report};
use crate::units::format_bytes;
use serde::Serialize;

pub use model::{Model, ModelError};
pub use vllm::Version;

/// `plan vllm`'s flags, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmOptions {
    pub vllm_version: String,
    pub tensor_parallel_size: u64,
    /// Pipeline stages (`--pipeline-parallel-size`): each holds a run of the decoder layers,
    /// on `tensor_parallel_size` GPUs.
    pub pipeline_parallel_size: u64,
    /// `None`: the model's `max_position_embeddings`.
    pub max_model_len: Option<u64>,
    pub gpu_memory_utilization: f64,
    /// `auto` (the model's dtype) or `fp8`.
    pub kv_cache_dtype: String,
    pub max_num_seqs: Option<u64>,
    pub max_num_batched_tokens: Option<u64>,
    pub enforce_eager: bool,
    #[serde(skip)]
    pub version: Version,
}

/// Another process's memory on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Other {
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `None`: NVML reports "not available".
    pub bytes: Option<u64>,
}

/// One GPU of the plan. Sizes in bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DevicePlan {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    /// CUDA's total (`cuMemGetInfo`): NVML's total less the driver's reservation.
    pub total: u64,
    /// CUDA's free memory now.
    pub free: u64,
    /// What vLLM's start-up snapshot will see free, once its own CUDA context exists
    /// (scan's headroom: free less the context reserve).
    pub free_at_startup: u64,
    pub others: Vec<Other>,
    /// Decoder layers on this GPU (all of them without pipeline parallelism).
    pub layers: u64,
    /// KV bytes per token on this GPU (its layers, its share of the KV heads).
    pub kv_bytes_per_token: u64,
    /// `ceil(gpu_memory_utilization x total)`.
    pub budget: u64,
    pub weights_bytes: u64,
    /// vLLM's rotary cos/sin cache, loaded with the weights and counted in vLLM's "model
    /// weights" figure ([`arch::Arch::rotary_cache_bytes`]).
    pub rotary_cache_bytes: u64,
    pub non_torch_bytes: u64,
    pub activation_bytes: u64,
    pub cudagraph_bytes: u64,
    /// Whether the CUDA graphs come out of the budget (else out of the memory beside it).
    pub cudagraph_in_budget: bool,
    /// The KV cache: the budget less weights, non-torch, activation peak (and graphs where
    /// they are in the budget), floored at 0.
    pub kv_bytes: u64,
    pub kv_tokens: u64,
    /// Why this GPU does not start the server; `None` when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short: Option<String>,
}

/// Flags that start the server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suggested {
    /// The largest that passes the start-up check on every GPU (`None`: none starts).
    pub gpu_memory_utilization: Option<f64>,
    /// The longest request the KV cache then holds (`None`: the KV cache holds none).
    pub max_model_len: Option<u64>,
    /// Smaller batches, where the activation peak of the ones given leaves no KV cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_num_batched_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<u64>,
    /// The KV cache at that utilisation (vLLM 0.11 on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_memory_bytes: Option<u64>,
    /// The flags, ready to paste.
    pub flags: String,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmPlan {
    pub model: Model,
    pub options: VllmOptions,
    /// The request length planned for (`--max-model-len` or the model's own).
    pub max_model_len: u64,
    pub max_num_seqs: u64,
    pub max_num_batched_tokens: u64,
    /// Whole model, every layer, before tensor parallelism, in the KV cache's dtype.
    pub kv_bytes_per_token: u64,
    /// On one GPU after tensor parallelism.
    pub kv_bytes_per_token_per_gpu: u64,
    pub weights_bytes: u64,
    /// The largest share of the weights one GPU holds.
    pub weights_bytes_per_gpu: u64,
    /// The smallest KV cache of the GPUs (vLLM sizes every rank's to the smallest).
    pub kv_bytes: u64,
    pub kv_tokens: u64,
    /// Requests of `max_model_len` tokens the KV cache holds at once.
    pub max_concurrency: f64,
    pub starts: bool,
    pub reason: String,
    pub suggested: Suggested,
    pub devices: Vec<DevicePlan>,
}

/// Why no plan could be made from the scan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{what} needs {need} GPUs; {have} selected ({list})")]
    TooFewGpus {
        what: String,
        need: u64,
        have: usize,
        list: String,
    },
    #[error("GPU {0}: its memory cannot be read ({1}); nothing can be planned on it")]
    MemoryUnknown(u32, String),
    #[error("GPU {0} is not in the scan")]
    NoSuchGpu(u32),
}

/// Plan a vLLM server of `model` with `opts` on the first `tp` GPUs of `gpus` (physical
/// indices, in CUDA order), on the GPUs as `report` (a scan) saw them.
pub fn plan_vllm(
    report: &Report,
    gpus: &[u32],
    model: &Model,
    opts: &VllmOptions,
) -> Result<VllmPlan, PlanError> {
    let tp = opts.tensor_parallel_size.max(1);
    let pp = opts.pipeline_parallel_size.max(1);
    let n = tp * pp;
    let scan = report.scan();
    let (devices, processes, headroom): (&[_], &[_], &[Headroom]) = match scan {
        Some(s) => (&s.devices, &s.processes, &s.headroom),
        None => (report.devices(), &[], &[]),
    };
    if (gpus.len() as u64) < n {
        return Err(PlanError::TooFewGpus {
            what: if pp > 1 {
                format!("--tp {tp} --pp {pp}")
            } else {
                format!("--tp {tp}")
            },
            need: n,
            have: gpus.len(),
            list: gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        });
    }
    let arch = &model.arch;
    let element = if opts.kv_cache_dtype == "fp8" {
        1
    } else {
        arch.dtype_bytes
    };
    let len = opts
        .max_model_len
        .or(arch.max_position_embeddings)
        .unwrap_or(4096);
    let per_layer_token = arch.elements_per_layer(tp) * element;
    let version = opts.version;
    let mut out = Vec::new();
    let mut seqs_tokens = (0, 0);
    // vLLM's ranks: pipeline stage outer, tensor-parallel rank inner.
    for (rank, &index) in gpus[..n as usize].iter().enumerate() {
        let stage = rank as u64 / tp;
        let layers = model::pp_layers(arch.layers, pp, stage);
        let layers = layers.end - layers.start;
        let per_gpu_token = layers * per_layer_token;
        let weights_gpu = model.weights_per_stage(tp, pp, stage);
        let d = devices
            .iter()
            .find(|d| d.index == index)
            .ok_or(PlanError::NoSuchGpu(index))?;
        if let Some(why) = &d.memory_unknown {
            return Err(PlanError::MemoryUnknown(
                index,
                crate::term::clean_text(why),
            ));
        }
        let total = d.memory.total.saturating_sub(d.memory.reserved);
        let free_at_startup = headroom
            .iter()
            .find(|h| h.device == index)
            .map_or(d.memory.free, |h| h.available);
        let (tokens_default, seqs_default) = vllm::scheduler_defaults(version, total, &d.name, len);
        let tokens = opts.max_num_batched_tokens.unwrap_or(tokens_default);
        let seqs = opts.max_num_seqs.unwrap_or(seqs_default);
        seqs_tokens = (seqs, tokens);
        let others = processes
            .iter()
            .filter_map(|p| {
                let u = p.usage_on(index)?;
                (u.used != Some(0)).then(|| Other {
                    pid: p.pid,
                    name: p.name.as_deref().map(crate::term::clean_text),
                    bytes: u.used,
                })
            })
            .collect();
        let budget = vllm_utilization::budget(opts.gpu_memory_utilization, total);
        let non_torch = vllm::non_torch_allowance(version, tp);
        let activation = vllm::activation_estimate(
            tokens,
            seqs,
            arch.hidden_size,
            arch.intermediate_size,
            arch.vocab_size,
            tp,
            arch.dtype_bytes,
        );
        let graphs = vllm::cudagraph_allowance(arch.layers, opts.enforce_eager);
        let in_budget = version.graphs_in_budget();
        let rotary = arch.rotary_cache_bytes();
        let fixed =
            weights_gpu + rotary + non_torch + activation + if in_budget { graphs } else { 0 };
        let kv = budget.saturating_sub(fixed);
        out.push(DevicePlan {
            index,
            uuid: d.uuid.clone(),
            name: crate::term::clean_text(&d.name),
            total,
            free: d.memory.free,
            free_at_startup,
            others,
            layers,
            kv_bytes_per_token: per_gpu_token,
            budget,
            weights_bytes: weights_gpu,
            rotary_cache_bytes: rotary,
            non_torch_bytes: non_torch,
            activation_bytes: activation,
            cudagraph_bytes: graphs,
            cudagraph_in_budget: in_budget,
            kv_bytes: kv,
            kv_tokens: blocks(kv, per_gpu_token),
            short: None,
        });
    }
    let kv = out.iter().map(|d| d.kv_bytes).min().unwrap_or(0);
    let request = |d: &DevicePlan, l: u64| request_bytes(arch, d.layers, l, tp, element);
    for d in &mut out {
        let r = request(d, len);
        d.short = shortfall(d, opts, r, len);
    }
    // vLLM gives every worker the smallest worker's number of blocks.
    let kv_tokens = out.iter().map(|d| d.kv_tokens).min().unwrap_or(0);
    let concurrency = out
        .iter()
        .map(|d| d.kv_bytes as f64 / request(d, len).max(1) as f64)
        .fold(f64::INFINITY, f64::min);
    let concurrency = if concurrency.is_finite() {
        (concurrency * 100.0).floor() / 100.0
    } else {
        0.0
    };
    let per_gpu_token = out.iter().map(|d| d.kv_bytes_per_token).max().unwrap_or(0);
    let weights_gpu = out.iter().map(|d| d.weights_bytes).max().unwrap_or(0);
    let starts = out.iter().all(|d| d.short.is_none());
    let reason = match out.iter().find(|d| d.short.is_some()) {
        Some(d) => d.short.clone().unwrap_or_default(),
        None => format!(
            "{} of KV cache per GPU, {kv_tokens} tokens, {concurrency:.2} requests of {len} \
             tokens at once",
            format_bytes(kv),
        ),
    };
    let suggested = suggest(&out, opts, arch, len, seqs_tokens, element);
    Ok(VllmPlan {
        model: model.clone(),
        options: opts.clone(),
        max_model_len: len,
        max_num_seqs: seqs_tokens.0,
        max_num_batched_tokens: seqs_tokens.1,
        kv_bytes_per_token: arch.kv_bytes_per_token(1, element),
        kv_bytes_per_token_per_gpu: per_gpu_token,
        weights_bytes: model.weights_bytes,
        weights_bytes_per_gpu: weights_gpu,
        kv_bytes: kv,
        kv_tokens,
        max_concurrency: concurrency,
        starts,
        reason,
        suggested,
        devices: out,
    })
}

/// Tokens in whole KV blocks.
fn blocks(kv: u64, per_token: u64) -> u64 {
    if per_token == 0 {
        return 0;
    }
    kv / per_token / vllm::BLOCK_TOKENS * vllm::BLOCK_TOKENS
}

/// Who holds the memory this GPU is short of, in words.
fn holders(d: &DevicePlan) -> String {
    let mut o: Vec<&Other> = d.others.iter().collect();
    o.sort_by_key(|x| std::cmp::Reverse(x.bytes.unwrap_or(u64::MAX)));
    let named: Vec<String> = o
        .iter()
        .take(3)
        .map(|x| {
            let who = match &x.name {
                Some(n) => format!("PID {} ({n})", x.pid),
                None => format!("PID {}", x.pid),
            };
            match x.bytes {
                Some(b) => format!("{who} holds {}", format_bytes(b)),
                None => format!("{who} holds an unknown amount"),
            }
        })
        .collect();
    match named.len() {
        0 => "no other process is listed on it".into(),
        _ if o.len() > 3 => format!("{} and {} more", named.join(", "), o.len() - 3),
        _ => named.join(", "),
    }
}

/// Why `d` does not start, in the order vLLM's own checks come.
///
/// From 0.9 (V1), the worker refuses at once when less than the budget is free
/// (`Worker.init_device`), before it loads anything; then the cache blocks and the request
/// length (`check_enough_kv_cache_memory`), and graphs are captured inside the budget from
/// 0.21. Before 0.9 (V0, and V1 in 0.8), nothing is checked at start: the weights are
/// loaded and the profile run made (memory the neighbours leave short fails there first),
/// then the cache's size is checked before the cache is allocated (V0:
/// `raise_if_cache_size_invalid` in `Worker.initialize_cache`, vllm/worker/worker.py: no
/// cache blocks, fewer block tokens than `max_model_len`; V1: `check_enough_kv_cache_memory`
/// in vllm/v1/core/kv_cache_utils.py), so those fail before the allocation that the
/// neighbours' memory breaks, and CUDA graphs are captured last, beside the budget
/// (`_warm_up_model`, `compile_or_warm_up_model`).
fn shortfall(d: &DevicePlan, opts: &VllmOptions, request: u64, len: u64) -> Option<String> {
    let u = opts.gpu_memory_utilization;
    let free_short = |how: &str| {
        format!(
            "GPU {}: vLLM {} {how}: gpu_memory_utilization {u} needs {} free (of {}), {} is \
             free at start-up; {}",
            d.index,
            opts.version.label(),
            format_bytes(d.budget),
            format_bytes(d.total),
            format_bytes(d.free_at_startup),
            holders(d)
        )
    };
    let graphs_short = || {
        (!d.cudagraph_in_budget && d.free_at_startup.saturating_sub(d.budget) < d.cudagraph_bytes)
            .then(|| {
                format!(
                    "GPU {}: CUDA-graph capture needs about {} beside the {} budget, {} is left \
                     ({}); lower gpu_memory_utilization or pass --enforce-eager",
                    d.index,
                    format_bytes(d.cudagraph_bytes),
                    format_bytes(d.budget),
                    format_bytes(d.free_at_startup.saturating_sub(d.budget)),
                    holders(d)
                )
            })
    };
    let cache_short = || {
        if d.kv_bytes == 0 {
            return Some(format!(
                "GPU {}: weights ({}) and the profiling peak fill the {} budget: no room for \
                 the KV cache (\"No available memory for the cache blocks\")",
                d.index,
                format_bytes(d.weights_bytes),
                format_bytes(d.budget)
            ));
        }
        (d.kv_bytes < request).then(|| {
            format!(
                "GPU {}: one request of max_model_len {len} needs {} of KV cache, {} is left \
                 in the budget",
                d.index,
                format_bytes(request),
                format_bytes(d.kv_bytes)
            )
        })
    };
    if opts.version.checks_free_at_startup() {
        if d.free_at_startup < d.budget {
            return Some(free_short("refuses to start"));
        }
        return graphs_short().or_else(cache_short);
    }
    let before_cache =
        d.weights_bytes + d.rotary_cache_bytes + d.non_torch_bytes + d.activation_bytes;
    if d.free_at_startup < before_cache {
        return Some(format!(
            "GPU {}: vLLM {} runs out of memory before its KV cache: the weights and the \
             profile run need about {}, {} is free at start-up; {}",
            d.index,
            opts.version.label(),
            format_bytes(before_cache),
            format_bytes(d.free_at_startup),
            holders(d)
        ));
    }
    if let Some(why) = cache_short() {
        return Some(why);
    }
    if d.free_at_startup < d.budget {
        return Some(free_short("runs out of memory allocating its KV cache"));
    }
    graphs_short()
}

/// The largest utilisation that starts on every GPU, and the longest request it then
/// holds; where nothing is left for the KV cache at the batch flags given, smaller batches
/// (a smaller activation peak): 2048 tokens and 256 sequences, then 512 and 64.
fn suggest(
    out: &[DevicePlan],
    opts: &VllmOptions,
    arch: &arch::Arch,
    len: u64,
    batch: (u64, u64),
    element: u64,
) -> Suggested {
    let tp = opts.tensor_parallel_size.max(1);
    let cap = out
        .iter()
        .map(|d| {
            let room = if d.cudagraph_in_budget {
                d.free_at_startup
            } else {
                d.free_at_startup.saturating_sub(d.cudagraph_bytes)
            };
            // The one convention: the largest hundredth whose ceil(u x total) fits in room.
            vllm_utilization::fitting_hundredths(d.total, room)
        })
        .min()
        .unwrap_or(0);
    let requested = (opts.gpu_memory_utilization * 100.0).round() as u64;
    let u = cap.min(requested.max(1));
    let (seqs, tokens) = batch;
    let mut tries = vec![(tokens, seqs)];
    tries.extend(
        [(2048, 256), (512, 64)]
            .into_iter()
            .filter(|&(t, q)| t < tokens || q < seqs)
            .map(|(t, q)| (t.min(tokens), q.min(seqs))),
    );
    let mut found = None;
    for (t, q) in tries {
        let act = vllm::activation_estimate(
            t,
            q,
            arch.hidden_size,
            arch.intermediate_size,
            arch.vocab_size,
            tp,
            arch.dtype_bytes,
        );
        let kv_of = |d: &DevicePlan| {
            let budget = vllm_utilization::budget(u as f64 / 100.0, d.total);
            let graphs = if d.cudagraph_in_budget {
                d.cudagraph_bytes
            } else {
                0
            };
            budget.saturating_sub(
                d.weights_bytes + d.rotary_cache_bytes + d.non_torch_bytes + act + graphs,
            )
        };
        let kv = out.iter().map(kv_of).min().unwrap_or(0);
        let longest = if u == 0 || kv == 0 {
            0
        } else {
            out.iter()
                .map(|d| longest_request(arch, d.layers, kv_of(d), tp, element, len))
                .min()
                .unwrap_or(0)
        };
        if longest > 0 {
            found = Some((kv, longest, t, q));
            break;
        }
    }
    let Some((kv, longest, t, q)) = found else {
        return Suggested {
            gpu_memory_utilization: None,
            max_model_len: None,
            max_num_batched_tokens: None,
            max_num_seqs: None,
            kv_cache_memory_bytes: None,
            flags: "none: the weights and vLLM's own allowances do not fit in the free memory \
                    of these GPUs (more GPUs with --tp, a quantized model, or free the GPU)"
                .into(),
        };
    };
    let util = u as f64 / 100.0;
    let mut flags = vec![format!("--gpu-memory-utilization {util:.2}")];
    flags.push(format!("--max-model-len {longest}"));
    let smaller = (t, q) != (tokens, seqs);
    if smaller {
        flags.push(format!("--max-num-batched-tokens {t} --max-num-seqs {q}"));
    }
    if tp > 1 {
        flags.push(format!("--tensor-parallel-size {tp}"));
    }
    if opts.pipeline_parallel_size > 1 {
        flags.push(format!(
            "--pipeline-parallel-size {}",
            opts.pipeline_parallel_size
        ));
    }
    if opts.kv_cache_dtype == "fp8" {
        flags.push("--kv-cache-dtype fp8".into());
    }
    if opts.enforce_eager {
        flags.push("--enforce-eager".into());
    }
    Suggested {
        gpu_memory_utilization: Some(util),
        max_model_len: Some(longest),
        max_num_batched_tokens: smaller.then_some(t),
        max_num_seqs: smaller.then_some(q),
        kv_cache_memory_bytes: opts
            .version
            .has_kv_cache_memory_bytes()
            .then_some(kv / crate::units::MIB * crate::units::MIB),
        flags: flags.join(" "),
    }
}

/// KV bytes one request of `len` tokens holds on a GPU with `layers` of the model's layers.
fn request_bytes(arch: &arch::Arch, layers: u64, len: u64, tp: u64, element: u64) -> u64 {
    let all = arch.kv_bytes_for_request(len, tp, element);
    if layers >= arch.layers {
        return all;
    }
    (all as u128 * layers as u128).div_ceil(arch.layers.max(1) as u128) as u64
}

/// The longest request (at most `len`, whole blocks) whose KV fits in `kv` bytes on a GPU
/// holding `layers` layers.
fn longest_request(
    arch: &arch::Arch,
    layers: u64,
    kv: u64,
    tp: u64,
    element: u64,
    len: u64,
) -> u64 {
    let fits = |l: u64| request_bytes(arch, layers, l, tp, element) <= kv;
    if fits(len) {
        return len;
    }
    let (mut lo, mut hi) = (0u64, len);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo / vllm::BLOCK_TOKENS * vllm::BLOCK_TOKENS
}
