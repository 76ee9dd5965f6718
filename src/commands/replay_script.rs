//! `vramdoc replay --expect FINGERPRINT [--fix ARGS]... -- CMD` (issue 38), as glue: the
//! flags → a [`Reproduction`] (fingerprints checked against `diagnose::ids::FINGERPRINTS`,
//! each `--fix` split) → the engine ([`crate::watch::variants`]: the bug and each fix watched
//! on the session's GPUs as `run` watches a job) → the replay report (table or JSON, files,
//! JUnit, job summary: the same as a scenario file's) → exit 0 when every variant behaved as
//! expected, 1 when not, 2 bad flags, 125–127 the command could not be watched.

use super::Session;
use crate::cli::ReplayArgs;
use crate::exit::{CodedError, UsageError};
use crate::model::{Body, ReplayResult, Report, VariantRun, Verdict};
use crate::record::sampler::{SamplerConfig, DEFAULT_PROCESS_PERIOD};
use crate::report::sink::{Outputs, Sink};
use crate::report::terminal::replay::verdict_str;
use crate::watch::variants::{self, Fix, Reproduction};
use anyhow::Result;

/// Progress on stderr: one line as each variant starts and ends.
struct Lines;

impl variants::Progress for Lines {
    fn started(&mut self, variant: &str, shown: &str) {
        crate::term::eprint_line(&format!("replay {variant}: {}", crate::term::clean(shown)));
    }
    fn finished(&mut self, run: &VariantRun) {
        let verdict = verdict_str(run.verdict);
        crate::term::eprint_line(&format!(
            "replay {}/{}: {verdict}",
            run.scenario, run.variant
        ));
    }
}

fn reproduction(args: &ReplayArgs) -> Result<Reproduction> {
    if args.expect.is_empty() {
        anyhow::bail!(UsageError(
            "replay -- CMD needs --expect FINGERPRINT: the finding its bug shows (e.g. \
             --expect stray-context; docs/findings.md lists them)"
                .into()
        ));
    }
    let known = crate::diagnose::ids::FINGERPRINTS;
    for fp in &args.expect {
        if !known.contains(&fp.as_str()) {
            anyhow::bail!(UsageError(format!(
                "--expect {:?}: unknown fingerprint (write one of: {})",
                crate::term::clean(fp),
                known.join(", ")
            )));
        }
    }
    let fixes = (args.fix.iter())
        .map(|f| Fix::parse(f).map_err(|e| UsageError(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    // Replay's --period (100us to 1s) within what `run` samples at (1ms at least).
    let period = args.period.max(std::time::Duration::from_millis(1));
    Ok(Reproduction {
        argv: args.command.clone(),
        expect: args.expect.clone(),
        fixes,
        cadence: SamplerConfig {
            period,
            process_period: Some(DEFAULT_PROCESS_PERIOD.max(period)),
        },
    })
}

pub fn run(session: &Session, args: &ReplayArgs) -> Result<i32> {
    let repro = reproduction(args)?;
    let sink = Sink::new(Outputs {
        files: (args.junit.iter())
            .map(|p| ("--junit", p.as_path()))
            .collect(),
        ..super::outputs(&args.output, None)
    })
    .map_err(|e| UsageError(e.to_string()))?;
    let monitor = super::session::monitor(session)?;
    let environment = crate::inventory::environment(monitor.as_ref(), session.sim_spec())?;
    drop(monitor);
    let runs = variants::replay(session, &repro, &mut Lines).map_err(|e| {
        anyhow::Error::new(CodedError {
            code: e.status(),
            message: e.to_string(),
        })
    })?;
    let report = Report::new(
        environment,
        Body::Replay(ReplayResult {
            period_us: repro.cadence.period.as_micros() as u64,
            runs: runs.clone(),
        }),
    );
    super::emit_replay(&report, &sink, args.junit.as_deref(), false)?;
    Ok(if runs.iter().any(|r| r.verdict == Verdict::Unexpected) {
        crate::exit::FINDINGS
    } else {
        crate::exit::OK
    })
}
