//! The HTTP/1.1 transport of `vramdoc serve`: answers `GET /metrics` and `GET /healthz` from
//! [`Latest`], nothing else. Request heads are parsed by `httparse`; connections are
//! std threads, one short-lived thread each, at most [`ServerConfig::max_connections`] at
//! once (the next one gets `503` and is closed), heads of at most
//! [`ServerConfig::max_head_bytes`] (`431`), an absolute deadline to send each head (`408`),
//! no request bodies (`413`).

use super::Latest;
use crate::report::prom;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Headers one request may have (more: `431`, as for a head that is too long).
const MAX_HEADERS: usize = 64;

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
                PLAIN,
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

const PLAIN: &str = "text/plain; charset=utf-8";

/// What the server answers for one request: status line, content type, body, and whether
/// an `Allow: GET` header goes with it.
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
        content_type: PLAIN,
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

/// One parsed request head: what routing and the connection need of it.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    /// Bytes of the head at the start of the buffer.
    len: usize,
    method: String,
    target: String,
    /// The connection ends after the answer (HTTP/1.0 without keep-alive, or
    /// `Connection: close`).
    close: bool,
    /// The request announces a body (`Content-Length` other than 0, or any
    /// `Transfer-Encoding`).
    body: bool,
}

/// What the bytes received so far are.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Request(Request),
    /// A valid beginning: read more.
    Partial,
    /// Longer than the limit, or too many headers.
    TooLarge,
    /// Not HTTP/1.0 or HTTP/1.1.
    Version,
    /// Not an HTTP request head.
    Bad,
}

/// Parse the request head at the start of `buf` (httparse), within `max_head_bytes`.
fn parse_head(buf: &[u8], max_head_bytes: usize) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > max_head_bytes => return Parsed::TooLarge,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::TooLarge,
        Err(httparse::Error::Version) => return Parsed::Version,
        Err(_) => return Parsed::Bad,
    };
    if len > max_head_bytes {
        return Parsed::TooLarge;
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Bad;
    };
    let mut close = version == 0;
    let mut body = false;
    for h in req.headers.iter() {
        let value = h.value.trim_ascii();
        if h.name.eq_ignore_ascii_case("connection") {
            if value.eq_ignore_ascii_case(b"close") {
                close = true;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                close = false;
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            body |= value != b"0";
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            body = true;
        }
    }
    Parsed::Request(Request {
        len,
        method: method.to_string(),
        target: target.to_string(),
        close,
        body,
    })
}

/// How reading one request head ended.
enum Head {
    Parsed(Parsed),
    /// The client closed or went quiet before starting a request.
    Gone,
    /// Started but not finished in time.
    Timeout,
}

fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>, cfg: &ServerConfig) -> Head {
    let deadline = Instant::now() + cfg.head_timeout;
    let mut chunk = [0u8; 2048];
    loop {
        if !buf.is_empty() {
            match parse_head(buf, cfg.max_head_bytes) {
                Parsed::Partial => {}
                done => return Head::Parsed(done),
            }
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
    let mut buf = Vec::with_capacity(1024);
    for served in 1..=cfg.max_requests_per_connection {
        let fail = |stream: &mut TcpStream, status, body: &[u8]| {
            let _ = respond(stream, status, PLAIN, body, true, &[]);
        };
        let req = match read_head(&mut stream, &mut buf, cfg) {
            Head::Parsed(Parsed::Request(req)) => req,
            Head::Parsed(Parsed::Partial) | Head::Gone => return,
            Head::Timeout => return fail(&mut stream, "408 Request Timeout", b""),
            Head::Parsed(Parsed::TooLarge) => {
                return fail(
                    &mut stream,
                    "431 Request Header Fields Too Large",
                    b"request head too large\n",
                )
            }
            Head::Parsed(Parsed::Version) => {
                return fail(&mut stream, "505 HTTP Version Not Supported", b"")
            }
            Head::Parsed(Parsed::Bad) => {
                return fail(&mut stream, "400 Bad Request", b"bad request line\n")
            }
        };
        buf.drain(..req.len);
        if req.body {
            // Only GETs are served: a body is never read, so the connection cannot go on.
            return fail(
                &mut stream,
                "413 Content Too Large",
                b"request bodies are not accepted\n",
            );
        }
        let close = req.close || served == cfg.max_requests_per_connection;
        let r = route(&req.method, &req.target, latest);
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

    fn request(p: Parsed) -> Request {
        match p {
            Parsed::Request(r) => r,
            other => panic!("not a request: {other:?}"),
        }
    }

    #[test]
    fn heads() {
        let r = request(parse_head(
            b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\nrest",
            8192,
        ));
        assert_eq!(
            (r.len, r.method.as_str(), r.target.as_str()),
            (34, "GET", "/metrics")
        );
        assert!(!r.close && !r.body);
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nHost: t\r\n", 8192),
            Parsed::Partial
        );
        // HTTP/1.0 closes unless kept alive; Connection: close closes HTTP/1.1.
        assert!(request(parse_head(b"GET / HTTP/1.0\r\n\r\n", 8192)).close);
        let keep = parse_head(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 8192);
        assert!(!request(keep).close);
        assert!(
            request(parse_head(
                b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
                8192
            ))
            .close
        );
        // Bodies are announced by a length other than 0 or any transfer coding.
        let len5 = parse_head(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 8192);
        assert!(request(len5).body);
        let len0 = parse_head(b"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 8192);
        assert!(!request(len0).body);
        let chunked = parse_head(
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            8192,
        );
        assert!(request(chunked).body);
    }

    #[test]
    fn bad_heads() {
        assert_eq!(parse_head(b"BREW\r\n\r\n", 8192), Parsed::Bad);
        assert_eq!(parse_head(b"GET / HTTP/2.0\r\n\r\n", 8192), Parsed::Version);
        let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(100));
        assert_eq!(parse_head(long.as_bytes(), 64), Parsed::TooLarge);
        assert_eq!(parse_head(&long.as_bytes()[..80], 64), Parsed::TooLarge);
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("h{i}: v\r\n"))
            .collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse_head(many.as_bytes(), 8192), Parsed::TooLarge);
    }
}
