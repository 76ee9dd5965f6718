//! Safetensors headers, read without the weights: an 8-byte little-endian header length,
//! then that many bytes of JSON naming each tensor's dtype, shape and byte range
//! (huggingface/safetensors, "Format"). Only the header is read; the file's length is
//! checked against the last byte range, so a truncated download is refused too. Untrusted
//! input: the header is bounded ([`MAX_HEADER_BYTES`]), every tensor's shape must match
//! its byte range, every range must lie inside the file, and errors name the file.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Largest header read: the format's own limit (100 MB, `MAX_HEADER_SIZE` of
/// huggingface/safetensors' Rust crate). Headers of real checkpoints are kilobytes.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;
/// Most tensors one header may declare (DeepSeek-V3's largest shard has under 2,000).
pub const MAX_TENSORS: usize = 1_000_000;

#[derive(Debug, Error)]
pub enum HeaderError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a safetensors file: {reason}")]
    Malformed { path: PathBuf, reason: String },
}

/// One file's tensors, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileSummary {
    /// Bytes of every tensor's data.
    pub tensor_bytes: u64,
    /// Bytes of tensors of rank 2 and more (the ones tensor parallelism shards).
    pub shardable_bytes: u64,
    pub tensors: usize,
    /// Bytes read from the file (8 + the header).
    pub header_bytes_read: u64,
    /// Tensor bytes by dtype (`BF16`, `F8_E4M3`, `I32`, ...).
    pub by_dtype: BTreeMap<String, u64>,
    /// `(bytes, shardable bytes)` of each decoder layer's tensors (`....layers.N.`), which
    /// pipeline parallelism places by layer.
    pub by_layer: BTreeMap<u64, (u64, u64)>,
    /// `(bytes, shardable bytes)` of the input embeddings (`embed_tokens`), on the first
    /// pipeline stage.
    pub embeddings: (u64, u64),
}

/// The decoder layer a tensor belongs to: the number after `.layers.` (or `layers.` at the
/// start), bounded.
pub fn layer_of(name: &str) -> Option<u64> {
    let i = if name.starts_with("layers.") {
        0
    } else {
        name.find(".layers.")? + 1
    };
    let digits: String = name[i + "layers.".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .take(6)
        .collect();
    digits.parse().ok()
}

/// Bits per element of a safetensors dtype (the `Dtype` enum of huggingface/safetensors).
fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" | "C64" => 64,
        _ => return None,
    })
}

/// Read and check `path`'s header.
pub fn read_header(path: &Path) -> Result<FileSummary, HeaderError> {
    let io = |source| HeaderError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bad = |reason: String| HeaderError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    let (file, meta) = crate::input::open_regular(path).map_err(|e| bad(e.to_string()))?;
    let file_len = meta.len();
    let mut file = file;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(|_| {
        bad(format!(
            "{file_len} bytes, shorter than the 8-byte header length"
        ))
    })?;
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER_BYTES {
        return Err(bad(format!(
            "header length {n} is over the format's {MAX_HEADER_BYTES}-byte limit"
        )));
    }
    if n.saturating_add(8) > file_len {
        return Err(bad(format!(
            "header length {n} runs past the end of the {file_len}-byte file"
        )));
    }
    let mut json = Vec::with_capacity(n as usize);
    file.by_ref().take(n).read_to_end(&mut json).map_err(io)?;
    let header: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&json)
        .map_err(|e| bad(format!("header is not a JSON object ({e})")))?;
    if header.len() > MAX_TENSORS {
        return Err(bad(format!("more than {MAX_TENSORS} tensors")));
    }
    let data_len = file_len - 8 - n;
    let mut s = FileSummary {
        header_bytes_read: 8 + n,
        ..FileSummary::default()
    };
    let mut end_max = 0u64;
    for (name, v) in &header {
        if name == "__metadata__" {
            continue;
        }
        let shown = crate::term::clean_text(name.chars().take(80).collect::<String>().as_str());
        let t = tensor(v).map_err(|r| bad(format!("tensor {shown:?}: {r}")))?;
        if t.end > data_len {
            return Err(bad(format!(
                "tensor {shown:?} ends at byte {} of a {data_len}-byte data section (truncated file?)",
                t.end
            )));
        }
        end_max = end_max.max(t.end);
        s.tensor_bytes += t.bytes;
        if t.rank >= 2 {
            s.shardable_bytes += t.bytes;
        }
        let sh = if t.rank >= 2 { t.bytes } else { 0 };
        if let Some(l) = layer_of(name) {
            let e = s.by_layer.entry(l).or_default();
            e.0 += t.bytes;
            e.1 += sh;
        } else if name.contains("embed_tokens") {
            s.embeddings.0 += t.bytes;
            s.embeddings.1 += sh;
        }
        *s.by_dtype.entry(t.dtype).or_default() += t.bytes;
        s.tensors += 1;
    }
    if end_max != data_len {
        return Err(bad(format!(
            "tensors cover {end_max} bytes of a {data_len}-byte data section"
        )));
    }
    Ok(s)
}

struct Tensor {
    dtype: String,
    rank: usize,
    bytes: u64,
    end: u64,
}

fn tensor(v: &serde_json::Value) -> Result<Tensor, String> {
    let dtype = v.get("dtype").and_then(|d| d.as_str()).ok_or("no dtype")?;
    let bits = dtype_bits(dtype).ok_or_else(|| {
        format!(
            "unknown dtype {:?}",
            crate::term::clean_text(&dtype.chars().take(16).collect::<String>())
        )
    })?;
    let shape = v
        .get("shape")
        .and_then(|s| s.as_array())
        .ok_or("no shape")?;
    let mut elements: u64 = 1;
    for d in shape {
        let d = d
            .as_u64()
            .ok_or("a dimension is not a non-negative integer")?;
        elements = elements.checked_mul(d).ok_or("shape overflows")?;
    }
    let offsets = v
        .get("data_offsets")
        .and_then(|o| o.as_array())
        .filter(|o| o.len() == 2)
        .ok_or("no [begin, end] data_offsets")?;
    let (Some(begin), Some(end)) = (offsets[0].as_u64(), offsets[1].as_u64()) else {
        return Err("data_offsets are not non-negative integers".into());
    };
    if begin > end {
        return Err(format!("data_offsets [{begin}, {end}] run backwards"));
    }
    let want = elements
        .checked_mul(bits)
        .ok_or("shape overflows")?
        .div_ceil(8);
    if end - begin != want {
        return Err(format!(
            "shape {shape:?} of {dtype} is {want} bytes but data_offsets span {}",
            end - begin
        ));
    }
    Ok(Tensor {
        dtype: dtype.to_string(),
        rank: shape.len(),
        bytes: want,
        end,
    })
}
