//! `serve --web.config.file FILE`: TLS and basic authentication configured as Prometheus
//! exporters configure them, in the exporter-toolkit's web configuration format
//! (prometheus/exporter-toolkit `docs/web-configuration.md`): a YAML file with
//! `tls_server_config` (`cert_file`, `key_file`, `client_auth_type`, `client_ca_file`,
//! `min_version`, `max_version`) and `basic_auth_users` (user name → bcrypt hash). Relative
//! paths are taken from the file's directory, as the toolkit takes them.
//!
//! The file, and the files it names, are checked on every new connection and read again
//! when one of them changed (a renewed certificate, a Kubernetes Secret swapped under its
//! mount): a file that no longer reads leaves the server closed (every connection dropped)
//! until it reads again, never open. Served with rustls (TLS 1.2 and 1.3 only); passwords
//! checked with bcrypt, the successes of the current file remembered (at most
//! [`MAX_REMEMBERED`]) so a scrape does not pay a bcrypt each time; an unknown user costs a
//! bcrypt too, so answers do not tell which users exist.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Largest web configuration file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// Credentials remembered as good, per loaded file.
pub const MAX_REMEMBERED: usize = 64;

#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}")]
pub struct WebConfigError {
    pub path: String,
    pub what: String,
}

/// The file's fields (exporter-toolkit names; any other field is refused, so a setting
/// vramdoc does not implement is never silently ignored).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    tls_server_config: Option<RawTls>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
    #[serde(default)]
    http_server_config: Option<RawHttp>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    #[serde(default)]
    client_auth_type: Option<String>,
    #[serde(default)]
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    min_version: Option<String>,
    #[serde(default)]
    max_version: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    /// Accepted and ignored: vramdoc serves HTTP/1.1 only.
    #[serde(default)]
    #[allow(dead_code)]
    http2: Option<bool>,
}

