//! The std TLS layer (`nagless::tls::TlsStream`) keeps every byte, in order: random-size
//! writes (12 MB) to a slow reader, a non-blocking socket that fills up (`WouldBlock`) and
//! key updates in both directions mid-stream, against a rustls client on 127.0.0.1.
#![cfg(feature = "tls")]
#![allow(clippy::disallowed_methods)]

mod tls_support;

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use nagless::tls::TlsStream;
use tls_support::{listen, out_of_reads, pki, Peer, Rng};

/// Writes of random sizes (1 byte to 100 KB, 12 MB in all) to a slow reader that reads in
/// small pieces: every byte arrives, in order, and the stream ends with close_notify.
#[test]
fn large_writes_to_a_slow_reader_arrive_byte_exact() {
    let pki = pki();
    let (l, addr) = listen();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut data = Vec::new();
    let mut sizes = Vec::new();
    while data.len() < 12 << 20 {
        let big = rng.below(4) == 0;
        let n = 1 + rng.below(if big { 100_000 } else { 300 });
        sizes.push(n);
        data.extend(rng.bytes(n));
    }
    let expect = data.clone();
    let client = std::thread::spawn({
        let cfg = pki.client.clone();
        move || {
            let mut p = Peer::connect(addr, cfg);
            let mut got = Vec::new();
            let mut reads = 0u32;
            let clean = loop {
                out_of_reads(&mut reads);
                p.receive(3000 + (reads as usize % 7) * 1000);
                got.append(&mut p.plain);
                if reads % 500 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
                if let Some(clean) = p.eof {
                    break clean;
                }
            };
            (got, clean)
        }
    });
    let (tcp, _) = l.accept().unwrap();
    let mut tls = TlsStream::new(rustls::ServerConnection::new(pki.server).unwrap(), tcp).unwrap();
    let mut at = 0;
    for n in sizes {
        tls.write_all(&data[at..at + n]).unwrap();
        at += n;
    }
    tls.close().unwrap();
    let (got, clean) = client.join().unwrap();
    assert_eq!(got.len(), expect.len());
    assert!(got == expect, "bytes differ");
    assert!(clean, "stream did not end with close_notify");
}

/// A non-blocking socket that fills up: writes and flushes return `WouldBlock` and keep every
/// byte; once the peer reads, retrying sends the rest in order.
#[test]
fn would_block_keeps_every_byte_in_order() {
    let pki = pki();
    let (l, addr) = listen();
    let (blocked_tx, blocked_rx) = std::sync::mpsc::channel::<()>();
    let client = std::thread::spawn({
        let cfg = pki.client.clone();
        move || {
            let mut p = Peer::connect(addr, cfg);
            p.write(b"go");
            // Read nothing until the server met a full socket (at most 20 s).
            let _ = blocked_rx.recv_timeout(Duration::from_secs(20));
            let mut got = Vec::new();
            let clean = p.read_to_end(64 * 1024, &mut got);
            (got, clean)
        }
    });
    let (tcp, _) = l.accept().unwrap();
    let mut tls = TlsStream::new(rustls::ServerConnection::new(pki.server).unwrap(), tcp).unwrap();
    let mut go = [0u8; 2];
    tls.read_exact(&mut go).unwrap();
    tls.get_ref().set_nonblocking(true).unwrap();
    let mut rng = Rng(7);
    let mut sent = Vec::new();
    let mut signalled = false;
    let start = Instant::now();
    // Write until the socket has refused bytes 50 times, then 2 MB more.
    let mut after_block = 0;
    while after_block < 2 << 20 {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        let n = 1 + rng.below(20_000);
        let chunk = rng.bytes(n);
        let mut off = 0;
        while off < chunk.len() {
            match tls.write(&chunk[off..]) {
                Ok(n) => {
                    off += n;
                    if signalled {
                        after_block += n;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !signalled && tls.wire_stats().would_block >= 50 {
                        signalled = true;
                        blocked_tx.send(()).unwrap();
                    }
                    std::thread::sleep(Duration::from_micros(200));
                    let _ = tls.poll_deadline();
                }
                Err(e) => panic!("write: {e}"),
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        }
        sent.extend_from_slice(&chunk);
        if !signalled {
            // Flushes too meet the full socket.
            match tls.flush() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("flush: {e}"),
            }
            if tls.wire_stats().would_block >= 50 {
                signalled = true;
                blocked_tx.send(()).unwrap();
            }
        }
    }
    let blocked = tls.wire_stats().would_block;
    // Blocking again: close waits for the socket to take everything.
    tls.close().unwrap();
    let (got, clean) = client.join().unwrap();
    assert!(blocked >= 50, "{blocked} sends met a full socket");
    assert_eq!(got.len(), sent.len());
    assert!(got == sent, "bytes differ");
    assert!(clean);
}

/// Key updates in both directions mid-stream (ours with `refresh_traffic_keys`, the peer's
/// processed on read): every byte before and after arrives intact.
#[test]
fn key_updates_mid_stream_keep_bytes_intact() {
    let pki = pki();
    let (l, addr) = listen();
    let client = std::thread::spawn({
        let cfg = pki.client.clone();
        move || {
            let mut p = Peer::connect(addr, cfg);
            let mut got = Vec::new();
            for round in 0..20u8 {
                if round % 5 == 4 {
                    p.conn.refresh_traffic_keys().unwrap();
                }
                p.write(&[round; 3]);
                got.extend(p.read_exact(3000));
            }
            p.conn.send_close_notify();
            p.send();
            got
        }
    });
    let (tcp, _) = l.accept().unwrap();
    let mut tls = TlsStream::new(rustls::ServerConnection::new(pki.server).unwrap(), tcp).unwrap();
    let mut expect = Vec::new();
    let mut req = [0u8; 3];
    loop {
        match tls.read(&mut req).unwrap() {
            0 => break,
            n => tls.read_exact(&mut req[n..]).unwrap(),
        }
        let r = req[0];
        for part in 0..3u8 {
            let chunk = vec![r.wrapping_mul(3).wrapping_add(part); 1000];
            tls.write_all(&chunk).unwrap();
            expect.extend_from_slice(&chunk);
            if part == 1 && r % 3 == 0 {
                tls.refresh_traffic_keys().unwrap();
            }
        }
    }
    let got = client.join().unwrap();
    assert_eq!(got.len(), expect.len());
    assert!(got == expect);
}
