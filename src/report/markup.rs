//! The one document behind the Markdown and HTML reports (as hyperfine's
//! `export/markup.rs`): [`write_document`] writes a [`Report`] once, against the [`Markup`]
//! primitives (heading, paragraph, list, table, key-value table, blocks, memory chart,
//! collapsed details) and the [`Inline`] content they hold. `super::markdown` and
//! `super::html` implement the primitives: escaping, layout, sparklines or SVG charts. What
//! a report says, and in which order, is decided here only.
//!
//! Inline content says what a piece of text is, never how it looks: [`Inline::Text`] came
//! from the report (a machine, a scenario file or a JSON file wrote it) and is always shown
//! literally; [`Inline::Plain`] is vramdoc's own wording and numbers.

use super::text::{self, ChartMarker};
use crate::gpu::DeviceInfo;
use crate::model::{
    DeviceSeries, Finding, ProcessInfo, Report, RunResult, ScanResult, Severity, Timeline,
    VariantRun, Verdict,
};
use crate::units::format_bytes;

/// A piece of inline content.
#[derive(Debug, Clone, PartialEq)]
pub enum Inline {
    /// Text from the report, shown literally (escaped).
    Text(String),
    /// Text from the report whose balanced backtick spans are code (fix texts name
    /// commands that way); everything else is shown literally.
    Prose(String),
    /// vramdoc's own words and numbers (no markup in them).
    Plain(String),
    /// A code span holding the text literally; nothing when empty.
    Code(String),
    Strong(Vec<Inline>),
    /// Emphasised words of vramdoc's own.
    Em(String),
    /// A measured value next to its label (evidence).
    Value(String),
    Severity(Severity),
    Verdict(Verdict),
    /// A check's outcome.
    Check(bool),
    /// Between the lines of one table cell.
    LineBreak,
    /// Between the lines of one paragraph.
    SoftBreak,
    /// A link to a [`Block::Run`] of this document (where the format has links).
    RunLink {
        index: usize,
        content: Vec<Inline>,
    },
}

use Inline::{Code, Plain, Text};

fn plain(s: impl Into<String>) -> Inline {
    Plain(s.into())
}

fn text(s: impl Into<String>) -> Inline {
    Text(s.into())
}

fn code(s: impl Into<String>) -> Inline {
    Code(s.into())
}

/// `?` for an unknown value, else its code span.
fn code_or_unknown(s: &Option<String>) -> Inline {
    s.as_ref().map_or_else(|| plain("?"), |v| code(v.as_str()))
}

/// What kind of paragraph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Para {
    Normal,
    /// The one-line summary under the title.
    Summary,
    /// A finding's fix.
    Fix,
    /// A side note (sampling period, footnotes).
    Muted,
}

/// A region of the document that belongs together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// One finding: heading, where, evidence, fix.
    Finding,
    /// One variant run of a replay, the target of [`Inline::RunLink`] `index`.
    Run { index: usize },
}

/// A table column: its title and whether it holds numbers (right-aligned).
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub title: Vec<Inline>,
    pub numeric: bool,
}

fn col(title: &str, numeric: bool) -> Column {
    Column {
        title: vec![plain(title)],
        numeric,
    }
}

/// A table cell.
pub type Cell = Vec<Inline>;

/// Memory over time of the devices that have samples, with the markers drawn on it.
#[derive(Debug, Clone)]
pub struct Chart<'a> {
    /// Only devices with samples.
    pub series: Vec<&'a DeviceSeries>,
    /// Milliseconds the chart spans.
    pub span: f64,
    pub markers: Vec<ChartMarker>,
}

