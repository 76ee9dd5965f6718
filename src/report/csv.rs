//! The findings as CSV (RFC 4180), for spreadsheets and ticket imports: one row per finding
//! of any report kind, `source,id,severity,devices,pid,title` (source: `scan`, `run`, or a
//! replay's `scenario/variant`). A pure function of the model, through [`super::text::sanitized`]
//! like every renderer. Fields a process controls (titles name processes) are quoted when
//! they hold a comma, quote or line break, and a field that a spreadsheet would read as a
//! formula (`=`, `+`, `-`, `@`, tab or carriage return first) is prefixed with `'` (OWASP,
//! "CSV Injection").

use crate::model::{Body, Finding, Report};

/// The CSV header line.
pub const HEADER: &str = "source,id,severity,devices,pid,title";

/// The report's findings as CSV, header first, each line ending in CRLF (RFC 4180).
pub fn render(report: &Report) -> String {
    let report = super::text::sanitized(report);
    let mut out = format!("{HEADER}\r\n");
    let mut rows = |source: &str, findings: &[Finding]| {
        for f in findings {
            let devices: Vec<String> = f.devices.iter().map(u32::to_string).collect();
            let fields = [
                source.to_string(),
                f.id.clone(),
                f.severity.as_str().to_string(),
                devices.join(" "),
                f.pid.map(|p| p.to_string()).unwrap_or_default(),
                crate::term::one_line(&f.title),
            ];
            let row: Vec<String> = fields.iter().map(|s| field(s)).collect();
            out.push_str(&row.join(","));
            out.push_str("\r\n");
        }
    };
    match &report.body {
        Body::Scan(s) => rows("scan", &s.findings),
        Body::Run(r) => rows("run", &r.findings),
        Body::Replay(r) => {
            for run in &r.runs {
                rows(&format!("{}/{}", run.scenario, run.variant), &run.findings);
            }
        }
    }
    out
}

/// One field: formula-looking text made inert, quoted where RFC 4180 needs it.
fn field(s: &str) -> String {
    let inert = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if inert.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", inert.replace('"', "\"\""))
    } else {
        inert
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_and_formulas_made_inert() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(field("-1"), "'-1");
    }
}
