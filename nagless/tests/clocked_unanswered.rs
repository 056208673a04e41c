//! `FlushPolicy::clocked` through the tokio stream when the peer does not answer everything:
//! each round the client flushes a note the server reads and never answers (an HTTP/2
//! `SETTINGS` acknowledgement, a `WINDOW_UPDATE`), then a request it answers. The tokio stream
//! hands each batch to a socket with Nagle on; the request finds the note unacknowledged and
//! the kernel holds it for the note's ACK, which the server delays (40 ms on Linux: it has
//! nothing to send). The stream's looks push it within a few milliseconds instead. Before
//! them, every round waited for the delayed ACK.
//!
//! Also checked: the answers come back whole and in order, the stream did push (its
//! counters), and a caller's flushed batches go to the socket with Nagle on, every byte
//! answered in order. Robust facts only: a stall is >= 30 ms and the median of 40 rounds is held
//! below it; a hang is caught by generous timeouts.
#![cfg(all(target_os = "linux", feature = "tokio"))]
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use nagless::FlushPolicy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MESSAGE: usize = 48;
const ANSWER: usize = 16;
const ROUNDS: u64 = 40;
const STALL: Duration = Duration::from_millis(30);

/// A plain server (kernel defaults: delayed ACKs) reading fixed-size messages: one that
/// begins with `n` is a note, never answered; any other is a request, answered with its
/// sequence number.
fn server() -> (std::net::SocketAddr, std::thread::JoinHandle<u64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut notes = 0;
        let mut m = [0u8; MESSAGE];
        while s.read_exact(&mut m).is_ok() {
            if m[0] == b'n' {
                notes += 1;
                continue;
            }
            let mut answer = [b'a'; ANSWER];
            answer[..8].copy_from_slice(&m[8..16]);
            if s.write_all(&answer).is_err() {
                break;
            }
        }
        notes
    });
    (addr, h)
}

fn message(kind: u8, seq: u64) -> [u8; MESSAGE] {
    let mut m = [kind; MESSAGE];
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_flushes_its_batches_has_them_clocked_by_nagle_in_order() {
    let (addr, server) = server();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A second descriptor of the socket, to ask it what the stream set.
    let raw = tcp.into_std().unwrap();
    let probe = raw.try_clone().unwrap();
    let tcp = tokio::net::TcpStream::from_std(raw).unwrap();
    let s =
        nagless::tokio_adapter::NaglessStream::with_policy(tcp, FlushPolicy::clocked()).unwrap();
    assert!(
        probe.nodelay().unwrap(),
        "TCP_NODELAY until a batch is flushed"
    );
    let (mut rd, mut wr) = s.into_split();
    const BATCHES: u64 = 200;
    let writer = tokio::spawn(async move {
        for seq in 0..BATCHES {
            wr.write_all(&message(b'r', seq)).await.unwrap();
            wr.flush().await.unwrap();
        }
        wr
    });
    let mut answer = [0u8; ANSWER];
    for seq in 0..BATCHES {
        tokio::time::timeout(Duration::from_secs(20), rd.read_exact(&mut answer))
            .await
            .expect("every batch answered")
            .unwrap();
        assert_eq!(answer[..8], seq.to_le_bytes(), "answers in order");
    }
    let wr = writer.await.unwrap();
    assert!(
        !probe.nodelay().unwrap(),
        "the kernel's Nagle clocks a caller's flushed batches"
    );
    assert_eq!(
        wr.stats().bytes_sent,
        BATCHES * MESSAGE as u64,
        "nothing lost"
    );
    assert_eq!(wr.pending(), 0, "nothing left in the stream");
    drop((rd, wr, probe));
    assert_eq!(server.join().unwrap(), 0, "no notes");
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_behind_an_unanswered_note_does_not_wait_for_a_delayed_ack() {
        let (addr, server) = server();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let s = nagless::tokio_adapter::NaglessStream::with_policy(tcp, FlushPolicy::clocked())
            .unwrap();
        let (mut rd, mut wr) = s.into_split();
        let mut waits = Vec::new();
        let mut answer = [0u8; ANSWER];
        for seq in 0..ROUNDS {
            let start = Instant::now();
            wr.write_all(&message(b'n', seq)).await.unwrap();
            wr.flush().await.unwrap();
            wr.write_all(&message(b'r', seq)).await.unwrap();
            wr.flush().await.unwrap();
            tokio::time::timeout(Duration::from_secs(20), rd.read_exact(&mut answer))
                .await
                .expect("every request answered")
                .unwrap();
            waits.push(start.elapsed());
            assert_eq!(answer[..8], seq.to_le_bytes(), "answers in order");
            assert!(answer[8..].iter().all(|&b| b == b'a'), "bytes intact");
        }
        waits.sort();
        let middle = waits[waits.len() / 2];
        assert!(
            middle < STALL,
            "the median request waited {middle:?} (all: {waits:?})"
        );
        let stats = wr.stats();
        assert!(stats.pushes > 0, "held requests were pushed: {stats:?}");
        drop((rd, wr));
        assert_eq!(server.join().unwrap(), ROUNDS, "every note arrived");
    }
}
