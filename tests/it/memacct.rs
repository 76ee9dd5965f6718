//! Memory accounting that is not lost memory (issue 25, items 4, 6, 7, 8): managed
//! (unified) memory of a live process (`vramdoc sim hold --managed`, cuMemAllocManaged in
//! the simulator), a GPU whose memory query is NOT_SUPPORTED (the `gb10` preset), a
//! coherent-memory GPU's unreclaimed pages in the metrics, and `low-headroom` on change in
//! `vramdoc serve`. Scans run on both backends (in-process sim, and nvml-wrapper over the
//! simulated libnvidia-ml.so.1).

use crate::common;

use common::exporter::{sample, Serve};
use common::hold::Holder;
use common::poll::{eventually, SECS_10};
use common::scans::{evidence_bytes, findings, run, scan_cmd};
use common::{fresh_box, json_ok};
use serde_json::Value;
use std::path::Path;

const GIB: u64 = 1 << 30;

/// `vramdoc scan --json ARGS` on `dir` through `backend` (`sim` or `real`), exit 0.
fn scan_on(dir: &Path, backend: &str, args: &[&str]) -> Value {
    let mut c = scan_cmd(dir, &["--json"]);
    c.args(args).args(["--backend", backend]);
    if backend == "real" {
        c.env("LD_LIBRARY_PATH", common::simgpu_lib_dir());
    }
    json_ok(&run(c), &format!("scan --json ({backend})"))
}

/// `vramdoc scan --prom FILE` on `dir`; the exposition.
fn prom_of(dir: &Path) -> String {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let file = out_dir.path().join("vramdoc.prom");
    let out = run(scan_cmd(
        dir,
        &["--prom", file.to_str().expect("utf-8 path")],
    ));
    common::assert_ok(&out, "scan --prom");
    std::fs::read_to_string(&file).expect("read the exposition")
}

