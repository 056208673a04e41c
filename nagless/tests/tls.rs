//! The TLS layer (`nagless::tls`, `nagless::tokio_tls`) against real TLS peers on 127.0.0.1:
//! rustls clients that count the records they receive by parsing the record headers of the
//! byte stream, and Debian's `openssl s_server`/`s_client` (a TLS stack we did not write).
//! Segment counts come from the kernel (`TCP_INFO`, Linux), with margins for a descheduled
//! thread: a linger release between two writes of one answer may split it.
#![cfg(feature = "tls")]
#![allow(clippy::disallowed_methods)]

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nagless::tls::TlsStream;
use nagless::FlushReason;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

#[cfg_attr(not(unix), allow(dead_code))] // the PEM files are for the `openssl` command
struct Pki {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
    cert_pem: String,
    key_pem: String,
}

/// A self-signed certificate for "localhost" and configs that trust it. The server sends no
/// session tickets, so that every application-data record after the handshake is ours.
fn pki() -> Pki {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    server.send_tls13_tickets = 0;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Pki {
        server: Arc::new(server),
        client: Arc::new(client),
        cert_pem: pem("CERTIFICATE", ck.cert.der()),
        key_pem: pem("PRIVATE KEY", &ck.key_pair.serialize_der()),
    }
}

/// PEM armour for DER bytes (base64 in 64-column lines).
fn pem(label: &str, der: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for c in der.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                b64.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out + &format!("-----END {label}-----\n")
}

/// Counts TLS records in a byte stream by their 5-byte headers.
#[derive(Default)]
struct RecordScan {
    header: Vec<u8>,
    skip: usize,
    /// Records of content type application_data (23): in TLS 1.3 every record after the
    /// handshake, alerts and key updates included.
    app_records: u64,
}

impl RecordScan {
    fn feed(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(b.len());
                self.skip -= n;
                b = &b[n..];
                continue;
            }
            let n = (5 - self.header.len()).min(b.len());
            self.header.extend_from_slice(&b[..n]);
            b = &b[n..];
            if self.header.len() == 5 {
                if self.header[0] == 23 {
                    self.app_records += 1;
                }
                self.skip = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
                self.header.clear();
            }
        }
    }
}

/// A rustls client on a plain socket that sees every byte it receives.
struct Peer {
    tcp: TcpStream,
    conn: rustls::ClientConnection,
    scan: RecordScan,
    plain: Vec<u8>,
    eof: Option<bool>,
}

impl Peer {
    fn connect(addr: std::net::SocketAddr, cfg: Arc<rustls::ClientConfig>) -> Peer {
        let tcp = TcpStream::connect(addr).unwrap();
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let conn =
            rustls::ClientConnection::new(cfg, ServerName::try_from("localhost").unwrap()).unwrap();
        let mut p = Peer {
            tcp,
            conn,
            scan: RecordScan::default(),
            plain: Vec::new(),
            eof: None,
        };
        while p.conn.is_handshaking() {
            p.send();
            if p.conn.is_handshaking() {
                p.receive(64 * 1024);
            }
        }
        p.send();
        p
    }

    fn send(&mut self) {
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.tcp).unwrap();
        }
    }

    fn write(&mut self, data: &[u8]) {
        self.conn.writer().write_all(data).unwrap();
        self.send();
    }

    /// One socket read of at most `max` bytes, fed to the scanner and to rustls.
    fn receive(&mut self, max: usize) {
        let mut buf = vec![0u8; max];
        let n = self.tcp.read(&mut buf).expect("peer read");
        self.scan.feed(&buf[..n]);
        let mut rest = &buf[..n];
        loop {
            self.conn.read_tls(&mut rest).unwrap();
            self.conn.process_new_packets().expect("peer: TLS error");
            match self.conn.reader().read_to_end(&mut self.plain) {
                Ok(_) => self.eof = Some(true),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => self.eof = Some(false),
                Err(e) => panic!("peer: {e}"),
            }
            if rest.is_empty() {
                break;
            }
        }
        if n == 0 && self.eof.is_none() {
            self.eof = Some(false);
        }
        self.send();
    }

    /// Reads until `n` plaintext bytes are there; returns them.
    fn read_exact(&mut self, n: usize) -> Vec<u8> {
        while self.plain.len() < n {
            assert!(self.eof.is_none(), "peer: end of stream");
            self.receive(64 * 1024);
        }
        self.plain.drain(..n).collect()
    }

    /// Reads to the end; true if it ended with close_notify.
    fn read_to_end(&mut self, chunk: usize, out: &mut Vec<u8>) -> bool {
        loop {
            out.append(&mut self.plain);
            if let Some(clean) = self.eof {
                return clean;
            }
            self.receive(chunk);
        }
    }
}

