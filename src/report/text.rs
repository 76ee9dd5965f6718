//! Wording and numbers shared by the human-readable renderers (Markdown, HTML): the one-line
//! summary, verdict and severity words, dates and durations, the render-time redaction pass,
//! and the time-binning behind sparklines and charts. Pure functions, no I/O.

use crate::gpu::DeviceInfo;
use crate::model::{
    Body, Finding, GapKind, GapReason, ProcessInfo, Report, ReportKind, Severity, VariantRun,
    Verdict,
};
use crate::redact::{redact_args, redact_text};
use crate::term::one_line;
use crate::units::format_bytes;

/// A copy of `report` with its command line and process command lines passed through
/// [`crate::redact`] again. Collectors redact already; this makes the renderers safe even for
/// a hand-edited or foreign JSON file. Redaction is idempotent, so an already redacted
/// report comes out unchanged.
pub fn sanitized(report: &Report) -> Report {
    let mut r = report.clone();
    r.command = redact_args(&r.command);
    if let Some(scan) = r.scan_mut() {
        for p in &mut scan.processes {
            if let Some(c) = p.cmdline.as_mut() {
                *c = redact_text(c);
            }
        }
    }
    if let Some(run) = r.run_mut() {
        run.command = redact_args(&run.command);
        for p in &mut run.processes {
            if let Some(c) = p.cmdline.as_mut() {
                *c = redact_text(c);
            }
        }
        for l in run.stderr_tail.iter_mut() {
            *l = redact_text(l);
        }
        for e in run.errors.iter_mut() {
            e.line = redact_text(&e.line);
        }
    }
    r
}

pub fn kind_word(kind: ReportKind) -> &'static str {
    match kind {
        ReportKind::Scan => "scan",
        ReportKind::Replay => "replay",
        ReportKind::Run => "run",
    }
}

pub fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Reproduced => "reproduced",
        Verdict::Fixed => "fixed",
        Verdict::Unexpected => "unexpected",
        Verdict::Skipped => "skipped",
    }
}

/// What a verdict means for the person reading the ticket.
pub fn verdict_meaning(v: Verdict) -> &'static str {
    match v {
        Verdict::Reproduced => "The bug variant showed the failure it documents",
        Verdict::Fixed => "The fix variant completed within its expectations",
        Verdict::Unexpected => "The variant did not behave as its expectations say",
        Verdict::Skipped => "Not run",
    }
}

pub fn severity_word(s: Severity) -> &'static str {
    match s {
        Severity::Info => "INFO",
        Severity::Warn => "WARN",
        Severity::Error => "ERROR",
    }
}

/// A finding as plain text: the one rendering the terminal summaries and JUnit share. The
/// head line is `SEVERITY id: title`; `lines` are its evidence (`label: value`) and its fix
/// (`fix: ...`). Each piece is on one line (controls escaped by `term::one_line`).
pub struct FindingText {
    pub head: String,
    pub lines: Vec<String>,
}

pub fn finding_text(f: &Finding) -> FindingText {
    let mut lines: Vec<String> = f
        .evidence
        .iter()
        .map(|ev| format!("{}: {}", one_line(&ev.label), one_line(&ev.value)))
        .collect();
    if !f.fix.is_empty() {
        lines.push(format!("fix: {}", one_line(&f.fix)));
    }
    FindingText {
        head: format!(
            "{} {}: {}",
            severity_word(f.severity),
            f.id,
            one_line(&f.title)
        ),
        lines,
    }
}

