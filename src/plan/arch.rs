//! A model's architecture from its `config.json` (Hugging Face Transformers' layout), as far
//! as memory needs it: layers, attention kind (multi-head / grouped-query, or DeepSeek's
//! multi-head latent attention), sliding-window layers, and the KV cache's bytes per token.
//! Untrusted input: bounded read, typed errors naming the file and the key to fix.

use serde_json::Value;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Largest config.json read (real ones are a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    #[error("{path}: not JSON ({reason})")]
    NotJson { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    Field { path: PathBuf, reason: String },
}

/// How the KV cache stores one layer's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Attention {
    /// Keys and values per KV head (multi-head and grouped-query attention).
    Gqa { kv_heads: u64, head_dim: u64 },
    /// One compressed latent plus the rotary key part, shared by all heads and not split by
    /// tensor parallelism (DeepSeek-V2/V3: `kv_lora_rank + qk_rope_head_dim`).
    Mla {
        kv_lora_rank: u64,
        qk_rope_head_dim: u64,
    },
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Arch {
    /// `architectures[0]`, else `model_type`.
    pub name: String,
    pub layers: u64,
    /// Layers that keep only the last `sliding_window` tokens.
    pub sliding_layers: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u64>,
    pub attention: Attention,
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub vocab_size: u64,
    /// `max_position_embeddings`: vLLM's default `--max-model-len`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_position_embeddings: Option<u64>,
    /// Bytes of one element in the model's own dtype (`torch_dtype`; 2 when absent or fp32,
    /// which vLLM serves in 16 bits by default).
    pub dtype_bytes: u64,
    /// Positions and width of vLLM's rotary cos/sin cache (see [`Arch::rotary_cache_bytes`]).
    pub rotary_positions: u64,
    pub rotary_dim: u64,
}

impl Arch {
    /// KV elements one layer stores per token, on one GPU of `tp`.
    pub fn elements_per_layer(&self, tp: u64) -> u64 {
        match self.attention {
            // KV heads split over the GPUs; replicated where there are fewer than GPUs
            // (vLLM's QKVParallelLinear).
            Attention::Gqa { kv_heads, head_dim } => {
                2 * kv_heads.div_ceil(tp.max(1)).max(1) * head_dim
            }
            Attention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
            } => kv_lora_rank + qk_rope_head_dim,
        }
    }

    /// vLLM's rotary embedding keeps a `cos_sin_cache` buffer of `[max_position,
    /// rotary_dim]` in the model's dtype, built when the model is created (`RotaryEmbedding`,
    /// vllm/model_executor/layers/rotary_embedding.py; one per model, `get_rope` caches it)
    /// and on every GPU: it is in the "weights" vLLM reports after loading. 32 MiB for
    /// Llama-3.1-8B (131072 positions x 128 x 2 bytes): vllm#10517 prints 14.99 GiB loaded
    /// where the checkpoint holds 14.96 GiB, vllm#10511 14.96 for Llama-3-8B (8192 positions).
    pub fn rotary_cache_bytes(&self) -> u64 {
        self.rotary_positions * self.rotary_dim * self.dtype_bytes
    }

    /// KV bytes per token, every layer, on one GPU of `tp` (`tp = 1`: the whole model).
    pub fn kv_bytes_per_token(&self, tp: u64, element_bytes: u64) -> u64 {
        self.layers * self.elements_per_layer(tp) * element_bytes
    }

    /// KV bytes one request of `len` tokens holds on one GPU: full layers hold every
    /// token, sliding-window layers at most the window.
    pub fn kv_bytes_for_request(&self, len: u64, tp: u64, element_bytes: u64) -> u64 {
        let per = self.elements_per_layer(tp) * element_bytes;
        let full = self.layers - self.sliding_layers;
        let window = self.sliding_window.map_or(len, |w| w.min(len));
        full * per * len + self.sliding_layers * per * window
    }
}

