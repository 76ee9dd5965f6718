//! `vramdoc report` (issue 5): re-render a saved JSON report as Markdown, HTML or JSON, to
//! standard output or, through the one writer, to `--out` (atomic, `--force` to replace).

use crate::cli::{ReportArgs, ReportFormat};
use crate::exit::UsageError;
use crate::report::read::read_report;
use crate::report::sink::{Outputs, Sink};
use crate::report::write::{self, Format, WriteError};
use anyhow::Result;

fn format_of(f: ReportFormat) -> Format {
    match f {
        ReportFormat::Json => Format::Json,
        ReportFormat::Md => Format::Markdown,
        ReportFormat::Html => Format::Html,
        ReportFormat::Csv => Format::Csv,
    }
}

fn format_name(f: Format) -> &'static str {
    match f {
        Format::Json => "json",
        Format::Markdown => "md",
        Format::Html => "html",
        Format::Csv => "csv",
    }
}

pub fn run(args: &ReportArgs) -> Result<i32> {
    let report = read_report(&args.input).map_err(|e| UsageError(e.to_string()))?;
    let format = format_of(args.format);
    let bytes = write::render(&report, format).map_err(|e| UsageError(e.to_string()))?;
    match &args.out {
        Some(out) => {
            // An --out whose extension names another format is almost surely a mistake.
            if let Ok(ext_format) = write::format_for_path(out) {
                if ext_format != format {
                    anyhow::bail!(UsageError(format!(
                        "{}: the extension says {} but --format is {}; make them agree",
                        out.display(),
                        format_name(ext_format),
                        format_name(format)
                    )));
                }
            }
            // Exists, or a path that cannot be written: both are the user's to fix (exit 2).
            let sink = Sink::new(Outputs {
                force: args.force,
                files: vec![("--out", out.as_path())],
                ..Outputs::default()
            });
            sink.and_then(|sink| sink.file(out, &bytes))
                .map_err(|e: WriteError| UsageError(e.to_string()))?;
            crate::term::eprint_line(&format!("wrote {}", out.display()));
        }
        None => {
            // `vramdoc report r.json --format md | head` is fine (crate::term).
            let text = String::from_utf8_lossy(&bytes);
            match format {
                Format::Json => crate::term::print_json(&text)?,
                _ => crate::term::write_stdout(crate::term::clean_text(&text).as_bytes())?,
            }
        }
    }
    Ok(crate::exit::OK)
}
