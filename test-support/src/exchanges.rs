//! The write-write-read exchange the doctor's capture tests make on loopback: a server that
//! answers each request after a think time, and a client that writes each request in two
//! writes and reads the answer (Nagle against the server's delayed ACK: 40 ms a round).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// A listener on a free loopback port, and the port.
pub fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port();
    (l, p)
}

/// A server answering every `req`-byte request with `reply` bytes after `think`.
pub fn server(
    listener: TcpListener,
    req: usize,
    reply: usize,
    think: Duration,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; req];
        while s.read_exact(&mut buf).is_ok() {
            thread::sleep(think);
            if s.write_all(&vec![b'r'; reply]).is_err() {
                break;
            }
        }
    })
}

/// Write-write-read rounds; returns how many took 30 ms or more (the true stalls).
pub fn wwr(port: u16, rounds: usize, nodelay: bool) -> usize {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_nodelay(nodelay).unwrap();
    let mut reply = [0u8; 100];
    let mut slow = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        c.write_all(&[b'a'; 100]).unwrap();
        c.write_all(&[b'b'; 100]).unwrap();
        c.read_exact(&mut reply).unwrap();
        if t.elapsed() >= Duration::from_millis(30) {
            slow += 1;
        }
    }
    slow
}
