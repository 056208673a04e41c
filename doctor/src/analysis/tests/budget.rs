//! The budget end to end: a flow's time in causes that add up to it, from either end, with
//! loss, probes, ACK clocks and a path's rate.

use super::*;

/// The time `r`'s budget gives `cause` of `side`, ms.
fn spent(
    r: &crate::analysis::FlowReport,
    cause: crate::analysis::Cause,
    side: Option<&str>,
) -> f64 {
    r.budget
        .causes
        .iter()
        .filter(|s| s.cause == cause && s.side == side)
        .map(|s| s.ms)
        .sum()
}

/// Issue 51's budget: a flow's time split into causes that add up to it, from either end.
/// Each round: a request in two writes (the second held by Nagle until the server's delayed
/// ACK), the server's answer 180 ms later, the client idle 300 ms. The stalls, the server's
/// think time and the client's idle time are each given theirs, at both ends.
#[test]
fn the_budget_gives_each_wait_its_cause_from_either_end() {
    use crate::analysis::Cause;
    // Seen at the client (10 ms to the server) and at the server (10 ms to the client).
    for (server_side, client_side) in [(10.0, 0.01), (0.01, 10.0)] {
        let mut c = Conv::seen_from(server_side, client_side);
        let mut t = server_side + client_side + 1.0;
        for _ in 0..4 {
            // At the client, the server's ACK comes a round trip and 40 ms after part 1; at the
            // server it leaves 40 ms after part 1 arrives, and part 2 arrives a round trip
            // later.
            c.data(t, 0, 100)
                .ack(t + server_side + 40.0, 1)
                .data(t + server_side + 40.0 + client_side, 0, 100)
                .data(t + 2.0 * server_side + 40.0 + client_side + 180.0, 1, 100);
            t += 2.0 * (server_side + client_side) + 40.0 + 180.0 + 300.0;
        }
        let r = &analyse(&c.segs)[0];
        let at = format!("seen {server_side} ms from the server");
        assert_eq!(r.stall_count, 4, "{at}: {r:#?}");
        let sum: f64 = r.budget.causes.iter().map(|s| s.ms).sum();
        assert!((sum - r.duration_s * 1000.0).abs() < 0.01, "{at}: {r:#?}");
        let nagle = spent(r, Cause::NagleStall, Some("client"));
        assert!((nagle - r.stalled_s * 1000.0).abs() < 0.01, "{at}: {nagle}");
        assert!((nagle - 160.0).abs() < 4.0, "{at}: {nagle}");
        let think = spent(r, Cause::Think, Some("server"));
        assert!((think - 4.0 * 180.0).abs() < 4.0, "{at}: {think}: {r:#?}");
        let idle = spent(r, Cause::Idle, Some("client"));
        assert!((idle - 3.0 * 300.0).abs() < 4.0, "{at}: {idle}");
        // The path: the handshake, and per round the way to the server and back twice (the
        // held part, and the answer); at the server's end, the last answer's way to the
        // client comes after the last frame.
        let path = spent(r, Cause::RoundTrip, None);
        let round_trips = if server_side > 1.0 { 9.0 } else { 8.0 };
        assert!(
            (path - round_trips * 10.0).abs() < 1.0,
            "{at}: {path}: {r:#?}"
        );
        assert_eq!(r.budget.exchanges.len(), 5, "{at}");
        assert!(r.budget.exchanges[1..]
            .iter()
            .all(|e| e.causes.iter().any(|s| s.cause == Cause::NagleStall)));
    }
}

/// On a lossy path, seen at the client: the client's request is lost after the server's
/// answer, so both send again after their timeouts, and the server's next answer leaves about
/// 225 ms after its previous one, behind its own retransmission. The client's request came
/// between: the server's turn had ended, and nothing of its was held (the hold rule took
/// these for a cork left on while a retransmission of the server's hid the client's turn).
#[test]
fn a_turn_the_peer_ended_is_no_hold_behind_a_retransmission() {
    let mut c = Conv::with_rtt(10.0);
    let mut t = 20.0;
    for _ in 0..3 {
        c.data(t, 1, 100); // the server's answer
        c.data(t + 10.1, 0, 100); // the client's next request, lost on its way
        c.seq[0] -= 100;
        c.data(t + 225.0, 0, 100); // sent again after its timeout
        c.seq[1] -= 100;
        c.data(t + 226.0, 1, 100); // the server's answer sent again (its ACK was lost too)
        c.data(t + 235.0, 1, 100); // the answer to the request
        c.data(t + 245.1, 0, 100); // the next request
        c.ack(t + 255.0, 1);
        t += 400.0;
    }
    let r = &analyse(&c.segs)[0];
    assert!(r.sender_holds.is_empty(), "{:#?}", r.sender_holds);
    assert!(!r.verdict.iter().any(|v| v.contains("holds its own writes")));
}

