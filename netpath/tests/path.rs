//! The emulated path against its specification, on real sockets in the namespaces it makes:
//! handshake RTT, bulk rate, loss, MTU. Needs root (CI runs as root; elsewhere these tests
//! skip with a note, and fail under `CI` instead of skipping). Every transfer is bounded in
//! bytes and time.
#![allow(clippy::disallowed_methods)] // the path is measured on real time

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use nagless_netpath::{EmulatedPath, PathError, PathSpec, Toward};
// `exclusive()`: the tests time real packets and must not share the two CPUs with each
// other when `cargo test` runs them in parallel.
use nagless_test_support::{exclusive, skip};

/// A path, or `None` (with a note) when this user may not make one outside CI.
fn path(spec: PathSpec) -> Option<EmulatedPath> {
    match EmulatedPath::new(&spec) {
        Ok(p) => Some(p),
        Err(PathError::NotPermitted(e)) => {
            skip(&e.to_string());
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median time of 7 TCP handshakes across a path of `rtt_ms`, in ms.
fn handshake_ms(rtt_ms: f64) -> Option<f64> {
    let spec = PathSpec {
        rtt: Duration::from_secs_f64(rtt_ms / 1000.0),
        ..PathSpec::default()
    };
    let p = path(spec)?;
    let server = p.server_addr();
    let listener = p
        .run_in_server(|| TcpListener::bind((server, 7000)))
        .unwrap()
        .unwrap();
    let acceptor = std::thread::spawn(move || {
        for _ in 0..7 {
            drop(listener.accept().unwrap());
        }
    });
    let times: Vec<f64> = p
        .run_in_client(|| {
            (0..7)
                .map(|_| {
                    let t = Instant::now();
                    let c = TcpStream::connect((server, 7000)).unwrap();
                    let d = t.elapsed().as_secs_f64() * 1000.0;
                    drop(c);
                    d
                })
                .collect()
        })
        .unwrap();
    acceptor.join().unwrap();
    Some(median(times))
}

/// Sends as fast as TCP goes for `secs` and returns the receiver's payload rate over the
/// last part (after slow start), in bits per second of IP packets (payload × MTU / MSS).
fn bulk_rate(p: &EmulatedPath, secs: f64) -> f64 {
    let server = p.server_addr();
    let listener = p
        .run_in_server(|| TcpListener::bind((server, 7001)))
        .unwrap()
        .unwrap();
    let receiver = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let start = Instant::now();
        let warm = Duration::from_secs_f64(secs * 0.3);
        let (mut counted, mut from) = (0u64, None);
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            if start.elapsed() >= warm {
                from.get_or_insert_with(Instant::now);
                counted += n as u64;
            }
        }
        (counted, from.map_or(0.0, |f| f.elapsed().as_secs_f64()))
    });
    p.run_in_client(|| {
        let mut c = TcpStream::connect((server, 7001)).unwrap();
        let chunk = vec![7u8; 1 << 16];
        let start = Instant::now();
        while start.elapsed().as_secs_f64() < secs {
            c.write_all(&chunk).unwrap();
        }
    })
    .unwrap();
    let (bytes, over) = receiver.join().unwrap();
    let mtu = p.spec().mtu as f64;
    let mss = mtu - 52.0; // IPv4 + TCP + timestamps
    bytes as f64 * 8.0 / over * mtu / mss
}

