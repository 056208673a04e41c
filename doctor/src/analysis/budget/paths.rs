//! The round trip as the capture point sees it ([`Paths`]): each side's part, from its data
//! passing the capture point to the receiver's ACK passing it, as the budget splits a wait by.

use super::super::direction::Direction;
use super::super::sequence::{self, Sequence};

/// How much later than its way an ACK may come and still be the path's (its jitter), not a
/// receiver's timer, µs.
pub(super) const JITTER_US: u64 = 1_000;

/// How much later than the ACK's way to it (and a quarter of that) a sender may send and
/// still have been waiting for the ACK, µs: it sends as the ACK comes, the scheduler
/// willing.
pub(super) const SLACK_US: u64 = 2_000;

/// The round trip as the capture point sees it.
#[derive(Debug, Clone, Copy)]
pub(in crate::analysis) struct Paths {
    /// Per sender: from its data passing the capture point to its receiver's ACK passing it
    /// (the receiver's side of the round trip, jitter allowed), once measured.
    pub(super) side_us: [Option<u64>; 2],
    /// The same without the jitter allowed: the least it was seen to take.
    pub(super) base_us: [Option<u64>; 2],
    /// Per sender: the far end's side, where a middlebox acknowledges its data for it.
    pub(super) far_us: [Option<u64>; 2],
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
            far_us: [
                sequence::far_side_us(seq, Direction::Client),
                sequence::far_side_us(seq, Direction::Server),
            ],
        }
    }

    /// The way from the capture point to the receiver of `d`'s data and back, as an answer
    /// to that data waits for it: the far end's where a middlebox acknowledges the data
    /// ([`sequence::far_side_us`]; its ACKs clock the sender, not the far end's answers).
    pub(super) fn answer_way_us(&self, d: Direction) -> Option<u64> {
        self.far_us[d].or(self.side_us[d])
    }

    pub(super) fn round_trip_us(&self) -> Option<u64> {
        Some(self.side_us[0]? + self.side_us[1]?)
    }

    /// The round trip an answer waits for: to the far end where a middlebox acknowledges for
    /// it ([`Paths::answer_way_us`]), as a handshake does.
    pub(super) fn answer_round_trip_us(&self) -> Option<u64> {
        Some(self.answer_way_us(Direction::Client)? + self.answer_way_us(Direction::Server)?)
    }

    /// Whether `d`'s data at `us` came sooner after the peer's ACK at `ack_us` than that ACK
    /// could have released it (its way to the sender and the data's back, less a quarter and
    /// the scheduler's `slack_us`): it was on its way already, and the ACK released none of
    /// the wait. (At the sender's end that way is nothing: never.)
    pub(super) fn too_soon(&self, us: u64, ack_us: u64, d: Direction, slack_us: u64) -> bool {
        self.side_us[d.peer()]
            .is_some_and(|side| us < ack_us + (side - side / 4).saturating_sub(slack_us))
    }

    /// Whether the capture point is nearer the receiver of `d`'s data than its sender: the
    /// way from there to `d` and back is at least half the round trip.
    pub(super) fn near_receiver(&self, d: Direction) -> bool {
        self.side_us[d.peer()]
            .zip(self.round_trip_us())
            .is_some_and(|(side, rt)| side >= rt / 2)
    }
}
