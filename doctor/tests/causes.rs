//! Ground truth by construction (issue 51): scripted scenarios on emulated paths, one or more
//! per cause, each made by small programs that measure what they did, captured at both ends
//! at once. On a 10 ms path: a server that sleeps, a client that waits between requests, a
//! request in two writes held by Nagle, an answer whose last piece is sent with `MSG_MORE` and
//! held by the kernel, a reader that stops reading, requests and answers the path loses on
//! purpose (one each in three rounds: at the far end the loss shows only in the sender's
//! IPv4 numbers), a client that writes a request every millisecond with Nagle on while a
//! thread of its own reads the answers (the ACK clock). On a 10 ms path of 4 Mbit/s: answers that
//! cross at the path's rate (the truth: their bytes on the wire at the rate). On a 50 ms path:
//! answers a CUBIC sender's window holds back (slow start, and its restart after idle; the
//! truth: the answer's first to last byte by the client's clock). Each exchange's truth comes
//! from the programs' own clocks or the path's, never from the doctor; the doctor's budget is
//! scored against it per cause, by time (the time it gives a cause that truly went to it,
//! over all it gives that cause, and over all that truly went to it) and by event (exchanges
//! where a cause took 20 ms or more, and whether the doctor gave it at least half of that; a
//! cause given 40 ms or more where it took less than half of that is a false one). Needs root
//! (namespaces, tcpdump): skipped with a note outside CI, a failure under CI.
//!
//! The figures are printed; `scripts/bench-causes` measures them on a quiet machine (most
//! 0.95 and above; `docs/doctor.md` names the rest). The test asserts what holds beside a load too:
//! a machine busy on both cores wakes the programs late after their sleeps, against their own
//! clocks (think and idle fell to 0.86-0.89 by time, a Nagle stall's recall at the server's
//! end to 0.74, beside one or two busy loops). So it holds each cause a scenario made to 0.6
//! by time (a build that does not know a cause gives it nothing), every exchange's cause by
//! event (found when given half its time, none given 40 ms falsely; 0.95),
//! and time given a cause no scenario of its path made to 40 ms an exchange at most. A busy
//! host also deschedules the path's forwarder, 0.2-10 ms at a time here: a wait no program
//! and no part of the path made, no truth here. A run that fails where the forwarder ran 1 ms
//! or more behind its schedule is made again, three runs at most; one whose path kept time
//! counts at once.
#![allow(clippy::disallowed_methods)] // the programs measure real time

mod path_support;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use nagless_doctor::analysis::{Cause, Options, Spent};
use nagless_doctor::Diagnosis;
use nagless_netpath::{EmulatedPath, PathSpec, Toward};
use path_support::{at_both_ends, connect, flow_on, listen, spent};

/// Rounds per scenario: every exchange is kept in the budget (the first 8).
const ROUNDS: u64 = 6;

/// What a cause is scored as: a name, and the (cause, side) pairs of the budget it is.
struct Label {
    name: &'static str,
    parts: &'static [(Cause, Option<&'static str>)],
}

const LABELS: [Label; 13] = [
    Label {
        name: "think (server)",
        parts: &[(Cause::Think, Some("server"))],
    },
    Label {
        name: "idle (client)",
        parts: &[(Cause::Idle, Some("client"))],
    },
    Label {
        name: "Nagle stall (client)",
        parts: &[(Cause::NagleStall, Some("client"))],
    },
    Label {
        name: "ACK-clocked (client)",
        parts: &[(Cause::AckClocked, Some("client"))],
    },
    Label {
        name: "ACK-clocked (server)",
        parts: &[(Cause::AckClocked, Some("server"))],
    },
    Label {
        name: "delayed ACK",
        parts: &[
            (Cause::DelayedAck, Some("client")),
            (Cause::DelayedAck, Some("server")),
        ],
    },
    Label {
        name: "sender's hold (server)",
        parts: &[(Cause::SenderHold, Some("server"))],
    },
    Label {
        name: "the receiver (zero and receive window)",
        parts: &[
            (Cause::ZeroWindow, Some("server")),
            (Cause::ReceiveWindow, Some("client")),
        ],
    },
    Label {
        name: "transfer",
        parts: &[(Cause::Transfer, None)],
    },
    Label {
        name: "congestion window (server)",
        parts: &[(Cause::CongestionWindow, Some("server"))],
    },
    Label {
        name: "loss recovery (client)",
        parts: &[(Cause::LossRecovery, Some("client"))],
    },
    Label {
        name: "loss recovery (server)",
        parts: &[(Cause::LossRecovery, Some("server"))],
    },
    Label {
        name: "round trip",
        parts: &[(Cause::RoundTrip, None)],
    },
];

