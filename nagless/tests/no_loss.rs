//! Closing, backpressure and errors on real sockets (std wrapper): no byte is lost at close,
//! one huge write never queues more than the high-water mark, and a send error never hides
//! input that already arrived. Loopback and socket pairs only; every wait is bounded.
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

#[cfg(unix)]
use nagless::Urgency;
use nagless::{FlushPolicy, NaglessStream};

/// A connected pair on 127.0.0.1.
fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (p, _) = listener.accept().unwrap();
    (c, p)
}

fn pattern(from: u64, len: usize) -> Vec<u8> {
    (from..from + len as u64).map(|i| (i % 251) as u8).collect()
}

fn check_pattern(got: &[u8]) {
    if let Some(i) = got
        .iter()
        .enumerate()
        .position(|(i, b)| *b != (i % 251) as u8)
    {
        panic!("byte {i} of {} is wrong", got.len());
    }
}

/// Fills a non-blocking stream until it pushes back; returns the bytes accepted.
fn fill_until_would_block(s: &mut NaglessStream<TcpStream>) -> u64 {
    let mut sent = 0u64;
    for _ in 0..100_000 {
        match s.write(&pattern(sent, 4000)) {
            Ok(n) => sent += n as u64,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return sent,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("a peer that does not read must push back");
}

/// Reads everything in a thread that starts after `delay` (a slow consumer).
fn slow_reader(mut peer: TcpStream, delay: Duration) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        thread::sleep(delay);
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        got
    })
}

#[test]
fn close_on_a_full_nonblocking_socket_waits_and_loses_nothing() {
    let (c, peer) = tcp_pair();
    c.set_nonblocking(true).unwrap();
    let policy = FlushPolicy::default().high_water(1 << 20);
    let mut s = NaglessStream::with_policy(c, policy).unwrap();
    let sent = fill_until_would_block(&mut s);
    assert!(
        s.pending() > 0,
        "bytes must be queued for the test to mean anything"
    );
    let reader = slow_reader(peer, Duration::from_millis(100));
    s.close()
        .expect("close waits for socket space, then succeeds");
    let got = reader.join().unwrap();
    assert_eq!(got.len() as u64, sent);
    check_pattern(&got);
}

#[test]
fn into_inner_on_a_full_socket_gives_the_stream_and_its_bytes_back() {
    let (c, peer) = tcp_pair();
    c.set_nonblocking(true).unwrap();
    let policy = FlushPolicy::default().high_water(1 << 20);
    let mut s = NaglessStream::with_policy(c, policy).unwrap();
    let sent = fill_until_would_block(&mut s);
    let err = s
        .into_inner()
        .expect_err("a full socket cannot take everything");
    assert_eq!(err.error().kind(), io::ErrorKind::WouldBlock);
    let s = err.into_inner();
    let unsent = s.pending();
    assert!(unsent > 0);
    let queued: usize = s.buffer().map(<[u8]>::len).sum();
    assert_eq!(queued, unsent);
    let (tcp, bytes) = s.into_parts();
    assert_eq!(bytes.len(), unsent);
    // The peer reads what the socket took; the unsent bytes continue the same stream.
    tcp.set_nonblocking(false).unwrap();
    let reader = slow_reader(peer, Duration::ZERO);
    let mut tcp = tcp;
    tcp.write_all(&bytes).unwrap();
    drop(tcp);
    let got = reader.join().unwrap();
    assert_eq!(got.len() as u64, sent);
    check_pattern(&got);
}

#[test]
fn one_huge_write_queues_at_most_the_high_water_mark() {
    let (c, peer) = tcp_pair();
    c.set_nonblocking(true).unwrap();
    let high_water = 256 * 1024;
    let policy = FlushPolicy::default().high_water(high_water);
    let mut s = NaglessStream::with_policy(c, policy).unwrap();
    let huge = pattern(0, 16 << 20);
    let n = s.write(&huge).unwrap();
    assert!(n > 0 && n < huge.len(), "accepted {n} of {}", huge.len());
    assert!(s.pending() <= high_water, "{} pending", s.pending());
    // write_all on a blocking socket continues the short writes to the end.
    s.get_ref().set_nonblocking(false).unwrap();
    let reader = slow_reader(peer, Duration::from_millis(20));
    s.write_all(&huge[n..]).unwrap();
    assert!(s.pending() <= high_water);
    s.close().unwrap();
    let got = reader.join().unwrap();
    assert_eq!(got.len(), huge.len());
    check_pattern(&got);
}

#[cfg(unix)] // a UNIX socket pair
#[test]
fn a_send_error_does_not_hide_input_that_already_arrived() {
    // The peer answers (think: "413 Payload Too Large") and closes without reading: our
    // next send fails with EPIPE, but the answer is already in our receive buffer.
    let (ours, mut peer) = UnixStream::pair().unwrap();
    peer.write_all(b"413 too large").unwrap();
    drop(peer);
    let mut s = NaglessStream::with_policy(ours, FlushPolicy::immediate()).unwrap();
    // Accepted, then the send fails: the error is deferred.
    assert_eq!(s.write(b"a large request").unwrap(), 15);
    let mut reply = Vec::new();
    s.read_to_end(&mut reply)
        .expect("the input comes first, the send error stays with the writer");
    assert_eq!(reply, b"413 too large");
    let e = s
        .flush()
        .expect_err("the deferred error goes to the next write or flush");
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e:?}");
}

#[cfg(unix)] // a UNIX socket pair
#[test]
fn before_read_flushes_even_when_the_peer_already_sent_eof() {
    // recv without waiting sees EOF: the queued bytes must still leave before read says 0.
    let (ours, peer) = UnixStream::pair().unwrap();
    peer.shutdown(std::net::Shutdown::Write).unwrap();
    let mut s =
        NaglessStream::with_policy(ours, FlushPolicy::explicit_only().before_read(true)).unwrap();
    s.write_with(b"last words", Urgency::Normal).unwrap();
    assert_eq!(s.pending(), 10);
    let mut buf = [0u8; 16];
    assert_eq!(s.read(&mut buf).unwrap(), 0);
    assert_eq!(s.pending(), 0);
    let mut peer = peer;
    let mut got = Vec::new();
    drop(s);
    peer.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"last words");
}

#[cfg(unix)] // a UNIX socket pair
#[test]
fn reads_that_find_input_still_honour_the_linger_deadline() {
    // A program that mostly reads (input always waiting) must not hold its output past the
    // linger bound: before-read never fires, so the read itself checks the deadline.
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let mut s = NaglessStream::new(ours).unwrap();
    s.write_with(b"keepalive!", Urgency::Normal).unwrap();
    assert_eq!(s.pending(), 10);
    thread::sleep(Duration::from_millis(2)); // past the 500 us linger
    peer.write_all(b"more input").unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(s.read(&mut buf).unwrap(), 10);
    assert_eq!(s.pending(), 0, "the expired output waited behind the input");
}

/// `clocked` over a Unix socket (no Nagle, no ACKs): writes the peer has not read yet neither
/// fail nor wait; every byte arrives, in order.
#[cfg(unix)]
#[test]
fn clocked_writes_over_a_unix_socket_neither_fail_nor_wait() {
    let (ours, mut peer) = UnixStream::pair().unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut s = NaglessStream::with_policy(ours, FlushPolicy::clocked()).unwrap();
    let data = pattern(0, 5 * 40);
    for part in data.chunks(40) {
        s.write_all(part)
            .expect("a clocked write over a Unix socket");
    }
    s.flush().unwrap();
    let mut got = vec![0u8; data.len()];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(got, data);
}
