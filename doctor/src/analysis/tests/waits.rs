//! Without a stall, the wait that took the flow is named: think time, bulk, zero windows,
//! retransmission timeouts.

use super::*;

#[test]
fn think_time_bulk_zero_window_and_retransmission_raise_no_alarm() {
    // Slow server: request, delayed ACK, reply 100 ms later, next request.
    let mut c = Conv::new();
    let mut t = 1.0;
    for _ in 0..5 {
        c.data(t, 0, 100)
            .ack(t + 40.0, 1)
            .data(t + 100.0, 1, 100)
            .data(t + 100.1, 0, 100);
        t += 200.0;
    }
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.stall_count, 0, "{r:#?}");
    assert!(
        r.verdict[0].starts_with("no Nagle stall"),
        "{:?}",
        r.verdict
    );
    // Bulk: full segments back to back, ACK every second one.
    let mut c = Conv::new();
    for i in 0..200 {
        c.data(1.0 + i as f64 * 0.01, 0, 1448);
        if i % 2 == 1 {
            c.ack(1.0 + i as f64 * 0.01 + 0.005, 1);
        }
    }
    assert_eq!(analyse(&c.segs)[0].stall_count, 0);
    // A zero window: the server's ACK closes the window, a late update opens it, the
    // client's small write follows the update at once.
    let mut c = Conv::new();
    c.data(1.0, 0, 100).ack(41.0, 1);
    c.last_mut().window = 0;
    c.data(41.05, 0, 100);
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.stall_count, 0, "{r:#?}");
    assert_eq!(r.sides[1].zero_window_waits, 1);
    // A retransmission timeout: part 1 is lost, sent again 200 ms later, ACKed at once,
    // then part 2 leaves.
    let mut c = Conv::new();
    c.data(1.0, 0, 100);
    c.seq[0] -= 100;
    c.data(201.0, 0, 100).ack(201.1, 1).data(201.15, 0, 100);
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.stall_count, 0, "{r:#?}");
    assert_eq!(r.sides[0].retransmission_timeouts, 1);
    assert!(
        r.verdict[0].contains("1 retransmission timeout"),
        "{:?}",
        r.verdict
    );
}

