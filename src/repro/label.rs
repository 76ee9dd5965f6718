//! Step labels made from marker text for a file meant for public tickets: redacted through
//! `crate::redact`, then every word that looks like a path, an address, a host name or an
//! assignment (`KEY=value`) replaced, control characters dropped, and the length bounded.
//! TOML escaping is the writer's (`toml_out`).

use crate::redact::{redact_text, REDACTED};

/// Longest label, in characters.
pub const MAX_LABEL_CHARS: usize = 80;

/// What replaces a word that looks like a path.
pub const PATH: &str = "«path»";
/// What replaces a word that looks like a host name or an address.
pub const HOST: &str = "«host»";

fn looks_like_host(word: &str, hostname: Option<&str>) -> bool {
    let w = word.trim_matches(|c: char| !c.is_alphanumeric());
    if w.is_empty() {
        return false;
    }
    if let Some(h) = hostname.filter(|h| h.len() >= 2) {
        let h = h.to_ascii_lowercase();
        let short = h.split('.').next().unwrap_or(&h).to_string();
        let lw = w.to_ascii_lowercase();
        if lw.contains(&h) || (short.len() >= 2 && lw.contains(&short)) {
            return true;
        }
    }
    let parts: Vec<&str> = w.split('.').collect();
    // An IPv4 address, or a dotted name with letters (`node7.cluster.local`, `hf.co`).
    let ipv4 = parts.len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    let dotted_name = parts.len() >= 2
        && parts.iter().all(|p| !p.is_empty())
        && parts
            .last()
            .is_some_and(|tld| tld.len() >= 2 && tld.chars().all(|c| c.is_ascii_alphabetic()));
    ipv4 || dotted_name || (w.chars().filter(|c| *c == ':').count() >= 2)
}

/// Words that, in prose, are followed by the secret they name.
fn names_secret(word: &str) -> bool {
    let w = word
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_ascii_lowercase()
        .replace('-', "_");
    matches!(
        w.as_str(),
        "password" | "passwd" | "passphrase" | "pwd" | "token" | "secret" | "apikey" | "api_key"
    )
}

/// A label safe to publish, from marker text recorded on `hostname`.
pub fn safe_label(text: &str, hostname: Option<&str>) -> String {
    let redacted = redact_text(text);
    let mut words = Vec::new();
    let mut secret_next = false;
    for word in redacted.split_whitespace() {
        // Prose names a secret without `=` or `:` (`password hunter2`): the next word is it.
        if std::mem::take(&mut secret_next) && word != REDACTED {
            words.push(REDACTED.to_string());
            continue;
        }
        secret_next = names_secret(word);
        let w: String = word
            .chars()
            .filter(|c| !c.is_control() && !crate::term::is_hidden(*c))
            .collect();
        let out = if w.contains('/') || w.contains('\\') || w.starts_with('~') {
            PATH.to_string()
        } else if w.contains('@') || w.contains("://") {
            REDACTED.to_string()
        } else if let Some((k, _)) = w.split_once('=') {
            format!("{k}={REDACTED}")
        } else if looks_like_host(&w, hostname) {
            HOST.to_string()
        } else {
            w
        };
        words.push(out);
    }
    let joined = words.join(" ");
    if joined.chars().count() > MAX_LABEL_CHARS {
        let mut s: String = joined.chars().take(MAX_LABEL_CHARS - 1).collect();
        s.push('…');
        s
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_hosts_addresses_and_assignments_never_survive() {
        let host = Some("gpu-node-17.example.internal");
        for (text, gone) in [
            ("load /home/alice/ckpt/model.pt", "alice"),
            ("load ~/models/x", "models"),
            ("load C:\\Users\\bob\\m", "bob"),
            ("on gpu-node-17 now", "node-17"),
            ("pull from hf.co now", "hf.co"),
            ("peer 10.1.2.3 up", "10.1.2.3"),
            ("mail bob@corp ok", "bob@corp"),
            (
                "token HF_TOKEN=hf_abcdefghijklmnopqrstu",
                "hf_abcdefghijklmnopqrstu",
            ),
            ("url https://x.y/z", "x.y"),
            ("MODEL_DIR=secretvalue1 loaded", "secretvalue1"),
        ] {
            let l = safe_label(text, host);
            assert!(!l.contains(gone), "{text:?} -> {l:?}");
        }
        assert_eq!(safe_label("size 1024x1152", host), "size 1024x1152");
        // Issue 29 item 15: a secret named in prose, no `=` or `:`.
        let l = safe_label("password hunter2 then Token: abc123", None);
        assert!(!l.contains("hunter2") && !l.contains("abc123"), "{l}");
        assert_eq!(safe_label("release model", None), "release model");
        assert_eq!(safe_label("epoch 1.5 done", None), "epoch 1.5 done");
    }

    #[test]
    fn control_characters_are_dropped_and_length_bounded() {
        let l = safe_label("a\u{1b}[31mred\u{7}", None);
        assert!(!l.chars().any(char::is_control), "{l:?}");
        let long = "word ".repeat(100);
        assert!(safe_label(&long, None).chars().count() <= MAX_LABEL_CHARS);
    }
}
