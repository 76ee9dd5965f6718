//! The HTTP/1.1 transport of `vramdoc serve`: answers `GET`/`HEAD` on `/metrics` and
//! `/healthz` from [`Latest`], nothing else. Requests are parsed and answered by `hyper` (1.x)
//! on a one-thread `tokio` runtime of its own; this module owns what hyper leaves to its
//! user: per-connection deadlines and who may hold a connection slot.
//!
//! Every connection is in one phase, each with its deadline ([`ServerConfig`]):
//! - *head*: a request is awaited or arriving; it must be complete within `head_timeout` of
//!   the connection's start or of its first byte after an idle phase (slowloris);
//! - *busy*: a request is answered; the answer must be handed over within `write_timeout`;
//! - *idle*: a kept-alive connection between requests, closed after `idle_timeout`.
//!
//! At most `max_idle` connections are idle at once (when one more goes idle, the oldest idle
//! one is closed) and at most `max_connections` are open: a new connection past that closes
//! the oldest idle one, else the oldest one still sending its head, so slow and idle clients
//! never hold a slot a scrape needs. Only when every slot is busy answering does a new
//! connection get `503`.
//!
//! With a web configuration file ([`super::webconfig`], `--web.config.file`), read again on
//! each connection when it changed: TLS through rustls, the handshake inside the head phase's
//! deadline; with `basic_auth_users`, every request without good credentials gets `401`
//! (with `WWW-Authenticate`) and nothing else, the bcrypt check off the runtime's thread.

use super::webconfig::Loaded;
use super::Latest;
use crate::report::prom;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// Headers one request may have (more: `431`, as for a head that is too long).
const MAX_HEADERS: usize = 64;

/// Limits of the HTTP server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Connections open at once (every phase).
    pub max_connections: usize,
    /// Kept-alive connections idle at once; the oldest beyond this is closed.
    pub max_idle: usize,
    /// Longest request head (request line and headers); longer gets `431`. At least 8 KiB
    /// (hyper's smallest buffer).
    pub max_head_bytes: usize,
    /// Time a client has to send a complete request head, from the connection's start or
    /// from the first byte of a request on a kept-alive connection.
    pub head_timeout: Duration,
    /// Time a kept-alive connection may sit between requests.
    pub idle_timeout: Duration,
    /// Time to hand over an answer.
    pub write_timeout: Duration,
    /// TLS and basic authentication (`--web.config.file`); `None`: plain HTTP, open.
    pub web: Option<Arc<super::webconfig::WebConfig>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 512,
            max_idle: 64,
            max_head_bytes: 8 * 1024,
            head_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            web: None,
        }
    }
}

impl ServerConfig {
    /// These limits with `web` (`--web.config.file`).
    pub fn with_web(self, web: Option<Arc<super::webconfig::WebConfig>>) -> ServerConfig {
        ServerConfig { web, ..self }
    }
}

/// A running HTTP server.
pub struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    handle: JoinHandle<()>,
}

impl Server {
    /// Bind `addr` and serve `latest` until [`Server::shutdown`].
    pub fn start(
        addr: SocketAddr,
        latest: Arc<Latest>,
        cfg: ServerConfig,
    ) -> std::io::Result<Server> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let handle = std::thread::Builder::new()
            .name("vramdoc-http".into())
            .spawn(move || {
                rt.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => accept_loop(l, latest, cfg, stopped).await,
                        Err(e) => crate::term::eprint_line(&format!(
                            "vramdoc serve: cannot serve HTTP: {e}"
                        )),
                    }
                });
                // Dropping the runtime drops every connection still open.
            })?;
        Ok(Server { addr, stop, handle })
    }

    /// The address actually bound (port 0 resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting and close every connection.
    pub fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.handle.join();
    }
}

/// The phase of one connection (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head,
    Busy,
    Idle,
}