/// Issue 51's honest negative: without a stall, the time retransmission timeouts and zero
/// windows took is measured, and the longest is named with its side and its share.
#[test]
fn without_a_stall_the_wait_that_took_the_flow_is_named() {
    // Part 1 is lost twice: sent again 200 ms later, then 400 ms after that (the backoff),
    // ACKed at once, then part 2 leaves.
    let mut c = Conv::new();
    c.data(1.0, 0, 100);
    c.seq[0] -= 100;
    c.data(201.0, 0, 100);
    c.seq[0] -= 100;
    c.data(601.0, 0, 100).ack(601.1, 1).data(601.15, 0, 100);
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.stall_count, 0, "{r:#?}");
    assert_eq!(r.sides[0].retransmission_timeouts, 2);
    assert!(
        (r.sides[0].retransmission_timeout_ms - 600.0).abs() < 0.01,
        "{r:#?}"
    );
    let line = &r.verdict[0];
    assert!(
        line.contains("2 retransmission timeout(s) (600 ms waited)"),
        "{line}"
    );
    assert!(
        line.contains("the longest of these waits: retransmission timeouts of")
            && line.contains("the path lost packets")
            && line.contains("600 ms in all of the flow's"),
        "{line}"
    );
    // The evidence, for the Wireshark plugin: each retransmission and the sending before it
    // (frames 1-3 are the handshake).
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == "retransmission-timeout")
        .expect("a retransmission-timeout finding");
    let frames: Vec<(u64, &str)> = f.frames.iter().map(|x| (x.frame, x.role)).collect();
    assert_eq!(
        frames,
        [
            (4, "sent"),
            (5, "retransmission"),
            (5, "sent"),
            (6, "retransmission")
        ],
        "{f:#?}"
    );
    assert!((f.delay_ms - 300.0).abs() < 0.01, "{f:#?}");
    assert_eq!(f.direction, "client->server");

    // The server closes its window for 2 s (its application read nothing), then opens it;
    // the client's write follows at once.
    let mut c = Conv::new();
    c.data(1.0, 0, 100).ack(41.0, 1);
    c.last_mut().window = 0;
    c.ack(2041.0, 1).data(2041.05, 0, 100).ack(2042.0, 1);
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.stall_count, 0, "{r:#?}");
    assert_eq!(r.sides[1].zero_window_waits, 1);
    assert!((r.sides[1].zero_window_ms - 2000.0).abs() < 0.01, "{r:#?}");
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == "zero-window")
        .expect("a zero-window finding");
    let roles: Vec<&str> = f.frames.iter().map(|x| x.role).collect();
    assert_eq!(roles, ["closed", "opened"], "{f:#?}");
    assert!((f.delay_ms - 2000.0).abs() < 0.01, "{f:#?}");
    assert_eq!(f.direction, "client->server", "the data held back");
    assert!(f.summary.starts_with(&r.sides[1].addr), "{f:#?}");
    let line = &r.verdict[0];
    assert!(
        line.contains("1 zero-window wait(s) (2.00 s in all)"),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "the longest of these waits: {}'s zero window, 2.00 s in all of the flow's 2.04 s: its application stopped reading",
            r.sides[1].addr
        )),
        "{line}"
    );
    // Said once: the budget's account of the same wait adds nothing.
    assert!(!line.contains("most of the time waited"), "{line}");

    // A 10 ms zero window is counted, but not named as a wait.
    let mut c = Conv::new();
    c.data(1.0, 0, 100).ack(41.0, 1);
    c.last_mut().window = 0;
    c.ack(51.0, 1).data(51.05, 0, 100).ack(92.0, 1);
    c.data(2000.0, 0, 100).ack(2001.0, 1);
    let r = &analyse(&c.segs)[0];
    assert!((r.sides[1].zero_window_ms - 10.0).abs() < 0.01, "{r:#?}");
    assert!(
        r.verdict[0].contains("(10 ms in all)") && !r.verdict[0].contains("longest of these"),
        "{:?}",
        r.verdict
    );
}

/// A whole window lost: after the timeout, the segments sent again behind the first (in
/// slow start, the duplicate ACKs forgotten) count as timeouts too, but the time they waited
/// through together counts once: the waits never add up to more than the flow lasted.
#[test]
fn the_segments_behind_one_timeout_do_not_count_its_wait_again() {
    let mut c = Conv::new();
    c.data(1.0, 0, 100).data(1.1, 0, 100).data(1.2, 0, 100);
    c.seq[0] -= 300;
    c.data(201.0, 0, 100).ack(201.1, 1);
    c.data(201.2, 0, 100).data(201.3, 0, 100).ack(201.4, 1);
    let r = &analyse(&c.segs)[0];
    let side = &r.sides[0];
    assert!(side.retransmission_timeouts >= 1, "{r:#?}");
    assert!(
        (side.retransmission_timeout_ms - 200.3).abs() < 0.01,
        "{} ms waited in a flow of {} s",
        side.retransmission_timeout_ms,
        r.duration_s
    );
    assert!(side.retransmission_timeout_ms <= r.duration_s * 1000.0);
}

/// A connection whose first request comes long after its handshake (the client latency of a
/// slow web request: PPA's `latency3.pcapng` is one) is named for that wait, the client's own,
/// not for the round trips of the rest; one that asks at once, or idles only between
/// requests, is not.
#[test]
fn a_first_request_long_after_the_handshake_is_the_client_s_own_time() {
    let late = |first_ms: f64, then_ms: f64| {
        let mut c = Conv::with_rtt(30.0);
        c.data(first_ms, 0, 600)
            .ack(first_ms + 30.0, 1)
            .data(first_ms + 40.0, 1, 1400)
            .data(then_ms, 0, 600)
            .data(then_ms + 30.0, 1, 1400)
            .ack(then_ms + 30.5, 0);
        analyse(&c.segs).remove(0)
    };
    let r = late(1400.0, 1470.0);
    assert_eq!(r.stall_count, 0, "{r:#?}");
    let line = &r.verdict[0];
    assert!(
        line.contains(&format!(
            "{} sent the connection's first data 1.37 s after its handshake: its own time, not the network's",
            r.sides[0].addr
        )),
        "{line}"
    );
    // At once, then a second of idle between two requests: nothing said of a first wait.
    let r = late(30.5, 1470.0);
    assert!(!r.verdict[0].contains("first data"), "{:?}", r.verdict);
}

