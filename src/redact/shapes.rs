//! Secret shapes recognised by their form, whatever flag or name carries them: vendor token
//! formats (regular expressions after gitleaks' rule set, `config/gitleaks.toml`, rule ids in
//! the comments), PEM private keys, and the general rule — an opaque, high-entropy word that
//! starts with a known vendor prefix. docs/security.md lists each shape with its source.

use regex::Regex;
use std::sync::LazyLock;

/// Vendor formats found anywhere in a text (not only at a word start), each as gitleaks
/// writes it (widened where a vendor's length varies).
static VENDOR_SHAPES: LazyLock<Regex> = LazyLock::new(|| {
    let shapes = [
        // gcp-api-key
        r"AIza[0-9A-Za-z_-]{35}[0-9A-Za-z_-]*",
        // npm-access-token
        r"\bnpm_[A-Za-z0-9]{36}",
        // stripe-access-token (secret and restricted keys; `pk_` publishable keys are public)
        r"\b[sr]k_(?:live|test|prod)_[A-Za-z0-9]{10,99}",
        // sendgrid-api-token: SG.<22>.<43>
        r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}",
        // databricks-api-token
        r"\bdapi[0-9a-f]{32}(?:-[0-9])?",
        // github-pat, github-oauth, github-app-token, github-refresh-token
        r"\bgh[pousr]_[0-9A-Za-z]{36}",
        // github-fine-grained-pat
        r"\bgithub_pat_[0-9A-Za-z_]{22,}",
        // slack-bot-token, slack-user-token, slack-legacy-*, slack-app-token
        r"\bxox[bpaser]-[0-9A-Za-z-]{10,}",
        r"\bxapp-[0-9]-[0-9A-Za-z-]{10,}",
        // aws-access-token
        r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b",
        // huggingface-access-token, huggingface-organization-api-token
        r"\bhf_[A-Za-z0-9]{30,}",
        r"\bapi_org_[A-Za-z0-9]{30,}",
        // openai-api-key (project, service-account, admin and legacy keys), anthropic-api-key;
        // a legacy key has no dashes, so package names (`sk-learn-…`) do not match
        r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}",
        r"\bsk-ant-(?:api|admin)[0-9]{2}-[A-Za-z0-9_-]{20,}",
        r"\bsk-[A-Za-z0-9]{32,}",
        // gitlab-pat, gitlab-deploy-token, gitlab-runner-authentication-token
        r"\bgl(?:pat|dt|rt)-[0-9A-Za-z_-]{20,}",
        // pypi-upload-token
        r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",
    ];
    // The shapes are constants: a failure here is a bug caught by every test.
    Regex::new(&shapes.join("|")).expect("vendor shapes compile")
});

/// A PEM private key (`-----BEGIN [RSA |EC |OPENSSH |ENCRYPTED ]PRIVATE KEY-----` …
/// `-----END … PRIVATE KEY-----`; gitleaks' `private-key`), or its beginning up to the end of
/// the text when the end line is missing (cut by a length limit).
static PEM_PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----|\z)",
    )
    .expect("PEM shape compiles")
});

/// Prefixes of opaque vendor tokens for the general rule ([`is_vendor_token`]): a word that
/// starts with one and goes on with a long, high-entropy body is a credential even when its
/// exact format changed or is not in [`VENDOR_SHAPES`].
const VENDOR_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxs-",
    "xoxe-",
    "xapp-",
    "AKIA",
    "ASIA",
    "hf_",
    "api_org_",
    "sk-",
    "glpat-",
    "gldt-",
    "glrt-",
    "npm_",
    "pypi-",
    "AIza",
    "SG.",
    "dapi",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "rk_test_",
    "shpat_",
    "shpss_",
    "dop_v1_",
    "glsa_",
    "xkeysib-",
    "lin_api_",
    "ya29.",
];

/// Shortest body (after the prefix) the general rule considers.
const MIN_BODY: usize = 16;
/// Least Shannon entropy, bits per character, of a body the general rule redacts: random
/// base62 runs of 16+ characters score 3.5–4; words and version strings score lower.
const MIN_ENTROPY: f64 = 3.0;

