//! The recogniser: one table of sourced patterns ([`table::PATTERNS`]) for the failure lines
//! of every stack vramdoc reads — PyTorch (CUDA and ROCm/HIP builds), TensorFlow, JAX/XLA,
//! NCCL, vLLM, SGLang, text-generation-inference, llama.cpp/ggml (and Ollama, which prints
//! them), TensorRT, TensorRT-LLM, ONNX Runtime, PaddlePaddle, MXNet, torchrun,
//! cuBLAS/cuDNN/cuSOLVER, the CUDA runtime — and
//! the numbers each line states ([`Facts`]). One entry per pattern: framework, versions,
//! stream, an example line, its public source, what it extracts. Recognising is recording,
//! not diagnosing: `record::stderr` turns a match into an event, `diagnose/` judges it.
//! Multi-line forms (NCCL's `Last error:` block, torchrun's failure table) are read as
//! bounded blocks by `record::stderr::StderrWatcher`.

mod extract;
mod oom;
mod runtimes;
pub mod table;

pub use extract::{bfc_stats, bfc_suffix, size_at, size_token};
pub use oom::{oom_detail, OomDetail};

use crate::model::RunErrorKind;
use aho_corasick::AhoCorasick;
use std::sync::LazyLock;

/// Where a framework prints the line (informational: recognition is stream-agnostic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stderr,
    Stdout,
    /// Either, depending on the logger's configuration.
    Either,
}

/// The numbers one line states (`None`: the line does not say).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The CUDA ordinal the line names (`GPU 0`, `cuda:1`, `device ordinal 0`, `[3]`).
    pub device: Option<u32>,
    /// Bytes the failed allocation (or the engine's claim) asked for.
    pub requested: Option<u64>,
    /// The device's (or the allocator's) capacity as the framework saw it.
    pub total: Option<u64>,
    /// Free memory the line states.
    pub free: Option<u64>,
    /// An exit code (negative: the signal that killed a rank).
    pub exit_code: Option<i32>,
}

/// One recognised failure line: framework, versions, where it comes from, what it means.
#[derive(Debug)]
pub struct Pattern {
    /// Stable id (kebab-case), unique in the table.
    pub id: &'static str,
    /// The framework or library that prints it.
    pub framework: Framework,
    /// Versions known to print this wording.
    pub versions: &'static str,
    pub stream: Stream,
    /// A real line of this form (trimmed), checked by the table's own tests.
    pub example: &'static str,
    /// The public source of the wording (issue or code URL).
    pub source: &'static str,
    /// What the line is recorded as.
    pub kind: RunErrorKind,
    /// Substrings, any of which a line must hold to be tried (the cheap pre-filter).
    pub keys: &'static [&'static str],
    /// Whether the line is this pattern (called only on lines holding a key).
    pub matches: fn(&str) -> bool,
    /// What it extracts, in words (docs and `--explain`).
    pub extracts: &'static str,
    pub extract: fn(&str) -> Facts,
}

/// The frameworks of the table; each has its own fix text in `diagnose::fixes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    PyTorch,
    TensorFlow,
    Jax,
    Nccl,
    Vllm,
    Sglang,
    LlamaCpp,
    TensorRt,
    Torchrun,
    CudaLibraries,
    CudaRuntime,
    /// A training loop that catches an out-of-memory error and goes on (fairseq, metaseq).
    Recovering,
    PaddlePaddle,
    /// Hugging Face text-generation-inference.
    Tgi,
    TensorRtLlm,
    /// ONNX Runtime's CUDA execution provider.
    OnnxRuntime,
    Mxnet,
}

impl Framework {
    pub fn name(self) -> &'static str {
        match self {
            Framework::PyTorch => "PyTorch",
            Framework::TensorFlow => "TensorFlow",
            Framework::Jax => "JAX/XLA",
            Framework::Nccl => "NCCL",
            Framework::Vllm => "vLLM",
            Framework::Sglang => "SGLang",
            Framework::LlamaCpp => "llama.cpp/ggml",
            Framework::TensorRt => "TensorRT",
            Framework::Torchrun => "torchrun",
            Framework::CudaLibraries => "cuBLAS/cuDNN",
            Framework::CudaRuntime => "the CUDA runtime",
            Framework::Recovering => "a training loop that recovers from OOM",
            Framework::PaddlePaddle => "PaddlePaddle",
            Framework::Tgi => "text-generation-inference",
            Framework::TensorRtLlm => "TensorRT-LLM",
            Framework::OnnxRuntime => "ONNX Runtime",
            Framework::Mxnet => "MXNet",
        }
    }
}

/// A line matched against the table.
#[derive(Debug, Clone)]
pub struct Recognised {
    pub pattern: &'static Pattern,
    pub facts: Facts,
}

/// What the recogniser reads in one error line, once, when it is recorded: the pattern it
/// matched (none for a line made by vramdoc itself, such as a replay step's failure), the
/// numbers of a PyTorch out-of-memory line, TensorFlow's BFC figures. The recorded event
/// keeps it, so the timeline rules read these facts instead of parsing the line again.
#[derive(Debug, Clone)]
pub struct LineFacts {
    pub pattern: Option<&'static Pattern>,
    pub detail: Option<OomDetail>,
    /// `(limit, in use)` of TensorFlow's BFC allocator.
    pub bfc: Option<(u64, Option<u64>)>,
}

impl PartialEq for LineFacts {
    fn eq(&self, other: &Self) -> bool {
        let same = match (self.pattern, other.pattern) {
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            (None, None) => true,
            _ => false,
        };
        same && self.detail == other.detail && self.bfc == other.bfc
    }
}

impl LineFacts {
    /// Read `line` (as kept: cleaned, redacted, cut).
    pub fn of(line: &str) -> LineFacts {
        LineFacts {
            pattern: recognise(line).map(|m| m.pattern),
            detail: oom_detail(line),
            bfc: bfc_stats(line),
        }
    }
}

/// Every key of the table, searched at once: a line holding none is not tried.
static KEYS: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
    let keys: Vec<&str> = table::PATTERNS
        .iter()
        .flat_map(|p| p.keys.iter().copied())
        .collect();
    // Leftmost-first: the kind whose search runs the SIMD prefilter (only a yes or no is
    // asked, which every kind answers alike).
    AhoCorasick::builder()
        .match_kind(aho_corasick::MatchKind::LeftmostFirst)
        .build(keys)
        .ok()
});

/// Whether any pattern could match `line` (one pass over the line).
pub fn may_match(line: &str) -> bool {
    match &*KEYS {
        Some(ac) => ac.is_match(line),
        None => true,
    }
}

/// The first pattern of the table that `line` is, with the numbers it states.
pub fn recognise(line: &str) -> Option<Recognised> {
    if !may_match(line) {
        return None;
    }
    table::PATTERNS
        .iter()
        .filter(|p| p.keys.iter().any(|k| line.contains(k)))
        .find(|p| (p.matches)(line))
        .map(|p| Recognised {
            pattern: p,
            facts: (p.extract)(line),
        })
}

/// The pattern with this id.
pub fn pattern(id: &str) -> Option<&'static Pattern> {
    table::PATTERNS.iter().find(|p| p.id == id)
}

#[cfg(test)]
mod tests;
