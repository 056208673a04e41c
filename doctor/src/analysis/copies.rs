//! Packets the capture saw twice ([`Copies`]): a mirror port's copy, or one packet captured on
//! two interfaces (VLAN and bridge, a tunnel and the link under it), which would read as a
//! retransmission and, for a data segment, as loss recovery. A copy carries its packet's
//! IPv4 number and TCP header; Linux numbers a retransmission anew, and any stack sends one
//! only after the peer's duplicate ACKs or a timer. So a packet is a copy of one of its
//! sender's last [`KEPT`] packets when it has the same number (not 0: some systems number
//! no packet) and header, within [`COPY_WITHIN_US`], with no duplicate ACK from the peer
//! since; or, seen with another TTL (before and after a router), within [`ACROSS_A_HOP_US`].
//! A packet with no number (IPv6, or 0) is told by its timestamps instead, when it
//! carries data (or a SYN or FIN) and the timestamps option, and the peer was seen (a
//! capture of one way would miss the duplicate ACKs that tell a fast retransmission): a
//! stack stamps a segment sent again with its clock's time then (a tick of a millisecond on
//! today's stacks; 10 ms on some older ones, whose timers are longer still), so a segment
//! with the same header, the same stamps, within the same bound, is the same packet. The
//! copy of an unnumbered pure ACK is not told, but forgets nothing: a real duplicate ACK
//! carries SACK blocks. Not told: an unnumbered packet without timestamps; a retransmission
//! in the same tick whose duplicate ACKs the capture dropped; a stack that keeps a segment's
//! number when it sends it again on a timer that short (Windows keeps a SYN's, a second
//! later).

use crate::packet::{flags, Segment};

/// A copy of a packet in the capture comes this soon after it (microseconds as a rule; the
/// two interfaces of one capture may be a few milliseconds apart).
const COPY_WITHIN_US: u64 = 9_000;

/// A numbered packet seen again with another TTL (or hop limit) comes this soon after it: one
/// packet captured before and after a router (a capture of two of its interfaces), which
/// sends it on a few to tens of milliseconds later. A retransmission is numbered anew, and
/// leaves its sender with the TTL its first did.
const ACROSS_A_HOP_US: u64 = 100_000;

/// A sender's packets looked among (the copies of a burst interleave with its packets).
const KEPT: usize = 8;

/// A pure ACK as its copy repeats it: ACK number, window, stamps.
type AckPrint = (u32, u16, (u32, u32));

/// One sender's last packets, and the peer's last ACK of them.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Copies {
    /// Fingerprints of the packets' number and header, when each passed, µs, and its TTL;
    /// the newest at `next - 1`.
    kept: [(u64, u64, u8); KEPT],
    next: usize,
    /// The peer's last acknowledgement number.
    peer_ack: Option<u32>,
    /// The peer's last pure ACK without a number, as (ACK number, window, stamps), and when
    /// it passed, µs: the same again soon may be its copy, not a duplicate ACK.
    peer_unnumbered: Option<(AckPrint, u64)>,
}

impl Copies {
    /// Whether `s`, passing at `us`, is a copy of one of this sender's last packets; it is
    /// kept otherwise.
    pub(super) fn is_copy(&mut self, s: &Segment, us: u64) -> bool {
        let id = match number(s) {
            Some(id) => id,
            // Unnumbered: told by the timestamps, for what a retransmission could be.
            // Only once the peer was seen: a capture of one way (a mirror port's) misses
            // the duplicate ACKs that tell a fast retransmission in the same tick.
            None if s.ts.is_some()
                && self.peer_ack.is_some()
                && (s.len > 0 || s.flags & (flags::SYN | flags::FIN) != 0) =>
            {
                0
            }
            None => return false,
        };
        let print = fingerprint(id, s);
        let fresh = |&(_, at, ttl): &(u64, u64, u8)| {
            let age = us.saturating_sub(at);
            at != 0
                && (age <= COPY_WITHIN_US || (id != 0 && ttl != s.ttl && age <= ACROSS_A_HOP_US))
        };
        if self.kept.iter().any(|k| fresh(k) && k.0 == print) {
            return true;
        }
        // (`us` may be 0, the capture's first frame: kept as 1, a microsecond on.)
        self.kept[self.next] = (print, us.max(1), s.ttl);
        self.next = (self.next + 1) % KEPT;
        false
    }

