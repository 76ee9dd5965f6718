//! Renderers of `vramdoc explain`'s [`Explanation`]: the terminal text, JSON (`--json`, the
//! source of truth) and Markdown; HTML is [`super::explain_html`]. Pure functions; every
//! string from the snapshot (file names, function names) is escaped for its format.

use crate::explain::{Cause, DeviceExplanation, Explanation, Moment};
use crate::units::format_bytes as b;
use std::fmt::Write;

/// The JSON document (`--json`, `--out FILE.json`): one policy for both, the characters a
/// terminal would act on (bidirectional overrides, zero-width and C1 characters) written as
/// `\uXXXX` escapes — the same JSON, safe to `cat` (issue 39 item 5).
pub fn json(x: &Explanation) -> Vec<u8> {
    let text = serde_json::to_string_pretty(x)
        .unwrap_or_else(|e| format!("{{\"error\": {}}}", serde_json::Value::from(e.to_string())));
    let mut v = crate::term::json_safe(&text).into_bytes();
    v.push(b'\n');
    v
}

/// One line per fact, for a terminal (escaped again by `term` on the way out).
pub fn text(x: &Explanation) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "vramdoc explain: {} ({}{})",
        crate::term::one_line(&x.file),
        b(x.file_bytes),
        match x.field_set {
            Some(crate::explain::snapshot::FieldSet::Legacy) => ", PyTorch 2.0 snapshot format",
            _ => "",
        }
    );
    if x.devices.is_empty() {
        let _ = writeln!(o, "  the snapshot holds no segments and no history");
    }
    for d in &x.devices {
        device_text(&mut o, d);
    }
    o
}

fn moment(d: &DeviceExplanation) -> &'static str {
    match d.at {
        Moment::Oom => "at the out-of-memory error",
        Moment::Snapshot => "at the snapshot",
    }
}

fn device_text(o: &mut String, d: &DeviceExplanation) {
    let n = &d.numbers;
    let _ = writeln!(o, "\nGPU cuda:{} {}", d.device, moment(d));
    let _ = writeln!(o, "  cause: {}", d.because);
    if let Some(r) = n.requested {
        let _ = writeln!(
            o,
            "  requested {}{}",
            b(r),
            n.stream
                .map(|s| format!(" on stream {s:#x}"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        o,
        "  reserved {}, allocated {}, cached free {}, pending free {} ({} segments)",
        b(n.reserved),
        b(n.allocated),
        b(n.cached_free),
        b(n.pending_free),
        n.segments
    );
    let _ = writeln!(
        o,
        "  request's pool: {} free, largest free block {}; other streams {} free; private pools {} free",
        b(n.pool_free),
        b(n.pool_largest_free),
        b(n.other_streams_free),
        b(n.private_pools_free)
    );
    if let Some(f) = n.device_free {
        let _ = writeln!(o, "  free on the device at the OOM: {}", b(f));
    }
    if let Some(out) = n.outside_pytorch {
        let _ = writeln!(o, "  outside PyTorch: {}", b(out));
    }
    if !d.top_sites.is_empty() {
        let _ = writeln!(o, "  live memory by site {}:", moment(d));
        for s in &d.top_sites {
            let _ = writeln!(
                o,
                "    {:>10}  {:>3.0}%  {}",
                b(s.bytes),
                s.share * 100.0,
                s.site
            );
        }
    }
    if !d.growing_sites.is_empty() && (d.history.growing || d.cause == Cause::Growth) {
        let _ = writeln!(o, "  grew over the recorded history:");
        for g in &d.growing_sites {
            let _ = writeln!(o, "    {} -> {}  {}", b(g.from), b(g.to), g.site);
        }
    }
    for f in &d.fixes {
        let _ = writeln!(o, "  fix: {}", f.text);
    }
}

/// Markdown: the same facts, as a document.
pub fn markdown(x: &Explanation) -> String {
    use super::markdown::{md_code, md_text};
    let mut o = String::new();
    let _ = writeln!(o, "# vramdoc explain\n");
    let _ = writeln!(o, "Snapshot {} ({}).\n", md_code(&x.file), b(x.file_bytes));
    for d in &x.devices {
        let n = &d.numbers;
        let _ = writeln!(o, "## GPU cuda:{} {}\n", d.device, moment(d));
        let _ = writeln!(o, "**Cause:** {}\n", md_text(&d.because, false));
        let _ = writeln!(o, "| | bytes |\n| --- | ---: |");
        let mut row = |label: &str, v: Option<u64>| {
            if let Some(v) = v {
                let _ = writeln!(o, "| {label} | {} |", b(v));
            }
        };
        row("requested", n.requested);
        row("reserved", Some(n.reserved));
        row("allocated", Some(n.allocated));
        row("cached free", Some(n.cached_free));
        row("pending free", Some(n.pending_free));
        row("free in the request's pool", Some(n.pool_free));
        row("largest free block in that pool", Some(n.pool_largest_free));
        row("free on other streams", Some(n.other_streams_free));
        row("free in private pools", Some(n.private_pools_free));
        row("free on the device at the OOM", n.device_free);
        row("outside PyTorch", n.outside_pytorch);
        let _ = writeln!(o);
        if !d.top_sites.is_empty() {
            let _ = writeln!(
                o,
                "### Live memory by site\n\n| site | bytes | share |\n| --- | ---: | ---: |"
            );
            for s in &d.top_sites {
                let _ = writeln!(
                    o,
                    "| {} | {} | {:.0}% |",
                    md_text(&s.site, true),
                    b(s.bytes),
                    s.share * 100.0
                );
            }
            let _ = writeln!(o);
        }
        if !d.growing_sites.is_empty() && d.history.growing {
            let _ = writeln!(
                o,
                "### Grew over the history\n\n| site | from | to |\n| --- | ---: | ---: |"
            );
            for g in &d.growing_sites {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} |",
                    md_text(&g.site, true),
                    b(g.from),
                    b(g.to)
                );
            }
            let _ = writeln!(o);
        }
        for f in &d.fixes {
            let _ = writeln!(o, "- **Fix ({}):** {}", f.id, md_text(&f.text, false));
        }
        let _ = writeln!(o);
    }
    o
}