/// One open connection, as the registry and its own task see it.
struct Conn {
    id: u64,
    /// The phase and when it began.
    phase: Mutex<(Phase, Instant)>,
    /// Told when the phase changes (the deadline moves).
    changed: Notify,
    /// Told when the connection is to be closed to make room.
    evict: Notify,
    registry: Arc<Registry>,
}

impl Conn {
    fn phase(&self) -> (Phase, Instant) {
        *lock(&self.phase)
    }

    fn set(&self, phase: Phase) {
        {
            let mut p = lock(&self.phase);
            if p.0 == phase {
                return;
            }
            *p = (phase, Instant::now());
        }
        self.changed.notify_one();
        if phase == Phase::Idle {
            self.registry.trim_idle();
        }
    }

    fn deadline(&self, cfg: &ServerConfig) -> Instant {
        let (phase, since) = self.phase();
        since
            + match phase {
                Phase::Head => cfg.head_timeout,
                Phase::Busy => cfg.write_timeout,
                Phase::Idle => cfg.idle_timeout,
            }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The open connections, oldest first, and the limits that apply to them.
struct Registry {
    conns: Mutex<Vec<Arc<Conn>>>,
    max_connections: usize,
    max_idle: usize,
}

impl Registry {
    /// Admit a new connection, making room by closing the oldest idle or head-phase one;
    /// `None` when every slot is busy answering.
    fn admit(self: &Arc<Self>, id: u64) -> Option<Arc<Conn>> {
        let mut conns = lock(&self.conns);
        if conns.len() >= self.max_connections {
            let victim = oldest(&conns, Phase::Idle).or_else(|| oldest(&conns, Phase::Head))?;
            let gone = conns.remove(victim);
            gone.evict.notify_one();
        }
        let conn = Arc::new(Conn {
            id,
            phase: Mutex::new((Phase::Head, Instant::now())),
            changed: Notify::new(),
            evict: Notify::new(),
            registry: self.clone(),
        });
        conns.push(conn.clone());
        Some(conn)
    }

    /// Close the oldest idle connections beyond the idle budget.
    fn trim_idle(&self) {
        let mut conns = lock(&self.conns);
        while conns.iter().filter(|c| c.phase().0 == Phase::Idle).count() > self.max_idle {
            let Some(victim) = oldest(&conns, Phase::Idle) else {
                return;
            };
            let gone = conns.remove(victim);
            gone.evict.notify_one();
        }
    }

    fn remove(&self, id: u64) {
        lock(&self.conns).retain(|c| c.id != id);
    }
}

/// The index of the connection longest in `phase`.
fn oldest(conns: &[Arc<Conn>], phase: Phase) -> Option<usize> {
    conns
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let (p, since) = c.phase();
            (p == phase).then_some((since, i))
        })
        .min()
        .map(|(_, i)| i)
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    latest: Arc<Latest>,
    cfg: ServerConfig,
    mut stop: oneshot::Receiver<()>,
) {
    let registry = Arc::new(Registry {
        conns: Mutex::new(Vec::new()),
        max_connections: cfg.max_connections.max(1),
        max_idle: cfg.max_idle,
    });
    let cfg = Arc::new(cfg);
    let mut next_id = 0u64;
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // EMFILE and friends: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        next_id += 1;
        let _ = stream.set_nodelay(true);
        // The web configuration as it is now (read again if it changed); while it does
        // not read, every connection is closed unanswered: never served open by mistake.
        let web = match cfg.web.as_ref().map(|w| w.current()).transpose() {
            Ok(web) => web,
            Err(_) => continue,
        };
        match registry.admit(next_id) {
            Some(conn) => {
                tokio::spawn(serve_connection(
                    stream,
                    conn,
                    latest.clone(),
                    cfg.clone(),
                    web,
                ));
            }
            None => {
                tokio::spawn(refuse(stream));
            }
        }
    }
}

