//! Real async client libraries over each stream (issue 56): what the client binaries
//! (`redis_clients`, `pg_clients`, `h2_clients`) share. Each hands its library one connection
//! made by [`connect`] in a [`Way`], lets TASKS tokio tasks make requests on it until a shared
//! count runs out ([`drive`]), and prints a row per run ([`Table`]): requests per second, the
//! median and 99th-percentile request, and the client's data segments per request (the
//! socket's `tcpi_data_segs_out`, read through a second descriptor of it).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How the client's connection is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The kernel's defaults (Nagle on).
    Kernel,
    /// `TCP_NODELAY` set.
    Nodelay,
    /// nagless's default policy.
    Nagless,
    /// nagless's default policy with `clock_answered(false)`: every flush sent at once.
    Flushes,
    /// `FlushPolicy::clocked`.
    Clocked,
}

impl Way {
    /// Every way, in table order.
    pub const ALL: [Way; 5] = [
        Way::Kernel,
        Way::Nodelay,
        Way::Nagless,
        Way::Flushes,
        Way::Clocked,
    ];

    /// Its name in tables (and in `MODES`).
    pub fn name(self) -> &'static str {
        match self {
            Way::Kernel => "kernel",
            Way::Nodelay => "nodelay",
            Way::Nagless => "nagless",
            Way::Flushes => "flushes",
            Way::Clocked => "clocked",
        }
    }

    /// The ways to run: those `MODES` names (comma-separated), or all.
    pub fn chosen() -> Vec<Way> {
        let only = std::env::var("MODES").ok();
        Way::ALL
            .into_iter()
            .filter(|w| {
                only.as_deref()
                    .is_none_or(|o| o.split(',').any(|n| n == w.name()))
            })
            .collect()
    }
}

/// A client's stream, whatever the way.
pub type Boxed = Pin<Box<dyn AsyncReadWrite>>;

/// What a client library needs of its stream.
pub trait AsyncReadWrite: AsyncRead + AsyncWrite + Send {}
impl<T: AsyncRead + AsyncWrite + Send> AsyncReadWrite for T {}

/// A stream that hands each flush's first write to the one under it in two parts (8 bytes,
/// then the rest as the caller's next write), as a client that writes a request in pieces
/// does; `pieces` 1 passes every write through.
struct Pieces<S> {
    inner: S,
    pieces: usize,
    /// The next write is the first since a flush: it is the one cut.
    first: bool,
}

impl<S: AsyncRead + Unpin> AsyncRead for Pieces<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Pieces<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let cut = if self.pieces > 1 && self.first && buf.len() > 8 {
            8
        } else {
            buf.len()
        };
        let r = Pin::new(&mut self.inner).poll_write(cx, &buf[..cut]);
        if r.is_ready() {
            self.first = false;
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.first = true;
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Counts the data segments a socket sent, through a second descriptor of it.
pub struct Segments(std::net::TcpStream);

impl Segments {
    /// Data segments sent so far.
    pub fn now(&self) -> u64 {
        use std::os::fd::AsFd;
        nagless::TcpInfo::of(&self.0.as_fd())
            .ok()
            .and_then(|i| i.data_segs_out)
            .map_or(0, u64::from)
    }
}

/// Connects to 127.0.0.1:`port` and makes the stream `way` gives, each flush written in
/// `pieces` writes; with its segment counter.
pub async fn connect(port: u16, way: Way, pieces: usize) -> Result<(Boxed, Segments), String> {
    let e = |e: io::Error| e.to_string();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(e)?;
    let raw = tcp.into_std().map_err(e)?;
    let probe = Segments(raw.try_clone().map_err(e)?);
    let tcp = tokio::net::TcpStream::from_std(raw).map_err(e)?;
    let wrap = |inner| Pieces {
        inner,
        pieces,
        first: true,
    };
    let stream: Boxed = match way {
        Way::Kernel => Box::pin(wrap(tcp)),
        Way::Nodelay => {
            tcp.set_nodelay(true).map_err(e)?;
            Box::pin(wrap(tcp))
        }
        Way::Nagless | Way::Flushes | Way::Clocked => {
            let policy = match way {
                Way::Clocked => nagless::FlushPolicy::clocked(),
                Way::Flushes => nagless::FlushPolicy::default().clock_answered(false),
                _ => nagless::FlushPolicy::default(),
            };
            let s = nagless::tokio_adapter::NaglessStream::with_policy(tcp, policy).map_err(e)?;
            Box::pin(Pieces {
                inner: s,
                pieces,
                first: true,
            })
        }
    };
    Ok((stream, probe))
}

/// One run's figures.
pub struct Run {
    pub rate: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub segs_per_req: f64,
}

/// `tasks` tokio tasks, each with a clone of `client`, make requests (`request(client, i)`,
/// `i` counting the task's own) until `requests` have been made in all; the run's figures,
/// the segments counted by `segments`.
pub async fn drive<C, F, Fut>(
    client: C,
    segments: &Segments,
    requests: u64,
    tasks: usize,
    request: F,
) -> Result<Run, String>
where
    C: Clone + Send + 'static,
    F: Fn(C, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let before = segments.now();
    let left = Arc::new(AtomicU64::new(requests));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, left, request) = (client.clone(), Arc::clone(&left), request.clone());
        handles.push(tokio::spawn(async move {
            let mut times = Vec::new();
            let mut i = 0u64;
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                let t0 = Instant::now();
                request(client.clone(), i).await?;
                times.push(t0.elapsed());
                i += 1;
            }
            Ok::<_, String>(times)
        }));
    }
    let mut times: Vec<Duration> = Vec::new();
    for h in handles {
        times.extend(h.await.map_err(|e| e.to_string())??);
    }
    let took = start.elapsed();
    let sent = segments.now() - before;
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    Ok(Run {
        rate: requests as f64 / took.as_secs_f64(),
        p50_us: at(0.5).as_secs_f64() * 1e6,
        p99_us: at(0.99).as_secs_f64() * 1e6,
        segs_per_req: sent as f64 / requests as f64,
    })
}

