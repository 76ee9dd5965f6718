//! `vramdoc replay` (issue 4): run scenarios (bug and fix variants) in worker processes while
//! sampling memory; print a summary table or JSON; write a report; exit 0 when every variant
//! behaved as its expectations say, 1 when not (or on Ctrl-C), 2 bad scenario, 3 environment.

use super::Session;
use crate::cli::ReplayArgs;
use crate::exit::{EnvironmentError, UsageError};
use crate::gpu::DeviceInfo;
use crate::model::{ReplayResult, Report, ReportKind, VariantRun, Verdict, SCHEMA_VERSION};
use crate::record::sampler::{SamplerConfig, DEFAULT_PROCESS_PERIOD};
use crate::replay::{self, Observer, ReplayError, ReplayOptions};
use crate::report::terminal::{self, replay::verdict_str};
use crate::scenario::{builtin, parse_scenario, Scenario};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::Ordering;

/// The hidden `vramdoc __worker` entry: the workload side of a replay.
pub fn worker(session: &Session) -> i32 {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    replay::worker::run_worker(session.backend, &mut input, &mut out)
}

/// The devices a replay may use, in the order scenario device numbers name them: every
/// device NVML lists (or those the parent's `CUDA_VISIBLE_DEVICES` selects, as NVML indices
/// or UUIDs) whose memory can be read now, with current memory; and the devices left out,
/// with why. One bad GPU never ends a replay: it is left out.
fn usable_devices(
    monitor: &dyn crate::gpu::Monitor,
    all: &[DeviceInfo],
    parent_cvd: Option<&str>,
) -> (Vec<DeviceInfo>, Vec<(u32, String)>) {
    let uuids: Vec<String> = all.iter().map(|d| d.uuid.clone()).collect();
    let selected = crate::gpu::visible::visible_devices(parent_cvd, &uuids);
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for pos in selected {
        let Some(d) = all.get(pos as usize) else {
            continue;
        };
        match monitor.memory(d.index) {
            Ok(m) => {
                let mut d = d.clone();
                d.memory = m;
                ok.push(d);
            }
            Err(e) => bad.push((d.index, e.to_string())),
        }
    }
    (ok, bad)
}

/// `GPU i is in use by PID p (name), ...` for each device another process holds memory on.
fn busy_devices(monitor: &dyn crate::gpu::Monitor, devices: &[DeviceInfo]) -> Vec<String> {
    let me = std::process::id();
    let mut out = Vec::new();
    for d in devices {
        let Ok(list) = monitor.processes(d.index) else {
            continue;
        };
        let who: Vec<String> = list
            .iter()
            .filter(|p| p.pid != me)
            .map(|p| {
                let name = crate::host::comm(p.pid)
                    .map(|n| format!(" ({})", crate::term::escape_bytes(n.trim_ascii())))
                    .unwrap_or_default();
                format!("PID {}{name}", p.pid)
            })
            .collect();
        if !who.is_empty() {
            out.push(format!("GPU {} is in use by {}", d.index, who.join(", ")));
        }
    }
    out
}

/// Resolve a command-line scenario: a built-in id or a path to a TOML file.
pub(crate) fn load(arg: &str) -> Result<Scenario> {
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
    let text = crate::input::read_text(path, crate::input::MAX_SCENARIO_BYTES, "scenario files")
        .map_err(|e| UsageError(e.to_string()))?;
    parse_scenario(arg, &text).map_err(|e| UsageError(e.to_string()).into())
}

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
        crate::term::eprint_line(&format!(
            "replay {}: {}",
            self.current,
            verdict_str(run.verdict)
        ));
    }
}

/// `--junit FILE`, and the GitHub job summary when `GITHUB_STEP_SUMMARY` is set.
fn write_ci_outputs(report: &Report, args: &ReplayArgs) -> Result<()> {
    let html = super::out_with_ext(&args.out, &["html", "htm"]);
    if let Some(path) = &args.junit {
        let xml = crate::report::junit::render_replay(report, html.as_deref())?;
        crate::report::write::write_atomic(path, xml.as_bytes(), args.force)
            .map_err(|e| UsageError(format!("writing the JUnit report: {e}")))?;
    }
    super::append_job_summary(report, &args.out, html, "replay");
    Ok(())
}