/// What one scenario made: its port, and the time each label truly took in each exchange,
/// ms (exchange 0: the whole flow, for a scenario of one transfer).
struct Made {
    name: &'static str,
    port: u16,
    truth: Vec<(u64, &'static str, f64)>,
    /// The truth at the server's end, where it differs: an exchange begins where its request
    /// passes the capture point, so a request lost before the server's end is waited for
    /// in the exchange before, there.
    truth_at_server: Option<Vec<(u64, &'static str, f64)>>,
    /// Labels this scenario may make happen beside its truth, not scored here (neither true
    /// nor false), with the reason at the scenario.
    unscored: &'static [&'static str],
    /// The round trips its flow spans as seen at the client's end and at the server's (the
    /// handshake's, a question's way to the answerer and the answer's back, the close's): each
    /// end sees the ones that begin and end within its first to last frame.
    round_trips: [f64; 2],
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn rtt_ms(p: &EmulatedPath) -> f64 {
    ms(p.spec().rtt)
}

/// A server that reads each 100-byte request, sleeps 40 ms and 10 ms more each round, and
/// answers: its think time, from its request's arrival at its socket (the kernel's stamp) to
/// its answer's write, as it measured it (its wake-ups on a busy machine included, as the
/// wire shows them).
fn think(p: &EmulatedPath, port: u16) -> Made {
    let l = listen(p, port);
    stamp_arrivals(&l);
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 100];
        let mut slept = Vec::new();
        for i in 0..ROUNDS {
            let arrived = read_request(&s, &mut buf);
            thread::sleep(Duration::from_millis(40 + 10 * i));
            s.write_all(&[b'r'; 100]).unwrap();
            slept.push(ms(SystemTime::now()
                .duration_since(arrived)
                .unwrap_or_default()));
        }
        slept
    });
    let mut c = connect(p, port);
    c.set_nodelay(true).unwrap();
    let mut buf = [0u8; 100];
    for _ in 0..ROUNDS {
        c.write_all(&[b'q'; 100]).unwrap();
        c.read_exact(&mut buf).unwrap();
    }
    drop(c);
    let slept = srv.join().unwrap();
    let mut truth = Vec::new();
    for (i, s) in slept.iter().enumerate() {
        let x = i as u64 + 1;
        truth.push((x, "think (server)", *s));
    }
    // The handshake, each question and its answer, the close; at the server's end, which
    // closes first, the first question's way and the last answer's are outside its flow.
    Made {
        name: "a server that sleeps",
        port,
        truth,
        truth_at_server: None,
        unscored: &[],
        round_trips: [ROUNDS as f64 + 2.0, ROUNDS as f64 + 1.0],
    }
}

/// A server on `port` that answers each 100-byte request with 100 bytes at once
/// (`TCP_NODELAY`), until the client closes; with `quickack`, it ACKs each request at once
/// too, never on its answer.
fn echo(p: &EmulatedPath, port: u16, quickack: bool) -> thread::JoinHandle<()> {
    let l = listen(p, port);
    thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 100];
        loop {
            if quickack {
                socket2::SockRef::from(&s).set_tcp_quickack(true).unwrap();
            }
            if s.read_exact(&mut buf).is_err() {
                break;
            }
            s.write_all(&[b'r'; 100]).unwrap();
        }
    })
}

/// An echo server, and a client that waits 40 ms and 10 ms more each round before its next
/// request: its idle time, as it measured it.
fn idle(p: &EmulatedPath, port: u16) -> Made {
    let srv = echo(p, port, false);
    let mut c = connect(p, port);
    c.set_nodelay(true).unwrap();
    let mut buf = [0u8; 100];
    let mut truth = Vec::new();
    for i in 0..ROUNDS {
        c.write_all(&[b'q'; 100]).unwrap();
        c.read_exact(&mut buf).unwrap();
        if i + 1 < ROUNDS {
            let t = Instant::now();
            thread::sleep(Duration::from_millis(40 + 10 * i));
            truth.push((i + 1, "idle (client)", ms(t.elapsed())));
        }
    }
    drop(c);
    srv.join().unwrap();
    // The client closes first: its FIN's round trip is in the server's flow too.
    Made {
        name: "a client that waits",
        port,
        truth,
        truth_at_server: None,
        unscored: &[],
        round_trips: [ROUNDS as f64 + 2.0, ROUNDS as f64 + 2.0],
    }
}

/// Requests in two 100-byte writes (Nagle on at the client), answered at once: the second
/// write waits for the server's delayed ACK of the first. The server times the two parts'
/// arrivals: their gap less the round trip (the ACK's way to the client, the part's back) is
/// the stall.
fn stall(p: &EmulatedPath, port: u16) -> Made {
    let l = listen(p, port);
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 100];
        let mut gaps = Vec::new();
        for _ in 0..ROUNDS {
            s.read_exact(&mut buf).unwrap();
            let t = Instant::now();
            s.read_exact(&mut buf).unwrap();
            gaps.push(ms(t.elapsed()));
            s.write_all(&[b'r'; 100]).unwrap();
        }
        gaps
    });
    let mut c = connect(p, port);
    let mut buf = [0u8; 100];
    for _ in 0..ROUNDS {
        c.write_all(&[b'a'; 100]).unwrap();
        c.write_all(&[b'b'; 100]).unwrap();
        c.read_exact(&mut buf).unwrap();
    }
    drop(c);
    let gaps = srv.join().unwrap();
    let rtt = rtt_ms(p);
    let mut truth = Vec::new();
    for (i, g) in gaps.iter().enumerate() {
        let x = i as u64 + 1;
        truth.push((x, "Nagle stall (client)", (g - rtt).max(0.0)));
    }
    // Two round trips a round (the held part's, the answer's).
    Made {
        name: "a request in two writes",
        port,
        truth,
        truth_at_server: None,
        unscored: &[],
        round_trips: [2.0 * ROUNDS as f64 + 2.0, 2.0 * ROUNDS as f64 + 1.0],
    }
}