/// The primitives a markup implements. Every method appends to the markup's output.
pub trait Markup {
    /// What drawing a chart can fail with.
    type Error;
    /// A heading: 1 the title, 2 a section, 3 a subsection (a finding, a run).
    fn heading(&mut self, level: u8, content: &[Inline]);
    fn paragraph(&mut self, kind: Para, content: &[Inline]);
    /// A bulleted list; `class` names the list's kind where the markup can say it.
    fn list(&mut self, class: Option<&str>, items: &[Vec<Inline>]);
    /// A table with a header row; `class` names the table's kind.
    fn table(&mut self, class: &str, columns: &[Column], rows: &[Vec<Cell>]);
    /// A table of named values, one per row, without a header.
    fn key_values(&mut self, class: &str, rows: &[(&str, Cell)]);
    fn begin(&mut self, block: Block);
    fn end(&mut self, block: Block);
    /// Memory over time; only called with at least one series.
    fn chart(&mut self, chart: &Chart) -> Result<(), Self::Error>;
    /// Lines of raw output (already made safe for a terminal: no control characters),
    /// collapsed under `summary`.
    fn details(&mut self, summary: &str, lines: &[String]);
}

/// Write `report` (already [`text::sanitized`]) as the body of a document: title, summary,
/// environment, devices, then the scan, replay or run sections.
pub fn write_document<M: Markup>(m: &mut M, report: &Report) -> Result<(), M::Error> {
    let kind = text::kind_word(report.kind());
    m.heading(1, &[plain(format!("vramdoc {kind} report"))]);
    m.paragraph(Para::Summary, &[text(text::summary(report))]);
    environment(m, report);
    let listed = report.scan().map(|s| s.processes.as_slice()).unwrap_or(&[]);
    devices(m, report.devices(), listed);
    if let Some(scan) = report.scan() {
        scan_sections(m, scan);
    }
    if let Some(replay) = report.replay() {
        m.heading(2, &[plain("Verdicts")]);
        if replay.runs.is_empty() {
            m.paragraph(Para::Normal, &[plain("No variants were run.")]);
        } else {
            verdict_table(m, &replay.runs);
            let every = text::format_ms(replay.period_us as f64 / 1000.0);
            m.paragraph(
                Para::Muted,
                &[plain(format!("Memory sampled every {every}."))],
            );
            for (index, run) in replay.runs.iter().enumerate() {
                variant_run(m, index, run)?;
            }
        }
    }
    if let Some(run) = report.run() {
        run_sections(m, run, report.devices())?;
    }
    Ok(())
}

fn environment<M: Markup>(m: &mut M, r: &Report) {
    let e = &r.environment;
    let backend = match &e.sim_spec {
        Some(spec) => vec![
            code(e.backend.as_str()),
            plain(" (simulated box "),
            code(spec.as_str()),
            plain(")"),
        ],
        None => vec![code(e.backend.as_str())],
    };
    m.heading(2, &[plain("Environment")]);
    m.key_values(
        "env",
        &[
            ("Host", vec![code(e.hostname.as_str())]),
            ("Kernel", vec![code(e.kernel.as_str())]),
            ("Driver", vec![code(e.versions.driver.as_str())]),
            ("CUDA", vec![code(e.versions.cuda.as_str())]),
            ("NVML", vec![code(e.versions.nvml.as_str())]),
            ("vramdoc", vec![code(e.vramdoc_version.as_str())]),
            ("Backend", backend),
            ("GPUs", vec![text(text::devices_phrase(r))]),
            ("Command", vec![code(r.command.join(" "))]),
            ("Created", vec![plain(text::format_utc(r.created_unix_ms))]),
        ],
    );
}

/// `processes`: scan's processes, whose sum is shown for a device whose memory is unknown.
fn devices<M: Markup>(m: &mut M, devices: &[DeviceInfo], processes: &[crate::model::ProcessInfo]) {
    m.heading(2, &[plain("Devices")]);
    if devices.is_empty() {
        m.paragraph(Para::Normal, &[plain("No GPUs were found.")]);
        return;
    }
    let columns = [
        col("GPU", true),
        col("Name", false),
        col("Bus", false),
        col("Total", true),
        col("Used", true),
        col("Free", true),
        col("Reserved", true),
        col("Util", true),
        col("Temp", true),
    ];
    let rows: Vec<Vec<Cell>> = devices
        .iter()
        .map(|d| {
            let mem = &d.memory;
            if d.memory_unknown.is_some() {
                let held = text::process_sum(processes, d.index);
                let na = || vec![plain("n/a")];
                return vec![
                    vec![plain(d.index.to_string())],
                    vec![text(d.name.as_str())],
                    vec![code(d.pci_bus_id.as_str())],
                    na(),
                    vec![plain(format!("{} by processes", format_bytes(held)))],
                    na(),
                    na(),
                    vec![plain(text::utilization(d))],
                    vec![plain(text::temperature(d))],
                ];
            }
            vec![
                vec![plain(d.index.to_string())],
                vec![text(d.name.as_str())],
                vec![code(d.pci_bus_id.as_str())],
                vec![plain(format_bytes(mem.total))],
                vec![plain(format!(
                    "{} ({})",
                    format_bytes(mem.used),
                    text::percent(mem.used, mem.total)
                ))],
                vec![plain(format_bytes(mem.free))],
                vec![plain(format_bytes(mem.reserved))],
                vec![plain(text::utilization(d))],
                vec![plain(text::temperature(d))],
            ]
        })
        .collect();
    m.table("devices", &columns, &rows);
}