pub fn run(session: &Session, args: &ReplayArgs) -> Result<i32> {
    // Typed and bounded by clap (`cli::duration_within`).
    let period = args.period;
    // Refuse an unusable --out before running anything (a replay can take a while).
    crate::report::write::check_outputs(&args.out, args.force)
        .map_err(|e| UsageError(e.to_string()))?;
    if let Some(j) = &args.junit {
        crate::report::write::check_output_file(j, args.force)
            .map_err(|e| UsageError(e.to_string()))?;
    }
    let mut outputs = super::outputs("--out", &args.out);
    outputs.extend(args.junit.as_deref().map(|p| ("--junit", p)));
    crate::report::write::check_distinct(&outputs).map_err(|e| UsageError(e.to_string()))?;
    // `all` (or `--all`) stands for every built-in scenario, in `vramdoc list` order.
    // Every argument is resolved before anything runs: `all nope` is exit 2, not a long
    // replay that ignores `nope`. A scenario named twice runs once.
    let mut scenarios: Vec<Scenario> = Vec::new();
    let all_flag = args.all.then(|| "all".to_string());
    for a in all_flag.iter().chain(&args.scenarios) {
        let more = if a == "all" {
            crate::scenario::builtin::all()
                .map_err(|e| UsageError(format!("built-in scenarios: {e}")))?
        } else {
            vec![load(a)?]
        };
        for s in more {
            if !scenarios.iter().any(|k| k.id == s.id) {
                scenarios.push(s);
            }
        }
    }
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

    // At least 10ms: bounded by the flag's parser (crate::cli).
    let step_timeout = args.step_timeout;

    let monitor = session.monitor()?;
    let all_devices = monitor.devices()?;
    let parent_cvd = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    // CUDA reads CUDA_VISIBLE_DEVICES up to its first bad entry; one that hides every GPU
    // would make each variant fail in a confusing way. Same check on every backend.
    if let Some(cvd) = &parent_cvd {
        let uuids: Vec<String> = all_devices.iter().map(|d| d.uuid.clone()).collect();
        if crate::gpu::visible::visible_devices(Some(cvd), &uuids).is_empty() {
            anyhow::bail!(EnvironmentError(format!(
                "CUDA_VISIBLE_DEVICES={:?} leaves no visible GPU (CUDA reports no device); unset it or list device indices or UUIDs, e.g. 0,1",
                crate::term::clean(cvd)
            )));
        }
    }
    let (devices, unusable) = usable_devices(monitor.as_ref(), &all_devices, parent_cvd.as_deref());
    let most = scenarios
        .iter()
        .map(|s| s.devices as usize)
        .max()
        .unwrap_or(0);
    if !args.force {
        let busy = busy_devices(monitor.as_ref(), &devices[..most.min(devices.len())]);
        if !busy.is_empty() {
            anyhow::bail!(EnvironmentError(format!(
                "{}: a replay would disturb their work and their memory would distort its \
                 numbers; stop them, use a free box (e.g. --sim 2x24GiB), or pass --force",
                crate::term::clean(&busy.join("; "))
            )));
        }
    }
    let exe = std::env::current_exe().context("locating the vramdoc binary for the worker")?;
    // SIGINT, SIGTERM and SIGHUP: the worker is stopped and the partial report written.
    let interrupted = super::handle_interrupts_gracefully();
    let opts = ReplayOptions {
        backend: session.backend,
        sampler: SamplerConfig {
            period,
            process_period: Some(DEFAULT_PROCESS_PERIOD.max(period)),
        },
        exe,
        interrupted: interrupted.clone(),
        step_timeout,
    };
    for (index, why) in &unusable {
        crate::term::eprint_line(&format!("replay: GPU {index} is not used: {why}"));
    }
    let mut progress = Progress {
        bar: None,
        tty: std::io::stderr().is_terminal(),
        current: String::new(),
    };

    // Described now too: if the machine fails mid-replay the report still has its header.
    let environment_at_start = crate::inventory::environment(monitor.as_ref(), session.sim_spec())?;
    let mut fatal: Option<anyhow::Error> = None;
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
            // Devices can fall off the bus between variants: read them again each time.
            let (devices, unusable) =
                usable_devices(monitor.as_ref(), &all_devices, parent_cvd.as_deref());
            if s.devices as usize > devices.len() {
                let reason = if unusable.is_empty() {
                    format!(
                        "needs {} GPUs, this machine has {}",
                        s.devices,
                        devices.len()
                    )
                } else {
                    let bad: Vec<String> = unusable
                        .iter()
                        .map(|(i, why)| format!("GPU {i}: {why}"))
                        .collect();
                    format!(
                        "needs {} GPUs, {} usable ({})",
                        s.devices,
                        devices.len(),
                        bad.join("; ")
                    )
                };
                let run = replay::skipped(s, v, reason);
                progress.current = crate::term::clean(&format!("{}/{}", s.id, v.name));
                progress.variant_finished(&run);
                runs.push(run);
                continue;
            }
            match replay::run_variant(s, v, &devices, &opts, &mut progress) {
                Ok(run) => runs.push(run),
                // The machine failed under us (device lost, box removed): stop, but still
                // report the variants already finished, then fail with exit 3.
                Err(
                    e @ (ReplayError::Gpu(_)
                    | ReplayError::WorkerEnvironment(_)
                    | ReplayError::Spawn { .. }),
                ) => {
                    fatal = Some(anyhow::Error::new(EnvironmentError(e.to_string())));
                    break 'outer;
                }
            }
        }
    }
    let was_interrupted = interrupted.load(Ordering::SeqCst);

    let sim_spec = session.sim_spec();
    let environment = match crate::inventory::environment(monitor.as_ref(), sim_spec) {
        Ok(env) => env,
        Err(_) => environment_at_start,
    };
    let report = Report {
        schema_version: SCHEMA_VERSION,
        kind: ReportKind::Replay,
        environment,
        command: crate::model::command_line(),
        created_unix_ms: crate::model::now_unix_ms(),
        scan: None,
        run: None,
        replay: Some(ReplayResult {
            period_us: period.as_micros() as u64,
            runs: runs.clone(),
        }),
    };
    crate::report::write::write_reports(&report, &args.out, args.force)
        .map_err(|e| UsageError(format!("writing the report: {e}")))?;
    write_ci_outputs(&report, args)?;
    if args.json {
        let bytes = crate::report::json::render(&report);
        crate::term::print_json(&String::from_utf8_lossy(&bytes))?;
    } else {
        crate::term::print(&terminal::replay::summary(
            &runs,
            terminal::Options::default(),
        ))?;
        if was_interrupted {
            crate::term::print("interrupted: results above are partial")?;
        }
    }

    if let Some(e) = fatal {
        crate::term::eprint_line(&format!(
            "replay stopped early: {} finished variant(s) reported above and in --out",
            runs.len()
        ));
        return Err(e);
    }
    let bad = runs.iter().any(|r| r.verdict == Verdict::Unexpected)
        || (args.require && runs.iter().any(|r| r.verdict == Verdict::Skipped));
    Ok(if was_interrupted || bad {
        crate::exit::FINDINGS
    } else {
        crate::exit::OK
    })
}