/// Every slot is busy answering: say so and close.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = "too many connections\n";
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: {PLAIN}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_millis(500),
        stream.write_all(answer.as_bytes()),
    )
    .await;
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    conn: Arc<Conn>,
    latest: Arc<Latest>,
    cfg: Arc<ServerConfig>,
    web: Option<Arc<Loaded>>,
) {
    let inner = match web.as_ref().and_then(|w| w.tls.clone()) {
        None => Stream::Plain(stream),
        Some(tls) => {
            // The handshake is part of the head phase: within its deadline.
            let accept = tokio_rustls::TlsAcceptor::from(tls).accept(stream);
            match tokio::time::timeout_at(conn.deadline(&cfg), accept).await {
                Ok(Ok(s)) => Stream::Tls(Box::new(s)),
                _ => {
                    conn.registry.remove(conn.id);
                    return;
                }
            }
        }
    };
    let io = TokioIo::new(Tracked {
        inner,
        conn: conn.clone(),
    });
    let svc_conn = conn.clone();
    let auth = web.filter(|w| w.needs_auth());
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        svc_conn.set(Phase::Busy);
        let (latest, conn, auth) = (latest.clone(), svc_conn.clone(), auth.clone());
        async move {
            if let Some(auth) = auth {
                let header = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .map(|v| v.as_bytes().to_vec());
                let admitted = tokio::task::spawn_blocking(move || auth.admits(header.as_deref()))
                    .await
                    .unwrap_or(false);
                if !admitted {
                    return Ok::<_, Infallible>(unauthorized(conn));
                }
            }
            Ok::<_, Infallible>(answer(&req, &latest, conn))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Deadlines are this module's (the phases); hyper's own would also cut idle
        // keep-alives at the head deadline.
        .header_read_timeout(None)
        .max_buf_size(cfg.max_head_bytes.max(8192))
        .max_headers(MAX_HEADERS)
        // A client that shuts down its write half after sending its request (`nc -N`,
        // probes) still gets its answer: hyper's default closes on that EOF (issue 29).
        .half_close(true);
    let served = builder.serve_connection(io, service);
    tokio::pin!(served);
    loop {
        let deadline = conn.deadline(&cfg);
        tokio::select! {
            _ = &mut served => break,
            _ = conn.evict.notified() => break,
            _ = conn.changed.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {
                if conn.deadline(&cfg) <= Instant::now() {
                    break;
                }
            }
        }
    }
    conn.registry.remove(conn.id);
}

/// `401`, and nothing of the resource (RFC 9110 §11.6.1: with a challenge).
fn unauthorized(conn: Arc<Conn>) -> hyper::Response<Answer> {
    let body = b"unauthorized\n";
    let mut res = hyper::Response::new(Answer {
        body: Full::new(Bytes::from_static(body)),
        conn,
    });
    *res.status_mut() = StatusCode::UNAUTHORIZED;
    let h = res.headers_mut();
    h.insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Basic realm=\"vramdoc\", charset=\"UTF-8\""),
    );
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(PLAIN),
    );
    h.insert(hyper::header::CONTENT_LENGTH, body.len().into());
    res
}

/// A connection's byte stream: plain TCP, or TLS over it.
enum Stream {
    Plain(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>),
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}

/// The connection's socket, telling the connection when a kept-alive client starts its
/// next request (its head deadline starts then).
struct Tracked {
    inner: Stream,
    conn: Arc<Conn>,
}

impl tokio::io::AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && self.conn.phase().0 == Phase::Idle
        {
            // Bytes arrived on an idle connection: a request is under way.
            self.conn.set(Phase::Head);
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
}

/// An answer's body; when hyper has taken all of it (and drops it) the connection is idle.
struct Answer {
    body: Full<Bytes>,
    conn: Arc<Conn>,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.conn.set(Phase::Idle);
    }
}

const PLAIN: &str = "text/plain; charset=utf-8";

/// What the server answers for one request: status, content type, body, and whether an
/// `Allow` header goes with it.
pub struct Response {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: Arc<Vec<u8>>,
    pub allow: bool,
}

