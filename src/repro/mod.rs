//! Record once, replay anywhere (issue 16): turning a `vramdoc run` recording (the report's
//! `run` section, or its `--samples` JSONL, also cut short by a crash) into a scenario that
//! replays the job's memory behaviour without its model ([`source`], [`convert`],
//! [`toml_out`]; labels made safe for public tickets in [`label`]), and the what-if
//! outcome of such a scenario on other boxes ([`whatif`], replayed in this process on fresh
//! private boxes by [`schedule`]). Conversion does no I/O: the commands read and write the
//! files. docs/repro.md is the user's guide.

pub mod convert;
pub mod engine_claim;
pub mod label;
mod limits;
mod picture;
pub mod schedule;
pub mod source;
pub mod toml_out;
pub mod whatif;

use thiserror::Error;

pub use convert::{MAX_STEPS, MIN_QUANTUM};
pub use source::Source;

/// Why a recording cannot be converted (bad input: exit 2).
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ReproError {
    #[error("{file}: a {kind} report, not a run report: pass the JSON report of `vramdoc run --out FILE.json` or its `--samples FILE.jsonl`")]
    NotRun { file: String, kind: String },
    #[error("{file}: not a `vramdoc run --samples` stream (its first line is not a header); pass the JSONL file `run --samples` wrote, or the run's JSON report")]
    NotSamples { file: String },
    #[error("{file}: neither a vramdoc run report nor a `run --samples` stream; pass the JSON report of `vramdoc run --out FILE.json` or its `--samples FILE.jsonl`")]
    NotRecording { file: String },
    #[error("{file}:{line}: not a line of a `run --samples` stream: {message} (remove or repair that line)")]
    BadLine {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: {message}")]
    Read { file: String, message: String },
    #[error(
        "the recording has no memory samples (record a longer run: one sample every --period)"
    )]
    NoSamples,
    #[error("the job never held GPU memory in this recording: there is nothing to reproduce")]
    NoJobMemory,
    #[error("the recording has {gpus} GPUs with samples; a scenario holds at most {max} (convert a recording of fewer GPUs, e.g. `run` with CUDA_VISIBLE_DEVICES)", max = convert::MAX_DEVICES)]
    TooManyDevices { gpus: usize },
    #[error("the recording still needs {steps} steps at the largest quantum (at most {max}): it has too many markers or GPUs to reproduce", max = convert::MAX_STEPS)]
    TooManySteps { steps: usize },
    #[error("internal error: the converted scenario does not parse ({0}); please report this")]
    Invalid(String),
}

/// A converted recording: the scenario file's text, the parsed scenario, what was done.
#[derive(Debug, Clone)]
pub struct Converted {
    pub toml: String,
    pub scenario: crate::scenario::Scenario,
    pub summary: convert::Summary,
}

impl Converted {
    /// One line about what was made, with how to replay it from `out`.
    pub fn said(&self, out: &str) -> String {
        let s = &self.summary;
        let coalesced = if s.coalesced {
            format!(" (coalesced from {})", s.steps_before)
        } else {
            String::new()
        };
        let fp = (self.scenario.fingerprint.as_deref()).unwrap_or("no fingerprint");
        let on = self.scenario.recorded_on.as_deref().unwrap_or("?");
        let cut = if s.truncated {
            "; the recording was cut short, converted as far as it went"
        } else {
            ""
        };
        format!(
            "scenario: {} steps{coalesced}, recorded on {on}, {fp}{cut}; replay it: vramdoc replay {out} --sim recorded",
            s.steps
        )
    }
}

/// `run --scenario-out`: the scenario of a finished run's report (`Err`: why none is made,
/// one line).
pub fn scenario_of_run(report: &crate::model::Report) -> Result<Converted, String> {
    let src = source::from_report(report, "the run").map_err(|e| e.to_string())?;
    convert_source(&src, crate::backend::recorded_box_spec).map_err(|e| e.to_string())
}

/// Convert a source. `recorded_on`: the box spec standing for the recorded GPUs, from
/// their product names and totals (the backend names presets).
pub fn convert_source(
    src: &Source,
    recorded_on: impl Fn(&[(String, u64)]) -> Option<String>,
) -> Result<Converted, ReproError> {
    let (mut scenario, summary) = convert::convert(src, src.process_period_ms, None)?;
    let devs: Vec<(String, u64)> = summary
        .physical
        .iter()
        .filter_map(|p| src.devices.iter().find(|d| d.index == *p))
        .map(|d| (d.name.clone(), d.total))
        .collect();
    scenario.recorded_on = recorded_on(&devs);
    let mut header = vec![
        "A reproduction converted by `vramdoc scenario from` (docs/repro.md).".to_string(),
        "It holds sizes, timings and redacted marker texts only: no command line,".to_string(),
        "environment, path or host name of the recorded job (docs/security.md).".to_string(),
        "Replay it: vramdoc replay FILE --sim recorded".to_string(),
    ];
    if summary.coalesced {
        header.push(format!(
            "Coalesced: {} steps became {} (at most {MAX_STEPS}); changes under {} merged.",
            summary.steps_before,
            summary.steps,
            crate::units::format_bytes(summary.quantum)
        ));
    }
    if summary.truncated {
        header
            .push("The recording was cut short (no end line): converted as far as it went.".into());
    }
    let toml = toml_out::to_toml(&scenario, &header);
    // The size first (steps, neighbours and labels are bounded, so this holds by
    // construction), then what was written must read back as what was meant.
    if toml.len() as u64 > crate::input::MAX_SCENARIO_BYTES {
        return Err(ReproError::Invalid(format!(
            "{} bytes, over the 1 MiB scenario limit",
            toml.len()
        )));
    }
    let parsed = crate::scenario::parse_scenario("converted scenario", &toml)
        .map_err(|e| ReproError::Invalid(e.to_string()))?;
    Ok(Converted {
        toml,
        scenario: parsed,
        summary,
    })
}

#[cfg(test)]
mod tests;
