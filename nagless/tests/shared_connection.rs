//! One connection, several writer threads, one reader thread (a Redis, gRPC or database
//! client's shape), through `FlushPolicy::clocked`: every request answered, in order, never
//! left in the stream's buffer, and never held for an ACK when nothing is in flight.
//!
//! Robust facts only: a hang is caught by generous timeouts (20 s), a stall is >= 30 ms
//! (Linux's delayed-ACK timer is 40 ms, the kernel's probe timer 200 ms), and segments are
//! never more than one per request (what `TCP_NODELAY` alone sends).

#![cfg(target_os = "linux")]
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nagless::{FlushPolicy, NaglessStream, Stats, TcpInfo, Urgency};

const SIZE: usize = 40;
const HEADER: usize = 10;
const LIMIT: Duration = Duration::from_secs(20);
const STALL: Duration = Duration::from_millis(30);

/// A counting semaphore whose waits give up after [`LIMIT`] (a hang becomes an error).
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

    fn acquire(&self) -> io::Result<()> {
        let guard = self.permits.lock().unwrap();
        let (mut n, timeout) = self
            .freed
            .wait_timeout_while(guard, LIMIT, |n| *n == 0)
            .unwrap();
        if timeout.timed_out() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer freed a slot: requests were left unsent",
            ));
        }
        *n -= 1;
        Ok(())
    }

    fn release(&self) {
        *self.permits.lock().unwrap() += 1;
        self.freed.notify_one();
    }
}

/// A server that answers every request with its own write of the same bytes (`TCP_NODELAY`
/// on, so that only the client's sending is under test; its ACKs are Linux's, delayed).
fn echo_server() -> (std::net::SocketAddr, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let h = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut req = [0u8; SIZE];
        while s.read_exact(&mut req).is_ok() {
            if s.write_all(&req).is_err() {
                return;
            }
        }
    });
    (addr, h)
}

struct Outcome {
    latencies: Vec<Duration>,
    stats: Stats,
    data_segs: u32,
}

/// `writers` threads send `per_writer` requests each through one `Mutex<NaglessStream>`
/// with `policy`, at most `depth` in flight; a reader thread reads the answers from a clone of
/// the socket and checks that each is the request of the same sequence number. `split`
/// writes each request as a header marked `MoreFollows` and a body.
fn multiplexed(
    policy: FlushPolicy,
    writers: usize,
    depth: usize,
    per_writer: usize,
    split: bool,
) -> Outcome {
    let (addr, server) = echo_server();
    let tcp = TcpStream::connect(addr).unwrap();
    let mut reader = tcp.try_clone().unwrap();
    reader.set_read_timeout(Some(LIMIT)).unwrap();
    let conn = Mutex::new((NaglessStream::with_policy(tcp, policy).unwrap(), 0u64));
    let slots = Semaphore::new(depth);
    let total = writers * per_writer;
    let start = Instant::now();
    let sent_at: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
    let latencies = thread::scope(|scope| {
        let answers = scope.spawn(|| -> io::Result<Vec<Duration>> {
            let mut lat = Vec::with_capacity(total);
            let mut answer = [0u8; SIZE];
            for seq in 0..total as u64 {
                reader.read_exact(&mut answer)?;
                let now = start.elapsed();
                let got = u64::from_le_bytes(answer[..8].try_into().unwrap());
                assert_eq!(
                    got, seq,
                    "answers come back in the order requests were written"
                );
                assert!(answer[8..].iter().all(|&b| b == b'q'), "bytes intact");
                let at = sent_at[seq as usize].load(Ordering::Acquire);
                lat.push(now.saturating_sub(Duration::from_nanos(at)));
                slots.release();
            }
            Ok(lat)
        });
        let sending: Vec<_> = (0..writers)
            .map(|_| {
                scope.spawn(|| -> io::Result<()> {
                    for _ in 0..per_writer {
                        slots.acquire()?;
                        let mut guard = conn.lock().unwrap();
                        let (stream, next) = &mut *guard;
                        let mut req = [b'q'; SIZE];
                        req[..8].copy_from_slice(&next.to_le_bytes());
                        sent_at[*next as usize]
                            .store(start.elapsed().as_nanos() as u64, Ordering::Release);
                        *next += 1;
                        if split {
                            stream.write_with(&req[..HEADER], Urgency::MoreFollows)?;
                            stream.write_all(&req[HEADER..])?;
                        } else {
                            // No flush: the policy hands every write to the kernel.
                            stream.write_all(&req)?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for w in sending {
            w.join().unwrap().expect("writer");
        }
        answers.join().unwrap().expect("every request answered")
    });
    let guard = conn.into_inner().unwrap();
    let stream = guard.0;
    let stats = stream.stats().clone();
    let data_segs = TcpInfo::of(stream.get_ref())
        .unwrap()
        .data_segs_out
        .unwrap_or(0);
    assert_eq!(stream.pending(), 0, "nothing left in the stream");
    drop((stream, reader)); // both handles: the server sees the end of input
    server.join().unwrap();
    Outcome {
        latencies,
        stats,
        data_segs,
    }
}

#[test]
fn writer_threads_and_a_reader_thread_share_one_connection() {
    let (writers, per_writer) = (4, 500);
    let total = (writers * per_writer) as u64;
    let o = multiplexed(FlushPolicy::clocked(), writers, 64, per_writer, false);
    assert_eq!(o.latencies.len() as u64, total);
    assert_eq!(o.stats.writes, total);
    assert_eq!(o.stats.bytes_sent, total * SIZE as u64);
    // At most one segment per request: never more than TCP_NODELAY alone sends.
    assert!(
        u64::from(o.data_segs) <= total,
        "{} data segments for {total} requests",
        o.data_segs
    );
    eprintln!(
        "{total} requests: {} data segments, {} held for an ACK, {} pushes, {} syscalls",
        o.data_segs, o.stats.held_for_ack, o.stats.pushes, o.stats.syscalls
    );
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn with_nothing_in_flight_no_request_waits_for_a_timer() {
        // One request in flight at a time: every write finds nothing unacknowledged (the answer
        // that freed its slot acknowledged the request before it), so it must leave at once. A
        // request held for an ACK here would wait for the peer's 40 ms timer or the kernel's
        // 200 ms probe. The header is marked MoreFollows: the request leaves whole.
        for split in [false, true] {
            let o = multiplexed(FlushPolicy::clocked(), 4, 1, 25, split);
            // Most of them would (a loaded machine may delay a few by as much).
            let mut waits = o.latencies.clone();
            waits.sort();
            let middle = waits[waits.len() / 2];
            assert!(
                middle < STALL,
                "split {split}: the median request waited {middle:?}: {:?}",
                o.latencies
            );
            assert_eq!(o.latencies.len(), 100);
            // One segment per request, the split ones included.
            assert!(
                o.data_segs <= 100,
                "split {split}: {} segments",
                o.data_segs
            );
        }
    }
}
