//! Markdown renderer: a pure function from a [`Report`] to text that fits a GitHub issue —
//! summary line, environment table, devices, findings with fixes and the process inventory
//! (scan), verdicts with checks, peaks and text sparklines of memory over time (replay).
//! Every string that came from the machine (process names, command lines, labels) is escaped
//! or put in a code span, so it shows as text and never as Markdown or HTML.

use super::text::{self, ChartMarker};
use super::{DeviceSeries, Finding, ProcessInfo, Report, ScanResult, VariantRun, Verdict};
use crate::gpu::DeviceInfo;
use crate::units::format_bytes;
use std::fmt::Write;

/// Cells in a sparkline.
pub const SPARK_CELLS: usize = 60;
const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Render a report as GitHub-flavoured Markdown.
pub fn render(report: &Report) -> String {
    let report = text::sanitized(report);
    let mut out = String::new();
    let kind = text::kind_word(report.kind);
    let _ = writeln!(out, "## vramdoc {kind} report\n");
    let _ = writeln!(
        out,
        "**Summary:** {}\n",
        md_text(&text::summary(&report), false)
    );
    environment(&mut out, &report);
    device_table(&mut out, report.devices());
    if let Some(scan) = &report.scan {
        scan_section(&mut out, scan);
    }
    if let Some(replay) = &report.replay {
        let _ = writeln!(out, "### Verdicts\n");
        if replay.runs.is_empty() {
            let _ = writeln!(out, "No variants were run.\n");
        } else {
            verdict_table(&mut out, &replay.runs);
            let _ = writeln!(
                out,
                "Memory sampled every {}.\n",
                text::format_ms(replay.period_us as f64 / 1000.0)
            );
            for run in &replay.runs {
                run_section(&mut out, run);
            }
        }
    }
    if let Some(run) = &report.run {
        run_report(&mut out, run);
    }
    let _ = writeln!(
        out,
        "<sub>Made by vramdoc {} · JSON is the source of truth; re-render with `vramdoc report \
         FILE.json --format md`.</sub>",
        md_text(&report.environment.vramdoc_version, false)
    );
    out
}

fn environment(out: &mut String, r: &Report) {
    let e = &r.environment;
    let backend = match &e.sim_spec {
        Some(spec) => format!(
            "{} (simulated box {})",
            md_code_cell(&e.backend),
            md_code_cell(spec)
        ),
        None => md_code_cell(&e.backend),
    };
    let rows: [(&str, String); 10] = [
        ("Host", md_code_cell(&e.hostname)),
        ("Kernel", md_code_cell(&e.kernel)),
        ("Driver", md_code_cell(&e.versions.driver)),
        ("CUDA", md_code_cell(&e.versions.cuda)),
        ("NVML", md_code_cell(&e.versions.nvml)),
        ("vramdoc", md_code_cell(&e.vramdoc_version)),
        ("Backend", backend),
        ("GPUs", md_text(&text::devices_phrase(r), true)),
        ("Command", md_code_cell(&r.command.join(" "))),
        ("Created", text::format_utc(r.created_unix_ms)),
    ];
    let _ = writeln!(out, "### Environment\n\n| | |\n|---|---|");
    for (k, v) in rows {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    out.push('\n');
}

fn device_table(out: &mut String, devices: &[DeviceInfo]) {
    let _ = writeln!(out, "### Devices\n");
    if devices.is_empty() {
        let _ = writeln!(out, "No GPUs were found.\n");
        return;
    }
    let _ = writeln!(
        out,
        "| GPU | Name | Bus | Total | Used | Free | Reserved | Util | Temp |\n\
         |---:|---|---|---:|---:|---:|---:|---:|---:|"
    );
    for d in devices {
        let m = &d.memory;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} ({}) | {} | {} | {} | {} |",
            d.index,
            md_text(&d.name, true),
            md_code_cell(&d.pci_bus_id),
            format_bytes(m.total),
            format_bytes(m.used),
            text::percent(m.used, m.total),
            format_bytes(m.free),
            format_bytes(m.reserved),
            text::utilization(d),
            text::temperature(d),
        );
    }
    out.push('\n');
}

