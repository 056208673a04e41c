//! The budget's labelling alone, span by span, on conversations built segment by segment.

use super::*;

const C: Direction = Direction::Client;
const S: Direction = Direction::Server;

fn paths(client_data_side: u64, server_data_side: u64) -> Paths {
    Paths {
        side_us: [Some(client_data_side), Some(server_data_side)],
        base_us: [Some(client_data_side), Some(server_data_side)],
        far_us: [None, None],
    }
}

fn data(opens_exchange: bool) -> Data {
    Data {
        retransmit: false,
        opens_exchange,
        asks: opens_exchange,
        full: false,
        wait: Wait::Small,
        in_flight: 0,
        segment: 1448,
    }
}

fn ms_of(b: &output::Budget, cause: Cause, side: Option<&str>) -> f64 {
    b.causes
        .iter()
        .filter(|s| s.cause == cause && s.side == side)
        .map(|s| s.ms)
        .sum()
}

/// Seen at the client, 10 ms from the server: a request, an answer after 180 ms of the
/// server's, 500 ms idle, a second request split in two and held by Nagle until a
/// delayed ACK.
#[test]
fn an_answer_a_stall_and_idle_time_add_up() {
    let p = paths(10_000, 0);
    let mut b = Budget::new(0, 1);
    // The handshake's last ACK at 10 ms; the request at 10 ms.
    b.on_data(C, 10_000, 4, data(true), &p);
    b.on_ack(S, 20_000, 5, false, 1448, true);
    b.on_data(S, 200_000, 6, data(false), &p);
    b.on_data(C, 700_000, 7, data(true), &p);
    b.on_ack(S, 750_000, 8, false, 1448, true);
    b.on_data(C, 750_100, 9, data(false), &p);
    b.overlay(710_000, 750_000, Label::of(Cause::NagleStall, Some(C)));
    b.on_data(S, 760_100, 10, data(false), &p);
    let got = b.close(760_100, 10, &p, Named::default());
    assert_eq!(got.total_ms, 760.1);
    let sum: f64 = got.causes.iter().map(|s| s.ms).sum();
    assert!((sum - got.total_ms).abs() < 1e-6, "{got:#?}");
    assert_eq!(ms_of(&got, Cause::Think, Some("server")), 180.0);
    assert_eq!(ms_of(&got, Cause::Idle, Some("client")), 500.0);
    assert_eq!(ms_of(&got, Cause::NagleStall, Some("client")), 40.0);
    // Handshake 10, first answer's way 10, the stall's round trip 10, the second
    // answer's way 10; the release took the client 0.1 ms (its side measured as none).
    assert_eq!(ms_of(&got, Cause::RoundTrip, None), 40.0);
    assert!((ms_of(&got, Cause::Think, Some("client")) - 0.1).abs() < 1e-6);
    assert_eq!(got.causes[0].cause, Cause::Idle);
    assert_eq!(got.causes[0].longest[0].frame, 6);
    let indexes: Vec<u64> = got.exchanges.iter().map(|e| e.index).collect();
    assert_eq!(indexes, [0, 1, 2]);
    assert_eq!(got.exchanges[2].total_ms, 60.1);
}

/// Seen at the client behind a NAT that acknowledges its data at once (0.5 ms) for a server
/// 100 ms away: the answer waits for the far end, not for the NAT's ACK; the server closes
/// as it answers, and the client's FIN after 56 ms is its own time.
#[test]
fn behind_a_splitting_nat_an_answer_waits_for_the_far_end() {
    let mut p = paths(500, 0);
    p.far_us[0] = Some(100_000);
    let mut b = Budget::new(0, 1);
    b.on_data(C, 100_500, 4, data(true), &p);
    b.on_ack(S, 101_000, 5, false, 1448, true);
    b.on_data(S, 203_500, 6, data(false), &p);
    b.on_close(S, 203_600, 7);
    b.on_close(C, 260_000, 8);
    let got = b.close(260_500, 9, &p, Named::default());
    // The handshake's 100 ms and the answer's, the far end's round trips, and the NAT's ACK
    // of the client's FIN, the near one's; the client's own time before its request and its
    // FIN.
    assert!(
        (ms_of(&got, Cause::Think, Some("server")) - 3.0).abs() < 1e-6,
        "{got:#?}"
    );
    assert!(
        (ms_of(&got, Cause::RoundTrip, None) - 200.5).abs() < 1e-6,
        "{got:#?}"
    );
    assert!(
        (ms_of(&got, Cause::Idle, Some("client")) - 56.9).abs() < 1e-6,
        "{got:#?}"
    );
}

