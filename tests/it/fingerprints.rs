//! Replays prove the fingerprints: on simulated boxes, every built-in scenario's bug variant
//! fires the fingerprint its file names and no fix variant does; a scenario naming the wrong
//! fingerprint is `unexpected`; an unknown fingerprint is a one-line file:line:col error.

use crate::common;

use common::vramdoc;
use serde_json::Value;

fn replay_all(spec: &str) -> (i32, Value) {
    let out = vramdoc()
        .args(["--sim", spec, "replay", "all", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), v)
}

fn check_every_builtin(spec: &str) {
    let (code, r) = replay_all(spec);
    let scenarios = vramdoc::scenario::builtin::all().unwrap();
    let runs = r["replay"]["runs"].as_array().unwrap();
    let expected: usize = scenarios.iter().map(|s| s.variants.len()).sum();
    assert_eq!(runs.len(), expected);
    for run in runs {
        let id = run["scenario"].as_str().unwrap();
        let variant = run["variant"].as_str().unwrap();
        let scn = scenarios.iter().find(|s| s.id == id).unwrap();
        let fp = scn
            .fingerprint
            .as_deref()
            .unwrap_or_else(|| panic!("{id} names no fingerprint"));
        let check = run["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["expectation"].as_str().unwrap().contains(fp))
            .unwrap_or_else(|| panic!("{id}/{variant}: no fingerprint check in {run}"));
        let want = if variant == "bug" {
            format!("the {fp} fingerprint fires")
        } else {
            format!("the {fp} fingerprint stays silent")
        };
        assert_eq!(check["expectation"], want.as_str(), "{id}/{variant}");
        assert_eq!(
            check["passed"], true,
            "{spec} {id}/{variant}: {}",
            check["detail"]
        );
        let verdict = if variant == "bug" {
            "reproduced"
        } else {
            "fixed"
        };
        assert_eq!(run["verdict"], verdict, "{spec} {id}/{variant}");
    }
    assert_eq!(code, 0);
}

#[test]
fn every_bug_fires_its_fingerprint_and_no_fix_does_on_2x16gib() {
    check_every_builtin("2x16GiB");
}

#[test]
fn every_bug_fires_its_fingerprint_and_no_fix_does_on_2xh200() {
    check_every_builtin("2xh200");
}

const STRAY: &str = include_str!("../../scenarios/stray-cuda0.toml");

fn replay_file(text: &str) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = common::scenarios::write(dir.path(), "s.toml", text);
    let out = vramdoc()
        .args([
            "--sim",
            "2x16GiB",
            "replay",
            path.to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn a_bug_without_its_fingerprint_is_unexpected() {
    // The stray-cuda0 bug shows a stray context, not a double load.
    let text = STRAY.replace(
        "fingerprint = \"stray-context\"",
        "fingerprint = \"double-load\"",
    );
    let (code, r, err) = replay_file(&text);
    assert_eq!(code, 1, "{err}");
    let bug = &r["replay"]["runs"][0];
    assert_eq!(bug["variant"], "bug");
    assert_eq!(bug["verdict"], "unexpected");
    let reason = bug["reason"].as_str().unwrap();
    assert!(
        reason.contains("the double-load fingerprint fires"),
        "{reason}"
    );
    // The fix is silent on double-load too: still fixed.
    assert_eq!(r["replay"]["runs"][1]["verdict"], "fixed");
}

#[test]
fn unknown_fingerprint_is_a_file_line_col_error() {
    let text = STRAY.replace(
        "fingerprint = \"stray-context\"",
        "fingerprint = \"stray-cuda0\"",
    );
    let line = text
        .lines()
        .position(|l| l.starts_with("fingerprint"))
        .unwrap()
        + 1;
    let (code, _, err) = replay_file(&text);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "s.toml:{line}:15: unknown fingerprint \"stray-cuda0\""
        )),
        "{err}"
    );
    assert!(err.contains("stray-context"), "lists the known ids: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