#[test]
fn loss_is_within_statistical_bounds_and_repeats_with_its_seed() {
    let _one = exclusive();
    let lost_with = |seed| {
        let spec = PathSpec {
            rtt: Duration::from_millis(1),
            loss: 0.05,
            seed,
            ..PathSpec::default()
        };
        let p = path(spec)?;
        let server = p.server_addr();
        let rx = p
            .run_in_server(|| UdpSocket::bind((server, 7002)))
            .unwrap()
            .unwrap();
        // (The end of the stream: no datagram for 2 s, far longer than a loaded machine keeps
        // the forwarder waiting.)
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        // Room for every datagram even if the receiver thread is not scheduled: the socket
        // must never drop one itself, so that all losses are the path's.
        set_int_option(&rx, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 16 << 20);
        const N: usize = 4000;
        // Receive while sending, too.
        let receiver = std::thread::spawn(move || {
            let mut got = vec![false; N];
            let mut buf = [0u8; 16];
            while let Ok(n) = rx.recv(&mut buf) {
                if n == 4 {
                    got[u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize] = true;
                }
            }
            got
        });
        let path = &p;
        p.run_in_client(|| {
            let tx = UdpSocket::bind("0.0.0.0:0").unwrap();
            for i in 0..N {
                tx.send_to(&(i as u32).to_be_bytes(), (server, 7002))
                    .unwrap();
                if i % 100 == 99 {
                    // Stay below the queues: the next hundred only once the path has taken
                    // these (delivered or dropped them), however late a loaded machine runs
                    // its forwarder. (Paced by time alone, the TUN device's own queue
                    // overflowed once, dropping datagrams the path never saw.)
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while {
                        let s = path.stats();
                        s.delivered + s.lost + s.queue_drops <= i as u64
                    } && Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        })
        .unwrap();
        let got = receiver.join().unwrap();
        let lost: Vec<usize> = (0..N).filter(|&i| !got[i]).collect();
        let stats = p.stats();
        eprintln!("loss 5 % of {N}: {} lost ({stats:?})", lost.len());
        // Every missing datagram was dropped by the path (whose counters also see the odd
        // packet the kernel sends on its own), none by the receiving socket.
        assert!(
            lost.len() as u64 <= stats.lost + stats.queue_drops,
            "{stats:?}"
        );
        Some(lost)
    };
    let Some(a) = lost_with(42) else { return };
    // Binomial(4000, 0.05): mean 200, sd 13.8; allow 5 sd.
    assert!((a.len() as f64 - 200.0).abs() < 69.0, "{} lost", a.len());
    let b = lost_with(42).unwrap();
    assert_eq!(a, b, "the same seed must lose the same datagrams");
}

#[test]
fn a_packet_above_the_mtu_is_not_delivered() {
    let _one = exclusive();
    let Some(p) = path(PathSpec {
        rtt: Duration::from_millis(1),
        mtu: 1280,
        ..PathSpec::default()
    }) else {
        return;
    };
    let server = p.server_addr();
    let rx = p
        .run_in_server(|| UdpSocket::bind((server, 7003)))
        .unwrap()
        .unwrap();
    // Generous for the datagram that must arrive (a busy forwarder may be late), short for
    // the one that must not.
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (small, big) = p
        .run_in_client(|| {
            let tx = UdpSocket::bind("0.0.0.0:0").unwrap();
            let small = tx.send_to(&[1u8; 1200], (server, 7003)).is_ok();
            // A 1400-byte datagram with Don't Fragment cannot cross a 1280-byte path.
            set_int_option(
                &tx,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            );
            let big = tx.send_to(&[2u8; 1400], (server, 7003));
            (small, big)
        })
        .unwrap();
    assert!(small);
    let e = big.expect_err("a datagram above the MTU with DF set must be refused");
    assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
    let mut buf = [0u8; 2000];
    let n = rx.recv(&mut buf).unwrap();
    assert_eq!(n, 1200);
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert!(rx.recv(&mut buf).is_err(), "nothing else arrives");
    // TCP adapts: its segments fit the MTU.
    let listener = p
        .run_in_server(|| TcpListener::bind((server, 7004)))
        .unwrap()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).unwrap();
        v.len()
    });
    p.run_in_client(|| {
        let mut c = TcpStream::connect((server, 7004)).unwrap();
        c.write_all(&vec![3u8; 200_000]).unwrap();
    })
    .unwrap();
    assert_eq!(reader.join().unwrap(), 200_000);
}

/// An integer socket option std has no setter for.
fn set_int_option(s: &UdpSocket, level: i32, name: i32, value: i32) {
    use std::os::fd::AsRawFd;
    // SAFETY: `value` lives across the call and its size is passed.
    let r =
        unsafe { libc::setsockopt(s.as_raw_fd(), level, name, (&value as *const i32).cast(), 4) };
    assert_eq!(r, 0, "setsockopt {level}/{name}");
}