/// Behind the same NAT, a half-close: the client sends its request and its FIN; the server
/// answers, and closes 60 ms after its answer: its own time, not a way to the far end.
#[test]
fn a_half_closed_peer_s_fin_after_its_answer_is_its_own_time() {
    let mut p = paths(500, 0);
    p.far_us[0] = Some(117_000);
    let mut b = Budget::new(0, 1);
    b.on_data(C, 117_500, 4, data(true), &p);
    b.on_close(C, 117_600, 5);
    b.on_data(S, 237_500, 6, data(false), &p);
    b.on_close(S, 297_500, 7);
    let got = b.close(298_000, 8, &p, Named::default());
    assert!(
        (ms_of(&got, Cause::Idle, Some("server")) - 60.0).abs() < 1e-6,
        "{got:#?}"
    );
    assert!(
        (ms_of(&got, Cause::RoundTrip, None) - 234.0).abs() < 1e-6,
        "{got:#?}"
    );
    assert!(
        (ms_of(&got, Cause::Think, Some("server")) - 3.0).abs() < 1e-6,
        "{got:#?}"
    );
}

/// A small write waits for the ACK of the one before: an ACK a few tenths of a millisecond
/// later than its way is the path's jitter, one 30 ms later the receiver's timer.
#[test]
fn only_an_ack_a_timer_made_late_is_a_delayed_ack() {
    let p = paths(10_000, 0);
    let delayed = |ack_us: u64| {
        let mut b = Budget::new(0, 1);
        b.on_data(C, 10_000, 4, data(true), &p);
        b.on_ack(S, ack_us, 5, false, 100, true);
        b.on_data(C, ack_us + 100, 6, data(false), &p);
        b.on_data(S, ack_us + 10_200, 7, data(false), &p);
        let got = b.close(ack_us + 10_200, 7, &p, Named::default());
        ms_of(&got, Cause::DelayedAck, Some("server"))
    };
    assert_eq!(delayed(20_300), 0.0);
    assert_eq!(delayed(50_000), 30.0);
}

/// A bulk sender waits for ACKs with its window full, a receiver that stops reading.
#[test]
fn windows_loss_and_a_capture_that_ends_mid_turn() {
    let p = paths(20_000, 1_000);
    let mut b = Budget::new(0, 1);
    let bulk = |wait| Data {
        retransmit: false,
        opens_exchange: false,
        asks: false,
        full: true,
        wait,
        in_flight: 2_896,
        segment: 1448,
    };
    b.on_data(C, 21_000, 4, data(true), &p);
    b.on_data(C, 21_100, 5, bulk(Wait::Congestion), &p);
    b.on_ack(S, 41_100, 6, false, 1448, true);
    b.on_data(C, 42_100, 7, bulk(Wait::Receive), &p);
    b.on_ack(S, 62_100, 8, false, 1448, true);
    b.on_data(C, 63_100, 9, bulk(Wait::Receive), &p);
    let again = Data {
        retransmit: true,
        ..bulk(Wait::Receive)
    };
    b.on_data(C, 300_000, 10, again, &p);
    let got = b.close(310_000, 11, &p, Named::default());
    assert_eq!(ms_of(&got, Cause::CongestionWindow, Some("client")), 21.0);
    assert_eq!(ms_of(&got, Cause::ReceiveWindow, Some("client")), 21.0);
    assert!((ms_of(&got, Cause::LossRecovery, Some("client")) - 236.9).abs() < 1e-6);
    // The handshake (21 ms), then the first request's first segments at the path's rate.
    assert_eq!(ms_of(&got, Cause::Transfer, None), 0.1);
    // The capture ends 10 ms after the last segment, less than its way to the server.
    assert_eq!(ms_of(&got, Cause::RoundTrip, None), 31.0);
}

