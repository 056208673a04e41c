//! The tokio TLS layer (`nagless::tokio_tls::TlsStream`) on 127.0.0.1: one record in one
//! segment per three-write answer, 12 MB of random-size writes through a full socket with key
//! updates and `shutdown`, two tokio layers echoing with the linger bound as the only flush
//! point, a request written during the handshake, and the hyper example served through it.
#![cfg(all(feature = "tls", feature = "tokio"))]
#![allow(clippy::disallowed_methods)]

#[path = "support/rounds.rs"]
mod rounds;
mod tls_support;

use std::time::Duration;

use nagless::tokio_tls::TlsStream;
use nagless::FlushReason;
use rustls::pki_types::ServerName;
use tls_support::{answer_client, out_of_reads, pki, Peer, Rng, ANSWER, ROUNDS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn tokio_listen() -> (tokio::net::TcpListener, std::net::SocketAddr) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// Random-size writes (12 MB) to a reader that first reads nothing (the socket fills up:
/// writes wait) and then reads slowly, key updates both ways in the middle and `shutdown`
/// at the end: every byte, in order, then close_notify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_large_writes_key_update_and_shutdown() {
    let pki = pki();
    let (l, addr) = tokio_listen().await;
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut data = Vec::new();
    let mut sizes = Vec::new();
    while data.len() < 12 << 20 {
        let big = rng.below(4) == 0;
        let n = 1 + rng.below(if big { 100_000 } else { 300 });
        sizes.push(n);
        data.extend(rng.bytes(n));
    }
    let expect = data.clone();
    let (blocked_tx, blocked_rx) = std::sync::mpsc::channel::<()>();
    let client = std::thread::spawn({
        let cfg = pki.client.clone();
        move || {
            let mut p = Peer::connect(addr, cfg);
            p.write(b"go");
            // Read nothing until the server met a full socket (at most 20 s).
            let _ = blocked_rx.recv_timeout(Duration::from_secs(20));
            let mut got = Vec::new();
            let mut reads = 0u32;
            let clean = loop {
                out_of_reads(&mut reads);
                if reads == 300 {
                    // The peer's key update, processed by the server's next read.
                    p.conn.refresh_traffic_keys().unwrap();
                    p.send();
                }
                p.receive(2000 + (reads as usize % 5) * 1500);
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
    let (tcp, _) = l.accept().await.unwrap();
    // A fixed send buffer: 12 MB cannot all fit in the socket buffers.
    socket2::SockRef::from(&tcp)
        .set_send_buffer_size(64 * 1024)
        .unwrap();
    let conn = rustls::ServerConnection::new(pki.server).unwrap();
    let mut tls = TlsStream::new(conn, tcp).unwrap();
    let mut go = [0u8; 2];
    tls.read_exact(&mut go).await.unwrap();
    let mut at = 0;
    let mut signalled = false;
    for (i, n) in sizes.iter().enumerate() {
        tls.write_all(&data[at..at + n]).await.unwrap();
        at += n;
        if i == sizes.len() / 2 {
            tls.refresh_traffic_keys().await.unwrap();
        }
        if !signalled && tls.wire_stats().would_block > 0 {
            signalled = true;
            blocked_tx.send(()).unwrap();
        }
    }
    tls.shutdown().await.unwrap();
    assert!(signalled, "the socket never filled up");
    let (got, clean) = tokio::task::spawn_blocking(move || client.join().unwrap())
        .await
        .unwrap();
    assert_eq!(got.len(), expect.len());
    assert!(got == expect, "bytes differ");
    assert!(clean, "no close_notify");
}

/// Two tokio layers talking to each other (client and server), lines echoed with the
/// linger bound as the only flush point on the server: nothing waits longer than it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_client_and_server_echo_with_linger_only() {
    let pki = pki();
    let (l, addr) = tokio_listen().await;
    let server = tokio::spawn(async move {
        let (tcp, _) = l.accept().await.unwrap();
        let policy = nagless::FlushPolicy::explicit_only().linger(Some(Duration::from_millis(1)));
        let conn = rustls::ServerConnection::new(pki.server).unwrap();
        let mut tls = TlsStream::from_socket(conn, tcp, policy).unwrap();
        let mut buf = vec![0u8; 1000];
        loop {
            let n = tls.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            // No flush: the timer task seals and sends it at the linger bound.
            tls.write_all(&buf[..n]).await.unwrap();
        }
        tls.stats().flushes_for(FlushReason::Linger)
    });
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let conn = rustls::ClientConnection::new(
        pki.client.clone(),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut tls = TlsStream::new(conn, tcp).unwrap();
    tls.handshake().await.unwrap();
    assert!(tls.with_conn(|c| !c.is_handshaking()));
    for i in 0..20u32 {
        let msg = format!("message {i}\n");
        tls.write_all(msg.as_bytes()).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(10), tls.read_exact(&mut back))
            .await
            .expect("echo never came")
            .unwrap();
        assert_eq!(back, msg.as_bytes());
    }
    tls.shutdown().await.unwrap();
    let lingered = server.await.unwrap();
    assert!(lingered >= 20, "{lingered} linger flushes for 20 echoes");
}

/// A request written before the handshake completes, then a read with no flush: the
/// request leaves once the handshake is done (the read's wait flushes it), twenty times
/// over on the multi-thread runtime. (The handshake ending inside one poll, after that
/// poll's flush, is a window too narrow to hit on purpose; this holds the path.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_a_request_written_during_the_handshake_leaves_before_the_read_waits() {
    let pki = pki();
    let (l, addr) = tokio_listen().await;
    const ROUNDS: usize = 20;
    let server = tokio::spawn(async move {
        for _ in 0..ROUNDS {
            let (tcp, _) = l.accept().await.unwrap();
            let conn = rustls::ServerConnection::new(pki.server.clone()).unwrap();
            let mut tls = TlsStream::new(conn, tcp).unwrap();
            let mut req = [0u8; 4];
            tls.read_exact(&mut req).await.unwrap();
            assert_eq!(&req, b"ping");
            tls.write_all(b"pong").await.unwrap();
            tls.shutdown().await.unwrap();
        }
    });
    for round in 0..ROUNDS {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let conn = rustls::ClientConnection::new(
            pki.client.clone(),
            ServerName::try_from("localhost").unwrap(),
        )
        .unwrap();
        let mut tls = TlsStream::new(conn, tcp).unwrap();
        // Queued: the handshake has not even started.
        tls.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(10), tls.read_exact(&mut back))
            .await
            .unwrap_or_else(|_| panic!("round {round}: the request never left"))
            .unwrap();
        assert_eq!(&back, b"pong");
    }
    server.await.unwrap();
}

/// The hyper example, served through the tokio TLS layer, answers a rustls client's
/// keep-alive requests correctly. (`cargo test` builds the example; `scripts/wine-test`
/// builds the tests only, hence Unix.)
#[cfg(unix)]
#[test]
fn hyper_tls_example_answers_requests() {
    use std::io::BufRead;
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(format!("hyper_tls_server{}", std::env::consts::EXE_SUFFIX));
    assert!(path.is_file(), "{} not built", path.display());
    let mut child = nagless_test_support::Started(
        std::process::Command::new(path)
            .args(["--seconds", "60"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let (mut first, mut second) = (String::new(), String::new());
    out.read_line(&mut first).unwrap();
    out.read_line(&mut second).unwrap();
    let addr: std::net::SocketAddr = first
        .trim()
        .trim_start_matches("listening on ")
        .parse()
        .unwrap();
    let hex = second.trim().trim_start_matches("cert ");
    let der: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(der))
        .unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut p = Peer::connect(addr, std::sync::Arc::new(cfg));
    let before = p.scan.app_records;
    for _ in 0..10 {
        p.write(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n");
        let mut got = Vec::new();
        let mut reads = 0u32;
        while !got.ends_with(b"hello world\n") {
            out_of_reads(&mut reads);
            if p.plain.is_empty() {
                p.receive(16 * 1024);
            }
            got.append(&mut p.plain);
        }
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("content-length: 12\r\n"), "{text}");
    }
    // The server sends session tickets after the handshake (records of their own).
    let records = p.scan.app_records - before;
    eprintln!("hyper over nagless tls: {records} records for 10 responses");
    assert!(records <= 10 + 4, "{records} records for 10 responses");
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    /// The request/answer test of the std layer, served by the tokio layer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tokio_three_writes_leave_as_one_record_in_one_segment() {
        let pki = pki();
        let (l, addr) = tokio_listen().await;
        let client = std::thread::spawn({
            let cfg = pki.client.clone();
            move || answer_client(addr, cfg)
        });
        let (tcp, _) = l.accept().await.unwrap();
        let conn = rustls::ServerConnection::new(pki.server).unwrap();
        let mut tls = TlsStream::new(conn, tcp).unwrap();
        let mut req = [0u8; 4];
        tls.read_exact(&mut req).await.unwrap();
        let mut before = None;
        let mut writing = Vec::with_capacity(ROUNDS);
        loop {
            let t = std::time::Instant::now();
            for part in ANSWER {
                tls.write_all(part).await.unwrap();
            }
            writing.push(t.elapsed());
            let n = tls.read(&mut req).await.unwrap();
            match n {
                0 => break,
                n => assert_eq!(n, 4),
            }
            if before.is_none() {
                before = Some(tls.tcp_info().ok().and_then(|i| i.data_segs_out));
            }
        }
        let after = tls.tcp_info().ok().and_then(|i| i.data_segs_out);
        let records = client.join().unwrap();
        let lingered = tls.stats().flushes_for(FlushReason::Linger);
        eprintln!("tokio nagless tls: {records:.2} records/answer, {lingered} linger flushes");
        // A linger flush is a thread descheduled mid-burst: only a round as long as the linger.
        rounds::assert_lingers_fit(lingered as usize, &writing, nagless::DEFAULT_LINGER);
        let margin = lingered as f64 / ROUNDS as f64;
        assert!(records >= 1.0 && records <= 1.0 + 2.0 * margin, "{records}");
        if let (Some(Some(b)), Some(a)) = (before, after) {
            let segs = f64::from(a - b);
            assert!(
                segs <= ROUNDS as f64 * (1.0 + 2.0 * margin) + 1.0,
                "{segs} segments"
            );
        }
    }
}
