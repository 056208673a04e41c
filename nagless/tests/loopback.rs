//! Real sockets on 127.0.0.1: the stall a plain stream shows, and its absence under nagless.
//!
//! Assertions are robust facts with wide margins (a stall is >= 30 ms, "no stall" is < 10 ms,
//! segments are counted by the kernel's own TCP_INFO), so a noisy 2-core CI cannot flake them.
//!
//! Every OS runs these tests (Windows under Wine in CI: `scripts/wine-test`); the ones that
//! count segments with Linux's `TCP_INFO` are Linux-only, and the others count sends with the
//! stream's own stats.

#![allow(clippy::disallowed_methods)] // tests measure real time

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
use nagless::TcpInfo;
use nagless::{FlushPolicy, NaglessStream, Urgency};

const ROUNDS: usize = 50;

#[path = "support/rounds.rs"]
mod rounds;

/// A server that answers every 200-byte request with one 100-byte write, `rounds` times.
fn reply_server(rounds: usize) -> (std::net::SocketAddr, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let h = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = [0u8; 200];
        for _ in 0..rounds {
            s.read_exact(&mut req).unwrap();
            s.write_all(&[b'r'; 100]).unwrap();
        }
    });
    (addr, h)
}

#[cfg(target_os = "linux")]
fn data_segs_out(s: &TcpStream) -> u32 {
    TcpInfo::of(s)
        .unwrap()
        .data_segs_out
        .expect("kernel >= 4.6")
}

/// Runs write-write-read rounds; returns per-round durations.
fn wwr_rounds(client: &mut (impl Read + Write), rounds: usize) -> Vec<Duration> {
    wwr_timed(client, rounds).0
}

/// [`wwr_rounds`], with each round's writing time too (from its first write to its read).
fn wwr_timed(client: &mut (impl Read + Write), rounds: usize) -> (Vec<Duration>, Vec<Duration>) {
    let mut reply = [0u8; 100];
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            client.write_all(&[b'a'; 100]).unwrap();
            client.write_all(&[b'b'; 100]).unwrap();
            let writing = t.elapsed();
            client.read_exact(&mut reply).unwrap();
            (t.elapsed(), writing)
        })
        .unzip()
}

#[test]
fn drop_flushes_pending_output() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).unwrap();
        v
    });
    {
        let mut s = NaglessStream::with_policy(
            TcpStream::connect(addr).unwrap(),
            FlushPolicy::explicit_only(),
        )
        .unwrap();
        s.write_all(b"last words").unwrap();
        assert_eq!(s.pending(), 10);
    }
    assert_eq!(server.join().unwrap(), b"last words");
}

#[test]
fn sender_deadline_is_honoured_by_the_event_loop() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        b
    });
    let tcp = TcpStream::connect(addr).unwrap();
    let linger = Duration::from_micros(500);
    let mut sender =
        NaglessStream::with_policy(&tcp, FlushPolicy::default().linger(Some(linger))).unwrap();
    sender.write_all(b"tick!").unwrap();
    let deadline = sender
        .next_deadline()
        .expect("a deadline for pending bytes");
    // The event loop sleeps until the deadline, then polls.
    while Instant::now() < deadline {
        thread::yield_now();
    }
    sender.poll_deadline().unwrap();
    assert_eq!(sender.pending(), 0);
    assert_eq!(sender.stats().flushes_for(nagless::FlushReason::Linger), 1);
    assert_eq!(&server.join().unwrap(), b"tick!");
}