/// Answers of a 50-byte header and, 15 ms later (the client ACKs at once: the header is
/// acknowledged, nothing is in flight), a 100-byte body sent with `MSG_MORE` and nothing
/// after it (HAProxy #3447): the kernel holds the body until its ceiling on a cork (200 ms).
/// The client times the two pieces' arrivals, the server its pause between them: the gap less
/// the pause is the hold, the pause the server's think time.
fn hold(p: &EmulatedPath, port: u16) -> Made {
    let l = listen(p, port);
    stamp_arrivals(&l);
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 100];
        let mut paused = Vec::new();
        for _ in 0..ROUNDS {
            let arrived = read_request(&s, &mut buf);
            s.write_all(&[b'h'; 50]).unwrap();
            // Its time before the header (a wake-up on a busy machine), then its pause.
            let t = Instant::now();
            let before = ms(SystemTime::now()
                .duration_since(arrived)
                .unwrap_or_default());
            thread::sleep(Duration::from_millis(15));
            paused.push((before, ms(t.elapsed())));
            let body = [b'b'; 100];
            // SAFETY: a send of a live buffer of its length on a socket this thread owns.
            let n = unsafe {
                libc::send(
                    s.as_raw_fd(),
                    body.as_ptr().cast(),
                    body.len(),
                    libc::MSG_MORE,
                )
            };
            assert_eq!(n, 100);
        }
        paused
    });
    let mut c = connect(p, port);
    c.set_nodelay(true).unwrap();
    let (mut head, mut body) = ([0u8; 50], [0u8; 100]);
    let mut gaps = Vec::new();
    for _ in 0..ROUNDS {
        c.write_all(&[b'q'; 100]).unwrap();
        c.read_exact(&mut head).unwrap();
        // ACK at once: nothing but the kernel's ceiling pushes a corked piece.
        socket2::SockRef::from(&c).set_tcp_quickack(true).unwrap();
        let t = Instant::now();
        c.read_exact(&mut body).unwrap();
        socket2::SockRef::from(&c).set_tcp_quickack(true).unwrap();
        gaps.push(ms(t.elapsed()));
    }
    drop(c);
    let paused = srv.join().unwrap();
    let mut truth = Vec::new();
    for (i, (gap, (before, pause))) in gaps.iter().zip(&paused).enumerate() {
        let x = i as u64 + 1;
        truth.push((x, "sender's hold (server)", (gap - pause).max(0.0)));
        truth.push((x, "think (server)", before + pause));
    }
    Made {
        name: "an answer's last piece held by MSG_MORE",
        port,
        truth,
        truth_at_server: None,
        unscored: &[],
        round_trips: [ROUNDS as f64 + 2.0, ROUNDS as f64 + 1.0],
    }
}

/// 256 KB to a reader with a 4 KB receive buffer that reads nothing for 800 ms, then reads
/// it all: by construction the reader holds the sender back from its first write to the
/// reader's end of the stream (a window closed, then one too small for the path), less the
/// round trip that carries the first bytes there and the last ACK back.
fn receiver(p: &EmulatedPath, port: u16) -> Made {
    let addr = p.server_addr();
    let l = p
        .run_in_server(move || {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            s.set_reuse_address(true)?;
            s.set_recv_buffer_size(4096)?;
            s.bind(&std::net::SocketAddr::from((addr, port)).into())?;
            s.listen(1)?;
            Ok::<std::net::TcpListener, std::io::Error>(s.into())
        })
        .unwrap()
        .unwrap();
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        thread::sleep(Duration::from_millis(800));
        let mut v = Vec::new();
        s.read_to_end(&mut v).unwrap();
        (v.len(), Instant::now())
    });
    let mut c = connect(p, port);
    let start = Instant::now();
    c.write_all(&vec![b'z'; 256 << 10]).unwrap();
    drop(c);
    let (got, end) = srv.join().unwrap();
    assert_eq!(got, 256 << 10);
    Made {
        name: "a reader that stops reading",
        port,
        truth: vec![(
            0,
            "the receiver (zero and receive window)",
            ms(end.duration_since(start)) - rtt_ms(p),
        )],
        truth_at_server: None,
        // A 4 KB buffer may have no room for a segment its window let in (a loaded machine
        // reads late): the reader's kernel drops it, and the sender's probe or timeout sends
        // it again, a loss the doctor names as such. The receiver's doing, truly a loss.
        // And while its window lets a segment or two in at a time, the reader's kernel may
        // delay the ACK that would open it again (24.6 ms given once at the client's end):
        // the receiver's doing too, named for what it is.
        unscored: &["loss recovery (client)", "delayed ACK"],
        // The handshake and the close.
        round_trips: [2.0, 2.0],
    }
}

