//! Issue 25, Must-show #1: `vramdoc scan` run inside a PID namespace (`unshare --pid --fork
//! --mount-proc`, as a container without `hostPID`) beside a neighbour outside it, on boxes
//! made with `--driver 550.54.15` (translated, 0-byte own entries) and `--driver 570.86.10`
//! (translated, with usage): no warning or error about the neighbour's memory, and the scan
//! says where it stands; the same scan on the host attributes it (the neighbour's PID
//! listed). Drivers: open-gpu-kernel-modules `gpu_rmapi.c` (`_gpuConvertPid`),
//! NVIDIA/nvidia-container-toolkit#1013.

use crate::common::clients::CliBox;
use crate::common::hold::Holder;
use crate::common::{self, skip::require};
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// What `vramdoc scan ARGS` inside a fresh PID namespace on box `b` printed, beside its own
/// `sim hold` of 1 GiB started in that namespace; and the scan's exit status.
fn scan_in_a_namespace(b: &CliBox, args: &str) -> (String, i32) {
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let d = b.dir.display();
    // Bounded waits only: the holder's line within 10 s, else the script fails.
    let script = format!(
        "{exe} sim hold --size 1GiB --duration 60s > {d}/own.out 2>&1 & \
         i=0; while ! grep -q holding {d}/own.out; do \
           i=$((i+1)); [ $i -gt 200 ] && {{ cat {d}/own.out >&2; exit 90; }}; sleep 0.05; \
         done; \
         {exe} scan {args} > {d}/scan.out; echo $? > {d}/scan.rc; kill $!"
    );
    in_a_namespace(b, &script);
    let read = |f: &str| std::fs::read_to_string(b.dir.join(f)).unwrap();
    (read("scan.out"), read("scan.rc").trim().parse().unwrap())
}

/// Run `script` with `sh -c` in a fresh PID namespace (as a container without `hostPID`) on
/// box `b`, and check it succeeded.
fn in_a_namespace(b: &CliBox, script: &str) {
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c", script])
        .env("VRAMDOC_SIM_DIR", &b.dir)
        .env_remove("VRAMDOC_PIDNS")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    common::assert_ok(&out, "unshare ... vramdoc");
}

fn findings<'a>(v: &'a Value, id: &str) -> Vec<&'a Value> {
    v["scan"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .collect()
}

fn evidence_bytes(f: &Value, label: &str) -> Option<u64> {
    f["evidence"]
        .as_array()?
        .iter()
        .find(|e| e["label"].as_str().is_some_and(|l| l.starts_with(label)))?["bytes"]
        .as_u64()
}

