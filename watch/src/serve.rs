//! The exporter's HTTP server: `GET /metrics` over HTTP/1.1 for Prometheus, to many clients at
//! once, none of which can hold up another.
//!
//! Each connection is served by a thread of its own (small stacks), with a deadline for the
//! whole request ([`REQUEST_DEADLINE`]), not per read: a client that sends a byte every few
//! seconds is dropped when its time is up. At most [`MAX_CONNECTIONS`] are open at once; a
//! new one beyond that closes the oldest still open (an idle or slow client: a scrape takes
//! milliseconds), so that a flood of idle connections can neither fill the listen backlog nor
//! make a real scrape wait. Memory stays bounded: one thread and at most 8 KiB of request per
//! connection.
//!
//! With a [`WebConfig`] it speaks TLS (the handshake is part of the request's deadline) and
//! asks for basic authentication, as Prometheus's exporters do.

use std::io::{self, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustls::{ServerConnection, StreamOwned};

use crate::web_config::WebConfig;

/// Connections served at once; a new one beyond closes the oldest.
pub const MAX_CONNECTIONS: usize = 128;

/// How long a client has for its whole request, and then for reading the answer.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// The longest request head read (the request line and headers).
const MAX_HEAD: usize = 8192;

/// The connections being served: an id, when it was accepted, and a handle to close it.
#[derive(Default)]
struct Open {
    next: u64,
    conns: Vec<(u64, Instant, TcpStream)>,
}

impl Open {
    /// Registers `s`; returns its id, closing the oldest connection if there are too many.
    fn add(&mut self, s: &TcpStream) -> Option<u64> {
        let handle = s.try_clone().ok()?;
        if self.conns.len() >= MAX_CONNECTIONS {
            let (_, _, oldest) = self.conns.remove(0);
            // Its thread's read or write fails at once, and it leaves.
            let _ = oldest.shutdown(Shutdown::Both);
        }
        self.next += 1;
        self.conns.push((self.next, Instant::now(), handle));
        Some(self.next)
    }

    fn remove(&mut self, id: u64) {
        self.conns.retain(|(i, _, _)| *i != id);
    }
}

/// An HTTP server of `/metrics`, on threads of its own, until the process exits.
pub struct Exporter {
    addr: SocketAddr,
}

impl Exporter {
    /// Binds `addr` (the error names it when it is in use) and serves what `page` returns,
    /// over TLS and to authenticated users only if `web` says so.
    pub fn start(
        addr: SocketAddr,
        web: WebConfig,
        page: impl Fn() -> String + Send + Sync + 'static,
    ) -> io::Result<Exporter> {
        let l = TcpListener::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        let addr = l.local_addr()?;
        let page = Arc::new(page);
        let open = Arc::new(Mutex::new(Open::default()));
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for s in l.incoming().flatten() {
                    let registered = open.lock().unwrap_or_else(PoisonError::into_inner).add(&s);
                    let Some(id) = registered else { continue };
                    let (page, mine, web) = (Arc::clone(&page), Arc::clone(&open), web.clone());
                    let spawned = std::thread::Builder::new()
                        .name("metrics-client".into())
                        .stack_size(128 * 1024)
                        .spawn(move || {
                            // A client that fails or goes away is its own problem.
                            let _ = serve(s, &web, &*page);
                            mine.lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .remove(id);
                        });
                    if spawned.is_err() {
                        open.lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .remove(id);
                    }
                }
            })?;
        Ok(Exporter { addr })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The request line of an HTTP request: method and path.
fn request_line(head: &str) -> Option<(&str, &str)> {
    let mut w = head.lines().next()?.split_whitespace();
    let method = w.next()?;
    let target = w.next()?;
    w.next()?.starts_with("HTTP/").then_some((method, target))
}

/// Whether the request's `Accept` header asks for OpenMetrics (Prometheus does, first); any
/// other client gets Prometheus's text format.
fn accepts_openmetrics(head: &str) -> bool {
    header(head, "accept").is_some_and(|v| {
        v.to_ascii_lowercase()
            .contains("application/openmetrics-text")
    })
}

/// A connection: plain, or TLS over the socket.
trait Conn: io::Read + io::Write {
    fn socket(&self) -> &TcpStream;
}

impl Conn for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

impl Conn for StreamOwned<ServerConnection, TcpStream> {
    fn socket(&self) -> &TcpStream {
        &self.sock
    }
}

/// Serves one connection: plain or TLS, as `web` says.
fn serve(s: TcpStream, web: &WebConfig, page: &dyn Fn() -> String) -> io::Result<()> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    match &web.tls {
        None => {
            let mut s = s;
            respond(&mut s, deadline, web, page)
        }
        Some(tls) => {
            let conn = ServerConnection::new(Arc::clone(tls)).map_err(io::Error::other)?;
            let mut t = StreamOwned::new(conn, s);
            respond(&mut t, deadline, web, page)?;
            t.conn.send_close_notify();
            t.flush()
        }
    }
}

