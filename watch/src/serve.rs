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

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
    /// Binds `addr` (the error names it when it is in use) and serves what `page` returns.
    pub fn start(
        addr: SocketAddr,
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
                    let (page, mine) = (Arc::clone(&page), Arc::clone(&open));
                    let spawned = std::thread::Builder::new()
                        .name("metrics-client".into())
                        .stack_size(128 * 1024)
                        .spawn(move || {
                            // A client that fails or goes away is its own problem.
                            let _ = respond(s, &*page);
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
    head.lines().skip(1).any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("accept")
                && v.to_ascii_lowercase()
                    .contains("application/openmetrics-text")
        })
    })
}

/// Reads the request's head (up to its blank line, at most [`MAX_HEAD`]) by `deadline`.
fn read_head(s: &mut TcpStream, deadline: Instant) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(head)
}

fn respond(mut s: TcpStream, page: &dyn Fn() -> String) -> io::Result<()> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let head = read_head(&mut s, deadline)?;
    let head = String::from_utf8_lossy(&head);
    let (status, ctype, body) = match request_line(&head) {
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
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head.starts_with("HEAD ") {
        out += &body;
    }
    // The answer has the same time again to be read.
    s.set_write_timeout(Some(REQUEST_DEADLINE))?;
    s.write_all(out.as_bytes())?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

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
        let mut m = Metrics::new();
        m.watcher(Duration::from_millis(1500), 42);
        let e = Exporter::start("127.0.0.1:0".parse().unwrap(), m.page()).unwrap();
        let ok = get(e.addr(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("nagless_watch_cpu_seconds_total 1.5"), "{ok}");
        assert!(ok.contains("nagless_watch_sockets 42"), "{ok}");
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
        let err = Exporter::start(e.addr(), m.page()).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains(&e.addr().to_string()), "{err}");
    }

    /// 200 idle connections and a few that send a byte every 300 ms hold the server while
    /// twenty scrapes are made: every scrape is answered, each within a second (generous: it
    /// takes about a millisecond), and no more than MAX_CONNECTIONS threads serve at once.
    #[test]
    fn idle_and_slow_clients_cannot_hold_up_a_scrape() {
        let m = Metrics::new();
        let e = Exporter::start("127.0.0.1:0".parse().unwrap(), m.page()).unwrap();
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
}