/// A client's SYNs sent again (its connect's retries: 1 s, then 2 s more) are loss recovery,
/// named as such, never the client's own time; a reset in answer to the SYN is a refusal.
#[test]
fn connect_retries_and_a_refusal_are_named() {
    let syns = |times: &[f64]| {
        let mut c = Conv {
            segs: Vec::new(),
            seq: [1000, 5000],
            ends: [C, S],
            ids: [100, 30_000],
        };
        for &t in times {
            c.push(t, 0, 0, flags::SYN, Some(1460));
        }
        c
    };
    // Never answered.
    let r = &analyse(&syns(&[0.0, 1000.0, 3000.0]).segs)[0];
    let line = &r.verdict[0];
    assert!(
        line.contains(&format!(
            "{}'s SYN went unanswered: sent 3 times over 3.00 s (connect retries): {} is down",
            r.sides[0].addr, r.sides[1].addr
        )),
        "{line}"
    );
    assert!(
        !line.contains("most of the time waited"),
        "said once: {line}"
    );
    let lost = r
        .budget
        .causes
        .iter()
        .find(|s| s.cause == crate::analysis::Cause::LossRecovery && s.side == Some("client"))
        .map_or(0.0, |s| s.ms);
    assert!((lost - 3000.0).abs() < 0.01, "{:#?}", r.budget);

    // Answered after the third, then a request at once: the retries are not its idle.
    let mut c = syns(&[0.0, 1000.0, 3000.0]);
    c.seq[0] += 1;
    c.push(3030.0, 1, 0, flags::SYN | flags::ACK, Some(1460));
    c.seq[1] += 1;
    c.push(3030.1, 0, 0, flags::ACK, None);
    c.data(3030.2, 0, 100)
        .ack(3060.0, 1)
        .data(3070.0, 1, 200)
        .ack(3100.0, 0);
    let r = &analyse(&c.segs)[0];
    let line = &r.verdict[0];
    assert!(
        line.contains("sent its SYN 3 times before") && line.contains("3.00 s of connect retries"),
        "{line}"
    );
    assert!(!line.contains("first data"), "{line}");

    // A copy 20 µs after the SYN is the capture's duplicate (a bridge, `-i any`), no retry.
    let mut c = syns(&[0.0, 0.02]);
    c.seq[0] += 1;
    c.push(30.0, 1, 0, flags::SYN | flags::ACK, Some(1460));
    c.seq[1] += 1;
    c.push(30.1, 0, 0, flags::ACK, None);
    c.data(30.2, 0, 100).ack(60.0, 1).data(70.0, 1, 200);
    let r = &analyse(&c.segs)[0];
    assert!(!r.verdict[0].contains("SYN"), "{:?}", r.verdict);

    // Two SYNs, the SYN-ACK missed by the capture, then the server's data: answered, and a
    // reset at the end is no refusal.
    let mut c = syns(&[0.0, 1000.0]);
    c.seq[0] += 1;
    c.seq[1] += 1;
    c.push(1030.1, 0, 0, flags::ACK, None);
    c.data(1030.2, 0, 100).ack(1060.0, 1).data(1070.0, 1, 200);
    c.push(1100.0, 1, 0, flags::RST | flags::ACK, None);
    let r = &analyse(&c.segs)[0];
    let line = &r.verdict[0];
    assert!(line.contains("sent its SYN 2 times before"), "{line}");
    assert!(
        !line.contains("unanswered") && !line.contains("refused"),
        "{line}"
    );

    // Refused.
    let mut c = syns(&[0.0]);
    c.seq[0] += 1;
    c.push(1.3, 1, 0, flags::RST | flags::ACK, None);
    let r = &analyse(&c.segs)[0];
    assert!(
        r.verdict[0].contains(&format!(
            "the connection was refused: {} answered {}'s SYN with a reset",
            r.sides[1].addr, r.sides[0].addr
        )),
        "{:?}",
        r.verdict
    );
}

