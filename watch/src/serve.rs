//! The exporter's HTTP server: `GET /metrics` over HTTP/1.1 for Prometheus, to many clients at
//! once, none of which can hold up another.
//!
//! Each connection is served by a thread of its own (small stacks). Every read and write of a
//! connection is given only the time left before its deadline (`Deadlined`): 10 s for the
//! whole request, TLS handshake included (`REQUEST_DEADLINE`), then 10 s again for the whole
//! answer, so a client that sends or reads a byte every few seconds is dropped when its time is
//! up. At most `MAX_CONNECTIONS` are open at once; a new one beyond that closes the oldest
//! still reading its request (an idle or slow client: a scrape takes milliseconds), never one
//! being answered, so that a flood of idle connections can neither fill the listen backlog nor
//! make a real scrape wait. The page is rendered at most every `PAGE_FRESH` and shared by the
//! answers in flight, so memory stays bounded: a thread, 8 KiB of request and a reference to
//! the page per connection.
//!
//! With a [`WebConfig`] it speaks TLS and asks for basic authentication, as Prometheus's
//! exporters do; a bcrypt check waits at most until the request's deadline, and gives up when
//! its connection is closed for a newer one.
//!
//! Beside the server here: `conn` bounds a connection (plain or TLS) by its deadline and
//! reads its request's head, `request` reads that head (request line, headers, `Accept`).

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustls::{ServerConnection, StreamOwned};

use crate::web_config::WebConfig;

mod conn;
mod request;

use conn::{read_head, Conn, Deadlined};
use request::{accepts_openmetrics, header, request_line};

/// Connections served at once; a new one beyond closes the oldest still reading its request.
pub(crate) const MAX_CONNECTIONS: usize = 128;

/// How long a client has for its whole request, and then for reading the whole answer.
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// How long one rendering of the page is served before a new one is made.
pub(crate) const PAGE_FRESH: Duration = Duration::from_millis(500);

/// The longest request head read (the request line and headers).
const MAX_HEAD: usize = 8192;

/// What the acceptor and a connection's thread share.
#[derive(Default)]
struct State {
    /// Still reading its request (may be closed for a newer connection).
    reading: AtomicBool,
    /// Closed for a newer connection: its thread gives up.
    evicted: AtomicBool,
}

/// The connections being served: an id, their state, and a handle to close them.
#[derive(Default)]
struct Open {
    next: u64,
    conns: Vec<(u64, Arc<State>, TcpStream)>,
}

impl Open {
    /// Registers `s`; returns its id and state, closing the oldest connection still reading
    /// its request if there are too many (and refusing `s` if every one is being answered).
    fn add(&mut self, s: &TcpStream) -> Option<(u64, Arc<State>)> {
        let handle = s.try_clone().ok()?;
        if self.conns.len() >= MAX_CONNECTIONS {
            let Some(i) = self
                .conns
                .iter()
                .position(|(_, st, _)| st.reading.load(Ordering::Acquire))
            else {
                let _ = s.shutdown(Shutdown::Both);
                return None;
            };
            let (_, st, oldest) = self.conns.remove(i);
            st.evicted.store(true, Ordering::Release);
            // Its thread's read fails at once, and it leaves.
            let _ = oldest.shutdown(Shutdown::Both);
        }
        self.next += 1;
        let st = Arc::new(State {
            reading: AtomicBool::new(true),
            evicted: AtomicBool::new(false),
        });
        self.conns.push((self.next, Arc::clone(&st), handle));
        Some((self.next, st))
    }

    fn remove(&mut self, id: u64) {
        self.conns.retain(|(i, _, _)| *i != id);
    }
}

/// One rendering of the page: when, in OpenMetrics, in Prometheus's text format.
type Rendered = (Instant, Arc<str>, Arc<str>);

/// The page, rendered at most every [`PAGE_FRESH`] in both formats and shared.
struct Page {
    render: Box<dyn Fn() -> String + Send + Sync>,
    cached: Mutex<Option<Rendered>>,
}

