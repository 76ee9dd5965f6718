//! The Prometheus exporter behind `vramdoc serve`: a collector that reads the machine on its
//! own cadence (the same inventory and diagnosis as `vramdoc scan`) and keeps the rendered
//! exposition, and a small HTTP/1.1 server that answers `GET /metrics` and `GET /healthz`
//! from that copy, so any number of scrapers never multiply the driver's process-list cost
//! and a slow client never blocks a collection.
//!
//! The server is std-only on purpose: one short-lived thread per connection, at most
//! [`ServerConfig::max_connections`] at once (the next one gets `503` and is closed), request
//! heads of at most [`ServerConfig::max_head_bytes`], an absolute deadline to send each head,
//! no request bodies. (tiny_http 0.12 has neither a connection limit nor read timeouts: an
//! idle client holds one of its threads forever.)

use crate::diagnose::Thresholds;
use crate::gpu::Monitor;
use crate::inventory::{self, PidNamespace};
use crate::report::prom::{self, Collection, PromOptions};
use crate::report::ScanResult;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9835";

/// The last exposition, shared between the collector and the server.
#[derive(Debug, Default)]
pub struct Latest(Mutex<Arc<Vec<u8>>>);

impl Latest {
    pub fn new(body: Vec<u8>) -> Latest {
        Latest(Mutex::new(Arc::new(body)))
    }
    /// The current exposition (a cheap shared copy).
    pub fn get(&self) -> Arc<Vec<u8>> {
        match self.0.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
    pub fn set(&self, body: Vec<u8>) {
        let body = Arc::new(body);
        match self.0.lock() {
            Ok(mut g) => *g = body,
            Err(poisoned) => *poisoned.into_inner() = body,
        }
    }
}

/// What one collection needs besides the monitor.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    pub sim_spec: Option<String>,
    pub pid_namespace: PidNamespace,
    pub thresholds: Thresholds,
    pub options: PromOptions,
}

/// The result of one collection: the scan (if any), and the error of a failed one.
#[derive(Debug, Clone)]
pub struct Collected {
    pub scan: Option<ScanResult>,
    pub error: Option<String>,
}

/// Read the machine once through `monitor` and diagnose it, as `vramdoc scan` does. One bad
/// GPU does not fail a collection: the monitor reports it with a status (lost, no
/// permission), which the diagnosis turns into a finding while the other GPUs keep their
/// metrics. Any error of the whole read is a failed collection without findings.
pub fn collect(monitor: &dyn Monitor, cfg: &CollectConfig) -> Collected {
    match inventory::collect(monitor, cfg.sim_spec.clone(), cfg.pid_namespace.clone()) {
        Ok(inv) => Collected {
            scan: crate::commands::scan::build_report(&inv, &cfg.thresholds).scan,
            error: None,
        },
        Err(e) => Collected {
            scan: None,
            error: Some(e.to_string()),
        },
    }
}

/// One collection, rendered: returns the exposition and the collection's error, if any.
pub fn collect_exposition(monitor: &dyn Monitor, cfg: &CollectConfig) -> (Vec<u8>, Option<String>) {
    let start = Instant::now();
    let c = collect(monitor, cfg);
    let meta = Collection {
        success: c.error.is_none(),
        duration_seconds: start.elapsed().as_secs_f64(),
        timestamp_seconds: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
        backend: monitor.backend().to_string(),
    };
    match prom::render(c.scan.as_ref(), &meta, cfg.options) {
        Ok(text) => (text.into_bytes(), c.error),
        // Rendering fails only on an inconsistent metric definition; say so in the body.
        Err(e) => (
            format!("# {e}\nvramdoc_collect_success 0\n").into_bytes(),
            Some(e.to_string()),
        ),
    }
}

/// The collector thread: collects every `interval` into `latest` until stopped.
pub struct Collector {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<()>,
}

impl Collector {
    /// Start collecting every `interval` (the first collection after one interval: run
    /// [`collect_exposition`] once before, so the first scrape has data, and pass its error
    /// as `first_error`). `on_change` is told when the collection error changes: the new
    /// error, or `None` when collections succeed again.
    pub fn start(
        monitor: Box<dyn Monitor>,
        cfg: CollectConfig,
        interval: Duration,
        latest: Arc<Latest>,
        first_error: Option<String>,
        on_change: impl Fn(Option<&str>) + Send + 'static,
    ) -> std::io::Result<Collector> {
        let (stop, rx) = mpsc::channel::<()>();
        let mut last = first_error;
        let handle = std::thread::Builder::new()
            .name("vramdoc-collect".into())
            .spawn(move || loop {
                match rx.recv_timeout(interval) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let (body, err) = collect_exposition(monitor.as_ref(), &cfg);
                latest.set(body);
                if err != last {
                    on_change(err.as_deref());
                    last = err;
                }
            })?;
        Ok(Collector { stop, handle })
    }

