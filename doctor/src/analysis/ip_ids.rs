//! Losses before the capture point, read from IPv4 identification numbers ([`IpIds`]). A
//! segment lost between its sender and the capture point never passes it: its sender's
//! retransmission later passes once, as if first sent, and the wait before it would read as
//! its sender's own time. Linux numbers each connection's packets one by one, so a number
//! skipped says that many of the sender's packets did not pass. Other systems number from one
//! counter for all their traffic, or at random: the numbers are trusted only after a run of
//! them went up by exactly one each, and any other step ends the run, as does an offload
//! packet (one number per segment its sender cut it into, which the capture does not tell:
//! [`IpIds::forget`]).

/// Steps of exactly the expected size before a skip is believed.
const STEADY_MIN: u32 = 3;

/// The largest skip read as packets lost (larger: not Linux's numbering).
const SKIP_MAX: u16 = 16;

/// One direction's numbering, as the capture point saw it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct IpIds {
    /// The number its next packet should carry.
    next: Option<u16>,
    /// Steps of the expected size in a row.
    steady: u32,
    /// When its last packet passed, µs.
    last_us: u64,
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
        *self = IpIds::default();
    }

    /// Whether a packet numbered `id` was sent before the last one that passed, while the
    /// numbering was steady: a packet the path reordered, first sent, not sent again (a
    /// retransmission is numbered anew).
    pub(super) fn is_late(&self, id: Option<u16>) -> bool {
        let behind = |next: u16, id: u16| (2..=SKIP_MAX + 1).contains(&next.wrapping_sub(id));
        self.steady >= STEADY_MIN && id.zip(self.next).is_some_and(|(id, n)| behind(n, id))
    }

    /// A packet numbered `id` (`None`: IPv6, unnumbered) passed at `us`: the sender's packets
    /// before it that did not (none unless the numbering was steady). A late packet
    /// ([`IpIds::is_late`]) changes nothing.
    pub(super) fn on_packet(&mut self, id: Option<u16>, us: u64) -> Unseen {
        let Some(id) = id.filter(|_| !self.is_late(id)) else {
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

    /// Two packets the path reordered: the later numbers pass first (a skip: unseen so far),
    /// then the earlier ones, late, which change nothing and are told as late.
    #[test]
    fn packets_behind_the_numbering_are_late() {
        let mut n = IpIds::default();
        for (i, id) in [7, 8, 9, 10].into_iter().enumerate() {
            n.on_packet(Some(id), i as u64);
        }
        assert_eq!(n.on_packet(Some(13), 10).packets, 2);
        assert!(n.is_late(Some(11)) && n.is_late(Some(12)));
        assert!(!n.is_late(Some(13)), "the last one passed");
        assert!(!n.is_late(Some(14)) && !n.is_late(None));
        assert_eq!(n.on_packet(Some(11), 11).packets, 0);
        assert_eq!(n.on_packet(Some(14), 12).packets, 0, "on from 13");
    }
}
