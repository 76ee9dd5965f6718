//! `vramdoc scenario from REPORT` (issue 16; `run --scenario-out` converts through
//! `repro::scenario_of_run`), as glue: read
//! the recording (a run report, or its `--samples` JSONL), have `repro` convert it, write the
//! scenario through `report::write`; and `--sim recorded`, resolved from the scenario files
//! a replay names. Bad input exits 2 with one line naming the file.

use crate::cli::{GlobalArgs, ScenarioCommand, ScenarioFromArgs};
use crate::exit::UsageError;
use crate::report::sink::{Outputs, Sink};
use crate::repro::{self, source, Converted};
use crate::scenario::{builtin, parse_scenario, Scenario};
use anyhow::Result;
use std::path::Path;

pub fn run(cmd: &ScenarioCommand) -> Result<i32> {
    match cmd {
        ScenarioCommand::From(args) => from(args),
    }
}

/// Convert the recording at `file`. A `--samples` stream (its first line a header) is read
/// as a stream, in bounded memory and of any length; a report is read whole (at most
/// [`crate::input::MAX_REPORT_BYTES`]).
fn convert_file(file: &Path) -> Result<Converted> {
    use std::io::Read;
    let name = file.display().to_string();
    let usage = |e: &dyn std::fmt::Display| UsageError(e.to_string());
    let (f, _) = crate::input::open_regular(file).map_err(|e| usage(&e))?;
    let mut r = std::io::BufReader::with_capacity(1 << 16, f);
    let mut first = Vec::new();
    let header = match source::next_line(&mut r, &mut first) {
        Ok(Some(_)) => source::first_line_is_header(&first),
        Ok(None) | Err(source::LineError::TooLong) => false,
        Err(source::LineError::Io(e)) => {
            return Err(usage(&format!("{name}: {e}")).into());
        }
    };
    let src = if header {
        first.push(b'\n');
        source::from_samples_reader(std::io::Cursor::new(first).chain(r), &name)
    } else {
        drop(r);
        let text = crate::input::read_text(file, crate::input::MAX_REPORT_BYTES, "reports")
            .map_err(|e| usage(&e))?;
        let report = crate::report::read::parse_report(&text, file).map_err(|e| match e {
            crate::report::read::ReadError::NotReport { .. } => {
                UsageError(repro::ReproError::NotRecording { file: name.clone() }.to_string())
            }
            other => UsageError(other.to_string()),
        })?;
        source::from_report(&report, &name)
    }
    .map_err(|e| usage(&e))?;
    repro::convert_source(&src, crate::backend::recorded_box_spec)
        .map_err(|e| UsageError(format!("{name}: {e}")).into())
}

fn from(args: &ScenarioFromArgs) -> Result<i32> {
    let sink = Sink::new(Outputs {
        force: args.force,
        files: args.out.iter().map(|p| ("--out", p.as_path())).collect(),
        ..Outputs::default()
    })
    .map_err(|e| UsageError(e.to_string()))?;
    let converted = convert_file(&args.input)?;
    match &args.out {
        Some(out) => {
            sink.file(out, converted.toml.as_bytes())
                .map_err(|e| UsageError(format!("writing the scenario: {e}")))?;
            crate::term::eprint_line(&converted.said(&out.display().to_string()));
        }
        None => {
            crate::term::write_stdout(converted.toml.as_bytes())?;
            crate::term::eprint_line(&converted.said("FILE.toml"));
        }
    }
    Ok(crate::exit::OK)
}

/// `--sim recorded`: the global flags with the box every named scenario file was recorded
/// on (its `recorded_on`). Other values of `--sim` pass through.
pub fn resolve_sim(global: &GlobalArgs, scenarios: &[String]) -> Result<GlobalArgs> {
    if global.sim.as_deref() != Some("recorded") {
        return Ok(global.clone());
    }
    if scenarios.is_empty() || scenarios.iter().any(|a| a == "all") {
        anyhow::bail!(UsageError(
            "--sim recorded needs scenario files made by `vramdoc scenario from` (built-in \
             scenarios were not recorded); give a box instead, e.g. --sim 2x24GiB"
                .into()
        ));
    }
    let mut recorded = Vec::new();
    for arg in scenarios {
        let s = load(arg)?;
        recorded.push((arg.clone(), s.recorded_on));
    }
    let spec =
        crate::backend::resolve_recorded(&recorded).map_err(|e| UsageError(e.to_string()))?;
    Ok(GlobalArgs {
        sim: Some(spec),
        ..global.clone()
    })
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
