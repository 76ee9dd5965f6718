//! `vramdoc incidents [list | show ID]` (issue 28): reads the directory `serve --incidents`
//! writes (`crate::incidents::Store`), prints a table, JSON, an incident or its scenario.

use crate::cli::{IncidentsCommand, IncidentsListArgs, IncidentsShowArgs};
use crate::exit::UsageError;
use crate::incidents::{markdown, Store};
use anyhow::Result;

pub fn run(cmd: &IncidentsCommand) -> Result<i32> {
    match cmd {
        IncidentsCommand::List(a) => list(a),
        IncidentsCommand::Show(a) => show(a),
    }
}

fn store(dir: &std::path::Path) -> Result<Store> {
    if !dir.is_dir() {
        anyhow::bail!(UsageError(format!(
            "{}: no such directory (pass the directory of `vramdoc serve --incidents DIR` with --dir)",
            crate::term::clean(&dir.display().to_string())
        )));
    }
    Ok(Store {
        dir: dir.to_path_buf(),
        max_count: usize::MAX,
        max_bytes: u64::MAX,
    })
}

fn list(a: &IncidentsListArgs) -> Result<i32> {
    let list = store(&a.dir)?.list();
    if a.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({ "incidents": list }))?;
        crate::term::print_json(&text)?;
        return Ok(crate::exit::OK);
    }
    if list.is_empty() {
        crate::term::print("no incidents")?;
        return Ok(crate::exit::OK);
    }
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    t.set_header(["ID", "WHEN", "RULE", "POD", "GPUS", "TITLE"]);
    for i in &list {
        let pod = match (&i.namespace, &i.pod) {
            (Some(ns), Some(p)) => format!("{ns}/{p}"),
            _ => "-".into(),
        };
        let gpus: Vec<String> = i.devices.iter().map(u32::to_string).collect();
        t.add_row([
            crate::term::clean(&i.id),
            crate::term::clean(&i.created),
            crate::term::clean(&i.rule),
            crate::term::clean(&pod),
            gpus.join(","),
            crate::term::clean(&i.title),
        ]);
    }
    crate::term::print(&t.to_string())?;
    Ok(crate::exit::OK)
}

fn show(a: &IncidentsShowArgs) -> Result<i32> {
    let inc = store(&a.dir)?
        .read(&a.id)
        .map_err(|e| UsageError(crate::term::clean(&e.to_string())))?;
    if a.scenario {
        let Some(toml) = &inc.scenario else {
            anyhow::bail!(UsageError(format!(
                "incident {} has no scenario: {}",
                crate::term::clean(&inc.id),
                crate::term::clean(inc.scenario_note.as_deref().unwrap_or("none was made"))
            )));
        };
        crate::term::print(toml)?;
    } else if a.markdown {
        crate::term::print(&markdown::render(&inc))?;
    } else {
        crate::term::print_json(&serde_json::to_string_pretty(&inc)?)?;
    }
    Ok(crate::exit::OK)
}
