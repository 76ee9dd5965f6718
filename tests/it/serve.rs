//! End-to-end tests of `vramdoc serve` (the Prometheus exporter) and `scan --prom`: the
//! exporter runs as its own process on a loopback port (`common::exporter::Serve`) over a shared simulated box, with
//! holder processes staged by `vramdoc sim hold`; a real Prometheus server (Debian's
//! `prometheus` package, installed by scripts/test) scrapes it and `promtool` lints the
//! exposition and tests the shipped alert rules. Every wait is bounded.

use crate::common;

use common::exporter::{
    http, prometheus_tools, promtool_check_metrics, read_response, sample, serve_fresh, tool, Serve,
};
use common::hold::Holder;
use common::poll::{eventually, SECS_10};
use common::{assert_ok, fresh_box, on_box, vramdoc};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const GIB: u64 = 1024 * 1024 * 1024;

/// The shipped alert rules, loaded by [`Prometheus`].
fn alert_rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/vramdoc-alerts.yml")
}

/// A Prometheus server on loopback with a temporary config and storage, killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: vramdoc\n    static_configs:\n      - targets: ['{target}']\n",
                rules = alert_rules_file().display()
            ),
        )
        .expect("write config");
        // A free loopback port for Prometheus' own HTTP API.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port");
        let child = Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            addr,
            _dir: dir,
        }
    }

    /// The JSON answer of a GET on Prometheus' HTTP API (`path` with its query string);
    /// `None` on any connection or parse error.
    fn api(&self, path: &str) -> Option<Value> {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).ok()?;
        let raw = String::from_utf8_lossy(&raw);
        let body = &raw[raw.find("\r\n\r\n")? + 4..];
        // Prometheus may answer chunked: the JSON is between the first `{` and last `}`.
        serde_json::from_str(&body[body.find('{')?..=body.rfind('}')?]).ok()
    }

    /// The value of an instant query's first result, if any.
    fn query(&self, promql: &str) -> Option<f64> {
        let mut q = String::new();
        for b in promql.bytes() {
            if b.is_ascii_alphanumeric() || b"_-.".contains(&b) {
                q.push(b as char);
            } else {
                q.push_str(&format!("%{b:02X}"));
            }
        }
        let json = self.api(&format!("/api/v1/query?query={q}"))?;
        json["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus scrapes `vramdoc serve` running on the NVML backend (nvml-wrapper over
/// crates/simgpu as libnvidia-ml.so.1); the value it stores equals what the box's NVML side
/// reports, and the exposition passes `promtool check metrics`.
#[test]
fn real_prometheus_scrapes_serve_and_agrees_with_nvml() {
    common::skip::require!("prometheus", prometheus_tools());
    let dir = fresh_box("2x24GiB");
    let _h = Holder::start(dir.path(), &[], &["--size", "3GiB"]);
    let serve = Serve::start(
        dir.path(),
        &[("LD_LIBRARY_PATH", common::simgpu_lib_dir())],
        &["--backend", "real"],
        &[],
    );
    let text = serve.metrics();
    assert_eq!(
        sample(&text, "vramdoc_build_info", &[("backend", "nvml")]),
        Some(1.0),
        "{text}"
    );
    let (ok, out) = promtool_check_metrics(&text);
    assert!(ok, "promtool check metrics: {out}\n{text}");

    // What NVML (the box's own view, through the in-process monitor) reports for GPU 0.
    let sim = vramdoc_sim::SimBox::open(dir.path()).unwrap();
    let nvml = vramdoc::backend::sim::SimMonitor::new(sim);
    use vramdoc::gpu::Monitor;
    let used = nvml.memory(0).unwrap().used;
    assert!(used > 3 * GIB, "holder's 3 GiB plus its context");

    let prom = Prometheus::start(serve.addr);
    let got = eventually(
        Duration::from_secs(40),
        "Prometheus to store a scrape of GPU 0's used memory",
        || prom.query("vramdoc_gpu_memory_used_bytes{gpu=\"0\"}"),
    );
    assert_eq!(got, used as f64, "Prometheus stored what NVML reports");
    assert_eq!(
        prom.query("vramdoc_gpu_memory_capacity_bytes{gpu=\"1\"}"),
        Some(24.0 * GIB as f64)
    );
    assert_eq!(prom.query("up{job=\"vramdoc\"}"), Some(1.0));
    assert_eq!(prom.query("vramdoc_collect_success"), Some(1.0));
    assert_eq!(
        prom.query("count(vramdoc_findings{rule=\"no-live-owner\"} == 0)"),
        Some(3.0)
    );
    // The shipped rules load and evaluate against the live series: Prometheus lists every
    // group and rule of the file, each evaluated (health no longer `unknown`) and healthy.
    let shipped = std::fs::read_to_string(alert_rules_file()).expect("read the alert rules");
    let starts = |p: &[&str]| {
        shipped
            .lines()
            .filter(|l| p.iter().any(|p| l.trim_start().starts_with(p)))
            .count()
    };
    let (want_groups, want_rules) = (starts(&["- name:"]), starts(&["- alert:", "- record:"]));
    assert!(want_groups > 0 && want_rules > 0, "{shipped}");
    let (groups, rules) = eventually(
        Duration::from_secs(30),
        &format!(
            "Prometheus to load and evaluate {want_groups} group(s) and {want_rules} rule(s) \
             of {}",
            alert_rules_file().display()
        ),
        || {
            let v = prom.api("/api/v1/rules");
            let last = || format!("last /api/v1/rules answer: {v:?}");
            let groups = v
                .as_ref()
                .and_then(|v| v["data"]["groups"].as_array().cloned());
            let groups = groups.ok_or_else(last)?;
            let rules: Vec<Value> = groups
                .iter()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            let evaluated = rules.iter().all(|r| r["health"] != "unknown");
            if groups.len() == want_groups && rules.len() == want_rules && evaluated {
                Ok((groups, rules))
            } else {
                Err(last())
            }
        },
    );
    for g in &groups {
        assert!(
            g["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("vramdoc-alerts.yml")),
            "{g}"
        );
    }
    for r in &rules {
        assert_eq!(
            r["health"], "ok",
            "rule {} does not evaluate: {}",
            r["name"], r["lastError"]
        );
    }
    assert_eq!(serve.terminate(), Some(0), "SIGTERM stops cleanly");
}

#[test]
fn shipped_alert_rules_pass_promtool_check_and_unit_tests() {
    common::skip::require!("prometheus", prometheus_tools());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus");
    for args in [
        vec!["check", "rules", "vramdoc-alerts.yml"],
        vec!["test", "rules", "vramdoc-alerts.test.yml"],
    ] {
        let out = Command::new(tool("promtool"))
            .args(&args)
            .current_dir(&root)
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Per-process series appear and disappear with the processes; a lost GPU turns into a
/// `gpu-lost` finding while the exporter keeps answering; SIGTERM exits 0.
#[test]
fn process_series_follow_processes_and_a_lost_gpu_is_a_finding() {
    common::skip::require!("prometheus", prometheus_tools());
    let dir = fresh_box("2x24GiB");
    let serve = Serve::start(dir.path(), &[], &[], &[]);
    let serve_pp = Serve::start(dir.path(), &[], &[], &["--per-process"]);
    let a = Holder::start(dir.path(), &[], &["--size", "1GiB"]);
    let b = Holder::start(dir.path(), &[], &["--device", "1", "--size", "2GiB"]);
    let series = |s: &Serve, pid: u32, gpu: &str| {
        sample(
            &s.metrics(),
            "vramdoc_process_gpu_memory_bytes",
            &[("pid", &pid.to_string()), ("gpu", gpu)],
        )
    };
    let (pa, pb) = (a.pid(), b.pid());
    // Each holder's whole allocation, not a collection taken between its context and it.
    eventually(SECS_10, "per-process series of both holders", || {
        series(&serve_pp, pa, "0").is_some_and(|b| b > GIB as f64)
            && series(&serve_pp, pb, "1").is_some_and(|b| b > 2.0 * GIB as f64)
    });
    let text = serve_pp.metrics();
    assert!(
        text.contains(&format!("comm=\"vramdoc\",gpu=\"0\",pid=\"{pa}\"")),
        "comm is the process name, never its command line: {text}"
    );
    assert!(series(&serve_pp, pb, "1").unwrap() > 2.0 * GIB as f64);
    // Without --per-process there is no per-process series at all.
    assert!(!serve.metrics().contains("vramdoc_process_gpu_memory_bytes"));

    drop(a);
    eventually(SECS_10, "series of the exited PID removed", || {
        series(&serve_pp, pa, "0").is_none()
    });
    assert!(series(&serve_pp, pb, "1").is_some(), "the live one stays");

    // Lose GPU 1.
    common::sim_fault(dir.path(), &["--lose-device", "1"]);
    let lost = eventually(SECS_10, "the gpu-lost finding to be exported", || {
        let t = serve.metrics();
        sample(
            &t,
            "vramdoc_findings",
            &[("rule", "gpu-lost"), ("severity", "error")],
        )
        .filter(|v| *v == 1.0)
        .map(|_| t)
    });
    // The collection itself succeeded: every other GPU was read.
    assert_eq!(sample(&lost, "vramdoc_collect_success", &[]), Some(1.0));
    // The GPU that still answers keeps its metrics (read one by one); the lost one has none.
    let sim = vramdoc_sim::SimBox::open(dir.path()).unwrap();
    assert_eq!(
        sample(&lost, "vramdoc_gpu_memory_used_bytes", &[("gpu", "0")]),
        Some(sim.memory(0).unwrap().used as f64),
        "{lost}"
    );
    assert_eq!(
        sample(&lost, "vramdoc_gpu_memory_used_bytes", &[("gpu", "1")]),
        None
    );
    assert!(lost.contains("vramdoc_gpu_memory_unattributed_bytes{gpu=\"0\""));
    assert_eq!(serve.get("/healthz").0, 200, "the exporter is alive");
    let (ok, out) = promtool_check_metrics(&lost);
    assert!(ok, "{out}");
    // Back: collections succeed again and the finding clears.
    common::sim_fault(dir.path(), &["--clear"]);
    eventually(SECS_10, "the gpu-lost finding clears", || {
        sample(
            &serve.metrics(),
            "vramdoc_findings",
            &[("rule", "gpu-lost"), ("severity", "error")],
        ) == Some(0.0)
    });
    assert_eq!(
        sample(
            &serve.metrics(),
            "vramdoc_findings",
            &[("rule", "gpu-lost"), ("severity", "error")]
        ),
        Some(0.0)
    );
    assert_eq!(serve.terminate(), Some(0));
    assert_eq!(serve_pp.terminate(), Some(0));
}

/// Keep-alive: two requests on one connection.
#[test]
fn keep_alive_serves_two_requests_on_one_connection() {
    let (_dir, serve) = serve_fresh("t4");
    let mut s = TcpStream::connect_timeout(&serve.addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..2 {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut s), (200, "ok\n".to_string()));
    }
}

/// Bad requests get their status codes.
#[test]
fn bad_requests_get_their_status_codes() {
    let (_dir, serve) = serve_fresh("t4");
    let (status, head) = http(serve.addr, "POST /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(status, 405, "POST: {head}");
    assert!(
        head.to_ascii_lowercase().contains("allow: get, head"),
        "{head}"
    );
    let big = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(10_000));
    for (what, request, want) in [
        (
            "unknown path",
            "GET /secrets HTTP/1.1\r\nHost: t\r\n\r\n",
            404,
        ),
        ("10 kB header", big.as_str(), 431),
        (
            "a body",
            "GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
            413,
        ),
        ("not HTTP", "BREW\r\n\r\n", 400),
    ] {
        let (status, body) = http(serve.addr, request);
        assert_eq!(status, want, "{what}: {body}");
    }
}

/// `scan --prom FILE` writes the same metrics (for node_exporter's textfile collector),
/// atomically replacing the previous file; a name that is not `*.prom` is refused.
#[test]
fn scan_prom_writes_the_exporters_metrics() {
    common::skip::require!("prometheus", prometheus_tools());
    let dir = fresh_box("2x24GiB");
    let h = Holder::start(dir.path(), &[], &["--size", "1GiB"]);
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("vramdoc.prom");
    for _ in 0..2 {
        let o = on_box(dir.path())
            .args(["scan", "--per-process", "--prom"])
            .arg(&file)
            .output()
            .unwrap();
        assert_ok(&o, "scan");
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let (ok, msg) = promtool_check_metrics(&text);
    assert!(ok, "{msg}\n{text}");
    let sim = vramdoc_sim::SimBox::open(dir.path()).unwrap();
    assert_eq!(
        sample(&text, "vramdoc_gpu_memory_used_bytes", &[("gpu", "0")]),
        Some(sim.memory(0).unwrap().used as f64)
    );
    assert!(sample(
        &text,
        "vramdoc_process_gpu_memory_bytes",
        &[("pid", &h.pid().to_string())]
    )
    .is_some());
    assert_eq!(
        std::fs::read_dir(out.path()).unwrap().count(),
        1,
        "no temp file left"
    );

    let o = vramdoc()
        .env("VRAMDOC_SIM_DIR", dir.path())
        .args(["scan", "--prom"])
        .arg(out.path().join("metrics.txt"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("*.prom"));
}

mod bad_flags_exit_2_and_a_busy_port_exits_3 {
    use super::*;

    /// `vramdoc serve ARGS` on a fresh box: exit code and stderr.
    fn serve_with(args: &[&str]) -> (Option<i32>, String) {
        let dir = fresh_box("t4");
        let out = vramdoc()
            .env("VRAMDOC_SIM_DIR", dir.path())
            .arg("serve")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    #[test]
    fn interval_too_short() {
        let (code, err) = serve_with(&["--interval", "1ms"]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("--interval"), "{err}");
    }

    #[test]
    fn listen_not_an_address() {
        let (code, err) = serve_with(&["--listen", "not an address"]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("--listen"), "{err}");
    }

    /// Issue 39 item 5: `--incidents FILE` exited 3 ("File exists").
    #[test]
    fn incidents_path_that_is_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("notes.txt");
        std::fs::write(&file, "x").unwrap();
        let (code, err) = serve_with(&["--incidents", file.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("--incidents") && err.contains("not a directory"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    }

    #[test]
    fn busy_port() {
        let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = busy.local_addr().unwrap().to_string();
        let (code, err) = serve_with(&["--listen", &addr]);
        assert_eq!(code, Some(3), "{err}");
        assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    }
}

/// On a private `--sim` box (whose signal handler removes the box) SIGTERM still stops the
/// exporter cleanly.
#[test]
fn serve_on_a_private_sim_box_stops_on_sigterm() {
    let dir = fresh_box("t4");
    let serve = Serve::start(dir.path(), &[], &["--sim", "2x24GiB"], &[]);
    let text = serve.metrics();
    assert_eq!(
        sample(&text, "vramdoc_gpu_memory_capacity_bytes", &[("gpu", "1")]),
        Some(24.0 * GIB as f64),
        "the private 2-GPU box, not VRAMDOC_SIM_DIR's: {text}"
    );
    assert_eq!(serve.terminate(), Some(0));
}
