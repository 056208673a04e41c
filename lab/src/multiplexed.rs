//! The `multiplexed` case (issue 42's ACK-clocked connection): `writers` client threads share
//! one connection, as a Redis, gRPC or database client shares one between tasks. Each
//! request is one 40-byte write under a lock, at most `depth` requests are in flight (a
//! semaphore), and one reader thread receives the 40-byte answers, which the server writes
//! one per request (as Redis answers each command). No thread that writes ever waits on the
//! socket: writers wait on the lock and the semaphore, and the reader was already waiting in
//! `recv` before a request was written. With Nagle on, requests leave when an ACK comes in:
//! the peer clocks them.
//!
//! What each strategy does on the client, where a "burst" is the one request a writer writes
//! (a shared connection has no longer burst any thread knows of):
//!
//! | strategy | client |
//! |---|---|
//! | `nagle` | kernel default: Nagle holds a request while a small one is unacknowledged |
//! | `nodelay` | `TCP_NODELAY`: every request leaves at once, a segment each |
//! | `cork` | `TCP_CORK` set before each request and cleared after it; Nagle stays on, so the uncorked request follows Nagle's clock |
//! | `msgmore` | `TCP_NODELAY`, and `MSG_MORE` on all but the last write of a burst: a request is one write, the last of its burst, so this is `nodelay` |
//! | `quickack` | kernel default sender; the reader re-arms `TCP_QUICKACK` after every read (and the server after each of its reads) |
//! | `nagless` | the library's `FlushPolicy::clocked()` stream in a `Mutex`, the reader on a clone of the socket |
//!
//! The server is the lab's usual `Conn` with the same strategy (the nagless server: the
//! default policy, so answers to requests read together leave together). Latency runs from
//! the writer taking its turn under the lock to the reader holding the answer.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use nagless::{FlushPolicy, NaglessStream, TcpInfo};
use socket2::SockRef;

use crate::harness::{ClientReport, Setup, SideCost, IO_TIMEOUT};
use crate::strategy::{Burst, Conn, Strategy};
use crate::sys;

/// Bytes of a request and of an answer.
pub(crate) const SIZE: usize = 40;

/// A counting semaphore (std has none): the client's limit of requests in flight.
struct Semaphore {
    permits: Mutex<usize>,
    freed: Condvar,
}

impl Semaphore {
    fn new(n: usize) -> Self {
        Semaphore {
            permits: Mutex::new(n),
            freed: Condvar::new(),
        }
    }

    /// Takes a permit; `TimedOut` after [`IO_TIMEOUT`] (requests that never left).
    fn acquire(&self) -> io::Result<()> {
        let guard = self.permits.lock().unwrap_or_else(|p| p.into_inner());
        let (mut n, waited) = self
            .freed
            .wait_timeout_while(guard, IO_TIMEOUT, |n| *n == 0)
            .unwrap_or_else(|p| p.into_inner());
        if waited.timed_out() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer came back for the requests in flight",
            ));
        }
        *n -= 1;
        Ok(())
    }

    fn release(&self, k: usize) {
        *self.permits.lock().unwrap_or_else(|p| p.into_inner()) += k;
        self.freed.notify_all();
    }
}

/// The client's writing end, as the strategy writes a request.
enum Writer {
    Plain {
        tcp: TcpStream,
        strategy: Strategy,
        syscalls: u64,
    },
    Nagless(Box<NaglessStream<TcpStream>>),
}

impl Writer {
    fn new(tcp: TcpStream, strategy: Strategy) -> io::Result<Writer> {
        Ok(match strategy {
            Strategy::Nagless => Writer::Nagless(Box::new(NaglessStream::with_policy(
                tcp,
                FlushPolicy::clocked(),
            )?)),
            Strategy::Nodelay | Strategy::Msgmore => {
                tcp.set_nodelay(true)?;
                Writer::Plain {
                    tcp,
                    strategy,
                    syscalls: 1,
                }
            }
            Strategy::Nagle | Strategy::Cork | Strategy::Quickack | Strategy::Run => {
                Writer::Plain {
                    tcp,
                    strategy,
                    syscalls: 0,
                }
            }
        })
    }

