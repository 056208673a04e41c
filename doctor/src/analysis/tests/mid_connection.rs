//! Captures that begin mid-connection or come from Windows: flows told apart, ACK timers
//! judged without a handshake, Nagle not taken as off on a large write's tail.

use super::*;

#[test]
fn a_reused_four_tuple_is_two_flows() {
    let mut c = Conv::new();
    c.data(1.0, 0, 100).ack(41.0, 1).data(41.05, 0, 100);
    c.push(50.0, 0, 0, flags::FIN | flags::ACK, None);
    c.push(50.1, 1, 0, flags::FIN | flags::ACK, None);
    c.seq = [90_000, 70_000];
    c.push(60.0, 0, 0, flags::SYN, Some(1460));
    c.seq[0] += 1;
    c.push(60.01, 1, 0, flags::SYN | flags::ACK, Some(1460));
    c.seq[1] += 1;
    c.data(61.0, 0, 100).data(61.1, 1, 100);
    let r = analyse(&c.segs);
    assert_eq!(r.len(), 2, "{r:#?}");
    assert_eq!(r[0].stall_count, 1);
    assert_eq!(r[1].stall_count, 0);
    assert!(r[1].handshake);
}

/// Issue 42's first miss: a capture begun mid-connection (no SYN: no MSS, no handshake round
/// trip) on the link of a Windows receiver (TTL 128, unrouted) that ACKs every small write
/// 198-200 ms late and sends no data. Its fastest ACK is its timer, not the path: the writes
/// the sender releases on those ACKs are stalls. Seen across a router (TTL 127), the same
/// 198 ms could be the path, and no stall is claimed.
#[test]
fn mid_connection_windows_acks_are_delayed_acks_on_the_receivers_link() {
    for (ttl, stalls) in [(128, 4), (127, 0)] {
        let mut c = Conv::new();
        c.segs.clear();
        let mut t = 1.0;
        c.data(t, 1, 27);
        for delay in [198.9, 198.1, 200.4, 199.0] {
            c.ack(t + delay, 0);
            c.last_mut().ttl = ttl;
            // The sender, ~2 ms away, sends its held write one round trip after the ACK.
            c.data(t + delay + 1.9, 1, 177);
            t += delay + 1.9;
        }
        let r = &analyse(&c.segs)[0];
        assert!(!r.handshake);
        assert_eq!(r.stall_count, stalls, "TTL {ttl}: {r:#?}");
        if stalls > 0 {
            assert!(r.stalls.iter().all(|s| s.stalled_us >= 198_000));
            assert_eq!(r.ack_timer, Some(AckTimer::Classic200ms));
        }
    }
}

/// A delayed ACK seen before the flow's fastest ACK is still judged against it: in a capture
/// begun mid-connection whose first ACKs were all delayed, the stalls before the first prompt
/// ACK count too.
#[test]
fn stalls_before_the_fastest_ack_is_seen_are_judged_against_it() {
    let mut c = Conv::new();
    c.segs.clear();
    let mut t = 1.0;
    for _ in 0..3 {
        c.data(t, 0, 100)
            .ack(t + 200.0, 1)
            .data(t + 200.05, 0, 100)
            .data(t + 200.3, 1, 100)
            .ack(t + 200.4, 0);
        t += 300.0;
    }
    // Only now a prompt ACK shows the path is short.
    c.data(t, 0, 1460).data(t + 0.01, 0, 1460).ack(t + 0.3, 1);
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.stall_count, 3, "{r:#?}");
}

/// Issue 42's second miss: Windows applies Nagle to each write, so a large write's small tail
/// leaves right behind its full segments even while a small segment is in flight. That is no
/// proof the sender runs without Nagle: its later small writes, held until a 200 ms ACK, are
/// stalls.
#[test]
fn a_large_writes_tail_beside_a_small_segment_does_not_prove_nagle_off() {
    let mut c = Conv::new();
    // A small message in flight, then a large write: two full segments and a 300-byte tail.
    c.data(1.0, 0, 100)
        .data(3.0, 0, 1448)
        .data(3.01, 0, 1448)
        .data(3.02, 0, 300)
        .ack(3.5, 1);
    let mut t = 10.0;
    for _ in 0..3 {
        c.data(t, 0, 100)
            .ack(t + 200.0, 1)
            .data(t + 200.05, 0, 100)
            .data(t + 200.3, 1, 100);
        t += 300.0;
    }
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.stall_count, 3, "{r:#?}");
    // A second small write sent on its own beside the first still proves Nagle off.
    let mut c = Conv::new();
    c.data(1.0, 0, 100).data(3.0, 0, 100).ack(3.5, 1);
    c.data(10.0, 0, 100)
        .ack(210.0, 1)
        .data(210.05, 0, 100)
        .data(210.3, 1, 100);
    assert_eq!(analyse(&c.segs)[0].stall_count, 0);
}