impl Page {
    /// The page in OpenMetrics (`openmetrics`) or Prometheus's text format.
    fn get(&self, openmetrics: bool) -> Arc<str> {
        let mut c = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = c
            .as_ref()
            .is_some_and(|(at, _, _)| at.elapsed() < PAGE_FRESH);
        if !fresh {
            let om = (self.render)();
            let text = crate::metrics::text_format(&om);
            *c = Some((Instant::now(), om.into(), text.into()));
        }
        let (_, om, text) = c.as_ref().expect("just rendered");
        Arc::clone(if openmetrics { om } else { text })
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
        let page = Arc::new(Page {
            render: Box::new(page),
            cached: Mutex::new(None),
        });
        let open = Arc::new(Mutex::new(Open::default()));
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                let mut backoff = Duration::from_millis(10);
                for s in l.incoming() {
                    let s = match s {
                        Ok(s) => s,
                        // Out of descriptors, most likely: wait, rather than spin.
                        Err(_) => {
                            std::thread::sleep(backoff);
                            backoff = (backoff * 2).min(Duration::from_secs(1));
                            continue;
                        }
                    };
                    backoff = Duration::from_millis(10);
                    let registered = open.lock().unwrap_or_else(PoisonError::into_inner).add(&s);
                    let Some((id, st)) = registered else { continue };
                    let (page, mine, web) = (Arc::clone(&page), Arc::clone(&open), web.clone());
                    let spawned = std::thread::Builder::new()
                        .name("metrics-client".into())
                        .stack_size(128 * 1024)
                        .spawn(move || {
                            // A client that fails or goes away is its own problem.
                            let _ = serve(s, &st, &web, &page);
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

/// Serves one connection: plain or TLS, as `web` says.
fn serve(s: TcpStream, st: &State, web: &WebConfig, page: &Page) -> io::Result<()> {
    let d = Deadlined {
        sock: s,
        deadline: Instant::now() + REQUEST_DEADLINE,
    };
    match &web.tls {
        None => {
            let mut d = d;
            respond(&mut d, st, web, page)
        }
        Some(tls) => {
            let conn = ServerConnection::new(Arc::clone(tls)).map_err(io::Error::other)?;
            let mut t = StreamOwned::new(conn, d);
            respond(&mut t, st, web, page)?;
            t.conn.send_close_notify();
            t.flush()
        }
    }
}

fn respond(s: &mut impl Conn, st: &State, web: &WebConfig, page: &Page) -> io::Result<()> {
    let head = read_head(s)?;
    let head = String::from_utf8_lossy(&head);
    let deadline = s.deadlined().deadline;
    let allowed = web.auth.as_ref().is_none_or(|a| {
        a.allows(header(&head, "authorization"), deadline, &|| {
            st.evicted.load(Ordering::Acquire)
        })
    });
    // Being answered now: not to be closed for a newer connection.
    st.reading.store(false, Ordering::Release);
    if st.evicted.load(Ordering::Acquire) {
        return Err(io::ErrorKind::ConnectionAborted.into());
    }
    let mut extra = "";
    let (status, ctype, body): (_, _, Arc<str>) = match request_line(&head) {
        Some(_) if !allowed => {
            extra = "WWW-Authenticate: Basic realm=\"nagless watch\"\r\n";
            (
                "401 Unauthorized",
                "text/plain; charset=utf-8",
                "Unauthorized\n".into(),
            )
        }
        Some(("GET" | "HEAD", t)) if t == "/metrics" || t.starts_with("/metrics?") => {
            if accepts_openmetrics(&head) {
                (
                    "200 OK",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    page.get(true),
                )
            } else {
                (
                    "200 OK",
                    "text/plain; version=0.0.4; charset=utf-8",
                    page.get(false),
                )
            }
        }
        Some(("GET" | "HEAD", _)) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "nagless watch serves /metrics\n".into(),
        ),
        Some(_) => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "GET /metrics\n".into(),
        ),
        None => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "not an HTTP request\n".into(),
        ),
    };
    let out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    // The answer has the same time again to be read, as a whole.
    s.deadlined().deadline = Instant::now() + REQUEST_DEADLINE;
    s.write_all(out.as_bytes())?;
    if !head.starts_with("HEAD ") {
        s.write_all(body.as_bytes())?;
    }
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use std::io::Read;

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
    /// twenty scrapes are made: every scrape is answered, each in less than half the request
    /// deadline that a held-up scrape would wait for (it takes about a millisecond; a loaded
    /// machine adds its delays, never seconds), and no more than MAX_CONNECTIONS threads
    /// serve at once.
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
                start.elapsed() < REQUEST_DEADLINE / 2,
                "a scrape took {:?}",
                start.elapsed()
            );
        }
        // The serving threads, by their name: the process's whole count also holds the
        // threads of the tests `cargo test` runs beside this one, more of them at once the
        // slower a loaded machine runs each. (Other tests' exporters serve a client or two.)
        let threads = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim_end() == "metrics-client")
            .count();
        assert!(threads <= MAX_CONNECTIONS + 8, "{threads} serving threads");
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
        let (dir, c) = crate::web_config::tests::dir_with_cert("serve-tls");
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

    /// A TLS client that sends its ClientHello a byte a second is dropped at the request's
    /// deadline: the TLS layer's own reads are bounded as a whole, not each on its own.
    #[test]
    fn a_dripping_tls_handshake_is_dropped_at_the_deadline() {
        let (dir, _) = crate::web_config::tests::dir_with_cert("serve-drip");
        let web = WebConfig::parse(
            "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n",
            &dir,
        )
        .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let m = Metrics::default();
        let e = Exporter::start("127.0.0.1:0".parse().unwrap(), web, m.page()).unwrap();
        let mut s = TcpStream::connect(e.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(900)))
            .unwrap();
        // A TLS record header, then a handshake message that never ends.
        let hello = [
            0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
        ];
        let start = Instant::now();
        let mut closed = None;
        for b in hello.iter().chain(std::iter::repeat(&0u8)).take(20) {
            if s.write_all(&[*b]).is_err() {
                closed = Some(start.elapsed());
                break;
            }
            let mut buf = [0u8; 64];
            match s.read(&mut buf) {
                Ok(0) => {
                    closed = Some(start.elapsed());
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    closed = Some(start.elapsed());
                    break;
                }
                _ => {} // (nothing yet: the read timed out)
            }
        }
        let closed = closed.expect("the connection outlived 20 s of dripping");
        assert!(
            closed < REQUEST_DEADLINE + Duration::from_secs(5),
            "closed after {closed:?}"
        );
    }
}
