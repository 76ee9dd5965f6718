//! Redaction: the one function every output goes through before a command line or an
//! environment value is shown. Environment values appear only for an allow-list of GPU- and
//! framework-related prefixes; anything that looks like a secret is replaced by «redacted».
//! Secrets are found by the name that carries them (here) and by their own form ([`shapes`]:
//! vendor token formats, PEM private keys, high-entropy words with a vendor prefix).

mod shapes;

/// What replaces a secret.
pub const REDACTED: &str = "«redacted»";
/// What every PEM header starts with: a line without it never opens a private key
/// ([`PemLines`]).
pub const PEM_HEADER: &str = "-----BEGIN";

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
    // The GPUs Slurm gave a job (device numbers), read by `diagnose::devset`.
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
];

/// Whether a name (environment variable, flag, header, JSON key, query parameter) names a
/// secret. Separators (`-`, `.`) count as `_`. `TOKENS` / `TOKENIZER` are counts and model
/// names (`--max-num-batched-tokens`, `--tokenizer`), not secrets.
fn name_is_secret(name: &str) -> bool {
    let n = name
        .trim_start_matches(['-', '_'])
        .to_ascii_uppercase()
        .replace(['-', '.'], "_");
    if n.is_empty() {
        return false;
    }
    let token = n.match_indices("TOKEN").any(|(i, _)| {
        let rest = &n[i + 5..];
        !(rest.starts_with('S') || rest.starts_with("IZ"))
    });
    token
        || n.contains("SECRET")
        || n.contains("PASS")
        || n == "PWD"
        || n.ends_with("_PWD")
        || n.split('_').any(|w| w == "PW" || w == "PASSWD")
        || n.contains("KEY")
        || n.contains("CREDENTIAL")
        || n.contains("AUTH")
        || n.contains("PRIVATE")
        || n.contains("COOKIE")
        || n.contains("SESSION")
        || n.contains("SIGNATURE")
        || n == "SIG"
        || n.ends_with("_SIG")
        || n == "JWT"
}

/// Authorization schemes kept in front of a redacted credential (`Bearer «redacted»`).
fn is_auth_scheme(w: &str) -> bool {
    [
        "bearer",
        "basic",
        "token",
        "digest",
        "bot",
        "negotiate",
        "apikey",
    ]
    .iter()
    .any(|s| w.eq_ignore_ascii_case(s))
}

