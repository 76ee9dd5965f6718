//! HTML renderer: one self-contained page (inline CSS, inline SVG, no scripts, no network —
//! a Content-Security-Policy forbids any fetch) with the same content as the Markdown, plus
//! per device an SVG chart of used memory over time ([`super::chart`]). Every string from
//! the report is HTML-escaped; SVG text is escaped by plotters.

use super::chart::{self, ChartError};
use super::text::{self, ChartMarker};
use super::{Finding, ProcessInfo, Report, ScanResult, VariantRun, Verdict};
use crate::gpu::DeviceInfo;
use crate::units::format_bytes;
use std::fmt::Write;

const CSS: &str = r#"
:root { color-scheme: light; }
body { margin: 0; background: #f4f5f7; color: #1d2430;
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 20px 20px 40px; background: #fff; }
h1 { font-size: 26px; margin: 4px 0 8px; }
h2 { font-size: 20px; margin: 28px 0 10px; border-bottom: 1px solid #dde1e6; padding-bottom: 4px; }
h3 { font-size: 17px; margin: 22px 0 8px; }
.summary { font-size: 17px; padding: 10px 14px; background: #eef3fb; border-left: 4px solid #1f66b5; }
table { border-collapse: collapse; margin: 8px 0 14px; }
th, td { border: 1px solid #dde1e6; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f0f2f5; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font: 13px/1.3 ui-monospace, "DejaVu Sans Mono", monospace; background: #f0f2f5;
  padding: 1px 4px; border-radius: 3px; overflow-wrap: anywhere; }
.sev { display: inline-block; min-width: 52px; text-align: center; font-weight: 700;
  border-radius: 3px; padding: 0 6px; color: #fff; }
.sev-error { background: #c81e1e; } .sev-warn { background: #c27c00; } .sev-info { background: #4a6fa5; }
.finding { border: 1px solid #dde1e6; border-radius: 6px; padding: 8px 14px; margin: 10px 0; }
.fix { background: #eef8ee; border-left: 4px solid #2e8b3e; padding: 6px 10px; }
.verdict { font-weight: 700; } .v-reproduced { color: #8a4b00; } .v-fixed { color: #1e7b34; }
.v-unexpected { color: #c81e1e; } .v-skipped { color: #666; }
.pass { color: #1e7b34; font-weight: 700; } .fail { color: #c81e1e; font-weight: 700; }
figure.chart { margin: 12px 0 18px; }
figure.chart svg { display: block; max-width: 100%; height: auto; border: 1px solid #dde1e6; }
figcaption { font-weight: 600; margin-bottom: 4px; }
.muted { color: #5b6470; }
footer { margin-top: 30px; color: #5b6470; font-size: 13px; }
"#;

/// Render a report as one self-contained HTML document.
pub fn render(report: &Report) -> Result<String, ChartError> {
    let report = text::sanitized(report);
    let kind = text::kind_word(report.kind);
    let mut o = String::with_capacity(64 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>vramdoc {kind} report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        esc(&report.environment.hostname)
    );
    let _ = writeln!(o, "<h1>vramdoc {kind} report</h1>");
    let _ = writeln!(
        o,
        "<p class=\"summary\">{}</p>",
        esc(&text::summary(&report))
    );
    environment(&mut o, &report);
    device_table(&mut o, report.devices());
    if let Some(scan) = &report.scan {
        scan_section(&mut o, scan);
    }
    if let Some(replay) = &report.replay {
        let _ = writeln!(o, "<h2>Verdicts</h2>");
        if replay.runs.is_empty() {
            let _ = writeln!(o, "<p>No variants were run.</p>");
        } else {
            verdict_table(&mut o, &replay.runs);
            let _ = writeln!(
                o,
                "<p class=\"muted\">Memory sampled every {}.</p>",
                esc(&text::format_ms(replay.period_us as f64 / 1000.0))
            );
            for (i, run) in replay.runs.iter().enumerate() {
                run_section(&mut o, i, run)?;
            }
        }
    }
    if let Some(run) = &report.run {
        run_report(&mut o, run)?;
    }
    let _ = writeln!(
        o,
        "<footer>Made by vramdoc {}. The JSON report is the source of truth; re-render it with \
         <code>vramdoc report FILE.json --format html</code>.</footer>\n</main>\n</body>\n</html>",
        esc(&report.environment.vramdoc_version)
    );
    Ok(o)
}

fn environment(o: &mut String, r: &Report) {
    let e = &r.environment;
    let backend = match &e.sim_spec {
        Some(spec) => format!("{} (simulated box {})", code(&e.backend), code(spec)),
        None => code(&e.backend),
    };
    let rows: [(&str, String); 10] = [
        ("Host", code(&e.hostname)),
        ("Kernel", code(&e.kernel)),
        ("Driver", code(&e.versions.driver)),
        ("CUDA", code(&e.versions.cuda)),
        ("NVML", code(&e.versions.nvml)),
        ("vramdoc", code(&e.vramdoc_version)),
        ("Backend", backend),
        ("GPUs", esc(&text::devices_phrase(r))),
        ("Command", code(&r.command.join(" "))),
        ("Created", esc(&text::format_utc(r.created_unix_ms))),
    ];
    let _ = writeln!(o, "<h2>Environment</h2>\n<table class=\"env\">");
    for (k, v) in rows {
        let _ = writeln!(o, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    let _ = writeln!(o, "</table>");
}

fn device_table(o: &mut String, devices: &[DeviceInfo]) {
    let _ = writeln!(o, "<h2>Devices</h2>");
    if devices.is_empty() {
        let _ = writeln!(o, "<p>No GPUs were found.</p>");
        return;
    }
    let _ = writeln!(
        o,
        "<table class=\"devices\"><tr><th class=\"num\">GPU</th><th>Name</th><th>Bus</th>\
         <th class=\"num\">Total</th><th class=\"num\">Used</th><th class=\"num\">Free</th>\
         <th class=\"num\">Reserved</th><th class=\"num\">Util</th><th class=\"num\">Temp</th></tr>"
    );
    for d in devices {
        let m = &d.memory;
        let _ = writeln!(
            o,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{} ({})</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            d.index,
            esc(&d.name),
            code(&d.pci_bus_id),
            format_bytes(m.total),
            format_bytes(m.used),
            text::percent(m.used, m.total),
            format_bytes(m.free),
            format_bytes(m.reserved),
            text::utilization(d),
            text::temperature(d),
        );
    }
    let _ = writeln!(o, "</table>");
}

fn scan_section(o: &mut String, scan: &ScanResult) {
    let _ = writeln!(o, "<h2>Findings ({})</h2>", scan.findings.len());
    if scan.findings.is_empty() {
        let _ = writeln!(o, "<p>No findings.</p>");
    }
    let mut findings: Vec<&Finding> = scan.findings.iter().collect();
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for f in findings {
        finding(o, f);
    }
    if !scan.headroom.is_empty() {
        let _ = writeln!(
            o,
            "<h2>Headroom for a new engine</h2>\n<table class=\"headroom\"><tr>\
             <th class=\"num\">GPU</th><th class=\"num\">Max gpu_memory_utilization</th>\
             <th>Arithmetic</th></tr>"
        );
        for h in &scan.headroom {
            let _ = writeln!(
                o,
                "<tr><td class=\"num\">{}</td><td class=\"num\">{:.2}</td><td>{}</td></tr>",
                h.device,
                h.max_gpu_memory_utilization,
                esc(&h.arithmetic)
            );
        }
        let _ = writeln!(o, "</table>");
    }
    let _ = writeln!(o, "<h2>Processes ({})</h2>", scan.processes.len());
    if scan.processes.is_empty() {
        let _ = writeln!(o, "<p>No process holds GPU memory.</p>");
        return;
    }
    let _ = writeln!(
        o,
        "<table class=\"processes\"><tr><th class=\"num\">PID</th><th>Name</th><th>User</th>\
         <th>GPU memory</th><th>CUDA_VISIBLE_DEVICES</th><th>Container</th><th>Command</th></tr>"
    );
    for p in &scan.processes {
        process_row(o, p);
    }
    let _ = writeln!(o, "</table>");
    if scan.processes.iter().any(|p| !p.visible) {
        let _ = writeln!(
            o,
            "<p class=\"muted\"><em>not visible</em>: the driver reports the PID but it is not \
             in vramdoc's PID namespace (another container, or a process that has exited).</p>"
        );
    }
}

fn finding(o: &mut String, f: &Finding) {
    let sev = f.severity.as_str();
    let _ = writeln!(
        o,
        "<div class=\"finding\"><h3><span class=\"sev sev-{sev}\">{}</span> {}: {}</h3>",
        text::severity_word(f.severity),
        code(&f.id),
        esc(&f.title)
    );
    let mut items = Vec::new();
    if !f.devices.is_empty() {
        let list: Vec<String> = f.devices.iter().map(u32::to_string).collect();
        items.push(format!("<li>Where: GPU {}", list.join(", ")));
        if let Some(pid) = f.pid {
            if let Some(s) = items.last_mut() {
                let _ = write!(s, " · PID {pid}");
            }
        }
    } else if let Some(pid) = f.pid {
        items.push(format!("<li>Where: PID {pid}"));
    }
    for e in &f.evidence {
        items.push(format!(
            "<li>{}: <strong>{}</strong>",
            esc(&e.label),
            esc(&e.value)
        ));
    }
    if !items.is_empty() {
        let _ = writeln!(o, "<ul>{}</ul>", items.join("</li>") + "</li>");
    }
    let _ = writeln!(
        o,
        "<p class=\"fix\"><strong>Fix:</strong> {}</p></div>",
        inline_code(&f.fix)
    );
}

fn process_row(o: &mut String, p: &ProcessInfo) {
    let pid = if p.visible {
        p.pid.to_string()
    } else {
        format!("{} <em>not visible</em>", p.pid)
    };
    let mem = text::process_memory(p);
    let opt = |s: &Option<String>| s.as_deref().map_or("?".to_string(), code);
    let _ = writeln!(
        o,
        "<tr><td class=\"num\">{pid}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>{}</td></tr>",
        opt(&p.name),
        opt(&p.user),
        mem.join("<br>"),
        code(&p.cuda_visible_devices),
        p.container.as_deref().map_or(String::new(), code),
        opt(&p.cmdline),
    );
}

fn verdict_class(v: Verdict) -> String {
    format!("verdict v-{}", text::verdict_word(v))
}

fn verdict_table(o: &mut String, runs: &[VariantRun]) {
    let _ = writeln!(
        o,
        "<table class=\"verdicts\"><tr><th>Scenario</th><th>Variant</th><th>Verdict</th>\
         <th class=\"num\">Checks</th><th>Failure</th><th>Peak used</th>\
         <th class=\"num\">Duration</th></tr>"
    );
    for (i, r) in runs.iter().enumerate() {
        let passed = r.checks.iter().filter(|c| c.passed).count();
        let failure = r.error.as_ref().map_or(String::new(), |e| {
            format!("{} at step {}", esc(e.kind.as_str()), e.step)
        });
        let peak = r
            .peaks
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
            });
        let (checks, duration) = if r.verdict == Verdict::Skipped {
            ("–".to_string(), "–".to_string())
        } else {
            (
                format!("{passed}/{}", r.checks.len()),
                esc(&text::format_ms(r.duration_ms as f64)),
            )
        };
        let _ = writeln!(
            o,
            "<tr><td><a href=\"#run-{i}\">{}</a></td><td>{}</td><td class=\"{}\">{}</td>\
             <td class=\"num\">{checks}</td><td>{failure}</td><td>{peak}</td>\
             <td class=\"num\">{duration}</td></tr>",
            code(&r.scenario),
            code(&r.variant),
            verdict_class(r.verdict),
            text::verdict_word(r.verdict),
        );
    }
    let _ = writeln!(o, "</table>");
}

fn run_section(o: &mut String, i: usize, r: &VariantRun) -> Result<(), ChartError> {
    let _ = writeln!(
        o,
        "<section class=\"run\" id=\"run-{i}\">\n<h2>{} / {}: <span class=\"{}\">{}</span></h2>",
        code(&r.scenario),
        code(&r.variant),
        verdict_class(r.verdict),
        text::verdict_word(r.verdict)
    );
    let mut facts = vec![format!("Source: {}", esc(&r.source))];
    if let Some(pid) = r.worker_pid {
        facts.push(format!("worker PID {pid}"));
    }
    if r.verdict != Verdict::Skipped {
        facts.push(format!(
            "ran {}",
            esc(&text::format_ms(r.duration_ms as f64))
        ));
    }
    let _ = writeln!(
        o,
        "<p><em>{}.</em> {}.</p>",
        esc(text::verdict_meaning(r.verdict)),
        facts.join(" · ")
    );
    if let Some(reason) = &r.reason {
        let _ = writeln!(o, "<p><strong>Reason:</strong> {}</p>", esc(reason));
    }
    if let Some(e) = &r.error {
        let _ = writeln!(
            o,
            "<p><strong>Failure:</strong> {} at step {} ({}) after {}: {}</p>",
            esc(e.kind.as_str()),
            e.step,
            code(&e.step_label),
            esc(&text::format_ms(e.t_ms)),
            esc(&e.message)
        );
    }
    if !r.checks.is_empty() {
        let _ = writeln!(o, "<ul class=\"checks\">");
        for c in &r.checks {
            let (cls, mark) = if c.passed {
                ("pass", "✔ pass")
            } else {
                ("fail", "✘ fail")
            };
            let _ = writeln!(
                o,
                "<li><span class=\"{cls}\">{mark}</span> {}: {}</li>",
                esc(&c.expectation),
                esc(&c.detail)
            );
        }
        let _ = writeln!(o, "</ul>");
    }
    if !r.peaks.is_empty() {
        let _ = writeln!(
            o,
            "<table class=\"peaks\"><tr><th class=\"num\">GPU</th><th class=\"num\">Total</th>\
             <th class=\"num\">Peak used</th><th class=\"num\">Of total</th>\
             <th class=\"num\">At</th></tr>"
        );
        for p in &r.peaks {
            let _ = writeln!(
                o,
                "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                p.device,
                format_bytes(p.total),
                format_bytes(p.peak_used),
                text::percent(p.peak_used, p.total),
                esc(&text::format_ms(p.t_ms))
            );
        }
        let _ = writeln!(o, "</table>");
    }
    let span = text::time_span(r);
    let markers = text::chart_markers(r);
    let charted = device_figures(o, &r.timeline, span, &markers)?;
    if charted == 0 && r.verdict != Verdict::Skipped {
        let _ = writeln!(o, "<p class=\"muted\">No memory samples were recorded.</p>");
    }
    if charted > 0 && !markers.is_empty() {
        marker_table(o, &markers);
    }
    let gaps = text::gap_lines(r);
    if !gaps.is_empty() {
        let _ = writeln!(
            o,
            "<p>Sampling gaps (the timeline has no data there):</p>\n<ul class=\"gaps\">"
        );
        for g in &gaps {
            let _ = writeln!(o, "<li>{}</li>", esc(g));
        }
        let _ = writeln!(o, "</ul>");
    }
    let _ = writeln!(o, "</section>");
    Ok(())
}

/// One chart figure per device of `timeline` that has samples; returns how many.
fn device_figures(
    o: &mut String,
    timeline: &crate::report::Timeline,
    span: f64,
    markers: &[ChartMarker],
) -> Result<usize, ChartError> {
    let mut charted = 0;
    for s in timeline.devices.iter().filter(|s| !s.samples.is_empty()) {
        let svg = chart::device_chart(s, span, markers)?;
        let peak = s.samples.iter().map(|x| x.1).max().unwrap_or(0);
        let _ = writeln!(
            o,
            "<figure class=\"chart\" data-device=\"{}\"><figcaption>GPU {}: used memory \
             (peak {} of {}, {})</figcaption>\n{svg}</figure>",
            s.device,
            s.device,
            format_bytes(peak),
            format_bytes(s.total),
            text::percent(peak, s.total)
        );
        charted += 1;
    }
    Ok(charted)
}

fn marker_table(o: &mut String, markers: &[ChartMarker]) {
    let _ = writeln!(
        o,
        "<table class=\"markers\"><tr><th>Mark</th><th class=\"num\">Time</th><th>Kind</th>\
         <th>Label</th><th>GPU</th></tr>"
    );
    for m in markers {
        let cls = if m.is_failure() {
            " class=\"fail\""
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "<tr><td{cls}>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&m.symbol.to_string()),
            esc(&text::format_ms(m.t_ms)),
            esc(&m.kind),
            esc(&m.label),
            m.device.map_or("all".to_string(), |d| d.to_string())
        );
    }
    let _ = writeln!(o, "</table>");
}

/// Escape text for HTML element content and double-quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `<code>` holding `s`, escaped.
fn code(s: &str) -> String {
    if s.is_empty() {
        return String::new();
    }
    format!("<code>{}</code>", esc(s))
}

/// Escaped text where balanced `` `code` `` spans become `<code>` (fix texts use them).
fn inline_code(s: &str) -> String {
    let parts: Vec<&str> = s.split('`').collect();
    if parts.len().is_multiple_of(2) {
        // Unbalanced backticks: show them as they are.
        return esc(s);
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| if i % 2 == 1 { code(p) } else { esc(p) })
        .collect()
}

/// `vramdoc run`: the command and how it ended, findings, errors, memory per device with
/// charts, the job's processes, the stderr tail.
fn run_report(o: &mut String, run: &crate::report::RunResult) -> Result<(), ChartError> {
    let how = match (&run.exit.signal_name, run.exit.code) {
        (Some(sig), _) => format!("killed by {} (status {})", esc(sig), run.exit.status),
        (None, Some(c)) => format!("exited {c}"),
        _ => format!("ended (status {})", run.exit.status),
    };
    let _ = writeln!(
        o,
        "<h2>Command</h2>\n<p>{} {how} after {}. Memory sampled every {}, process lists every \
         {}.</p>",
        code(&run.command.join(" ")),
        esc(&text::format_ms(run.duration_ms as f64)),
        esc(&text::format_ms(run.period_us as f64 / 1000.0)),
        esc(&text::format_ms(run.process_period_us as f64 / 1000.0))
    );
    let _ = writeln!(o, "<h2>Findings ({})</h2>", run.findings.len());
    if run.findings.is_empty() {
        let _ = writeln!(o, "<p>No findings.</p>");
    }
    let mut findings: Vec<&Finding> = run.findings.iter().collect();
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for f in findings {
        finding(o, f);
    }
    if !run.errors.is_empty() {
        let _ = writeln!(o, "<h2>Errors in the command's output</h2>\n<ul>");
        for e in &run.errors {
            let _ = writeln!(
                o,
                "<li>{} at {}{}: {}</li>",
                code(e.kind.as_str()),
                esc(&text::format_ms(e.t_ms)),
                text::error_facts(e),
                code(&e.line)
            );
        }
        let _ = writeln!(o, "</ul>");
    }
    let _ = writeln!(
        o,
        "<h2>Memory</h2>\n<table class=\"peaks\"><tr><th class=\"num\">GPU</th>\
         <th class=\"num\">Total</th><th class=\"num\">Peak used</th><th class=\"num\">At</th>\
         <th class=\"num\">Job's processes (peak of sum)</th><th class=\"num\">Lowest free</th></tr>"
    );
    for p in &run.peaks {
        let tree = run.tree_peaks.iter().find(|t| t.device == p.device);
        let free = run.min_free.iter().find(|f| f.device == p.device);
        let _ = writeln!(
            o,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} ({})</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            p.device,
            format_bytes(p.total),
            format_bytes(p.peak_used),
            text::percent(p.peak_used, p.total),
            esc(&text::format_ms(p.t_ms)),
            tree.map_or("?".into(), |t| format_bytes(t.peak_used)),
            free.map_or("?".into(), |f| format_bytes(f.min_free)),
        );
    }
    let _ = writeln!(o, "</table>");
    let span = text::timeline_span(&run.timeline);
    let markers = text::timeline_markers(&run.timeline);
    let charted = device_figures(o, &run.timeline, span, &markers)?;
    if charted > 0 && !markers.is_empty() {
        marker_table(o, &markers);
    }
    let _ = writeln!(
        o,
        "<h2>Processes of the job ({})</h2>\n<table class=\"processes\"><tr>\
         <th class=\"num\">PID</th><th class=\"num\">Parent</th><th>Name</th>\
         <th class=\"num\">Seen</th><th class=\"num\">Gone</th><th>Peak per GPU</th>\
         <th>Command</th></tr>",
        run.processes.len()
    );
    for p in &run.processes {
        let peaks = text::peaks_per_gpu(p);
        let opt = |s: &Option<String>| s.as_deref().map_or("?".to_string(), code);
        let _ = writeln!(
            o,
            "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            p.pid,
            p.ppid.map_or("?".into(), |x| x.to_string()),
            opt(&p.name),
            esc(&text::format_ms(p.start_ms)),
            esc(&p.end_ms.map_or("running".into(), text::format_ms)),
            peaks.join("<br>"),
            opt(&p.cmdline)
        );
    }
    let _ = writeln!(o, "</table>");
    if !run.stderr_tail.is_empty() {
        let lines: Vec<String> = run
            .stderr_tail
            .iter()
            .map(|l| esc(&text::clean(l)))
            .collect();
        let _ = writeln!(
            o,
            "<details><summary>Last {} lines of stderr</summary><pre>{}</pre></details>",
            run.stderr_tail.len(),
            lines.join("\n")
        );
    }
    if let Some(f) = &run.samples_file {
        let _ = writeln!(
            o,
            "<p class=\"muted\">Samples were streamed to {}.</p>",
            code(f)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(
            inline_code("use `A=<1>` now"),
            "use <code>A=&lt;1&gt;</code> now"
        );
        assert_eq!(inline_code("odd ` tick <b>"), "odd ` tick &lt;b&gt;");
    }
}