/// A server that answers each 100-byte request with `size` bytes at once, its listener on
/// CUBIC (the host's default may pace, as BBR does, where the scenario wants the classic
/// window); with the maximum segment size it sends at.
fn answering(p: &EmulatedPath, port: u16, size: usize) -> thread::JoinHandle<usize> {
    let l = listen(p, port);
    socket2::SockRef::from(&l)
        .set_tcp_congestion(b"cubic")
        .expect("the kernel has CUBIC");
    thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mss = socket2::SockRef::from(&s).tcp_mss().unwrap() as usize;
        let mut buf = [0u8; 100];
        for _ in 0..ROUNDS {
            s.read_exact(&mut buf).unwrap();
            s.write_all(&vec![b'r'; size]).unwrap();
        }
        mss
    })
}

/// Per request, `size` bytes read: from the request to the last byte, and from the first
/// byte to the last, by the client's clock; between rounds it waits `pause`.
fn ask(p: &EmulatedPath, port: u16, size: usize, pause: Duration) -> Vec<(f64, f64, f64)> {
    let mut c = connect(p, port);
    c.set_nodelay(true).unwrap();
    let mut v = vec![0u8; size];
    let mut out = Vec::new();
    for i in 0..ROUNDS {
        let t = Instant::now();
        c.write_all(&[b'q'; 100]).unwrap();
        let mut got = c.read(&mut v).unwrap();
        let first = Instant::now();
        while got < size {
            got += c.read(&mut v[got..]).unwrap();
        }
        let (whole, spread) = (ms(t.elapsed()), ms(first.elapsed()));
        let mut slept = 0.0;
        if i + 1 < ROUNDS && !pause.is_zero() {
            let t = Instant::now();
            thread::sleep(pause);
            slept = ms(t.elapsed());
        }
        out.push((whole, spread, slept));
    }
    out
}

/// 64 KB answers over the path's rate (its queue never full): by construction each takes
/// its bytes on the wire (each segment's headers too) at the rate, the first segment's way
/// included.
fn transfer(p: &EmulatedPath, port: u16) -> Made {
    const SIZE: usize = 64 << 10;
    let srv = answering(p, port, SIZE);
    let asked = ask(p, port, SIZE, Duration::ZERO);
    let mss = srv.join().unwrap();
    let spec = p.spec();
    let segments = SIZE.div_ceil(mss);
    let wire = SIZE + segments * (spec.mtu as usize - mss);
    let rate = spec.rate_bps.expect("a path with a rate") as f64;
    let each = wire as f64 * 8.0 / rate * 1000.0;
    for (whole, _, _) in &asked {
        // The client's clock agrees (the round trip, and a scheduler's slack).
        assert!(
            *whole >= each && *whole < each + rtt_ms(p) + 20.0,
            "{whole:.1} ms for {each:.1} ms of transfer"
        );
    }
    Made {
        name: "answers at the path's rate",
        port,
        truth: (1..=ROUNDS).map(|x| (x, "transfer", each)).collect(),
        truth_at_server: None,
        unscored: &[],
        round_trips: [ROUNDS as f64 + 2.0, ROUNDS as f64 + 1.0],
    }
}

/// 96 KB answers on a path with no rate to speak of, the client waiting 400 ms between its
/// requests (longer than the retransmission timeout: the window starts again smaller): the
/// sender's window holds each answer back a round trip or two, the time from the answer's
/// first byte to its last by the client's clock.
fn window(p: &EmulatedPath, port: u16) -> Made {
    const SIZE: usize = 96 << 10;
    roomy_receiver(p);
    let srv = answering(p, port, SIZE);
    let asked = ask(p, port, SIZE, Duration::from_millis(400));
    srv.join().unwrap();
    let mut truth = Vec::new();
    for (i, (_, spread, slept)) in asked.iter().enumerate() {
        let x = i as u64 + 1;
        truth.push((x, "congestion window (server)", *spread));
        if *slept > 0.0 {
            truth.push((x, "idle (client)", *slept));
        }
    }
    Made {
        name: "answers a window holds back",
        port,
        truth,
        truth_at_server: None,
        unscored: &[],
        round_trips: [ROUNDS as f64 + 2.0, ROUNDS as f64 + 1.0],
    }
}

/// Gives connections in the client's namespace a 4 MB receive buffer from their start (its
/// `tcp_rmem` default): the client's window then opens two segments for each it takes, ahead
/// of a sender's window in slow start, so only the server's congestion window holds the
/// answers back. (With the host's 128 KB the window stays near 80 KB until autotuning grows
/// the buffer; a congestion window grown by then meets it, and the receive window truly
/// holds the sender back, as the doctor said on a busy machine.)
fn roomy_receiver(p: &EmulatedPath) {
    p.run_in_client(|| std::fs::write("/proc/sys/net/ipv4/tcp_rmem", "4096 4194304 8388608"))
        .and_then(|r| r)
        .expect("the client's namespace takes a tcp_rmem");
}

