//! The environment a scenario may set for its worker: an allow-list, because a scenario file
//! arrives with a bug ticket and must not choose what code the worker loads.

use super::{Ctx, ScenarioError};
use std::collections::BTreeMap;
use toml::Spanned;

/// Environment variable prefixes a scenario may set: what a workload's memory behaviour
/// depends on. Everything else (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `PATH`, `PYTHON*`,
/// `VRAMDOC_*`…) is refused: a scenario file arrives with a bug ticket and must not choose
/// what code the worker loads. See docs/security.md.
pub const ENV_ALLOWED_PREFIXES: &[&str] = &[
    "CUDA_", "PYTORCH_", "TORCH_", "NCCL_", "ONEFLOW_", "VLLM_", "TF_", "XLA_", "JAX_",
];
/// Single variables a scenario may set.
pub const ENV_ALLOWED_NAMES: &[&str] = &["OMP_NUM_THREADS", "MKL_NUM_THREADS"];
/// Words (`_`-separated parts) that, anywhere in a name, make it refused even under an
/// allowed prefix: the variable makes a library load code (`CUDA_INJECTION64_PATH`,
/// `NCCL_NET_PLUGIN`), or names a file, a directory, a pipe or a library the worker then
/// writes, creates, connects to or loads (`CUDA_LOG_FILE`, `NCCL_DEBUG_FILE`,
/// `CUDA_MPS_PIPE_DIRECTORY`, `TORCH_EXTENSIONS_DIR`), or makes the driver write a core dump
/// (`CUDA_ENABLE_COREDUMP_ON_EXCEPTION`, `CUDA_COREDUMP_FILE`; NVIDIA's cuda-gdb manual,
/// "GPU core dump support"). A word starting with one of these counts too (`INJECTION64`,
/// `LIBRARIES`, `PLUGINS`, `DIRECTORY`, `FILENAME`, `PATHS`).
const ENV_REFUSED_WORD_STARTS: &[&str] = &[
    "INJECTION",
    "PLUGIN",
    "PRELOAD",
    "LIBRAR",
    "COREDUMP",
    "DIRECTOR",
    "FILE",
    "PATH",
];
/// Words refused exactly (as a word start they would catch `DIRECT`, `LIBERAL`).
const ENV_REFUSED_WORDS: &[&str] = &["LIB", "LIBS", "DIR", "DIRS", "FOLDER", "PIPE", "TMPDIR"];
/// Words refused as the last word of a name: a socket, a home, root or prefix directory, a
/// location (`NCCL_SOCKET_IFNAME` names an interface and stays allowed; `TORCH_HOME`,
/// `VLLM_CACHE_ROOT`, `CUDA_MPS_CONTROL_SOCKET` are refused).
const ENV_REFUSED_LAST_WORDS: &[&str] = &["SOCKET", "SOCK", "HOME", "ROOT", "PREFIX", "OUT"];
/// Names refused one by one: they name a file or directory without saying so in a word
/// (`TORCH_TRACE` is a directory of trace files, `TORCH_LOGS_OUT` a log file: PyTorch's
/// `torch._logging` documentation).
const ENV_REFUSED_NAMES: &[&str] = &["TORCH_TRACE", "TORCH_LOGS_OUT", "XLA_FLAGS"];
/// Prefixes refused whatever else the name says: the dynamic loader's and the interpreter's
/// variables (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `PYTHONPATH`, `PYTHONSTARTUP`), vramdoc's own.
const ENV_REFUSED_PREFIXES: &[&str] = &["LD_", "DYLD_", "PYTHON", "VRAMDOC_"];
/// Longest environment value a scenario may set.
const ENV_MAX_VALUE: usize = 4096;

/// Why a scenario may not set `name`, or `None` when it may.
pub fn env_refusal(name: &str) -> Option<String> {
    let allowed = ENV_ALLOWED_NAMES.contains(&name)
        || ENV_ALLOWED_PREFIXES
            .iter()
            .any(|p| name.starts_with(p) && name.len() > p.len());
    if !allowed {
        return Some(format!(
            "environment variable {name:?} may not be set by a scenario (allowed: {}*, {}; see docs/security.md)",
            ENV_ALLOWED_PREFIXES.join("*, ").trim_end_matches('*'),
            ENV_ALLOWED_NAMES.join(", ")
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Some(format!(
            "environment variable {name:?} is not a plain name (use A-Z, 0-9 and '_')"
        ));
    }
    if let Some(part) = names_a_path(name) {
        return Some(format!(
            "environment variable {name:?} names a file, directory, socket or library, or makes code load ({part}); a scenario may not set it (see docs/security.md)"
        ));
    }
    None
}

/// What in `name` makes it name a file, directory, socket or library (or load code): the
/// refused word, prefix or name; `None` when nothing does.
fn names_a_path(name: &str) -> Option<String> {
    if let Some(p) = ENV_REFUSED_PREFIXES.iter().find(|p| name.starts_with(*p)) {
        return Some(format!("{p}*"));
    }
    if ENV_REFUSED_NAMES.contains(&name) {
        return Some(name.to_string());
    }
    let words: Vec<&str> = name.split('_').filter(|w| !w.is_empty()).collect();
    if let Some(w) = words.iter().find(|w| {
        ENV_REFUSED_WORDS.contains(w) || ENV_REFUSED_WORD_STARTS.iter().any(|r| w.starts_with(r))
    }) {
        return Some(format!("the word {w}"));
    }
    let last = words.last()?;
    ENV_REFUSED_LAST_WORDS
        .contains(last)
        .then(|| format!("ends in {last}"))
}

pub(super) fn checked_env(
    cx: &Ctx,
    env: &BTreeMap<Spanned<String>, Spanned<String>>,
) -> Result<BTreeMap<String, String>, ScenarioError> {
    let mut out = BTreeMap::new();
    for (k, v) in env {
        if let Some(why) = env_refusal(k.get_ref()) {
            return Err(cx.err(k.span(), why));
        }
        let value = v.get_ref();
        if value.contains('\0') || value.len() > ENV_MAX_VALUE {
            return Err(cx.err(
                v.span(),
                format!(
                    "value of {} has a NUL byte or is over {ENV_MAX_VALUE} bytes (write a plain value)",
                    k.get_ref()
                ),
            ));
        }
        out.insert(k.get_ref().clone(), value.clone());
    }
    Ok(out)
}