fn listen() -> (TcpListener, std::net::SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// Data segments the socket sent so far (Linux), 0 elsewhere.
fn segs_out(s: &TcpStream) -> u64 {
    nagless::TcpInfo::of(s)
        .ok()
        .and_then(|i| i.data_segs_out)
        .map_or(0, u64::from)
}

const ROUNDS: usize = 40;
const ANSWER: [&[u8]; 3] = [&[b'h'; 20], &[b'b'; 200], &[b't'; 20]];
const ANSWER_LEN: usize = 240;

/// The client of the request/answer tests: `ROUNDS` requests, each read back, then
/// close_notify. Returns the application-data records received per answer.
fn answer_client(addr: std::net::SocketAddr, cfg: Arc<rustls::ClientConfig>) -> f64 {
    let mut p = Peer::connect(addr, cfg);
    // A first round that is not counted (the handshake's last flight may share it).
    p.write(b"GET\n");
    assert_eq!(p.read_exact(ANSWER_LEN).len(), ANSWER_LEN);
    let before = p.scan.app_records;
    for _ in 0..ROUNDS {
        p.write(b"GET\n");
        let a = p.read_exact(ANSWER_LEN);
        assert_eq!(&a[..20], ANSWER[0]);
        assert_eq!(&a[20..220], ANSWER[1]);
        assert_eq!(&a[220..], ANSWER[2]);
    }
    let records = p.scan.app_records - before;
    p.conn.send_close_notify();
    p.send();
    records as f64 / ROUNDS as f64
}

#[test]
fn three_writes_leave_as_one_record_in_one_segment() {
    let pki = pki();
    let (l, addr) = listen();
    let client = std::thread::spawn({
        let cfg = pki.client.clone();
        move || answer_client(addr, cfg)
    });
    let (tcp, _) = l.accept().unwrap();
    let mut tls = TlsStream::new(rustls::ServerConnection::new(pki.server).unwrap(), tcp).unwrap();
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
    assert!(lingered <= 3, "{lingered} linger flushes");
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

/// A deterministic pseudo-random generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

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

/// Bounds a reading loop.
fn out_of_reads(reads: &mut u32) {
    *reads += 1;
    assert!(*reads < 1_000_000, "too many reads");
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

/// Interop with a TLS stack we did not write: Debian's `openssl` command.
#[cfg(unix)]
mod openssl {
    use super::*;
    use nagless_test_support::{have_tool, Started};
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    /// Writes the PEM files for `openssl` into a fresh directory.
    fn pem_files(pki: &Pki) -> (tempdir::Dir, String, String) {
        let dir = tempdir::Dir::new();
        let cert = dir.path.join("cert.pem");
        let key = dir.path.join("key.pem");
        std::fs::write(&cert, &pki.cert_pem).unwrap();
        std::fs::write(&key, &pki.key_pem).unwrap();
        (dir, cert.display().to_string(), key.display().to_string())
    }

    mod tempdir {
        pub struct Dir {
            pub path: std::path::PathBuf,
        }
        impl Dir {
            pub fn new() -> Dir {
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let path =
                    std::env::temp_dir().join(format!("nagless-tls-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&path).unwrap();
                Dir { path }
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.path);
            }
        }
    }

    /// Kills the child (by its PID) if the test has not ended in 30 s.
    fn watchdog(pid: u32) -> std::sync::mpsc::Sender<()> {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                rx.recv_timeout(Duration::from_secs(30))
            {
                // Timed out (the sender is still alive): stop our child.
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        });
        tx
    }

    /// `openssl s_client` talks to our server: lines in, three-write answers out, a key
    /// update with "update requested" (`K`) in the middle, close_notify at the end.
    #[test]
    fn openssl_s_client_against_our_server() {
        if !have_tool("openssl") {
            return;
        }
        let pki = pki();
        let (l, addr) = listen();
        let mut child = Started(
            Command::new("openssl")
                .args(["s_client", "-connect", &addr.to_string()])
                .args(["-servername", "localhost", "-tls1_3", "-no_ign_eof"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let dog = watchdog(child.0.id());
        let mut stdin = child.0.stdin.take().unwrap();
        let stdout = child.0.stdout.take().unwrap();
        let stderr = child.0.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = BufReader::new(stdout).read_to_string(&mut out);
            out
        });
        let (key_update_tx, key_update_rx) = std::sync::mpsc::channel();
        let err_reader = std::thread::spawn(move || {
            let mut out = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line == "KEYUPDATE" {
                    let _ = key_update_tx.send(());
                }
                out += &line;
                out.push('\n');
            }
            out
        });
        let (tcp, _) = l.accept().unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut tls =
            TlsStream::new(rustls::ServerConnection::new(pki.server).unwrap(), tcp).unwrap();
        let mut lines = Vec::new();
        let mut failure = None;
        'lines: for line in ["alpha\n", "K\n", "beta\n", "gamma\n"] {
            stdin.write_all(line.as_bytes()).unwrap();
            stdin.flush().unwrap();
            if line.starts_with('K') {
                // s_client turns the line into a KeyUpdate (update requested); rustls answers
                // it with its own while reading the next line. s_client takes a whole read of
                // its input as the command: the next line waits until it said so.
                if key_update_rx.recv_timeout(Duration::from_secs(20)).is_err() {
                    failure = Some("s_client did not send the key update".to_string());
                    break;
                }
                continue;
            }
            let mut got = Vec::new();
            let mut b = [0u8; 1];
            while !got.ends_with(b"\n") {
                match tls.read(&mut b) {
                    Ok(1) => got.push(b[0]),
                    other => {
                        failure = Some(format!("reading {line:?}: {other:?}"));
                        break 'lines;
                    }
                }
            }
            let text = String::from_utf8(got).unwrap();
            tls.write_all(b"[").unwrap();
            tls.write_all(text.trim_end().as_bytes()).unwrap();
            tls.write_all(b"]\n").unwrap();
            lines.push(text);
        }
        if failure.is_none() {
            tls.send_close_notify().unwrap();
        } else {
            drop(tls);
        }
        drop(stdin);
        let out = reader.join().unwrap() + &err_reader.join().unwrap();
        drop(dog);
        assert!(failure.is_none(), "{failure:?}; s_client said:\n{out}");
        assert_eq!(lines, ["alpha\n", "beta\n", "gamma\n"]);
        for want in ["[alpha]\n", "[beta]\n", "[gamma]\n", "KEYUPDATE"] {
            assert!(
                out.contains(want),
                "{want:?} missing from s_client's output:\n{out}"
            );
        }
    }

    /// Our client talks to `openssl s_server -rev` (which answers each line reversed),
    /// sending each line as two writes, with a key update of ours in the middle.
    #[test]
    fn our_client_against_openssl_s_server() {
        if !have_tool("openssl") {
            return;
        }
        let pki = pki();
        let (_dir, cert, key) = pem_files(&pki);
        let port = nagless_test_support::free_port();
        let mut child = Started(
            Command::new("openssl")
                .args(["s_server", "-accept", &port.to_string(), "-naccept", "1"])
                .args(["-cert", &cert, "-key", &key, "-rev", "-tls1_3"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let dog = watchdog(child.0.id());
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        let mut line = String::new();
        while !line.starts_with("ACCEPT") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "s_server ended");
        }
        let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let conn = rustls::ClientConnection::new(
            pki.client.clone(),
            ServerName::try_from("localhost").unwrap(),
        )
        .unwrap();
        let mut tls = TlsStream::new(conn, tcp).unwrap();
        for (i, (a, b)) in [("hello ", "world"), ("nag", "less"), ("after ", "update")]
            .iter()
            .enumerate()
        {
            if i == 2 {
                tls.refresh_traffic_keys().unwrap();
            }
            tls.write_all(a.as_bytes()).unwrap();
            tls.write_all(b.as_bytes()).unwrap();
            tls.write_all(b"\n").unwrap();
            let want: String = format!("{a}{b}").chars().rev().collect::<String>() + "\n";
            let mut got = vec![0u8; want.len()];
            tls.read_exact(&mut got).unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), want);
        }
        let records = tls.wire_stats().seals;
        tls.close().unwrap();
        drop(dog);
        // Three writes, one record per line.
        assert_eq!(records, 3);
    }
}

#[cfg(feature = "tokio")]
mod with_tokio {
    use super::*;
    use nagless::tokio_tls::TlsStream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn tokio_listen() -> (tokio::net::TcpListener, std::net::SocketAddr) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        (l, a)
    }

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
        loop {
            for part in ANSWER {
                tls.write_all(part).await.unwrap();
            }
            match tls.read(&mut req).await.unwrap() {
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
        assert!(lingered <= 3, "{lingered} linger flushes");
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
            let policy =
                nagless::FlushPolicy::explicit_only().linger(Some(Duration::from_millis(1)));
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
        roots.add(CertificateDer::from(der)).unwrap();
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut p = Peer::connect(addr, Arc::new(cfg));
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
}