/// An echo server, and a client whose request the path loses in rounds 2 and 6 and whose
/// answer it loses in round 4 (after a clean round: the capture point has seen each side
/// number its packets one by one): each lost segment is sent again after its sender's
/// retransmission timeout. The truth is each such exchange's time by the client's clock,
/// less its round trip.
fn loss(p: &EmulatedPath, port: u16) -> Made {
    let srv = echo(p, port, true);
    let mut c = connect(p, port);
    c.set_nodelay(true).unwrap();
    let mut buf = [0u8; 100];
    let (mut truth, mut at_server) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        // Lossy rounds between clean ones, each segment ACKed at once (a lost segment then
        // carries no ACK with it, whose loss would make the other side send again too).
        let lose = match i {
            1 | 5 => Some(Toward::Server),
            3 => Some(Toward::Client),
            _ => None,
        };
        socket2::SockRef::from(&c).set_tcp_quickack(true).unwrap();
        if let Some(t) = lose {
            p.lose_next_data(t);
        }
        let t = Instant::now();
        c.write_all(&[b'q'; 100]).unwrap();
        c.read_exact(&mut buf).unwrap();
        if let Some(toward) = lose {
            let waited = ms(t.elapsed()) - rtt_ms(p);
            let (label, at_server_x) = match toward {
                Toward::Server => ("loss recovery (client)", i),
                Toward::Client => ("loss recovery (server)", i + 1),
            };
            truth.push((i + 1, label, waited));
            at_server.push((at_server_x, label, waited));
        }
    }
    drop(c);
    srv.join().unwrap();
    assert_eq!(
        p.stats().lost,
        3,
        "the path lost what it was told to, no more"
    );
    // The client closes first: its FIN's round trip is in the server's flow too.
    Made {
        name: "segments lost on the way",
        port,
        truth,
        truth_at_server: Some(at_server),
        unscored: &[],
        round_trips: [ROUNDS as f64 + 2.0, ROUNDS as f64 + 2.0],
    }
}

/// Requests the ACK-clocked client writes, and the time between two of its writes.
const CLOCKED_REQUESTS: usize = 700;
const CLOCKED_EVERY: Duration = Duration::from_millis(1);

/// A client that writes a 40-byte request every millisecond on one connection, Nagle on,
/// while a thread of its own reads the answers (the multiplexed client of redis-rs #2195),
/// and a server that answers each segment's requests at once: each request written while the
/// last segment is in flight queues behind its ACK, which the answer brings a round trip
/// later. The server reads each segment's arrival from the kernel's stamp on it
/// (`SO_TIMESTAMPNS`: not the thread's wake-up, which the capture cannot see either), and
/// times its answer (its think time). The
/// truth, per segment, is the mean time its requests waited in the client's queue (from its
/// write to the segment's arrival, less the way of the first request, which went alone): how
/// long a request waited for the clock. The round trips are the rest of the flow's time at
/// the client (from its connect to its last answer, the handshake and the close's round
/// trips added), as each end sees it.
fn clocked(p: &EmulatedPath, port: u16) -> Made {
    const SIZE: usize = 40;
    let l = listen(p, port);
    // (Before the first request can come: the connection takes it from its listener.)
    stamp_arrivals(&l);
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 65536];
        let (mut got, mut arrivals, mut answering) = (0usize, Vec::new(), 0.0);
        loop {
            let (n, arrived) = match read_stamped(&s, &mut buf) {
                Ok((0, _)) | Err(_) => break,
                Ok(read) => read,
            };
            let at = Instant::now();
            let before = got / SIZE;
            got += n;
            let whole = got / SIZE - before;
            if whole > 0 {
                arrivals.push((before, whole, arrived));
                s.write_all(&vec![b'r'; whole * SIZE]).unwrap();
                answering += ms(at.elapsed());
            }
        }
        (arrivals, answering)
    });
    let start = Instant::now();
    let c = connect(p, port);
    let connected = SystemTime::now();
    let mut r = c.try_clone().unwrap();
    let reader = thread::spawn(move || {
        let mut buf = vec![0u8; CLOCKED_REQUESTS * SIZE];
        r.read_exact(&mut buf).unwrap();
        Instant::now()
    });
    let mut w = &c;
    let mut written = Vec::with_capacity(CLOCKED_REQUESTS);
    for _ in 0..CLOCKED_REQUESTS {
        w.write_all(&[b'q'; SIZE]).unwrap();
        written.push(SystemTime::now());
        thread::sleep(CLOCKED_EVERY);
    }
    // What the client took before its first request (the reader's start, on a busy machine
    // 20 ms once) is its idle time, as the wire shows it.
    let idle = ms(written[0].duration_since(connected).unwrap_or_default());
    let last_answer = reader.join().unwrap();
    drop(c);
    let (arrivals, answering) = srv.join().unwrap();
    // The first request went with nothing in flight: its way, from the client's write to
    // its arrival at the server's socket (the path's half round trip and the forwarder's
    // time), is every request's beside its wait.
    let (first, n, at) = arrivals[0];
    assert_eq!((first, n), (0, 1), "the first request leaves alone");
    let since = |at: SystemTime, w: SystemTime| ms(at.duration_since(w).unwrap_or_default());
    let one_way = since(at, written[0]);
    // (Its write's return is read after the segment left: on a busy machine a little later,
    // so the way can read a little short of the path's half round trip.)
    assert!(one_way >= rtt_ms(p) / 2.0 - 1.0, "{one_way} ms");
    let mut queued = 0.0;
    let mut segments = 0;
    for (first, n, at) in &arrivals {
        let waits: f64 = written[*first..first + n]
            .iter()
            .map(|w| (since(*at, *w) - one_way).max(0.0))
            .sum();
        queued += waits / *n as f64;
        segments += 1;
    }
    eprintln!("ACK-clocked: {segments} segments, {queued:.1} ms queued by the clients' clocks");
    let lifetime = ms(last_answer.duration_since(start));
    let rtt = rtt_ms(p);
    Made {
        name: "requests clocked by ACKs",
        port,
        // (The server's own time, from each read to its answer's write, is its think time.)
        truth: vec![
            (0, "ACK-clocked (client)", queued),
            (0, "think (server)", answering),
            (0, "idle (client)", idle),
        ],
        truth_at_server: None,
        // The server thread's wake-up for each of 700 requests is its time on the wire, but
        // not in its read-to-write truth: on a busy machine (a whole CI run) it came to 28 ms
        // given against 7.7 true. And the client's sleeps between requests can overrun on a
        // busy machine (25-34 ms given as its idle, against the 0.1 ms before its first
        // request, the one wait its truth knows). Both are scored in the scenarios made for
        // them; this one scores the ACK clock.
        unscored: &["think (server)", "idle (client)"],
        // The connect's round trip is in the lifetime; the close's is not.
        round_trips: [
            (lifetime - queued - answering - idle) / rtt + 1.0,
            (lifetime - queued - answering - idle) / rtt,
        ],
    }
}

