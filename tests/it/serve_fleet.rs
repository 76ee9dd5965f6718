//! `vramdoc serve` on real nodes (issues 18 and 19): slow and idle clients never hold a slot a
//! scrape needs and their deadlines close them; NVML lost (`sim fault
//! --nvml-session-lost`) and found again without a restart, seen by `/healthz`;
//! `--release-between`; the node name label; SIGTERM during the first collection; the HTTP
//! details (HEAD, 405 with Allow, query strings, Content-Type, 400). The exporter runs as its
//! own process (`common::exporter::Serve`); every wait is bounded (hang detectors, not speed
//! assertions).

use crate::common;

use common::exporter::{http, read_response, sample, serve_fresh, Serve};
use common::poll::{eventually, SECS_10};
use common::{fresh_box, on_box};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Whether the server has closed `s` (EOF or reset), waiting at most `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// A kept-alive connection that has been answered once.
fn kept_alive(addr: SocketAddr) -> TcpStream {
    let mut s = connect(addr);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s).0, 200);
    s
}

/// `vramdoc sim fault ARGS` on the box.
fn fault(dir: &Path, args: &[&str]) {
    let o = on_box(dir)
        .args(["sim", "fault"])
        .args(args)
        .output()
        .unwrap();
    common::assert_ok(&o, "sim fault");
}

/// Serve over the simulated libnvidia-ml.so.1 (nvml-wrapper, as on a real node).
fn serve_nvml(dir: &Path, extra: &[&str]) -> Serve {
    Serve::start(
        dir,
        &[("LD_LIBRARY_PATH", common::simgpu_lib_dir())],
        &["--backend", "real"],
        extra,
    )
}

/// 300 misbehaving clients (100 silent, 100 trickling a request head byte by byte, 100
/// kept-alive and idle), each reconnecting when the server closes it: every scrape from a
/// fresh connection is answered, from when all 300 are connected until the head deadline
/// has closed every silent and every trickling client (100 reconnects of each kind).
#[test]
fn three_hundred_slow_and_idle_clients_never_block_a_scrape() {
    let dir = fresh_box("2x24GiB");
    let serve = Serve::start(dir.path(), &[], &[], &[]);
    let addr = serve.addr;
    let stop = Arc::new(AtomicBool::new(false));
    // Client threads with their 100 connections open, and reconnects per kind.
    let connected = Arc::new(AtomicU32::new(0));
    let reconnects: Arc<[AtomicU32; 3]> = Arc::default();
    let clients: Vec<_> = (0..3)
        .map(|kind| {
            let (stop, connected, reconnects) =
                (stop.clone(), connected.clone(), reconnects.clone());
            std::thread::spawn(move || {
                let open = || {
                    let s = match kind {
                        0 => connect(addr),
                        1 => {
                            let mut s = connect(addr);
                            s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
                            s
                        }
                        _ => kept_alive(addr),
                    };
                    s.set_nonblocking(true).unwrap();
                    s
                };
                let mut conns: Vec<TcpStream> = (0..100).map(|_| open()).collect();
                connected.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    for c in conns.iter_mut() {
                        let write_failed = kind == 1 && c.write_all(b"a").is_err();
                        let gone = write_failed
                            || match c.read(&mut buf) {
                                Ok(0) => true,
                                Ok(_) => false,
                                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                            };
                        if gone {
                            *c = open();
                            reconnects[kind].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        })
        .collect();
    eventually(Duration::from_secs(60), "all 300 clients connected", || {
        connected.load(Ordering::SeqCst) == 3
    });
    let closed = |kind: usize| reconnects[kind].load(Ordering::SeqCst) >= 100;
    let mut scrapes = 0;
    // Scraping all along, the last scrape after the head deadline (5 s) closed them: the
    // hang detector is generous, the order is what is asserted.
    eventually(
        Duration::from_secs(90),
        "the head deadline to close every silent and trickling client",
        || {
            let (status, text) = serve.get("/metrics");
            assert_eq!(status, 200, "scrape {scrapes}: {text}");
            assert_eq!(sample(&text, "vramdoc_collect_success", &[]), Some(1.0));
            scrapes += 1;
            if closed(0) && closed(1) {
                Ok(())
            } else {
                Err(format!("{scrapes} scrapes, reconnects {reconnects:?}"))
            }
        },
    );
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
}

/// A head still arriving at the head deadline (5 s) is closed, and so is a connection that
/// never sends one; beyond 64 idle keep-alives the oldest are closed, the newest kept.
#[test]
fn deadlines_close_slow_heads_and_the_oldest_idle_keep_alives() {
    let (_dir, serve) = serve_fresh("t4");
    let mut silent = connect(serve.addr);
    let mut slow = connect(serve.addr);
    slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(20) {
        if slow.write_all(b"X").is_err() || closed_within(&mut slow, Duration::from_millis(300)) {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickled head is closed (hang detector: 20 s)");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "not before its deadline: {:?}",
        started.elapsed()
    );
    assert!(
        closed_within(&mut silent, Duration::from_secs(10)),
        "a silent connection is closed"
    );

    let mut idle: Vec<TcpStream> = (0..74).map(|_| kept_alive(serve.addr)).collect();
    for (i, s) in idle.iter_mut().enumerate().take(10) {
        assert!(
            closed_within(s, Duration::from_secs(5)),
            "idle keep-alive {i} (among the 10 oldest) is closed"
        );
    }
    let newest = idle.last_mut().unwrap();
    newest
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(newest).0, 200, "the newest idle is kept");
}

/// More connections than the server keeps open (512): the oldest silent ones make room and
/// a scrape is answered.
#[test]
fn past_the_connection_limit_a_scrape_still_gets_through() {
    let (_dir, serve) = serve_fresh("t4");
    let mut crowd: Vec<TcpStream> = (0..600).map(|_| connect(serve.addr)).collect();
    let (status, text) = serve.get("/metrics");
    assert_eq!(status, 200, "{text}");
    assert!(
        closed_within(&mut crowd[0], Duration::from_secs(2)),
        "the oldest silent connection made room"
    );
}

/// HEAD, 405 with Allow, query strings, Content-Type with the format version, malformed
/// requests.
#[test]
fn http_is_strict_and_standard() {
    let (_dir, serve) = serve_fresh("t4");
    let mut s = connect(serve.addr);
    // HEAD then GET on one connection: HEAD's answer has headers only (else the GET's
    // answer would not follow at once).
    s.write_all(b"HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\nGET /metrics?name%5B%5D=x HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let mut chunk = [0u8; 65536];
    while raw.windows(4).filter(|w| w == b"\r\n\r\n").count() < 2 {
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "closed");
        raw.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let head = &text[..text.find("\r\n\r\n").unwrap()];
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(
        text[head.len() + 4..].starts_with("http/1.1 200"),
        "no body after HEAD: {text}"
    );

    for (method, path) in [
        ("POST", "/metrics"),
        ("OPTIONS", "/healthz"),
        ("PUT", "/metrics"),
    ] {
        let (status, head) = http(
            serve.addr,
            &format!("{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"),
        );
        assert_eq!(status, 405, "{method}: {head}");
        assert!(
            head.to_ascii_lowercase().contains("allow: get, head"),
            "{head}"
        );
    }
    for (what, request, want) in [
        (
            "unknown path",
            "GET /metrics/x HTTP/1.1\r\nHost: t\r\n\r\n",
            404,
        ),
        (
            "a header line without colon",
            "GET /metrics HTTP/1.1\r\nnonsense\r\n\r\n",
            400,
        ),
        ("an unknown version", "GET /metrics HTTP/9.9\r\n\r\n", 400),
        (
            "a space in the target",
            "GET /met rics HTTP/1.1\r\n\r\n",
            400,
        ),
        (
            "HTTP/1.1 without Host",
            "GET /metrics HTTP/1.1\r\n\r\n",
            400,
        ),
        (
            "two Host headers",
            "GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            400,
        ),
        (
            "HTTP/1.0 needs no Host",
            "GET /metrics HTTP/1.0\r\n\r\n",
            200,
        ),
    ] {
        let (status, body) = http(serve.addr, request);
        assert_eq!(status, want, "{what}: {body}");
    }
}

/// `/healthz` fails while NVML's session is lost (every call `NVML_ERROR_UNKNOWN`, new
/// inits failing) and the exporter recovers by itself, without a restart, once NVML works.
#[test]
fn healthz_fails_while_the_nvml_session_is_lost_and_recovers_after_clear() {
    let dir = fresh_box("2x24GiB");
    let mut serve = serve_nvml(dir.path(), &[]);
    assert_eq!(serve.get("/healthz").0, 200);
    fault(dir.path(), &["--nvml-session-lost"]);
    let why = eventually(SECS_10, "/healthz to fail", || {
        let (status, body) = serve.get("/healthz");
        (status == 503).then_some(body)
    });
    assert!(why.contains("collections failed"), "{why}");
    let text = serve.metrics();
    assert_eq!(sample(&text, "vramdoc_collect_success", &[]), Some(0.0));
    fault(dir.path(), &["--clear"]);
    eventually(SECS_10, "/healthz to recover", || {
        serve.get("/healthz").0 == 200
    });
    let text = serve.metrics();
    assert_eq!(sample(&text, "vramdoc_collect_success", &[]), Some(1.0));
    assert!(sample(&text, "vramdoc_gpu_memory_capacity_bytes", &[("gpu", "1")]).is_some());
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "the same process, never restarted"
    );
}

/// NVML that cannot be initialised yet: serve starts anyway, exports
/// `vramdoc_collect_success 0`, and reads the GPUs once NVML works.
#[test]
fn serve_starts_before_nvml_works() {
    let dir = fresh_box("t4");
    fault(dir.path(), &["--nvml-session-lost"]);
    let serve = serve_nvml(dir.path(), &[]);
    let text = serve.metrics();
    assert_eq!(
        sample(&text, "vramdoc_collect_success", &[]),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "vramdoc_build_info", &[("backend", "nvml")]),
        Some(1.0)
    );
    eventually(SECS_10, "/healthz to fail", || {
        serve.get("/healthz").0 == 503
    });
    fault(dir.path(), &["--clear"]);
    eventually(SECS_10, "a successful collection", || {
        sample(&serve.metrics(), "vramdoc_collect_success", &[]) == Some(1.0)
    });
    assert_eq!(serve.get("/healthz").0, 200);
}

/// `--release-between`: NVML is shut down after every collection (the simulated library
/// counts `nvmlShutdown` calls of the exporter's process), and collections succeed.
#[test]
fn release_between_shuts_nvml_down_after_every_collection() {
    let dir = fresh_box("t4");
    let serve = serve_nvml(dir.path(), &["--release-between"]);
    let pid = serve.child.id() as u64;
    let shutdowns = || {
        let o = on_box(dir.path())
            .args(["sim", "status", "--calls", "--json"])
            .output()
            .unwrap();
        let v = common::json_ok(&o, "sim status --calls");
        v["clients"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["pid"] == pid))
            .and_then(|c| c["calls"]["nvmlShutdown"].as_u64())
            .unwrap_or(0)
    };
    eventually(SECS_10, "five NVML sessions opened and shut down", || {
        shutdowns() >= 5
    });
    let text = serve.metrics();
    assert_eq!(sample(&text, "vramdoc_collect_success", &[]), Some(1.0));
}

/// The node name labels every series: `--node-name`, else NODE_NAME (the DaemonSet's
/// downward API).
#[test]
fn the_node_name_labels_every_series() {
    let dir = fresh_box("t4");
    let serve = Serve::start(
        dir.path(),
        &[("NODE_NAME", Path::new("gpu-node-7"))],
        &[],
        &[],
    );
    let text = serve.metrics();
    let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(series.len() > 5);
    for l in &series {
        assert!(l.contains("hostname=\"gpu-node-7\""), "{l}");
    }
    // The GPU's UUID also under dcgm-exporter's label name, with the same `GPU-…` value.
    let info = series
        .iter()
        .find(|l| l.starts_with("vramdoc_gpu_info{"))
        .expect("vramdoc_gpu_info");
    let label = |name: &str| {
        let start = info.find(&format!("{name}=\"")).expect(name) + name.len() + 2;
        info[start..].split('"').next().unwrap().to_string()
    };
    assert!(label("UUID").starts_with("GPU-"), "{info}");
    assert_eq!(label("UUID"), label(",uuid"), "{info}");
    drop(serve);
    let serve = Serve::start(
        dir.path(),
        &[("NODE_NAME", Path::new("ignored"))],
        &[],
        &["--node-name", "n1"],
    );
    let text = serve.metrics();
    assert_eq!(
        sample(&text, "vramdoc_collect_success", &[("hostname", "n1")]),
        Some(1.0),
        "{text}"
    );
}

/// SIGTERM while the first collection is stuck in the driver (`--nvml-hang`): exit 0 at
/// once, not 143.
#[test]
fn sigterm_during_the_first_collection_exits_0() {
    let dir = fresh_box("t4");
    fault(dir.path(), &["--nvml-hang", "--hang-limit", "60s"]);
    let child = on_box(dir.path())
        .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
        .args(["--backend", "real", "serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut child = common::KillOnDrop(child);
    // serve installs its signal handler before it starts collecting: its nvmlInit, counted
    // by the simulated library as the call begins and stuck in the hang, says both happened.
    let pid = child.0.id() as u64;
    eventually(SECS_10, "serve's first nvmlInit, stuck in the hang", || {
        let o = on_box(dir.path())
            .args(["sim", "status", "--calls", "--json"])
            .output()
            .unwrap();
        let v = common::json_ok(&o, "sim status --calls");
        let inits = v["clients"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["pid"] == pid))
            .and_then(|c| c["calls"].as_object())
            .map(|calls| {
                calls
                    .iter()
                    .filter(|(name, _)| name.starts_with("nvmlInit"))
                    .filter_map(|(_, n)| n.as_u64())
                    .sum::<u64>()
            })
            .unwrap_or(0);
        inits >= 1
    });
    assert!(child.0.try_wait().unwrap().is_none(), "still collecting");
    // SAFETY: kill(2) on our own child's PID.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let status = eventually(SECS_10, "serve to exit after SIGTERM", || {
        child.0.try_wait().ok().flatten()
    });
    fault(dir.path(), &["--clear"]);
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// The preflight gauges: a GPU a process holds memory on would be refused
/// (`foreign-process`), a clean one accepted; the exposition passes `promtool check
/// metrics` with them and the `hostname` label.
#[test]
fn preflight_gauges_refuse_a_busy_gpu_and_accept_a_clean_one() {
    common::skip::require!("prometheus", common::exporter::prometheus_tools());
    let dir = fresh_box("2x24GiB");
    let _h = common::hold::Holder::start(dir.path(), &[], &["--device", "1", "--size", "1GiB"]);
    let serve = Serve::start(dir.path(), &[], &[], &[]);
    let text = eventually(SECS_10, "the holder's memory in a collection", || {
        let text = serve.metrics();
        (sample(&text, "vramdoc_preflight_ok", &[("gpu", "1")]) == Some(0.0)).then_some(text)
    });
    assert_eq!(
        sample(&text, "vramdoc_preflight_ok", &[("gpu", "0")]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "vramdoc_preflight_problems",
            &[("gpu", "1"), ("kind", "foreign-process")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "vramdoc_preflight_problems",
            &[("gpu", "0"), ("kind", "dead-process-memory")]
        ),
        Some(0.0),
        "{text}"
    );
    let (ok, out) = common::exporter::promtool_check_metrics(&text);
    assert!(ok, "promtool check metrics: {out}\n{text}");
}

/// `scan --prom` when the machine cannot be read: the file is replaced by a failed
/// collection (`vramdoc_collect_success 0`, so the textfile collector does not keep
/// exporting the last good one) and the exit code says so; a directory that does not exist
/// is refused before the scan.
#[test]
fn scan_prom_replaces_the_file_when_a_read_fails_and_checks_its_directory_first() {
    let dir = fresh_box("t4");
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("vramdoc.prom");
    let scan = || {
        on_box(dir.path())
            .env("LD_LIBRARY_PATH", common::simgpu_lib_dir())
            .args(["--backend", "real", "scan", "--prom"])
            .arg(&file)
            .output()
            .unwrap()
    };
    common::assert_ok(&scan(), "scan --prom");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(sample(&text, "vramdoc_collect_success", &[]), Some(1.0));
    use std::os::unix::fs::PermissionsExt;
    let mode = |f: &Path| std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o644, "readable by node_exporter's user");
    fault(dir.path(), &["--nvml-session-lost"]);
    let o = scan();
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        sample(&text, "vramdoc_collect_success", &[]),
        Some(0.0),
        "{text}"
    );
    assert!(sample(&text, "vramdoc_gpu_memory_used_bytes", &[]).is_none());
    fault(dir.path(), &["--clear"]);

    let o = on_box(dir.path())
        .args(["scan", "--prom"])
        .arg(out.path().join("missing/vramdoc.prom"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a directory"));
}
