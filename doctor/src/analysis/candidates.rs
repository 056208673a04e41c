//! Candidate collection ([`Collector`]): what might be a stall or a delayed ACK, kept until
//! the round trips are known well enough to judge it (`judge`).
//!
//! - A **delayed-ACK candidate**: a pure ACK that came [`DELAYED_ACK_MIN_US`] or more after the
//!   data it acknowledged, beyond the acker's side of the round trip known so far.
//! - A **release**: a pure ACK that acknowledged everything its peer had sent, which Nagle
//!   waits for; it lasts until the peer's next data segment, or until the acker sends data
//!   (then the peer's next segment answers that data). So a late ACK that rides on the
//!   acker's own data releases nothing the doctor counts: when both sides hold a write for the
//!   other (two speakers that each sent first, as BGP peers do), the peer's next segment may
//!   be a message it queued before or its answer to that data (a control channel whose
//!   acknowledgements are messages), and both leave right after it, acknowledging it: a
//!   capture cannot tell them apart, and this class of true stalls is given up (issue 54).
//! - A **stall candidate**: a write that left soon after a release that came late, and that
//!   was not written in answer to the peer: not the first of its turn, or the peer's data that
//!   opened the turn came before the release by more than jitter (a key exchange: both sides
//!   send their first message at once, and the second waits on the first's ACK). The round
//!   trips only shrink as faster ACKs are seen, so an ACK's delay only grows; what is not kept
//!   here (with room for the jitter measured later) could never be judged a stall later.

use super::direction::Direction;
use super::output::At;
use super::sequence::{self, Acked, Sent, Sequence};
use crate::packet::{flags, Head, Segment};
use crate::rule::{self, DELAYED_ACK_MIN_US};

/// Turns with a candidate whose shape is kept until judged.
const STREAM_TURNS_KEPT: usize = 64;

/// A pure ACK from the peer that covered everything the sender had sent.
#[derive(Clone, Copy)]
struct Release {
    us: u64,
    frame: u64,
    /// From the newest data it acknowledged to it.
    raw_delay_us: u64,
    zero_window: bool,
    loss_recovery: bool,
    /// The acker sent data since, ending at this sequence number: the sender's next segment
    /// answers that data, unless it was sent before that data reached it (it does not
    /// acknowledge it).
    answered: Option<u32>,
}

/// Whether `s` acknowledges the peer's bytes up to `end`.
fn acks_end(s: &Segment, end: u32) -> bool {
    s.flags & flags::ACK != 0 && sequence::seq_le(end, s.ack)
}

/// A sender's last data segment.
#[derive(Clone, Copy)]
struct LastWrite {
    us: u64,
    frame: u64,
    /// Payload bytes.
    len: u32,
    /// Sequence number after its last byte.
    end: u32,
    /// It opened its turn (the peer sent data last).
    first_of_turn: bool,
    /// Its payload's first bytes.
    head: Head,
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
    /// The sender had been seen without Nagle's algorithm by then (a program may turn it
    /// off part-way, as OpenSSH does when a session turns interactive).
    pub(super) nagle_off: bool,
    /// Payload of the sender's previous write.
    pub(super) prev_len: u32,
    /// The previous write opened its turn.
    pub(super) prev_first_of_turn: bool,
    /// The sender's turn it was written in (1 for the sender's first), counted from the
    /// flow's start: a turn is a run of one side's data segments.
    pub(super) turn: u64,
    /// The first bytes of the previous and of the held write's payloads, and of the sender's
    /// first data segment in the flow (a TLS record's header tells a TLS 1.3 answer).
    pub(super) prev_head: Head,
    pub(super) held_head: Head,
    pub(super) first_head: Head,
    /// The flow whose data the sender relayed into the previous and the held write, when
    /// the capture holds it (set by the analysis of the whole capture).
    pub(super) relayed_from: Option<usize>,
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
    /// Each sender's data segment before its last.
    before_last: [Option<LastWrite>; 2],
    release: [Option<Release>; 2],
    /// Per sender: its turns so far, and its first data segment's first bytes.
    turns: [u64; 2],
    first_head: [Option<Head>; 2],
    made: u64,
    /// Per sender: small data segments in its current turn, and whether a candidate was
    /// made in it.
    turn_small: [u32; 2],
    turn_has_candidate: [bool; 2],
    /// Small data segments of the turns that held a candidate, by (sender, turn); at most
    /// [`STREAM_TURNS_KEPT`] (the latest).
    pub(super) stalled_turns: std::collections::VecDeque<(Direction, u64, u32)>,
    pub(super) pending: Vec<Candidate>,
    pub(super) pending_delayed: Vec<DelayedCandidate>,
    /// Per acker: when its last ACK of new data passed.
    last_ack_us: [Option<u64>; 2],
}

impl Collector {
    /// Stall candidates made so far, and the newest one (still pending: candidates are
    /// judged only after an ACK, never between a data segment and the next).
    pub(super) fn made(&self) -> u64 {
        self.made
    }

