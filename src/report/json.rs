//! JSON renderer: the source of truth, pretty-printed, with a trailing newline.

use super::Report;

pub fn render(report: &Report) -> Vec<u8> {
    // Serializing plain data structures cannot fail; fall back to an empty object defensively.
    let mut out = serde_json::to_vec_pretty(report).unwrap_or_else(|_| b"{}".to_vec());
    out.push(b'\n');
    out
}