#[test]
fn nonblocking_backpressure_loses_and_duplicates_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    tcp.set_nonblocking(true).unwrap();
    let policy = FlushPolicy::default().high_water(64 * 1024);
    let mut s = NaglessStream::with_policy(tcp, policy).unwrap();
    // Write a counter stream until the socket and the queue are full.
    let mut sent: u64 = 0;
    let mut blocked = false;
    for _ in 0..1_000_000 {
        let chunk: Vec<u8> = (sent..sent + 1000).map(|i| (i % 251) as u8).collect();
        match s.write(&chunk) {
            Ok(n) => {
                // Short writes happen at the high-water mark.
                assert!(n > 0 && n <= chunk.len());
                sent += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                blocked = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(blocked, "a non-reading peer must push back");
    assert!(s.pending() >= 64 * 1024);
    // Drain on the peer while finishing the flush.
    let reader = thread::spawn(move || {
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        got
    });
    let start = Instant::now();
    loop {
        match s.flush() {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "flush never finished"
                );
                thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    drop(s);
    let got = reader.join().unwrap();
    assert_eq!(got.len() as u64, sent);
    assert!(got.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
}

#[test]
fn send_error_is_reported_to_a_later_call() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut s = NaglessStream::connect(addr).unwrap();
    let (peer, _) = listener.accept().unwrap();
    drop(peer);
    let mut failure = None;
    for _ in 0..1000 {
        if let Err(e) = s.write_with(&[0u8; 1000], Urgency::SendNow) {
            failure = Some(e);
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let e = failure.expect("writes to a closed peer must eventually fail");
    assert!(
        matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        ),
        "{e:?}"
    );
}

/// A server answering pipelined requests: input already waiting does not flush, so the
/// answers to requests that arrived together leave together.
#[test]
fn answers_to_pipelined_requests_coalesce() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut client = TcpStream::connect(addr).unwrap();
    let (tcp, _) = listener.accept().unwrap();
    #[cfg(target_os = "linux")]
    let before = data_segs_out(&tcp);
    // No linger bound: the answers must wait for input, however slowly this machine reads.
    let policy = FlushPolicy::default().linger(None);
    let mut server = NaglessStream::with_policy(tcp, policy).unwrap();
    // Ten requests arrive at once.
    client.write_all(&[b'q'; 10 * 20]).unwrap();
    while server.get_ref().peek(&mut [0u8; 200]).unwrap() < 200 {
        thread::yield_now();
    }
    let mut req = [0u8; 20];
    for _ in 0..10 {
        server.read_exact(&mut req).unwrap();
        server.write_all(&[b'a'; 50]).unwrap();
    }
    assert_eq!(server.pending(), 500, "answers wait while input is waiting");
    // The next read would wait: everything leaves first, as one segment.
    client.write_all(b"bye").unwrap();
    let mut reply = vec![0u8; 500];
    let reader = thread::spawn(move || {
        client.read_exact(&mut reply).unwrap();
        reply
    });
    let mut bye = [0u8; 3];
    server.read_exact(&mut bye).unwrap();
    let mut one = [0u8; 1];
    let _ = server.get_ref().set_nonblocking(true);
    let _ = server.read(&mut one); // nothing more: would wait, so it flushes
    let reply = reader.join().unwrap();
    assert!(reply.iter().all(|&b| b == b'a'));
    assert_eq!(server.stats().flushes, 1, "one gathered send");
    #[cfg(target_os = "linux")]
    assert_eq!(data_segs_out(server.get_ref()) - before, 1);
}

#[test]
fn shutdown_flushes_then_sends_fin() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut s = NaglessStream::with_policy(
        TcpStream::connect(addr).unwrap(),
        FlushPolicy::explicit_only(),
    )
    .unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    s.write_all(b"bye now").unwrap();
    assert_eq!(s.pending(), 7);
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = Vec::new();
    peer.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"bye now");
}

#[cfg(target_os = "linux")]
#[test]
fn tcp_info_snapshots_what_the_socket_sent_and_had_acknowledged() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    (&tcp).write_all(&[1u8; 3000]).unwrap();
    let mut buf = [0u8; 3000];
    peer.read_exact(&mut buf).unwrap();
    let info = TcpInfo::of(&tcp).unwrap();
    assert_eq!(info.state, nagless::TcpState::Established);
    assert!(info.snd_mss > 0 && info.rtt_us > 0);
    assert_eq!(info.bytes_sent, Some(3000));
    assert_eq!(info.notsent_bytes, Some(0));
    // The peer has acknowledged everything (plus one for the SYN) once the data is read.
    let start = Instant::now();
    while TcpInfo::of(&tcp).unwrap().bytes_acked != Some(3001) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never acknowledged"
        );
        thread::yield_now();
    }
}

