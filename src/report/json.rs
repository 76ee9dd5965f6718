//! JSON renderer: the source of truth, pretty-printed, with a trailing newline. Command lines
//! pass through the render-time redaction pass ([`super::text::sanitized`]) like every format.

use super::Report;

pub fn render(report: &Report) -> Vec<u8> {
    // Serializing plain data structures cannot fail; fall back to an empty object defensively.
    let mut out = serde_json::to_vec_pretty(&super::text::sanitized(report))
        .unwrap_or_else(|_| b"{}".to_vec());
    out.push(b'\n');
    out
}