/// Full segments at the path's rate (3 ms each, a 10 ms round trip): at the receiver's
/// end, one that comes sooner after the receiver's ACK than that ACK could release it;
/// at the sender's, one an ACK released within half a round trip; at either, the queue
/// still draining after the last segment, before the next request. All of it the rate's,
/// none a window's.
#[test]
fn data_paced_by_the_path_is_transfer_not_a_window() {
    let full = |opens| Data {
        full: true,
        wait: Wait::Congestion,
        ..data(opens)
    };
    // At the client's end: the server's data comes, the client ACKs at once.
    let p = paths(10_000, 0);
    let mut b = Budget::new(0, 1);
    b.on_data(C, 10_000, 4, data(true), &p);
    b.on_data(S, 23_000, 5, full(false), &p);
    b.on_ack(C, 23_050, 6, true, 1448, true);
    b.on_data(S, 26_000, 7, full(false), &p);
    b.on_ack(C, 26_050, 8, true, 1448, true);
    b.on_data(S, 29_000, 9, full(false), &p);
    let got = b.close(29_000, 9, &p, Named::default());
    assert_eq!(ms_of(&got, Cause::Transfer, None), 6.0, "{got:#?}");
    assert_eq!(ms_of(&got, Cause::CongestionWindow, Some("server")), 0.0);
    // At the server's end: the ACKs come paced; after the last segment they go on
    // coming 30 ms, the last leaving more in flight, before the next request.
    let p = paths(0, 10_000);
    let mut b = Budget::new(0, 1);
    b.on_data(C, 10_000, 4, data(true), &p);
    b.on_data(S, 10_100, 5, full(false), &p);
    b.on_ack(C, 14_000, 6, true, 1448, true);
    b.on_data(S, 14_050, 7, full(false), &p);
    b.on_ack(C, 22_000, 8, true, 1448, true);
    b.on_ack(C, 46_000, 9, true, 1448, true);
    b.on_ack(C, 52_000, 10, false, 1448, true);
    b.on_data(C, 52_100, 11, data(true), &p);
    let got = b.close(52_100, 11, &p, Named::default());
    assert_eq!(
        ms_of(&got, Cause::CongestionWindow, Some("server")),
        0.0,
        "{got:#?}"
    );
    // 3.95 ms paced by an ACK, 21.95 ms of the queue draining (to 10 ms before the
    // last ACK that left more in flight).
    assert!(
        (ms_of(&got, Cause::Transfer, None) - 25.9).abs() < 1e-6,
        "{got:#?}"
    );
}

/// At the sender's end, 10 ms from the client: ten full segments at once, then the wait
/// for the first ACK. On a path of 4 Mbit/s (3 ms a segment) the ACKs then come a segment
/// at a time, 3 ms apart: the ten took 30 ms to cross, longer than the round trip, so the
/// path's queue was never empty and the wait was its rate's. On a path with no rate they
/// come together: the window held the sender back, the path idle.
#[test]
fn the_first_wait_is_the_path_s_rate_when_its_queue_stayed_busy() {
    let p = paths(0, 10_000);
    let window = |first_ack: u64, gap: u64| {
        let mut b = Budget::new(0, 1);
        b.on_data(C, 10_000, 4, data(true), &p);
        let ten = Data {
            full: true,
            wait: Wait::Congestion,
            in_flight: 14_480,
            ..data(false)
        };
        b.on_data(S, 10_100, 5, ten, &p);
        b.on_ack(C, first_ack, 6, true, 1_448, true);
        b.on_data(S, first_ack + 20, 7, ten, &p);
        b.on_ack(C, first_ack + gap, 8, true, 1_448, true);
        b.on_data(S, first_ack + gap + 20, 9, ten, &p);
        b.close(first_ack + gap + 20, 9, &p, Named::default())
    };
    let paced = window(23_100, 3_000);
    assert_eq!(
        ms_of(&paced, Cause::CongestionWindow, Some("server")),
        0.0,
        "{paced:#?}"
    );
    // (Up to the first ACK, and from the first released segment on: the sender's 20 µs
    // between stay its own, beside its 0.1 ms to answer.)
    assert!(
        (ms_of(&paced, Cause::Transfer, None) - 16.0).abs() < 1e-6,
        "{paced:#?}"
    );
    assert!(
        (ms_of(&paced, Cause::Think, Some("server")) - 0.12).abs() < 1e-6,
        "{paced:#?}"
    );
    let together = window(20_100, 20);
    assert_eq!(
        ms_of(&together, Cause::CongestionWindow, Some("server")),
        10.0,
        "{together:#?}"
    );
}

