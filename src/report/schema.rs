//! The JSON Schema of the report, generated from the model's types (schemars). The checked-in
//! copy is docs/report.schema.json; `tests/it/report_schema.rs` fails when it is stale
//! (regenerate with `scripts/update-schema`).

use crate::model::Report;

/// The schema as pretty-printed JSON with a trailing newline.
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(Report);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_else(|_| "{}".into());
    s.push('\n');
    s
}