/// `### Findings (N)`, then each finding, most severe first, numbered.
fn findings<M: Markup>(m: &mut M, findings: &[Finding]) {
    m.heading(2, &[plain(format!("Findings ({})", findings.len()))]);
    if findings.is_empty() {
        m.paragraph(Para::Normal, &[plain("No findings.")]);
    }
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    sorted.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for (i, f) in sorted.into_iter().enumerate() {
        finding(m, i + 1, f);
    }
}

fn finding<M: Markup>(m: &mut M, n: usize, f: &Finding) {
    m.begin(Block::Finding);
    m.heading(
        3,
        &[
            plain(format!("{n}. ")),
            Inline::Severity(f.severity),
            plain(" "),
            code(f.id.as_str()),
            plain(": "),
            text(f.title.as_str()),
        ],
    );
    let mut whereabouts = Vec::new();
    if !f.devices.is_empty() {
        let list: Vec<String> = f.devices.iter().map(u32::to_string).collect();
        whereabouts.push(format!("GPU {}", list.join(", ")));
    }
    if let Some(pid) = f.pid {
        whereabouts.push(format!("PID {pid}"));
    }
    let mut items = Vec::new();
    if !whereabouts.is_empty() {
        items.push(vec![plain(format!("Where: {}", whereabouts.join(" · ")))]);
    }
    for e in &f.evidence {
        items.push(vec![
            text(e.label.as_str()),
            plain(": "),
            Inline::Value(e.value.clone()),
        ]);
    }
    if !items.is_empty() {
        m.list(None, &items);
    }
    m.paragraph(
        Para::Fix,
        &[
            Inline::Strong(vec![plain("Fix:")]),
            plain(" "),
            Inline::Prose(f.fix.clone()),
        ],
    );
    m.end(Block::Finding);
}

fn scan_sections<M: Markup>(m: &mut M, scan: &ScanResult) {
    findings(m, &scan.findings);
    if !scan.headroom.is_empty() {
        m.heading(2, &[plain("Headroom for a new engine")]);
        let columns = [
            col("GPU", true),
            Column {
                title: vec![plain("Max "), code("gpu_memory_utilization")],
                numeric: true,
            },
            col("Arithmetic", false),
        ];
        let rows: Vec<Vec<Cell>> = scan
            .headroom
            .iter()
            .map(|h| {
                vec![
                    vec![plain(h.device.to_string())],
                    vec![plain(format!("{:.2}", h.max_gpu_memory_utilization))],
                    vec![text(h.arithmetic.as_str())],
                ]
            })
            .collect();
        m.table("headroom", &columns, &rows);
    }
    m.heading(2, &[plain(format!("Processes ({})", scan.processes.len()))]);
    if scan.processes.is_empty() {
        m.paragraph(Para::Normal, &[plain("No process holds GPU memory.")]);
        return;
    }
    let columns = [
        col("PID", true),
        col("Name", false),
        col("User", false),
        col("GPU memory", false),
        col("CUDA_VISIBLE_DEVICES", false),
        col("Container", false),
        col("Command", false),
    ];
    let rows: Vec<Vec<Cell>> = scan.processes.iter().map(process_row).collect();
    m.table("processes", &columns, &rows);
    if let Some(note) = &scan.pods_note {
        m.paragraph(Para::Muted, &[plain(format!("Pods: {note}"))]);
    }
    if scan.processes.iter().any(|p| !p.visible) {
        m.paragraph(
            Para::Muted,
            &[
                Inline::Em("not visible".into()),
                plain(
                    ": the driver reports the PID but it is not in vramdoc's PID namespace \
                     (another container, or a process that has exited).",
                ),
            ],
        );
    }
}