/// One reading of the file.
pub struct Loaded {
    /// The TLS configuration, when `tls_server_config` is set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// User → bcrypt hash; empty: no authentication.
    users: BTreeMap<String, String>,
    remembered: Mutex<HashSet<(String, String)>>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Loaded {
    /// Whether requests must carry credentials.
    pub fn needs_auth(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether the `Authorization` header's value admits the request (blocking: a bcrypt
    /// check costs tens of milliseconds; call it off the runtime's thread).
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        if self.users.is_empty() {
            return true;
        }
        let Some((user, password)) = authorization.and_then(basic_credentials) else {
            return false;
        };
        let key = (user, password);
        if lock(&self.remembered).contains(&key) {
            return true;
        }
        let (user, password) = &key;
        let ok = match self.users.get(user) {
            Some(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            None => {
                // The same work as for a user that exists: timing tells no user names.
                if let Some(hash) = self.users.values().next() {
                    let _ = bcrypt::verify(password, hash);
                }
                false
            }
        };
        if ok {
            let mut r = lock(&self.remembered);
            if r.len() >= MAX_REMEMBERED {
                r.clear();
            }
            r.insert(key);
        }
        ok
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `Basic BASE64(user:password)` (RFC 7617; the scheme is case-insensitive).
fn basic_credentials(value: &[u8]) -> Option<(String, String)> {
    use base64::Engine;
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, b64) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// What identifies one version of a file: device, inode, size, modification time.
type Stamp = Option<(u64, u64, u64, i64, i64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The web configuration file, read again when it or a file it names changes.
#[derive(Debug)]
pub struct WebConfig {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The stamps of the file and of the files it names, as last read.
    stamps: Vec<(PathBuf, Stamp)>,
    current: Result<Arc<Loaded>, String>,
}

impl WebConfig {
    /// Read `path`; an error is the command's (exit 2: fix the file).
    pub fn open(path: &Path) -> Result<WebConfig, WebConfigError> {
        let (loaded, files) = load(path)?;
        Ok(WebConfig {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                stamps: stamps(path, &files),
                current: Ok(Arc::new(loaded)),
            }),
        })
    }

    /// [`WebConfig::open`] of the `--web.config.file` flag's file, if given.
    pub fn open_flag(path: Option<&Path>) -> Result<Option<Arc<WebConfig>>, WebConfigError> {
        path.map(|p| WebConfig::open(p).map(Arc::new)).transpose()
    }

    /// Whether connections are served with TLS now.
    pub fn serves_tls(&self) -> bool {
        self.current().is_ok_and(|l| l.tls.is_some())
    }

    /// The configuration now: read again when a file changed. `Err` (with the reason,
    /// printed once per change) while the file does not read.
    pub fn current(&self) -> Result<Arc<Loaded>, String> {
        let mut st = lock(&self.state);
        let changed = st.stamps.iter().any(|(p, s)| stamp(p) != *s);
        if changed {
            match load(&self.path) {
                Ok((loaded, files)) => {
                    st.stamps = stamps(&self.path, &files);
                    st.current = Ok(Arc::new(loaded));
                    crate::term::eprint_line(&format!(
                        "vramdoc serve: {}: read again",
                        crate::term::one_line(&self.path.display().to_string())
                    ));
                }
                Err(e) => {
                    let files: Vec<PathBuf> = st.stamps.iter().map(|(p, _)| p.clone()).collect();
                    st.stamps = files.iter().map(|p| (p.clone(), stamp(p))).collect();
                    let e = crate::term::one_line(&e.to_string());
                    crate::term::eprint_line(&format!(
                        "vramdoc serve: {e}; refusing every connection until it reads again"
                    ));
                    st.current = Err(e);
                }
            }
        }
        st.current.clone()
    }
}

fn stamps(path: &Path, files: &[PathBuf]) -> Vec<(PathBuf, Stamp)> {
    std::iter::once(path.to_path_buf())
        .chain(files.iter().cloned())
        .map(|p| {
            let s = stamp(&p);
            (p, s)
        })
        .collect()
}

/// Read the file: the configuration and the files it names.
fn load(path: &Path) -> Result<(Loaded, Vec<PathBuf>), WebConfigError> {
    let shown = crate::term::one_line(&path.display().to_string());
    let err = |what: String| WebConfigError {
        path: shown.clone(),
        what,
    };
    let text = crate::input::read_text(path, MAX_FILE_BYTES, "web configuration files")
        .map_err(|e| err(e.to_string()))?;
    let raw: RawFile = if text.trim().is_empty() {
        RawFile {
            tls_server_config: None,
            basic_auth_users: None,
            http_server_config: None,
        }
    } else {
        serde_yaml_ng::from_str(&text).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!("line {} column {}: ", l.line(), l.column()))
                .unwrap_or_default();
            err(format!("{at}{}", crate::term::one_line(&e.to_string())))
        })?
    };
    let _ = raw.http_server_config;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut files = Vec::new();
    let users = raw.basic_auth_users.unwrap_or_default();
    for (user, hash) in &users {
        let shown_user = crate::term::one_line(user);
        if user.is_empty() || user.contains(':') {
            return Err(err(format!(
                "basic_auth_users: {shown_user:?} is not a user name (no `:`, not empty)"
            )));
        }
        if hash.parse::<bcrypt::HashParts>().is_err() {
            return Err(err(format!(
                "basic_auth_users: {shown_user}: not a bcrypt hash (`$2y$10$…`; make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)"
            )));
        }
    }
    let tls = match raw.tls_server_config {
        None => None,
        Some(t) => Some(Arc::new(tls_config(t, dir, &mut files).map_err(err)?)),
    };
    Ok((
        Loaded {
            tls,
            users,
            remembered: Mutex::new(HashSet::new()),
        },
        files,
    ))
}

fn version(v: Option<&str>, default: u8, field: &str) -> Result<u8, String> {
    match v {
        None => Ok(default),
        Some("TLS12") => Ok(12),
        Some("TLS13") => Ok(13),
        Some(x @ ("TLS10" | "TLS11")) => Err(format!(
            "tls_server_config.{field}: {x} is not offered (rustls speaks TLS 1.2 and 1.3): use TLS12 or TLS13"
        )),
        Some(x) => Err(format!(
            "tls_server_config.{field}: {:?} is not a TLS version (TLS12 or TLS13)",
            crate::term::one_line(x)
        )),
    }
}