/// The one-line summary at the top of every human-readable report (plain text).
pub fn summary(report: &Report) -> String {
    let host = &report.environment.hostname;
    let gpus = devices_phrase(report);
    match &report.body {
        Body::Scan(scan) => {
            let n = scan.findings.len();
            if n == 0 {
                return format!(
                    "vramdoc scan on {host} ({gpus}): no findings; {} process(es) hold GPU memory.",
                    scan.processes.len()
                );
            }
            let count = |s| scan.findings.iter().filter(|f| f.severity == s).count();
            let mut parts = Vec::new();
            for s in [Severity::Error, Severity::Warn, Severity::Info] {
                let c = count(s);
                if c > 0 {
                    parts.push(format!("{c} {}", s.as_str()));
                }
            }
            let worst = scan
                .findings
                .iter()
                .max_by_key(|f| f.severity)
                .map(|f| f.title.as_str())
                .unwrap_or("");
            format!(
                "vramdoc scan on {host} ({gpus}): {n} finding{} ({}); worst: {worst}",
                plural(n),
                parts.join(", ")
            )
        }
        Body::Replay(replay) => {
            let runs = &replay.runs;
            let mut scenarios: Vec<&str> = runs.iter().map(|r| r.scenario.as_str()).collect();
            scenarios.sort_unstable();
            scenarios.dedup();
            let count = |v| runs.iter().filter(|r| r.verdict == v).count();
            format!(
                "vramdoc replay on {host} ({gpus}): {} variant{} of {} scenario{}: {} reproduced, \
                 {} fixed, {} unexpected, {} skipped.",
                runs.len(),
                plural(runs.len()),
                scenarios.len(),
                plural(scenarios.len()),
                count(Verdict::Reproduced),
                count(Verdict::Fixed),
                count(Verdict::Unexpected),
                count(Verdict::Skipped)
            )
        }
        Body::Run(run) => {
            let cmd = one_line(&run.command.join(" "));
            let how = match (run.exit.code, &run.exit.signal_name) {
                _ if run.attached.is_some() => "recorded while attached".to_string(),
                (_, Some(sig)) => format!("killed by {sig} (status {})", run.exit.status),
                (Some(c), None) => format!("exited {c}"),
                (None, None) => format!("ended with status {}", run.exit.status),
            };
            let n = run.findings.len();
            let worst = run
                .findings
                .iter()
                .max_by_key(|f| f.severity)
                .map_or(String::new(), |f| {
                    format!("; worst: {}", one_line(&f.title))
                });
            format!(
                "vramdoc run on {host} ({gpus}): `{cmd}` {how} after {}; {n} finding{}{worst}",
                format_ms(run.duration_ms as f64),
                plural(n)
            )
        }
    }
}

/// The time span a recorded timeline covers: from 0 to its last sample or marker.
pub fn timeline_span(timeline: &crate::model::Timeline) -> f64 {
    let mut end: f64 = 0.0;
    for s in &timeline.devices {
        for &(t, _) in &s.samples {
            if t.is_finite() {
                end = end.max(t);
            }
        }
    }
    for m in &timeline.markers {
        if m.t_ms.is_finite() {
            end = end.max(m.t_ms);
        }
    }
    if end <= 0.0 {
        1.0
    } else {
        end
    }
}

/// A timeline's markers in time order with their chart symbols (as [`chart_markers`]).
pub fn timeline_markers(timeline: &crate::model::Timeline) -> Vec<ChartMarker> {
    numbered(finite_markers(timeline))
}

/// A timeline's markers with a finite time, cleaned for display, not yet numbered.
fn finite_markers(timeline: &crate::model::Timeline) -> Vec<ChartMarker> {
    timeline
        .markers
        .iter()
        .filter(|m| m.t_ms.is_finite())
        .map(|m| ChartMarker {
            t_ms: m.t_ms,
            kind: one_line(m.kind.as_str()),
            label: one_line(&m.label),
            device: m.device,
            symbol: ' ',
        })
        .collect()
}

