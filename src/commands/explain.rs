//! `vramdoc explain SNAPSHOT` (issue 27): a PyTorch memory snapshot → the explanation
//! (`explain`) → terminal text, `--json`, `--out` files (through the one writer) → exit code.
//! 0 explained; 2 a file that is not a snapshot, too large, or that names a global.

use crate::cli::ExplainArgs;
use crate::exit::UsageError;
use crate::explain::{self, Explanation, Options};
use crate::report::sink::Sink;
use crate::report::write::{self, Format};
use anyhow::Result;

/// An explanation in `format`; `None` for a format of reports only (CSV: findings).
fn render(x: &Explanation, format: Format) -> Option<Vec<u8>> {
    match format {
        Format::Json => Some(crate::report::explain::json(x)),
        Format::Markdown => Some(crate::report::explain::markdown(x).into_bytes()),
        Format::Html => Some(crate::report::explain_html::render(x).into_bytes()),
        Format::Csv => None,
    }
}

pub fn run(args: &ExplainArgs) -> Result<i32> {
    // Outputs are checked before the (possibly long) read.
    let formats = (args.output.out.iter())
        .map(|p| match write::format_for_path(p) {
            Ok(Format::Csv) => Err(format!(
                "{}: explain writes .json, .md or .html",
                p.display()
            )),
            f => f.map_err(|e| e.to_string()),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(UsageError)?;
    let sink =
        Sink::new(super::outputs(&args.output, None)).map_err(|e| UsageError(e.to_string()))?;
    let mut opts = Options {
        max_bytes: args.max_size.unwrap_or(0),
        ..Options::default()
    };
    if let Some(t) = args.device_total {
        // One total for every device of the snapshot (they are alike in a job).
        opts.totals = (0..64).map(|d| (d, t)).collect();
    }
    let x = explain::explain_file(&args.snapshot, &opts).map_err(|e| UsageError(e.to_string()))?;
    for (path, format) in args.output.out.iter().zip(formats) {
        let Some(bytes) = render(&x, format) else {
            continue;
        };
        sink.file(path, &bytes)
            .map_err(|e| UsageError(e.to_string()))?;
        crate::term::eprint_line(&format!("wrote {}", path.display()));
    }
    if args.output.json {
        crate::term::print_json(&String::from_utf8_lossy(&crate::report::explain::json(&x)))?;
    } else {
        crate::term::print(&crate::report::explain::text(&x))?;
    }
    Ok(crate::exit::OK)
}