/// The command line every client binary takes: PORT [REQUESTS] [ROUNDS] [TASKS] [PIECES].
pub struct Args {
    pub port: u16,
    pub requests: u64,
    pub rounds: u64,
    pub tasks: usize,
    pub pieces: usize,
}

impl Args {
    /// Parses the arguments, or says how to call `name` (exit status 2).
    pub fn parse(name: &str, default_requests: u64) -> Result<Args, std::process::ExitCode> {
        let a: Vec<String> = std::env::args().skip(1).collect();
        let num = |i: usize, d: u64| -> Option<u64> {
            match a.get(i) {
                None => Some(d),
                Some(s) => s.parse().ok(),
            }
        };
        let parsed = a
            .first()
            .and_then(|s| s.parse::<u16>().ok())
            .and_then(|port| {
                Some(Args {
                    port,
                    requests: num(1, default_requests)?.max(1),
                    rounds: num(2, 3)?,
                    tasks: num(3, 32)?.max(1) as usize,
                    pieces: num(4, 1)?.clamp(1, 2) as usize,
                })
            });
        parsed.ok_or_else(|| {
            eprintln!("usage: {name} PORT [REQUESTS] [ROUNDS] [TASKS] [PIECES 1|2]");
            std::process::ExitCode::from(2)
        })
    }
}

/// The table the client binaries print.
pub struct Table;

impl Table {
    /// Its title and header.
    pub fn start(what: &str, a: &Args) {
        println!(
            "{what}: {} tasks, {} requests per run, {} rounds, {} write(s) per flush",
            a.tasks, a.requests, a.rounds, a.pieces
        );
        println!(
            "{:<8} {:>12} {:>9} {:>9} {:>10}",
            "mode", "requests/s", "p50 µs", "p99 µs", "segs/req"
        );
    }

    /// One run's row.
    pub fn row(way: Way, r: &Run) {
        println!(
            "{:<8} {:>12.0} {:>9.1} {:>9.1} {:>10.3}",
            way.name(),
            r.rate,
            r.p50_us,
            r.p99_us,
            r.segs_per_req
        );
    }
}

/// Runs `run` for every chosen way, ROUNDS times, printing a row each; fails on the first
/// run that fails.
pub async fn rounds<F, Fut>(what: &str, a: &Args, run: F) -> std::process::ExitCode
where
    F: Fn(Way) -> Fut,
    Fut: Future<Output = Result<Run, String>>,
{
    Table::start(what, a);
    for _ in 0..a.rounds {
        for way in Way::chosen() {
            match run(way).await {
                Ok(r) => Table::row(way, &r),
                Err(e) => {
                    eprintln!("{}: {e}", way.name());
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