/// Markers sorted by time with their chart symbols: `X` for failures, `1`..`9`, `a`..`z`
/// for the others in order, `+` past those.
fn numbered(mut ms: Vec<ChartMarker>) -> Vec<ChartMarker> {
    ms.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    const SYMBOLS: &str = "123456789abcdefghijklmnopqrstuvwxyz";
    let mut n = 0;
    for m in &mut ms {
        m.symbol = if m.is_failure() {
            'X'
        } else {
            n += 1;
            SYMBOLS.chars().nth(n - 1).unwrap_or('+')
        };
    }
    ms
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `2 × NVIDIA GeForce RTX 3090, 24.00 GiB each` or a comma list when devices differ.
pub fn devices_phrase(report: &Report) -> String {
    let devs = &report.environment.devices;
    if devs.is_empty() {
        return "no GPUs".into();
    }
    let first = &devs[0];
    // A GPU whose memory query is not supported (GB10) has no total to show.
    let total = |d: &crate::gpu::DeviceInfo| match d.memory_unknown {
        Some(_) => "memory not reported".to_string(),
        None => format_bytes(d.memory.total),
    };
    if devs
        .iter()
        .all(|d| d.name == first.name && d.memory.total == first.memory.total)
    {
        if devs.len() == 1 {
            return format!("1 × {}, {}", first.name, total(first));
        }
        return format!("{} × {}, {} each", devs.len(), first.name, total(first));
    }
    devs.iter()
        .map(|d| format!("{} ({})", d.name, total(d)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn format_utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A time in milliseconds for people: `0 ms`, `850 ms`, `1.25 s`, `2 min 5 s`.
pub fn format_ms(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        return "?".into();
    }
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 120_000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        let s = (ms / 1000.0).round() as u64;
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// `used` as a percentage of `total`, one decimal.
pub fn percent(used: u64, total: u64) -> String {
    if total == 0 {
        return "?".into();
    }
    format!("{:.1}%", used as f64 * 100.0 / total as f64)
}

/// A process's memory per device, `GPU 1: 6.44 GiB` (`n/a` where NVML does not say).
pub fn process_memory(p: &ProcessInfo) -> Vec<String> {
    p.devices
        .iter()
        .map(|u| {
            let used = u.used.map_or("n/a".to_string(), format_bytes);
            format!("GPU {}: {used}", u.device)
        })
        .collect()
}

/// A device's utilization, `97%` or `n/a`.
pub fn utilization(d: &DeviceInfo) -> String {
    d.utilization_gpu.map_or("n/a".into(), |u| format!("{u}%"))
}

/// A device's temperature, `71 °C` or `n/a`.
pub fn temperature(d: &DeviceInfo) -> String {
    d.temperature_c.map_or("n/a".into(), |t| format!("{t} °C"))
}

/// Whether a marker kind is a failure point (drawn in red, `X` in sparklines).
pub fn is_failure_marker(kind: &str) -> bool {
    matches!(kind, "oom" | "error" | "killed")
}

/// The time span a run's charts cover: from 0 to the last sample, marker or error.
pub fn time_span(run: &VariantRun) -> f64 {
    let mut end: f64 = 0.0;
    for s in &run.timeline.devices {
        for &(t, _) in &s.samples {
            if t.is_finite() {
                end = end.max(t);
            }
        }
    }
    for m in &run.timeline.markers {
        if m.t_ms.is_finite() {
            end = end.max(m.t_ms);
        }
    }
    if let Some(e) = &run.error {
        if e.t_ms.is_finite() {
            end = end.max(e.t_ms);
        }
    }
    if end <= 0.0 {
        1.0
    } else {
        end
    }
}

/// Split `[0, span]` into `cells` equal bins and return, per bin, the highest used value
/// sampled in it; a bin without samples repeats the last value seen before it (memory stays
/// where it was between samples); bins before the first sample are `None`.
pub fn bin_max(samples: &[(f64, u64)], span: f64, cells: usize) -> Vec<Option<u64>> {
    let mut bins: Vec<Option<u64>> = vec![None; cells];
    if cells == 0 || span <= 0.0 {
        return bins;
    }
    for &(t, used) in samples {
        if !t.is_finite() {
            continue;
        }
        let i = cell_of(t, span, cells);
        bins[i] = Some(bins[i].map_or(used, |b| b.max(used)));
    }
    // Carry the last sample forward through empty bins.
    let mut sorted: Vec<(f64, u64)> = samples
        .iter()
        .copied()
        .filter(|s| s.0.is_finite())
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut last: Option<u64> = None;
    let mut k = 0;
    for (i, bin) in bins.iter_mut().enumerate() {
        let bin_end = span * (i + 1) as f64 / cells as f64;
        while k < sorted.len() && (sorted[k].0 < bin_end || i + 1 == cells) {
            last = Some(sorted[k].1);
            k += 1;
        }
        if bin.is_none() {
            *bin = last;
        }
    }
    bins
}

/// The bin a time falls in.
pub fn cell_of(t: f64, span: f64, cells: usize) -> usize {
    if cells == 0 {
        return 0;
    }
    let x = (t / span * cells as f64).floor();
    if x.is_nan() || x < 0.0 {
        0
    } else {
        (x as usize).min(cells - 1)
    }
}

/// A marker as the renderers draw it, with its short symbol (`1`..`9`, `a`..`z`, `+` for
/// steps and other points; `X` for failures).
#[derive(Debug, Clone, PartialEq)]
pub struct ChartMarker {
    pub t_ms: f64,
    pub kind: String,
    pub label: String,
    pub device: Option<u32>,
    pub symbol: char,
}

impl ChartMarker {
    pub fn is_failure(&self) -> bool {
        is_failure_marker(&self.kind)
    }

    /// Whether the marker belongs on `device`'s chart.
    pub fn on_device(&self, device: u32) -> bool {
        self.device.is_none_or(|d| d == device)
    }
}

/// The run's markers in time order with symbols; when the run has an error but no failure
/// marker, one is added from the error (so the failure point is always shown).
pub fn chart_markers(run: &VariantRun) -> Vec<ChartMarker> {
    let mut ms = finite_markers(&run.timeline);
    if let Some(e) = &run.error {
        if !ms.iter().any(ChartMarker::is_failure) && e.t_ms.is_finite() {
            let kind = if e.kind == crate::model::StepErrorKind::OutOfMemory {
                "oom"
            } else {
                "error"
            };
            ms.push(ChartMarker {
                t_ms: e.t_ms,
                kind: kind.into(),
                label: one_line(&format!("{} at step {}: {}", e.kind, e.step, e.step_label)),
                device: None,
                symbol: 'X',
            });
        }
    }
    numbered(ms)
}

/// What an error line of a job's output says beyond its text: ` (GPU 0, asked for 2.00 GiB)`,
/// or empty when it names neither.
pub fn error_facts(e: &crate::model::RunError) -> String {
    let mut facts = Vec::new();
    if let Some(d) = e.device {
        facts.push(format!("GPU {d}"));
    }
    if let Some(b) = e.requested {
        facts.push(format!("asked for {}", format_bytes(b)));
    }
    if facts.is_empty() {
        String::new()
    } else {
        format!(" ({})", facts.join(", "))
    }
}

/// A job process's peak on each GPU it used: `GPU 0: 1.00 GiB`, `n/a` where unknown.
pub fn peaks_per_gpu(p: &crate::model::RunProcess) -> Vec<String> {
    p.devices
        .iter()
        .map(|d| {
            format!(
                "GPU {}: {}",
                d.device,
                d.peak.map_or("n/a".to_string(), format_bytes)
            )
        })
        .collect()
}

/// Most sampling gaps listed one by one; the rest are counted.
pub const GAPS_LISTED: usize = 8;

/// One line per sampling gap of a run (at most [`GAPS_LISTED`], then a count of the rest):
/// where the timeline has no data and why. Empty when sampling had no gap.
pub fn gap_lines(run: &VariantRun) -> Vec<String> {
    let gaps = &run.timeline.gaps;
    let mut out: Vec<String> = gaps
        .iter()
        .take(GAPS_LISTED)
        .map(|g| {
            let what = match (&g.kind, g.device) {
                (GapKind::Processes, Some(d)) => format!("process lists of GPU {d}"),
                (GapKind::Processes, None) => "process lists".to_string(),
                (_, Some(d)) => format!("memory of GPU {d}"),
                (_, None) => "memory".to_string(),
            };
            let why = match &g.reason {
                GapReason::Late => format!("{} round(s) missed (sampler late)", g.count),
                GapReason::Failed(error) => format!("{} failed quer(ies): {error}", g.count),
            };
            format!(
                "{what}: no data from {} to {}, {why}",
                format_ms(g.start_ms),
                format_ms(g.end_ms)
            )
        })
        .collect();
    if gaps.len() > GAPS_LISTED {
        out.push(format!("… and {} more gap(s)", gaps.len() - GAPS_LISTED));
    }
    out
}

/// What the processes listed on `device` hold there, summing the usages that are known: the
/// memory shown for a device whose own memory query is not supported (GB10).
pub fn process_sum(processes: &[crate::model::ProcessInfo], device: u32) -> u64 {
    processes
        .iter()
        .filter_map(|p| p.usage_on(device).and_then(|u| u.used))
        .fold(0u64, |a, b| a.saturating_add(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_facts_name_the_gpu_and_the_request_when_known() {
        let mut e = crate::model::RunError {
            t_ms: 1.0,
            kind: "cuda-oom".into(),
            device: Some(1),
            requested: Some(2 << 30),
            line: "x".into(),
        };
        assert_eq!(error_facts(&e), " (GPU 1, asked for 2.00 GiB)");
        e.device = None;
        assert_eq!(error_facts(&e), " (asked for 2.00 GiB)");
        e.requested = None;
        assert_eq!(error_facts(&e), "");
    }

    #[test]
    fn dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_utc(1_795_305_531_000), "2026-11-21 23:58:51 UTC");
    }

    #[test]
    fn durations() {
        assert_eq!(format_ms(2.5), "2.5 ms");
        assert_eq!(format_ms(850.0), "850 ms");
        assert_eq!(format_ms(1250.0), "1.25 s");
        assert_eq!(format_ms(125_000.0), "2 min 5 s");
        assert_eq!(format_ms(f64::NAN), "?");
    }

    #[test]
    fn bins_keep_peaks_and_carry_forward() {
        let s = [(0.0, 1), (1.0, 9), (2.0, 3), (9.5, 7)];
        let b = bin_max(&s, 10.0, 10);
        assert_eq!(
            b,
            vec![
                Some(1),
                Some(9),
                Some(3),
                Some(3),
                Some(3),
                Some(3),
                Some(3),
                Some(3),
                Some(3),
                Some(7)
            ]
        );
        let late = [(5.0, 4)];
        assert_eq!(bin_max(&late, 10.0, 4), vec![None, None, Some(4), Some(4)]);
    }

    #[test]
    fn word_redaction_keeps_clean_text() {
        assert_eq!(
            redact_text("python  serve.py --model x"),
            "python  serve.py --model x"
        );
        let r = redact_text("python serve.py --token hunter2 --x=1");
        assert!(!r.contains("hunter2"), "{r}");
        assert!(r.ends_with("--x=1"));
    }
}