    /// Writes one request (the last write of its burst).
    fn request(&mut self, req: &[u8]) -> io::Result<()> {
        match self {
            Writer::Nagless(s) => s.write_all(req),
            Writer::Plain {
                tcp,
                strategy,
                syscalls,
            } => {
                let cork = *strategy == Strategy::Cork;
                if cork {
                    SockRef::from(&*tcp).set_tcp_cork(true)?;
                    *syscalls += 1;
                }
                let mut left = req;
                while !left.is_empty() {
                    let n = match SockRef::from(&*tcp).send_with_flags(left, libc::MSG_NOSIGNAL) {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        r => r?,
                    };
                    *syscalls += 1;
                    if n == 0 {
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                    left = &left[n..];
                }
                if cork {
                    SockRef::from(&*tcp).set_tcp_cork(false)?;
                    *syscalls += 1;
                }
                Ok(())
            }
        }
    }

    /// No more requests: the server sees the end of input once everything is sent.
    fn finish(&mut self) -> io::Result<()> {
        match self {
            Writer::Nagless(s) => s.shutdown(Shutdown::Write),
            Writer::Plain { tcp, .. } => tcp.shutdown(Shutdown::Write),
        }
    }

    fn syscalls(&self) -> u64 {
        match self {
            Writer::Nagless(s) => s.stats().syscalls,
            Writer::Plain { syscalls, .. } => *syscalls,
        }
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            Writer::Nagless(s) => s.get_ref(),
            Writer::Plain { tcp, .. } => tcp,
        }
    }
}

/// The writers' shared state: the connection and the next request's number.
struct Shared {
    writer: Writer,
    next: usize,
}

/// Runs `requests` requests (fewer if `limit` passes first) from `writers` threads with at
/// most `depth` in flight.
pub(crate) fn run(
    writers: usize,
    depth: usize,
    requests: usize,
    strategy: Strategy,
    setup: Setup<'_>,
    limit: Duration,
) -> io::Result<(ClientReport, SideCost, SideCost)> {
    let writers = writers.max(1);
    let listener = crate::harness::listener(&setup)?;
    let addr = listener.local_addr()?;
    std::thread::scope(|scope| {
        let server = scope.spawn(move || -> io::Result<SideCost> {
            if let Some(cpu) = setup.pin {
                sys::pin_to_cpu(cpu);
            }
            let cpu0 = sys::thread_cpu_us();
            let (tcp, _) = listener.accept()?;
            tcp.set_read_timeout(Some(IO_TIMEOUT))?;
            let mut conn = Conn::new(tcp, strategy)?;
            let mut req = [0u8; SIZE];
            loop {
                match conn.recv_exact(&mut req) {
                    Ok(()) => {}
                    Err(e) if crate::harness::peer_ended(&e) => break,
                    Err(e) => return Err(e),
                }
                conn.send(&req, Burst::Last)?;
            }
            let _ = conn.finish();
            crate::harness::side_cost(&conn, cpu0)
        });
        let client = client(writers, depth, requests, strategy, setup, addr, limit);
        if client.is_err() {
            // Unblock a server still waiting in accept.
            let _ = crate::harness::connect(&setup, addr);
        }
        let server = server
            .join()
            .map_err(|_| io::Error::other("server thread panicked"))?;
        let (report, cost) = client?;
        Ok((report, cost, server?))
    })
}

