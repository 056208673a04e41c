//! TLS and basic authentication for the exporter, configured the way Prometheus's own
//! exporters are: a web configuration file in the format of
//! [exporter-toolkit](https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md)
//! (`--web-config FILE`), so one file serves node_exporter and `nagless watch` alike:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: /etc/nagless/watch.crt      # PEM: the certificate, then its chain
//!   key_file: /etc/nagless/watch.key       # PEM: PKCS#8, PKCS#1 or SEC1
//!   # client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (default),
//!   # client_ca_file: /etc/nagless/clients-ca.crt    #    VerifyClientCertIfGiven
//!   # min_version: TLS12                              # or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...   # a bcrypt hash: htpasswd -nBC 10 "" | tr -d ':\n'
//! ```
//!
//! Paths are relative to the file's directory. Keys this module does not know are refused by
//! name, so a setting is never silently ignored. Both parts are optional: TLS alone, basic
//! authentication alone (over plain HTTP, which sends the password in clear: only on a
//! trusted network), or both.
//!
//! Each bcrypt check costs tens of milliseconds of CPU by design; they run one at a time, a
//! request waits for its turn only until its deadline, and user and password pairs are
//! remembered as keyed hashes (at most `REMEMBERED` that passed and as many that failed), so
//! that a scrape every second costs one check and wrong passwords cannot take more than one
//! core. The file is read once, at start: restart the watcher after rotating certificates.

use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasher as _, RandomState};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use yaml_rust2::{Yaml, YamlLoader};

/// User and password pairs remembered at most, those that passed and those that failed each.
pub(crate) const REMEMBERED: usize = 64;

/// The highest bcrypt cost taken: each step doubles a check's time (cost 14 is about a
/// second here).
pub(crate) const MAX_COST: u32 = 14;

/// What is wrong with a web configuration file, said with the file and key it is about.
#[derive(Debug)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// A loaded web configuration: TLS if configured, basic authentication if configured.
#[derive(Clone, Default)]
pub struct WebConfig {
    /// The TLS server configuration, when the file has `tls_server_config`.
    pub tls: Option<Arc<ServerConfig>>,
    /// The users and their bcrypt hashes, when the file has `basic_auth_users`.
    pub auth: Option<Arc<BasicAuth>>,
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("users", &self.auth.as_ref().map(|a| a.users.len()))
            .finish()
    }
}

impl WebConfig {
    /// Reads and checks `path`; the error names the file and what is wrong.
    pub fn load(path: &Path) -> Result<WebConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, dir).map_err(|e| ConfigError(format!("{}: {e}", path.display())))
    }

    /// The configuration in `text`, its relative paths taken from `dir`.
    pub(crate) fn parse(text: &str, dir: &Path) -> Result<WebConfig, String> {
        let docs = YamlLoader::load_from_str(text).map_err(|e| format!("not YAML: {e}"))?;
        let root = match docs.into_iter().next() {
            None | Some(Yaml::Null) => return Ok(WebConfig::default()),
            Some(Yaml::Hash(h)) => h,
            Some(_) => return Err("expected a mapping at the top".into()),
        };
        let mut config = WebConfig::default();
        for (k, v) in &root {
            match k.as_str() {
                Some("tls_server_config") => config.tls = Some(Arc::new(tls(v, dir)?)),
                Some("basic_auth_users") => config.auth = Some(Arc::new(users(v)?)),
                Some(other @ "http_server_config") => {
                    return Err(format!("{other} is not supported by nagless watch"))
                }
                Some(other) => return Err(format!("unknown key {other}")),
                None => return Err(format!("a key that is not a string: {k:?}")),
            }
        }
        Ok(config)
    }
}

/// The string value of `key` in `map`, if present.
fn string<'a>(map: &'a yaml_rust2::yaml::Hash, key: &str) -> Result<Option<&'a str>, String> {
    match map.get(&Yaml::String(key.into())) {
        None | Some(Yaml::Null) => Ok(None),
        Some(Yaml::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("{key}: expected a string, found {other:?}")),
    }
}