/// At the receiver's end of a path with a rate, a full segment's last byte comes its time at
/// the rate after its first: once two full segments in a row have shown that time (3 ms
/// here), an answer that starts with a full segment gives it to the path's rate, not to the
/// server's think time.
#[test]
fn an_answer_s_first_full_segment_crosses_at_the_path_s_rate() {
    let mut c = Conv::with_rtt(10.0);
    // Two answers of two full segments, each 2 ms of the server's time and 3 ms a segment.
    for t in [20.0, 100.0] {
        c.data(t, 0, 100)
            .data(t + 15.0, 1, 1448)
            .data(t + 18.0, 1, 1448)
            .ack(t + 18.1, 0);
    }
    let r = &analyse(&c.segs)[0];
    let ms = |cause, side| {
        r.budget
            .causes
            .iter()
            .filter(|s| s.cause == cause && s.side == side)
            .map(|s| s.ms)
            .sum::<f64>()
    };
    use crate::analysis::Cause;
    // The first answer's 3 ms are the server's (no segment's time known yet); the second's
    // are the path's.
    let think = ms(Cause::Think, Some("server"));
    assert!((think - 7.0).abs() < 0.05, "{think}: {:#?}", r.budget);
    let transfer = ms(Cause::Transfer, None);
    assert!((transfer - 9.0).abs() < 0.05, "{transfer}: {:#?}", r.budget);
}

/// A capture that holds each of a sender's packets twice (a mirror port's copy: the same
/// IPv4 number and header, microseconds apart) reads as the same flow once; a packet sent
/// again, which its sender numbers anew, is still a retransmission.
#[test]
fn a_packet_captured_twice_is_read_once_and_a_retransmission_is_still_one() {
    let talk = |copies: bool, resend: bool| {
        let mut c = Conv::new();
        let mut t = 1.0;
        for _ in 0..4 {
            c.data(t, 0, 100).data(t + 0.5, 1, 200);
            if copies {
                let (frame, ns, s) = *c.segs.last().unwrap();
                c.segs.push((frame + 1, ns + 150_000, s));
            }
            if resend {
                // The same bytes sent again 2 ms later, within a copy's 9 ms: its new
                // number says it is no copy.
                let mut s = c.segs.last().unwrap().2;
                s.ip_id = c.segs.last().unwrap().2.ip_id.map(|i| i + 1);
                c.ids[1] += 1;
                c.segs
                    .push((c.segs.len() as u64 + 1, ((t + 2.5) * 1e6) as u64, s));
            }
            c.ack(t + 11.0, 0);
            t += 50.0;
        }
        let d = super::super::analyse_all(&c.segs);
        let f = &d.flows[0];
        (
            d.capture_copies,
            f.sides[1].data_segments,
            f.sides[1].bytes,
            f.sides[1].retransmissions,
        )
    };
    assert_eq!(talk(false, false), (0, 4, 800, 0));
    assert_eq!(talk(true, false), (4, 4, 800, 0));
    let (copies, _, _, resent) = talk(false, true);
    assert_eq!((copies, resent), (0, 4));
}

