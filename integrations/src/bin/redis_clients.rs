//! redis-rs's `MultiplexedConnection` (issue 56): TASKS tokio tasks share one connection to a
//! redis server, each making small SETs and GETs in turn, over the stream of each mode: the
//! kernel's defaults (Nagle on), `TCP_NODELAY`, nagless's default policy and
//! `FlushPolicy::clocked`, modes in turn, ROUNDS times. Per run: requests per second, the
//! median and 99th-percentile request, and the client's data segments per request (the
//! socket's `tcpi_data_segs_out`, read through a second descriptor of it).
//!
//! usage: redis_clients PORT [REQUESTS] [ROUNDS] [TASKS] [PIECES]   (default 200,000, 3, 32, 1)
//! MODES=kernel,clocked (say) runs only the modes named.
//! PIECES 2 hands each of redis-rs's flushes to the socket in two writes (a stream wrapper
//! that splits `poll_write`), as a client that writes a request in pieces does.
//! Needs a redis server on 127.0.0.1:PORT (scripts/bench-clients starts one).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Kernel,
    Nodelay,
    Nagless,
    Clocked,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Kernel, Mode::Nodelay, Mode::Nagless, Mode::Clocked];
    fn name(self) -> &'static str {
        match self {
            Mode::Kernel => "kernel",
            Mode::Nodelay => "nodelay",
            Mode::Nagless => "nagless",
            Mode::Clocked => "clocked",
        }
    }
}

/// A stream that hands each write to the one under it in `pieces` parts (the first
/// `pieces - 1` a few bytes each), as a client that writes a request in pieces does.
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
        // A flush's first write: a few bytes; the caller writes the rest next (a partial
        // write), so that each flush reaches the stream as two writes.
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

type Boxed = Pin<Box<dyn AsyncReadWrite>>;
trait AsyncReadWrite: AsyncRead + AsyncWrite + Send {}
impl<T: AsyncRead + AsyncWrite + Send> AsyncReadWrite for T {}

struct Run {
    rate: f64,
    p50_us: f64,
    p99_us: f64,
    segs_per_req: f64,
}

async fn run(
    port: u16,
    mode: Mode,
    requests: u64,
    tasks: usize,
    pieces: usize,
) -> Result<Run, String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let raw = tcp.into_std().map_err(|e| e.to_string())?;
    let probe = raw.try_clone().map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::from_std(raw).map_err(|e| e.to_string())?;
    let segs = || {
        use std::os::fd::AsFd;
        nagless::TcpInfo::of(&probe.as_fd())
            .ok()
            .and_then(|i| i.data_segs_out)
            .map_or(0, u64::from)
    };
    let stream: Boxed = match mode {
        Mode::Kernel => Box::pin(Pieces {
            inner: tcp,
            pieces,
            first: true,
        }),
        Mode::Nodelay => {
            tcp.set_nodelay(true).map_err(|e| e.to_string())?;
            Box::pin(Pieces {
                inner: tcp,
                pieces,
                first: true,
            })
        }
        Mode::Nagless | Mode::Clocked => {
            let policy = if mode == Mode::Clocked {
                nagless::FlushPolicy::clocked()
            } else {
                nagless::FlushPolicy::default()
            };
            let s = nagless::tokio_adapter::NaglessStream::with_policy(tcp, policy)
                .map_err(|e| e.to_string())?;
            Box::pin(Pieces {
                inner: s,
                pieces,
                first: true,
            })
        }
    };
    let info = redis::RedisConnectionInfo::default();
    let (conn, driver) = redis::aio::MultiplexedConnection::new(&info, stream)
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(driver);
    let before = segs();
    let left = Arc::new(AtomicU64::new(requests));
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let mut conn = conn.clone();
        let left = Arc::clone(&left);
        handles.push(tokio::spawn(async move {
            let key = format!("nagless:{t}");
            let mut times = Vec::new();
            let mut i = 0u64;
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                let t0 = Instant::now();
                let r: redis::RedisResult<()> = if i.is_multiple_of(2) {
                    redis::cmd("SET")
                        .arg(&key)
                        .arg("v")
                        .query_async(&mut conn)
                        .await
                } else {
                    redis::cmd("GET")
                        .arg(&key)
                        .query_async::<Option<String>>(&mut conn)
                        .await
                        .map(drop)
                };
                r.map_err(|e| e.to_string())?;
                times.push(t0.elapsed());
                i += 1;
            }
            Ok::<_, String>(times)
        }));
    }
    let mut times = Vec::new();
    for h in handles {
        times.extend(h.await.map_err(|e| e.to_string())??);
    }
    let took = start.elapsed();
    let sent = segs() - before;
    drop(conn);
    driver.abort();
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    Ok(Run {
        rate: requests as f64 / took.as_secs_f64(),
        p50_us: at(0.5).as_secs_f64() * 1e6,
        p99_us: at(0.99).as_secs_f64() * 1e6,
        segs_per_req: sent as f64 / requests as f64,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let Some(port) = a.first().and_then(|s| s.parse::<u16>().ok()) else {
        eprintln!("usage: redis_clients PORT [REQUESTS] [ROUNDS] [TASKS] [PIECES]");
        return std::process::ExitCode::from(2);
    };
    let (requests, rounds, tasks, pieces) = (
        num(1, 200_000),
        num(2, 3),
        num(3, 32) as usize,
        num(4, 1) as usize,
    );
    println!("redis-rs MultiplexedConnection: {tasks} tasks, {requests} requests per run, {rounds} rounds, {pieces} write(s) per flush");
    println!(
        "{:<8} {:>12} {:>9} {:>9} {:>10}",
        "mode", "requests/s", "p50 µs", "p99 µs", "segs/req"
    );
    // MODES (a comma-separated list of mode names) runs only those.
    let only = std::env::var("MODES").ok();
    let modes: Vec<Mode> = Mode::ALL
        .into_iter()
        .filter(|m| only.as_deref().is_none_or(|o| o.split(',').any(|n| n == m.name())))
        .collect();
    for _ in 0..rounds {
        for &mode in &modes {
            match run(port, mode, requests, tasks, pieces).await {
                Ok(r) => println!(
                    "{:<8} {:>12.0} {:>9.1} {:>9.1} {:>10.3}",
                    mode.name(),
                    r.rate,
                    r.p50_us,
                    r.p99_us,
                    r.segs_per_req
                ),
                Err(e) => {
                    eprintln!("{}: {e}", mode.name());
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
    }
    std::process::ExitCode::SUCCESS
}
