//! `vramdoc replay` (issue 4): run scenarios (bug and fix variants) in worker processes while
//! sampling memory; print a summary table or JSON; write a report; exit 0 when every variant
//! behaved as its expectations say, 1 when not (or on Ctrl-C), 2 bad scenario, 3 environment.

use super::Session;
use crate::cli::{parse_duration, ReplayArgs};
use crate::exit::{EnvironmentError, UsageError};
use crate::replay::{self, Observer, ReplayError, ReplayOptions};
use crate::report::{ReplayResult, Report, ReportKind, VariantRun, Verdict, SCHEMA_VERSION};
use crate::sampler::{SamplerConfig, DEFAULT_PROCESS_PERIOD};
use crate::scenario::{builtin, parse_scenario, Scenario};
use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The hidden `vramdoc __worker` entry: the workload side of a replay.
pub fn worker(session: &Session) -> i32 {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    replay::worker::run_worker(session.backend, &mut input, &mut out)
}

/// Resolve a command-line scenario: a built-in id or a path to a TOML file.
fn load(arg: &str) -> Result<Scenario> {
    if let Some(parsed) = builtin::get(arg) {
        return parsed.map_err(|e| UsageError(e.to_string()).into());
    }
    let path = std::path::Path::new(arg);
    if !path.exists() {
        let ids: Vec<&str> = builtin::BUILTIN.iter().map(|(k, _)| *k).collect();
        anyhow::bail!(UsageError(format!(
            "unknown scenario {arg:?}: not a built-in id ({}) and no such file",
            ids.join(", ")
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| UsageError(format!("{arg}: {e}")))?;
    parse_scenario(arg, &text).map_err(|e| UsageError(e.to_string()).into())
}

struct Progress {
    bar: Option<ProgressBar>,
    tty: bool,
    current: String,
}

impl Observer for Progress {
    fn variant_started(&mut self, scenario: &str, variant: &str, steps: usize) {
        self.current = format!("{scenario}/{variant}");
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
            _ => eprintln!("{line}"),
        }
    }
    fn step_started(&mut self, index: usize, label: &str) {
        if let Some(b) = &self.bar {
            b.set_position(index as u64);
            b.set_message(label.to_string());
        }
    }
    fn variant_finished(&mut self, run: &VariantRun) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        eprintln!("replay {}: {}", self.current, verdict_str(run.verdict));
    }
}

fn verdict_str(v: Verdict) -> &'static str {
    match v {
        Verdict::Reproduced => "reproduced",
        Verdict::Fixed => "fixed",
        Verdict::Unexpected => "UNEXPECTED",
        Verdict::Skipped => "skipped",
    }
}

fn outcome(run: &VariantRun) -> String {
    match (&run.error, run.verdict) {
        (_, Verdict::Skipped) => run.reason.clone().unwrap_or_default(),
        (Some(e), _) if e.kind == "out-of-memory" => format!("OOM at {}", e.step_label),
        (Some(e), _) => format!("{} at {}", e.kind, e.step_label),
        (None, _) => "completed".into(),
    }
}