    pub(super) fn newest_mut(&mut self) -> Option<&mut Candidate> {
        self.pending.last_mut()
    }

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
        // A receiver's timer sends its ACK a delay after the data came, and its ACK before
        // (of older data) left before that data came: a delayed ACK passes a delay or more
        // after the acker's last ACK. One sooner was sent as data came: ACKs paced by a path
        // whose queue held the data, however late after it.
        let paced = self.last_ack_us[acker]
            .replace(us)
            .is_some_and(|last| us.saturating_sub(last) < DELAYED_ACK_MIN_US);
        if !acked.retransmitted && !paced {
            // Kept if it is late at all: its delay beyond the round trip is only known once
            // the flow's fastest ACKs are (they may come later, as in a capture begun
            // mid-connection whose first ACKs were all delayed).
            if pure && raw >= DELAYED_ACK_MIN_US {
                self.pending_delayed.push(DelayedCandidate {
                    acker,
                    ack: At::new(frame, us),
                    data: At::new(acked.newest.frame, acked.newest.us),
                    raw_us: raw,
                });
            }
        }
        if !seq[o].all_acked() {
            return;
        }
        let release = Release {
            us,
            frame,
            raw_delay_us: raw,
            zero_window: s.window == 0,
            loss_recovery: acked.retransmitted || s.sack || seq[acker].sacked,
            answered: None,
        };
        if pure {
            self.release[o] = Some(release);
        }
    }

    /// A data segment from `sender` (`sent`: what sequence tracking made of it; `new_turn`:
    /// the peer sent data last): a stall candidate if it may have been held for a release.
    /// The peer's next segment answers it, so no release is pending for the peer (see the
    /// module doc for a late ACK riding on this one).
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
        let peer = sender.peer();
        let mut held = false;
        if new_turn {
            self.turns[sender] += 1;
            self.turn_small[sender] = 0;
            self.turn_has_candidate[sender] = false;
        }
        if s.len < rule::MIN_FULL_SEGMENT {
            self.turn_small[sender] += 1;
        }
        let first_head = *self.first_head[sender].get_or_insert(s.head);
        // A release the peer's data came after is still one if that data had not reached
        // the sender.
        let release = self.release[sender].filter(|r| r.answered.is_none_or(|e| !acks_end(s, e)));
        if let (false, Some(prev), Some(rel)) = (sent.retransmit, self.last[sender], release) {
            let own = &seq[peer];
            let own_side = own.base_us.unwrap_or(0);
            let gap = us.saturating_sub(rel.us);
            // The newest peer data this segment acknowledges (what had reached the sender).
            let heard = [self.last[peer], self.before_last[peer]]
                .into_iter()
                .flatten()
                .find(|w| w.frame != rel.frame && acks_end(s, w.end));
            let written_before =
                rule::written_before_release(new_turn, heard.map(|w| w.us), rel.us);
            // Keep what could still be a stall once the round trips are known better (the
            // ACK delay only grows; the jitter may grow, so the latest release is taken wide).
            let (_, latest) =
                rule::release_window_us(own_side, own.spread_us.max(2_000 + own_side / 2));
            if rel.us >= prev.us
                && written_before
                // (Kept if the ACK is late at all, as delayed ACKs are: its delay beyond the
                // round trip shows once the fastest ACKs have been seen, maybe later.)
                && rel.raw_delay_us >= DELAYED_ACK_MIN_US
                && gap <= latest
            {
                held = true;
                self.made += 1;
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
                    nagle_off: seq[sender].nagle_off,
                    prev_len: prev.len,
                    prev_first_of_turn: prev.first_of_turn,
                    turn: self.turns[sender],
                    prev_head: prev.head,
                    held_head: s.head,
                    first_head,
                    relayed_from: None,
                });
            }
        }
        if held {
            self.turn_has_candidate[sender] = true;
        }
        if self.turn_has_candidate[sender] {
            let (turn, small) = (self.turns[sender], self.turn_small[sender]);
            match self.stalled_turns.back_mut() {
                Some(last) if last.0 == sender && last.1 == turn => last.2 = small,
                _ => {
                    if self.stalled_turns.len() == STREAM_TURNS_KEPT {
                        self.stalled_turns.pop_front();
                    }
                    self.stalled_turns.push_back((sender, turn, small));
                }
            }
        }
        self.before_last[sender] = self.last[sender];
        self.last[sender] = Some(LastWrite {
            us,
            frame,
            len: s.len,
            end: s.seq.wrapping_add(s.len),
            first_of_turn: new_turn,
            head: s.head,
        });
        self.release[sender] = None;
        let end = s.seq.wrapping_add(s.len);
        self.release[peer] = self.release[peer].map(|r| Release {
            answered: r.answered.or(Some(end)),
            ..r
        });
    }
}
