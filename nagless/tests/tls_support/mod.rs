//! What the TLS layer's test files share: a self-signed PKI and configs that trust it
//! ([`pki`]), a rustls client on a plain socket that counts the TLS records it receives
//! ([`Peer`], [`RecordScan`]), the request/answer client of the record and segment tests
//! ([`answer_client`]), a loopback listener, the kernel's segment count and a deterministic
//! random generator.
#![allow(dead_code)] // each test file uses its own part

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

mod pki;
mod records;
#[allow(unused_imports)] // `Pki` is named by some test files only
pub use pki::{pki, Pki};
pub use records::RecordScan;

/// A rustls client on a plain socket that sees every byte it receives.
pub struct Peer {
    tcp: TcpStream,
    pub conn: rustls::ClientConnection,
    pub scan: RecordScan,
    pub plain: Vec<u8>,
    pub eof: Option<bool>,
}

impl Peer {
    pub fn connect(addr: std::net::SocketAddr, cfg: Arc<rustls::ClientConfig>) -> Peer {
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

    pub fn send(&mut self) {
        while self.conn.wants_write() {
            self.conn.write_tls(&mut self.tcp).unwrap();
        }
    }

    pub fn write(&mut self, data: &[u8]) {
        self.conn.writer().write_all(data).unwrap();
        self.send();
    }

    /// One socket read of at most `max` bytes, fed to the scanner and to rustls.
    pub fn receive(&mut self, max: usize) {
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
    pub fn read_exact(&mut self, n: usize) -> Vec<u8> {
        while self.plain.len() < n {
            assert!(self.eof.is_none(), "peer: end of stream");
            self.receive(64 * 1024);
        }
        self.plain.drain(..n).collect()
    }

    /// Reads one [`ANSWER`] and checks it is whole, its three parts in order.
    pub fn read_answer(&mut self) {
        let a = self.read_exact(ANSWER_LEN);
        assert_eq!(&a[..20], ANSWER[0]);
        assert_eq!(&a[20..220], ANSWER[1]);
        assert_eq!(&a[220..], ANSWER[2]);
    }

    /// Reads to the end; true if it ended with close_notify.
    pub fn read_to_end(&mut self, chunk: usize, out: &mut Vec<u8>) -> bool {
        loop {
            out.append(&mut self.plain);
            if let Some(clean) = self.eof {
                return clean;
            }
            self.receive(chunk);
        }
    }
}

pub fn listen() -> (TcpListener, std::net::SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// Data segments the socket sent so far (Linux), 0 elsewhere.
pub fn segs_out(s: &TcpStream) -> u64 {
    nagless::TcpInfo::of(s)
        .ok()
        .and_then(|i| i.data_segs_out)
        .map_or(0, u64::from)
}

pub const ROUNDS: usize = 40;
pub const ANSWER: [&[u8]; 3] = [&[b'h'; 20], &[b'b'; 200], &[b't'; 20]];
pub const ANSWER_LEN: usize = 240;

/// The client of the request/answer tests: `ROUNDS` requests, each read back, then
/// close_notify. Returns the application-data records received per answer.
pub fn answer_client(addr: std::net::SocketAddr, cfg: Arc<rustls::ClientConfig>) -> f64 {
    let mut p = Peer::connect(addr, cfg);
    // A first round that is not counted (the handshake's last flight may share it).
    p.write(b"GET\n");
    assert_eq!(p.read_exact(ANSWER_LEN).len(), ANSWER_LEN);
    let before = p.scan.app_records;
    for _ in 0..ROUNDS {
        p.write(b"GET\n");
        p.read_answer();
    }
    let records = p.scan.app_records - before;
    p.conn.send_close_notify();
    p.send();
    records as f64 / ROUNDS as f64
}

/// A deterministic pseudo-random generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Bounds a reading loop.
pub fn out_of_reads(reads: &mut u32) {
    *reads += 1;
    assert!(*reads < 1_000_000, "too many reads");
}
