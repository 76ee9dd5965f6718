//! `vramdoc replay` (issue 4), as glue: flags and scenarios → the batch engine
//! ([`crate::replay::batch`]: GPU choice and refusal, the scenario × variant loop, workers)
//! → the report (summary table or JSON, files, JUnit, job summary) → exit 0 when every
//! variant behaved as its expectations say, 1 when not (or on Ctrl-C), 2 bad scenario, 3
//! environment.

use super::Session;
use crate::cli::ReplayArgs;
use crate::exit::{EnvironmentError, UsageError};
use crate::model::{Body, ReplayResult, Report, VariantRun, Verdict};
use crate::record::sampler::{SamplerConfig, DEFAULT_PROCESS_PERIOD};
use crate::replay::batch::{self, Batch, BatchError};
use crate::replay::{Observer, ReplayOptions};
use crate::report::sink::{Outputs, Sink};
use crate::report::terminal::replay::verdict_str;
use crate::scenario::{builtin, Scenario};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// The scenarios named: `all` (or `--all`) stands for every built-in one, in `vramdoc list`
/// order. Every argument is resolved before anything runs (`all nope` is exit 2, not a long
/// replay that ignores `nope`); a scenario named twice runs once; `--variant` must exist in
/// each.
fn scenarios(args: &ReplayArgs) -> Result<Vec<Scenario>> {
    let mut scenarios: Vec<Scenario> = Vec::new();
    let all_flag = args.all.then(|| "all".to_string());
    for a in all_flag.iter().chain(&args.scenarios) {
        let more = if a == "all" {
            builtin::all().map_err(|e| UsageError(format!("built-in scenarios: {e}")))?
        } else {
            vec![super::scenario::load(a)?]
        };
        for s in more {
            if !scenarios.iter().any(|k| k.id == s.id) {
                scenarios.push(s);
            }
        }
    }
    for (s, v) in scenarios.iter().zip(std::iter::repeat(&args.variant)) {
        let Some(v) = v else { break };
        if s.variant(v).is_none() {
            let names: Vec<&str> = s.variants.iter().map(|v| v.name.as_str()).collect();
            anyhow::bail!(UsageError(format!(
                "scenario {} has no variant {v:?} (variants: {})",
                s.id,
                names.join(", ")
            )));
        }
    }
    Ok(scenarios)
}

/// Progress on stderr: a bar on a terminal, one line per worker and per verdict always.
struct Progress {
    bar: Option<ProgressBar>,
    tty: bool,
    current: String,
}

impl Observer for Progress {
    fn variant_started(&mut self, scenario: &str, variant: &str, steps: usize) {
        self.current = crate::term::clean(&format!("{scenario}/{variant}"));
        let target = if self.tty {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(steps as u64), target);
        if let Ok(style) =
            ProgressStyle::with_template("{prefix:.bold} [{bar:20}] {pos}/{len} {wide_msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(self.current.clone());
        self.bar = Some(bar);
    }
    fn worker_started(&mut self, pid: u32) {
        // Always printed: scripts and tests use it to find the worker.
        let line = format!("replay {}: worker pid {pid}", self.current);
        match &self.bar {
            Some(b) if self.tty => b.println(line),
            _ => crate::term::eprint_line(&line),
        }
    }
    fn step_started(&mut self, index: usize, label: &str) {
        if let Some(b) = &self.bar {
            b.set_position(index as u64);
            b.set_message(crate::term::clean(label));
        }
    }
    fn variant_finished(&mut self, run: &VariantRun) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        let verdict = verdict_str(run.verdict);
        crate::term::eprint_line(&format!("replay {}: {verdict}", self.current));
    }
    fn variant_skipped(&mut self, run: &VariantRun) {
        self.current = crate::term::clean(&format!("{}/{}", run.scenario, run.variant));
        self.variant_finished(run);
    }
}

pub fn run(session: &Session, args: &ReplayArgs) -> Result<i32> {
    // Refuse an unusable --out or --junit before running anything (a replay can take a while).
    let sink = Sink::new(Outputs {
        files: args
            .junit
            .iter()
            .map(|p| ("--junit", p.as_path()))
            .collect(),
        ..super::outputs(&args.output, None)
    })
    .map_err(|e| UsageError(e.to_string()))?;
    let batch = Batch {
        scenarios: scenarios(args)?,
        variant: args.variant.clone(),
        force: args.output.force,
        cuda_visible: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
    };
    let monitor = super::session::monitor(session)?;
    // SIGINT, SIGTERM and SIGHUP: the worker is stopped and the partial report written.
    let opts = ReplayOptions {
        backend: session.backend.clone(),
        // Typed and bounded by clap (`cli::duration_within`).
        sampler: SamplerConfig {
            period: args.period,
            process_period: Some(DEFAULT_PROCESS_PERIOD.max(args.period)),
        },
        exe: std::env::current_exe().context("locating the vramdoc binary for the worker")?,
        interrupted: super::handle_interrupts_gracefully(),
        step_timeout: args.step_timeout,
        pid_namespace: crate::inventory::establish_vantage()?.pid_namespace,
    };
    let mut progress = Progress {
        bar: None,
        tty: std::io::stderr().is_terminal(),
        current: String::new(),
    };
    let mut warn = |line: String| crate::term::eprint_line(&format!("replay: {line}"));
    let sim_spec = session.sim_spec();
    let done = batch::run_batch(
        monitor.as_ref(),
        sim_spec,
        &batch,
        &opts,
        &mut progress,
        &mut warn,
    )
    .map_err(|e| match e {
        BatchError::Gpu(g) => anyhow::Error::new(g),
        other => EnvironmentError(other.to_string()).into(),
    })?;
    let runs = done.runs;
    let report = Report::new(
        done.environment,
        Body::Replay(ReplayResult {
            period_us: args.period.as_micros() as u64,
            runs: runs.clone(),
        }),
    );
    super::emit_replay(&report, &sink, args.junit.as_deref(), done.interrupted)?;
    if let Some(e) = done.fatal {
        crate::term::eprint_line(&format!(
            "replay stopped early: {} finished variant(s) reported above and in --out",
            runs.len()
        ));
        return Err(EnvironmentError(e.to_string()).into());
    }
    let bad = runs.iter().any(|r| r.verdict == Verdict::Unexpected)
        || (args.require && runs.iter().any(|r| r.verdict == Verdict::Skipped));
    Ok(if done.interrupted || bad {
        crate::exit::FINDINGS
    } else {
        crate::exit::OK
    })
}