    /// Stop after the collection in progress, if any.
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.handle.join();
    }
}

/// Limits of the HTTP server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Connections served at once; one more gets `503 Service Unavailable` and is closed.
    pub max_connections: usize,
    /// Longest request head (request line and headers); longer gets `431`.
    pub max_head_bytes: usize,
    /// Time a client has to send a complete request head (and, on a kept-alive connection,
    /// to start the next one).
    pub head_timeout: Duration,
    /// Time to write a response.
    pub write_timeout: Duration,
    /// Requests served on one kept-alive connection before it is closed.
    pub max_requests_per_connection: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 256,
            max_head_bytes: 8 * 1024,
            head_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            max_requests_per_connection: 1000,
        }
    }
}

/// A running HTTP server.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl Server {
    /// Bind `addr` and serve `latest` until [`Server::shutdown`].
    pub fn start(
        addr: SocketAddr,
        latest: Arc<Latest>,
        cfg: ServerConfig,
    ) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let active = Arc::new(AtomicUsize::new(0));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("vramdoc-accept".into())
            .spawn(move || accept_loop(listener, latest, cfg, stop2, active))?;
        Ok(Server { addr, stop, handle })
    }

    /// The address actually bound (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting; connections in progress finish on their own deadlines.
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        let _ = self.handle.join();
    }
}

/// Decrements the active-connection count when a connection thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(
    listener: TcpListener,
    latest: Arc<Latest>,
    cfg: ServerConfig,
    stop: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut stream) = stream else {
            // EMFILE and friends: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if active.fetch_add(1, Ordering::SeqCst) >= cfg.max_connections {
            let slot = Slot(active.clone());
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = respond(
                &mut stream,
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                b"too many connections\n",
                true,
                &[],
            );
            drop(slot);
            continue;
        }
        let slot = Slot(active.clone());
        let latest = latest.clone();
        let cfg2 = cfg.clone();
        let spawned = std::thread::Builder::new()
            .name("vramdoc-http".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                let _slot = slot;
                serve_connection(stream, &latest, &cfg2);
            });
        // On failure the closure (and with it the slot and the stream) is dropped.
        drop(spawned);
    }
}

/// What the server answers for one request: status line, content type, body, extra headers.
pub struct Response {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: Arc<Vec<u8>>,
    pub allow: bool,
}

/// Route one request (pure: method and target in, response out).
pub fn route(method: &str, target: &str, latest: &Latest) -> Response {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let text = |status, body: &str| Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body: Arc::new(body.as_bytes().to_vec()),
        allow: false,
    };
    match path {
        "/metrics" | "/healthz" if method != "GET" => Response {
            allow: true,
            ..text("405 Method Not Allowed", "only GET\n")
        },
        "/metrics" => Response {
            status: "200 OK",
            content_type: prom::CONTENT_TYPE,
            body: latest.get(),
            allow: false,
        },
        "/healthz" => text("200 OK", "ok\n"),
        _ => text("404 Not Found", "not found: try /metrics\n"),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    close: bool,
    extra: &[&str],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in extra {
        head.push_str(h);
        head.push_str("\r\n");
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    // One write for small answers, so a scrape is one segment where it fits.
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body);
    stream.write_all(&out)?;
    stream.flush()
}

enum Head {
    /// A complete head of `len` bytes at the start of the buffer.
    Complete(usize),
    /// The client closed or went quiet before starting a request.
    Gone,
    /// Started but not finished in time.
    Timeout,
    TooLarge,
}

fn find_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>, cfg: &ServerConfig) -> Head {
    let deadline = Instant::now() + cfg.head_timeout;
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = find_end(buf) {
            return if end > cfg.max_head_bytes {
                Head::TooLarge
            } else {
                Head::Complete(end)
            };
        }
        if buf.len() > cfg.max_head_bytes {
            return Head::TooLarge;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return if buf.is_empty() {
                Head::Gone
            } else {
                Head::Timeout
            };
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Head::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) if buf.is_empty() => return Head::Gone,
            Err(_) => return Head::Timeout,
        }
    }
}