fn resolve(dir: &Path, file: &str) -> PathBuf {
    dir.join(file)
}

fn tls(v: &Yaml, dir: &Path) -> Result<ServerConfig, String> {
    let Yaml::Hash(map) = v else {
        return Err("tls_server_config: expected a mapping".into());
    };
    const KNOWN: [&str; 6] = [
        "cert_file",
        "key_file",
        "client_auth_type",
        "client_ca_file",
        "min_version",
        "max_version",
    ];
    for k in map.keys() {
        match k.as_str() {
            Some(k) if KNOWN.contains(&k) => {}
            Some(k) => return Err(format!("tls_server_config: unknown or unsupported key {k}")),
            None => return Err("tls_server_config: a key that is not a string".into()),
        }
    }
    let cert_file = string(map, "cert_file")?.ok_or("tls_server_config: cert_file is required")?;
    let key_file = string(map, "key_file")?.ok_or("tls_server_config: key_file is required")?;
    let cert_path = resolve(dir, cert_file);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| format!("cert_file {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!("cert_file {}: no certificate", cert_path.display()));
    }
    let key_path = resolve(dir, key_file);
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| format!("key_file {}: {e}", key_path.display()))?;
    let versions: &[&rustls::SupportedProtocolVersion] = match (
        string(map, "min_version")?.unwrap_or("TLS12"),
        string(map, "max_version")?.unwrap_or("TLS13"),
    ) {
        ("TLS12", "TLS13") => rustls::ALL_VERSIONS,
        ("TLS13", "TLS13") => &[&rustls::version::TLS13],
        ("TLS12", "TLS12") => &[&rustls::version::TLS12],
        (min, max) => {
            return Err(format!(
                "min_version {min}, max_version {max}: TLS12 and TLS13 are supported (TLS10 and TLS11 are not)"
            ))
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let client_auth = string(map, "client_auth_type")?.unwrap_or("NoClientCert");
    let ca = string(map, "client_ca_file")?;
    let builder = match client_auth {
        "NoClientCert" if ca.is_some() => {
            return Err(
                "client_ca_file is set but client_auth_type is NoClientCert: client certificates would not be asked for (set client_auth_type: RequireAndVerifyClientCert)".into(),
            )
        }
        "NoClientCert" => builder.with_no_client_auth(),
        "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" => {
            let ca = ca.ok_or(format!(
                "client_auth_type {client_auth} needs client_ca_file"
            ))?;
            let ca_path = resolve(dir, ca);
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(&ca_path)
                .map_err(|e| format!("client_ca_file {}: {e}", ca_path.display()))?
            {
                let c = c.map_err(|e| format!("client_ca_file {}: {e}", ca_path.display()))?;
                roots
                    .add(c)
                    .map_err(|e| format!("client_ca_file {}: {e}", ca_path.display()))?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if client_auth == "VerifyClientCertIfGiven" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| format!("client_ca_file {}: {e}", ca_path.display()))?,
            )
        }
        other => {
            return Err(format!(
                "client_auth_type {other}: NoClientCert, VerifyClientCertIfGiven and RequireAndVerifyClientCert are supported"
            ))
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("cert_file and key_file do not go together: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn users(v: &Yaml) -> Result<BasicAuth, String> {
    let map = match v {
        Yaml::Hash(m) => m,
        Yaml::Null => return Err("basic_auth_users: no users".into()),
        _ => return Err("basic_auth_users: expected a mapping of user: bcrypt hash".into()),
    };
    let mut users = Vec::new();
    for (k, v) in map {
        let user = match k {
            Yaml::String(s) => s.clone(),
            Yaml::Integer(i) => i.to_string(),
            _ => return Err("basic_auth_users: a user name that is not a string".into()),
        };
        let Yaml::String(hash) = v else {
            return Err(format!("basic_auth_users: {user}: expected a bcrypt hash"));
        };
        // The check that the hash is one, at start rather than at the first scrape: its form,
        // its cost (a slip such as 20 would make each check take a minute), its salt.
        let parts = hash
            .parse::<bcrypt::HashParts>()
            .map_err(|e| format!("basic_auth_users: {user}: not a bcrypt hash ({e})"))?;
        if !(4..=MAX_COST).contains(&parts.get_cost()) {
            return Err(format!(
                "basic_auth_users: {user}: bcrypt cost {} (4 to {MAX_COST}; 10 is usual)",
                parts.get_cost()
            ));
        }
        bcrypt::verify("", hash)
            .map_err(|e| format!("basic_auth_users: {user}: not a bcrypt hash ({e})"))?;
        users.push((user, hash.clone()));
    }
    if users.is_empty() {
        return Err("basic_auth_users: no users".into());
    }
    Ok(BasicAuth {
        users,
        passed: Mutex::new(HashSet::new()),
        failed: Mutex::new(HashSet::new()),
        keys: RandomState::new(),
        checking: Mutex::new(()),
    })
}

/// The users of `basic_auth_users` and the checks made.
pub struct BasicAuth {
    users: Vec<(String, String)>,
    /// Keys ([`BasicAuth::key`]) of user and password pairs that passed, and that failed; at
    /// most [`REMEMBERED`] each. Keyed hashes, so no password is kept in clear.
    passed: Mutex<HashSet<u64>>,
    failed: Mutex<HashSet<u64>>,
    keys: RandomState,
    /// Held while a bcrypt check runs: one at a time.
    checking: Mutex<()>,
}

impl BasicAuth {
    /// Whether the value of an `Authorization` header (`Basic base64(user:password)`) names a
    /// user with the right password. A check not remembered waits for the one running, until
    /// `deadline` or until `give_up` says so (its connection was closed): then it is refused.
    /// An unknown user costs a check too, so that the time taken does not say which exist.
    pub(crate) fn allows(
        &self,
        authorization: Option<&str>,
        deadline: Instant,
        give_up: &dyn Fn() -> bool,
    ) -> bool {
        let Some((user, password)) = authorization.and_then(decode_basic) else {
            return false;
        };
        let key = self.keys.hash_one((&user, &password));
        if lock(&self.passed).contains(&key) {
            return true;
        }
        if lock(&self.failed).contains(&key) {
            return false;
        }
        let hash = self.users.iter().find(|(u, _)| *u == user).map(|(_, h)| h);
        let check = hash.unwrap_or(&self.users[0].1);
        let ok = {
            let _one = loop {
                match self.checking.try_lock() {
                    Ok(g) => break g,
                    Err(TryLockError::Poisoned(p)) => break p.into_inner(),
                    Err(TryLockError::WouldBlock) => {
                        if give_up() || Instant::now() >= deadline {
                            return false;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            };
            bcrypt::verify(&password, check).unwrap_or(false) && hash.is_some()
        };
        let mut seen = lock(if ok { &self.passed } else { &self.failed });
        if seen.len() >= REMEMBERED {
            seen.clear();
        }
        seen.insert(key);
        ok
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `Basic base64(user:password)` as (user, password).
fn decode_basic(value: &str) -> Option<(String, String)> {
    let (scheme, b64) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    fn never() -> bool {
        false
    }

    fn header(user: &str, password: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
    }

    /// A directory of its own (`name`) holding a self-signed certificate for `localhost`
    /// (`c.pem`) and its key (`k.pem`); the certificate too, for a client to trust.
    pub(crate) fn dir_with_cert(name: &str) -> (PathBuf, rcgen::CertifiedKey) {
        let dir =
            std::env::temp_dir().join(format!("nagless-webcfg-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(dir.join("c.pem"), c.cert.pem()).unwrap();
        std::fs::write(dir.join("k.pem"), c.key_pair.serialize_pem()).unwrap();
        (dir, c)
    }

    #[test]
    fn a_user_passes_with_the_right_password_only() {
        // Cost 4: the lowest bcrypt allows, to keep the test fast.
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let c = WebConfig::parse(
            &format!("basic_auth_users:\n  prom: {hash}\n"),
            Path::new("."),
        )
        .unwrap();
        let auth = c.auth.unwrap();
        assert!(c.tls.is_none());
        assert!(auth.allows(Some(&header("prom", "s3cret")), far(), &never));
        // Remembered: passes again, and a wrong one still fails.
        assert!(auth.allows(Some(&header("prom", "s3cret")), far(), &never));
        for (u, p) in [
            ("prom", "S3cret"),
            ("prom", ""),
            ("other", "s3cret"),
            ("", ""),
        ] {
            assert!(!auth.allows(Some(&header(u, p)), far(), &never), "{u}:{p}");
        }
        assert!(!auth.allows(None, far(), &never));
        assert!(!auth.allows(Some("Bearer abc"), far(), &never));
        assert!(!auth.allows(Some("Basic !!!"), far(), &never));
        // A password with a colon: only the first colon separates.
        let hash = bcrypt::hash("a:b", 4).unwrap();
        let c =
            WebConfig::parse(&format!("basic_auth_users:\n  u: {hash}\n"), Path::new(".")).unwrap();
        assert!(c
            .auth
            .unwrap()
            .allows(Some(&header("u", "a:b")), far(), &never));
    }

    /// While another check runs, a request waits only until its deadline, or until its
    /// connection is closed, and is refused (not remembered as wrong).
    #[test]
    fn a_check_waits_no_longer_than_its_deadline() {
        let hash = bcrypt::hash("right", 4).unwrap();
        let c = WebConfig::parse(
            &format!("basic_auth_users:\n  prom: {hash}\n"),
            Path::new("."),
        )
        .unwrap();
        let auth = c.auth.unwrap();
        let busy = auth.checking.lock().unwrap();
        let start = Instant::now();
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(!auth.allows(Some(&header("prom", "right")), soon, &never));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(!auth.allows(Some(&header("prom", "right")), far(), &|| true));
        drop(busy);
        assert!(auth.allows(Some(&header("prom", "right")), far(), &never));
    }

    #[test]
    fn tls_loads_a_certificate_and_key_relative_to_the_file() {
        let (dir, _) = dir_with_cert("ok");
        let cfg =
            "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  min_version: TLS13\n";
        std::fs::write(dir.join("web.yml"), cfg).unwrap();
        let c = WebConfig::load(&dir.join("web.yml")).unwrap();
        assert!(c.tls.is_some() && c.auth.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn mistakes_are_named() {
        let (dir, _) = dir_with_cert("bad");
        for (text, says) in [
            ("tls_server_config:\n  cert_file: c.pem\n", "key_file is required"),
            ("tls_server_config:\n  cert_file: nope.pem\n  key_file: k.pem\n", "nope.pem"),
            ("tls_server_config:\n  cert_file: k.pem\n  key_file: k.pem\n", "no certificate"),
            ("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  min_version: TLS10\n", "TLS10"),
            ("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
            ("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  cipher_suites: [x]\n", "cipher_suites"),
            ("basic_auth_users:\n  prom: plaintext\n", "not a bcrypt hash"),
            ("basic_auth_users:\n  prom: $2y$20$abcdefghijklmnopqrstuuabcdefghijklmnopqrstuvwxyz01234\n", "bcrypt cost 20"),
            ("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  client_ca_file: c.pem\n", "client_auth_type is NoClientCert"),
            ("basic_auth_users:\n", "no users"),
            ("basic_auth_user:\n  a: b\n", "unknown key basic_auth_user"),
            ("http_server_config:\n  http2: false\n", "not supported"),
            ("- a\n", "mapping"),
            ("a: [\n", "not YAML"),
        ] {
            let err = WebConfig::parse(text, &dir).unwrap_err();
            assert!(err.contains(says), "{text:?}: {err}");
        }
        assert!(WebConfig::load(&dir.join("missing.yml"))
            .unwrap_err()
            .to_string()
            .contains("missing.yml"));
        // An empty file: neither TLS nor authentication.
        let c = WebConfig::parse("", &dir).unwrap();
        assert!(c.tls.is_none() && c.auth.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