/// Seen at the server (the client 10 ms away): a request lost before the capture point is
/// sent again after the client's timeout and passes once. The client's IPv4 numbers skip the
/// lost one: its wait (its timeout, less nothing) is the client's loss recovery, not its idle
/// time. With a Windows client (TTL 128: one counter for all its packets), or numbers that
/// run on, nothing is said.
#[test]
fn a_request_lost_before_the_capture_is_loss_recovery_from_the_skipped_number() {
    use crate::analysis::Cause;
    let run = |skip: bool, ttl: u8| {
        let mut c = Conv::seen_from(0.01, 10.0);
        let mut t = 11.0;
        for round in 0..4 {
            c.data(t, 0, 100).ack(t + 0.1, 1).data(t + 0.2, 1, 100);
            if round == 2 && skip {
                c.ids[0] = c.ids[0].wrapping_add(1); // the request sent, lost
                t += 10.2 + 212.0; // the answer's way, the client's timeout
            } else {
                t += 10.2;
            }
        }
        for seg in &mut c.segs {
            if seg.2.src == C {
                seg.2.ttl = ttl;
            }
        }
        analyse(&c.segs)[0].clone()
    };
    let r = run(true, 64);
    let lost = spent(&r, Cause::LossRecovery, Some("client"));
    assert!((lost - 212.0).abs() < 1.0, "{lost}: {r:#?}");
    assert!(spent(&r, Cause::Idle, Some("client")) < 5.0, "{r:#?}");
    for r in [run(true, 128), run(false, 64)] {
        assert_eq!(
            spent(&r, Cause::LossRecovery, Some("client")),
            0.0,
            "{r:#?}"
        );
    }
}

/// Seen at the sender: a tail-loss probe sent again 25 ms after the last segment, and the
/// receiver's ACK with a D-SACK of it: nothing was lost, the receiver's ACK was late. Without
/// the D-SACK, the probe's wait stays loss recovery.
#[test]
fn a_probe_the_receiver_had_already_is_its_late_ack_not_loss() {
    use crate::analysis::Cause;
    let run = |dsack: bool| {
        let mut c = Conv::with_rtt(10.0);
        c.data(20.0, 0, 1448).data(20.1, 0, 1448);
        c.ack(30.1, 1);
        c.data(30.2, 0, 1448);
        c.seq[0] -= 1448;
        c.data(55.2, 0, 1448); // the probe: the same bytes again
        c.ack(65.2, 1);
        if dsack {
            let end = c.seq[0];
            c.last_mut().sack = true;
            c.last_mut().sack_first = Some((end - 1448, end));
        }
        c.data(66.0, 1, 100);
        analyse(&c.segs)[0].clone()
    };
    let r = run(true);
    assert_eq!(
        spent(&r, Cause::LossRecovery, Some("client")),
        0.0,
        "{r:#?}"
    );
    assert!(
        (spent(&r, Cause::DelayedAck, Some("server")) - 25.0).abs() < 0.5,
        "{r:#?}"
    );
    let r = run(false);
    assert!(
        (spent(&r, Cause::LossRecovery, Some("client")) - 25.0).abs() < 0.5,
        "{r:#?}"
    );
}

/// What the skipped numbers must not be read as: at the server's end, a client's pure ACK
/// lost, then a second of its idle time before its next request (no timeout's silence); at
/// the server's own end, an offload packet (one number per segment the NIC cut it into),
/// then 300 ms of the server's own time.
#[test]
fn a_lost_ack_before_idle_and_an_offload_packet_are_no_loss() {
    use crate::analysis::Cause;
    let mut c = Conv::seen_from(0.01, 10.0);
    let mut t = 11.0;
    for _ in 0..4 {
        c.data(t, 0, 100).data(t + 0.2, 1, 100);
        t += 10.2;
    }
    c.ids[0] = c.ids[0].wrapping_add(1); // the client's ACK of the last answer, lost
    c.data(t + 1000.0, 0, 100).data(t + 1000.2, 1, 100);
    let r = analyse(&c.segs)[0].clone();
    assert_eq!(
        spent(&r, Cause::LossRecovery, Some("client")),
        0.0,
        "{r:#?}"
    );
    assert!(spent(&r, Cause::Idle, Some("client")) > 990.0, "{r:#?}");

    let mut c = Conv::seen_from(0.01, 10.0);
    let mut t = 11.0;
    for _ in 0..4 {
        c.data(t, 0, 100).data(t + 0.2, 1, 100);
        t += 10.2;
    }
    c.data(t, 0, 100).data(t + 0.2, 1, 9 * 1448 + 100);
    c.ids[1] = c.ids[1].wrapping_add(9); // the NIC's numbers for the other nine segments
    c.ack(t + 10.3, 0);
    c.data(t + 310.0, 1, 100); // 300 ms of the server's own time, then more
    let r = analyse(&c.segs)[0].clone();
    assert_eq!(
        spent(&r, Cause::LossRecovery, Some("server")),
        0.0,
        "{r:#?}"
    );
}