    /// The peer sent `s` (no copy): a duplicate ACK says it misses data, which may come again.
    /// An unnumbered pure ACK (IPv6) that repeats the peer's last one, stamps and window
    /// alike, within [`COPY_WITHIN_US`] and without SACK blocks, may be its copy: it forgets
    /// nothing (a real duplicate ACK carries SACK blocks wherever SACK is on, as it is
    /// nearly everywhere).
    pub(super) fn peer_sent(&mut self, s: &Segment, us: u64) {
        if s.flags & flags::ACK == 0 {
            return;
        }
        let pure = s.len == 0 && s.flags & (flags::SYN | flags::FIN | flags::RST) == 0;
        let unnumbered = pure && number(s).is_none();
        let print = s.ts.filter(|_| unnumbered).map(|ts| (s.ack, s.window, ts));
        let maybe_copy = !s.sack
            && print.is_some_and(|p| {
                self.peer_unnumbered
                    .is_some_and(|(q, at)| q == p && us.saturating_sub(at) <= COPY_WITHIN_US)
            });
        if pure && !maybe_copy && (self.peer_ack == Some(s.ack) || s.sack) {
            self.kept = Default::default();
        }
        if let Some(p) = print {
            self.peer_unnumbered = Some((p, us));
        }
        self.peer_ack = Some(s.ack);
    }
}

/// A packet's IPv4 number, if it has one (IPv6 has none; 0 is none: some systems number no
/// packet).
fn number(s: &Segment) -> Option<u16> {
    s.ip_id.filter(|&id| id != 0)
}