fn scan_section(out: &mut String, scan: &ScanResult) {
    let _ = writeln!(out, "### Findings ({})\n", scan.findings.len());
    if scan.findings.is_empty() {
        let _ = writeln!(out, "No findings.\n");
    }
    let mut findings: Vec<&Finding> = scan.findings.iter().collect();
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for (i, f) in findings.iter().enumerate() {
        finding(out, i + 1, f);
    }
    headroom_table(out, &scan.headroom);
    let _ = writeln!(out, "### Processes ({})\n", scan.processes.len());
    if scan.processes.is_empty() {
        let _ = writeln!(out, "No process holds GPU memory.\n");
        return;
    }
    let _ = writeln!(
        out,
        "| PID | Name | User | GPU memory | CUDA_VISIBLE_DEVICES | Container | Command |\n\
         |---:|---|---|---|---|---|---|"
    );
    for p in &scan.processes {
        process_row(out, p);
    }
    out.push('\n');
    if scan.processes.iter().any(|p| !p.visible) {
        let _ = writeln!(
            out,
            "*not visible*: the driver reports the PID but it is not in vramdoc's PID namespace \
             (another container, or a process that has exited).\n"
        );
    }
}

/// The largest safe vLLM-style `gpu_memory_utilization` per device, with the arithmetic.
fn headroom_table(out: &mut String, headroom: &[crate::report::Headroom]) {
    if headroom.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### Headroom for a new engine\n\n\
         | GPU | Max `gpu_memory_utilization` | Arithmetic |\n\
         |---:|---:|---|"
    );
    for h in headroom {
        let _ = writeln!(
            out,
            "| {} | {:.2} | {} |",
            h.device,
            h.max_gpu_memory_utilization,
            md_text(&h.arithmetic, true)
        );
    }
    out.push('\n');
}

fn finding(out: &mut String, n: usize, f: &Finding) {
    let _ = writeln!(
        out,
        "#### {n}. {} {}: {}\n",
        text::severity_word(f.severity),
        md_code(&f.id),
        md_text(&f.title, false)
    );
    let mut whereabouts = Vec::new();
    if !f.devices.is_empty() {
        let list: Vec<String> = f.devices.iter().map(u32::to_string).collect();
        whereabouts.push(format!("GPU {}", list.join(", ")));
    }
    if let Some(pid) = f.pid {
        whereabouts.push(format!("PID {pid}"));
    }
    if !whereabouts.is_empty() {
        let _ = writeln!(out, "- Where: {}", whereabouts.join(" · "));
    }
    for e in &f.evidence {
        let _ = writeln!(
            out,
            "- {}: {}",
            md_text(&e.label, false),
            md_text(&e.value, false)
        );
    }
    if !whereabouts.is_empty() || !f.evidence.is_empty() {
        out.push('\n');
    }
    let _ = writeln!(out, "**Fix:** {}\n", md_text(&f.fix, false));
}

fn process_row(out: &mut String, p: &ProcessInfo) {
    let pid = if p.visible {
        p.pid.to_string()
    } else {
        format!("{} *not visible*", p.pid)
    };
    let mem = text::process_memory(p);
    let opt = |s: &Option<String>| s.as_deref().map_or("?".to_string(), md_code_cell);
    let _ = writeln!(
        out,
        "| {pid} | {} | {} | {} | {} | {} | {} |",
        opt(&p.name),
        opt(&p.user),
        mem.join("; "),
        md_code_cell(&p.cuda_visible_devices),
        p.container.as_deref().map_or("".to_string(), md_code_cell),
        opt(&p.cmdline),
    );
}

fn verdict_table(out: &mut String, runs: &[VariantRun]) {
    let _ = writeln!(
        out,
        "| Scenario | Variant | Verdict | Checks | Failure | Peak used | Duration |\n\
         |---|---|---|---:|---|---|---:|"
    );
    for r in runs {
        let passed = r.checks.iter().filter(|c| c.passed).count();
        let failure = r.error.as_ref().map_or(String::new(), |e| {
            format!("{} at step {}", md_text(e.kind.as_str(), true), e.step)
        });
        let (checks, duration) = if r.verdict == Verdict::Skipped {
            ("–".to_string(), "–".to_string())
        } else {
            (
                format!("{passed}/{}", r.checks.len()),
                text::format_ms(r.duration_ms as f64),
            )
        };
        let _ = writeln!(
            out,
            "| {} | {} | **{}** | {checks} | {failure} | {} | {duration} |",
            md_code_cell(&r.scenario),
            md_code_cell(&r.variant),
            text::verdict_word(r.verdict),
            peak_phrase(r),
        );
    }
    out.push('\n');
}

/// The highest peak of a run relative to its device, e.g. `GPU 0: 15.80 GiB (98.8%)`.
fn peak_phrase(r: &VariantRun) -> String {
    r.peaks
        .iter()
        .max_by(|a, b| {
            let fa = a.peak_used as f64 / a.total.max(1) as f64;
            let fb = b.peak_used as f64 / b.total.max(1) as f64;
            fa.total_cmp(&fb)
        })
        .map_or(String::new(), |p| {
            format!(
                "GPU {}: {} ({})",
                p.device,
                format_bytes(p.peak_used),
                text::percent(p.peak_used, p.total)
            )
        })
}