/// Asks the kernel to stamp each segment `s` (or a connection it accepts) receives with its
/// arrival (`SO_TIMESTAMPNS`), once it stamps every packet ([`stamping`]).
fn stamp_arrivals(s: &impl AsRawFd) {
    stamping();
    set_stamps(s);
}

/// Waits until the kernel stamps every packet it receives, and keeps it so for the process.
/// The first socket to ask for stamps turns them on for all from a work item, later: on a
/// busy machine a request came before it ran, unstamped. A UDP socket of ours asks, and
/// datagrams to it on 127.0.0.1 show when its ask took (at most 10 s).
fn stamping() {
    static ON: std::sync::OnceLock<std::net::UdpSocket> = std::sync::OnceLock::new();
    ON.get_or_init(|| {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").expect("a UDP socket on 127.0.0.1");
        set_stamps(&u);
        let to = u.local_addr().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            u.send_to(b"s", to).unwrap();
            let mut b = [0u8; 1];
            let (_, at) = read_with_stamp(&u, &mut b).expect("our datagram");
            if at.is_some() {
                return u;
            }
            assert!(
                Instant::now() < deadline,
                "the kernel stamps no packet after 10 s"
            );
            thread::sleep(Duration::from_millis(5));
        }
    });
}

/// Sets `SO_TIMESTAMPNS` on `s`.
fn set_stamps(s: &impl AsRawFd) {
    let on: libc::c_int = 1;
    // SAFETY: a setsockopt on a socket this thread owns, with a live `c_int` of its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_TIMESTAMPNS: {}", std::io::Error::last_os_error());
}

/// A read from `s` (stamped by [`stamp_arrivals`]), and when the last segment it read
/// arrived, by the kernel's clock: a thread's wake-up after the arrival is not in it.
fn read_stamped(s: &std::net::TcpStream, buf: &mut [u8]) -> std::io::Result<(usize, SystemTime)> {
    let (n, at) = read_with_stamp(s, buf)?;
    // (A read of nothing, the end of the stream, carries no stamp; any other must.)
    match at {
        Some(at) => Ok((n, at)),
        None if n == 0 => Ok((0, SystemTime::now())),
        None => panic!("a read of {n} bytes without the kernel's stamp"),
    }
}

/// A read from `s`, and the kernel's stamp on what it read, if any.
fn read_with_stamp(
    s: &impl AsRawFd,
    buf: &mut [u8],
) -> std::io::Result<(usize, Option<SystemTime>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // (Room for one `timespec` message, aligned as a `cmsghdr` is.)
    let mut control = [0u64; 8];
    // SAFETY: zeroed `msghdr` is a valid empty one; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` points at `buf` and `control`, both live and of the lengths given.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut at = None;
    // SAFETY: walks the control messages the kernel wrote into `control`, within
    // `msg_controllen`; a `SCM_TIMESTAMPNS` one carries a `timespec` (read unaligned).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                at = Some(
                    SystemTime::UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32),
                );
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    assert_eq!(msg.msg_flags & libc::MSG_CTRUNC, 0, "the stamp was cut");
    Ok((n as usize, at))
}

/// Reads a whole request of `buf`'s length from `s` (stamped by [`stamp_arrivals`]): when
/// its last segment arrived, by the kernel's clock.
fn read_request(s: &std::net::TcpStream, buf: &mut [u8]) -> SystemTime {
    let (mut got, mut at) = (0, SystemTime::UNIX_EPOCH);
    while got < buf.len() {
        let (n, arrived) = read_stamped(s, &mut buf[got..]).unwrap();
        assert!(n > 0, "the client closed mid-request");
        (got, at) = (got + n, arrived);
    }
    at
}

