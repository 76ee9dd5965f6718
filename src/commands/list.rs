//! `vramdoc list` (issue 4): the built-in scenarios, one line each, with the devices they need.

use crate::cli::ListArgs;
use crate::scenario::builtin;
use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};

pub fn run(args: &ListArgs) -> Result<i32> {
    let scenarios = builtin::all().map_err(|e| crate::exit::UsageError(e.to_string()))?;
    if args.json {
        let v: Vec<_> = scenarios
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "title": s.title,
                    "description": s.description,
                    "source": s.source,
                    "devices": s.devices,
                    "variants": s.variants.iter().map(|v| v.name.clone()).collect::<Vec<_>>(),
                })
            })
            .collect();
        crate::term::print_json(&serde_json::to_string_pretty(&v)?)?;
        return Ok(crate::exit::OK);
    }
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(100)
        .set_header(vec!["scenario", "GPUs", "what it shows", "variants"]);
    for s in &scenarios {
        t.add_row(vec![
            s.id.clone(),
            s.devices.to_string(),
            s.description.clone(),
            s.variants
                .iter()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        ]);
    }
    crate::term::print(&t.to_string())?;
    crate::term::print(
        "Run one: vramdoc --sim 2x16GiB replay stray-cuda0   (format: docs/scenarios.md)",
    )?;
    Ok(crate::exit::OK)
}
