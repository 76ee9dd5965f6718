//! `vramdoc serve` as its own process for the exporter tests (tests/it/serve.rs,
//! serve_fleet.rs, pods.rs): starting it on a loopback port, HTTP exchanges with it, reading
//! series out of an exposition, and `promtool check metrics` on one.

use super::on_box;
use super::poll::{eventually, SECS_10};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `vramdoc serve` on 127.0.0.1 (port chosen by the kernel), killed on drop.
pub struct Serve {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Serve {
    /// `vramdoc GLOBAL serve --listen 127.0.0.1:0 --interval 200ms EXTRA` on the box `dir`.
    pub fn start(
        dir: &Path,
        extra_env: &[(&str, &Path)],
        global: &[&str],
        extra: &[&str],
    ) -> Serve {
        let mut cmd = on_box(dir);
        cmd.args(global);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        Serve::spawn(cmd, extra)
    }

    /// `CMD serve --listen 127.0.0.1:0 --interval 200ms EXTRA`, once it listens.
    pub fn spawn<S: AsRef<OsStr>>(mut cmd: Command, extra: impl IntoIterator<Item = S>) -> Serve {
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--interval", "200ms"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn vramdoc serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = String::new();
        let addr = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                panic!("serve ended before listening: {seen}");
            };
            seen.push_str(&line);
            seen.push('\n');
            if let Some(rest) = line
                .strip_prefix("vramdoc serve: listening on http://")
                .or_else(|| line.strip_prefix("vramdoc serve: listening on https://"))
            {
                let a = rest.split('/').next().expect("address");
                break a.parse::<SocketAddr>().expect("socket address");
            }
        };
        // Keep draining stderr so the exporter never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Serve { child, addr }
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http(
            self.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"),
        )
    }

    pub fn metrics(&self) -> String {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        body
    }

    /// SIGTERM, then the exit status (bounded wait).
    pub fn terminate(mut self) -> Option<i32> {
        // SAFETY: kill(2) on our own child's PID.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = eventually(SECS_10, "vramdoc serve to exit after SIGTERM", || {
            self.child.try_wait().ok().flatten()
        });
        status.code()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `vramdoc serve` with no extra flag on a fresh simulated box of `spec` (the box lives as
/// long as the returned guard).
pub fn serve_fresh(spec: &str) -> (tempfile::TempDir, Serve) {
    let dir = super::fresh_box(spec);
    let serve = Serve::start(dir.path(), &[], &[], &[]);
    (dir, serve)
}

/// One HTTP exchange on a fresh connection: (status, body).
pub fn http(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).expect("send");
    read_response(&mut s)
}

pub fn read_response(s: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let (head_end, len) = loop {
        let n = s.read(&mut chunk).expect("read response");
        assert!(n > 0, "connection closed without a response");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().expect("length"))
                .expect("content-length");
            break (i + 4, len);
        }
    };
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).expect("read body");
        assert!(n > 0, "short body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status = head[9..12].parse().expect("status code");
    let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).to_string();
    (
        status,
        format!("{body}{}", if status == 405 { head } else { String::new() }),
    )
}

/// The value of the one series of `name` whose labels include every `k="v"` in `labels`.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// `prometheus` and `promtool` are installed, or what is missing: these tests scrape vramdoc
/// with a real Prometheus server and lint with promtool (scripts/test installs them).
pub fn prometheus_tools() -> Result<(), String> {
    for name in ["prometheus", "promtool"] {
        super::skip::tool(name, "prometheus")?;
    }
    Ok(())
}

/// The path of `name` (checked by [`prometheus_tools`] at the start of the test).
pub fn tool(name: &str) -> PathBuf {
    super::skip::tool(name, "prometheus").unwrap_or_else(|e| panic!("{e}"))
}

/// `promtool check metrics` on an exposition: (success, output).
pub fn promtool_check_metrics(text: &str) -> (bool, String) {
    let mut child = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let out = child.wait_with_output().expect("promtool output");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}