fn serve_connection(mut stream: TcpStream, latest: &Latest, cfg: &ServerConfig) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(cfg.write_timeout));
    let plain = "text/plain; charset=utf-8";
    let mut buf = Vec::with_capacity(1024);
    for served in 1..=cfg.max_requests_per_connection {
        let end = match read_head(&mut stream, &mut buf, cfg) {
            Head::Complete(end) => end,
            Head::Gone => return,
            Head::Timeout => {
                let _ = respond(&mut stream, "408 Request Timeout", plain, b"", true, &[]);
                return;
            }
            Head::TooLarge => {
                let _ = respond(
                    &mut stream,
                    "431 Request Header Fields Too Large",
                    plain,
                    b"request head too large\n",
                    true,
                    &[],
                );
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let mut lines = head.split("\r\n");
        let mut parts = lines.next().unwrap_or("").split(' ');
        let (Some(method), Some(target), Some(version), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            let _ = respond(
                &mut stream,
                "400 Bad Request",
                plain,
                b"bad request line\n",
                true,
                &[],
            );
            return;
        };
        if !version.starts_with("HTTP/1.") {
            let _ = respond(
                &mut stream,
                "505 HTTP Version Not Supported",
                plain,
                b"",
                true,
                &[],
            );
            return;
        }
        let mut close = version == "HTTP/1.0" || served == cfg.max_requests_per_connection;
        let mut body = false;
        for line in lines.filter(|l| !l.is_empty()) {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "connection" if value.eq_ignore_ascii_case("close") => close = true,
                "connection" if value.eq_ignore_ascii_case("keep-alive") => close = false,
                "content-length" => body |= value != "0",
                "transfer-encoding" => body = true,
                _ => {}
            }
        }
        if body {
            // Only GETs are served: a body is never read, so the connection cannot go on.
            let _ = respond(
                &mut stream,
                "413 Content Too Large",
                plain,
                b"request bodies are not accepted\n",
                true,
                &[],
            );
            return;
        }
        let r = route(method, target, latest);
        let extra: &[&str] = if r.allow { &["Allow: GET"] } else { &[] };
        if respond(&mut stream, r.status, r.content_type, &r.body, close, extra).is_err() || close {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let latest = Latest::new(b"m 1\n".to_vec());
        let r = route("GET", "/metrics", &latest);
        assert_eq!(r.status, "200 OK");
        assert_eq!(r.body.as_slice(), b"m 1\n");
        assert_eq!(route("GET", "/metrics?x=1", &latest).status, "200 OK");
        assert_eq!(route("GET", "/healthz", &latest).status, "200 OK");
        let post = route("POST", "/metrics", &latest);
        assert_eq!(post.status, "405 Method Not Allowed");
        assert!(post.allow);
        assert_eq!(
            route("HEAD", "/healthz", &latest).status,
            "405 Method Not Allowed"
        );
        assert_eq!(route("GET", "/", &latest).status, "404 Not Found");
        assert_eq!(route("GET", "/metricsx", &latest).status, "404 Not Found");
    }

    #[test]
    fn a_lost_gpu_is_a_finding_and_the_others_keep_their_metrics() {
        use crate::backend::sim::SimMonitor;
        use vramdoc_sim::{Faults, InitOptions, SimBox};
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "3x16GiB", &InitOptions::default()).unwrap();
        let monitor = SimMonitor::new(sim.clone());
        let cfg = CollectConfig {
            sim_spec: None,
            pid_namespace: PidNamespace {
                host: true,
                reason: "test".into(),
            },
            thresholds: Thresholds::default(),
            options: PromOptions::default(),
        };
        let ok = collect(&monitor, &cfg);
        assert!(ok.error.is_none(), "{:?}", ok.error);
        assert_eq!(ok.scan.map(|s| s.devices.len()), Some(3));
        sim.set_faults(&Faults {
            lost_devices: vec![1],
            ..Faults::default()
        })
        .unwrap();
        // The monitor answers for every device; the lost one carries its status. The
        // collection itself succeeds: the lost GPU is a finding, the others keep their data.
        let later = collect(&monitor, &cfg);
        assert!(later.error.is_none(), "{:?}", later.error);
        let scan = later.scan.unwrap();
        let idx: Vec<u32> = scan.devices.iter().map(|d| d.index).collect();
        assert_eq!(idx, vec![0, 1, 2]);
        assert_eq!(scan.devices[1].status, crate::gpu::DeviceStatus::Lost);
        let headroom: Vec<u32> = scan.headroom.iter().map(|h| h.device).collect();
        assert_eq!(headroom, vec![0, 2]);
        assert_eq!(scan.findings[0].id, "device-lost");
        assert_eq!(scan.findings[0].devices, vec![1]);
    }

    #[test]
    fn head_end() {
        assert_eq!(find_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(find_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
