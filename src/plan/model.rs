//! A model directory as the Hub ships it: `config.json`, `*.safetensors` (and, for sharded
//! checkpoints, `model.safetensors.index.json`), read without loading a weight: the config
//! for the architecture, each safetensors file's header for the weights' sizes (quantized
//! checkpoints included: their packed dtypes are in the headers).

use super::arch::{self, Arch, ConfigError};
use super::safetensors::{self, HeaderError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Most safetensors files one directory may hold.
pub const MAX_FILES: usize = 10_000;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: no *.safetensors files (plan reads only safetensors checkpoints)")]
    NoWeights(PathBuf),
    #[error("{0}: more than {MAX_FILES} *.safetensors files")]
    TooManyFiles(PathBuf),
    #[error("{index}: names {file}, which is not in the directory (incomplete download?)")]
    MissingShard { index: PathBuf, file: String },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Header(#[from] HeaderError),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Model {
    pub dir: String,
    pub arch: Arch,
    /// `quantization_config.quant_method` (awq, gptq, fp8, ...), when the config has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    pub weights_bytes: u64,
    /// Of which tensors of rank 2 and more, which tensor parallelism splits.
    pub shardable_bytes: u64,
    pub files: usize,
    pub tensors: usize,
    /// Bytes read from the safetensors files (their headers).
    pub header_bytes_read: u64,
    pub weights_by_dtype: BTreeMap<String, u64>,
    /// `(bytes, shardable bytes)` per decoder layer (pipeline parallelism places layers).
    #[serde(skip)]
    pub by_layer: BTreeMap<u64, (u64, u64)>,
    /// `(bytes, shardable bytes)` of the input embeddings (the first pipeline stage's).
    #[serde(skip)]
    pub embeddings: (u64, u64),
}

impl Model {
    /// One GPU's share of the weights at `tp`: matrices split, vectors (norms, biases)
    /// replicated.
    pub fn weights_per_gpu(&self, tp: u64) -> u64 {
        let tp = tp.max(1);
        self.shardable_bytes.div_ceil(tp) + (self.weights_bytes - self.shardable_bytes)
    }

    /// One GPU's share of the weights on pipeline stage `stage` of `pp` at `tp`: its decoder
    /// layers ([`pp_layers`]), the input embeddings on the first stage, everything else
    /// (final norm, LM head, layers beyond the config's, such as multi-token-prediction
    /// heads) on the last; matrices split by `tp`.
    pub fn weights_per_stage(&self, tp: u64, pp: u64, stage: u64) -> u64 {
        if pp <= 1 {
            return self.weights_per_gpu(tp);
        }
        let tp = tp.max(1);
        let share = |(bytes, sh): (u64, u64)| sh.div_ceil(tp) + (bytes - sh);
        let layers = self.arch.layers;
        let range = pp_layers(layers, pp, stage);
        let mut w: u64 = self.by_layer.range(range).map(|(_, b)| share(*b)).sum();
        if stage == 0 {
            w += share(self.embeddings);
        }
        if stage + 1 == pp {
            let placed = self
                .by_layer
                .range(0..layers)
                .fold((0u64, 0u64), |a, (_, b)| (a.0 + b.0, a.1 + b.1));
            let rest = (
                self.weights_bytes - placed.0 - self.embeddings.0,
                self.shardable_bytes - placed.1 - self.embeddings.1,
            );
            w += share(rest);
        }
        w
    }
}

/// The decoder layers pipeline stage `stage` of `pp` holds: `layers / pp` each, the
/// remainder one each to the stages before the last (vLLM's `get_pp_indices`,
/// vllm/distributed/utils.py, without `VLLM_PP_LAYER_PARTITION`).
pub fn pp_layers(layers: u64, pp: u64, stage: u64) -> std::ops::Range<u64> {
    let pp = pp.max(1);
    let base = layers / pp;
    let rem = layers % pp;
    // Partitions pp-2, pp-3, ... (rem of them) get one more.
    let size = |s: u64| base + u64::from(s + 1 < pp && s + 1 + rem >= pp);
    let start: u64 = (0..stage).map(size).sum();
    start..start + size(stage)
}

/// Read `dir`.
pub fn read(dir: &Path) -> Result<Model, ModelError> {
    let dir_err = |source| ModelError::Dir {
        path: dir.to_path_buf(),
        source,
    };
    let arch = arch::read(dir)?;
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(dir_err)? {
        let e = e.map_err(dir_err)?;
        let name = e.file_name();
        if name.to_string_lossy().ends_with(".safetensors") {
            files.push(e.path());
            if files.len() > MAX_FILES {
                return Err(ModelError::TooManyFiles(dir.to_path_buf()));
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(ModelError::NoWeights(dir.to_path_buf()));
    }
    check_index(dir, &files)?;
    let mut m = Model {
        dir: crate::term::clean_text(&dir.display().to_string()),
        quantization: quantization(dir),
        arch,
        weights_bytes: 0,
        shardable_bytes: 0,
        files: files.len(),
        tensors: 0,
        header_bytes_read: 0,
        weights_by_dtype: BTreeMap::new(),
        by_layer: BTreeMap::new(),
        embeddings: (0, 0),
    };
    for f in &files {
        let s = safetensors::read_header(f)?;
        m.weights_bytes += s.tensor_bytes;
        m.shardable_bytes += s.shardable_bytes;
        m.tensors += s.tensors;
        m.header_bytes_read += s.header_bytes_read;
        for (k, v) in s.by_dtype {
            *m.weights_by_dtype.entry(k).or_default() += v;
        }
        for (l, (b, sh)) in s.by_layer {
            let e = m.by_layer.entry(l).or_default();
            e.0 += b;
            e.1 += sh;
        }
        m.embeddings.0 += s.embeddings.0;
        m.embeddings.1 += s.embeddings.1;
    }
    Ok(m)
}

/// Every shard `model.safetensors.index.json` names must be there.
fn check_index(dir: &Path, files: &[PathBuf]) -> Result<(), ModelError> {
    let index = dir.join("model.safetensors.index.json");
    if !index.exists() {
        return Ok(());
    }
    let text = crate::input::read_text(&index, 64 << 20, "safetensors index files")
        .map_err(|e| ModelError::Config(e.into()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        ModelError::Config(ConfigError::NotJson {
            path: index.clone(),
            reason: e.to_string(),
        })
    })?;
    let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) else {
        return Ok(());
    };
    for file in map.values().filter_map(|f| f.as_str()) {
        if !files
            .iter()
            .any(|p| p.file_name().is_some_and(|n| n == file))
        {
            return Err(ModelError::MissingShard {
                index,
                file: crate::term::clean_text(&file.chars().take(120).collect::<String>()),
            });
        }
    }
    Ok(())
}

fn quantization(dir: &Path) -> Option<String> {
    let text = crate::input::read_text(
        &dir.join("config.json"),
        arch::MAX_CONFIG_BYTES,
        "config.json files",
    )
    .ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let q = v
        .get("quantization_config")?
        .get("quant_method")?
        .as_str()?;
    Some(crate::term::clean_text(
        &q.chars().take(32).collect::<String>(),
    ))
}
