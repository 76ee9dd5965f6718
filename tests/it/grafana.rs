//! The shipped Grafana dashboard (deploy/grafana/vramdoc.json, docs/fleet.md "Grafana"): valid
//! JSON with a data-source variable that every panel and query uses; its queries parse as
//! PromQL (`promtool check rules`, skip key `prometheus`) and read only metrics that
//! `vramdoc` exports (the exposition of `scan --prom --per-process` on a simulated box, the
//! same renderer `serve` uses).

use crate::common;

use common::hold::Holder;
use common::{assert_ok, fresh_box, on_box};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn dashboard() -> Value {
    let path = root().join("deploy/grafana/vramdoc.json");
    let bytes = std::fs::read(&path).expect("dashboard");
    serde_json::from_slice(&bytes).expect("the dashboard is valid JSON")
}

/// Every panel of the dashboard, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(nested) = p["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// Every PromQL expression of the dashboard's panels.
fn exprs(d: &Value) -> Vec<String> {
    panels(d)
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
        .map(|t| t["expr"].as_str().expect("expr").to_string())
        .collect()
}

#[test]
fn grafana_dashboard_is_valid_with_a_datasource_variable() {
    let d = dashboard();
    assert!(d["uid"].is_string() && d["title"].is_string());
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let vars = d["templating"]["list"].as_array().expect("templating");
    let ds = vars
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a data-source variable");
    assert_eq!(ds["query"], "prometheus");
    let ds_ref = format!("${{{}}}", ds["name"].as_str().expect("name"));
    let mut ids = BTreeSet::new();
    for p in panels(&d) {
        let title = p["title"].as_str().expect("title");
        assert!(
            ids.insert(p["id"].as_u64().expect("id")),
            "{title}: id unique"
        );
        assert!(p["gridPos"]["w"].as_u64().is_some(), "{title}: gridPos");
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], ds_ref.as_str(), "{title}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: a query");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], ds_ref.as_str(), "{title}");
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                "{title}"
            );
        }
    }
    for v in vars.iter().filter(|v| v["type"] == "query") {
        assert_eq!(v["datasource"]["uid"], ds_ref.as_str(), "{}", v["name"]);
    }
    // What the dashboard is for: memory per GPU and per pod, findings, headroom.
    let all = exprs(&d).join("\n");
    for (what, needle) in [
        ("memory per GPU", "vramdoc_gpu_memory_used_bytes"),
        (
            "memory per pod",
            "sum by (namespace, pod) (vramdoc_process_gpu_memory_bytes",
        ),
        ("findings", "vramdoc_findings"),
        (
            "headroom",
            "vramdoc_vllm_max_safe_gpu_memory_utilization_ratio",
        ),
        ("headroom", "vramdoc_gpu_memory_free_bytes"),
        ("incidents", "vramdoc_incidents_total"),
    ] {
        assert!(all.contains(needle), "{what}: {needle}");
    }
}