/// At the server's end (the client 10 ms away): two full segments, the server's ACK of both
/// passes here and is lost after, the client probes: the D-SACK that follows says the bytes
/// had come, but the ACK was not late, it was lost: the probe's wait stays loss recovery.
#[test]
fn a_probe_after_an_ack_lost_past_the_capture_stays_loss() {
    use crate::analysis::Cause;
    let mut c = Conv::seen_from(0.01, 10.0);
    c.data(20.0, 0, 1448).data(20.1, 0, 1448);
    c.ack(20.2, 1);
    c.seq[0] -= 1448;
    c.data(55.0, 0, 1448); // the probe
    c.ack(55.1, 1);
    let end = c.seq[0];
    c.last_mut().sack = true;
    c.last_mut().sack_first = Some((end - 1448, end));
    c.data(56.0, 1, 100);
    let r = analyse(&c.segs)[0].clone();
    assert_eq!(spent(&r, Cause::DelayedAck, Some("server")), 0.0, "{r:#?}");
    assert!(
        spent(&r, Cause::LossRecovery, Some("client")) > 30.0,
        "{r:#?}"
    );
}

/// At the server's end: an answer lost past the capture, so the client sends its request
/// again (its ACK rode on the answer) and the server its answer: one question, not two.
#[test]
fn data_sent_again_opens_no_exchange() {
    let mut c = Conv::seen_from(0.01, 10.0);
    let t = 20.0;
    c.data(t, 0, 100).data(t + 0.2, 1, 100);
    c.seq[0] -= 100;
    c.data(t + 215.0, 0, 100);
    c.seq[1] -= 100;
    c.data(t + 215.2, 1, 100);
    c.data(t + 240.0, 0, 100).data(t + 240.2, 1, 100);
    let r = analyse(&c.segs)[0].clone();
    assert_eq!(r.exchanges, 2, "{r:#?}");
}

/// A multiplexed client ACK-clocked by its server's answers, at the client's end of a 10 ms
/// path: its batches of 40-byte requests (one to ten, merged) leave as each answer arrives.
/// The server answers each batch at once: its answers leave as the requests arrive, as any
/// answer does, and are not named clocked, whether the client's ACK of the last answer rides
/// on its next requests or comes alone just before them.
#[test]
fn an_answer_is_not_clocked_however_its_question_acknowledges() {
    for ack_alone in [false, true] {
        let mut c = Conv::with_rtt(10.0);
        let mut t = 11.0;
        for i in 0..80u32 {
            let len = 40 * (1 + i % 10);
            c.data(t, 0, len);
            c.data(t + 10.0, 1, len);
            if ack_alone {
                c.ack(t + 10.002, 0);
            }
            t += 10.005;
        }
        let r = analyse(&c.segs)[0].clone();
        let dirs: Vec<&str> = r.ack_clocked.iter().map(|a| a.direction).collect();
        assert_eq!(dirs, ["client->server"], "ACK alone {ack_alone}: {r:#?}");
    }
}

/// At the sender's end of a path with a rate (3 ms a segment), ACKs of a window sent at once
/// come a segment at a time, later and later after their data as the queue held it: none is
/// a delayed ACK, each passed 3 ms after the one before. A lone segment's ACK 40 ms after
/// it, and after the ACK before, is one.
#[test]
fn acks_paced_by_a_queue_are_not_delayed_acks() {
    let mut c = Conv::seen_from(0.01, 10.0);
    c.data(10.1, 0, 100);
    let first = c.seq[1];
    for k in 0..20 {
        c.data(10.2 + f64::from(k) * 0.001, 1, 1448);
    }
    for k in 0..20 {
        c.ack(10.2 + 13.0 + 3.0 * f64::from(k), 0);
        c.last_mut().ack = first.wrapping_add(1448 * (k + 1));
    }
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.sides[0].delayed_acks, 0, "{r:#?}");
    c.data(100.0, 1, 10).ack(140.5, 0);
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.sides[0].delayed_acks, 1, "{r:#?}");
}
