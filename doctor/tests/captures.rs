//! Real captures of traffic this test makes on loopback, taken with tcpdump (Debian package
//! `tcpdump`, installed by scripts/test; capturing needs root or CAP_NET_RAW): stalls are
//! found where the kernel made them and nowhere else.
#![allow(clippy::disallowed_methods)] // tests measure real time

use nagless_test_support::exchanges::{listener, server, wwr};
use nagless_test_support::{have_tool, Tcpdump};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

fn stalls(bytes: &[u8]) -> (usize, nagless_doctor::Diagnosis) {
    let d = nagless_doctor::diagnose(bytes).expect("tcpdump's file parses");
    (d.stalls_total as usize, d)
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn write_write_read_under_nagle_is_found_with_its_40_ms_stalls() {
        if !have_tool("tcpdump") {
            return;
        }
        for (name, extra) in [
            ("lo", &["-i", "lo"][..]),
            (
                "any-ns",
                &["-i", "any", "--time-stamp-precision", "nano"][..],
            ),
        ] {
            let (l, port) = listener();
            let cap = Tcpdump::start(name, port, extra);
            let srv = server(l, 200, 100, Duration::ZERO);
            let truly_slow = wwr(port, 20, false);
            srv.join().unwrap();
            let (found, d) = stalls(&cap.finish());
            assert!(
                truly_slow >= 10,
                "{name}: the kernel did not stall ({truly_slow})"
            );
            // No fast round is called a stall (a stall takes 40 ms), and every slow round is one
            // but for a few that a busy machine's scheduling made slow (one in five of 20 rounds;
            // most of them stall).
            assert!(
                found <= truly_slow && found + 4 >= truly_slow,
                "{name}: {found} vs {truly_slow}: {d:#?}"
            );
            let f = &d.flows[0];
            assert!(f
                .stalls
                .iter()
                .all(|s| (30_000..100_000).contains(&s.stalled_us)));
            assert!(
                f.verdict[0].contains("sends each request as two or more writes"),
                "{:?}",
                f.verdict
            );
            assert!(f.verdict[0].contains(&format!("127.0.0.1:{port} delays its ACKs")));
            eprintln!("{name}: {found} stalls found, {truly_slow} rounds took >= 30 ms (precision and recall 1.0)");
        }
    }

    #[test]
    fn nodelay_bulk_and_think_time_raise_no_alarm() {
        if !have_tool("tcpdump") {
            return;
        }
        // NODELAY: the same exchange without stalls (a round or two of a busy machine's may take
        // 30 ms; the doctor, which reads the packets, must not call it a stall).
        let (l, port) = listener();
        let cap = Tcpdump::start("nodelay", port, &["-i", "lo"]);
        let srv = server(l, 200, 100, Duration::ZERO);
        assert!(wwr(port, 20, true) <= 2);
        srv.join().unwrap();
        let (found, d) = stalls(&cap.finish());
        assert_eq!(found, 0, "{d:#?}");
        // No alarm: no stall, no ACK clock, no sender's hold, no loss, no trouble connecting.
        // A busy machine's slow rounds may add where the time went ("most of the time waited
        // was ...'s think time"): honest, and no alarm.
        for v in &d.flows[0].verdict {
            let alarms = [
                "ACK-clocked",
                "not Nagle",
                "retransmission",
                "SYN",
                "refused",
            ];
            assert!(
                v.starts_with("no Nagle stall") && !alarms.iter().any(|a| v.contains(a)),
                "{:?}",
                d.flows[0].verdict
            );
        }

        // Bulk: 8 MB one way.
        let (l, port) = listener();
        let cap = Tcpdump::start("bulk", port, &["-i", "lo"]);
        let sink = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut v = Vec::new();
            s.read_to_end(&mut v).unwrap();
            v.len()
        });
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        for _ in 0..128 {
            c.write_all(&[7u8; 64 * 1024]).unwrap();
        }
        drop(c);
        assert_eq!(sink.join().unwrap(), 8 * 1024 * 1024);
        let (found, d) = stalls(&cap.finish());
        assert_eq!(
            found,
            0,
            "bulk: {:?}",
            d.flows.iter().map(|f| &f.verdict).collect::<Vec<_>>()
        );

        // A slow server: one-write requests and replies, 60 ms of think time each.
        let (l, port) = listener();
        let cap = Tcpdump::start("think", port, &["-i", "lo"]);
        let srv = server(l, 100, 100, Duration::from_millis(60));
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut reply = [0u8; 100];
        for _ in 0..8 {
            c.write_all(&[b'q'; 100]).unwrap();
            c.read_exact(&mut reply).unwrap();
        }
        drop(c);
        srv.join().unwrap();
        let (found, d) = stalls(&cap.finish());
        assert_eq!(found, 0, "think time: {d:#?}");
        // The honest negative names where the time went: the server's 60 ms.
        let v = &d.flows[0].verdict[0];
        assert!(v.starts_with("no Nagle stall"), "{v}");
        let ms: f64 = v
            .split("answered after ~")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no answer time named: {v}"));
        assert!((55.0..200.0).contains(&ms), "{v}");
        assert!(v.contains(&format!(":{port} answered after")), "{v}");
    }

    #[test]
    fn every_stall_keeps_them_all_and_the_capture_start_is_wall_clock_time() {
        if !have_tool("tcpdump") {
            return;
        }
        let (l, port) = listener();
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let cap = Tcpdump::start("every", port, &["-i", "lo"]);
        let srv = server(l, 200, 100, Duration::ZERO);
        let slow = wwr(port, 45, false);
        srv.join().unwrap();
        let bytes = cap.finish();
        assert!(slow > 32, "the kernel stalled only {slow} rounds");
        let run = |every_stall, order| {
            let opts = nagless_doctor::Options {
                every_stall,
                order,
                ..nagless_doctor::Options::default()
            };
            nagless_doctor::diagnose_reader(&bytes[..], opts, |_| {}).unwrap()
        };
        use nagless_doctor::analysis::StallOrder::{Delay, Time};
        let (worst, all) = (run(false, Delay), run(true, Delay));
        // By default the same stalls, listed in capture order.
        let in_time = run(false, Time);
        let frames: Vec<u64> = in_time.flows[0]
            .stalls
            .iter()
            .map(|s| s.held.frame)
            .collect();
        assert!(frames.windows(2).all(|w| w[0] < w[1]), "{frames:?}");
        let mut by_frame = worst.flows[0].stalls.clone();
        by_frame.sort_by_key(|s| s.held.frame);
        assert_eq!(by_frame, in_time.flows[0].stalls);
        let count = all.flows[0].stall_count as usize;
        assert!(count > 32, "{count} stalls");
        assert_eq!(worst.flows[0].stalls.len(), 32, "the worst 32 by default");
        assert_eq!(
            all.flows[0].stalls.len(),
            count,
            "every one with every_stall"
        );
        // Worst first in both (--sort delay): the default's 32 are the first 32 of every stall.
        let key = |d: &nagless_doctor::Diagnosis| -> Vec<(u64, u64)> {
            d.flows[0]
                .stalls
                .iter()
                .map(|s| (s.held.frame, s.stalled_us))
                .collect()
        };
        assert_eq!(key(&all)[..32], key(&worst)[..]);
        // The report shows the worst five, says how many more there are, and which way each went.
        let text = nagless_doctor::report::text(&worst);
        assert!(
            text.contains(&format!("... and {} more stall(s) in this flow", count - 5)),
            "{text}"
        );
        assert_eq!(text.matches(", client->server: ").count(), 5, "{text}");
        let start = all.start_unix_s.expect("a first frame");
        assert!(
            (before - 1.0..before + 60.0).contains(&start),
            "capture start {start} vs the clock {before}"
        );
    }

    /// A server whose answer's last piece is sent with `MSG_MORE` and nothing after it (HAProxy
    /// #3447): the piece stays in its kernel until the kernel's 200 ms ceiling on a cork ends it,
    /// every time (its client ACKs the head at once, before the piece is written, so no ACK comes
    /// to push it). Not Nagle: the doctor
    /// names the sender's own hold, and exits 1 for it. The same answers written by a server that
    /// takes 120-280 ms to write the rest are think time, not a hold.
    #[test]
    fn a_cork_left_on_is_named_a_sender_hold_not_nagle() {
        if !have_tool("tcpdump") {
            return;
        }
        for (corked, name) in [(true, "cork"), (false, "slow-rest")] {
            let (l, port) = listener();
            let cap = Tcpdump::start(name, port, &["-i", "lo"]);
            let srv = thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut buf = [0u8; 10];
                for i in 0..5u64 {
                    if s.read_exact(&mut buf).is_err() {
                        break;
                    }
                    s.write_all(&[b'h'; 100]).unwrap();
                    // The rest of the answer is ready a little later (its head is acknowledged
                    // meanwhile, so no ACK comes after it to push it).
                    thread::sleep(Duration::from_millis(10));
                    if corked {
                        socket2::SockRef::from(&s)
                            .send_with_flags(&[b'b'; 50], libc::MSG_MORE)
                            .unwrap();
                    } else {
                        thread::sleep(Duration::from_millis(120 + 40 * i));
                        s.write_all(&[b'b'; 50]).unwrap();
                    }
                }
            });
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut answer = [0u8; 150];
            let mut slow = 0;
            for _ in 0..5 {
                let t = Instant::now();
                c.write_all(&[b'q'; 10]).unwrap();
                let mut got = 0;
                while got < answer.len() {
                    got += c.read(&mut answer[got..]).unwrap();
                    // ACK at once: nothing but the kernel's ceiling pushes a corked piece.
                    socket2::SockRef::from(&c).set_tcp_quickack(true).unwrap();
                }
                slow += usize::from(t.elapsed() >= Duration::from_millis(150));
                eprintln!(
                    "{name}: answer in {:.1} ms",
                    t.elapsed().as_secs_f64() * 1000.0
                );
            }
            drop(c);
            srv.join().unwrap();
            let d = nagless_doctor::diagnose(&cap.finish()).unwrap();
            let f = &d.flows[0];
            if corked {
                assert!(slow >= 3, "the kernel held {slow} of 5 answers");
                assert_eq!(f.sender_holds.len(), 1, "{f:#?}");
                let h = &f.sender_holds[0];
                assert_eq!(h.direction, "server->client");
                assert!(h.count >= 3 && h.count <= 5, "{h:?}");
                assert!(f
                    .verdict
                    .iter()
                    .any(|v| v.starts_with("not Nagle:") && v.contains("MSG_MORE")));
                assert_eq!(d.flows_sender_held, 1);
                assert_eq!(d.stalls_total, 0, "{f:#?}");
            } else {
                assert!(f.sender_holds.is_empty(), "{f:#?}");
                assert_eq!(d.flows_sender_held, 0);
            }
        }
    }
}
