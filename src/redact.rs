//! Redaction: the one function every output goes through before a command line or an
//! environment value is shown. Environment values appear only for an allow-list of GPU- and
//! framework-related prefixes; anything that looks like a secret is replaced by «redacted».

/// What replaces a secret.
pub const REDACTED: &str = "«redacted»";

/// Environment variable prefixes whose values may be shown.
pub const ENV_ALLOW_PREFIXES: &[&str] = &[
    "CUDA_",
    "NCCL_",
    "PYTORCH_",
    "TORCH_",
    "VLLM_",
    "ONEFLOW_",
    "NVIDIA_",
    "HIP_",
    "ROCR_",
    "TF_",
    "XLA_",
    "JAX_",
    "OMP_",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "MASTER_PORT",
];

fn name_is_secret(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n.contains("TOKEN")
        || n.contains("SECRET")
        || n.contains("PASSWORD")
        || n.contains("PASSWD")
        || n.ends_with("_KEY")
        || n == "KEY"
        || n.contains("API_KEY")
        || n.contains("CREDENTIAL")
        || n.contains("AUTH")
        || n.contains("PRIVATE")
        || n.contains("COOKIE")
        || n.contains("SESSION")
}

/// Whether a URL-ish value carries credentials (`scheme://user:pass@host`).
fn has_url_credentials(v: &str) -> bool {
    if let Some(pos) = v.find("://") {
        let rest = &v[pos + 3..];
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        return authority.contains('@');
    }
    false
}

fn redact_url(v: &str) -> String {
    // Keep scheme and host, drop the userinfo.
    if let Some(pos) = v.find("://") {
        let (scheme, rest) = v.split_at(pos + 3);
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if let Some(at) = authority.rfind('@') {
            return format!("{scheme}{REDACTED}@{}{tail}", &authority[at + 1..]);
        }
    }
    v.to_string()
}

/// Values that look like secrets whatever their name: long opaque tokens with known prefixes.
fn value_looks_secret(v: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "hf_",
        "sk-",
        "ghp_",
        "gho_",
        "github_pat_",
        "xoxb-",
        "xoxp-",
        "AKIA",
        "glpat-",
        "eyJ",
    ];
    PREFIXES.iter().any(|p| v.starts_with(p) && v.len() >= 12)
}

/// One environment variable as it may be shown: `None` when it is not on the allow-list,
/// the value with secrets replaced otherwise.
pub fn redact_env(name: &str, value: &str) -> Option<String> {
    let allowed = ENV_ALLOW_PREFIXES.iter().any(|p| name.starts_with(p));
    if !allowed {
        return None;
    }
    if name_is_secret(name) || value_looks_secret(value) {
        return Some(REDACTED.to_string());
    }
    if has_url_credentials(value) {
        return Some(redact_url(value));
    }
    Some(value.to_string())
}

/// A command line (argv) with secrets replaced: `--token=…`, `--api-key …`, `KEY=…`
/// assignments, URLs with credentials and token-looking values.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            out.push(REDACTED.to_string());
            hide_next = false;
            continue;
        }
        out.push(redact_arg(arg, &mut hide_next));
    }
    out
}

fn redact_arg(arg: &str, hide_next: &mut bool) -> String {
    if let Some(flag) = arg.strip_prefix('-') {
        let flag = flag.trim_start_matches('-');
        if let Some((name, _value)) = flag.split_once('=') {
            if name_is_secret(&name.replace('-', "_")) {
                let dashes = &arg[..arg.len() - flag.len()];
                return format!("{dashes}{name}={REDACTED}");
            }
        } else if name_is_secret(&flag.replace('-', "_")) && !flag.is_empty() {
            *hide_next = true;
            return arg.to_string();
        }
    } else if let Some((name, _)) = arg.split_once('=') {
        // KEY=value assignments (env prefixes, `key=value` options).
        if !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
            && name_is_secret(&name.replace(['-', '.'], "_"))
        {
            return format!("{name}={REDACTED}");
        }
    }
    if value_looks_secret(arg) {
        return REDACTED.to_string();
    }
    if has_url_credentials(arg) {
        return redact_url(arg);
    }
    arg.to_string()
}

/// A command line joined for display, redacted.
pub fn redact_cmdline(args: &[String]) -> String {
    redact_args(args).join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_with_secrets_are_redacted() {
        let out = redact_args(&v(&[
            "python",
            "serve.py",
            "--token=abc123",
            "--api-key",
            "k-999",
            "--model",
            "qwen",
            "HF_TOKEN=hf_abcdefghijklmnop",
            "https://user:pw@example.org/x",
            "--password",
            "p",
        ]));
        let joined = out.join(" ");
        for secret in ["abc123", "k-999", "hf_abcdefghijklmnop", "user:pw", " p "] {
            assert!(!joined.contains(secret), "{secret} leaked in {joined}");
        }
        assert!(joined.contains("--model qwen"));
        assert!(joined.contains("example.org/x"));
        assert_eq!(out[2], format!("--token={REDACTED}"));
    }

    #[test]
    fn env_allow_list_and_secrets() {
        assert_eq!(
            redact_env("CUDA_VISIBLE_DEVICES", "1").as_deref(),
            Some("1")
        );
        assert_eq!(redact_env("HOME", "/root"), None);
        assert_eq!(redact_env("HF_TOKEN", "hf_x"), None);
        assert_eq!(redact_env("VLLM_API_KEY", "x").as_deref(), Some(REDACTED));
        assert_eq!(redact_env("NCCL_SECRET", "x").as_deref(), Some(REDACTED));
        let url = redact_env("TORCH_HUB_URL", "https://u:p@h/x").unwrap();
        assert!(!url.contains("u:p"), "{url}");
    }
}