/// The metric names a PromQL expression reads: identifiers outside strings, label matchers,
/// ranges and grouping lists that are neither functions, keywords nor numbers.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Binary and aggregation operators (an aggregation may be followed by `by (…)`).
    const KEYWORDS: [&str; 22] = [
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
        "atan2",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    const GROUPING: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    // Blank out strings, {…} and […]; keep positions irrelevant.
    let mut plain = String::new();
    let (mut quote, mut depth_brace, mut depth_bracket) = (None, 0u32, 0u32);
    for ch in expr.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'' | '`') => quote = Some(ch),
            (None, '{') => depth_brace += 1,
            (None, '}') => depth_brace = depth_brace.saturating_sub(1),
            (None, '[') => depth_bracket += 1,
            (None, ']') => depth_bracket = depth_bracket.saturating_sub(1),
            (None, c) if depth_brace == 0 && depth_bracket == 0 => plain.push(c),
            _ => {}
        }
        if quote.is_some() || depth_brace > 0 || depth_bracket > 0 {
            plain.push(' ');
        }
    }
    let chars: Vec<char> = plain.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if GROUPING.contains(&word.as_str()) {
                skip_group = next == Some(&'(');
            } else if next != Some(&'(') && !KEYWORDS.contains(&word.to_lowercase().as_str()) {
                names.insert(word);
            }
        } else if c == '(' && skip_group {
            // A grouping list: label names, not metrics.
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            skip_group = false;
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn promql_metric_names_are_read_as_promql_means_them() {
    let got = metric_names(
        r#"sum by (namespace, pod) (a_bytes{pod!="x", y=~"$instance"}) / on(gpu) group_left(name) b_info > 0.5 or vector(0) and max without (gpu) (c[5m] offset 1h)"#,
    );
    let want: BTreeSet<String> = ["a_bytes", "b_info", "c"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
}

/// The metric families `vramdoc scan --prom --per-process` exports on a box where a process
/// holds memory (the same exposition `serve` renders).
fn exported_metrics() -> BTreeSet<String> {
    let dir = fresh_box("2x16GiB");
    let _h = Holder::start(dir.path(), &[], &["--device", "0", "--size", "1GiB"]);
    let out_dir = tempfile::tempdir().expect("tempdir");
    let prom = out_dir.path().join("vramdoc.prom");
    let out = on_box(dir.path())
        .args(["scan", "--per-process", "--prom"])
        .arg(&prom)
        .output()
        .expect("run scan --prom");
    // A finding may make scan exit 1; the exposition is written either way.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "scan --prom: {}",
        text(&out)
    );
    let exposition = std::fs::read_to_string(&prom).expect("exposition");
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The metric families the flight recorder (`serve --incidents`) adds to the exposition.
fn incident_metrics() -> BTreeSet<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = vramdoc::incidents::Incidents::new(vramdoc::incidents::IncidentsConfig {
        dir: dir.path().join("incidents"),
        max_count: 10,
        max_bytes: 1 << 20,
        history: std::time::Duration::from_secs(60),
        pod_log_dir: dir.path().join("pods"),
        kernel_log: None,
        period: std::time::Duration::from_secs(15),
        node: Some("n1".into()),
        per_minute: 6,
    })
    .expect("a recorder");
    let names: BTreeSet<String> = rec
        .exposition(Some("n1"))
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(names.contains("vramdoc_incidents_total"), "{names:?}");
    names
}

#[test]
fn grafana_queries_read_only_metrics_that_vramdoc_exports() {
    let d = dashboard();
    let exported = exported_metrics();
    assert!(
        exported.contains("vramdoc_process_gpu_memory_bytes"),
        "the per-process family is in the exposition: {exported:?}"
    );
    // `up` is Prometheus' own series for every target.
    let mut known = exported.clone();
    known.insert("up".into());
    // The flight recorder's families, which only `serve --incidents` exports.
    known.extend(incident_metrics());
    let mut used = BTreeSet::new();
    for expr in exprs(&d) {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "{expr}: reads a metric");
        for n in names {
            assert!(
                known.contains(&n),
                "{expr}: `{n}` is not exported (exported: {exported:?})"
            );
            used.insert(n);
        }
    }
    for v in d["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = v["definition"].as_str() {
            let metric = q
                .strip_prefix("label_values(")
                .and_then(|r| r.split(',').next())
                .unwrap_or_else(|| panic!("{q}: label_values(METRIC, LABEL)"));
            assert!(exported.contains(metric.trim()), "{q}");
        }
    }
    assert!(
        used.len() >= 10,
        "the dashboard reads most families: {used:?}"
    );
}

#[test]
fn grafana_queries_parse_as_promql() {
    common::skip::require!("prometheus", common::skip::tool("promtool", "prometheus"));
    let d = dashboard();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in exprs(&d).iter().enumerate() {
        rules.push_str(&format!(
            "      - record: dashboard:panel_{i}\n        expr: {}\n",
            serde_json::to_string(expr).expect("quote")
        ));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("dashboard.rules.yml");
    std::fs::write(&file, &rules).expect("write rules");
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("run promtool");
    assert_ok(
        &out,
        &format!("promtool check rules\n{rules}\n{}", text(&out)),
    );
}
