//! The round trip as the capture point sees it ([`Paths`]): each side's part, from its data
//! passing the capture point to the receiver's ACK passing it, as the budget splits a wait by.

use super::super::direction::Direction;
use super::super::sequence::{self, Sequence};

/// The round trip as the capture point sees it.
#[derive(Debug, Clone, Copy)]
pub(in crate::analysis) struct Paths {
    /// Per sender: from its data passing the capture point to its receiver's ACK passing it
    /// (the receiver's side of the round trip, jitter allowed), once measured.
    pub(super) side_us: [Option<u64>; 2],
    /// The same without the jitter allowed: the least it was seen to take.
    pub(super) base_us: [Option<u64>; 2],
}

impl Paths {
    pub(in crate::analysis) fn of(seq: &[Sequence; 2]) -> Paths {
        let side = |d: Direction| {
            seq[d]
                .base_us
                .map(|_| sequence::receiver_side_us(seq, d) + seq[d].spread_us)
        };
        let base = |d: Direction| seq[d].base_us.map(|_| sequence::receiver_side_us(seq, d));
        Paths {
            side_us: [side(Direction::Client), side(Direction::Server)],
            base_us: [base(Direction::Client), base(Direction::Server)],
        }
    }

    pub(super) fn round_trip_us(&self) -> Option<u64> {
        Some(self.side_us[0]? + self.side_us[1]?)
    }

    /// Whether the capture point is nearer the receiver of `d`'s data than its sender: the
    /// way from there to `d` and back is at least half the round trip.
    pub(super) fn near_receiver(&self, d: Direction) -> bool {
        self.side_us[d.peer()]
            .zip(self.round_trip_us())
            .is_some_and(|(side, rt)| side >= rt / 2)
    }
}
