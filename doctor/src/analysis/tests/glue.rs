//! The glue patterns named: small-message streams, a TLS 1.3 first answer, a relay's hop, a
//! sender's own hold.

use super::*;

/// The first bytes of a TLS record of content type `kind`.
fn tls(kind: u8) -> crate::packet::Head {
    crate::packet::Head::of(&[kind, 3, 3])
}

#[test]
fn a_stream_of_small_messages_is_named_a_stream() {
    // A request, then events: the first leaves, the next wait behind it for the delayed ACK,
    // twice in the one turn.
    let mut c = Conv::new();
    c.data(1.0, 0, 80)
        .data(1.1, 1, 45)
        .ack(41.1, 0)
        .data(41.15, 1, 900)
        .ack(81.15, 0)
        .data(81.2, 1, 900);
    let r = &analyse(&c.segs)[0];
    assert_eq!(r.stall_count, 2, "{r:#?}");
    assert_eq!(r.stalls[1].pattern, Pattern::EventStream, "{r:#?}");
    assert!(r.verdict[0].contains("streams small messages one by one"));
    assert!(
        r.verdict[1].contains("TCP_NODELAY (each message"),
        "{:?}",
        r.verdict
    );
    // One stall in a turn of many small segments is a stream's too; in a turn of two, an
    // answer's (header then body).
    for (small, want) in [(6, Pattern::EventStream), (0, Pattern::HeaderThenBody)] {
        let mut c = Conv::new();
        c.data(1.0, 0, 80)
            .data(1.1, 1, 45)
            .ack(41.1, 0)
            .data(41.15, 1, 900);
        for i in 0..small {
            let t = 50.0 + 2.0 * f64::from(i);
            c.data(t, 1, 45).ack(t + 0.01, 0);
        }
        let r = &analyse(&c.segs)[0];
        assert_eq!(r.stalls[0].pattern, want, "{small}: {r:#?}");
    }
}

#[test]
fn a_tls13_first_answer_behind_the_tickets_is_named() {
    let handshake = |heads: bool| {
        let mut c = Conv::new();
        let head = |c: &mut Conv, kind: u8| {
            if heads {
                c.last_mut().head = tls(kind);
            }
        };
        c.data(1.0, 0, 228);
        head(&mut c, 0x16); // ClientHello
        c.data(1.5, 1, 663);
        head(&mut c, 0x16); // ServerHello ... Finished
        c.data(2.5, 0, 80);
        head(&mut c, 0x14); // ChangeCipherSpec, Finished
        c.data(2.52, 0, 171);
        head(&mut c, 0x17); // the request
        c.data(2.7, 1, 184);
        head(&mut c, 0x17); // the session tickets
        c.ack(42.7, 0).data(42.75, 1, 129);
        head(&mut c, 0x17); // the answer, held
        analyse(&c.segs).remove(0)
    };
    let r = handshake(true);
    assert_eq!(r.stall_count, 1, "{r:#?}");
    assert_eq!(r.stalls[0].pattern, Pattern::TlsFirstAnswer);
    assert!(r.verdict[0].contains("behind the TLS 1.3 session tickets"));
    // The same segments without TLS records: an answer as a header then a body.
    assert_eq!(handshake(false).stalls[0].pattern, Pattern::HeaderThenBody);
}

#[test]
fn a_relays_hop_names_the_flow_it_relays() {
    // Captured at the relay R: its client X's requests arrive on one flow as a header and
    // a body, and R writes each piece onto its upstream flow to S as it comes; there the
    // body waits for S's delayed ACK of the header.
    let r_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let run = |body_in: u32| {
        let mut a = Conv {
            segs: Vec::new(),
            seq: [1000, 5000],
            ends: [
                (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 40000),
                (r_ip, 8080),
            ],
            ids: [100, 30_000],
        };
        a.push(0.0, 0, 0, flags::SYN, Some(1460));
        a.seq[0] += 1;
        a.push(0.01, 1, 0, flags::SYN | flags::ACK, Some(1460));
        a.seq[1] += 1;
        a.push(0.02, 0, 0, flags::ACK, None);
        let mut b = Conv {
            segs: Vec::new(),
            seq: [2000, 9000],
            ends: [
                (r_ip, 50000),
                (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)), 9000),
            ],
            ids: [200, 40_000],
        };
        b.push(0.5, 0, 0, flags::SYN, Some(1460));
        b.seq[0] += 1;
        b.push(0.51, 1, 0, flags::SYN | flags::ACK, Some(1460));
        b.seq[1] += 1;
        b.push(0.52, 0, 0, flags::ACK, None);
        let mut t = 1.0;
        for _ in 0..3 {
            a.data(t, 0, 120);
            b.data(t + 0.05, 0, 120);
            a.data(t + 0.2, 0, body_in);
            b.ack(t + 40.05, 1)
                .data(t + 40.1, 0, 48)
                .data(t + 40.3, 1, 72);
            a.data(t + 40.35, 1, 72);
            t += 50.0;
        }
        let mut all: Vec<_> = a.segs.into_iter().chain(b.segs).collect();
        all.sort_by_key(|x| x.1);
        for (i, x) in all.iter_mut().enumerate() {
            x.0 = i as u64 + 1;
        }
        analyse(&all)
    };
    let flows = run(48);
    let hop = flows
        .iter()
        .find(|f| f.stall_count > 0)
        .expect("a stalled hop");
    assert_eq!(hop.stall_count, 3, "{hop:#?}");
    assert!(hop
        .stalls
        .iter()
        .all(|s| s.pattern == Pattern::RelayHop && s.relayed_from == Some(1)));
    assert!(
        hop.verdict[0].contains("relays onto this hop"),
        "{:?}",
        hop.verdict
    );
    assert!(hop.verdict[1].contains("the relay's socket of this hop"));
    // Bytes that do not match what arrived are no relay's.
    let flows = run(50);
    let hop = flows
        .iter()
        .find(|f| f.stall_count > 0)
        .expect("a stalled hop");
    assert!(hop
        .stalls
        .iter()
        .all(|s| s.pattern != Pattern::RelayHop && s.relayed_from.is_none()));
}