#[test]
fn a_scan_inside_a_container_does_not_blame_the_neighbour_and_the_host_attributes_it() {
    require!("unshare", common::skip::unshare());
    for (driver, generation, own_bytes_listed) in [
        ("550.54.15", "translated-zero-usage", false),
        ("570.86.10", "translated", true),
    ] {
        let b = CliBox::new("16GiB", &["--driver", driver]);
        let neighbour = Holder::start(&b.dir, &[], &["--size", "3GiB"]);
        // `--fail-on warn`: exit 1 on any warning or error.
        let (json, rc) = scan_in_a_namespace(&b, "--json --fail-on warn");
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            rc, 0,
            "{driver}: a warning or error from the container: {v:#}"
        );
        let vantage = &v["scan"]["vantage"];
        assert_eq!(
            vantage["pid_namespace"]["host"], false,
            "{driver}: {vantage}"
        );
        assert_eq!(vantage["driver_version"], driver);
        assert_eq!(vantage["generation"], generation, "{driver}");
        assert_eq!(v["scan"]["pid_namespace"], "container");
        // Only the container's own process is listed, under its PID there.
        let procs = v["scan"]["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 1, "{driver}: {procs:?}");
        assert_ne!(procs[0]["pid"], neighbour.pid, "{driver}");
        let own = procs[0]["devices"][0]["used"].as_u64().unwrap();
        assert_eq!(own >= GIB, own_bytes_listed, "{driver}: own entry {own}");
        // The neighbour's memory: said at info, with the bytes and where to attribute it.
        let nlo = findings(&v, "no-live-owner");
        assert_eq!(nlo.len(), 1, "{driver}: {v:#}");
        assert_eq!(nlo[0]["severity"], "info");
        let title = nlo[0]["title"].as_str().unwrap();
        assert!(
            title.contains("outside this container's PID namespace") && title.contains("hostPID"),
            "{driver}: {title}"
        );
        let unlisted = evidence_bytes(nlo[0], "not listed from this PID namespace").unwrap();
        assert!(unlisted >= 3 * GIB, "{driver}: {unlisted}");
        let inv = findings(&v, "invisible-processes");
        assert_eq!(inv.len(), 1, "{driver}: {v:#}");
        assert_eq!(inv[0]["severity"], "info");
        assert_eq!(
            evidence_bytes(inv[0], "used on GPU 0 by no process listed here"),
            Some(unlisted)
        );
        // 0-byte own entries are said to be unknown, not taken for 0.
        assert_eq!(
            findings(&v, "usage-unavailable").len(),
            usize::from(!own_bytes_listed),
            "{driver}: {v:#}"
        );
        // The terminal header says where scan stood, in one line.
        let (text, _) = scan_in_a_namespace(&b, "");
        let line = text
            .lines()
            .find(|l| l.starts_with("Vantage: "))
            .unwrap_or_else(|| panic!("{driver}: no vantage line in\n{text}"));
        assert!(line.contains("container PID namespace"), "{line}");
        assert!(line.contains(&format!("driver {driver}")), "{line}");

        // The same scan on the host lists the neighbour under its PID, with its memory.
        let out = common::on_box(&b.dir)
            .args(["scan", "--json", "--fail-on", "warn"])
            .output()
            .unwrap();
        let host = common::json_ok(&out, "scan on the host");
        assert_eq!(host["scan"]["vantage"]["pid_namespace"]["host"], true);
        let listed = host["scan"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == neighbour.pid)
            .unwrap_or_else(|| panic!("{driver}: neighbour not listed on the host: {host:#}"));
        assert!(listed["devices"][0]["used"].as_u64().unwrap() >= 3 * GIB);
        assert!(findings(&host, "no-live-owner").is_empty(), "{host:#}");
    }
}