fn run_section(out: &mut String, r: &VariantRun) {
    let _ = writeln!(
        out,
        "#### {} / {}: {}\n",
        md_code(&r.scenario),
        md_code(&r.variant),
        text::verdict_word(r.verdict)
    );
    let _ = writeln!(
        out,
        "*{}.* Source: {}.",
        text::verdict_meaning(r.verdict),
        md_text(r.source.trim_end_matches('.'), false)
    );
    let mut facts = Vec::new();
    if let Some(pid) = r.worker_pid {
        facts.push(format!("worker PID {pid}"));
    }
    if r.verdict != Verdict::Skipped {
        facts.push(format!("ran {}", text::format_ms(r.duration_ms as f64)));
    }
    if !facts.is_empty() {
        let _ = writeln!(out, "{}.", capitalise(&facts.join(", ")));
    }
    out.push('\n');
    if let Some(reason) = &r.reason {
        let _ = writeln!(out, "**Reason:** {}\n", md_text(reason, false));
    }
    if let Some(e) = &r.error {
        let _ = writeln!(
            out,
            "**Failure:** {} at step {} ({}) after {}: {}\n",
            md_text(e.kind.as_str(), false),
            e.step,
            md_code(&e.step_label),
            text::format_ms(e.t_ms),
            md_text(&e.message, false)
        );
    }
    let gaps = text::gap_lines(r);
    if !gaps.is_empty() {
        let _ = writeln!(out, "**Sampling gaps** (the timeline has no data there):\n");
        for g in &gaps {
            let _ = writeln!(out, "- {}", md_text(g, false));
        }
        out.push('\n');
    }
    if !r.checks.is_empty() {
        let _ = writeln!(out, "Checks:\n");
        for c in &r.checks {
            let mark = if c.passed { "✅" } else { "❌" };
            let _ = writeln!(
                out,
                "- {mark} {}: {}",
                md_text(&c.expectation, false),
                md_text(&c.detail, false)
            );
        }
        out.push('\n');
    }
    if !r.peaks.is_empty() {
        let _ = writeln!(
            out,
            "| GPU | Total | Peak used | Of total | At |\n|---:|---:|---:|---:|---:|"
        );
        for p in &r.peaks {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                p.device,
                format_bytes(p.total),
                format_bytes(p.peak_used),
                text::percent(p.peak_used, p.total),
                text::format_ms(p.t_ms)
            );
        }
        out.push('\n');
    }
    let series: Vec<&DeviceSeries> = r
        .timeline
        .devices
        .iter()
        .filter(|s| !s.samples.is_empty())
        .collect();
    if series.is_empty() {
        if r.verdict != Verdict::Skipped {
            let _ = writeln!(out, "No memory samples were recorded.\n");
        }
        return;
    }
    let span = text::time_span(r);
    let markers = text::chart_markers(r);
    sparkline_block(out, &series, span, &markers);
}

/// The sparklines of `series` over `span`, the marker legend and the chart's caption, in a
/// fenced text block.
fn sparkline_block(out: &mut String, series: &[&DeviceSeries], span: f64, markers: &[ChartMarker]) {
    let mut block = String::new();
    for s in series {
        sparkline(&mut block, s, span, markers);
    }
    if !markers.is_empty() {
        let _ = writeln!(block, "markers:");
        for m in markers {
            let dev = m.device.map_or(String::new(), |d| format!(" (GPU {d})"));
            let _ = writeln!(
                block,
                "  {} {:>9}  {}: {}{dev}",
                m.symbol,
                text::format_ms(m.t_ms),
                m.kind,
                m.label
            );
        }
    }
    let _ = writeln!(
        out,
        "Memory used over {} ({} cells of {} each, highest sample per cell):\n",
        text::format_ms(span),
        SPARK_CELLS,
        text::format_ms(span / SPARK_CELLS as f64)
    );
    let fence = "`".repeat(longest_run(&block, '`').max(2) + 1);
    let _ = writeln!(out, "{fence}text\n{block}{fence}\n");
}

