//! Losses before the capture point, read from IPv4 identification numbers ([`IpIds`]). A
//! segment lost between its sender and the capture point never passes it: its sender's
//! retransmission later passes once, as if first sent, and the wait before it would read as
//! its sender's own time. Linux numbers each connection's packets one by one, so a number
//! skipped says that many of the sender's packets did not pass. Other systems number from one
//! counter for all their traffic, or at random: the numbers are trusted only after a run of
//! them went up by exactly one each, and any other step ends the run, as does an offload
//! packet (one number per segment its sender cut it into, which the capture does not tell:
//! [`IpIds::forget`]).
//!
//! The numbers also tell a packet the capture saw twice (a mirror port's copy, a capture on
//! two interfaces) from a retransmission: the same number and header within
//! [`COPY_WITHIN_US`], with nothing from the peer between, are one packet
//! ([`IpIds::is_copy`]). A retransmission is renumbered (Linux, most systems), or comes after
//! the peer's duplicate ACKs, or after a timer of 10 ms or more (a tail-loss probe's floor; some
//! systems send a SYN again with its number, a second later).

use crate::packet::Segment;

/// Steps of exactly the expected size before a skip is believed.
const STEADY_MIN: u32 = 3;

/// The largest skip read as packets lost (larger: not Linux's numbering).
const SKIP_MAX: u16 = 16;

/// A copy of a packet in the capture comes this soon after it (microseconds as a rule; 5 ms
/// seen in a capture of two interfaces), sooner than a tail-loss probe's 10 ms.
const COPY_WITHIN_US: u64 = 9_000;

/// One direction's numbering, as the capture point saw it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct IpIds {
    /// The number its next packet should carry.
    next: Option<u16>,
    /// Steps of the expected size in a row.
    steady: u32,
    /// When its last packet passed, µs.
    last_us: u64,
    /// Its last numbered packet (number not 0), and when it passed, µs.
    last: Option<(Header, u64)>,
}

/// What a copy of a packet repeats: its IPv4 number and TCP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    id: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    len: u32,
    window: u16,
    ts: Option<(u32, u32)>,
}

/// Packets of a sender's that did not pass the capture point before one that did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Unseen {
    /// How many.
    pub(super) packets: u16,
    /// When the sender's last packet before them passed, µs.
    pub(super) after_us: u64,
}

impl IpIds {
    /// A packet whose count of segments is not known (a large offload packet whose segments'
    /// sizes the capture does not tell): the numbering starts again.
    pub(super) fn forget(&mut self) {
        *self = IpIds {
            last: self.last,
            ..IpIds::default()
        };
    }

    /// The peer sent a packet: what this sender sends next may answer it, and is no copy.
    pub(super) fn peer_sent(&mut self) {
        self.last = None;
    }

    /// Whether `s`, passing at `us`, is a copy of this sender's last packet: the same IPv4
    /// number (not 0: some systems number no packet) and TCP header, within
    /// [`COPY_WITHIN_US`]. Otherwise it is remembered as the last.
    pub(super) fn is_copy(&mut self, s: &Segment, us: u64) -> bool {
        let Some(id) = s.ip_id.filter(|&id| id != 0) else {
            self.last = None;
            return false;
        };
        let h = Header {
            id,
            seq: s.seq,
            ack: s.ack,
            flags: s.flags,
            len: s.len,
            window: s.window,
            ts: s.ts,
        };
        if self
            .last
            .is_some_and(|(l, at)| l == h && us.saturating_sub(at) <= COPY_WITHIN_US)
        {
            return true;
        }
        self.last = Some((h, us));
        false
    }

    /// A packet numbered `id` (`None`: IPv6, unnumbered) passed at `us`: the sender's packets
    /// before it that did not (none unless the numbering was steady).
    pub(super) fn on_packet(&mut self, id: Option<u16>, us: u64) -> Unseen {
        let Some(id) = id else {
            return Unseen::default();
        };
        let mut unseen = Unseen::default();
        match self.next.map(|n| id.wrapping_sub(n)) {
            Some(0) => self.steady += 1,
            Some(skip) if skip <= SKIP_MAX && self.steady >= STEADY_MIN => {
                unseen = Unseen {
                    packets: skip,
                    after_us: self.last_us,
                };
            }
            _ => self.steady = 0,
        }
        self.next = Some(id.wrapping_add(1));
        self.last_us = us;
        unseen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ids: &[u16]) -> Vec<u16> {
        let mut n = IpIds::default();
        ids.iter()
            .enumerate()
            .map(|(i, &id)| n.on_packet(Some(id), i as u64 * 10).packets)
            .collect()
    }

    #[test]
    fn a_skip_after_a_steady_run_is_packets_unseen() {
        // Five steps of one, then one number skipped, then on.
        let got = run(&[7, 8, 9, 10, 11, 13, 14]);
        assert_eq!(got, [0, 0, 0, 0, 0, 1, 0]);
        let mut n = IpIds::default();
        for (i, id) in [7, 8, 9, 10, 11].into_iter().enumerate() {
            n.on_packet(Some(id), i as u64);
        }
        assert_eq!(
            n.on_packet(Some(14), 300),
            Unseen {
                packets: 2,
                after_us: 4
            }
        );
    }

    #[test]
    fn the_count_wraps_and_an_offload_packet_starts_it_again() {
        assert_eq!(run(&[65_533, 65_534, 65_535, 0, 2]), [0, 0, 0, 0, 1]);
        let mut n = IpIds::default();
        for (i, id) in [7, 8, 9, 10].into_iter().enumerate() {
            n.on_packet(Some(id), i as u64);
        }
        n.forget();
        // (After an offload packet, numbered 11 and cut into three: 14 is no skip.)
        for id in [14, 15, 17] {
            assert_eq!(n.on_packet(Some(id), 50).packets, 0);
        }
    }

    #[test]
    fn numbers_that_are_not_linux_s_say_nothing() {
        // A shared counter (gaps everywhere), a random one, a skip too soon, and IPv6.
        assert!(run(&[1, 5, 9, 12, 20, 22]).iter().all(|&k| k == 0));
        assert!(run(&[40_000, 123, 9_999, 31, 32]).iter().all(|&k| k == 0));
        assert_eq!(run(&[1, 2, 4]), [0, 0, 0]);
        assert_eq!(IpIds::default().on_packet(None, 0), Unseen::default());
    }

    #[test]
    fn a_copy_has_a_number_not_0_and_comes_soon_with_nothing_between() {
        let seg = |id: u16| crate::packet::Segment {
            ip_id: Some(id),
            ..crate::analysis::tests::segment_for_tests()
        };
        let mut n = IpIds::default();
        assert!(!n.is_copy(&seg(7), 0));
        assert!(n.is_copy(&seg(7), 200));
        assert!(!n.is_copy(&seg(8), 300), "a new number: a new packet");
        assert!(
            !n.is_copy(&seg(8), 300 + COPY_WITHIN_US + 1),
            "too late for a copy"
        );
        // Unnumbered packets (0: some systems number none) are never copies.
        assert!(!n.is_copy(&seg(0), 400_000));
        assert!(!n.is_copy(&seg(0), 400_001));
        // Nothing from the peer between: a packet after one of the peer's is no copy.
        assert!(!n.is_copy(&seg(11), 450_000));
        n.peer_sent();
        assert!(!n.is_copy(&seg(11), 450_001));
        // An offload packet forgets the numbering, not the last packet.
        assert!(!n.is_copy(&seg(9), 500_000));
        n.forget();
        assert!(n.is_copy(&seg(9), 500_010));
    }
}