/// Lines of one cell, with [`Inline::LineBreak`] between them.
fn lines(items: Vec<String>) -> Cell {
    let mut cell = Vec::with_capacity(items.len() * 2);
    for (i, s) in items.into_iter().enumerate() {
        if i > 0 {
            cell.push(Inline::LineBreak);
        }
        cell.push(plain(s));
    }
    cell
}

fn process_row(p: &ProcessInfo) -> Vec<Cell> {
    let mut pid = vec![plain(p.pid.to_string())];
    if !p.visible {
        pid.extend([plain(" "), Inline::Em("not visible".into())]);
    }
    vec![
        pid,
        vec![code_or_unknown(&p.name)],
        vec![code_or_unknown(&p.user)],
        lines(text::process_memory(p)),
        vec![code(p.cuda_visible_devices.as_str())],
        match (&p.pod, &p.container) {
            (Some(pod), _) => vec![text(pod.describe())],
            (None, Some(c)) => vec![code(c.as_str())],
            (None, None) => Vec::new(),
        },
        vec![code_or_unknown(&p.cmdline)],
    ]
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

fn verdict_table<M: Markup>(m: &mut M, runs: &[VariantRun]) {
    let columns = [
        col("Scenario", false),
        col("Variant", false),
        col("Verdict", false),
        col("Checks", true),
        col("Failure", false),
        col("Peak used", false),
        col("Duration", true),
    ];
    let rows: Vec<Vec<Cell>> = runs
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let passed = r.checks.iter().filter(|c| c.passed).count();
            let failure = r.error.as_ref().map_or_else(Vec::new, |e| {
                vec![text(e.kind.as_str()), plain(format!(" at step {}", e.step))]
            });
            let (checks, duration) = if r.verdict == Verdict::Skipped {
                ("–".to_string(), "–".to_string())
            } else {
                (
                    format!("{passed}/{}", r.checks.len()),
                    text::format_ms(r.duration_ms as f64),
                )
            };
            vec![
                vec![Inline::RunLink {
                    index,
                    content: vec![code(r.scenario.as_str())],
                }],
                vec![code(r.variant.as_str())],
                vec![Inline::Strong(vec![Inline::Verdict(r.verdict)])],
                vec![plain(checks)],
                failure,
                vec![plain(peak_phrase(r))],
                vec![plain(duration)],
            ]
        })
        .collect();
    m.table("verdicts", &columns, &rows);
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// The devices of `timeline` with samples, charted over `span` with `markers`; `None` when
/// no device has a sample.
fn chart_of(timeline: &Timeline, span: f64, markers: Vec<ChartMarker>) -> Option<Chart<'_>> {
    let series: Vec<&DeviceSeries> = timeline
        .devices
        .iter()
        .filter(|s| !s.samples.is_empty())
        .collect();
    (!series.is_empty()).then_some(Chart {
        series,
        span,
        markers,
    })
}

