//! `vramdoc report`: re-rendering a saved JSON report through the binary gives exactly what
//! rendering it directly gives; bad input is one line naming the file, exit 2; `--out`
//! writes through the atomic writer and refuses to overwrite without `--force`.

use crate::common;

use common::reports::{assert_valid_report_json, replay_report, scan_report};
use common::vramdoc;
use std::path::Path;
use vramdoc::report::write::{render, write_report, Format};

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit 2 and exactly one line on stderr containing every needle.
fn assert_usage_error(out: &std::process::Output, needles: &[&str]) {
    let err = stderr_of(out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err}");
    }
    assert!(out.stdout.is_empty());
}

#[test]
fn round_trip_through_the_binary_matches_direct_rendering() {
    let dir = tempfile::tempdir().unwrap();
    for (name, report) in [
        ("scan.json", scan_report()),
        ("replay.json", replay_report()),
    ] {
        let path = dir.path().join(name);
        write_report(&report, &path, false).unwrap();
        assert_valid_report_json(&std::fs::read_to_string(&path).unwrap());
        for (flag, format) in [
            ("md", Format::Markdown),
            ("html", Format::Html),
            ("json", Format::Json),
        ] {
            let out = vramdoc()
                .args(["report"])
                .arg(&path)
                .args(["--format", flag])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name} --format {flag}: {}",
                stderr_of(&out)
            );
            assert_eq!(
                out.stdout,
                render(&report, format).unwrap(),
                "{name} --format {flag} differs from direct rendering"
            );
        }
    }
}

#[test]
fn out_writes_atomically_and_needs_force_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("replay.json");
    let report = replay_report();
    write_report(&report, &input, false).unwrap();
    let out_path = dir.path().join("replay.html");
    let run = |force: bool| {
        let mut c = vramdoc();
        c.arg("report")
            .arg(&input)
            .args(["--format", "html", "--out"])
            .arg(&out_path);
        if force {
            c.arg("--force");
        }
        c.output().unwrap()
    };
    let first = run(false);
    assert!(first.status.success(), "{}", stderr_of(&first));
    assert!(first.stdout.is_empty(), "nothing on stdout with --out");
    assert_eq!(
        std::fs::read(&out_path).unwrap(),
        render(&report, Format::Html).unwrap()
    );

    std::fs::write(&out_path, "keep me").unwrap();
    let again = run(false);
    assert_usage_error(&again, &["replay.html", "already exists", "--force"]);
    assert_eq!(std::fs::read_to_string(&out_path).unwrap(), "keep me");

    let forced = run(true);
    assert!(forced.status.success(), "{}", stderr_of(&forced));
    assert_eq!(
        std::fs::read(&out_path).unwrap(),
        render(&report, Format::Html).unwrap()
    );
    // Only the input and the output: no temp files left.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn out_extension_must_agree_with_format() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("r.json");
    write_report(&scan_report(), &input, false).unwrap();
    let out = vramdoc()
        .arg("report")
        .arg(&input)
        .args(["--format", "md", "--out"])
        .arg(dir.path().join("r.html"))
        .output()
        .unwrap();
    assert_usage_error(&out, &["r.html", "html", "--format is md"]);
    assert!(!dir.path().join("r.html").exists());
}

fn report_of(dir: &Path, name: &str, content: &str) -> std::process::Output {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    vramdoc()
        .arg("report")
        .arg(&path)
        .args(["--format", "md"])
        .output()
        .unwrap()
}

/// Bad input is one line naming the file (and where in it), exit 2.
mod bad_input_is_one_line_naming_the_file {
    use super::*;

    #[test]
    fn missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = vramdoc()
            .arg("report")
            .arg(dir.path().join("nope.json"))
            .args(["--format", "md"])
            .output()
            .unwrap();
        assert_usage_error(&missing, &["nope.json", "cannot read"]);
    }

    #[test]
    fn invalid_json() {
        let dir = tempfile::tempdir().unwrap();
        let syntax = report_of(
            dir.path(),
            "broken.json",
            "{\n  \"schema_version\": 1,\n  \"kind\": scan\n}\n",
        );
        assert_usage_error(&syntax, &["broken.json:3:11: invalid JSON"]);
    }

    #[test]
    fn future_schema_version() {
        let dir = tempfile::tempdir().unwrap();
        let future = report_of(
            dir.path(),
            "future.json",
            "{\"schema_version\": 2, \"kind\": \"scan\"}",
        );
        assert_usage_error(
            &future,
            &[
                "future.json",
                "schema_version 2 is not supported",
                "version 1",
            ],
        );
    }

    #[test]
    fn not_a_report() {
        let dir = tempfile::tempdir().unwrap();
        let other = report_of(dir.path(), "other.json", "{\"name\": \"not a report\"}");
        assert_usage_error(&other, &["other.json", "not a vramdoc report"]);
    }

    #[test]
    fn wrong_shape_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut v: serde_json::Value =
            serde_json::from_slice(&render(&scan_report(), Format::Json).unwrap()).unwrap();
        v["scan"]["processes"][0]["pid"] = "four".into();
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        let line = pretty.lines().position(|l| l.contains("\"four\"")).unwrap() + 1;
        let shape = report_of(dir.path(), "shape.json", &pretty);
        assert_usage_error(
            &shape,
            &[&format!("shape.json:{line}:"), "not a valid vramdoc report"],
        );
    }
}

#[test]
fn help_teaches_with_examples() {
    let out = vramdoc().args(["report", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("vramdoc report run.json --format md"),
        "{help}"
    );
    assert!(help.contains("--force"));
    assert!(help.lines().all(|l| l.chars().count() <= 100), "{help}");
}

/// Issue 39 item 7: `scan --help` showed other commands' flag text (`--json` described
/// `run`, `--force` named `--junit`/`--samples`/`--scenario-out`, serve's
/// `--allocation-idle-after` was listed). Each command's help speaks of that command.
#[test]
fn each_commands_help_speaks_of_that_command() {
    let help = |cmd: &str| {
        let o = common::vramdoc().args([cmd, "--help"]).output().unwrap();
        assert!(o.status.success(), "{cmd} --help");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for (cmd, foreign) in [
        (
            "scan",
            &[
                "--junit",
                "--samples",
                "--scenario-out",
                "`run`",
                "`replay`",
                "allocation-idle-after",
            ][..],
        ),
        (
            "explain",
            &["--junit", "--samples", "`run`", "`replay`", ".csv"][..],
        ),
        ("replay", &["--samples", "--scenario-out", "`run`"][..]),
        ("run", &["`replay`", "replay on GPUs"][..]),
    ] {
        let h = help(cmd);
        for f in foreign {
            assert!(!h.contains(f), "`{cmd} --help` mentions {f}:\n{h}");
        }
        assert!(h.contains("--json") && h.contains("--force"), "{cmd}: {h}");
    }
    assert!(help("run").contains("--scenario-out"));
    assert!(help("serve").contains("--allocation-idle-after"));
}
