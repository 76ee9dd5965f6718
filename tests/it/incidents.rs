//! The flight recorder end to end (issue 28): `vramdoc serve --incidents DIR` on a simulated
//! node — a container of the box's runtime in a kubepods cgroup, the kubelet's log layout, a
//! pod-resources server (the `pods` module's) — turns an out-of-memory line appended to the
//! GPU pod's container log into one incident naming the pod, with the memory timeline before
//! it and a scenario that `replay --sim recorded` reproduces; `sim fault --xid 79` becomes a
//! `gpu-lost` incident with the `gpu-lost` finding; `vramdoc incidents list|show` read them.

use crate::common;
use crate::pods::{in_cgroup, kubelet_logs, pod, PodResourcesServer, UID_A};
use common::clients::CliBox;
use common::exporter::Serve;
use common::poll::{eventually, SECS_10};
use serde_json::Value;
use std::io::Write;
use std::path::Path;

/// The pod holds 1 GiB of the 16 GiB GPU in every collection; the line says 2 GiB were free
/// when 4 GiB were asked for: a holder the collections, seconds apart, missed (issue 37 item
/// 7: the scenario reproduces that state; before, the 4 GiB fitted in what the history
/// showed and the replay completed).
const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. \
GPU 0 has a total capacity of 15.99 GiB of which 2.00 GiB is free. Including non-PyTorch memory, \
this process has 1.00 GiB memory in use.";

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// `GET /incidents`, parsed.
fn incidents(serve: &Serve) -> Vec<Value> {
    let (status, body) = serve.get("/incidents");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["incidents"].as_array().cloned().unwrap_or_default()
}

