//! `vramdoc serve --web.config.file` (issue 39 item 6): basic authentication with bcrypt
//! hashes (401 and nothing else without good credentials, the file read again when it
//! changes, closed while it does not read), and TLS with a client CA, checked with curl and
//! certificates made by openssl (both needed: a missing one fails the test).

use crate::common;

use common::exporter::{http, Serve};
use common::{fresh_box, vramdoc};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `user:password` as a Basic `Authorization` header.
fn basic(user_password: &str) -> String {
    use base64::Engine;
    format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(user_password)
    )
}

fn get(addr: SocketAddr, path: &str, auth: &str) -> (u16, String) {
    http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: t\r\n{auth}Connection: close\r\n\r\n"),
    )
}

/// A web configuration with one user per `(name, password)` (bcrypt cost 4: quick tests).
fn users(pairs: &[(&str, &str)]) -> String {
    let mut s = String::from("basic_auth_users:\n");
    for (u, p) in pairs {
        s.push_str(&format!("  {u}: '{}'\n", bcrypt::hash(p, 4).unwrap()));
    }
    s
}

/// The whole raw answer to one request, or nothing when the server closes unanswered.
fn raw_answer(addr: SocketAddr, request: &str) -> Vec<u8> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(request.as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn basic_auth_admits_only_good_credentials_and_follows_the_file() {
    let dir = fresh_box("t4");
    let web = dir.path().join("web.yml");
    std::fs::write(&web, users(&[("alice", "s3cret")])).unwrap();
    let serve = Serve::start(
        dir.path(),
        &[],
        &[],
        &["--web.config.file", web.to_str().unwrap()],
    );
    let a = serve.addr;
    for (path, auth) in [
        ("/metrics", String::new()),
        ("/metrics", basic("alice:wrong")),
        ("/metrics", basic("bob:s3cret")),
        ("/healthz", String::new()),
        ("/incidents", String::new()),
        ("/metrics", "Authorization: Bearer s3cret\r\n".to_string()),
    ] {
        let (status, body) = get(a, path, &auth);
        assert_eq!(
            (status, body.as_str()),
            (401, "unauthorized\n"),
            "{path} {auth}"
        );
    }
    let answer = String::from_utf8_lossy(&raw_answer(
        a,
        "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    ))
    .to_string();
    assert!(
        answer.contains("www-authenticate: Basic realm=\"vramdoc\"")
            || answer.contains("WWW-Authenticate: Basic realm=\"vramdoc\""),
        "{answer}"
    );
    assert!(
        !answer.contains("vramdoc_"),
        "nothing of the metrics: {answer}"
    );
    let (status, body) = get(a, "/metrics", &basic("alice:s3cret"));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("vramdoc_collect_success"), "{body}");

    // The file changes: the next connection is judged by the new one.
    std::fs::write(&web, users(&[("bob", "other")])).unwrap();
    assert_eq!(get(a, "/metrics", &basic("alice:s3cret")).0, 401);
    assert_eq!(get(a, "/metrics", &basic("bob:other")).0, 200);
    // A file that no longer reads closes the server, not opens it.
    std::fs::write(&web, "basic_auth_users: [not, a, map]\n").unwrap();
    assert!(raw_answer(
        a,
        "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .is_empty());
    std::fs::write(&web, users(&[("bob", "other")])).unwrap();
    assert_eq!(get(a, "/metrics", &basic("bob:other")).0, 200);
}

#[test]
fn a_web_config_that_does_not_read_is_a_usage_error() {
    let dir = fresh_box("t4");
    let web = dir.path().join("web.yml");
    for (text, says) in [
        (
            "tls_server_config:\n  cipher_suites: [x]\n",
            "cipher_suites",
        ),
        ("basic_auth_users:\n  alice: plain\n", "not a bcrypt hash"),
        (
            "tls_server_config:\n  cert_file: none.pem\n  key_file: none.key\n",
            "none.pem",
        ),
    ] {
        std::fs::write(&web, text).unwrap();
        let o = vramdoc()
            .env("VRAMDOC_SIM_DIR", dir.path())
            .args(["serve", "--listen", "127.0.0.1:0", "--web.config.file"])
            .arg(&web)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains("web.yml") && e.contains(says), "{e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
    }
}

/// openssl, run in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (the TLS tests need it)");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, both by the CA.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=test CA",
        ],
    );
    for (name, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }
}

/// `curl` to `url` with `args`: (curl's exit code, HTTP status, body).
fn curl(dir: &Path, url: &str, args: &[&str]) -> (i32, u16, String) {
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .current_dir(dir)
        .output()
        .expect("curl runs (the TLS tests need it)");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        o.status.code().unwrap_or(-1),
        code.trim().parse().unwrap_or(0),
        body.to_string(),
    )
}

#[test]
fn tls_with_a_client_ca_serves_verified_clients_with_credentials() {
    let dir = fresh_box("t4");
    let certs = tempfile::tempdir().unwrap();
    let c = certs.path();
    certificates(c);
    // Relative paths: from the file's directory, as the exporter toolkit reads them.
    let web = c.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  \
             min_version: TLS12\n{}",
            users(&[("prom", "scrape")])
        ),
    )
    .unwrap();
    let serve = Serve::start(
        dir.path(),
        &[],
        &[],
        &["--web.config.file", web.to_str().unwrap()],
    );
    let url = format!("https://{}/metrics", serve.addr);
    let client = [
        "--cacert",
        "ca.pem",
        "--cert",
        "client.pem",
        "--key",
        "client.key",
    ];
    let with = |extra: &[&str]| {
        let mut a: Vec<&str> = client.to_vec();
        a.extend_from_slice(extra);
        curl(c, &url, &a)
    };
    let (rc, status, body) = with(&["-u", "prom:scrape"]);
    assert_eq!((rc, status), (0, 200), "{body}");
    assert!(body.contains("vramdoc_collect_success"), "{body}");
    // TLS 1.3 and 1.2 both.
    assert_eq!(
        with(&["-u", "prom:scrape", "--tlsv1.2", "--tls-max", "1.2"]).1,
        200
    );
    // A verified client without credentials: 401.
    let (rc, status, body) = with(&[]);
    assert_eq!((rc, status, body.as_str()), (0, 401, "unauthorized\n"));
    // No client certificate: no TLS session, so no answer at all.
    let (rc, status, _) = curl(c, &url, &["--cacert", "ca.pem", "-u", "prom:scrape"]);
    assert!(rc != 0 && status == 0, "curl {rc}, HTTP {status}");
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = raw_answer(
        serve.addr,
        "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(
        !plain.starts_with(b"HTTP/"),
        "{}",
        String::from_utf8_lossy(&plain)
    );
}