/// The number and header of a packet, mixed into 64 bits (FNV-1a).
fn fingerprint(id: u16, s: &Segment) -> u64 {
    let (tsval, tsecr) = s.ts.unwrap_or_default();
    let words = [
        u64::from(id),
        u64::from(s.seq),
        u64::from(s.ack),
        u64::from(s.flags) << 32 | u64::from(s.window),
        u64::from(s.len),
        u64::from(tsval) << 32 | u64::from(tsecr),
        u64::from(s.ts.is_some()),
    ];
    words.iter().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ w).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(id: u16, seq: u32) -> Segment {
        Segment {
            ip_id: Some(id),
            seq,
            ..crate::analysis::tests::segment_for_tests()
        }
    }

    #[test]
    fn a_copy_has_a_number_not_0_and_comes_soon() {
        let mut c = Copies::default();
        assert!(!c.is_copy(&seg(7, 1), 0));
        assert!(c.is_copy(&seg(7, 1), 200));
        assert!(!c.is_copy(&seg(8, 101), 300), "a new number: a new packet");
        assert!(!c.is_copy(&seg(9, 201), 400));
        assert!(
            !c.is_copy(&seg(9, 201), 400 + COPY_WITHIN_US + 1),
            "too late for a copy"
        );
        // Unnumbered packets (0: some systems number none) without timestamps are never
        // copies.
        assert!(!c.is_copy(&seg(0, 301), 400_000));
        assert!(!c.is_copy(&seg(0, 301), 400_001));
    }

    /// A capture of two interfaces 5 ms apart: a burst's copies come after the whole burst,
    /// and after the peer's (advancing) ACKs of it.
    #[test]
    fn a_burst_s_copies_come_after_it_and_the_peer_s_acks() {
        let mut c = Copies::default();
        for i in 0..4u16 {
            assert!(!c.is_copy(&seg(10 + i, 1 + u32::from(i) * 100), 1_000 + u64::from(i)));
        }
        let mut ack = seg(500, 1);
        ack.len = 0;
        ack.ack = 201;
        c.peer_sent(&ack, 1_500);
        ack.ack = 401;
        c.peer_sent(&ack, 1_500);
        for i in 0..4u16 {
            assert!(c.is_copy(&seg(10 + i, 1 + u32::from(i) * 100), 6_000 + u64::from(i)));
        }
    }

    /// After the peer's duplicate ACK, the same packet again is its retransmission.
    #[test]
    fn after_a_duplicate_ack_the_same_packet_is_sent_again() {
        let mut c = Copies::default();
        assert!(!c.is_copy(&seg(10, 1), 1_000));
        assert!(!c.is_copy(&seg(11, 101), 1_001));
        let mut ack = seg(500, 1);
        ack.len = 0;
        ack.ack = 1;
        c.peer_sent(&ack, 1_500);
        c.peer_sent(&ack, 1_500);
        assert!(!c.is_copy(&seg(10, 1), 2_000));
    }

    /// IPv6 (no number): a data segment with the same header and stamps soon after is a
    /// copy; with other stamps (sent again a tick or more later) it is not; without
    /// timestamps, or a pure ACK, nothing is told.
    #[test]
    fn an_unnumbered_copy_is_told_by_its_timestamps() {
        let v6 = |seq: u32, ts: Option<(u32, u32)>| Segment {
            ip_id: None,
            seq,
            ts,
            ..crate::analysis::tests::segment_for_tests()
        };
        let mut c = Copies::default();
        assert!(!c.is_copy(&v6(1, Some((500, 9))), 1_000));
        assert!(
            !c.is_copy(&v6(1, Some((500, 9))), 1_050),
            "the peer never seen (a capture of one way): not told"
        );
        let mut peer = v6(1, Some((9, 400)));
        peer.len = 0;
        c.peer_sent(&peer, 1_060);
        assert!(!c.is_copy(&v6(1, Some((500, 9))), 1_070));
        assert!(c.is_copy(&v6(1, Some((500, 9))), 1_100), "a copy");
        assert!(
            !c.is_copy(&v6(1, Some((508, 9))), 8_000),
            "sent again 7 ms later: new stamps"
        );
        assert!(!c.is_copy(&v6(101, None), 9_000));
        assert!(!c.is_copy(&v6(101, None), 9_010), "no stamps: not told");
        let mut ack = v6(201, Some((600, 9)));
        ack.len = 0;
        assert!(!c.is_copy(&ack, 10_000));
        assert!(
            !c.is_copy(&ack, 10_010),
            "a pure ACK without a number: not told"
        );
    }

    /// The copy of the peer's unnumbered pure ACK (the same stamps and window, soon, no SACK)
    /// is no duplicate ACK: the sender's packets are still kept, and their copies told. A
    /// duplicate ACK with SACK blocks forgets them.
    #[test]
    fn an_unnumbered_ack_s_copy_forgets_nothing() {
        let v6 = |seq: u32, len: u32, ts: (u32, u32)| Segment {
            ip_id: None,
            seq,
            len,
            ts: Some(ts),
            ..crate::analysis::tests::segment_for_tests()
        };
        let mut c = Copies::default();
        let mut first = v6(1, 0, (7, 400));
        first.ack = 0;
        c.peer_sent(&first, 500);
        assert!(!c.is_copy(&v6(1, 100, (500, 7)), 1_000));
        let ack = v6(1, 0, (8, 500));
        c.peer_sent(&ack, 1_200);
        c.peer_sent(&ack, 1_250);
        assert!(c.is_copy(&v6(1, 100, (500, 7)), 5_000), "still kept");
        let mut dup = v6(1, 0, (9, 500));
        dup.sack = true;
        c.peer_sent(&dup, 5_100);
        assert!(!c.is_copy(&v6(1, 100, (500, 7)), 5_200), "forgotten");
    }

    /// One packet captured before and after a router: the same number and header, its TTL
    /// one less, 30 ms later (gopacket's `cip.pcap`: 68 such copies read as fast
    /// retransmissions). With the same TTL that late it is not told.
    #[test]
    fn a_packet_seen_across_a_router_is_a_copy_later() {
        let mut c = Copies::default();
        assert!(!c.is_copy(&seg(7, 1), 1_000));
        let mut routed = seg(7, 1);
        routed.ttl -= 1;
        assert!(c.is_copy(&routed, 31_000), "one hop on, 30 ms later");
        assert!(!c.is_copy(&seg(8, 101), 40_000));
        assert!(!c.is_copy(&seg(8, 101), 70_000), "the same TTL: not told");
        assert!(!c.is_copy(&seg(9, 201), 80_000));
        let mut late = seg(9, 201);
        late.ttl -= 1;
        assert!(!c.is_copy(&late, 80_000 + ACROSS_A_HOP_US + 1), "too late");
    }
}