fn tls_config(
    t: RawTls,
    dir: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<rustls::ServerConfig, String> {
    let mut file = |p: &Path| {
        let p = dir.join(p);
        files.push(p.clone());
        p
    };
    let shown = |p: &Path| crate::term::one_line(&p.display().to_string());
    let (Some(cert), Some(key)) = (t.cert_file.as_deref(), t.key_file.as_deref()) else {
        return Err("tls_server_config needs both cert_file and key_file".into());
    };
    let (cert, key) = (file(cert), file(key));
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| format!("cert_file {}: {e}", shown(&cert)))?;
    if chain.is_empty() {
        return Err(format!(
            "cert_file {}: no PEM certificate in it",
            shown(&cert)
        ));
    }
    let key_der =
        PrivateKeyDer::from_pem_file(&key).map_err(|e| format!("key_file {}: {e}", shown(&key)))?;
    let lo = version(t.min_version.as_deref(), 12, "min_version")?;
    let hi = version(t.max_version.as_deref(), 13, "max_version")?;
    if lo > hi {
        return Err("tls_server_config: min_version is above max_version".into());
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (lo..=hi).contains(v))
            .map(|(_, p)| p)
            .collect();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let verify_if_given = match auth {
        "NoClientCert" => None,
        "RequireAndVerifyClientCert" => Some(false),
        "VerifyClientCertIfGiven" => Some(true),
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(format!(
                "tls_server_config.client_auth_type: {auth} accepts certificates nobody verified; vramdoc offers RequireAndVerifyClientCert, VerifyClientCertIfGiven or NoClientCert"
            ))
        }
        other => {
            return Err(format!(
                "tls_server_config.client_auth_type: {:?} is not one of NoClientCert, RequireAndVerifyClientCert, VerifyClientCertIfGiven",
                crate::term::one_line(other)
            ))
        }
    };
    let builder = match verify_if_given {
        None => {
            if t.client_ca_file.is_some() {
                return Err(
                    "tls_server_config: client_ca_file is set but client_auth_type is NoClientCert (set RequireAndVerifyClientCert)"
                        .into(),
                );
            }
            builder.with_no_client_auth()
        }
        Some(if_given) => {
            let Some(ca) = t.client_ca_file.as_deref() else {
                return Err(format!(
                    "tls_server_config.client_auth_type {auth} needs client_ca_file"
                ));
            };
            let ca = file(ca);
            let mut roots = rustls::RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(&ca)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("client_ca_file {}: {e}", shown(&ca)))?;
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| format!("client_ca_file {}: {e}", shown(&ca)))?;
            }
            let mut v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            if if_given {
                v = v.allow_unauthenticated();
            }
            let v = v
                .build()
                .map_err(|e| format!("client_ca_file {}: {e}", shown(&ca)))?;
            builder.with_client_cert_verifier(v)
        }
    };
    let mut cfg = builder
        .with_single_cert(chain, key_der)
        .map_err(|e| format!("cert_file/key_file: {e}"))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_follow_rfc_7617() {
        // "alice:pa:ss" (a password may hold a colon).
        assert_eq!(
            basic_credentials(b"Basic YWxpY2U6cGE6c3M="),
            Some(("alice".into(), "pa:ss".into()))
        );
        assert_eq!(
            basic_credentials(b"basic  YWxpY2U6cGE6c3M= "),
            Some(("alice".into(), "pa:ss".into()))
        );
        assert_eq!(basic_credentials(b"Bearer YWxpY2U6cGE6c3M="), None);
        assert_eq!(basic_credentials(b"Basic !!!"), None);
        assert_eq!(basic_credentials(b"Basic YWxpY2U="), None, "no colon");
    }

    #[test]
    fn users_are_checked_with_bcrypt_and_unknown_fields_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("web.yml");
        // Cost 4: the smallest bcrypt allows (tests stay quick).
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        std::fs::write(&p, format!("basic_auth_users:\n  alice: '{hash}'\n")).unwrap();
        let w = WebConfig::open(&p).unwrap();
        let l = w.current().unwrap();
        assert!(l.needs_auth() && l.tls.is_none());
        assert!(l.admits(Some(b"Basic YWxpY2U6czNjcmV0"))); // alice:s3cret
        assert!(l.admits(Some(b"Basic YWxpY2U6czNjcmV0")), "remembered");
        assert!(!l.admits(Some(b"Basic YWxpY2U6d3Jvbmc="))); // alice:wrong
        assert!(!l.admits(Some(b"Basic Ym9iOnMzY3JldA=="))); // bob:s3cret
        assert!(!l.admits(None));
        std::fs::write(&p, "tls_server_config:\n  cipher_suites: [x]\n").unwrap();
        let e = WebConfig::open(&p).unwrap_err().to_string();
        assert!(e.contains("cipher_suites") && e.contains("line 2"), "{e}");
        std::fs::write(&p, "basic_auth_users:\n  alice: plain\n").unwrap();
        let e = WebConfig::open(&p).unwrap_err().to_string();
        assert!(e.contains("not a bcrypt hash"), "{e}");
    }
}
