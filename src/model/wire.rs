//! The report's wire layout (schema version 1): `kind` beside exactly one of `scan`,
//! `replay`, `run`. [`Report`] is written through a borrowed copy of it and read through an
//! owned one, so the JSON (and docs/report.schema.json, generated from [`Wire`]) is what it
//! has always been, while in memory the body is typed by kind. A file whose `kind` lacks its
//! body, or carries another kind's, is refused when read, naming what is missing.

use super::{Body, Environment, ReplayResult, Report, ReportKind, RunResult, ScanResult};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// A complete report.
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "Report")]
struct Wire {
    schema_version: u32,
    /// `scan`, `replay` or `run`.
    kind: ReportKind,
    environment: Environment,
    /// The vramdoc command line that produced this report (redacted).
    command: Vec<String>,
    /// Milliseconds since the Unix epoch when the report was made.
    created_unix_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scan: Option<ScanResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replay: Option<ReplayResult>,
    /// What `vramdoc run -- CMD` recorded (kind `run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run: Option<RunResult>,
}

/// [`Wire`], borrowed from a [`Report`], in the same field order.
#[derive(Serialize)]
struct WireRef<'a> {
    schema_version: u32,
    kind: ReportKind,
    environment: &'a Environment,
    command: &'a [String],
    created_unix_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    scan: Option<&'a ScanResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay: Option<&'a ReplayResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<&'a RunResult>,
}

impl Serialize for Report {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WireRef {
            schema_version: self.schema_version,
            kind: self.kind(),
            environment: &self.environment,
            command: &self.command,
            created_unix_ms: self.created_unix_ms,
            scan: self.scan(),
            replay: self.replay(),
            run: self.run(),
        }
        .serialize(s)
    }
}

/// The body a wire report of `kind` carries; an error naming what is wrong otherwise.
fn body(w: Wire) -> Result<(Wire, Body), String> {
    let mut w = w;
    let others = |w: &Wire, own: &str| -> Option<String> {
        [
            ("scan", w.scan.is_some()),
            ("replay", w.replay.is_some()),
            ("run", w.run.is_some()),
        ]
        .into_iter()
        .find(|(name, present)| *present && *name != own)
        .map(|(name, _)| name.to_string())
    };
    let own = match w.kind {
        ReportKind::Scan => "scan",
        ReportKind::Replay => "replay",
        ReportKind::Run => "run",
    };
    if let Some(other) = others(&w, own) {
        return Err(format!(
            "a {own} report with a `{other}` section (a report has the section of its kind only)"
        ));
    }
    let b = match w.kind {
        ReportKind::Scan => w.scan.take().map(Body::Scan),
        ReportKind::Replay => w.replay.take().map(Body::Replay),
        ReportKind::Run => w.run.take().map(Body::Run),
    };
    match b {
        Some(b) => Ok((w, b)),
        None => Err(format!("a {own} report without its `{own}` section")),
    }
}

impl<'de> Deserialize<'de> for Report {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (w, body) = body(Wire::deserialize(d)?).map_err(serde::de::Error::custom)?;
        Ok(Report {
            schema_version: w.schema_version,
            environment: w.environment,
            command: w.command,
            created_unix_ms: w.created_unix_ms,
            body,
        })
    }
}

impl JsonSchema for Report {
    fn schema_name() -> Cow<'static, str> {
        Wire::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        Wire::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Wire::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment() -> Environment {
        Environment {
            hostname: "h".into(),
            kernel: "k".into(),
            vramdoc_version: "v".into(),
            backend: "sim".into(),
            sim_spec: None,
            versions: crate::gpu::Versions {
                driver: "d".into(),
                cuda: "c".into(),
                nvml: "n".into(),
            },
            devices: Vec::new(),
        }
    }

    fn replay_report() -> Report {
        Report::new(
            environment(),
            Body::Replay(ReplayResult {
                period_us: 1000,
                runs: Vec::new(),
            }),
        )
    }

    #[test]
    fn the_wire_layout_is_kind_beside_its_one_body() {
        let v = serde_json::to_value(replay_report()).unwrap();
        assert_eq!(v["kind"], "replay");
        assert_eq!(v["replay"]["period_us"], 1000);
        assert!(v.get("scan").is_none() && v.get("run").is_none(), "{v}");
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 6, "{keys:?}");
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back, replay_report_at(&back));
    }

    /// `replay_report()` with `back`'s header (made at another moment).
    fn replay_report_at(back: &Report) -> Report {
        Report {
            created_unix_ms: back.created_unix_ms,
            command: back.command.clone(),
            ..replay_report()
        }
    }

    #[test]
    fn a_kind_without_its_body_or_with_another_is_refused_when_read() {
        let mut v = serde_json::to_value(replay_report()).unwrap();
        v["kind"] = "run".into();
        let e = serde_json::from_value::<Report>(v.clone()).unwrap_err();
        assert!(
            e.to_string()
                .contains("a run report with a `replay` section"),
            "{e}"
        );
        v.as_object_mut().unwrap().remove("replay");
        let e = serde_json::from_value::<Report>(v).unwrap_err();
        assert!(
            e.to_string()
                .contains("a run report without its `run` section"),
            "{e}"
        );
    }
}
