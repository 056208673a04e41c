//! Losses before the capture point, read from IPv4 identification numbers ([`IpIds`]). A
//! segment lost between its sender and the capture point never passes it: its sender's
//! retransmission later passes once, as if first sent, and the wait before it would read as
//! its sender's own time. Linux numbers each connection's packets one by one (a
//! segmentation-offload packet takes one number per segment it carries), so a number skipped
//! says that many of the sender's packets did not pass. Other systems number from one
//! counter for all their traffic, or at random: the numbers are trusted only after a run of
//! them went up by exactly one packet each, and any other step ends the run.

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
    /// A packet numbered `id` (`None`: IPv6, unnumbered) carrying `segments` segments passed
    /// at `us`: the sender's packets before it that did not (none unless the numbering was
    /// steady).
    pub(super) fn on_packet(&mut self, id: Option<u16>, segments: u16, us: u64) -> Unseen {
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
        self.next = Some(id.wrapping_add(segments.max(1)));
        self.last_us = us;
        unseen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ids: &[(u16, u16)]) -> Vec<u16> {
        let mut n = IpIds::default();
        ids.iter()
            .enumerate()
            .map(|(i, &(id, segs))| n.on_packet(Some(id), segs, i as u64 * 10).packets)
            .collect()
    }

    #[test]
    fn a_skip_after_a_steady_run_is_packets_unseen() {
        // Five steps of one, then one number skipped, then on.
        let got = run(&[(7, 1), (8, 1), (9, 1), (10, 1), (11, 1), (13, 1), (14, 1)]);
        assert_eq!(got, [0, 0, 0, 0, 0, 1, 0]);
        let mut n = IpIds::default();
        for (i, id) in [7, 8, 9, 10, 11].into_iter().enumerate() {
            n.on_packet(Some(id), 1, i as u64);
        }
        assert_eq!(
            n.on_packet(Some(14), 1, 300),
            Unseen {
                packets: 2,
                after_us: 4
            }
        );
    }

    #[test]
    fn offload_packets_take_a_number_per_segment_and_the_count_wraps() {
        let got = run(&[
            (65_530, 1),
            (65_531, 3),
            (65_534, 1),
            (65_535, 1),
            (0, 2),
            (2, 1),
            (4, 1),
        ]);
        assert_eq!(got, [0, 0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn numbers_that_are_not_linux_s_say_nothing() {
        // A shared counter (gaps everywhere), a random one, a skip too soon, and IPv6.
        assert!(run(&[(1, 1), (5, 1), (9, 1), (12, 1), (20, 1), (22, 1)])
            .iter()
            .all(|&k| k == 0));
        assert!(run(&[(40_000, 1), (123, 1), (9_999, 1), (31, 1), (32, 1)])
            .iter()
            .all(|&k| k == 0));
        assert_eq!(run(&[(1, 1), (2, 1), (4, 1)]), [0, 0, 0]);
        assert_eq!(IpIds::default().on_packet(None, 1, 0), Unseen::default());
    }
}