/// The time `causes` give `label`, ms.
fn given_to(causes: &[Spent], label: &Label) -> f64 {
    label
        .parts
        .iter()
        .map(|(c, side)| spent(causes, *c, *side))
        .sum()
}

/// Per label: time (truth, given, both) and events (found, false, missed).
#[derive(Default, Clone, Copy)]
struct Score {
    truth: f64,
    given: f64,
    both: f64,
    found: u32,
    false_found: u32,
    missed: u32,
}

/// An event: a cause that took this long in an exchange, ms.
const EVENT_MS: f64 = 20.0;

/// Time a cause no scenario of a path made may be given there, per exchange, ms; and a false
/// event: a cause given this long in an exchange where it took less than half of it (the
/// emulated path's forwarder, late on a busy host, makes gaps of 20-40 ms that read as a
/// window's or the program's; a build that names a wrong cause gives it more).
const STRAY_MS: f64 = 40.0;

/// 0 at the client's end, 1 at the server's.
fn end_index(end: &str) -> usize {
    usize::from(end == "server end")
}

/// Adds `made`'s truths and what `d` gives them, captured at `end` (0 client's, 1 server's)
/// of a path of `rtt` ms: per exchange, and for the round trips (the path's: a figure of
/// the whole flow) per flow.
fn score(d: &Diagnosis, made: &[Made], end: usize, rtt: f64, scores: &mut [Score; LABELS.len()]) {
    for m in made {
        let f = flow_on(d, m.port);
        let b = &f.budget;
        let (path, rest) = scores.split_last_mut().expect("the round trip is last");
        let path_label = &LABELS[LABELS.len() - 1];
        let truth = m.round_trips[end] * rtt;
        let given = given_to(&b.causes, path_label);
        path.add(
            truth,
            given,
            &format!("{}, its flow", m.name),
            path_label.name,
        );
        // Every exchange the doctor keeps and every one a truth names (one it does not keep
        // gives nothing: its truth counts as missed); a transfer's truth is its whole flow's.
        let truths = match (&m.truth_at_server, end) {
            (Some(t), 1) => t,
            _ => &m.truth,
        };
        let whole = truths.iter().all(|t| t.0 == 0);
        let mut indexes: Vec<u64> = truths.iter().map(|t| t.0).collect();
        if !whole {
            assert_eq!(f.exchanges, ROUNDS, "{}: {f:#?}", m.name);
            indexes.extend(b.exchanges.iter().map(|e| e.index));
        }
        indexes.sort_unstable();
        indexes.dedup();
        let none: &[Spent] = &[];
        for x in indexes {
            let causes = if whole {
                &b.causes[..]
            } else {
                b.exchanges
                    .iter()
                    .find(|e| e.index == x)
                    .map_or(none, |e| &e.causes[..])
            };
            for (label, s) in LABELS.iter().zip(rest.iter_mut()) {
                if m.unscored.contains(&label.name) {
                    continue;
                }
                let truth: f64 = truths
                    .iter()
                    .filter(|t| t.0 == x && t.1 == label.name)
                    .map(|t| t.2)
                    .sum();
                let given = given_to(causes, label);
                s.add(
                    truth,
                    given,
                    &format!("{}, exchange {x}", m.name),
                    label.name,
                );
            }
        }
    }
}

impl Score {
    /// One truth and what was given it, in `what`.
    fn add(&mut self, truth: f64, given: f64, what: &str, label: &str) {
        self.truth += truth;
        self.given += given;
        self.both += truth.min(given);
        if truth >= EVENT_MS {
            if given >= truth / 2.0 {
                self.found += 1;
            } else {
                self.missed += 1;
                eprintln!("{what}: {label} missed: {truth:.1} ms, given {given:.1}");
            }
        } else if given >= STRAY_MS && truth < given / 2.0 {
            self.false_found += 1;
            eprintln!("{what}: {label} given {given:.1} ms, truly {truth:.1}");
        }
    }
}

/// How far behind its schedule the path's forwarder may run in a run whose verdicts count:
/// a busy host that deschedules it longer makes waits no scenario made (the truths are the
/// programs' and the path's, not the host's), so such a run is made again. (This machine's
/// forwarder ran 0.2-10 ms late at most in a run, idle or beside two busy loops.)
const LATE_PATH: Duration = Duration::from_millis(1);

/// Runs on a late path made again before the verdicts of the last one count.
const RUNS: usize = 3;

/// Makes `scenarios` on a path of `spec`, captured at both ends, and holds the doctor's
/// budget to their truths: each label of `made_here` (which the scenarios made) and every
/// other (which they did not, so that what the doctor gives it is false). A run that fails
/// on a path whose forwarder ran late ([`LATE_PATH`]) is made again, [`RUNS`] in all.
fn check(spec: PathSpec, made_here: &[&str], scenarios: impl Fn(&EmulatedPath) -> Vec<Made>) {
    for run in 1..=RUNS {
        let Some((failures, late)) = check_once(spec.clone(), made_here, &scenarios) else {
            return;
        };
        if failures.is_empty() {
            return;
        }
        if late < LATE_PATH || run == RUNS {
            panic!("run {run} of {RUNS} (the path ran {late:?} late at most): {failures:#?}");
        }
        eprintln!("run {run}: the path ran {late:?} late, made again: {failures:#?}");
    }
}