fn peaks(run: &VariantRun) -> String {
    run.peaks
        .iter()
        .map(|p| {
            let pct = if p.total > 0 {
                p.peak_used as f64 * 100.0 / p.total as f64
            } else {
                0.0
            };
            format!("{}:{pct:.0}%", p.device)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn summary(runs: &[VariantRun]) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(100)
        .set_header(vec![
            "scenario", "variant", "verdict", "outcome", "peak/GPU", "checks",
        ]);
    for r in runs {
        let passed = r.checks.iter().filter(|c| c.passed).count();
        t.add_row(vec![
            r.scenario.clone(),
            r.variant.clone(),
            verdict_str(r.verdict).to_string(),
            outcome(r),
            peaks(r),
            format!("{passed}/{}", r.checks.len()),
        ]);
    }
    let mut out = t.to_string();
    for r in runs.iter().filter(|r| r.verdict == Verdict::Unexpected) {
        for c in r.checks.iter().filter(|c| !c.passed) {
            let line = format!(
                "{}/{}: expected {}; {}",
                r.scenario, r.variant, c.expectation, c.detail
            );
            out.push('\n');
            out.push_str(&truncate(&line, 100));
        }
        if let Some(reason) = &r.reason {
            if r.checks.iter().all(|c| c.passed) {
                out.push('\n');
                out.push_str(&truncate(
                    &format!("{}/{}: {reason}", r.scenario, r.variant),
                    100,
                ));
            }
        }
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

pub fn run(session: &Session, args: &ReplayArgs) -> Result<i32> {
    let period = parse_duration(&args.period)?;
    if period < std::time::Duration::from_micros(100) || period > std::time::Duration::from_secs(1)
    {
        anyhow::bail!(UsageError(format!(
            "--period {}: choose between 100us and 1s (default 5ms)",
            args.period
        )));
    }
    // Refuse an unusable --out before running anything (a replay can take a while).
    crate::report::write::check_outputs(&args.out, args.force)
        .map_err(|e| UsageError(e.to_string()))?;
    // `all` stands for every built-in scenario, in `vramdoc list` order.
    let scenarios: Vec<Scenario> = if args.scenarios.iter().any(|a| a == "all") {
        crate::scenario::builtin::all()
            .map_err(|e| UsageError(format!("built-in scenarios: {e}")))?
    } else {
        args.scenarios
            .iter()
            .map(|a| load(a))
            .collect::<Result<_>>()?
    };
    if let Some(v) = &args.variant {
        for s in &scenarios {
            if s.variant(v).is_none() {
                let names: Vec<&str> = s.variants.iter().map(|v| v.name.as_str()).collect();
                anyhow::bail!(UsageError(format!(
                    "scenario {} has no variant {v:?} (variants: {})",
                    s.id,
                    names.join(", ")
                )));
            }
        }
    }

    let monitor = session.monitor()?;
    let devices = monitor.devices()?;
    let exe = std::env::current_exe().context("locating the vramdoc binary for the worker")?;
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = interrupted.clone();
        // A second handler cannot be installed (tests calling run twice): keep the first.
        let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    }
    let opts = ReplayOptions {
        backend: session.backend,
        sampler: SamplerConfig {
            period,
            process_period: Some(DEFAULT_PROCESS_PERIOD.max(period)),
        },
        exe,
        interrupted: interrupted.clone(),
    };
    let mut progress = Progress {
        bar: None,
        tty: std::io::stderr().is_terminal(),
        current: String::new(),
    };

    let mut runs = Vec::new();
    'outer: for s in &scenarios {
        let variants: Vec<_> = s
            .variants
            .iter()
            .filter(|v| args.variant.as_ref().is_none_or(|want| &v.name == want))
            .collect();
        for v in variants {
            if interrupted.load(Ordering::SeqCst) {
                break 'outer;
            }
            if s.devices as usize > devices.len() {
                let run = replay::skipped(
                    s,
                    v,
                    format!(
                        "needs {} GPUs, this machine has {}",
                        s.devices,
                        devices.len()
                    ),
                );
                progress.current = format!("{}/{}", s.id, v.name);
                progress.variant_finished(&run);
                runs.push(run);
                continue;
            }
            match replay::run_variant(s, v, monitor.as_ref(), &devices, &opts, &mut progress) {
                Ok(run) => runs.push(run),
                Err(
                    e @ (ReplayError::Gpu(_)
                    | ReplayError::WorkerEnvironment(_)
                    | ReplayError::Spawn { .. }),
                ) => {
                    if let ReplayError::Gpu(g) = &e {
                        if !g.is_environment() {
                            anyhow::bail!(EnvironmentError(e.to_string()));
                        }
                    }
                    return Err(anyhow::Error::new(EnvironmentError(e.to_string())));
                }
            }
        }
    }
    let was_interrupted = interrupted.load(Ordering::SeqCst);

    let sim_spec = session.sim_spec();
    let environment = crate::report::environment::collect(monitor.as_ref(), sim_spec)?;
    let report = Report {
        schema_version: SCHEMA_VERSION,
        kind: ReportKind::Replay,
        environment,
        command: crate::report::environment::command_line(),
        created_unix_ms: crate::report::environment::now_unix_ms(),
        scan: None,
        run: None,
        replay: Some(ReplayResult {
            period_us: period.as_micros() as u64,
            runs: runs.clone(),
        }),
    };
    crate::report::write::write_reports(&report, &args.out, args.force)
        .map_err(|e| UsageError(format!("writing the report: {e}")))?;
    if args.json {
        let bytes = crate::report::json::render(&report);
        use std::io::Write;
        std::io::stdout().write_all(&bytes)?;
        println!();
    } else {
        println!("{}", summary(&runs));
        if was_interrupted {
            println!("interrupted: results above are partial");
        }
    }

    let bad = runs.iter().any(|r| r.verdict == Verdict::Unexpected)
        || (args.require && runs.iter().any(|r| r.verdict == Verdict::Skipped));
    Ok(if was_interrupted || bad {
        crate::exit::FINDINGS
    } else {
        crate::exit::OK
    })
}