fn client(
    writers: usize,
    depth: usize,
    requests: usize,
    strategy: Strategy,
    setup: Setup<'_>,
    addr: std::net::SocketAddr,
    limit: Duration,
) -> io::Result<(ClientReport, SideCost)> {
    if let Some(cpu) = setup.pin {
        sys::pin_to_cpu(cpu);
    }
    let cpu_us = AtomicU64::new(0);
    let cpu0 = sys::thread_cpu_us();
    let tcp = crate::harness::connect(&setup, addr)?;
    let mut reader = tcp.try_clone()?;
    reader.set_read_timeout(Some(IO_TIMEOUT))?;
    let shared = Mutex::new(Shared {
        writer: Writer::new(tcp, strategy)?,
        next: 0,
    });
    let slots = Semaphore::new(depth.max(1));
    // When each request was written, ns after `start` (answers come back in order).
    let sent_at: Vec<AtomicU64> = (0..requests).map(|_| AtomicU64::new(0)).collect();
    let written = AtomicUsize::new(0);
    let start = Instant::now();
    let thread_start = || {
        if let Some(cpu) = setup.pin {
            sys::pin_to_cpu(cpu);
        }
        sys::thread_cpu_us()
    };
    let (latencies, reads) = std::thread::scope(|scope| -> io::Result<(Vec<u64>, u64)> {
        let answers = scope.spawn(|| -> io::Result<(Vec<u64>, u64)> {
            let t0 = thread_start();
            let mut lat = Vec::with_capacity(requests);
            let mut buf = vec![0u8; 64 * 1024];
            let (mut bytes, mut reads) = (0usize, 0u64);
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                reads += 1;
                if strategy == Strategy::Quickack {
                    SockRef::from(&reader).set_tcp_quickack(true)?;
                    reads += 1;
                }
                let now = start.elapsed().as_nanos() as u64;
                let done = bytes / SIZE;
                bytes += n;
                let answered = (bytes / SIZE).min(requests);
                for at in &sent_at[done.min(answered)..answered] {
                    lat.push(now.saturating_sub(at.load(Ordering::Acquire)) / 1000);
                }
                slots.release(answered.saturating_sub(done));
            }
            cpu_us.fetch_add(sys::thread_cpu_us().saturating_sub(t0), Ordering::Relaxed);
            Ok((lat, reads))
        });
        let sending: Vec<_> = (0..writers)
            .map(|_| {
                scope.spawn(|| -> io::Result<()> {
                    let t0 = thread_start();
                    let mut req = [b'q'; SIZE];
                    loop {
                        slots.acquire()?;
                        let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                        if g.next >= requests || start.elapsed() > limit {
                            // The permit goes back: another writer waiting for one must see
                            // the end too.
                            slots.release(1);
                            break;
                        }
                        let seq = g.next;
                        g.next += 1;
                        req[..8].copy_from_slice(&(seq as u64).to_le_bytes());
                        sent_at[seq].store(start.elapsed().as_nanos() as u64, Ordering::Release);
                        g.writer.request(&req)?;
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                    cpu_us.fetch_add(sys::thread_cpu_us().saturating_sub(t0), Ordering::Relaxed);
                    Ok(())
                })
            })
            .collect();
        let mut failed = None;
        for w in sending {
            let r = w
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("writer thread panicked")));
            if let Err(e) = r {
                failed.get_or_insert(e);
            }
        }
        // Every writer is done: the end of input lets the server finish and close, and the
        // reader then sees the end of the answers.
        let finish = shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .writer
            .finish();
        let answers = answers
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("reader thread panicked")));
        if let Some(e) = failed {
            return Err(e);
        }
        finish?;
        answers
    })?;
    let written = written.into_inner();
    if latencies.len() != written {
        return Err(io::Error::other(format!(
            "{written} requests written, {} answered",
            latencies.len()
        )));
    }
    let shared = shared.into_inner().unwrap_or_else(|p| p.into_inner());
    let info = TcpInfo::of(shared.writer.tcp())?;
    let cost = SideCost {
        data_segs: info.data_segs_out.unwrap_or(0) as u64,
        segs: info.segs_out.unwrap_or(0) as u64,
        bytes: info.bytes_sent.unwrap_or(0),
        syscalls: shared.writer.syscalls() + reads,
        cpu_us: cpu_us.into_inner() + sys::thread_cpu_us().saturating_sub(cpu0),
    };
    Ok((
        ClientReport {
            work: latencies.len() as f64,
            latencies_us: latencies,
        },
        cost,
    ))
}