#[test]
fn a_clocked_wait_is_the_clocks_only_where_the_verdict_says_so() {
    let p = paths(5_000, 5_000);
    let run = |clocked| {
        let mut b = Budget::new(0, 1);
        b.on_data(C, 10_000, 4, data(true), &p);
        b.on_ack(S, 15_000, 5, false, 1448, true);
        b.on_data(C, 20_000, 6, data(false), &p);
        let named = Named {
            clocked,
            ..Named::default()
        };
        b.close(20_000, 6, &p, named)
    };
    let on = run([true, false]);
    assert_eq!(ms_of(&on, Cause::AckClocked, Some("client")), 10.0);
    let off = run([false, true]);
    assert_eq!(ms_of(&off, Cause::AckClocked, Some("client")), 0.0);
    assert_eq!(ms_of(&off, Cause::RoundTrip, None), 20.0);
}

#[test]
fn causes_are_named_as_the_json_names_them() {
    for c in Cause::ALL {
        assert_eq!(serde_json::to_value(c).unwrap(), c.name());
    }
}

#[test]
fn without_a_round_trip_the_time_is_unknown() {
    let p = Paths {
        side_us: [None, None],
        base_us: [None, None],
        far_us: [None, None],
    };
    let mut b = Budget::new(0, 1);
    b.on_data(C, 1_000, 2, data(true), &p);
    b.on_data(S, 90_000, 3, data(false), &p);
    let got = b.close(90_000, 3, &p, Named::default());
    assert_eq!(got.causes.len(), 1, "{got:#?}");
    assert_eq!(got.causes[0].cause, Cause::Unknown);
    assert_eq!(got.causes[0].fix, None);
}

/// At the receiver's end, 10 ms from the server: a full segment 8 ms after the one before,
/// no ACK between, is the window's wait only if an ACK of this turn's data passed about a
/// round trip before (it released it); with none, the path paced it (its rate, its jitter).
#[test]
fn a_window_waits_only_for_an_ack_that_could_release_it() {
    let p = paths(10_000, 0);
    let full = Data {
        full: true,
        wait: Wait::Congestion,
        in_flight: 2_896,
        ..data(false)
    };
    let run = |ack: bool| {
        let mut b = Budget::new(0, 1);
        b.on_data(C, 10_000, 4, data(true), &p);
        b.on_data(S, 21_000, 5, full, &p);
        if ack {
            b.on_ack(C, 21_050, 6, false, 1_448, true);
        }
        // Back to back with the first: on its way before any ACK could release it.
        b.on_data(S, 21_900, 7, full, &p);
        b.on_data(S, 29_900, 8, full, &p);
        b.close(29_900, 8, &p, Named::default())
    };
    let released = run(true);
    assert_eq!(
        ms_of(&released, Cause::CongestionWindow, Some("server")),
        8.0,
        "{released:#?}"
    );
    let paced = run(false);
    assert_eq!(
        ms_of(&paced, Cause::CongestionWindow, Some("server")),
        0.0,
        "{paced:#?}"
    );
    assert!(
        (ms_of(&paced, Cause::Transfer, None) - 8.9).abs() < 1e-6,
        "{paced:#?}"
    );
}