/// `vramdoc run` inside a PID namespace records its vantage, and a neighbour outside the
/// namespace that starts during the job and keeps its memory is not taken for memory the
/// job held after it exited (the driver lists only the namespace's processes).
#[test]
fn a_run_inside_a_container_does_not_take_the_neighbours_memory_for_the_jobs() {
    use crate::common::poll::{eventually, SECS_10};
    require!("unshare", common::skip::unshare());
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    for (driver, generation) in [
        ("570.86.10", "translated"),
        ("550.54.15", "translated-zero-usage"),
    ] {
        let b = CliBox::new("16GiB", &["--driver", driver]);
        let d = b.dir.display();
        let script = format!(
            "{exe} run --period 20ms --process-period 100ms --fail-on warn --out {d}/run.json \
             -- sh -c 'touch {d}/started; exec {exe} sim hold --size 1GiB --duration 3s' \
             > {d}/run.log 2>&1; echo $? > {d}/run.rc"
        );
        let mut ns = common::KillOnDrop(
            std::process::Command::new("unshare")
                .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
                .env("VRAMDOC_SIM_DIR", &b.dir)
                .env_remove("VRAMDOC_PIDNS")
                .env_remove("CUDA_VISIBLE_DEVICES")
                .env_remove("LD_LIBRARY_PATH")
                .spawn()
                .unwrap(),
        );
        eventually(SECS_10, "the job to start", || {
            b.dir.join("started").exists()
        });
        let _neighbour = Holder::start(&b.dir, &[], &["--size", "3GiB"]);
        let status = eventually(std::time::Duration::from_secs(60), "the run to end", || {
            ns.try_wait().ok().flatten()
        });
        assert!(status.success(), "{driver}");
        let read = |f: &str| std::fs::read_to_string(b.dir.join(f)).unwrap_or_default();
        let report: Value = serde_json::from_str(&read("run.json"))
            .unwrap_or_else(|e| panic!("{driver}: {e}: {}", read("run.log")));
        let run = &report["run"];
        assert_eq!(run["vantage"]["pid_namespace"]["host"], false, "{driver}");
        assert_eq!(run["vantage"]["generation"], generation, "{driver}");
        let alarms: Vec<&Value> = run["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["severity"] != "info")
            .collect();
        assert!(alarms.is_empty(), "{driver}: {alarms:#?}");
        assert_eq!(read("run.rc").trim(), "0", "{driver}: {}", read("run.log"));
    }
}

/// Real driver (H200, 580.159.04, docs/simulator.md): inside a PID namespace the driver lists
/// a parent that exited while its forked child keeps the context, under the parent's
/// namespace PID, which no longer exists. A scan there on a translating driver takes it for
/// what it is, an exited process of this namespace: its memory is lost (error, naming the
/// child holding it), while the neighbour outside stays info.
#[test]
fn a_scan_inside_a_container_names_a_forked_child_keeping_an_exited_parents_memory() {
    require!("unshare", common::skip::unshare());
    let exe = env!("CARGO_BIN_EXE_vramdoc");
    let b = CliBox::new("16GiB", &["--driver", "570.86.10"]);
    let _neighbour = Holder::start(&b.dir, &[], &["--size", "3GiB"]);
    let d = b.dir.display();
    // The holder prints `child=N` once its forked child holds the context; then the parent
    // is killed. Bounded waits only.
    let script = format!(
        "{exe} sim hold --size 1GiB --fork-child --duration 60s > {d}/own.out 2>&1 & p=$!; \
         i=0; while ! grep -q 'child=' {d}/own.out; do \
           i=$((i+1)); [ $i -gt 200 ] && {{ cat {d}/own.out >&2; exit 90; }}; sleep 0.05; \
         done; \
         kill -9 $p; wait $p 2>/dev/null; echo $p > {d}/parent; \
         {exe} scan --json > {d}/scan.out; echo $? > {d}/scan.rc; \
         c=$(tr ' ' '\\n' < {d}/own.out | sed -n 's/^child=//p'); kill -9 $c"
    );
    in_a_namespace(&b, &script);
    let read = |f: &str| std::fs::read_to_string(b.dir.join(f)).unwrap();
    let v: Value = serde_json::from_str(&read("scan.out")).unwrap();
    let parent: u64 = read("parent").trim().parse().unwrap();
    let own = read("own.out");
    let child = own
        .split_whitespace()
        .find_map(|w| w.strip_prefix("child="))
        .unwrap_or_else(|| panic!("no child= in {own}"));
    assert_eq!(v["scan"]["vantage"]["generation"], "translated", "{v:#}");
    let nlo = findings(&v, "no-live-owner");
    let lost: Vec<&&Value> = nlo.iter().filter(|f| f["severity"] == "error").collect();
    assert_eq!(lost.len(), 1, "{v:#}");
    assert_eq!(lost[0]["pid"], parent, "the exited parent: {v:#}");
    let title = lost[0]["title"].as_str().unwrap();
    assert!(
        title.contains(&format!("held open by PID {child}")),
        "{title}"
    );
    let lost_bytes = evidence_bytes(lost[0], "no live owner").unwrap();
    assert!((GIB..3 * GIB).contains(&lost_bytes), "{lost_bytes}: {v:#}");
    let outside: Vec<&&Value> = nlo.iter().filter(|f| f["severity"] == "info").collect();
    assert_eq!(outside.len(), 1, "{v:#}");
    assert!(
        evidence_bytes(outside[0], "not listed from this PID namespace").unwrap() >= 3 * GIB,
        "{v:#}"
    );
    assert!(findings(&v, "invisible-processes")
        .iter()
        .all(|f| f["severity"] == "info"));
    assert_eq!(read("scan.rc").trim(), "0");
}