/// One device's sparkline, its marker row and its labels.
fn sparkline(out: &mut String, s: &DeviceSeries, span: f64, markers: &[ChartMarker]) {
    let bins = text::bin_max(&s.samples, span, SPARK_CELLS);
    let max = s.samples.iter().map(|x| x.1).max().unwrap_or(0);
    let min = s.samples.iter().map(|x| x.1).min().unwrap_or(0);
    // ▁ is the lowest sample, █ the highest; a flat series is all ▁.
    let range = max.saturating_sub(min);
    let line: String = bins
        .iter()
        .map(|b| match b {
            None => ' ',
            Some(_) if range == 0 => LEVELS[0],
            Some(v) => {
                let x = v.saturating_sub(min) as f64 / range as f64;
                LEVELS[((x * 7.0).round() as usize).min(7)]
            }
        })
        .collect();
    let _ = writeln!(
        out,
        "GPU {}  ▁ {} … █ {} (peak {} of {})",
        s.device,
        format_bytes(min),
        format_bytes(max),
        text::percent(max, s.total),
        format_bytes(s.total)
    );
    let _ = writeln!(out, "  │{line}│");
    let mut row = vec![' '; SPARK_CELLS];
    for m in markers.iter().filter(|m| m.on_device(s.device)) {
        let i = text::cell_of(m.t_ms, span, SPARK_CELLS);
        row[i] = match row[i] {
            ' ' => m.symbol,
            'X' => 'X',
            _ if m.is_failure() => 'X',
            _ => '*',
        };
    }
    let row: String = row.into_iter().collect();
    if !row.trim().is_empty() {
        let _ = writeln!(out, "   {}", row.trim_end());
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

fn longest_run(s: &str, ch: char) -> usize {
    let (mut best, mut cur) = (0, 0);
    for c in s.chars() {
        if c == ch {
            cur += 1;
            best = best.max(cur);
        } else {
            cur = 0;
        }
    }
    best
}

/// A code span holding `s` literally (outside tables).
pub fn md_code(s: &str) -> String {
    code_span(s, false)
}

/// A code span holding `s` literally inside a table cell (`|` escaped for GFM tables).
pub fn md_code_cell(s: &str) -> String {
    code_span(s, true)
}

fn code_span(s: &str, in_table: bool) -> String {
    let s = text::clean(s);
    if s.is_empty() {
        return String::new();
    }
    let fence = "`".repeat(longest_run(&s, '`') + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') || s.starts_with(' ') && s.ends_with(' ') {
        " "
    } else {
        ""
    };
    let body = if in_table { s.replace('|', "\\|") } else { s };
    format!("{fence}{pad}{body}{pad}{fence}")
}

/// Inline text shown literally: Markdown and HTML punctuation is backslash-escaped, except
/// inside balanced code spans, which are kept (fix texts use them for commands).
pub fn md_text(s: &str, in_table: bool) -> String {
    let s = text::clean(s);
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '`' {
            let run = chars[i..].iter().take_while(|&&x| x == '`').count();
            if let Some(end) = find_closing_run(&chars, i + run, run) {
                let inner: String = chars[i..end + run].iter().collect();
                out.push_str(&if in_table {
                    inner.replace('|', "\\|")
                } else {
                    inner
                });
                i = end + run;
                continue;
            }
            for _ in 0..run {
                out.push_str("\\`");
            }
            i += run;
            continue;
        }
        match c {
            '\\' | '*' | '[' | ']' | '<' | '>' | '|' | '~' | '&' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            '_' => {
                let prev = i.checked_sub(1).map(|j| chars[j]);
                let next = chars.get(i + 1).copied();
                let inner = prev.is_some_and(char::is_alphanumeric)
                    && next.is_some_and(char::is_alphanumeric);
                if !inner {
                    out.push('\\');
                }
                out.push('_');
            }
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// Index of a run of exactly `len` backticks at or after `from`.
fn find_closing_run(chars: &[char], from: usize, len: usize) -> Option<usize> {
    let mut j = from;
    while j < chars.len() {
        if chars[j] == '`' {
            let run = chars[j..].iter().take_while(|&&x| x == '`').count();
            if run == len {
                return Some(j);
            }
            j += run;
        } else {
            j += 1;
        }
    }
    None
}

/// `vramdoc run`: the command and how it ended, findings, errors, memory per device,
/// the job's processes, sparklines with markers, the stderr tail.
fn run_report(out: &mut String, run: &crate::report::RunResult) {
    let how = match (&run.exit.signal_name, run.exit.code) {
        (Some(sig), _) => format!(
            "killed by {} (status {})",
            md_text(sig, false),
            run.exit.status
        ),
        (None, Some(c)) => format!("exited {c}"),
        _ => format!("ended (status {})", run.exit.status),
    };
    let _ = writeln!(
        out,
        "### Command\n\n{} {how} after {}. Memory sampled every {}, process lists every {}.\n",
        md_code(&run.command.join(" ")),
        text::format_ms(run.duration_ms as f64),
        text::format_ms(run.period_us as f64 / 1000.0),
        text::format_ms(run.process_period_us as f64 / 1000.0)
    );
    let _ = writeln!(out, "### Findings ({})\n", run.findings.len());
    if run.findings.is_empty() {
        let _ = writeln!(out, "No findings.\n");
    }
    let mut findings: Vec<&Finding> = run.findings.iter().collect();
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for (i, f) in findings.iter().enumerate() {
        finding(out, i + 1, f);
    }
    if !run.errors.is_empty() {
        let _ = writeln!(out, "### Errors in the command's output\n");
        for e in &run.errors {
            let facts = text::error_facts(e);
            let _ = writeln!(
                out,
                "- {} at {}{facts}: {}",
                md_code(e.kind.as_str()),
                text::format_ms(e.t_ms),
                md_code(&e.line)
            );
        }
        out.push('\n');
    }
    if !run.peaks.is_empty() {
        let _ = writeln!(
            out,
            "### Memory\n\n| GPU | Total | Peak used | At | Job's processes (peak of sum) | \
             Lowest free |\n|---:|---:|---:|---:|---:|---:|"
        );
        for p in &run.peaks {
            let tree = run.tree_peaks.iter().find(|t| t.device == p.device);
            let free = run.min_free.iter().find(|f| f.device == p.device);
            let _ = writeln!(
                out,
                "| {} | {} | {} ({}) | {} | {} | {} |",
                p.device,
                format_bytes(p.total),
                format_bytes(p.peak_used),
                text::percent(p.peak_used, p.total),
                text::format_ms(p.t_ms),
                tree.map_or("?".into(), |t| format_bytes(t.peak_used)),
                free.map_or("?".into(), |f| format_bytes(f.min_free)),
            );
        }
        out.push('\n');
    }
    let _ = writeln!(out, "### Processes of the job ({})\n", run.processes.len());
    if !run.processes.is_empty() {
        let _ = writeln!(
            out,
            "| PID | Parent | Name | Seen | Gone | Peak per GPU | Command |\n\
             |---:|---:|---|---:|---:|---|---|"
        );
        for p in &run.processes {
            let peaks = text::peaks_per_gpu(p);
            let opt = |s: &Option<String>| s.as_deref().map_or("?".to_string(), md_code_cell);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                p.pid,
                p.ppid.map_or("?".into(), |x| x.to_string()),
                opt(&p.name),
                text::format_ms(p.start_ms),
                p.end_ms.map_or("running".into(), text::format_ms),
                peaks.join("; "),
                opt(&p.cmdline)
            );
        }
        out.push('\n');
    }
    let series: Vec<&DeviceSeries> = run
        .timeline
        .devices
        .iter()
        .filter(|s| !s.samples.is_empty())
        .collect();
    if !series.is_empty() {
        let span = text::timeline_span(&run.timeline);
        let markers = text::timeline_markers(&run.timeline);
        sparkline_block(out, &series, span, &markers);
    }
    if !run.stderr_tail.is_empty() {
        let block: String = run
            .stderr_tail
            .iter()
            .map(|l| text::clean(l) + "\n")
            .collect();
        let fence = "`".repeat(longest_run(&block, '`').max(2) + 1);
        let _ = writeln!(
            out,
            "<details><summary>Last {} lines of stderr</summary>\n\n{fence}text\n{block}{fence}\n\n</details>\n",
            run.stderr_tail.len()
        );
    }
    if let Some(f) = &run.samples_file {
        let _ = writeln!(out, "Samples were streamed to {}.\n", md_code(f));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_escapes_markup_but_keeps_code_spans() {
        assert_eq!(md_text("<img src=x>", false), "\\<img src=x\\>");
        assert_eq!(md_text("run `A=1 b` now", false), "run `A=1 b` now");
        assert_eq!(md_text("a | b", true), "a \\| b");
        assert_eq!(md_text("x `a|b`", true), "x `a\\|b`");
        assert_eq!(
            md_text("CUDA_VISIBLE_DEVICES _x_", false),
            "CUDA_VISIBLE_DEVICES \\_x\\_"
        );
        assert_eq!(md_text("half ` open", false), "half \\` open");
        assert_eq!(
            md_text("[link](javascript:x)", false),
            "\\[link\\](javascript:x)"
        );
        assert_eq!(md_text("two\nlines", false), "two lines");
    }

    #[test]
    fn code_spans_hold_backticks() {
        assert_eq!(md_code("a`b"), "``a`b``");
        assert_eq!(md_code("`x"), "`` `x ``");
        assert_eq!(md_code_cell("a|b"), "`a\\|b`");
        assert_eq!(md_code(""), "");
    }
}
