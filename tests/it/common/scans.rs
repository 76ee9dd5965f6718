//! Running `vramdoc scan` on a simulated box and reading its JSON report: the command, its
//! exit status under `--fail-on`, its findings and their evidence, and the processes it saw
//! with the memory they use per device.

use super::{json_ok, on_box};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// `vramdoc scan ARGS` on the box `dir`, reading process lists as the host PID namespace.
pub fn scan_cmd(dir: &Path, args: &[&str]) -> Command {
    let mut c = on_box(dir);
    c.arg("scan").args(args);
    c
}

/// Run `c` to the end; its output.
pub fn run(mut c: Command) -> Output {
    c.output().expect("run vramdoc")
}

/// `vramdoc scan --json` on the box `dir` with `VRAMDOC_PIDNS=pidns`; checked to exit 0.
pub fn scan_json_with(dir: &Path, pidns: &str) -> Value {
    let out = run({
        let mut c = scan_cmd(dir, &["--json"]);
        c.env("VRAMDOC_PIDNS", pidns);
        c
    });
    json_ok(&out, "scan --json")
}

/// `vramdoc scan --json` on the box `dir`, in the host PID namespace; checked to exit 0.
pub fn scan_json(dir: &Path) -> Value {
    scan_json_with(dir, "host")
}

/// The ids of all findings of a scan report, in order.
pub fn all_ids(v: &Value) -> Vec<String> {
    v["scan"]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["id"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The process `pid` of a scan report; panics when it is not there.
pub fn process(v: &Value, pid: u32) -> &Value {
    v["scan"]["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} not in scan"))
}

/// The bytes a scanned process `p` uses on `device`, if it uses any there.
pub fn used_on(p: &Value, device: u32) -> Option<u64> {
    p["devices"]
        .as_array()?
        .iter()
        .find(|u| u["device"] == device)
        .and_then(|u| u["used"].as_u64())
}

/// The exit status of `vramdoc scan --fail-on LEVEL` on the box `dir`.
pub fn fail_on(dir: &Path, level: &str) -> Option<i32> {
    run(scan_cmd(dir, &["--fail-on", level])).status.code()
}

/// The findings of a scan report with the id `id`.
pub fn findings<'a>(v: &'a Value, id: &str) -> Vec<&'a Value> {
    v["scan"]["findings"]
        .as_array()
        .expect("findings array")
        .iter()
        .filter(|f| f["id"] == id)
        .collect()
}

/// The bytes of the first evidence line of finding `f` whose label starts with
/// `label_start`.
pub fn evidence_bytes(f: &Value, label_start: &str) -> Option<u64> {
    f["evidence"]
        .as_array()?
        .iter()
        .find(|e| {
            e["label"]
                .as_str()
                .is_some_and(|l| l.starts_with(label_start))
        })
        .and_then(|e| e["bytes"].as_u64())
}
