//! CI outputs of `vramdoc replay`: `--junit FILE` parsed with an independent XML parser
//! (roxmltree) and checked against the JSON report of the same run, the GitHub job summary
//! appended to `GITHUB_STEP_SUMMARY` within its 1 MiB limit; and the packaging outputs
//! (`completions`, `man`).

use crate::common;

use common::{fresh_box, vramdoc};
use serde_json::Value;
use std::path::Path;

const LIMIT: u64 = 1024 * 1024;

fn replay(dir: &Path, summary: Option<&Path>, args: &[&str]) -> (i32, String) {
    let mut cmd = vramdoc();
    cmd.env("VRAMDOC_SIM_DIR", dir)
        .env_remove("GITHUB_STEP_SUMMARY")
        .arg("replay")
        .args(args);
    if let Some(s) = summary {
        cmd.env("GITHUB_STEP_SUMMARY", s);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn cases<'a>(doc: &'a roxmltree::Document) -> Vec<roxmltree::Node<'a, 'a>> {
    doc.descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect()
}

#[test]
fn replay_all_junit_has_one_case_per_variant_and_a_job_summary() {
    let dir = fresh_box("t4");
    let out = tempfile::tempdir().unwrap();
    let p = |n: &str| out.path().join(n);
    let summary = p("summary.md");
    std::fs::write(&summary, "# an earlier step\n").unwrap();
    let s = |x: &Path| x.to_str().unwrap().to_string();
    let (code, err) = replay(
        dir.path(),
        Some(&summary),
        &[
            "all",
            "--out",
            &s(&p("r.html")),
            "--out",
            &s(&p("r.json")),
            "--junit",
            &s(&p("junit.xml")),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_slice(&std::fs::read(p("r.json")).unwrap()).unwrap();
    let runs = report["replay"]["runs"].as_array().unwrap();
    let xml = std::fs::read_to_string(p("junit.xml")).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("well-formed JUnit XML");
    let cs = cases(&doc);
    assert_eq!(cs.len(), runs.len(), "one test case per variant");
    let mut skipped = 0;
    for (case, run) in cs.iter().zip(runs) {
        let name = format!(
            "{}/{}",
            run["scenario"].as_str().unwrap(),
            run["variant"].as_str().unwrap()
        );
        assert_eq!(case.attribute("name"), Some(name.as_str()));
        let child = |tag: &str| case.children().find(|n| n.has_tag_name(tag));
        assert!(child("failure").is_none(), "{name}: nothing unexpected");
        match run["verdict"].as_str().unwrap() {
            "skipped" => {
                skipped += 1;
                let sk = child("skipped").expect("skipped element");
                assert_eq!(sk.attribute("message"), run["reason"].as_str());
            }
            v => {
                assert!(v == "reproduced" || v == "fixed", "{v}");
                assert!(child("skipped").is_none());
            }
        }
        let so = child("system-out").and_then(|n| n.text()).unwrap_or("");
        assert!(
            so.contains(&s(&p("r.html"))),
            "HTML report referenced: {so}"
        );
    }
    assert!(
        skipped > 0 && skipped < runs.len(),
        "a 1-GPU box skips some, runs others"
    );
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(
        suite.attribute("tests"),
        Some(runs.len().to_string().as_str())
    );
    assert_eq!(
        suite.attribute("skipped"),
        Some(skipped.to_string().as_str())
    );
    assert_eq!(suite.attribute("failures"), Some("0"));

    // The job summary: appended after the earlier step's text, whole (it fits).
    let text = std::fs::read_to_string(&summary).unwrap();
    assert!(text.starts_with("# an earlier step\n"));
    assert!(
        text.contains("multi-size-oom") && text.contains("overcommit"),
        "{text}"
    );
    assert!(!text.contains("Summary truncated"));

    // --junit refuses to overwrite without --force.
    let (code, err) = replay(
        dir.path(),
        None,
        &["overcommit", "--junit", &s(&p("junit.xml"))],
    );
    assert_eq!(code, 2);
    assert!(err.contains("--force"), "{err}");
}

#[test]
fn unexpected_variant_is_a_failure_with_its_evidence() {
    let dir = fresh_box("2xt4");
    let file = common::scenarios::write(dir.path(), "wrong.toml", common::scenarios::WRONG_FIX);
    let junit = dir.path().join("j.xml");
    let (code, err) = replay(
        dir.path(),
        None,
        &[file.to_str().unwrap(), "--junit", junit.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{err}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let cs = cases(&doc);
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0].attribute("name"), Some("wrong/fix-claims-nothing"));
    let failure = cs[0]
        .children()
        .find(|n| n.has_tag_name("failure"))
        .expect("failure element");
    assert!(failure
        .attribute("message")
        .unwrap()
        .starts_with("expected "));
    let evidence = failure.text().unwrap_or("");
    assert!(evidence.contains("observed:"), "{evidence}");
    assert!(evidence.contains("peak used on GPU 0"), "{evidence}");
}

#[test]
fn job_summary_stays_under_githubs_limit_with_a_pointer() {
    let dir = fresh_box("2xt4");
    let out = tempfile::tempdir().unwrap();
    let summary = out.path().join("summary.md");
    let html = out.path().join("r.html");
    // Earlier steps filled all but 2000 bytes.
    std::fs::write(&summary, "x".repeat((LIMIT - 2000) as usize)).unwrap();
    let (code, err) = replay(
        dir.path(),
        Some(&summary),
        &["all", "--out", html.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&summary).unwrap();
    assert!(text.len() as u64 <= LIMIT, "{} bytes", text.len());
    assert!(text.len() as u64 > LIMIT - 2000, "something appended");
    assert!(
        text.contains("Summary truncated"),
        "{}",
        &text[(LIMIT - 2000) as usize..]
    );
    assert!(
        text.contains(html.to_str().unwrap()),
        "points at the full report"
    );

    // A full summary file is left alone; the replay still succeeds.
    std::fs::write(&summary, "x".repeat(LIMIT as usize)).unwrap();
    let (code, err) = replay(dir.path(), Some(&summary), &["overcommit"]);
    assert_eq!(code, 0);
    assert!(err.contains("1 MiB"), "{err}");
    assert_eq!(std::fs::metadata(&summary).unwrap().len(), LIMIT);
}

#[test]
fn completions_and_man_page_come_from_the_cli() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = vramdoc().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("vramdoc") && text.contains("serve"),
            "{shell}"
        );
        assert!(text.contains("per-process"), "{shell}: flags too");
    }
    let out = vramdoc().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = vramdoc().arg("man").output().unwrap();
    assert!(out.status.success());
    let roff = String::from_utf8_lossy(&out.stdout);
    assert!(roff.contains(".TH vramdoc 1"), "{roff}");
    for sub in ["scan", "replay", "serve", "completions"] {
        assert!(roff.contains(sub), "{sub} in the man page");
    }
}
