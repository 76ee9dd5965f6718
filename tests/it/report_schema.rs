//! The JSON Schema in docs/report.schema.json is generated from the report model and stays
//! current; report JSON validates against it (and broken JSON does not).

use crate::common;

use common::reports::{replay_report, report_schema_errors, scan_report};
use std::path::Path;
use vramdoc::report::{json, schema};

/// Only compares: the file is rewritten by `scripts/update-schema`, never by a test (a test
/// that wrote what it then compares would pass whatever the model says).
#[test]
fn checked_in_schema_matches_the_model() {
    assert!(
        std::env::var_os("UPDATE_SCHEMA").is_none(),
        "UPDATE_SCHEMA no longer rewrites the schema: run scripts/update-schema"
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/report.schema.json");
    let generated = schema::json_schema();
    let checked_in = std::fs::read_to_string(&path).expect("docs/report.schema.json");
    assert!(
        checked_in == generated,
        "docs/report.schema.json is stale (the report model changed). Regenerate it with\n  \
         scripts/update-schema\nand commit it (bump SCHEMA_VERSION in src/model/mod.rs if a \
         field was renamed or removed)."
    );
}

#[test]
fn fixture_reports_validate() {
    for (name, report) in [("scan", scan_report()), ("replay", replay_report())] {
        let text = String::from_utf8(json::render(&report)).unwrap();
        let errors = report_schema_errors(&text);
        assert!(
            errors.is_empty(),
            "the {name} fixture report does not match docs/report.schema.json:\n{}",
            errors.join("\n")
        );
    }
}

#[test]
fn schema_rejects_broken_reports() {
    let text = String::from_utf8(json::render(&replay_report())).unwrap();
    let good: serde_json::Value = serde_json::from_str(&text).unwrap();
    type Mutation = fn(&mut serde_json::Value);
    let cases: [(&str, Mutation); 5] = [
        ("/kind", |v| v["kind"] = "bogus".into()),
        ("environment", |v| {
            v.as_object_mut().unwrap().remove("environment");
        }),
        ("/replay", |v| {
            v["replay"]["runs"][0]["timeline"]["devices"][0]["samples"][3] =
                serde_json::json!(["x", -1])
        }),
        ("/replay", |v| {
            v["replay"]["runs"][1]["verdict"] = "maybe".into()
        }),
        ("/schema_version", |v| v["schema_version"] = "one".into()),
    ];
    assert!(report_schema_errors(&good.to_string()).is_empty());
    for (where_, mutate) in cases {
        let mut v = good.clone();
        mutate(&mut v);
        let errors = report_schema_errors(&v.to_string()).join("\n");
        assert!(
            errors.contains(where_),
            "mutation at {where_} not caught:\n{errors}"
        );
    }
}