/// At the sender's end, 10 ms from the client: after the last segment, the ACK that leaves
/// more in flight, then two more a segment's time apart, acknowledging the last of the queue
/// as it came: the drain runs to the last of them (less its way back), then the round trip,
/// then the client's idle. An ACK the client's next request carries is its turn's, not the
/// queue's.
#[test]
fn the_drain_runs_to_the_last_ack_at_its_pace() {
    let p = paths(0, 10_000);
    let full = Data {
        full: true,
        wait: Wait::Congestion,
        in_flight: 4_344,
        ..data(false)
    };
    let mut b = Budget::new(0, 1);
    b.on_data(C, 10_000, 4, data(true), &p);
    b.on_data(S, 10_100, 5, full, &p);
    b.on_ack(C, 23_100, 6, true, 1_448, true);
    b.on_ack(C, 26_100, 7, false, 1_448, true);
    b.on_ack(C, 27_000, 8, false, 1_448, true);
    b.on_data(C, 37_500, 9, data(true), &p);
    let got = b.close(37_500, 9, &p, Named::default());
    assert!(
        (ms_of(&got, Cause::Transfer, None) - 6.9).abs() < 1e-6,
        "{got:#?}"
    );
    assert!(
        (ms_of(&got, Cause::Idle, Some("client")) - 10.5).abs() < 1e-6,
        "{got:#?}"
    );
    let mut b = Budget::new(0, 1);
    b.on_data(C, 10_000, 4, data(true), &p);
    b.on_data(S, 10_100, 5, full, &p);
    b.on_ack(C, 23_100, 6, true, 1_448, true);
    b.on_ack(C, 26_100, 7, false, 1_448, true);
    b.on_ack(C, 29_000, 8, false, 1_448, false);
    b.on_data(C, 29_000, 8, data(true), &p);
    let got = b.close(29_000, 8, &p, Named::default());
    assert!(
        (ms_of(&got, Cause::Transfer, None) - 6.0).abs() < 1e-6,
        "{got:#?}"
    );
    assert!(
        (ms_of(&got, Cause::Idle, Some("client")) - 2.9).abs() < 1e-6,
        "{got:#?}"
    );
}

/// At the sender's end of a path with a standing queue (a slow uplink), ACKs come late because
/// the segments before them waited in the queue. An ACK of two full segments was sent as the
/// second arrived (a receiver delays only an ACK of less): its lateness past the round trip is
/// the path's rate, not a delayed ACK. An ACK of one segment as late may be the receiver's.
#[test]
fn a_late_ack_of_two_segments_is_the_path_s_queue_not_a_delayed_ack() {
    let full = |wait| Data {
        full: true,
        wait,
        ..data(false)
    };
    let p = paths(14_000, 0);
    let mut b = Budget::new(0, 1);
    b.on_data(C, 10_000, 4, data(true), &p);
    b.on_data(C, 10_100, 5, full(Wait::Receive), &p);
    b.on_ack(S, 130_000, 6, true, 2_896, true);
    b.on_data(C, 130_050, 7, full(Wait::Receive), &p);
    b.on_ack(S, 250_000, 8, true, 1_448, true);
    b.on_data(C, 250_050, 9, full(Wait::Receive), &p);
    let got = b.close(250_050, 9, &p, Named::default());
    // Each wait: the round trip's 14 ms the window's, the rest the queue's or the delay's.
    assert!(
        (ms_of(&got, Cause::ReceiveWindow, Some("client")) - 28.0).abs() < 1e-6,
        "{got:#?}"
    );
    assert!(
        (ms_of(&got, Cause::DelayedAck, Some("server")) - 105.95).abs() < 1e-6,
        "{got:#?}"
    );
    assert!(ms_of(&got, Cause::Transfer, None) >= 105.9, "{got:#?}");
}