/// One run of [`check`]: its failed verdicts, and how late the path ran; `None` where no
/// path can be made here.
fn check_once(
    spec: PathSpec,
    made_here: &[&str],
    scenarios: &impl Fn(&EmulatedPath) -> Vec<Made>,
) -> Option<(Vec<String>, Duration)> {
    let opts = Options {
        top: 0,
        ..Options::default()
    };
    let tag = match spec.rate_bps {
        Some(r) => format!("{} ms {} Mbit/s", spec.rtt.as_millis(), r / 1_000_000),
        None => format!("{} ms", spec.rtt.as_millis()),
    };
    let ((made, rtt, late), captures) = at_both_ends(spec, opts, |p| {
        (scenarios(p), rtt_ms(p), p.stats().late_most)
    })?;
    eprintln!("{tag}: the path ran {late:?} late at most");
    let mut failures = Vec::new();
    let mut verdict = |ok: bool, what: String| {
        if !ok {
            failures.push(what);
        }
    };
    for (end, d) in &captures {
        let mut scores = [Score::default(); LABELS.len()];
        score(d, &made, end_index(end), rtt, &mut scores);
        // (A flow scored whole, however many exchanges the doctor counts in it, is one.)
        let exchanges: u64 = made
            .iter()
            .map(|m| {
                if m.truth.iter().all(|t| t.0 == 0) {
                    1
                } else {
                    flow_on(d, m.port).exchanges.max(1)
                }
            })
            .sum();
        for (label, s) in LABELS.iter().zip(&scores) {
            let precision = if s.given > 0.0 { s.both / s.given } else { 1.0 };
            let recall = if s.truth > 0.0 { s.both / s.truth } else { 1.0 };
            let events = s.found + s.missed;
            let ratio = |n: u32, of: u32| {
                if of == 0 {
                    1.0
                } else {
                    f64::from(n) / f64::from(of)
                }
            };
            let ev_precision = ratio(s.found, s.found + s.false_found);
            let ev_recall = ratio(s.found, events);
            if s.truth > 0.0 || s.given > 0.0 {
                eprintln!(
                "{tag}, {end}, {}: by time precision {precision:.3} recall {recall:.3} ({:.1} of {:.1} ms true, {:.1} given); by event precision {ev_precision:.2} recall {ev_recall:.2} ({} of {events}, {} false)",
                label.name, s.both, s.truth, s.given, s.found, s.false_found
            );
            }
            if made_here.contains(&label.name) {
                verdict(
                    s.truth > 0.0,
                    format!("{end}, {}: a scenario made it", label.name),
                );
            }
            if s.truth > 0.0 {
                verdict(
                    precision >= 0.6 && recall >= 0.6,
                    format!(
                        "{end}, {}: by time {precision:.3} / {recall:.3}",
                        label.name
                    ),
                );
            } else {
                verdict(
                    s.given <= STRAY_MS * exchanges as f64,
                    format!("{end}, {}: {:.1} ms given, none made", label.name, s.given),
                );
            }
            verdict(
                ev_precision >= 0.95 && ev_recall >= 0.95,
                format!(
                    "{end}, {}: by event {ev_precision:.2} / {ev_recall:.2}",
                    label.name
                ),
            );
        }
    }
    Some((failures, late))
}

#[test]
fn each_cause_is_given_its_time_at_either_end() {
    let _one = nagless_test_support::exclusive();
    let spec = PathSpec {
        rtt: Duration::from_millis(10),
        ..PathSpec::default()
    };
    let made_here = [
        "think (server)",
        "idle (client)",
        "Nagle stall (client)",
        "sender's hold (server)",
        "the receiver (zero and receive window)",
        "loss recovery (client)",
        "loss recovery (server)",
        "ACK-clocked (client)",
        "round trip",
    ];
    check(spec, &made_here, |p| {
        vec![
            think(p, 7101),
            idle(p, 7102),
            stall(p, 7103),
            hold(p, 7104),
            receiver(p, 7105),
            loss(p, 7106),
            clocked(p, 7107),
        ]
    });
}

#[test]
fn the_path_s_rate_is_transfer_at_either_end() {
    let _one = nagless_test_support::exclusive();
    // 4 Mbit/s, and a queue that never drops (no loss to recover from).
    let spec = PathSpec {
        rtt: Duration::from_millis(10),
        rate_bps: Some(4_000_000),
        queue_bytes: Some(1 << 20),
        ..PathSpec::default()
    };
    // (At the sender's end the round trip is measured from its handshake, 11.4 ms here: the
    // forwarder's first packets, 1.5 ms an exchange more than the path's 10; precision
    // 0.90-0.93 by time.)
    check(spec, &["transfer", "round trip"], |p| {
        vec![transfer(p, 7111)]
    });
}

#[test]
fn slow_start_is_the_congestion_window_at_either_end() {
    let _one = nagless_test_support::exclusive();
    let spec = PathSpec {
        rtt: Duration::from_millis(50),
        ..PathSpec::default()
    };
    check(
        spec,
        &["congestion window (server)", "idle (client)", "round trip"],
        |p| vec![window(p, 7121)],
    );
}