#[test]
fn bad_settings_are_refused_before_anything_is_made() {
    for spec in [
        PathSpec {
            loss: 1.5,
            ..PathSpec::default()
        },
        PathSpec {
            mtu: 100,
            ..PathSpec::default()
        },
        PathSpec {
            rate_bps: Some(0),
            ..PathSpec::default()
        },
        PathSpec {
            server_ack_delay: Some(Duration::ZERO),
            ..PathSpec::default()
        },
        PathSpec {
            client_ack_delay: Some(Duration::from_secs(5)),
            ..PathSpec::default()
        },
    ] {
        assert!(matches!(
            EmulatedPath::new(&spec),
            Err(PathError::Invalid(_))
        ));
    }
}

/// Median time (ms) of 3 rounds in which the client writes a request as two 10-byte writes
/// (the second waits, under Nagle, for the first one's ACK) and reads a 1-byte answer.
/// Also gives the pure ACKs the path held.
fn split_request_round_ms(spec: PathSpec) -> Option<(f64, u64)> {
    let p = path(spec)?;
    let server = p.server_addr();
    let listener = p
        .run_in_server(|| TcpListener::bind((server, 7002)))
        .unwrap()
        .unwrap();
    let answerer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut req = [0u8; 20];
        for _ in 0..3 {
            s.read_exact(&mut req).unwrap();
            s.write_all(b"!").unwrap();
        }
    });
    let rounds = p
        .run_in_client(|| {
            let mut c = TcpStream::connect((server, 7002)).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut answer = [0u8; 1];
            (0..3)
                .map(|_| {
                    let t = Instant::now();
                    c.write_all(&[1; 10]).unwrap();
                    c.write_all(&[2; 10]).unwrap();
                    c.read_exact(&mut answer).unwrap();
                    t.elapsed().as_secs_f64() * 1000.0
                })
                .collect::<Vec<_>>()
        })
        .unwrap();
    answerer.join().unwrap();
    Some((median(rounds), p.stats().acks_held))
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    /// The path adds its delay, and a delay of that order: a handshake never takes less than the
    /// asked round trip (the forwarder holds each packet until its time; a late timer only adds),
    /// nor more than three times it and 5 ms (a busy machine's scheduling delays add to each
    /// hop). How close it comes on an idle machine is a figure for docs/results/benchmarks.md,
    /// which this test prints (`-- --nocapture`), not a bound: a busy 2-core machine measured
    /// 1.54 ms for 1 ms.
    #[test]
    fn handshake_rtt_is_at_least_the_asked_rtt_and_of_its_order() {
        let _one = exclusive();
        for rtt_ms in [1.0, 10.0, 50.0, 100.0] {
            // 0.02 ms below: the clocks of the two timestamps, not the path.
            let ok = |m: f64| m >= rtt_ms - 0.02 && m <= rtt_ms * 3.0 + 5.0;
            let Some(mut m) = handshake_ms(rtt_ms) else {
                return;
            };
            if !ok(m) {
                // One retry for a noisy moment; a systematic error fails twice.
                eprintln!("asked RTT {rtt_ms} ms: {m:.3} ms, retrying once");
                m = handshake_ms(rtt_ms).unwrap();
            }
            eprintln!("asked RTT {rtt_ms} ms: handshake took {m:.3} ms (median of 7)");
            assert!(ok(m), "{m} ms for {rtt_ms} ms");
        }
    }

    #[test]
    fn bulk_rate_is_never_above_the_asked_rate_and_of_its_order() {
        let _one = exclusive();
        for mbit in [1u64, 10, 100, 1000] {
            // Never more than asked (the shaper's promise, whatever the load). Below it only by
            // a factor a busy machine explains: the user-space forwarder needs CPU time that a
            // loaded 2-core machine may not give it (measured 48-826 Mbit/s for 100 and 1000
            // under a load average of 10), so the test checks that the rate is of the right
            // order; how close it comes when idle is a benchmark figure, printed here.
            let floor = if mbit <= 10 { 0.5 } else { 0.2 };
            let ok = |got: f64| got <= mbit as f64 * 1.05 && got >= mbit as f64 * floor;
            let measure = || {
                let spec = PathSpec {
                    rtt: Duration::from_millis(2),
                    rate_bps: Some(mbit * 1_000_000),
                    ..PathSpec::default()
                };
                let p = path(spec)?;
                let secs = if mbit == 1 { 4.0 } else { 2.0 };
                let got = bulk_rate(&p, secs) / 1e6;
                eprintln!(
                    "asked {mbit} Mbit/s: {got:.2} Mbit/s of IP packets ({:?})",
                    p.stats()
                );
                Some(got)
            };
            let Some(mut got) = measure() else { return };
            if !ok(got) {
                // One retry for a moment when something else had the CPU (at 1000 Mbit/s the
                // forwarder needs most of a core); a systematic error fails twice.
                eprintln!("asked {mbit} Mbit/s: {got:.2}, retrying once");
                got = measure().unwrap();
            }
            assert!(ok(got), "{got} Mbit/s for {mbit}");
        }
    }

    /// A data packet lost on purpose, each way: its sender's kernel sends it again after its
    /// retransmission timeout (200 ms or more), nothing else is lost, and the bytes all come.
    #[test]
    fn data_lost_on_purpose_is_sent_again_after_a_timeout() {
        let _one = exclusive();
        let Some(p) = path(PathSpec::default()) else {
            return;
        };
        let server = p.server_addr();
        let l = p
            .run_in_server(|| TcpListener::bind((server, 7005)))
            .unwrap()
            .unwrap();
        let echo = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 100];
            while s.read_exact(&mut buf).is_ok() {
                s.write_all(&buf).unwrap();
            }
        });
        let mut c = p
            .run_in_client(|| TcpStream::connect((server, 7005)))
            .unwrap()
            .unwrap();
        c.set_nodelay(true).unwrap();
        let mut round = |lose: Option<Toward>| {
            if let Some(t) = lose {
                p.lose_next_data(t);
            }
            let t = Instant::now();
            c.write_all(&[7u8; 100]).unwrap();
            let mut back = [0u8; 100];
            c.read_exact(&mut back).unwrap();
            assert_eq!(back, [7u8; 100]);
            t.elapsed()
        };
        let clean = round(None);
        let request_lost = round(Some(Toward::Server));
        let answer_lost = round(Some(Toward::Client));
        drop(c);
        echo.join().unwrap();
        assert!(clean < Duration::from_millis(150), "{clean:?}");
        for waited in [request_lost, answer_lost] {
            assert!(waited >= Duration::from_millis(200), "{waited:?}");
        }
        assert_eq!(p.stats().lost, 2);
    }

    #[test]
    fn a_server_with_a_200_ms_ack_timer_releases_a_held_write_at_200_ms() {
        let _one = exclusive();
        let spec = PathSpec {
            rtt: Duration::from_millis(2),
            ..PathSpec::default()
        };
        let Some((linux, none_held)) = split_request_round_ms(spec.clone()) else {
            return;
        };
        let (slow, held) = split_request_round_ms(PathSpec {
            server_ack_delay: Some(Duration::from_millis(200)),
            ..spec
        })
        .unwrap();
        // Linux's receiver acknowledges within its 40 ms timer (at once early in a connection);
        // the emulated receiver holds its ACK to 200 ms after the first write reached it. A busy
        // machine only adds to either: the bounds split them at 150 ms, and 1 s is a hang.
        assert!(linux < 150.0, "Linux's own timer: {linux:.1} ms per round");
        assert!(
            (150.0..1000.0).contains(&slow),
            "a 200 ms timer: {slow:.1} ms per round"
        );
        assert_eq!(none_held, 0);
        assert!(held >= 3, "{held} ACKs held");
    }
}
