//! Candidate collection ([`Collector`]): what might be a stall or a delayed ACK, kept until
//! the round trips are known well enough to judge it (`judge`).
//!
//! - A **delayed-ACK candidate**: a pure ACK that came [`DELAYED_ACK_MIN_US`] or more after the
//!   data it acknowledged, beyond the acker's side of the round trip known so far.
//! - A **release**: a pure ACK that acknowledged everything its peer had sent, which Nagle
//!   waits for; it lasts until the peer's next data segment, or until the acker sends data
//!   (then the peer's next segment answers that data).
//! - A **stall candidate**: a write that was not the first of its turn and left soon after a
//!   release that came late. The round trips only shrink as faster ACKs are seen, so an ACK's
//!   delay only grows and the slack for the release only shrinks: what is not kept here could
//!   never be judged a stall later.

use super::direction::Direction;
use super::output::At;
use super::sequence::{Acked, Sent, Sequence};
use crate::packet::Segment;
use crate::rule::{self, DELAYED_ACK_MIN_US};

/// A pure ACK from the peer that covered everything the sender had sent.
#[derive(Clone, Copy)]
struct Release {
    us: u64,
    frame: u64,
    /// From the newest data it acknowledged to it.
    raw_delay_us: u64,
    zero_window: bool,
    loss_recovery: bool,
}

/// A sender's last data segment.
#[derive(Clone, Copy)]
struct LastWrite {
    us: u64,
    frame: u64,
    /// Payload bytes.
    len: u32,
    /// It opened its turn (the peer sent data last).
    first_of_turn: bool,
}

/// A write that followed an ACK; judged once the round trips are known well.
pub(super) struct Candidate {
    /// Sending direction.
    pub(super) sender: Direction,
    pub(super) previous: At,
    pub(super) ack: At,
    pub(super) held: At,
    pub(super) held_len: u32,
    pub(super) held_offset: u64,
    /// TCP option bytes of the held segment.
    pub(super) options: u32,
    /// From the newest data the ACK acknowledged to the ACK, µs.
    pub(super) raw_ack_delay_us: u64,
    /// From the ACK to the held write, µs.
    pub(super) release_gap_us: u64,
    pub(super) zero_window: bool,
    pub(super) loss_recovery: bool,
    /// Payload of the sender's previous write.
    pub(super) prev_len: u32,
    /// The previous write opened its turn.
    pub(super) prev_first_of_turn: bool,
}

/// A pure ACK that may have been delayed.
pub(super) struct DelayedCandidate {
    pub(super) acker: Direction,
    pub(super) ack: At,
    /// The newest data segment it acknowledged.
    pub(super) data: At,
    /// From that segment to the ACK, µs.
    pub(super) raw_us: u64,
}

/// One flow's candidates, and what it takes to find them (per sending direction).
#[derive(Default)]
pub(super) struct Collector {
    last: [Option<LastWrite>; 2],
    release: [Option<Release>; 2],
    pub(super) pending: Vec<Candidate>,
    pub(super) pending_delayed: Vec<DelayedCandidate>,
}

impl Collector {
    /// Candidates waiting to be judged.
    pub(super) fn len(&self) -> usize {
        self.pending.len() + self.pending_delayed.len()
    }

    /// An ACK sent by `acker` that acknowledged `acked`: a delayed-ACK candidate if it was
    /// slow, a release if it acknowledged everything and was pure.
    #[allow(clippy::too_many_arguments)] // one segment's facts, as the flow has them
    pub(super) fn on_ack(
        &mut self,
        acker: Direction,
        acked: &Acked,
        seq: &[Sequence; 2],
        s: &Segment,
        us: u64,
        frame: u64,
        pure: bool,
    ) {
        let o = acker.peer();
        let raw = acked.raw_us;
        if !acked.retransmitted {
            // `acknowledge` has just learned this side of the round trip from this ACK.
            let base = seq[o].base_us.unwrap_or(raw);
            if pure && raw.saturating_sub(base) >= DELAYED_ACK_MIN_US {
                self.pending_delayed.push(DelayedCandidate {
                    acker,
                    ack: At::new(frame, us),
                    data: At::new(acked.newest.frame, acked.newest.us),
                    raw_us: raw,
                });
            }
        }
        if pure && seq[o].all_acked() {
            self.release[o] = Some(Release {
                us,
                frame,
                raw_delay_us: raw,
                zero_window: s.window == 0,
                loss_recovery: acked.retransmitted || s.sack || seq[acker].sacked,
            });
        }
    }

    /// A data segment from `sender` (`sent`: what sequence tracking made of it; `new_turn`:
    /// the peer sent data last): a stall candidate if it may have been held for a release.
    #[allow(clippy::too_many_arguments)] // one segment's facts, as the flow has them
    pub(super) fn on_data(
        &mut self,
        sender: Direction,
        sent: &Sent,
        new_turn: bool,
        seq: &[Sequence; 2],
        s: &Segment,
        us: u64,
        frame: u64,
    ) {
        if let (false, Some(prev), Some(rel)) =
            (sent.retransmit, self.last[sender], self.release[sender])
        {
            let peer_side = seq[sender].base_us.unwrap_or(0);
            let own_side = seq[sender.peer()].base_us.unwrap_or(0);
            let gap = us.saturating_sub(rel.us);
            // Keep what could still be a stall once the round trips are known better (they
            // only shrink, so the ACK delay only grows and the slack only shrinks).
            if rel.us >= prev.us
                && !new_turn
                && rel.raw_delay_us.saturating_sub(peer_side) >= DELAYED_ACK_MIN_US
                && gap <= rule::release_slack_us(own_side)
            {
                self.pending.push(Candidate {
                    sender,
                    previous: At::new(prev.frame, prev.us),
                    ack: At::new(rel.frame, rel.us),
                    held: At::new(frame, us),
                    held_len: s.len,
                    held_offset: u64::from(s.seq.wrapping_sub(sent.base_seq)),
                    options: u32::from(s.opt_len),
                    raw_ack_delay_us: rel.raw_delay_us,
                    release_gap_us: gap,
                    zero_window: rel.zero_window,
                    loss_recovery: rel.loss_recovery,
                    prev_len: prev.len,
                    prev_first_of_turn: prev.first_of_turn,
                });
            }
        }
        self.last[sender] = Some(LastWrite {
            us,
            frame,
            len: s.len,
            first_of_turn: new_turn,
        });
        self.release[sender] = None;
    }

    /// `d`'s peer sent data: `d`'s next segment answers it, so no release is pending for `d`.
    pub(super) fn answered(&mut self, d: Direction) {
        self.release[d] = None;
    }
}