fn read_incident(dir: &Path, id: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(format!("{id}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn history_bytes(serve: &Serve) -> f64 {
    common::exporter::sample(&serve.metrics(), "vramdoc_incident_history_bytes", &[]).unwrap_or(0.0)
}

#[test]
fn an_oom_line_in_a_gpu_pod_s_log_becomes_one_incident_that_replays() {
    // Pod cgroups of UID_A: removed at the end, one such test at a time.
    let _cgroups = crate::pods::CgroupSweep::new();
    let b = CliBox::new("1x16GiB", &[]);
    let a = in_cgroup(&b, "0", &format!("kubepods/burstable/pod{UID_A}/{{id}}"));
    let cid = a["id"].as_str().expect("container id").to_string();
    let tmp = tempfile::tempdir().unwrap();
    let log_dir = kubelet_logs(tmp.path(), &[("ml", "llm-0", UID_A, "vllm", &cid)]);
    let log = log_dir.join(format!("ml_llm-0_{UID_A}/vllm/0.log"));
    append(
        &log,
        "2026-11-27T21:00:00.000000001Z stdout F loading weights\n",
    );
    let uuid = b.sim().devices()[0].uuid.clone();
    let socket = tmp.path().join("kubelet.sock");
    let _server = PodResourcesServer::start(&socket, vec![pod("ml", "llm-0", "vllm", &[&uuid])]);
    let dir = tmp.path().join("incidents");
    let serve = Serve::spawn(
        b.vramdoc(),
        [
            "--pod-resources-socket".as_ref(),
            socket.as_os_str(),
            "--pod-log-dir".as_ref(),
            log_dir.as_os_str(),
            "--incidents".as_ref(),
            dir.as_os_str(),
            "--kernel-log".as_ref(),
            "none".as_ref(),
        ],
    );
    assert!(incidents(&serve).is_empty());
    // A few collections of history before the failure (the first one, done before the
    // server listens, already follows the pod's log).
    let first = history_bytes(&serve);
    assert!(first > 0.0);
    eventually(SECS_10, "three collections of history", || {
        history_bytes(&serve) >= first * 3.0
    });
    // Two ranks print the same failure in one burst: one incident.
    append(
        &log,
        &format!(
            "2026-11-27T21:00:01.000000001Z stderr F [rank0]: {OOM}\n\
             2026-11-27T21:00:01.000000002Z stderr F [rank1]: {OOM}\n"
        ),
    );
    let list = eventually(SECS_10, "an incident", || {
        Some(incidents(&serve)).filter(|l| !l.is_empty())
    });
    assert_eq!(list.len(), 1, "{list:?}");
    let id = list[0]["id"].as_str().unwrap().to_string();
    assert_eq!(list[0]["rule"], "out-of-memory");
    assert_eq!(list[0]["namespace"], "ml");
    assert_eq!(list[0]["pod"], "llm-0");
    // A later line of the same failure joins it.
    append(
        &log,
        &format!("2026-11-27T21:00:02.000000001Z stderr F [rank2]: {OOM}\n"),
    );
    let inc = eventually(SECS_10, "the third line joins the incident", || {
        let inc = read_incident(&dir, &id);
        (inc["repeats"].as_u64() >= Some(2)).then_some(inc)
    });
    assert_eq!(incidents(&serve).len(), 1, "still one incident");
    assert_eq!(inc["pod"]["namespace"], "ml");
    assert_eq!(inc["pod"]["name"], "llm-0");
    assert_eq!(inc["pod"]["container"], "vllm");
    assert_eq!(inc["devices"], serde_json::json!([0]));
    let ev = &inc["events"][0];
    assert_eq!(ev["source"], "pod-log");
    assert!(
        ev["line"].as_str().unwrap().contains("CUDA out of memory"),
        "{ev}"
    );
    assert_eq!(ev["requested"], 4u64 << 30);
    let samples = inc["timeline"]["devices"][0]["samples"].as_array().unwrap();
    assert!(samples.len() >= 3, "{samples:?}");
    assert!(
        samples.iter().all(|s| s[1].as_u64() >= Some(1 << 30)),
        "the pod's 1 GiB is in every sample: {samples:?}"
    );
    let m = serve.metrics();
    assert_eq!(
        common::exporter::sample(
            &m,
            "vramdoc_incidents_total",
            &[
                ("rule", "out-of-memory"),
                ("namespace", "ml"),
                ("pod", "llm-0")
            ]
        ),
        Some(1.0),
        "{m}"
    );
    let (ok, lint) = common::exporter::promtool_check_metrics(&m);
    assert!(ok, "{lint}");

    // The command reads the directory.
    let out = common::vramdoc()
        .args(["incidents", "list", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    common::assert_ok(&out, "incidents list");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&id));
    let out = common::vramdoc()
        .args(["incidents", "show", &id, "--markdown", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    common::assert_ok(&out, "incidents show --markdown");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ml/llm-0"));
    let out = common::vramdoc()
        .args(["incidents", "show", "../etc/passwd", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));

    // Its scenario reproduces the failure on the recorded box.
    let out = common::vramdoc()
        .args(["incidents", "show", &id, "--scenario", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    common::assert_ok(&out, "incidents show --scenario");
    let repro = tmp.path().join("repro.toml");
    std::fs::write(&repro, &out.stdout).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("the samples missed") && text.contains("from = \"failed-alloc\""),
        "the memory the history missed is modelled, and said: {text}"
    );
    let o = common::vramdoc()
        .args(["--sim", "recorded", "replay"])
        .arg(&repro)
        .arg("--json")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let run = &v["replay"]["runs"][0];
    assert_eq!(
        run["verdict"],
        "reproduced",
        "{run:#}\n{}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `serve` on a simulated box reads the box's `kern.log` without `--kernel-log` (issue 37):
/// the drill's Xid line reaches the incident.
#[test]
fn sim_fault_xid_79_becomes_a_gpu_lost_incident() {
    let b = CliBox::new("2x16GiB", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("incidents");
    let kern = b.sim().dir().join("kern.log");
    let serve = Serve::spawn(
        b.vramdoc(),
        [
            "--incidents".as_ref(),
            dir.as_os_str(),
            "--pod-log-dir".as_ref(),
            tmp.path().join("no-pods").as_os_str(),
        ],
    );
    let out = b
        .vramdoc()
        .args(["sim", "fault", "--xid", "79", "--device", "1"])
        .output()
        .unwrap();
    common::assert_ok(&out, "sim fault --xid 79");
    let line = std::fs::read_to_string(&kern).unwrap();
    assert!(
        line.starts_with("NVRM: Xid (PCI:0000:27:00): 79, pid="),
        "{line}"
    );
    let inc = eventually(
        SECS_10,
        "a gpu-lost incident with its Xid line and finding",
        || {
            let list = incidents(&serve);
            let id = list.first()?["id"].as_str()?.to_string();
            let inc = read_incident(&dir, &id);
            let has_xid = inc["events"]
                .as_array()?
                .iter()
                .any(|e| e["xid"] == 79 && e["source"] == "kernel");
            let has_finding = inc["findings"]
                .as_array()?
                .iter()
                .any(|f| f["id"] == "gpu-lost");
            (has_xid && has_finding).then_some((list, inc))
        },
    );
    let (list, inc) = inc;
    assert_eq!(list.len(), 1, "one incident per failure: {list:?}");
    assert_eq!(inc["rule"], "gpu-lost");
    assert_eq!(inc["devices"], serde_json::json!([1]));
    // The finding is an error and carries GPU 1's last reading from before it was lost.
    let f = inc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "gpu-lost")
        .unwrap();
    assert_eq!(f["severity"], "error", "{f}");
    let labels: Vec<&str> = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["label"].as_str())
        .collect();
    assert!(labels.contains(&"last reading at"), "{f}");
    assert!(labels.contains(&"last reading: used"), "{f}");
}
