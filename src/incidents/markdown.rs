//! An incident as Markdown, ready for a ticket (`vramdoc incidents show ID --markdown`): a pure
//! function; every text from the node (pod names, log lines) is escaped by the report's
//! Markdown helpers.

use super::Incident;
use crate::report::markdown::{md_code, md_text};
use crate::units::format_bytes;
use std::fmt::Write as _;

/// Render one incident.
pub fn render(inc: &Incident) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Incident {}\n", md_text(&inc.id, false));
    let _ = writeln!(s, "**{}**\n", md_text(&inc.title, false));
    let _ = writeln!(s, "- rule: {}", md_code(&inc.rule));
    let _ = writeln!(s, "- when: {}", md_text(&inc.created, false));
    if let Some(n) = &inc.node {
        let _ = writeln!(s, "- node: {}", md_text(n, false));
    }
    if let Some(p) = &inc.pod {
        let _ = writeln!(
            s,
            "- pod: {}/{} (container {}, uid {})",
            md_text(p.namespace.as_deref().unwrap_or("?"), false),
            md_text(p.name.as_deref().unwrap_or("?"), false),
            md_text(p.container.as_deref().unwrap_or("?"), false),
            md_text(&p.uid, false)
        );
    }
    if !inc.devices.is_empty() {
        let d: Vec<String> = inc.devices.iter().map(u32::to_string).collect();
        let _ = writeln!(s, "- GPUs: {}", d.join(", "));
    }
    if inc.repeats > 0 {
        let _ = writeln!(s, "- repeated: {} more events of this failure", inc.repeats);
    }
    s.push_str("\n## Events\n\n");
    for e in &inc.events {
        let _ = write!(
            s,
            "- {} `{}`",
            md_text(&super::rfc3339(e.t_unix), false),
            e.source
        );
        if let Some(x) = e.xid {
            let _ = write!(s, " Xid {x}");
        }
        if let Some(m) = &e.meaning {
            let _ = write!(s, " ({})", md_text(m, false));
        }
        if let Some(l) = &e.line {
            let _ = write!(s, ": {}", md_code(l));
        }
        s.push('\n');
    }
    if !inc.findings.is_empty() {
        s.push_str("\n## Findings\n\n");
        for f in &inc.findings {
            let _ = writeln!(
                s,
                "- {} {}: {}",
                f.severity.as_str(),
                md_code(&f.id),
                md_text(&f.title, false)
            );
        }
    }
    s.push_str("\n## Memory before\n\n| GPU | first | last | peak | total |\n| --- | --- | --- | --- | --- |\n");
    for d in &inc.timeline.devices {
        let first = d.samples.first().map_or(0, |x| x.1);
        let last = d.samples.last().map_or(0, |x| x.1);
        let peak = d.samples.iter().map(|x| x.1).max().unwrap_or(0);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            d.device,
            format_bytes(first),
            format_bytes(last),
            format_bytes(peak),
            format_bytes(d.total)
        );
    }
    match (&inc.scenario, &inc.scenario_note) {
        (Some(toml), _) => {
            let fence = "`".repeat(3 + toml.matches("```").count().min(1) * 3);
            let _ = writeln!(
                s,
                "\n## Reproduction\n\nSave as `repro.toml`, then `vramdoc replay repro.toml --sim recorded`.\n\n{fence}toml\n{toml}{fence}"
            );
        }
        (None, Some(why)) => {
            let _ = writeln!(s, "\n## Reproduction\n\nNone: {}", md_text(why, false));
        }
        _ => {}
    }
    s
}