/// Shannon entropy of `s`, bits per character.
fn entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in s.bytes() {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / n;
            -p * p.log2()
        })
        .sum()
}

/// `sk-learn-intelex-2024`, `hf_hub_download`: a name made of words (parts separated by `-`
/// or `_`, each all lowercase letters or all digits), not a token.
pub(super) fn made_of_words(body: &str) -> bool {
    body.contains(['-', '_'])
        && body.split(['-', '_']).all(|w| {
            w.bytes().all(|b| b.is_ascii_lowercase()) || w.bytes().all(|b| b.is_ascii_digit())
        })
}

/// The general rule: `word` starts with a vendor prefix and its body is a long run of token
/// characters with high entropy (`ghs_` + 36 random characters, `xoxe-…`), not a word or a
/// name (`sk-learn`, `hf_transfer`).
pub(super) fn is_vendor_token(word: &str) -> bool {
    VENDOR_PREFIXES.iter().any(|p| {
        word.strip_prefix(p).is_some_and(|body| {
            body.len() >= MIN_BODY
                && !made_of_words(body)
                && body
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'='))
                && body.bytes().any(|b| b.is_ascii_digit())
                && entropy(body) >= MIN_ENTROPY
        })
    })
}

/// Vendor token formats and PEM private keys in `s` replaced by `redacted`.
pub(super) fn redact_shapes(s: &str, redacted: &str) -> String {
    let s = if s.contains("PRIVATE KEY") {
        PEM_PRIVATE_KEY.replace_all(s, redacted).into_owned()
    } else {
        s.to_string()
    };
    VENDOR_SHAPES.replace_all(&s, redacted).into_owned()
}

/// `Bearer TOKEN` inside one string (a stderr line, a header value): the scheme kept, the
/// token replaced when it looks like a credential ([`looks_like_credential`]).
static BEARER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer)([ \t]+)([A-Za-z0-9._~+/=-]{8,})").expect("bearer shape compiles")
});

/// What follows `Bearer` is a credential, not prose (`Bearer token expired`): at least 8
/// characters, not all lowercase letters.
pub(super) fn looks_like_credential(w: &str) -> bool {
    let w = w.trim_matches(|c: char| matches!(c, '"' | '\'' | ',' | ';' | ')' | ']' | '}'));
    w.len() >= 8 && !w.bytes().all(|b| b.is_ascii_lowercase()) && !w.starts_with('-')
}

/// `Bearer TOKEN` in `s` with the token replaced by `redacted`.
pub(super) fn redact_bearer(s: &str, redacted: &str) -> String {
    if !s.to_ascii_lowercase().contains("bearer") {
        return s.to_string();
    }
    BEARER
        .replace_all(s, |c: &regex::Captures| {
            if looks_like_credential(&c[3]) {
                format!("{}{}{redacted}", &c[1], &c[2])
            } else {
                c[0].to_string()
            }
        })
        .into_owned()
}

/// Whether `s` holds the start of a PEM private key.
pub(super) fn has_private_key(s: &str) -> bool {
    s.contains(super::PEM_HEADER) && s.contains("PRIVATE KEY")
}

/// Programs whose `-p` option carries a password: the MySQL / MariaDB clients (`-pPASS`,
/// attached; a bare `-p` prompts) and `sshpass` (`-pPASS` or `-p PASS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PasswordFlag {
    /// `-p` with the password attached only.
    Attached,
    /// `-p` with the password attached or as the next argument.
    AttachedOrNext,
}

/// The [`PasswordFlag`] convention of the program `arg` names (a path or a bare name).
pub(super) fn password_flag_of(arg: &str) -> Option<PasswordFlag> {
    let name = arg.rsplit('/').next().unwrap_or(arg);
    let mysql = name.starts_with("mysql") || name.starts_with("mariadb");
    if mysql
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Some(PasswordFlag::Attached)
    } else if name == "sshpass" {
        Some(PasswordFlag::AttachedOrNext)
    } else {
        None
    }
}
