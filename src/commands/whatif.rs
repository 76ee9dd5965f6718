//! `vramdoc whatif SCENARIO --on SPEC,...` (issue 16), as glue: the scenario and the box
//! specs (each checked once, `backend::BoxSpec`) → what-if's scheduling
//! ([`crate::repro::schedule`]: the bug variant replayed on a fresh private box per spec, in
//! this process, as many at once as the machine has cores) → the table
//! (`repro::whatif`, rendered by `report::terminal::whatif`) or JSON → exit 0, or 1 when a
//! box could not be replayed. Progress with indicatif on a terminal only. With a command
//! after `--`, the command run on each box instead (`watch::fit`, fit by execution).

use crate::backend::{resolve_recorded, BoxSpec};
use crate::cli::WhatifArgs;
use crate::exit::UsageError;
use crate::record::sampler::{SamplerConfig, DEFAULT_PROCESS_PERIOD};
use crate::repro::{schedule, whatif};
use crate::watch::fit::{self, FitPlan};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// The specs to try: `recorded` replaced by the scenario's box, each checked, duplicates
/// dropped.
fn specs(args: &WhatifArgs, recorded_on: Option<&str>) -> Result<Vec<BoxSpec>> {
    let mut out: Vec<BoxSpec> = Vec::new();
    for raw in &args.on {
        let spec = if raw.trim() == "recorded" {
            let Some(file) = args.scenario.clone() else {
                anyhow::bail!(UsageError(
                    "--on recorded: a command has no recorded box; name the boxes (e.g. --on t4,l4)"
                        .into()
                ));
            };
            let spec = resolve_recorded(&[(file, recorded_on.map(str::to_string))])
                .map_err(|e| UsageError(e.to_string()))?;
            BoxSpec::parse(&spec).map_err(|e| UsageError(e.to_string()))?
        } else {
            BoxSpec::parse(raw).map_err(|e| {
                UsageError(format!(
                    "--on: {:?} is not a box spec: {} (see `vramdoc sim presets`)",
                    crate::term::clean(raw.trim()),
                    e.reason
                ))
            })?
        };
        if !out.contains(&spec) {
            out.push(spec);
        }
    }
    Ok(out)
}

pub fn run(args: &WhatifArgs) -> Result<i32> {
    let Some(file) = &args.scenario else {
        return executed(args);
    };
    let scenario = super::scenario::load(file)?;
    if scenario.variant("bug").is_none() {
        anyhow::bail!(UsageError(format!(
            "{}: scenario {} has no `bug` variant (whatif replays the bug variant)",
            crate::term::clean(file),
            scenario.id
        )));
    }
    let specs = specs(args, scenario.recorded_on.as_deref())?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
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
    let plan = schedule::Plan {
        jobs: args.jobs.map_or(cores, usize::from),
        exe: std::env::current_exe().context("locating the vramdoc binary")?,
        scenario,
        specs,
        // SIGINT, SIGTERM, SIGHUP: the replays stop their workers and remove their boxes.
        interrupted: super::handle_interrupts_gracefully(),
    };
    let boxes = schedule::replay_on_boxes(&plan, &|outcome: &crate::model::BoxOutcome| {
        bar.set_message(format!("{}: {}", outcome.spec, outcome.verdict));
        bar.inc(1);
    });
    bar.finish_and_clear();
    if plan.interrupted.load(std::sync::atomic::Ordering::SeqCst) {
        crate::term::eprint_line("interrupted");
        return Ok(crate::exit::FINDINGS);
    }
    let table = whatif::what_if(&plan.scenario.id, boxes);
    print_table(args, &table)
}

/// `whatif --on SPECS -- CMD`: the command run on each box ([`crate::watch::fit`]).
fn executed(args: &WhatifArgs) -> Result<i32> {
    let specs = specs(args, None)?;
    let plan = FitPlan {
        argv: args.command.clone(),
        specs,
        cadence: SamplerConfig {
            period: args.period,
            process_period: Some(DEFAULT_PROCESS_PERIOD.max(args.period)),
        },
        interrupted: super::handle_interrupts_gracefully(),
    };
    let shown = crate::redact::redact_args(&crate::term::escape_args(&args.command)).join(" ");
    let n = plan.specs.len();
    let mut k = 0;
    let boxes = fit::fit_on_boxes(
        &plan,
        &mut |spec| {
            k += 1;
            crate::term::eprint_line(&format!("whatif [{k}/{n}] {}: running", spec.as_str()));
        },
        &mut |b| {
            crate::term::eprint_line(&format!("whatif {}: {}", b.spec, b.verdict));
        },
    );
    if plan.interrupted.load(std::sync::atomic::Ordering::SeqCst) {
        crate::term::eprint_line("interrupted");
        return Ok(crate::exit::FINDINGS);
    }
    let mut table = whatif::what_if(&crate::watch::variants::script_id(&args.command), boxes);
    table.command = Some(shown);
    print_table(args, &table)
}

fn print_table(args: &WhatifArgs, table: &crate::model::WhatIf) -> Result<i32> {
    let any_failed = table.boxes.iter().any(|b| b.verdict == "failed");
    if args.json {
        let json = serde_json::to_string_pretty(table).context("encoding the what-if JSON")?;
        crate::term::print_json(&json)?;
    } else {
        crate::term::print(&crate::report::terminal::whatif::render(table))?;
    }
    Ok(if any_failed {
        crate::exit::FINDINGS
    } else {
        crate::exit::OK
    })
}