/// The same over IPv6 (no number): each packet stamped with its sender's millisecond clock
/// (the timestamps option); a copy has its packet's stamps, a segment sent again 2 ms later
/// new ones.
#[test]
fn an_ipv6_packet_captured_twice_is_read_once_by_its_timestamps() {
    let talk = |copies: bool, resend: bool| {
        let mut c = Conv::new();
        let mut t = 1.0;
        for _ in 0..4 {
            c.data(t, 0, 100).data(t + 0.5, 1, 200);
            if copies {
                let (frame, ns, s) = *c.segs.last().unwrap();
                c.segs.push((frame + 1, ns + 150_000, s));
            }
            if resend {
                let (_, ns, s) = *c.segs.last().unwrap();
                c.segs.push((c.segs.len() as u64 + 1, ns + 2_000_000, s));
            }
            c.ack(t + 11.0, 0);
            t += 50.0;
        }
        // IPv6: no number; stamps from each packet's time (ms), a copy's from its packet's.
        let mut stamp = 0;
        let mut last: Option<(u32, u64)> = None;
        for (_, ns, s) in c.segs.iter_mut() {
            s.ip_id = None;
            let copy = copies && last.is_some_and(|(seq, at)| seq == s.seq && *ns - at < 1_000_000);
            if !copy {
                stamp = (*ns / 1_000_000) as u32;
            }
            s.ts = Some((stamp, 7));
            last = Some((s.seq, *ns));
        }
        let d = super::super::analyse_all(&c.segs);
        let f = &d.flows[0];
        (
            d.capture_copies,
            f.sides[1].data_segments,
            f.sides[1].retransmissions,
        )
    };
    assert_eq!(talk(false, false), (0, 4, 0));
    assert_eq!(talk(true, false), (4, 4, 0), "each copy read once");
    let (copies, _, resent) = talk(false, true);
    assert_eq!((copies, resent), (0, 4), "sent again with new stamps");
}

/// Behind a NAT that acknowledges each segment at once (0.5 ms) for a server 117 ms away (the
/// handshake's round trip), an answer 120 ms after its question waited for the far end: the
/// server's own time is 3 ms. A SYN-ACK that was only slow (350 ms, on a path of 50 ms) is
/// disproved by the first answer, 90 ms after its question: no far end, the server's 40 ms
/// its own.
#[test]
fn a_nat_that_acks_for_the_far_end_is_told_from_a_slow_syn_ack() {
    let talk = |handshake: f64, ack: f64, answer: f64| {
        let mut c = Conv::seen_from(handshake, 0.01);
        let mut t = handshake + 1.0;
        for _ in 0..3 {
            c.data(t, 0, 100).ack(t + ack, 1).data(t + answer, 1, 200);
            c.ack(t + answer + 0.1, 0);
            t += 1000.0;
        }
        analyse(&c.segs).remove(0)
    };
    let think = |r: &crate::analysis::FlowReport| {
        r.budget
            .causes
            .iter()
            .filter(|s| s.cause == crate::analysis::Cause::Think)
            .map(|s| s.ms)
            .sum::<f64>()
    };
    let nat = talk(117.0, 0.5, 120.0);
    assert!(
        nat.far_rtt_ms.is_some_and(|f| (f - 117.0).abs() < 0.1),
        "{nat:#?}"
    );
    assert!((think(&nat) - 9.0).abs() < 0.5, "{:#?}", nat.budget);
    assert!(
        !nat.verdict.iter().any(|v| v.contains("profile")),
        "{:?}",
        nat.verdict
    );
    let slow = talk(350.0, 50.0, 90.0);
    assert_eq!(slow.far_rtt_ms, None, "{slow:#?}");
    assert!((think(&slow) - 120.0).abs() < 0.5, "{:#?}", slow.budget);
}

/// Two segments the path reordered (the later one passes first, its IPv4 number ahead): the
/// earlier, passing late with the number before, was first sent, not sent again.
#[test]
fn a_segment_the_path_reordered_is_no_retransmission() {
    let resent = |reorder: bool| {
        let mut c = Conv::new();
        for i in 0..6 {
            c.data(1.0 + f64::from(i), 1, 100);
        }
        let n = c.segs.len();
        if reorder {
            let (a, b) = (c.segs[n - 3].2, c.segs[n - 2].2);
            (c.segs[n - 3].2, c.segs[n - 2].2) = (b, a);
        }
        c.ack(20.0, 0);
        analyse(&c.segs)[0].sides[1].retransmissions
    };
    assert_eq!(resent(false), 0);
    assert_eq!(resent(true), 0, "a late first sending");
}