/// Issue 54's open class (`corpus/open/`): a sender with Nagle on sends a small segment beside
/// a small one in flight when its tail-loss probe fires (no ACK for 200 ms and a round trip),
/// and Windows lets held data go as the peer's segment arrives (with the ACK it sends anyway,
/// or on an ACK of part of what is in flight). Neither proves Nagle off: its later held
/// writes are stalls. The same segment sent on its own, by a sender that is not Windows or
/// not at the peer's arrival, still proves it.
#[test]
fn a_probe_and_data_riding_a_windows_ack_do_not_prove_nagle_off() {
    let rounds = |c: &mut Conv| {
        let mut t = 1000.0;
        for _ in 0..3 {
            c.data(t, 0, 100)
                .ack(t + 80.0, 1)
                .data(t + 80.05, 0, 100)
                .data(t + 80.3, 1, 100);
            t += 300.0;
        }
    };
    let windows = |c: &mut Conv| {
        for (_, _, seg) in &mut c.segs {
            if seg.src == C {
                seg.ttl = 128;
            }
        }
    };
    // A tail-loss probe: 359 ms after a small segment still unacknowledged.
    let mut c = Conv::new();
    c.data(1.0, 0, 24).data(360.0, 0, 189).ack(400.0, 1);
    rounds(&mut c);
    assert_eq!(analyse(&c.segs)[0].stall_count, 3, "a probe proves nothing");
    // Sent beside a small segment in flight as the server's data arrived.
    for (win, stalls) in [(true, 3), (false, 0)] {
        let mut c = Conv::new();
        c.data(1.0, 0, 24).data(5.0, 1, 200);
        c.last_mut().ack -= 24; // (the server's data does not acknowledge the 24 bytes)
        c.data(5.05, 0, 66).ack(6.0, 1);
        rounds(&mut c);
        if win {
            windows(&mut c);
        }
        assert_eq!(analyse(&c.segs)[0].stall_count, stalls, "windows {win}");
    }
    // A Windows sender's small segment sent on its own beside one in flight proves it.
    let mut c = Conv::new();
    c.data(1.0, 0, 24).data(5.0, 0, 66).ack(6.0, 1);
    rounds(&mut c);
    windows(&mut c);
    assert_eq!(analyse(&c.segs)[0].stall_count, 0);
}

/// Issue 42's misnaming: a Windows receiver (TTL 128) whose timer fired 56 ms after the data
/// is not Linux's 40 ms timer; the verdict says the delay measured and offers Windows' fix.
#[test]
fn a_windows_receivers_56_ms_timer_is_not_named_linuxs() {
    let mut c = Conv::new();
    for seg in &mut c.segs {
        if seg.2.src == S {
            seg.2.ttl = 128;
        }
    }
    let mut t = 1.0;
    for _ in 0..3 {
        c.data(t, 0, 100).ack(t + 56.0, 1);
        c.last_mut().ttl = 128;
        c.data(t + 56.05, 0, 100).data(t + 56.3, 1, 100);
        c.last_mut().ttl = 128;
        t += 100.0;
    }
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.stall_count, 3, "{r:#?}");
    assert_eq!(r.ack_timer, Some(AckTimer::Classic200ms));
    assert!(
        r.verdict[0].contains("a delayed-ACK timer of ~56 ms (not Linux's 40 ms"),
        "{:?}",
        r.verdict
    );
    assert!(r.verdict[2].contains("TcpAckFrequency"), "{:?}", r.verdict);
    // The same 56 ms from a host that starts at TTL 64 is named by its delay too.
    let mut c = Conv::new();
    let mut t = 1.0;
    for _ in 0..3 {
        c.data(t, 0, 100)
            .ack(t + 56.0, 1)
            .data(t + 56.05, 0, 100)
            .data(t + 56.3, 1, 100);
        t += 100.0;
    }
    let r = &analyse(&c.segs)[0];
    assert!(
        r.verdict[0].contains("~57 ms (longer than Linux's 40 ms)")
            || r.verdict[0].contains("~56 ms (longer than Linux's 40 ms)"),
        "{:?}",
        r.verdict
    );
}

/// A capture begun mid-connection (no SYN: the full segment is the largest payload seen,
/// 1326 bytes) of a server that sends 1031-byte segments two at a time, the second 16 ms after
/// the first and before its ACK: no Nagle holds such a second segment, so the server runs
/// without it, and its segments that follow the client's late ACKs are not stalls (secdev/scapy's
/// `http_chunk.pcap`, IIS streaming a chunked answer: 12 stalls claimed before 2026-12-01).
/// Under three quarters of a full segment was the proof's bar, for a full segment announced
/// by a SYN that the path may not carry; a payload seen sent is one it carries.
#[test]
fn segments_shorter_than_one_seen_sent_two_in_flight_prove_nagle_off() {
    let stalls = |second: u32| {
        let mut c = Conv::new();
        c.segs.clear();
        c.data(1.0, 0, 300);
        c.data(2.0, 1, 1326).data(2.1, 1, 1326).ack(3.0, 0);
        let mut t = 10.0;
        for _ in 0..4 {
            c.data(t, 1, 1031).data(t + 16.0, 1, second);
            c.ack(t + 150.0, 0);
            c.data(t + 150.5, 1, 1031);
            c.ack(t + 190.0, 0);
            t += 300.0;
        }
        analyse(&c.segs)[0].stall_count
    };
    // (A second segment that is full: no proof, and the late ACKs' releases are stalls.)
    assert!(
        stalls(1326) > 0,
        "the scenario holds stalls when Nagle may be on"
    );
    assert_eq!(
        stalls(1031),
        0,
        "two 1031-byte segments in flight: Nagle is off"
    );
}
