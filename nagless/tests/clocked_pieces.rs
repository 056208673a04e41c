//! `FlushPolicy::clocked` with requests written in pieces (a header, then a body in two
//! writes, then a flush: what a client codec does), through the std and the tokio stream on
//! 127.0.0.1: no request waits for the peer's delayed ACK, as none would under `TCP_NODELAY`,
//! through the tokio stream each leaves as one segment (it keeps a batch until its
//! `poll_flush`), and the answers come back whole and in order. Before the caller's flushes marked its batches, the second piece of
//! each request was held for the ACK of the first, which a server that waits for the whole
//! request delays (40 ms on Linux).
//!
//! Robust facts only: a stall is >= 30 ms; the middle round of 60 is held below it (a loaded
//! machine may delay a few rounds as much); a hang is caught by generous timeouts.
#![cfg(target_os = "linux")]
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use nagless::FlushPolicy;

const HEADER: usize = 24;
const BODY: usize = 40;
const ANSWER: usize = 32;
const ROUNDS: u64 = 60;
const STALL: Duration = Duration::from_millis(30);

/// A plain server (kernel defaults: delayed ACKs) that reads a whole request and answers it
/// with one write, its first bytes the request's sequence number.
fn server() -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut req = [0u8; HEADER + BODY];
        while s.read_exact(&mut req).is_ok() {
            let mut answer = [b'a'; ANSWER];
            answer[..8].copy_from_slice(&req[..8]);
            if s.write_all(&answer).is_err() {
                return;
            }
        }
    });
    (addr, h)
}

fn header(seq: u64) -> [u8; HEADER] {
    let mut h = [b'h'; HEADER];
    h[..8].copy_from_slice(&seq.to_le_bytes());
    h
}

fn median(mut waits: Vec<Duration>) -> Duration {
    waits.sort();
    waits[waits.len() / 2]
}

fn check(answer: &[u8; ANSWER], seq: u64) {
    assert_eq!(answer[..8], seq.to_le_bytes(), "answers in order");
    assert!(answer[8..].iter().all(|&b| b == b'a'), "bytes intact");
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn std_clocked_requests_in_pieces_never_wait_for_a_delayed_ack() {
        let (addr, server) = server();
        let tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        // The answers are read from a clone of the socket, as a multiplexed client's reader
        // thread reads them: the stream never sees a read that would wait.
        let mut answers = tcp.try_clone().unwrap();
        let mut s = nagless::NaglessStream::with_policy(tcp, FlushPolicy::clocked()).unwrap();
        let mut waits = Vec::new();
        let mut answer = [0u8; ANSWER];
        for seq in 0..ROUNDS {
            let start = Instant::now();
            s.write_all(&header(seq)).unwrap();
            s.write_all(&[b'b'; BODY / 2]).unwrap();
            s.write_all(&[b'b'; BODY / 2]).unwrap();
            s.flush().unwrap();
            answers.read_exact(&mut answer).unwrap();
            waits.push(start.elapsed());
            check(&answer, seq);
        }
        let middle = median(waits);
        assert!(middle < STALL, "the median request waited {middle:?}");
        assert!(s.stats().clock_checks > 0, "clocked: {:?}", s.stats());
        drop((s, answers));
        server.join().unwrap();
    }

    #[cfg(feature = "tokio")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tokio_clocked_requests_in_pieces_never_wait_for_a_delayed_ack() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (addr, server) = server();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let s = nagless::tokio_adapter::NaglessStream::with_policy(tcp, FlushPolicy::clocked())
            .unwrap();
        // A reader task and a writer, as a multiplexed client has them.
        let (mut rd, mut wr) = s.into_split();
        let mut waits = Vec::new();
        let mut answer = [0u8; ANSWER];
        for seq in 0..ROUNDS {
            let start = Instant::now();
            wr.write_all(&header(seq)).await.unwrap();
            wr.write_all(&[b'b'; BODY / 2]).await.unwrap();
            wr.write_all(&[b'b'; BODY / 2]).await.unwrap();
            wr.flush().await.unwrap();
            tokio::time::timeout(Duration::from_secs(20), rd.read_exact(&mut answer))
                .await
                .expect("every request answered")
                .unwrap();
            waits.push(start.elapsed());
            check(&answer, seq);
        }
        let middle = median(waits);
        assert!(middle < STALL, "the median request waited {middle:?}");
        assert!(wr.stats().clock_checks > 0, "clocked: {:?}", wr.stats());
        // Each request one segment (its answer came before the next, so nothing was in flight
        // at its flush), where its three writes would be three under `TCP_NODELAY`: the tokio
        // stream keeps a batch until its `poll_flush`.
        let segs = u64::from(wr.tcp_info().unwrap().data_segs_out.unwrap_or(0));
        assert!(
            segs <= ROUNDS + ROUNDS / 4,
            "{segs} data segments for {ROUNDS} requests"
        );
        drop((rd, wr));
        server.join().unwrap();
    }
}