/// Characters of a name in `name=value` / `Name: value`.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// `scheme://user:password@host` → `scheme://«redacted»@host`, for every URL in `s`.
fn redact_urls(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find("://") {
        let (head, tail) = rest.split_at(pos + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>') || c.is_whitespace()
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// JSON or Python-dict pairs whose key names a secret: `"api_key": "v"`, `'token': 'v'`,
/// `"password": 1234` → the value replaced, quotes kept.
fn redact_quoted_pairs(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        let q = b[i];
        if q != b'"' && q != b'\'' {
            i += 1;
            continue;
        }
        let Some(close) = s[i + 1..].find(q as char).map(|k| i + 1 + k) else {
            break;
        };
        let name = &s[i + 1..close];
        let mut j = close + 1;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if j >= b.len() || (b[j] != b':' && b[j] != b'=') || !name_is_secret(name) {
            i = close + 1;
            continue;
        }
        j += 1;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        let (vstart, vend) = if j < b.len() && (b[j] == b'"' || b[j] == b'\'') {
            let vq = b[j];
            let mut k = j + 1;
            while k < b.len() && b[k] != vq {
                k += if b[k] == b'\\' { 2 } else { 1 };
            }
            (j + 1, k.min(b.len()))
        } else {
            let mut k = j;
            while k < b.len()
                && !matches!(b[k], b',' | b'}' | b']' | b')')
                && !b[k].is_ascii_whitespace()
            {
                k += 1;
            }
            (j, k)
        };
        if vend > vstart {
            out.push_str(&s[copied..vstart]);
            out.push_str(REDACTED);
            copied = vend;
        }
        i = vend.max(close + 1);
    }
    out.push_str(&s[copied..]);
    out
}

/// `name=value` (assignments, `key=value` blobs, URL query parameters) and `Name: value`
/// (credential headers) whose name is a secret → the value replaced. An authorization
/// scheme after `:` is kept (`Authorization: Bearer «redacted»`).
fn redact_pairs(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        let sep = b[i];
        if sep != b'=' && sep != b':' {
            i += 1;
            continue;
        }
        // The name, possibly quoted (`"token":`, `\"token\":` inside a shell-quoted blob).
        let mut end = i;
        while end > 0 && matches!(b[end - 1], b'"' | b'\'' | b'\\') {
            end -= 1;
        }
        let mut start = end;
        while start > 0 && is_name_byte(b[start - 1]) {
            start -= 1;
        }
        let name = &s[start..end];
        if name.is_empty() || !name_is_secret(name) || s[i..].starts_with("://") {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        if sep == b':' {
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            // Keep an authorization scheme.
            let word_end = s[j..]
                .find(|c: char| c.is_whitespace())
                .map_or(b.len(), |k| j + k);
            if word_end < b.len() && is_auth_scheme(&s[j..word_end]) {
                j = word_end;
                while j < b.len() && b[j] == b' ' {
                    j += 1;
                }
            }
        }
        while j < b.len() && matches!(b[j], b'"' | b'\'' | b'\\') {
            j += 1;
        }
        let mut k = j;
        while k < b.len()
            && !matches!(
                b[k],
                b'&' | b',' | b';' | b'"' | b'\'' | b'\\' | b'}' | b']' | b')'
            )
            && !b[k].is_ascii_whitespace()
        {
            k += 1;
        }
        if k > j {
            out.push_str(&s[copied..j]);
            out.push_str(REDACTED);
            copied = k;
        }
        i = k.max(i + 1);
    }
    out.push_str(&s[copied..]);
    out
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
    let known = PREFIXES.iter().any(|p| {
        v.strip_prefix(p)
            .is_some_and(|body| v.len() >= 12 && !shapes::made_of_words(body))
    });
    known || shapes::is_vendor_token(v)
}

/// Known token shapes (`hf_…`, `sk-…`, JWTs) anywhere in `s`, at a word start.
fn redact_token_words(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if value_looks_secret(word) {
            out.push_str(REDACTED);
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Every in-string rule, in order: vendor formats and PEM private keys, `Bearer TOKEN`,
/// URLs, quoted pairs, `name=value` / `Name: value`, token words. Idempotent.
fn redact_inline(s: &str) -> String {
    let s = shapes::redact_bearer(&shapes::redact_shapes(s, REDACTED), REDACTED);
    redact_token_words(&redact_pairs(&redact_quoted_pairs(&redact_urls(&s))))
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
    Some(redact_inline(value))
}

/// What the previous argument asks of the next one.
#[derive(Clone, Copy, PartialEq)]
enum Pending {
    None,
    /// After `--token`: the next argument is the secret (unless it is another flag).
    Value,
    /// After `Authorization:`: an optional scheme, then the secret.
    Header,
    /// After curl's `-u` / `--user`: `user:password`, the password is the secret.
    UserPassword,
    /// After a bare `Bearer` (a stderr line split into words): the next word, when it looks
    /// like a credential.
    Bearer,
}

/// A command line (argv) with secrets replaced: `--token=…` / `--api-key …` (any flag naming
/// a token, secret, password, key, auth, cookie or session, with `=` or as the next
/// argument), credential headers (`Authorization: Bearer …`, `X-Api-Key: …`, in one argument
/// or split over several), `key=value` and JSON blobs with secret-looking keys, URL query
/// parameters (`access_token=`, `sig=`), `user:password@` in URLs, and token-shaped values
/// (`hf_…`, `sk-…`, and every shape of [`shapes`]: vendor formats, PEM private keys), a
/// bare `Bearer TOKEN`, and the `-p` password of the MySQL / MariaDB clients (`-pPASS`) and
/// of `sshpass` (`-pPASS`, `-p PASS`). Idempotent: redacting its output changes nothing.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut pending = Pending::None;
    let mut password_flag = None;
    for arg in args {
        if pending == Pending::None {
            if let Some(convention) = password_flag {
                if let Some(pw) = arg.strip_prefix("-p").filter(|p| !p.is_empty()) {
                    if pw != REDACTED {
                        out.push(format!("-p{REDACTED}"));
                        continue;
                    }
                } else if arg == "-p" && convention == shapes::PasswordFlag::AttachedOrNext {
                    out.push(arg.clone());
                    pending = Pending::Value;
                    password_flag = None;
                    continue;
                } else if !is_flag(arg) && convention == shapes::PasswordFlag::AttachedOrNext {
                    // sshpass's options end at the command it runs (`ssh -p 22` is a port).
                    password_flag = None;
                }
            }
            if !is_flag(arg) {
                if let Some(convention) = shapes::password_flag_of(arg) {
                    password_flag = Some(convention);
                }
            }
        }
        match pending {
            Pending::Bearer => {
                pending = Pending::None;
                if shapes::looks_like_credential(arg) {
                    out.push(replace_core(arg));
                    continue;
                }
            }
            Pending::Value if !is_flag(arg) => {
                // The value may itself open another secret (`--key {'api_key': 'S'}` split
                // into words): what it would expect next is still expected.
                let mut next = Pending::None;
                let _ = redact_arg(arg, &mut next);
                out.push(replace_core(arg));
                pending = next;
                continue;
            }
            Pending::Header if is_auth_scheme(arg) => {
                out.push(arg.clone());
                pending = Pending::Value;
                continue;
            }
            Pending::Header if !is_flag(arg) => {
                out.push(replace_core(arg));
                pending = Pending::None;
                continue;
            }
            Pending::UserPassword if !is_flag(arg) => {
                pending = Pending::None;
                if let Some((user, pw)) = arg.split_once(':') {
                    if !pw.is_empty() {
                        out.push(format!("{user}:{REDACTED}"));
                        continue;
                    }
                }
            }
            _ => pending = Pending::None,
        }
        out.push(redact_arg(arg, &mut pending));
    }
    out
}

/// A secret value replaced, keeping quotes and punctuation around it (`"s",` → `"«redacted»",`).
fn replace_core(w: &str) -> String {
    let core = w.trim_start_matches(['"', '\'']);
    let lead = &w[..w.len() - core.len()];
    let inner = core.trim_end_matches(['"', '\'', ',', ';', '}', ']', ')']);
    let trail = &core[inner.len()..];
    if inner.is_empty() {
        return w.to_string();
    }
    format!("{lead}{REDACTED}{trail}")
}

fn is_flag(arg: &str) -> bool {
    arg.len() > 1 && arg.starts_with('-')
}

fn redact_arg(arg: &str, pending: &mut Pending) -> String {
    if shapes::has_private_key(arg) {
        return redact_inline(arg);
    }
    if arg
        .trim_start_matches(['(', '[', '{', '"', '\''])
        .eq_ignore_ascii_case("bearer")
    {
        *pending = Pending::Bearer;
        return arg.to_string();
    }
    if is_flag(arg) {
        let flag = arg.trim_start_matches('-');
        let dashes = &arg[..arg.len() - flag.len()];
        if arg == "-u" || arg == "--user" {
            *pending = Pending::UserPassword;
            return arg.to_string();
        }
        if let Some(rest) = arg.strip_prefix("--user=") {
            if let Some((user, pw)) = rest.split_once(':') {
                if !pw.is_empty() {
                    return format!("--user={user}:{REDACTED}");
                }
            }
        }
        match flag.split_once('=') {
            Some((name, _)) if name_is_secret(name) => {
                return format!("{dashes}{name}={REDACTED}");
            }
            None if name_is_secret(flag) => {
                *pending = Pending::Value;
                return arg.to_string();
            }
            _ => {}
        }
    } else if let Some(name) = arg.strip_suffix(':') {
        // `Authorization:` / `{"api_key":` (a header or a JSON key split from its value).
        let name = name
            .trim_start_matches(['{', '[', '(', ',', '"', '\'', '\\'])
            .trim_end_matches(['"', '\'', '\\']);
        if !name.is_empty() && name.bytes().all(is_name_byte) && name_is_secret(name) {
            *pending = Pending::Header;
            return arg.to_string();
        }
    }
    if value_looks_secret(arg) {
        return REDACTED.to_string();
    }
    redact_inline(arg)
}

/// A command line joined for display, redacted.
pub fn redact_cmdline(args: &[String]) -> String {
    redact_args(args).join(" ")
}

/// A command line held as one string (as reports store it), redacted word by word with the
/// same rules as [`redact_args`]. Runs of whitespace are kept, so text without secrets comes
/// back byte for byte, and `redact_text(&redact_cmdline(a)) == redact_cmdline(a)`.
/// Where a line of a stream stands with respect to a PEM private key printed over several
/// lines (`-----BEGIN … PRIVATE KEY-----`, base64 lines, `-----END …`): a line-by-line
/// redaction cannot see that the base64 lines are a key, so a stream's reader keeps this.
#[derive(Debug, Default, Clone)]
pub struct PemLines {
    /// Lines inside a key so far; `None` outside one.
    inside: Option<usize>,
}

/// Lines a key may span before the reader stops treating what follows as its body (an RSA
/// 8192-bit key is about 100 lines of base64): an unterminated header never swallows a log.
const PEM_MAX_LINES: usize = 200;

impl PemLines {
    /// Inside a private key: the next line is read as part of it.
    pub fn in_key(&self) -> bool {
        self.inside.is_some()
    }

    /// `true` when `line` is part of a private key (header, body or footer): keep none of it.
    pub fn is_key_line(&mut self, line: &str) -> bool {
        if let Some(n) = self.inside {
            if line.contains("-----END") || n >= PEM_MAX_LINES {
                self.inside = None;
            } else {
                self.inside = Some(n + 1);
            }
            return true;
        }
        if shapes::has_private_key(line) {
            if !line.contains("-----END") {
                self.inside = Some(0);
            }
            return true;
        }
        false
    }
}

pub fn redact_text(s: &str) -> String {
    // A PEM private key spans lines and words: replaced whole before the split.
    let pem;
    let s = if shapes::has_private_key(s) {
        pem = shapes::redact_shapes(s, REDACTED);
        pem.as_str()
    } else {
        s
    };
    let mut words: Vec<String> = Vec::new();
    let mut seps: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut sep = String::new();
    for ch in s.chars() {
        if ch.is_whitespace() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            sep.push(ch);
        } else {
            if cur.is_empty() {
                seps.push(std::mem::take(&mut sep));
            }
            cur.push(ch);
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    let redacted = redact_args(&words);
    let mut out = String::with_capacity(s.len());
    for (i, w) in redacted.iter().enumerate() {
        out.push_str(seps.get(i).map(String::as_str).unwrap_or(" "));
        out.push_str(w);
    }
    out.push_str(&sep);
    out
}

#[cfg(test)]
mod tests;