/// A sender's own hold (issue 51): an answer's last piece left ~200 ms after its head, with
/// the head long acknowledged and the peer waiting, three times alike: a cork left on. A feed
/// that writes every 200 ms unasked, a piece an ACK released (Nagle's), and one such answer
/// alone are not named.
#[test]
fn a_cork_left_on_is_a_sender_hold_and_look_alikes_are_not() {
    let cork = |rounds: usize| {
        let mut c = Conv::new();
        let mut t = 1.0;
        for _ in 0..rounds {
            c.data(t, 0, 10)
                .data(t + 0.1, 1, 100)
                .ack(t + 0.2, 0)
                .data(t + 204.0, 1, 50)
                .ack(t + 204.1, 0);
            t += 300.0;
        }
        c.data(t, 0, 10);
        analyse(&c.segs).remove(0)
    };
    let r = cork(3);
    assert_eq!(r.sender_holds.len(), 1, "{r:#?}");
    assert_eq!(r.sender_holds[0].count, 3);
    assert_eq!(r.sender_holds[0].direction, "server->client");
    assert_eq!(r.stall_count, 0);
    assert!(r.verdict.iter().any(|v| v.starts_with("not Nagle:")));
    assert_eq!(r.findings[0].kind, "sender-hold");
    assert!(cork(1).sender_holds.is_empty(), "one alone is not named");
    // A feed: small writes every 200 ms, each acknowledged, nothing asked.
    let mut c = Conv::new();
    c.data(1.0, 0, 10);
    for k in 0..6 {
        let t = 2.0 + 200.0 * f64::from(k);
        c.data(t, 1, 50).ack(t + 0.1, 0);
    }
    assert!(analyse(&c.segs)[0].sender_holds.is_empty());
    // Nagle's: the piece leaves as a late ACK of the head arrives.
    let mut c = Conv::new();
    let mut t = 1.0;
    for _ in 0..3 {
        c.data(t, 0, 10)
            .data(t + 0.1, 1, 100)
            .ack(t + 200.0, 0)
            .data(t + 200.05, 1, 50)
            .ack(t + 200.2, 0);
        t += 300.0;
    }
    c.data(t, 0, 10);
    let r = &analyse(&c.segs)[0];
    assert!(r.sender_holds.is_empty(), "{r:#?}");
    assert_eq!(r.stall_count, 3);
}

/// A client on a 100 ms path that sends a small record, then its next request 250 ms later,
/// twice alike (a browser's own time: seladb/PcapPlusPlus's `many-protocols.pcap`): too soon
/// for a cork's ceiling, which waits the retransmission timeout, 200 ms beyond the round trip
/// at least. The same answers' pieces 315 ms apart are named.
#[test]
fn on_a_long_path_a_hold_shorter_than_the_timeout_is_no_cork() {
    let on_path = |gap_ms: f64| {
        let mut c = Conv::handshake(100.0, 0.05, [1460, 1460]);
        let mut t = 200.0;
        for _ in 0..3 {
            c.data(t, 0, 10)
                .data(t + 100.0, 1, 100)
                .ack(t + 100.1, 0)
                .data(t + 100.0 + gap_ms, 1, 50)
                .ack(t + 100.1 + gap_ms, 0);
            // The client was waiting for it: its next request follows at once.
            t += 100.0 + gap_ms + 30.0;
        }
        c.data(t, 0, 10);
        analyse(&c.segs).remove(0)
    };
    assert!(on_path(250.0).sender_holds.is_empty());
    let r = on_path(315.0);
    assert_eq!(r.sender_holds.len(), 1, "{r:#?}");
    assert_eq!(r.sender_holds[0].count, 3);
}
