//! The labelled corpus of job and node shapes: every rule's acceptance test.
//!
//! Each case is a realistic workload or node shape (cited from a public source beside it),
//! run on the simulated box through its C ABI or given as a recorded timeline/snapshot,
//! with the findings it must raise at `warn`/`error` severity — often none. A case's
//! [`Outcome`] is scored per finding id: a warn/error finding not expected is a false alarm
//! (on a benign case, or a wrong cause on a failure case); an expected id not raised at
//! warn/error is a miss. `info` findings are never scored.
//!
//! `scan.rs` holds the node shapes (`vramdoc scan`), `run.rs` the job shapes
//! (`vramdoc run`, replays). Each prints its confusion matrix; `scripts/corpus` prints both
//! (docs/findings.md).
#![allow(dead_code)] // the cases in scan.rs and run.rs use these

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

mod logs;
mod mig;
mod run;
mod scan;

/// What one corpus case expected and what vramdoc found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Short case name, unique within its side.
    pub case: String,
    /// Where the shape comes from (issue, doc), as cited beside the case.
    pub source: String,
    /// Finding ids expected at warn or error severity (empty: a benign case).
    pub expected: BTreeSet<String>,
    /// Findings raised: (id, severity) with severity `info`, `warn` or `error`.
    pub found: Vec<(String, String)>,
}

impl Outcome {
    pub fn new(
        case: &str,
        source: &str,
        expected: &[&str],
        found: Vec<(String, String)>,
    ) -> Outcome {
        Outcome {
            case: case.to_string(),
            source: source.to_string(),
            expected: expected.iter().map(|s| s.to_string()).collect(),
            found,
        }
    }

    pub fn benign(&self) -> bool {
        self.expected.is_empty()
    }

    /// Ids raised at warn or error.
    pub fn alarms(&self) -> BTreeSet<String> {
        self.found
            .iter()
            .filter(|(_, sev)| sev == "warn" || sev == "error")
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub fn false_alarms(&self) -> BTreeSet<String> {
        self.alarms().difference(&self.expected).cloned().collect()
    }

    pub fn misses(&self) -> BTreeSet<String> {
        self.expected.difference(&self.alarms()).cloned().collect()
    }
}

/// Every finding (id, severity) anywhere in a JSON report (scan, run or replay): any array
/// under a key named `findings` whose objects carry `id` and `severity`.
pub fn findings_of(report: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    collect(report, &mut out);
    out
}

fn collect(v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if k == "findings" {
                    if let Value::Array(items) = child {
                        for f in items {
                            if let (Some(id), Some(sev)) = (
                                f.get("id").and_then(Value::as_str),
                                f.get("severity").and_then(Value::as_str),
                            ) {
                                out.push((id.to_string(), sev.to_string()));
                            }
                        }
                    }
                }
                collect(child, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect(i, out)),
        _ => {}
    }
}

/// The confusion matrix per finding id (true positives, false alarms, misses; precision and
/// recall), then every case that went wrong.
pub fn matrix(title: &str, outcomes: &[Outcome]) -> String {
    #[derive(Default)]
    struct Row {
        tp: u32,
        fp: u32,
        fn_: u32,
    }
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for o in outcomes {
        let alarms = o.alarms();
        for id in o.expected.union(&alarms) {
            let row = rows.entry(id.clone()).or_default();
            match (o.expected.contains(id), alarms.contains(id)) {
                (true, true) => row.tp += 1,
                (false, true) => row.fp += 1,
                (true, false) => row.fn_ += 1,
                (false, false) => {}
            }
        }
    }
    let benign = outcomes.iter().filter(|o| o.benign()).count();
    let mut s = format!(
        "corpus {title}: {} cases ({} benign, {} failures)\n",
        outcomes.len(),
        benign,
        outcomes.len() - benign
    );
    s.push_str(&format!(
        "{:<28} {:>4} {:>4} {:>4} {:>9} {:>7}\n",
        "finding", "TP", "FP", "FN", "precision", "recall"
    ));
    let ratio = |a: u32, b: u32| {
        if a + b == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", f64::from(a) / f64::from(a + b))
        }
    };
    for (id, r) in &rows {
        s.push_str(&format!(
            "{:<28} {:>4} {:>4} {:>4} {:>9} {:>7}\n",
            id,
            r.tp,
            r.fp,
            r.fn_,
            ratio(r.tp, r.fp),
            ratio(r.tp, r.fn_)
        ));
    }
    let benign_fp = outcomes
        .iter()
        .filter(|o| o.benign() && !o.false_alarms().is_empty())
        .count();
    s.push_str(&format!(
        "benign cases with a false warn/error: {benign_fp} of {benign}\n"
    ));
    for o in outcomes {
        let (fa, miss) = (o.false_alarms(), o.misses());
        if !fa.is_empty() || !miss.is_empty() {
            s.push_str(&format!(
                "  WRONG {}: false alarm {:?}, missed {:?} (expected {:?}, found {:?}) [{}]\n",
                o.case, fa, miss, o.expected, o.found, o.source
            ));
        }
    }
    s
}

/// The acceptance rule: no false warn/error anywhere, every expected cause named.
pub fn assert_clean(title: &str, outcomes: &[Outcome]) {
    let text = matrix(title, outcomes);
    println!("{text}");
    let wrong = outcomes
        .iter()
        .filter(|o| !o.false_alarms().is_empty() || !o.misses().is_empty())
        .count();
    assert!(wrong == 0, "{wrong} corpus case(s) wrong:\n{text}");
}
