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
/// Parts of a name refused even under an allowed prefix: variables that make a library load
/// code (`CUDA_INJECTION64_PATH`, `NCCL_NET_PLUGIN`, `NCCL_TUNER_PLUGIN`…).
const ENV_REFUSED_PARTS: &[&str] = &["INJECTION", "PLUGIN", "PRELOAD", "LIBRARY"];
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
    if let Some(part) = ENV_REFUSED_PARTS.iter().find(|p| name.contains(*p)) {
        return Some(format!(
            "environment variable {name:?} makes a library load code ({part}); a scenario may not set it (see docs/security.md)"
        ));
    }
    None
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
