//! `FlushPolicy::clocked` through the streams other than the std one (whose tests are in
//! `shared_connection.rs`): the tokio adapter, the std TLS stream and the tokio TLS stream,
//! on 127.0.0.1. Every write is handed to the kernel when it is made (nothing is left in the
//! stream), the send queue is asked (the hand-over is clocked, not merely immediate),
//! answers come back whole and in order, and with one request in flight none waits for a
//! timer.
//!
//! Robust facts only: a stall is >= 30 ms (Linux's delayed-ACK timer is 40 ms, the kernel's
//! probe timer 200 ms), and a request held for an ACK would wait so in most exchanges, so the
//! median is held below it (a loaded machine may delay a few by as much); a hang is caught by
//! generous timeouts.
#![cfg(all(target_os = "linux", feature = "tokio"))]
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use nagless::tokio_adapter::NaglessStream;
use nagless::FlushPolicy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SIZE: usize = 40;
const STALL: Duration = Duration::from_millis(30);
const LIMIT: Duration = Duration::from_secs(20);

/// The middle of `waits`.
fn median(mut waits: Vec<Duration>) -> Duration {
    waits.sort();
    waits[waits.len() / 2]
}

/// A server that answers every request with its own write of the same bytes.
fn echo_server() -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let h = std::thread::spawn(move || {
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

fn request(seq: u64) -> [u8; SIZE] {
    let mut req = [b'q'; SIZE];
    req[..8].copy_from_slice(&seq.to_le_bytes());
    req
}

/// The tokio adapter, split: a writer task pipelines requests (no flush: the policy hands
/// every write to the kernel), the read half reads the answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_clocked_writes_reach_the_kernel_at_once_and_in_order() {
    let (addr, server) = echo_server();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let s = NaglessStream::with_policy(tcp, FlushPolicy::clocked()).unwrap();
    let (mut rd, mut wr) = s.into_split();
    const N: u64 = 2000;
    let writer = tokio::spawn(async move {
        for seq in 0..N {
            wr.write_all(&request(seq)).await.unwrap();
            assert_eq!(wr.pending(), 0, "no byte waits in the stream");
            if seq % 64 == 63 {
                tokio::task::yield_now().await;
            }
        }
        wr
    });
    let mut answer = [0u8; SIZE];
    for seq in 0..N {
        tokio::time::timeout(LIMIT, rd.read_exact(&mut answer))
            .await
            .expect("every request answered")
            .unwrap();
        assert_eq!(answer, request(seq), "answers in order, bytes intact");
    }
    let wr = writer.await.unwrap();
    let stats = wr.stats();
    assert_eq!(stats.writes, N);
    assert_eq!(stats.bytes_sent, N * SIZE as u64);
    assert!(
        stats.clock_checks > 0,
        "the hand-over was clocked: {stats:?}"
    );
    let segs = wr.tcp_info().unwrap().data_segs_out.unwrap_or(0);
    assert!(
        u64::from(segs) <= N,
        "{segs} data segments for {N} requests"
    );
    eprintln!(
        "tokio clocked: {N} requests, {segs} data segments, {} held for an ACK, {} pushes",
        stats.held_for_ack, stats.pushes
    );
    drop((rd, wr));
    server.join().unwrap();
}

#[cfg(feature = "tls")]
mod tls_support;

#[cfg(feature = "tls")]
mod tls {
    use super::*;

    use super::tls_support::{self, pki, Peer, ANSWER, ANSWER_LEN};

    /// The client: `rounds` requests, each answer read back and timed; the median wait.
    fn client(addr: std::net::SocketAddr, cfg: std::sync::Arc<rustls::ClientConfig>) -> Duration {
        let mut p = Peer::connect(addr, cfg);
        // A first round that is not timed (the handshake's last flight may share it).
        p.write(b"GET\n");
        assert_eq!(p.read_exact(ANSWER_LEN).len(), ANSWER_LEN);
        let mut waits = Vec::new();
        for _ in 0..40 {
            let start = Instant::now();
            p.write(b"GET\n");
            p.read_answer();
            waits.push(start.elapsed());
        }
        p.conn.send_close_notify();
        p.send();
        median(waits)
    }

    /// Tests that run alone (docs/testing.md).
    mod alone {
        use super::*;

        /// The std TLS stream answers in three writes under `clocked`: each is sealed and handed
        /// to the kernel at once, and the turn to read sends what the kernel held.
        #[test]
        fn std_tls_clocked_answers_leave_without_waiting() {
            let pki = pki();
            let (l, addr) = tls_support::listen();
            let c = std::thread::spawn({
                let cfg = pki.client.clone();
                move || client(addr, cfg)
            });
            let (tcp, _) = l.accept().unwrap();
            let conn = rustls::ServerConnection::new(pki.server).unwrap();
            let mut tls =
                nagless::tls::TlsStream::with_policy(conn, tcp, FlushPolicy::clocked()).unwrap();
            let mut req = [0u8; 4];
            loop {
                match tls.read(&mut req) {
                    Ok(0) => break,
                    Ok(n) => assert_eq!(n, 4),
                    Err(e) => panic!("server read: {e}"),
                }
                for part in ANSWER {
                    tls.write_all(part).unwrap();
                    assert_eq!(tls.pending(), 0, "no plaintext waits in the stream");
                }
            }
            let middle = c.join().unwrap();
            assert!(middle < STALL, "the median answer waited {middle:?}");
            let stats = tls.stats().clone();
            assert!(
                stats.clock_checks > 0,
                "the hand-over was clocked: {stats:?}"
            );
            eprintln!(
                "std tls clocked: median answer {middle:?}, {} held for an ACK, {} pushes",
                stats.held_for_ack, stats.pushes
            );
        }

        /// The tokio TLS stream, likewise.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn tokio_tls_clocked_answers_leave_without_waiting() {
            let pki = pki();
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let c = std::thread::spawn({
                let cfg = pki.client.clone();
                move || client(addr, cfg)
            });
            let (tcp, _) = l.accept().await.unwrap();
            let conn = rustls::ServerConnection::new(pki.server).unwrap();
            let mut tls =
                nagless::tokio_tls::TlsStream::from_socket(conn, tcp, FlushPolicy::clocked())
                    .unwrap();
            let mut req = [0u8; 4];
            loop {
                match tokio::time::timeout(LIMIT, tls.read(&mut req))
                    .await
                    .unwrap()
                {
                    Ok(0) => break,
                    Ok(n) => assert_eq!(n, 4),
                    Err(e) => panic!("server read: {e}"),
                }
                for part in ANSWER {
                    tls.write_all(part).await.unwrap();
                    assert_eq!(tls.pending(), 0, "no plaintext waits in the stream");
                }
            }
            let middle = tokio::task::spawn_blocking(move || c.join().unwrap())
                .await
                .unwrap();
            assert!(middle < STALL, "the median answer waited {middle:?}");
            let stats = tls.stats();
            assert!(
                stats.clock_checks > 0,
                "the hand-over was clocked: {stats:?}"
            );
            eprintln!(
                "tokio tls clocked: median answer {middle:?}, {} held for an ACK, {} pushes",
                stats.held_for_ack, stats.pushes
            );
        }
    }
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    /// One request in flight at a time: each write finds nothing unacknowledged and must leave
    /// at once, never waiting for the peer's delayed ACK.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tokio_clocked_with_nothing_in_flight_no_request_waits_for_a_timer() {
        let (addr, server) = echo_server();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut s = NaglessStream::with_policy(tcp, FlushPolicy::clocked()).unwrap();
        let mut waits = Vec::new();
        let mut answer = [0u8; SIZE];
        for seq in 0..100 {
            let start = Instant::now();
            s.write_all(&request(seq)).await.unwrap();
            tokio::time::timeout(LIMIT, s.read_exact(&mut answer))
                .await
                .unwrap()
                .unwrap();
            waits.push(start.elapsed());
            assert_eq!(answer, request(seq));
        }
        let middle = median(waits);
        assert!(middle < STALL, "the median request waited {middle:?}");
        assert!(s.stats().clock_checks > 0, "{:?}", s.stats());
        drop(s);
        server.join().unwrap();
    }
}
