//! The std TLS layer (`nagless::tls::TlsStream`) against a rustls client on 127.0.0.1 that
//! counts the records it receives: three writes of one answer leave as one record in one
//! segment (and, for contrast, rustls's stream over a `NaglessStream` makes a record per
//! write), close_notify follows the last bytes, and the linger bound and `SendNow` release
//! queued plaintext without a read. Segment counts come from the kernel (`TCP_INFO`, Linux),
//! with margins for a descheduled thread: a linger release between two writes of one answer
//! may split it.
#![cfg(feature = "tls")]
#![allow(clippy::disallowed_methods)]

mod tls_support;

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use nagless::tls::TlsStream;
use nagless::FlushReason;
use tls_support::{answer_client, listen, pki, segs_out, Peer, ANSWER, ROUNDS};

/// The documented stacking of today (rustls's stream over a `NaglessStream`) for contrast:
/// one segment, but three records per answer.
#[test]
fn rustls_stream_over_nagless_stream_makes_a_record_per_write() {
    let pki = pki();
    let (l, addr) = listen();
    let client = std::thread::spawn({
        let cfg = pki.client.clone();
        move || answer_client(addr, cfg)
    });
    let (tcp, _) = l.accept().unwrap();
    let policy = nagless::FlushPolicy::default().explicit_flush(false);
    let sock = nagless::NaglessStream::with_policy(tcp, policy).unwrap();
    let mut tls =
        rustls::StreamOwned::new(rustls::ServerConnection::new(pki.server).unwrap(), sock);
    let mut req = [0u8; 4];
    tls.read_exact(&mut req).unwrap();
    loop {
        for part in ANSWER {
            tls.write_all(part).unwrap();
        }
        match tls.read(&mut req) {
            Ok(0) | Err(_) => break,
            Ok(n) => assert_eq!(n, 4),
        }
    }
    let records = client.join().unwrap();
    assert!(records >= 3.0, "{records} records per answer");
}

/// The peer sees close_notify (a clean end), after the last bytes. (The server's connection
/// is the `rustls::Connection` enum here.)
#[test]
fn close_notify_follows_the_last_bytes() {
    let pki = pki();
    let (l, addr) = listen();
    let client = std::thread::spawn({
        let cfg = pki.client.clone();
        move || {
            let mut p = Peer::connect(addr, cfg);
            p.write(b"hi");
            let mut got = Vec::new();
            let clean = p.read_to_end(4096, &mut got);
            (got, clean)
        }
    });
    let (tcp, _) = l.accept().unwrap();
    let conn = rustls::Connection::from(rustls::ServerConnection::new(pki.server).unwrap());
    let mut tls = TlsStream::new(conn, tcp).unwrap();
    let mut hi = [0u8; 2];
    tls.read_exact(&mut hi).unwrap();
    tls.write_all(b"bye ").unwrap();
    tls.write_all(b"now").unwrap();
    tls.send_close_notify().unwrap();
    assert_eq!(
        tls.write(b"x").unwrap_err().kind(),
        io::ErrorKind::BrokenPipe
    );
    let (got, clean) = client.join().unwrap();
    assert_eq!(got, b"bye now");
    assert!(clean, "no close_notify");
    drop(tls);
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn three_writes_leave_as_one_record_in_one_segment() {
        let pki = pki();
        let (l, addr) = listen();
        let client = std::thread::spawn({
            let cfg = pki.client.clone();
            move || answer_client(addr, cfg)
        });
        let (tcp, _) = l.accept().unwrap();
        let mut tls =
            TlsStream::new(rustls::ServerConnection::new(pki.server).unwrap(), tcp).unwrap();
        let mut req = [0u8; 4];
        tls.read_exact(&mut req).unwrap();
        let mut first = true;
        let mut before = 0;
        loop {
            for part in ANSWER {
                tls.write_all(part).unwrap();
            }
            // The read flushes the answer (before-read), then waits for the next request.
            match tls.read(&mut req).unwrap() {
                0 => break,
                n => {
                    assert_eq!(n, 4);
                    if first {
                        // Counting starts after the uncounted first round was sent.
                        before = segs_out(tls.get_ref());
                        first = false;
                    }
                }
            }
        }
        let segs = segs_out(tls.get_ref()) - before;
        let records = client.join().unwrap();
        let lingered = tls.stats().flushes_for(FlushReason::Linger);
        eprintln!(
            "nagless tls: {records:.2} records/answer, {:.2} segments/answer, {lingered} linger flushes",
            segs as f64 / ROUNDS as f64
        );
        // A linger flush is a thread descheduled mid-burst: a few on a busy machine; one in
        // ten at most (a broken coalescer would flush most bursts so).
        assert!(
            lingered as usize <= ROUNDS / 10,
            "{lingered} linger flushes"
        );
        let margin = lingered as f64 / ROUNDS as f64;
        assert!(
            records <= 1.0 + 2.0 * margin,
            "{records} records per answer"
        );
        assert!(records >= 1.0, "{records} records per answer");
        if cfg!(target_os = "linux") {
            // The close_notify that ends the stream is not counted: it follows the last round.
            assert!(
                segs as f64 <= ROUNDS as f64 * (1.0 + 2.0 * margin) + 1.0,
                "{segs} segments for {ROUNDS} answers"
            );
        }
    }

    /// Without a read, a flush or an urgent write, the linger bound still releases the queued
    /// plaintext (checked on the next call: here `poll_deadline`, as an event loop makes it), and
    /// a `SendNow` write leaves at once with what was queued before it.
    #[test]
    fn linger_bound_and_send_now_release_without_a_read() {
        let pki = pki();
        let (l, addr) = listen();
        let (got_tx, got_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let client = std::thread::spawn({
            let cfg = pki.client.clone();
            move || {
                let mut p = Peer::connect(addr, cfg);
                p.write(b"go");
                for n in [5, 8] {
                    got_tx.send(p.read_exact(n)).unwrap();
                }
                let mut rest = Vec::new();
                p.read_to_end(4096, &mut rest)
            }
        });
        let (tcp, _) = l.accept().unwrap();
        let policy = nagless::FlushPolicy::default().linger(Some(Duration::from_millis(50)));
        let conn = rustls::ServerConnection::new(pki.server).unwrap();
        let mut tls = TlsStream::with_policy(conn, tcp, policy).unwrap();
        let mut go = [0u8; 2];
        tls.read_exact(&mut go).unwrap();
        tls.write_all(b"li").unwrap();
        tls.write_all(b"ng").unwrap();
        tls.write_all(b"r").unwrap();
        assert_eq!(tls.pending(), 5, "sent before any flush point");
        let deadline = tls.next_deadline().expect("a linger deadline");
        std::thread::sleep(
            deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(1),
        );
        tls.poll_deadline().unwrap();
        assert_eq!(tls.pending(), 0);
        let first = got_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("linger release");
        assert_eq!(first, b"lingr");
        tls.write_all(b"send").unwrap();
        tls.write_with(b"-now", nagless::Urgency::SendNow).unwrap();
        assert_eq!(tls.pending(), 0);
        let second = got_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("urgent write");
        assert_eq!(second, b"send-now");
        assert_eq!(tls.stats().flushes_for(FlushReason::Linger), 1);
        assert_eq!(tls.stats().flushes_for(FlushReason::Urgent), 1);
        tls.close().unwrap();
        assert!(client.join().unwrap(), "no close_notify");
    }
}
