//! `vramdoc whatif SCENARIO --on SPEC,...` (issue 16), as glue: each box is a child
//! `vramdoc --sim SPEC replay SCENARIO --variant bug --json --force` (a private box per child,
//! so boxes replay in parallel, as many at once as the machine has cores); each child's JSON
//! report becomes a row (`repro::whatif`), rendered by `report::terminal::whatif`. Progress
//! with indicatif on a terminal only.

use crate::cli::WhatifArgs;
use crate::exit::UsageError;
use crate::model::BoxOutcome;
use crate::repro::whatif;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// The specs to try: `recorded` replaced by the scenario's box, each checked, duplicates
/// dropped.
fn specs(args: &WhatifArgs, recorded_on: Option<&str>) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for raw in &args.on {
        let spec = raw.trim();
        let spec = if spec == "recorded" {
            let file = args.scenario.clone();
            crate::backend::resolve_recorded(&[(file, recorded_on.map(str::to_string))])
                .map_err(|e| UsageError(e.to_string()))?
        } else {
            vramdoc_spec_check(spec)?;
            spec.to_string()
        };
        if !out.contains(&spec) {
            out.push(spec);
        }
    }
    Ok(out)
}

fn vramdoc_spec_check(spec: &str) -> Result<()> {
    crate::backend::resolve_recorded(&[("--on".into(), Some(spec.to_string()))])
        .map(|_| ())
        .map_err(|e| {
            UsageError(format!(
                "--on: {:?} is not a box spec: {} (see `vramdoc sim presets`)",
                crate::term::clean(spec),
                match e {
                    crate::backend::RecordedBoxError::Unknown { reason, .. } => reason,
                    other => other.to_string(),
                }
            ))
            .into()
        })
}

/// Replay the bug variant on one fresh box.
fn one_box(exe: &Path, scenario: &str, spec: &str) -> BoxOutcome {
    let out = Command::new(exe)
        .args(["--sim", spec, "--backend", "sim", "replay"])
        .args(["--variant", "bug", "--json", "--force", "--", scenario])
        .env_remove("VRAMDOC_SIM_DIR")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .stdin(Stdio::null())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => return BoxOutcome::failed(spec, &format!("starting vramdoc: {e}")),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    match crate::report::read::parse_report(&text, Path::new(spec)) {
        Ok(report) => BoxOutcome::from_report(spec, &report),
        Err(_) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            BoxOutcome::failed(
                spec,
                &format!("replay exited {}: {last}", out.status.code().unwrap_or(-1)),
            )
        }
    }
}

pub fn run(args: &WhatifArgs) -> Result<i32> {
    let scenario = super::replay::load(&args.scenario)?;
    if scenario.variant("bug").is_none() {
        anyhow::bail!(UsageError(format!(
            "{}: scenario {} has no `bug` variant (whatif replays the bug variant)",
            crate::term::clean(&args.scenario),
            scenario.id
        )));
    }
    let specs = specs(args, scenario.recorded_on.as_deref())?;
    let exe = std::env::current_exe().context("locating the vramdoc binary")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = args
        .jobs
        .map_or(cores, usize::from)
        .clamp(1, specs.len().max(1));
    let bar = ProgressBar::with_draw_target(
        Some(specs.len() as u64),
        if std::io::stderr().is_terminal() && !args.json {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    if let Ok(style) = ProgressStyle::with_template("whatif [{bar:20}] {pos}/{len} {wide_msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    let queue: Mutex<VecDeque<(usize, String)>> =
        Mutex::new(specs.iter().cloned().enumerate().collect());
    let results: Mutex<Vec<Option<BoxOutcome>>> = Mutex::new(vec![None; specs.len()]);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                let Some((i, spec)) = next else { break };
                let outcome = one_box(&exe, &args.scenario, &spec);
                bar.set_message(format!("{spec}: {}", outcome.verdict));
                bar.inc(1);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(outcome);
            });
        }
    });
    bar.finish_and_clear();
    let boxes: Vec<BoxOutcome> = results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .zip(&specs)
        .map(|(o, spec)| o.unwrap_or_else(|| BoxOutcome::failed(spec, "not replayed")))
        .collect();
    let any_failed = boxes.iter().any(|b| b.verdict == "failed");
    let table = whatif::what_if(&scenario.id, boxes);
    if args.json {
        let json = serde_json::to_string_pretty(&table).context("encoding the what-if JSON")?;
        crate::term::print_json(&json)?;
    } else {
        crate::term::print(&crate::report::terminal::whatif::render(&table))?;
    }
    Ok(if any_failed {
        crate::exit::FINDINGS
    } else {
        crate::exit::OK
    })
}