/// Read `dir/config.json`.
pub fn read(dir: &Path) -> Result<Arch, ConfigError> {
    let path = dir.join("config.json");
    let text = crate::input::read_text(&path, MAX_CONFIG_BYTES, "config.json files")?;
    let root: Value = serde_json::from_str(&text).map_err(|e| ConfigError::NotJson {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    parse(&root).map_err(|reason| ConfigError::Field { path, reason })
}

fn int(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// The architecture of a parsed config.json (multimodal configs: their `text_config`).
pub fn parse(root: &Value) -> Result<Arch, String> {
    if !root.is_object() {
        return Err("not a JSON object".into());
    }
    let c = root
        .get("text_config")
        .filter(|t| t.get("num_hidden_layers").is_some())
        .unwrap_or(root);
    let need = |key: &str| {
        int(c, key).filter(|n| *n > 0).ok_or_else(|| {
            format!("no positive integer {key:?} (a Transformers config.json names it)")
        })
    };
    let layers = need("num_hidden_layers")?;
    if layers > 10_000 {
        return Err(format!("num_hidden_layers {layers} is not a real model"));
    }
    let heads = need("num_attention_heads")?;
    let hidden_size = need("hidden_size")?;
    let attention = match int(c, "kv_lora_rank") {
        Some(rank) if rank > 0 => Attention::Mla {
            kv_lora_rank: rank,
            qk_rope_head_dim: need("qk_rope_head_dim")?,
        },
        _ => Attention::Gqa {
            kv_heads: int(c, "num_key_value_heads")
                .filter(|n| *n > 0)
                .unwrap_or(heads),
            head_dim: int(c, "head_dim")
                .filter(|n| *n > 0)
                .unwrap_or(hidden_size / heads),
        },
    };
    let (sliding_layers, sliding_window) = sliding(c, layers)?;
    let max_position_embeddings = int(c, "max_position_embeddings");
    let rotary_dim = match attention {
        Attention::Gqa { head_dim, .. } => {
            let f = c
                .get("partial_rotary_factor")
                .and_then(Value::as_f64)
                .filter(|f| *f > 0.0 && *f <= 1.0)
                .unwrap_or(1.0);
            (head_dim as f64 * f) as u64
        }
        Attention::Mla {
            qk_rope_head_dim, ..
        } => qk_rope_head_dim,
    };
    let rotary_positions = rotary_positions(c, max_position_embeddings.unwrap_or(0));
    let model_type = c
        .get("model_type")
        .or_else(|| root.get("model_type"))
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let name = root
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .unwrap_or(model_type);
    let dtype = c
        .get("torch_dtype")
        .or_else(|| c.get("dtype"))
        .or_else(|| root.get("torch_dtype"))
        .and_then(Value::as_str)
        .unwrap_or("bfloat16");
    Ok(Arch {
        name: crate::term::clean_text(&name.chars().take(80).collect::<String>()),
        layers,
        sliding_layers,
        sliding_window,
        attention,
        hidden_size,
        intermediate_size: int(c, "intermediate_size").unwrap_or(4 * hidden_size),
        vocab_size: int(c, "vocab_size").unwrap_or(0),
        max_position_embeddings,
        dtype_bytes: if dtype == "float64" { 8 } else { 2 },
        rotary_positions,
        rotary_dim,
    })
}

/// Positions of vLLM's rotary cache (`get_rope`): `max_position_embeddings`, times the
/// `rope_scaling` factor for the `linear` and `dynamic` kinds, and
/// `original_max_position_embeddings` times the factor for `yarn` (their
/// `_compute_cos_sin_cache`); `llama3` and the rest keep `max_position_embeddings`. Bounded
/// (16 Mi positions) so that a hostile config cannot inflate the figure without end.
fn rotary_positions(c: &Value, max_position: u64) -> u64 {
    let scaling = c.get("rope_scaling").filter(|v| v.is_object());
    let kind = scaling
        .and_then(|s| s.get("rope_type").or_else(|| s.get("type")))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let factor = scaling
        .and_then(|s| s.get("factor"))
        .and_then(Value::as_f64)
        .filter(|f| f.is_finite() && *f >= 1.0 && *f <= 1024.0)
        .unwrap_or(1.0);
    let n = match kind {
        "linear" | "dynamic" => max_position as f64 * factor,
        "yarn" => {
            let original = scaling
                .and_then(|s| int(s, "original_max_position_embeddings"))
                .unwrap_or(max_position);
            original as f64 * factor
        }
        _ => max_position as f64,
    };
    (n as u64).min(1 << 24)
}

/// Sliding-window layers and the window: `layer_types` where the config lists them
/// (Transformers ≥ 4.53: `sliding_attention` / `full_attention`), else Gemma-2's
/// alternation (even layers slide), Gemma-3's `sliding_window_pattern` (every Nth layer
/// is global), else every layer when `sliding_window` is set and `use_sliding_window`
/// is not false (Mistral-7B-v0.1; Qwen2 ships it false).
fn sliding(c: &Value, layers: u64) -> Result<(u64, Option<u64>), String> {
    let Some(window) = int(c, "sliding_window").filter(|w| *w > 0) else {
        return Ok((0, None));
    };
    if let Some(types) = c.get("layer_types").and_then(Value::as_array) {
        if types.len() as u64 != layers {
            return Err(format!(
                "layer_types lists {} layers, num_hidden_layers says {layers}",
                types.len()
            ));
        }
        let n = types
            .iter()
            .filter(|t| t.as_str() == Some("sliding_attention"))
            .count() as u64;
        return Ok((n, (n > 0).then_some(window)));
    }
    if c.get("use_sliding_window").and_then(Value::as_bool) == Some(false) {
        return Ok((0, None));
    }
    let model_type = c.get("model_type").and_then(Value::as_str).unwrap_or("");
    let n = if model_type == "gemma2" {
        layers.div_ceil(2)
    } else if let Some(p) = int(c, "sliding_window_pattern").filter(|p| *p > 0) {
        layers - layers / p
    } else {
        layers
    };
    Ok((n, Some(window)))
}