/// The value of header `name` in the request head, if present.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Reads the request's head (up to its blank line, at most [`MAX_HEAD`]) by `deadline`.
fn read_head(s: &mut impl Conn, deadline: Instant) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        s.socket().set_read_timeout(Some(left))?;
        s.socket().set_write_timeout(Some(left))?; // (the TLS handshake writes too)
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(head)
}

fn respond(
    s: &mut impl Conn,
    deadline: Instant,
    web: &WebConfig,
    page: &dyn Fn() -> String,
) -> io::Result<()> {
    let head = read_head(s, deadline)?;
    let head = String::from_utf8_lossy(&head);
    let allowed = web
        .auth
        .as_ref()
        .is_none_or(|a| a.allows(header(&head, "authorization")));
    let mut extra = "";
    let (status, ctype, body) = match request_line(&head) {
        Some(_) if !allowed => {
            extra = "WWW-Authenticate: Basic realm=\"nagless watch\"\r\n";
            (
                "401 Unauthorized",
                "text/plain; charset=utf-8",
                "Unauthorized\n".to_owned(),
            )
        }
        Some(("GET" | "HEAD", t)) if t == "/metrics" || t.starts_with("/metrics?") => {
            if accepts_openmetrics(&head) {
                (
                    "200 OK",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    page(),
                )
            } else {
                (
                    "200 OK",
                    "text/plain; version=0.0.4; charset=utf-8",
                    crate::metrics::text_format(&page()),
                )
            }
        }
        Some(("GET" | "HEAD", _)) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "nagless watch serves /metrics\n".to_owned(),
        ),
        Some(_) => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "GET /metrics\n".to_owned(),
        ),
        None => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "not an HTTP request\n".to_owned(),
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    if !head.starts_with("HEAD ") {
        out += &body;
    }
    // The answer has the same time again to be read.
    s.socket().set_write_timeout(Some(REQUEST_DEADLINE))?;
    s.write_all(out.as_bytes())?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use std::io::Read as _;

    fn get(addr: SocketAddr, req: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_metrics_over_http_and_refuses_the_rest() {
        let mut m = Metrics::default();
        m.watcher(
            Some(crate::own_process::OwnProcess {
                cpu: Duration::from_millis(1500),
                rss_bytes: 1 << 20,
                virtual_bytes: 1 << 24,
                open_fds: 5,
                max_fds: None,
                start_time_unix_s: 1.7e9,
            }),
            42,
        );
        let e = Exporter::start(
            "127.0.0.1:0".parse().unwrap(),
            WebConfig::default(),
            m.page(),
        )
        .unwrap();
        let ok = get(e.addr(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("nagless_watch_cpu_seconds_total 1.5"), "{ok}");
        assert!(ok.contains("nagless_watch_sockets 42"), "{ok}");
        assert!(ok.contains("process_cpu_seconds_total 1.5"), "{ok}");
        assert!(ok.contains("process_resident_memory_bytes 1048576"), "{ok}");
        assert!(ok.contains("process_max_fds -1"), "{ok}");
        // No Accept: Prometheus's text format; Prometheus's own Accept: OpenMetrics.
        assert!(ok.contains("text/plain; version=0.0.4"), "{ok}");
        assert!(
            ok.contains("# TYPE nagless_watch_cpu_seconds_total counter"),
            "{ok}"
        );
        assert!(!ok.contains("# EOF"), "{ok}");
        let om = get(
            e.addr(),
            "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n",
        );
        assert!(om.contains("application/openmetrics-text"), "{om}");
        assert!(
            om.contains("# TYPE nagless_watch_cpu_seconds counter"),
            "{om}"
        );
        assert!(om.trim_end().ends_with("# EOF"), "{om}");
        assert!(get(e.addr(), "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(e.addr(), "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(e.addr(), "hello\r\n\r\n").starts_with("HTTP/1.1 400"));
        // The address is taken now: a second exporter says which one.
        let err = Exporter::start(e.addr(), WebConfig::default(), m.page())
            .err()
            .unwrap();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains(&e.addr().to_string()), "{err}");
    }

    /// 200 idle connections and a few that send a byte every 300 ms hold the server while
    /// twenty scrapes are made: every scrape is answered, each within a second (generous: it
    /// takes about a millisecond), and no more than MAX_CONNECTIONS threads serve at once.
    #[test]
    fn idle_and_slow_clients_cannot_hold_up_a_scrape() {
        let m = Metrics::default();
        let e = Exporter::start(
            "127.0.0.1:0".parse().unwrap(),
            WebConfig::default(),
            m.page(),
        )
        .unwrap();
        let idle: Vec<TcpStream> = (0..200)
            .map(|_| TcpStream::connect(e.addr()).unwrap())
            .collect();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let drips: Vec<_> = (0..4)
            .map(|_| {
                let (addr, stop) = (e.addr(), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut s = TcpStream::connect(addr).unwrap();
                    for _ in 0..20 {
                        if stop.load(std::sync::atomic::Ordering::Relaxed)
                            || s.write_all(b"G").is_err()
                        {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(300));
                    }
                })
            })
            .collect();
        for _ in 0..20 {
            let start = Instant::now();
            let ok = get(e.addr(), "GET /metrics HTTP/1.1\r\n\r\n");
            assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "a scrape took {:?}",
                start.elapsed()
            );
        }
        let threads = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("Threads:")
                    .map(|n| n.trim().parse::<usize>().unwrap())
            })
            .unwrap();
        // The serving threads, the acceptor, this test's and the drips: bounded.
        assert!(threads <= MAX_CONNECTIONS + 40, "{threads} threads");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for d in drips {
            d.join().unwrap();
        }
        drop(idle);
    }

    /// TLS and basic authentication: a rustls client that trusts the server's certificate is
    /// answered 401 (with the header that asks for a password) without credentials or with a
    /// wrong password, and the page with the right one; a plain-HTTP client gets no page.
    #[test]
    fn tls_and_basic_auth_let_only_the_right_user_in() {
        use base64::Engine as _;
        let dir = std::env::temp_dir().join(format!("nagless-serve-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(dir.join("c.pem"), c.cert.pem()).unwrap();
        std::fs::write(dir.join("k.pem"), c.key_pair.serialize_pem()).unwrap();
        let hash = bcrypt::hash("right", 4).unwrap();
        let cfg = format!(
            "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\nbasic_auth_users:\n  prom: {hash}\n"
        );
        let web = WebConfig::parse(&cfg, &dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let mut m = Metrics::default();
        m.watcher(None, 7);
        let e = Exporter::start("127.0.0.1:0".parse().unwrap(), web, m.page()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(c.cert.der().clone()).unwrap();
        let client = Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
        );
        let get_tls = |auth: Option<&str>| {
            let conn =
                rustls::ClientConnection::new(Arc::clone(&client), "localhost".try_into().unwrap())
                    .unwrap();
            let sock = TcpStream::connect(e.addr()).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut t = rustls::StreamOwned::new(conn, sock);
            let header = auth.map_or(String::new(), |a| {
                format!(
                    "Authorization: Basic {}\r\n",
                    base64::engine::general_purpose::STANDARD.encode(a)
                )
            });
            write!(t, "GET /metrics HTTP/1.1\r\n{header}\r\n").unwrap();
            let mut out = String::new();
            t.read_to_string(&mut out).unwrap();
            out
        };
        let none = get_tls(None);
        assert!(none.starts_with("HTTP/1.1 401"), "{none}");
        assert!(none.contains("WWW-Authenticate: Basic"), "{none}");
        assert!(!none.contains("nagless_watch_sockets"), "{none}");
        let wrong = get_tls(Some("prom:wrong"));
        assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
        let ok = get_tls(Some("prom:right"));
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("nagless_watch_sockets 7"), "{ok}");
        // Plain HTTP to the TLS port: no page, whatever the server says back.
        let mut s = TcpStream::connect(e.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nAuthorization: Basic cHJvbTpyaWdodA==\r\n\r\n")
            .unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        assert!(!String::from_utf8_lossy(&raw).contains("nagless_watch_sockets"));
    }
}
