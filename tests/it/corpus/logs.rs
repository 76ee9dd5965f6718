//! Real job output, judged: excerpts of failing and benign logs copied (trimmed, never
//! invented) from public issues of each framework, one file per case in
//! tests/it/corpus/logs/. Each file starts with its header:
//!
//! ```text
//! # source: https://github.com/OWNER/REPO/issues/N   (where the lines were copied from)
//! # family: tensorflow                               (the recogniser's family, for the table)
//! # expect: out-of-memory                            (finding ids at warn/error; `none`: benign)
//! # severity: warn                                   (optional: the expected finding's severity)
//! # exit: 1                                          (the job's exit status, as the issue tells)
//! ```
//!
//! Each case runs through `vramdoc run --fail-on error` on a simulated box, the job printing
//! the excerpt to stderr and exiting with that status; the report's findings are scored like
//! every corpus case (a false warn/error or a missed cause fails the test), and a job that
//! exited 0 must leave vramdoc's exit status 0 (a recovered OOM is a warning: `--fail-on
//! error` passes it). `scripts/corpus` prints the matrix.

use super::{assert_clean, findings_of, Outcome};
use crate::common::vramdoc;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/corpus/logs");

/// Families the corpus must hold (issues 26 and 37), each with at least one case.
const FAMILIES: [&str; 22] = [
    "pytorch",
    "tensorflow",
    "jax",
    "nccl",
    "vllm",
    "llama.cpp",
    "ollama",
    "tensorrt",
    "torchrun",
    "cublas-cudnn",
    "recovered",
    "cuda-not-memory",
    "deepspeed",
    "dataloader",
    "paddlepaddle",
    "tgi",
    "tensorrt-llm",
    "onnxruntime",
    "mxnet",
    "rocm",
    "cuda-libraries-not-memory",
    "hard-wrapped",
];

#[derive(Debug, Clone)]
struct Case {
    name: String,
    source: String,
    family: String,
    expect: Vec<String>,
    severity: Option<String>,
    exit: i32,
    body: String,
}

fn header<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .take_while(|l| l.starts_with("# "))
        .find_map(|l| l.strip_prefix("# ")?.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

fn read_case(path: &Path) -> Case {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.file_stem().unwrap().to_string_lossy().into_owned();
    let need = |key: &str| {
        header(&text, key)
            .unwrap_or_else(|| panic!("{name}: no `# {key}:` header"))
            .to_string()
    };
    let expect = need("expect");
    let body: String = text
        .lines()
        .skip_while(|l| l.starts_with("# "))
        .map(|l| format!("{l}\n"))
        .collect();
    Case {
        source: need("source"),
        family: need("family"),
        expect: if expect == "none" {
            Vec::new()
        } else {
            expect.split(',').map(|s| s.trim().to_string()).collect()
        },
        severity: header(&text, "severity").map(str::to_string),
        exit: need("exit").parse().unwrap(),
        body,
        name,
    }
}

fn cases() -> Vec<Case> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files.iter().map(|p| read_case(p)).collect()
}

/// `vramdoc run --fail-on error` of a job printing the excerpt and exiting with its status:
/// (the report, vramdoc's exit status).
fn run_case(c: &Case) -> (Value, Option<i32>) {
    let tmp = tempfile::tempdir().unwrap();
    let body = tmp.path().join("excerpt.log");
    std::fs::write(&body, &c.body).unwrap();
    let out = tmp.path().join("run.json");
    let status = vramdoc()
        .args([
            "--sim",
            "24GiB",
            "run",
            "--period",
            "20ms",
            "--fail-on",
            "error",
        ])
        .arg("--out")
        .arg(&out)
        .args(["--", "sh", "-c", "cat \"$1\" >&2; exit \"$2\"", "sh"])
        .arg(&body)
        .arg(c.exit.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run vramdoc");
    let bytes = std::fs::read(&out).unwrap_or_default();
    let report = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{}: no report ({e}); vramdoc exited {status}", c.name));
    (report, status.code())
}

#[test]
fn real_logs_of_every_family() {
    let cases = cases();
    assert!(
        cases.len() >= 100,
        "{} excerpts: the corpus holds 100 or more",
        cases.len()
    );
    let results: Vec<(Case, Value, Option<i32>)> = std::thread::scope(|s| {
        let chunks: Vec<&[Case]> = cases.chunks(cases.len().div_ceil(3)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|c| {
                            let (r, code) = run_case(c);
                            (c.clone(), r, code)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut outcomes = Vec::new();
    let mut wrong = Vec::new();
    let mut families: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for (c, report, code) in &results {
        let expected: Vec<&str> = c.expect.iter().map(String::as_str).collect();
        let found = findings_of(&report["run"]);
        let o = Outcome::new(&c.name, &c.source, &expected, found.clone());
        let mut ok = o.false_alarms().is_empty() && o.misses().is_empty();
        if let Some(sev) = &c.severity {
            let got = found.iter().find(|(id, _)| c.expect.contains(id));
            if got.map(|(_, s)| s.as_str()) != Some(sev.as_str()) {
                wrong.push(format!(
                    "{}: expected severity {sev}, found {found:?}",
                    c.name
                ));
                ok = false;
            }
        }
        if c.exit == 0 && *code != Some(0) {
            wrong.push(format!(
                "{}: the job exited 0 and `--fail-on error` exited {code:?} ({found:?})",
                c.name
            ));
            ok = false;
        }
        let f = families.entry(c.family.clone()).or_default();
        f.0 += 1;
        f.1 += u32::from(ok);
        outcomes.push(o);
    }
    let mut table = String::from("family                 cases  right\n");
    for (f, (n, right)) in &families {
        table.push_str(&format!("{f:<22} {n:>5} {right:>6}\n"));
    }
    println!("{table}");
    for f in FAMILIES {
        assert!(families.contains_key(f), "no case of family {f}\n{table}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_clean(
        "logs (real excerpts, vramdoc run --fail-on error)",
        &outcomes,
    );
}

/// Issue 26's must-show: a job that caught its out-of-memory errors and exited 0 is a
/// warning with the count of recoveries; `--fail-on error` passes it, `--fail-on warn` does not.
#[test]
fn a_recovered_oom_passes_fail_on_error_and_is_a_warning() {
    let c = read_case(&Path::new(DIR).join("metaseq_recovered_93gib.log"));
    assert_eq!(c.exit, 0);
    let (report, code) = run_case(&c);
    assert_eq!(code, Some(0), "--fail-on error: {report:#}");
    let oom = report["run"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "out-of-memory")
        .unwrap_or_else(|| panic!("no out-of-memory finding: {report:#}"))
        .clone();
    assert_eq!(oom["severity"], "warn", "{oom:#}");
    assert!(
        oom["title"].as_str().unwrap().contains("recovered from"),
        "{oom:#}"
    );
    // The same job under `--fail-on warn`: the warning fails the gate.
    let tmp = tempfile::tempdir().unwrap();
    let body = tmp.path().join("excerpt.log");
    std::fs::write(&body, &c.body).unwrap();
    let status = vramdoc()
        .args([
            "--sim",
            "24GiB",
            "run",
            "--period",
            "20ms",
            "--fail-on",
            "warn",
        ])
        .args(["--", "sh", "-c", "cat \"$1\" >&2; exit 0", "sh"])
        .arg(&body)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
}