/// Wrapping sets `TCP_NODELAY` on every OS; `TCP_INFO`, which only Linux has, says so
/// elsewhere with `ErrorKind::Unsupported`, never a wrong answer.
#[test]
fn wrapping_sets_nodelay_on_every_os_and_tcp_info_is_linux_only() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let _peer = listener.accept().unwrap();
    tcp.set_nodelay(false).unwrap();
    let s = NaglessStream::new(&tcp).unwrap();
    assert!(tcp.nodelay().unwrap(), "wrapping sets TCP_NODELAY");
    let linux = cfg!(any(target_os = "linux", target_os = "android"));
    assert_eq!(s.tcp_info().is_ok(), linux);
    if !linux {
        assert_eq!(s.tcp_info().unwrap_err().kind(), io::ErrorKind::Unsupported);
    }
}

#[test]
fn a_write_after_the_linger_deadline_sends_what_waited() {
    // The write path reads the clock only when the deadline could have passed; a write 2 ms
    // after the first (linger 500 µs) must see that it has, and send the first bytes.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut s = NaglessStream::connect(listener.local_addr().unwrap()).unwrap();
    let _peer = listener.accept().unwrap();
    for round in 0..20 {
        s.write_all(b"0123456789").unwrap();
        assert_eq!(s.pending(), 10, "round {round}: held for coalescing");
        for _ in 0..50 {
            s.write_all(b"x").unwrap(); // fast-path writes inside the window
        }
        thread::sleep(Duration::from_millis(2));
        let lingered = s.stats().flushes_for(nagless::FlushReason::Linger);
        s.write_all(b"late").unwrap();
        assert!(
            s.pending() <= 4,
            "round {round}: the expired bytes were not sent"
        );
        assert_eq!(
            s.stats().flushes_for(nagless::FlushReason::Linger),
            lingered + 1
        );
        s.flush().unwrap();
    }
}

/// `Stats.syscalls` counts every syscall the stream makes besides the application's reads:
/// sends, input checks before reads, and the queries for the segment size (`TCP_INFO` on
/// Linux, `TCP_MAXSEG` or `SIO_TCP_INFO` elsewhere).
#[test]
fn segment_size_queries_are_counted_as_syscalls() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 45 * 4000];
        s.read_exact(&mut buf).unwrap();
        s.write_all(b"k").unwrap();
    });
    // No linger bound: only the size threshold sends before the read, so the queue reaches a
    // segment's worth however slowly this loop runs (with the default bound a slow machine
    // sends each window's few writes at the deadline and never asks again).
    let policy = FlushPolicy::default().linger(None);
    let mut s = NaglessStream::with_policy(TcpStream::connect(addr).unwrap(), policy).unwrap();
    for _ in 0..4000 {
        s.write_all(&[0x55u8; 45]).unwrap();
    }
    let mut k = [0u8; 1];
    s.read_exact(&mut k).unwrap();
    server.join().unwrap();
    let st = s.stats();
    // One query when the stream was made, more whenever the queue reached the threshold
    // (after the burst's first full segment left at once: 180,000 bytes reach it again).
    assert!(st.segment_checks >= 2, "{st:?}");
    assert!(
        st.syscalls >= st.flushes + st.input_checks + st.segment_checks,
        "{st:?}"
    );
}