fn variant_run<M: Markup>(m: &mut M, index: usize, r: &VariantRun) -> Result<(), M::Error> {
    m.begin(Block::Run { index });
    m.heading(
        3,
        &[
            code(r.scenario.as_str()),
            plain(" / "),
            code(r.variant.as_str()),
            plain(": "),
            Inline::Verdict(r.verdict),
        ],
    );
    let mut about = vec![
        Inline::Em(format!("{}.", text::verdict_meaning(r.verdict))),
        plain(" Source: "),
        text(r.source.trim_end_matches('.')),
        plain("."),
    ];
    let mut facts = Vec::new();
    if let Some(pid) = r.worker_pid {
        facts.push(format!("worker PID {pid}"));
    }
    if r.verdict != Verdict::Skipped {
        facts.push(format!("ran {}", text::format_ms(r.duration_ms as f64)));
    }
    if !facts.is_empty() {
        about.push(Inline::SoftBreak);
        about.push(plain(format!("{}.", capitalise(&facts.join(", ")))));
    }
    m.paragraph(Para::Normal, &about);
    if let Some(reason) = &r.reason {
        m.paragraph(
            Para::Normal,
            &[
                Inline::Strong(vec![plain("Reason:")]),
                plain(" "),
                text(reason.as_str()),
            ],
        );
    }
    if let Some(e) = &r.error {
        m.paragraph(
            Para::Normal,
            &[
                Inline::Strong(vec![plain("Failure:")]),
                plain(" "),
                text(e.kind.as_str()),
                plain(format!(" at step {} (", e.step)),
                code(e.step_label.as_str()),
                plain(format!(") after {}: ", text::format_ms(e.t_ms))),
                text(e.message.as_str()),
            ],
        );
    }
    let gaps = text::gap_lines(r);
    if !gaps.is_empty() {
        m.paragraph(
            Para::Normal,
            &[
                Inline::Strong(vec![plain("Sampling gaps")]),
                plain(" (the timeline has no data there):"),
            ],
        );
        let items: Vec<Vec<Inline>> = gaps.into_iter().map(|g| vec![text(g)]).collect();
        m.list(Some("gaps"), &items);
    }
    if !r.checks.is_empty() {
        m.paragraph(Para::Normal, &[plain("Checks:")]);
        let items: Vec<Vec<Inline>> = r
            .checks
            .iter()
            .map(|c| {
                vec![
                    Inline::Check(c.passed),
                    plain(" "),
                    text(c.expectation.as_str()),
                    plain(": "),
                    text(c.detail.as_str()),
                ]
            })
            .collect();
        m.list(Some("checks"), &items);
    }
    if !r.peaks.is_empty() {
        let columns = [
            col("GPU", true),
            col("Total", true),
            col("Peak used", true),
            col("Of total", true),
            col("At", true),
        ];
        let rows: Vec<Vec<Cell>> = r
            .peaks
            .iter()
            .map(|p| {
                vec![
                    vec![plain(p.device.to_string())],
                    vec![plain(format_bytes(p.total))],
                    vec![plain(format_bytes(p.peak_used))],
                    vec![plain(text::percent(p.peak_used, p.total))],
                    vec![plain(text::format_ms(p.t_ms))],
                ]
            })
            .collect();
        m.table("peaks", &columns, &rows);
    }
    match chart_of(&r.timeline, text::time_span(r), text::chart_markers(r)) {
        Some(chart) => m.chart(&chart)?,
        None if r.verdict != Verdict::Skipped => {
            m.paragraph(Para::Muted, &[plain("No memory samples were recorded.")])
        }
        None => {}
    }
    m.end(Block::Run { index });
    Ok(())
}

