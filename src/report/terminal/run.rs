//! The summary `vramdoc run` prints on stderr when the command ends: how it ended, each
//! device's peak, the job's share and the lowest free memory, the error lines, the findings
//! and where the reports went. Pure; lines fit 100 columns; text from the job is cleaned.

use crate::gpu::DeviceInfo;
use crate::model::Report;
use crate::report::text::{finding_text, format_ms, percent};
use crate::term::one_line;
use crate::units::format_bytes;
use std::path::PathBuf;

/// Characters of the command the first line shows.
const COMMAND_CHARS: usize = 50;

/// `text` in at most `max` characters: cut at the last word boundary that keeps at least
/// half of it, and marked with an ellipsis (issue 39 item 5: it was cut mid-word, unmarked).
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max.saturating_sub(1)).collect();
    let cut = match head.rfind(' ') {
        Some(i) if head[..i].chars().count() >= max / 2 => &head[..i],
        _ => &head[..],
    };
    format!("{}…", cut.trim_end())
}

/// The summary of a `run` report, with the report paths `out`; its environment's devices
/// name MIG instances as scan does (`GPU 0/1 (MIG 3g.40gb)`). Empty for another report.
/// Terminal-safe: command lines, error lines and paths come from the job.
pub fn render(report: &Report, out: &[PathBuf]) -> String {
    let Some(run) = report.run() else {
        return String::new();
    };
    let devices = &report.environment.devices;
    let mut s = String::new();
    let how = match (&run.exit.signal_name, run.exit.code) {
        _ if run.attached.is_some() => "was recorded while attached".to_string(),
        (Some(sig), _) => format!("was killed by {sig} (status {})", run.exit.status),
        (None, Some(c)) => format!("exited {c}"),
        _ => format!("ended ({})", run.exit.status),
    };
    let cmd = shorten(&one_line(&run.command.join(" ")), COMMAND_CHARS);
    s.push_str(&format!(
        "\nvramdoc: `{cmd}` {how} after {}; {} process{} in its tree\n",
        format_ms(run.duration_ms as f64),
        run.processes.len(),
        if run.processes.len() == 1 { "" } else { "es" }
    ));
    for p in &run.peaks {
        let tree = run
            .tree_peaks
            .iter()
            .find(|t| t.device == p.device)
            .map_or(0, |t| t.peak_used);
        let free = run
            .min_free
            .iter()
            .find(|f| f.device == p.device)
            .map_or(0, |f| f.min_free);
        // A GPU lost during the run: its numbers are the last readings before it fell off.
        let lost = run
            .findings
            .iter()
            .any(|f| f.id == crate::diagnose::ids::GPU_LOST && f.devices.contains(&p.device));
        s.push_str(&format!(
            "  GPU {}: {}peak {} of {} ({}); the job's processes {}; lowest free {}\n",
            device_name(p.device, devices),
            if lost {
                "LOST (fallen off the bus); before it: "
            } else {
                ""
            },
            format_bytes(p.peak_used),
            format_bytes(p.total),
            percent(p.peak_used, p.total),
            format_bytes(tree),
            format_bytes(free)
        ));
    }
    for e in &run.errors {
        let line: String = e.line.chars().take(80).collect();
        s.push_str(&format!("  {} at {}: {line}\n", e.kind, format_ms(e.t_ms)));
    }
    if run.findings.is_empty() {
        s.push_str("  no findings\n");
    }
    for f in &run.findings {
        s.push_str(&format!("  {}\n", finding_text(f).head));
    }
    for p in out {
        s.push_str(&format!("  report: {}\n", p.display()));
    }
    crate::term::clean_text(&s)
}

/// `2` for a GPU, `0/1 (MIG 3g.40gb)` for a MIG instance.
fn device_name(index: u32, devices: &[DeviceInfo]) -> String {
    match devices.iter().find(|d| d.index == index) {
        Some(d) => match d.mig_instance() {
            Some(m) if !m.profile.is_empty() => format!("{} (MIG {})", d.label(), m.profile),
            _ => d.label(),
        },
        None => index.to_string(),
    }
}

#[cfg(test)]
mod shorten_tests {
    use super::shorten;

    #[test]
    fn a_long_command_is_cut_at_a_word_with_an_ellipsis() {
        let c = "python3 /work/tests/it/corpus/workload.py held-child --size 2GiB";
        let s = shorten(c, 50);
        assert_eq!(s, "python3 /work/tests/it/corpus/workload.py…");
        assert!(s.chars().count() <= 50);
        assert_eq!(shorten("short command", 50), "short command");
        // One long word: cut inside it, still marked.
        let w = "x".repeat(80);
        assert_eq!(shorten(&w, 50), format!("{}…", "x".repeat(49)));
    }
}