/// Each flush is counted by what started it: `flush_now` is an explicit flush even under a
/// policy whose `flush` is a hint, not a close.
#[test]
fn flushes_are_counted_by_what_started_them() {
    use nagless::FlushReason;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hint = FlushPolicy::explicit_only().explicit_flush(false);
    let mut s = NaglessStream::with_policy(TcpStream::connect(addr).unwrap(), hint).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    s.write_all(b"one").unwrap();
    s.flush().unwrap();
    assert_eq!(s.pending(), 3, "flush is a hint here");
    s.flush_now().unwrap();
    s.write_all(b"two").unwrap();
    assert_eq!(s.stats().flushes_for(FlushReason::Explicit), 1);
    assert_eq!(s.stats().flushes_for(FlushReason::Close), 0);
    s.close().unwrap();
    let mut got = Vec::new();
    peer.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"onetwo");
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn plain_stream_shows_the_write_write_read_stall() {
        let (addr, server) = reply_server(ROUNDS);
        let mut client = TcpStream::connect(addr).unwrap();
        let times = wwr_rounds(&mut client, ROUNDS);
        server.join().unwrap();
        let stalled = times
            .iter()
            .filter(|d| **d >= Duration::from_millis(30))
            .count();
        // Proof the test can see the stall: most rounds wait for the delayed ACK.
        assert!(
            stalled >= ROUNDS / 2,
            "only {stalled}/{ROUNDS} rounds stalled: {times:?}"
        );
    }

    #[test]
    fn nagless_stream_never_stalls_and_sends_one_segment_per_request() {
        let (addr, server) = reply_server(ROUNDS);
        let mut client = NaglessStream::connect(addr).unwrap();
        #[cfg(target_os = "linux")]
        let before = data_segs_out(client.get_ref());
        let (times, writing) = wwr_timed(&mut client, ROUNDS);
        #[cfg(target_os = "linux")]
        let segs = data_segs_out(client.get_ref()) - before;
        server.join().unwrap();
        rounds::assert_no_stall(&times);
        let st = client.stats();
        // One segment per request; a round where the thread was descheduled for longer than the
        // linger bound between its two writes legitimately sends the first one alone.
        let lingered = st.flushes_for(nagless::FlushReason::Linger) as usize;
        // A linger flush is a thread descheduled mid-burst: a few on a busy machine.
        rounds::assert_lingers_fit(lingered, &writing, nagless::DEFAULT_LINGER);
        // A linger flush at the second write sends the first alone; one at the read (the
        // thread descheduled before it) sends both together.
        let sends = ROUNDS..=ROUNDS + lingered;
        #[cfg(target_os = "linux")]
        assert!(
            sends.contains(&(segs as usize)),
            "{segs} data segments for {ROUNDS} requests, {lingered} linger flushes"
        );
        let gathered = (st.syscalls - st.input_checks - st.segment_checks) as usize;
        assert!(
            sends.contains(&gathered),
            "{gathered} gathered sends (sendmsg, WSASend) for {ROUNDS} requests, {lingered} linger flushes"
        );
        assert_eq!(
            st.input_checks as usize, ROUNDS,
            "one input check before each waiting read"
        );
        assert_eq!(
            st.segment_checks, 1,
            "one segment-size query, when the stream was made"
        );
    }

    /// 255 small messages, then a read: at most ceil(bytes / MSS) + 1 data segments.
    #[cfg(target_os = "linux")]
    #[test]
    fn burst_of_255_messages_packs_into_full_segments() {
        let msg = [0x55u8; 45]; // the size of a one-prefix BGP UPDATE
        let total = msg.len() * 255;
        let run = |nagless: bool| -> (u32, u32) {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = vec![0u8; total];
                s.read_exact(&mut buf).unwrap();
                s.write_all(b"k").unwrap();
            });
            let tcp = TcpStream::connect(addr).unwrap();
            let before = data_segs_out(&tcp);
            let (segs, mss) = if nagless {
                let mut s = NaglessStream::new(tcp).unwrap();
                for _ in 0..255 {
                    s.write_all(&msg).unwrap();
                }
                let mut k = [0u8; 1];
                s.read_exact(&mut k).unwrap();
                let info = s.tcp_info().unwrap();
                (info.data_segs_out.unwrap() - before, info.snd_mss)
            } else {
                let mut s = tcp;
                s.set_nodelay(true).unwrap();
                for _ in 0..255 {
                    s.write_all(&msg).unwrap();
                }
                let mut k = [0u8; 1];
                s.read_exact(&mut k).unwrap();
                let info = TcpInfo::of(&s).unwrap();
                (info.data_segs_out.unwrap() - before, info.snd_mss)
            };
            server.join().unwrap();
            (segs, mss)
        };
        let (nagless_segs, mss) = run(true);
        let (nodelay_segs, _) = run(false);
        let bound = total.div_ceil(mss as usize) + 1;
        eprintln!(
            "255 x 45 B: nagless {nagless_segs} segments (bound {bound}), NODELAY alone {nodelay_segs}"
        );
        assert!(nagless_segs as usize <= bound, "{nagless_segs} > {bound}");
        assert!(nodelay_segs > nagless_segs);
    }
}