/// The methods the two resources allow.
pub const ALLOW: &str = "GET, HEAD";

/// Route one request (pure: method and target in, response out). The query string is
/// ignored (`/metrics?x=1` is `/metrics`).
pub fn route(method: &Method, target: &str, latest: &Latest) -> Response {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let text = |status, body: String| Response {
        status,
        content_type: PLAIN,
        body: Arc::new(body.into_bytes()),
        allow: false,
    };
    let readable = method == Method::GET || method == Method::HEAD;
    match path {
        "/metrics" | "/healthz" | "/incidents" if !readable => Response {
            allow: true,
            ..text(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("allowed: {ALLOW}\n"),
            )
        },
        "/metrics" => Response {
            status: StatusCode::OK,
            content_type: prom::CONTENT_TYPE,
            body: latest.get(),
            allow: false,
        },
        "/healthz" => match latest.health() {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        "/incidents" => match latest.incidents() {
            Some(body) => Response {
                status: StatusCode::OK,
                content_type: "application/json",
                body,
                allow: false,
            },
            None => text(
                StatusCode::NOT_FOUND,
                "incidents are off: start vramdoc serve with --incidents DIR\n".into(),
            ),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics or /healthz\n".into(),
        ),
    }
}

/// The hyper response for one request.
fn answer(req: &Request<Incoming>, latest: &Latest, conn: Arc<Conn>) -> hyper::Response<Answer> {
    let announced_body = req.body().size_hint().lower() > 0
        || req.body().size_hint().upper() != Some(0)
        || req.headers().contains_key(hyper::header::TRANSFER_ENCODING);
    // RFC 9112 §3.2: an HTTP/1.1 request without exactly one Host header gets 400.
    let hosts = req.headers().get_all(hyper::header::HOST).iter().count();
    let r = if req.version() == hyper::Version::HTTP_11 && hosts != 1 {
        Response {
            status: StatusCode::BAD_REQUEST,
            content_type: PLAIN,
            body: Arc::new(b"an HTTP/1.1 request needs exactly one Host header\n".to_vec()),
            allow: false,
        }
    } else if announced_body && (req.method() == Method::GET || req.method() == Method::HEAD) {
        Response {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            content_type: PLAIN,
            body: Arc::new(b"request bodies are not accepted\n".to_vec()),
            allow: false,
        }
    } else {
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
        route(req.method(), target, latest)
    };
    let len = r.body.len();
    let mut res = hyper::Response::new(Answer {
        body: Full::new(Bytes::from(r.body.as_ref().clone())),
        conn,
    });
    *res.status_mut() = r.status;
    let h = res.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(r.content_type),
    );
    h.insert(hyper::header::CONTENT_LENGTH, len.into());
    if r.allow {
        h.insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static(ALLOW),
        );
    }
    if announced_body {
        // The body is never read: the connection cannot carry another request.
        h.insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let latest = Latest::new(b"m 1\n".to_vec());
        let r = route(&Method::GET, "/metrics", &latest);
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body.as_slice(), b"m 1\n");
        assert_eq!(r.content_type, prom::CONTENT_TYPE);
        assert_eq!(
            route(&Method::GET, "/metrics?x=1&y", &latest).status,
            StatusCode::OK
        );
        assert_eq!(
            route(&Method::HEAD, "/metrics", &latest).status,
            StatusCode::OK
        );
        assert_eq!(
            route(&Method::GET, "/healthz", &latest).status,
            StatusCode::OK
        );
        let post = route(&Method::POST, "/metrics", &latest);
        assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
        assert!(post.allow);
        assert_eq!(
            route(&Method::DELETE, "/healthz", &latest).status,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            route(&Method::GET, "/", &latest).status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            route(&Method::GET, "/metricsx", &latest).status,
            StatusCode::NOT_FOUND
        );
    }
}
