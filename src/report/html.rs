//! HTML: the [`super::markup`] primitives as one self-contained page (inline CSS, inline
//! SVG, no scripts, no network — a Content-Security-Policy forbids any fetch), with per
//! device an SVG chart of used memory over time ([`super::chart`]) and a table of the
//! markers on it. Every string from the report is HTML-escaped; SVG text is escaped by
//! plotters.

use super::chart::{self, ChartError};
use super::markup::{self, Block, Chart, Column, Inline, Markup, Para};
use super::text::{self, ChartMarker};
use crate::model::Report;
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
    let kind = text::kind_word(report.kind());
    let mut h = Html {
        out: String::with_capacity(64 * 1024),
    };
    let _ = write!(
        h.out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>vramdoc {kind} report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        esc(&report.environment.hostname)
    );
    markup::write_document(&mut h, &report)?;
    let _ = writeln!(
        h.out,
        "<footer>Made by vramdoc {}. The JSON report is the source of truth; re-render it with \
         <code>vramdoc report FILE.json --format html</code>.</footer>\n</main>\n</body>\n</html>",
        esc(&report.environment.vramdoc_version)
    );
    Ok(h.out)
}

/// The HTML being written.
#[derive(Debug, Default)]
pub struct Html {
    out: String,
}

fn inline(out: &mut String, content: &[Inline]) {
    for i in content {
        match i {
            Inline::Text(s) | Inline::Plain(s) => out.push_str(&esc(s)),
            Inline::Prose(s) => out.push_str(&inline_code(s)),
            Inline::Code(s) => out.push_str(&code(s)),
            Inline::Strong(c) => {
                out.push_str("<strong>");
                inline(out, c);
                out.push_str("</strong>");
            }
            Inline::Em(s) => {
                let _ = write!(out, "<em>{}</em>", esc(s));
            }
            Inline::Value(s) => {
                let _ = write!(out, "<strong>{}</strong>", esc(s));
            }
            Inline::Severity(s) => {
                let _ = write!(
                    out,
                    "<span class=\"sev sev-{}\">{}</span>",
                    s.as_str(),
                    text::severity_word(*s)
                );
            }
            Inline::Verdict(v) => {
                let w = text::verdict_word(*v);
                let _ = write!(out, "<span class=\"verdict v-{w}\">{w}</span>");
            }
            Inline::Check(true) => out.push_str("<span class=\"pass\">✔ pass</span>"),
            Inline::Check(false) => out.push_str("<span class=\"fail\">✘ fail</span>"),
            Inline::LineBreak => out.push_str("<br>"),
            Inline::SoftBreak => out.push('\n'),
            Inline::RunLink { index, content } => {
                let _ = write!(out, "<a href=\"#run-{index}\">");
                inline(out, content);
                out.push_str("</a>");
            }
        }
    }
}

/// ` class="num"` for a numeric column.
fn num(numeric: bool) -> &'static str {
    if numeric {
        " class=\"num\""
    } else {
        ""
    }
}

impl Markup for Html {
    type Error = ChartError;

    fn heading(&mut self, level: u8, content: &[Inline]) {
        let _ = write!(self.out, "<h{level}>");
        inline(&mut self.out, content);
        let _ = writeln!(self.out, "</h{level}>");
    }

    fn paragraph(&mut self, kind: Para, content: &[Inline]) {
        self.out.push_str(match kind {
            Para::Normal => "<p>",
            Para::Summary => "<p class=\"summary\">",
            Para::Fix => "<p class=\"fix\">",
            Para::Muted => "<p class=\"muted\">",
        });
        inline(&mut self.out, content);
        self.out.push_str("</p>\n");
    }

    fn list(&mut self, class: Option<&str>, items: &[Vec<Inline>]) {
        match class {
            Some(c) => {
                let _ = writeln!(self.out, "<ul class=\"{c}\">");
            }
            None => self.out.push_str("<ul>\n"),
        }
        for item in items {
            self.out.push_str("<li>");
            inline(&mut self.out, item);
            self.out.push_str("</li>\n");
        }
        self.out.push_str("</ul>\n");
    }

    fn table(&mut self, class: &str, columns: &[Column], rows: &[Vec<markup::Cell>]) {
        let o = &mut self.out;
        let _ = write!(o, "<table class=\"{class}\"><tr>");
        for c in columns {
            let _ = write!(o, "<th{}>", num(c.numeric));
            inline(o, &c.title);
            o.push_str("</th>");
        }
        o.push_str("</tr>\n");
        for row in rows {
            o.push_str("<tr>");
            for (i, cell) in row.iter().enumerate() {
                let _ = write!(o, "<td{}>", num(columns.get(i).is_some_and(|c| c.numeric)));
                inline(o, cell);
                o.push_str("</td>");
            }
            o.push_str("</tr>\n");
        }
        o.push_str("</table>\n");
    }

    fn key_values(&mut self, class: &str, rows: &[(&str, markup::Cell)]) {
        let o = &mut self.out;
        let _ = writeln!(o, "<table class=\"{class}\">");
        for (k, v) in rows {
            let _ = write!(o, "<tr><th>{}</th><td>", esc(k));
            inline(o, v);
            o.push_str("</td></tr>\n");
        }
        o.push_str("</table>\n");
    }

    fn begin(&mut self, block: Block) {
        match block {
            Block::Finding => self.out.push_str("<div class=\"finding\">\n"),
            Block::Run { index } => {
                let _ = writeln!(self.out, "<section class=\"run\" id=\"run-{index}\">");
            }
        }
    }

    fn end(&mut self, block: Block) {
        self.out.push_str(match block {
            Block::Finding => "</div>\n",
            Block::Run { .. } => "</section>\n",
        });
    }

    /// One figure per device, then the table of the markers drawn on them.
    fn chart(&mut self, c: &Chart) -> Result<(), ChartError> {
        for s in &c.series {
            let svg = chart::device_chart(s, c.span, &c.markers)?;
            let peak = s.samples.iter().map(|x| x.1).max().unwrap_or(0);
            let _ = writeln!(
                self.out,
                "<figure class=\"chart\" data-device=\"{}\"><figcaption>GPU {}: used memory \
                 (peak {} of {}, {})</figcaption>\n{svg}</figure>",
                s.device,
                s.device,
                format_bytes(peak),
                format_bytes(s.total),
                text::percent(peak, s.total)
            );
        }
        if !c.markers.is_empty() {
            marker_table(&mut self.out, &c.markers);
        }
        Ok(())
    }

    fn details(&mut self, summary: &str, lines: &[String]) {
        let lines: Vec<String> = lines
            .iter()
            .map(|l| esc(&crate::term::one_line(l)))
            .collect();
        let _ = writeln!(
            self.out,
            "<details><summary>{}</summary><pre>{}</pre></details>",
            esc(summary),
            lines.join("\n")
        );
    }
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
    let s = crate::term::reveal_hidden(s);
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