fn severities(v: &Value, id: &str) -> Vec<String> {
    findings(v, id)
        .iter()
        .map(|f| f["severity"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Must-show #3: a live process with 2 GiB of managed memory is no lost memory.
#[test]
fn managed_memory_of_a_live_process_is_info_and_split_out_of_the_metric() {
    let b = fresh_box("16GiB");
    let h = Holder::start(b.path(), &[], &["--size", "1GiB", "--managed", "2GiB"]);
    for backend in ["sim", "real"] {
        let v = scan_on(b.path(), backend, &["--fail-on", "warn"]);
        assert_eq!(
            severities(&v, "no-live-owner"),
            vec!["info"],
            "{backend}: {v}"
        );
        let f = findings(&v, "no-live-owner")[0];
        let title = f["title"].as_str().unwrap_or("");
        assert!(
            title.contains(&format!("managed (unified) memory of PID {}", h.pid())),
            "{backend}: {title}"
        );
        assert_eq!(f["pid"], h.pid(), "{backend}");
        assert_eq!(evidence_bytes(f, "explained as managed"), Some(2 * GIB));
        let split = &v["scan"]["unattributed"][0];
        assert_eq!(split["lost"], 0, "{backend}: {split}");
        assert_eq!(split["managed"], 2 * GIB, "{backend}: {split}");
        assert_eq!(split["managed_by"], serde_json::json!([h.pid()]));
    }
    let prom = prom_of(b.path());
    let unattributed = sample(
        &prom,
        "vramdoc_gpu_memory_unattributed_bytes",
        &[("gpu", "0")],
    );
    assert_eq!(unattributed, Some(0.0), "{prom}");
    let managed = sample(
        &prom,
        "vramdoc_gpu_memory_explained_unattributed_bytes",
        &[("gpu", "0"), ("reason", "managed")],
    );
    assert_eq!(managed, Some((2 * GIB) as f64), "{prom}");
    // Once the process is gone its managed memory goes with it: nothing is left to explain.
    h.kill();
    let v = eventually(SECS_10, "the holder's memory to be released", || {
        let v = scan_on(b.path(), "sim", &[]);
        (v["scan"]["devices"][0]["memory"]["used"] == 0).then_some(v)
    });
    assert!(findings(&v, "no-live-owner").is_empty(), "{v}");
}

/// The same bytes with a forked child that NVML does not list holding the driver files:
/// the shape of lost memory, still an error (the uvm explanation needs no other holder).
#[test]
fn managed_memory_beside_a_dead_parent_is_still_lost() {
    let b = fresh_box("16GiB");
    let h = Holder::start(
        b.path(),
        &[],
        &["--size", "1GiB", "--managed", "2GiB", "--fork-child"],
    );
    let child = h.field("child").expect("child pid");
    h.kill();
    let v = scan_on(b.path(), "sim", &[]);
    // SAFETY: ending the forked child this test staged.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    assert_eq!(severities(&v, "no-live-owner"), vec!["error"], "{v}");
    assert_eq!(v["scan"]["unattributed"][0]["managed"], 0, "{v}");
}

/// GB10 (DGX Spark): the memory query answers NOT_SUPPORTED, per-process usage works. The
/// GPU stays in the inventory with its memory unknown and its process listed; no warning.
#[test]
fn gb10_scan_keeps_the_gpu_with_memory_unknown_and_warns_nothing() {
    let b = fresh_box("gb10");
    let h = Holder::start(b.path(), &[], &["--size", "3GiB"]);
    for backend in ["sim", "real"] {
        let v = scan_on(b.path(), backend, &["--fail-on", "warn"]);
        let d = &v["scan"]["devices"][0];
        assert_eq!(d["status"], "ok", "{backend}: {d}");
        assert!(
            d["memory_unknown"]
                .as_str()
                .is_some_and(|s| s.contains("NOT_SUPPORTED")),
            "{backend}: {d}"
        );
        let p = common::scans::process(&v, h.pid());
        assert!(common::scans::used_on(p, 0).is_some_and(|b| b >= 3 * GIB));
        for f in v["scan"]["findings"].as_array().expect("findings") {
            assert_eq!(f["severity"], "info", "{backend}: {f}");
            assert_ne!(f["id"], "device-unavailable", "{backend}: {f}");
        }
        assert!(v["scan"]["headroom"]
            .as_array()
            .expect("headroom")
            .is_empty());
    }
    // The table shows what the processes hold; the exposition has no zeros for memory.
    let out = run(scan_cmd(b.path(), &[]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("3.44 GiB by") && text.contains("n/a"),
        "{text}"
    );
    let prom = prom_of(b.path());
    assert!(sample(&prom, "vramdoc_gpu_info", &[("gpu", "0")]).is_some());
    assert!(sample(&prom, "vramdoc_gpu_memory_used_bytes", &[("gpu", "0")]).is_none());
}

/// A coherent-memory GPU keeps an exited process's pages counted as used: the finding is
/// info, and the metric the critical alert reads is 0, the bytes under reason="coherent".
#[test]
fn coherent_pages_are_explained_in_the_metric() {
    let b = fresh_box("gh200");
    let h = Holder::start(b.path(), &[], &["--size", "20GiB"]);
    h.kill();
    let v = eventually(SECS_10, "the exited holder to be reaped", || {
        let v = scan_on(b.path(), "sim", &[]);
        v["scan"]["processes"]
            .as_array()
            .is_some_and(|p| p.is_empty())
            .then_some(v)
    });
    assert_eq!(severities(&v, "no-live-owner"), vec!["info"], "{v}");
    let prom = prom_of(b.path());
    assert_eq!(
        sample(
            &prom,
            "vramdoc_gpu_memory_unattributed_bytes",
            &[("gpu", "0")]
        ),
        Some(0.0),
        "{prom}"
    );
    let coherent = sample(
        &prom,
        "vramdoc_gpu_memory_explained_unattributed_bytes",
        &[("gpu", "0"), ("reason", "coherent")],
    )
    .unwrap_or(0.0);
    assert!(coherent >= (20 * GIB) as f64, "{prom}");
}

/// `low-headroom` in serve: a steady state of two claimants stays info across collections;
/// a new claimant arriving on the GPU raises it to warn.
#[test]
fn serve_warns_low_headroom_on_a_new_claimant_not_on_a_steady_state() {
    let b = fresh_box("16GiB");
    // 16 GiB - 256 MiB reserved - 2 x (448 MiB context + 6.9 GiB): about 1 GiB free (6 %),
    // more than a new context needs.
    let size = format!("{}MiB", 6900 + 70);
    let _a = Holder::start(b.path(), &[], &["--size", &size]);
    let serve = Serve::start(b.path(), &[], &[], &[]);
    let level = |text: &str, sev: &str| {
        sample(
            text,
            "vramdoc_findings",
            &[("rule", "low-headroom"), ("severity", sev)],
        )
        .unwrap_or(0.0)
    };
    // One claimant, then a second while serve watches: a change, warn.
    eventually(SECS_10, "a collection with the first holder", || {
        let m = serve.metrics();
        sample(&m, "vramdoc_gpu_memory_used_bytes", &[("gpu", "0")]).is_some_and(|u| u > 6e9)
    });
    let _b = Holder::start(b.path(), &[], &["--size", &size]);
    let m = eventually(
        SECS_10,
        "low-headroom at warn after the new claimant",
        || {
            let m = serve.metrics();
            (level(&m, "warn") >= 1.0).then_some(m)
        },
    );
    assert_eq!(level(&m, "info"), 0.0, "{m}");
    drop(serve);
    // The same two claimants seen steady from the first collection on: info, collection
    // after collection.
    let serve = Serve::start(b.path(), &[], &[], &[]);
    let mut last: Option<f64> = None;
    for n in 1..=4 {
        let m = eventually(SECS_10, "the next collection", || {
            let m = serve.metrics();
            let t = sample(&m, "vramdoc_collect_timestamp_seconds", &[])?;
            (last != Some(t) && level(&m, "info") + level(&m, "warn") >= 1.0).then(|| {
                last = Some(t);
                m
            })
        });
        assert_eq!(level(&m, "warn"), 0.0, "collection {n}: {m}");
        assert_eq!(level(&m, "info"), 1.0, "collection {n}: {m}");
    }
}

/// Every CUDA process holds /dev/nvidia-uvm (observed on an H200, 580.159.04): a live
/// process with only a plain allocation does not make the unattributed bytes beside it
/// managed memory. On a coherent GPU they are an exited process's unreclaimed pages.
#[test]
fn holding_nvidia_uvm_without_managed_memory_explains_nothing() {
    let b = fresh_box("gh200");
    let live = Holder::start(b.path(), &[], &["--size", "1GiB"]);
    let gone = Holder::start(b.path(), &[], &["--size", "20GiB"]);
    gone.kill();
    let v = eventually(SECS_10, "the exited holder to be reaped", || {
        let v = scan_on(b.path(), "sim", &[]);
        v["scan"]["processes"]
            .as_array()
            .is_some_and(|p| p.len() == 1)
            .then_some(v)
    });
    assert_eq!(common::scans::process(&v, live.pid())["pid"], live.pid());
    let split = &v["scan"]["unattributed"][0];
    assert_eq!(split["managed"], 0, "{split}");
    assert!(
        split["coherent"].as_u64().is_some_and(|c| c >= 20 * GIB),
        "{split}"
    );
    let f = findings(&v, "no-live-owner");
    assert_eq!(f.len(), 1, "{v}");
    let title = f[0]["title"].as_str().unwrap_or("");
    assert!(title.contains("coherent-memory GPU"), "{title}");
    assert!(!title.contains("managed"), "{title}");
}
