//! Markdown: the [`super::markup`] primitives in GitHub-flavoured Markdown, for a GitHub
//! issue — tables, lists, headings, and memory over time as text sparklines with a marker
//! row and legend in a fenced block. Every string that came from the machine (process
//! names, command lines, labels) is escaped or put in a code span, so it shows as text and
//! never as Markdown or HTML.

use super::markup::{self, Block, Chart, Column, Inline, Markup, Para};
use super::text::{self, ChartMarker};
use crate::model::{DeviceSeries, Report};
use crate::units::format_bytes;
use std::fmt::Write;

/// Cells in a sparkline.
pub const SPARK_CELLS: usize = 60;
const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Render a report as GitHub-flavoured Markdown.
pub fn render(report: &Report) -> String {
    let report = text::sanitized(report);
    let mut md = Markdown::default();
    let Ok(()) = markup::write_document(&mut md, &report);
    let mut out = md.out;
    let _ = writeln!(
        out,
        "<sub>Made by vramdoc {} · JSON is the source of truth; re-render with `vramdoc report \
         FILE.json --format md`.</sub>",
        md_text(&report.environment.vramdoc_version, false)
    );
    out
}

/// The Markdown being written.
#[derive(Debug, Default)]
pub struct Markdown {
    out: String,
}

/// Append `content`; inside a table cell (`in_table`) pipes are escaped too.
fn inline(out: &mut String, content: &[Inline], in_table: bool) {
    for i in content {
        match i {
            Inline::Text(s) | Inline::Prose(s) | Inline::Value(s) => {
                out.push_str(&md_text(s, in_table))
            }
            Inline::Plain(s) => out.push_str(s),
            Inline::Code(s) => out.push_str(&code_span(s, in_table)),
            Inline::Strong(c) => {
                out.push_str("**");
                inline(out, c, in_table);
                out.push_str("**");
            }
            Inline::Em(s) => {
                let _ = write!(out, "*{s}*");
            }
            Inline::Severity(s) => out.push_str(text::severity_word(*s)),
            Inline::Verdict(v) => out.push_str(text::verdict_word(*v)),
            Inline::Check(passed) => out.push(if *passed { '✅' } else { '❌' }),
            Inline::LineBreak => out.push_str("; "),
            Inline::SoftBreak => out.push('\n'),
            // No links in a ticket: the runs follow the table in order.
            Inline::RunLink { content, .. } => inline(out, content, in_table),
        }
    }
}

impl Markup for Markdown {
    type Error = std::convert::Infallible;

    fn heading(&mut self, level: u8, content: &[Inline]) {
        // The title is `##`: a report pasted into an issue sits below the issue's own title.
        self.out.push_str(&"#".repeat(usize::from(level) + 1));
        self.out.push(' ');
        inline(&mut self.out, content, false);
        self.out.push_str("\n\n");
    }

    fn paragraph(&mut self, kind: Para, content: &[Inline]) {
        if kind == Para::Summary {
            self.out.push_str("**Summary:** ");
        }
        inline(&mut self.out, content, false);
        self.out.push_str("\n\n");
    }

    fn list(&mut self, _class: Option<&str>, items: &[Vec<Inline>]) {
        for item in items {
            self.out.push_str("- ");
            inline(&mut self.out, item, false);
            self.out.push('\n');
        }
        self.out.push('\n');
    }

    fn table(&mut self, _class: &str, columns: &[Column], rows: &[Vec<markup::Cell>]) {
        let o = &mut self.out;
        o.push('|');
        for c in columns {
            o.push(' ');
            inline(o, &c.title, true);
            o.push_str(" |");
        }
        o.push_str("\n|");
        for c in columns {
            o.push_str(if c.numeric { "---:|" } else { "---|" });
        }
        o.push('\n');
        for row in rows {
            o.push('|');
            for cell in row {
                o.push(' ');
                inline(o, cell, true);
                o.push_str(" |");
            }
            o.push('\n');
        }
        o.push('\n');
    }

    fn key_values(&mut self, _class: &str, rows: &[(&str, markup::Cell)]) {
        let o = &mut self.out;
        o.push_str("| | |\n|---|---|\n");
        for (k, v) in rows {
            let _ = write!(o, "| {k} | ");
            inline(o, v, true);
            o.push_str(" |\n");
        }
        o.push('\n');
    }

    fn begin(&mut self, _block: Block) {}

    fn end(&mut self, _block: Block) {}

    fn chart(&mut self, chart: &Chart) -> Result<(), Self::Error> {
        sparkline_block(&mut self.out, &chart.series, chart.span, &chart.markers);
        Ok(())
    }

    fn details(&mut self, summary: &str, lines: &[String]) {
        let block: String = lines
            .iter()
            .map(|l| crate::term::reveal_hidden(&crate::term::one_line(l)) + "\n")
            .collect();
        let fence = "`".repeat(longest_run(&block, '`').max(2) + 1);
        let _ = writeln!(
            self.out,
            "<details><summary>{summary}</summary>\n\n{fence}text\n{block}{fence}\n\n</details>\n"
        );
    }
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
    let block = crate::term::reveal_hidden(&block);
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
    let s = crate::term::reveal_hidden(&crate::term::one_line(s));
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
    let s = crate::term::reveal_hidden(&crate::term::one_line(s));
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
        // GitHub turns `@name` into a mention (a ping) and `www.`, `http://` and
        // `https://` into links, also in escaped text: a one-character code span breaks
        // them (code is never linked).
        if c == '@' {
            out.push_str("`@`");
            i += 1;
            continue;
        }
        if c == ':' && chars.get(i + 1..i + 3) == Some(&['/', '/'][..]) {
            out.push_str("`:`");
            i += 1;
            continue;
        }
        if c == '.'
            && i >= 3
            && chars[i - 3..i].iter().all(|x| x.eq_ignore_ascii_case(&'w'))
            && (i == 3 || !chars[i - 4].is_alphanumeric())
        {
            out.push_str("`.`");
            i += 1;
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