/// `vramdoc run`: the command and how it ended, findings, errors in its output, memory per
/// device with the chart, the job's processes, the stderr tail.
/// `devices`: the environment's, naming MIG instances as scan does (`0/1`).
fn run_sections<M: Markup>(
    m: &mut M,
    run: &RunResult,
    devices: &[DeviceInfo],
) -> Result<(), M::Error> {
    let how = match (&run.exit.signal_name, run.exit.code) {
        _ if run.attached.is_some() => vec![plain(" recorded while attached")],
        (Some(sig), _) => vec![
            plain(" killed by "),
            text(sig.as_str()),
            plain(format!(" (status {})", run.exit.status)),
        ],
        (None, Some(c)) => vec![plain(format!(" exited {c}"))],
        _ => vec![plain(format!(" ended (status {})", run.exit.status))],
    };
    m.heading(2, &[plain("Command")]);
    let mut command = vec![code(run.command.join(" "))];
    command.extend(how);
    command.push(plain(format!(
        " after {}. Memory sampled every {}, process lists every {}.",
        text::format_ms(run.duration_ms as f64),
        text::format_ms(run.period_us as f64 / 1000.0),
        text::format_ms(run.process_period_us as f64 / 1000.0)
    )));
    m.paragraph(Para::Normal, &command);
    findings(m, &run.findings);
    if !run.errors.is_empty() {
        m.heading(2, &[plain("Errors in the command's output")]);
        let items: Vec<Vec<Inline>> = run
            .errors
            .iter()
            .map(|e| {
                vec![
                    code(e.kind.as_str()),
                    plain(format!(
                        " at {}{}: ",
                        text::format_ms(e.t_ms),
                        text::error_facts(e)
                    )),
                    code(e.line.as_str()),
                ]
            })
            .collect();
        m.list(None, &items);
    }
    let chart = chart_of(
        &run.timeline,
        text::timeline_span(&run.timeline),
        text::timeline_markers(&run.timeline),
    );
    if !run.peaks.is_empty() || chart.is_some() {
        m.heading(2, &[plain("Memory")]);
    }
    if !run.peaks.is_empty() {
        let columns = [
            col("GPU", true),
            col("Total", true),
            col("Peak used", true),
            col("At", true),
            col("Job's processes (peak of sum)", true),
            col("Lowest free", true),
        ];
        let rows: Vec<Vec<Cell>> = run
            .peaks
            .iter()
            .map(|p| {
                let tree = run.tree_peaks.iter().find(|t| t.device == p.device);
                let free = run.min_free.iter().find(|f| f.device == p.device);
                let name = devices
                    .iter()
                    .find(|d| d.index == p.device)
                    .map_or_else(|| p.device.to_string(), DeviceInfo::label);
                vec![
                    vec![plain(name)],
                    vec![plain(format_bytes(p.total))],
                    vec![plain(format!(
                        "{} ({})",
                        format_bytes(p.peak_used),
                        text::percent(p.peak_used, p.total)
                    ))],
                    vec![plain(text::format_ms(p.t_ms))],
                    vec![plain(
                        tree.map_or("?".into(), |t| format_bytes(t.peak_used)),
                    )],
                    vec![plain(free.map_or("?".into(), |f| format_bytes(f.min_free)))],
                ]
            })
            .collect();
        m.table("peaks", &columns, &rows);
    }
    if let Some(chart) = chart {
        m.chart(&chart)?;
    }
    m.heading(
        2,
        &[plain(format!(
            "Processes of the job ({})",
            run.processes.len()
        ))],
    );
    if !run.processes.is_empty() {
        let columns = [
            col("PID", true),
            col("Parent", true),
            col("Name", false),
            col("Seen", true),
            col("Gone", true),
            col("Peak per GPU", false),
            col("Command", false),
        ];
        let rows: Vec<Vec<Cell>> = run
            .processes
            .iter()
            .map(|p| {
                vec![
                    vec![plain(p.pid.to_string())],
                    vec![plain(p.ppid.map_or("?".into(), |x| x.to_string()))],
                    {
                        // Why it is the job's when not as a descendant (docs/run.md).
                        let mut name = vec![code_or_unknown(&p.name)];
                        if let Some(m) = &p.member {
                            name.push(plain(" via "));
                            name.push(text(m.as_str()));
                        }
                        if let Some(pod) = &p.pod {
                            name.push(plain(" in "));
                            name.push(text(pod.describe()));
                        }
                        name
                    },
                    vec![plain(text::format_ms(p.start_ms))],
                    vec![plain(p.end_ms.map_or("running".into(), text::format_ms))],
                    lines(text::peaks_per_gpu(p)),
                    vec![code_or_unknown(&p.cmdline)],
                ]
            })
            .collect();
        m.table("processes", &columns, &rows);
    }
    if !run.stderr_tail.is_empty() {
        let lines: Vec<String> = run
            .stderr_tail
            .iter()
            .map(|l| crate::term::one_line(l))
            .collect();
        m.details(
            &format!("Last {} lines of stderr", run.stderr_tail.len()),
            &lines,
        );
    }
    if let Some(f) = &run.samples_file {
        m.paragraph(
            Para::Muted,
            &[
                plain("Samples were streamed to "),
                code(f.as_str()),
                plain("."),
            ],
        );
    }
    Ok(())
}
