//! Sequence tracking, per direction ([`Sequence`]): where each byte stream starts and how far
//! it has gone, what is still unacknowledged and when it was sent, retransmissions and
//! retransmission timeouts, duplicate ACKs and SACK, zero windows, the MSS, and the fastest
//! data-to-ACK time (one side of the round trip, the base every delay is measured from).
//!
//! Sequence numbers compare modulo 2^32 ([`seq_lt`], [`seq_le`]). Memory is bounded: at most
//! [`UNACKED_MAX`] unacknowledged segments per direction.

use std::collections::VecDeque;

use super::direction::Direction;
use crate::packet::{flags, Segment};
use crate::rule::{self, DELAYED_ACK_MIN_US};

/// Unacknowledged segments tracked per direction (12 MB of full segments in flight; beyond
/// that, or in a capture of one direction only, the oldest are dropped: memory stays bounded).
const UNACKED_MAX: usize = 8_192;
/// A second small segment in flight this long after the first was written after it.
const NAGLE_OFF_GAP_US: u64 = 1_000;

/// A tail-loss probe with one segment in flight leaves after the peer's longest delayed-ACK
/// allowance (200 ms) and the round trips of its PTO (RFC 8985; Linux and Windows alike), new
/// data and all, whatever Nagle holds. A segment sent with one small segment in flight and no
/// ACK for 200 ms and a round trip is taken for one: no receiver's timer keeps an ACK that
/// long.
const PROBE_ALLOWANCE_US: u64 = 200_000;
/// Retransmissions this long after the original with no duplicate ACK first are timeouts.
pub(super) const RTO_MIN_US: u64 = 150_000;

/// `a` comes before `b` in sequence space.
pub(super) fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` comes before `b` or is `b`, in sequence space.
pub(super) fn seq_le(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

/// A segment sent and not yet acknowledged (data, or a SYN or FIN, which take a sequence
/// number too).
#[derive(Clone, Copy)]
pub(super) struct Unacked {
    /// Sequence number after its last byte.
    end: u32,
    /// When it was sent (last sent, if sent again), µs.
    pub(super) us: u64,
    /// Its frame (the last sending's, if sent again).
    pub(super) frame: u64,
    /// It was sent more than once: its ACK times nothing (Karn).
    retransmitted: bool,
    /// It carried less than a full segment (Nagle lets one such segment be in flight).
    small: bool,
    /// It was a SYN: its ACK (the SYN-ACK, or the handshake's last ACK) comes at once.
    syn: bool,
}

/// One direction of a flow, as its sender sent it and its receiver acknowledged it.
#[derive(Default)]
pub(super) struct Sequence {
    /// First sequence number of the byte stream (ISN + 1, or the first seen).
    base_seq: Option<u32>,
    /// Highest sequence end sent with data.
    nxt: Option<u32>,
    unacked: VecDeque<Unacked>,
    /// Fastest data-to-ACK time for this direction's data: the receiver's side of the round
    /// trip, as seen from the capture point.
    pub(super) base_us: Option<u64>,
    /// The receiver's side of the round trip as the handshake measured it (its ACK of a SYN
    /// comes at once, never delayed): the one measure a lower bound may rest on.
    pub(super) handshake_us: Option<u64>,
    /// The soonest the peer's data answered this direction's (from its last segment to the
    /// peer's first, as captured): an answer sooner than the handshake says no middlebox
    /// stands in for the far end ([`far_side_us`]).
    fastest_answer_us: Option<u64>,
    /// How far prompt pure ACKs of this direction's data come after `base_us`: the first
    /// such distance, then an exponential mean (gain 1/8), as RFC 6298 starts RTTVAR; the
    /// jitter on the receiver's side of the path (0 until measured).
    pub(super) spread_us: u64,
    spread_seen: bool,
    /// The MSS this direction's sender announced.
    mss: Option<u32>,
    /// Largest payload seen (stands for the MSS when no SYN was captured), and how many
    /// segments carried that many bytes.
    max_len: u32,
    max_len_count: u32,
    /// Small segments in flight (sent, not yet acknowledged), and when the last was sent.
    small_unacked: u32,
    last_small_us: u64,
    /// This direction's sender had two small segments in flight at once: it does not run
    /// Nagle's algorithm.
    pub(super) nagle_off: bool,
    /// Highest ACK number this direction's sender sent, and duplicate ACKs it sent for it.
    last_ack: Option<u32>,
    dupacks: u32,
    /// This direction's sender sent SACK blocks since its last advancing ACK.
    pub(super) sacked: bool,
    /// This direction's sender advertises a zero window.
    pub(super) zero_window: bool,
    /// Its receiver acknowledged bytes it was never seen to send (beyond a FIN's one).
    unseen_acked: bool,
    /// Since when (µs) it has advertised it.
    zero_since: Option<u64>,
    /// The end of the last retransmission timeout's wait counted (µs): the segments sent
    /// again behind it after one timeout waited through the same time, which counts once.
    timeout_until_us: u64,
    /// The highest IP TTL this direction's sender's packets reached the capture with (the
    /// closest to its system's initial one).
    pub(super) ttl: Option<u8>,
    /// When this direction's sender last sent a full segment of new data.
    last_full_us: Option<u64>,
    /// When this direction's sender last sent a segment (data or not).
    pub(super) last_segment_us: Option<u64>,
    /// The window scale its SYN announced (`Some(None)`: its SYN announced none), and the
    /// window it last advertised, unscaled.
    scale: Option<Option<u8>>,
    window: Option<u16>,
}

/// What an ACK acknowledged.
pub(super) struct Acked {
    /// The newest segment it covered.
    pub(super) newest: Unacked,
    /// One of the segments it covered was sent more than once (so it times nothing).
    pub(super) retransmitted: bool,
    /// From the newest segment it covered to it, µs.
    pub(super) raw_us: u64,
}

/// What a window advertisement did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Window {
    Unchanged,
    /// It closed the window (zero).
    Closed,
    /// It opened the window again, after so many µs at zero.
    Opened(u64),
}

/// What a data segment was, in its sender's byte stream.
pub(super) struct Sent {
    /// First sequence number of the stream (to place the segment in it).
    pub(super) base_seq: u32,
    /// It carries bytes sent before.
    pub(super) retransmit: bool,
    /// It is a retransmission after a timeout (no duplicate ACK or SACK before it, and
    /// [`RTO_MIN_US`] or more after the original).
    pub(super) timeout: bool,
    /// It is a retransmission sooner than a timeout with no duplicate ACK or SACK before it:
    /// a tail-loss probe (not a fast retransmission).
    pub(super) probe: bool,
    /// It carries the next byte expected (no hole before it: nothing of the sender's that
    /// passed the capture point unseen).
    pub(super) contiguous: bool,
    /// With `timeout`: how long after the segment's last sending it came, µs (not counting
    /// time an earlier timeout's wait already counted), and that sending's frame.
    pub(super) waited_us: u64,
    pub(super) last_frame: u64,
}

impl Sequence {
    /// A SYN or SYN-ACK from this direction's sender: its stream starts after it.
    pub(super) fn on_syn(&mut self, s: &Segment) {
        self.base_seq = Some(s.seq.wrapping_add(1));
        self.scale = Some(s.wscale);
    }

    /// The window a segment (not a SYN) from this direction's sender advertised.
    pub(super) fn on_advertised(&mut self, window: u16) {
        self.window = Some(window);
    }

    /// Whether the stream starts right after the SYN `s` (a copy of its SYN, if it is one).
    pub(super) fn starts_after(&self, s: &Segment) -> bool {
        self.base_seq == Some(s.seq.wrapping_add(1))
    }

    /// A packet from this direction's sender reached the capture with `ttl`.
    pub(super) fn on_ttl(&mut self, ttl: u8) {
        self.ttl = Some(self.ttl.map_or(ttl, |t| t.max(ttl)));
    }

    /// Whether the receiver acknowledged bytes this direction's sender was never seen to send
    /// (the capture missed some of its packets).
    pub(super) fn acked_unseen(&self) -> bool {
        self.unseen_acked
    }

    /// This direction's sender starts its TTL at 64 or below (Linux, not Windows, whose one
    /// counter numbers all its packets): skipped IPv4 numbers may say packets were lost.
    pub(super) fn may_number_per_connection(&self) -> bool {
        self.ttl.is_some_and(|t| t <= 64)
    }

    /// This direction's sender's packets reach the capture with their system's initial TTL:
    /// no router lies between it and the capture point.
    fn unrouted(&self) -> bool {
        self.ttl.is_some_and(|t| rule::initial_ttl(t) == t)
    }

    /// An MSS option from this direction's sender.
    pub(super) fn on_mss(&mut self, mss: u16) {
        self.mss = Some(u32::from(mss));
    }

    /// The window this direction's sender advertises at `us`: whether it has just closed it
    /// or opened it again.
    pub(super) fn on_window(&mut self, zero: bool, us: u64) -> Window {
        let was = std::mem::replace(&mut self.zero_window, zero);
        match (was, zero) {
            (false, true) => {
                self.zero_since = Some(us);
                Window::Closed
            }
            (true, false) => {
                Window::Opened(us.saturating_sub(self.zero_since.take().unwrap_or(us)))
            }
            _ => Window::Unchanged,
        }
    }

    /// How long the window has been zero at `us`, if it is (the flow ends so).
    pub(super) fn zero_for(&self, us: u64) -> Option<u64> {
        self.zero_since.map(|t| us.saturating_sub(t))
    }

    /// A keep-alive probe (or, into a zero window, a window probe): one byte before the next,
    /// nothing outstanding.
    pub(super) fn is_probe(&self, s: &Segment, control: bool) -> bool {
        s.len <= 1 && !control && self.unacked.is_empty() && self.nxt == Some(s.seq.wrapping_add(1))
    }

    /// A SYN or FIN without payload: it takes a sequence number, so its ACK times the round
    /// trip too (unless it was sent again).
    pub(super) fn on_control(&mut self, s: &Segment, us: u64, frame: u64) {
        let syn = s.flags & flags::SYN != 0;
        let end = s.seq.wrapping_add(1);
        if self.nxt.is_none_or(|n| seq_lt(n, end)) {
            self.nxt = Some(end);
            self.unacked.push_back(Unacked {
                end,
                us,
                frame,
                retransmitted: false,
                small: false,
                syn,
            });
        } else {
            // A SYN or FIN sent again: its ACK times nothing.
            for u in self.unacked.iter_mut() {
                u.retransmitted = true;
            }
        }
    }

    /// Whether everything sent has been acknowledged.
    pub(super) fn all_acked(&self) -> bool {
        self.unacked.is_empty()
    }

    /// Takes the oldest unacknowledged segment off.
    fn retire(&mut self) -> Option<Unacked> {
        let u = self.unacked.pop_front()?;
        self.small_unacked -= u32::from(u.small);
        Some(u)
    }
}

/// An ACK sent by `acker` (`pure`: without payload, SYN, FIN or RST): counts duplicate ACKs
/// and SACK, retires what it acknowledges in the peer's direction and, unless that was sent
/// again, learns the acker's side of the round trip from it.
pub(super) fn acknowledge(
    seq: &mut [Sequence; 2],
    acker: Direction,
    s: &Segment,
    us: u64,
    pure: bool,
) -> Option<Acked> {
    let o = acker.peer();
    let ack = s.ack;
    // Duplicate ACKs and SACK: the acker is missing data.
    let advanced = seq[acker].last_ack.is_none_or(|l| seq_lt(l, ack));
    if advanced {
        seq[acker].last_ack = Some(ack);
        seq[acker].dupacks = 0;
        seq[acker].sacked = false;
    } else if pure && !seq[o].unacked.is_empty() {
        seq[acker].dupacks += 1;
    }
    if s.sack {
        seq[acker].sacked = true;
    }
    if seq[o].nxt.is_some_and(|n| seq_lt(n.wrapping_add(1), ack)) {
        seq[o].unseen_acked = true;
    }
    let mut newest = None;
    let mut retransmitted = false;
    while let Some(&u) = seq[o].unacked.front() {
        if !seq_le(u.end, ack) {
            break;
        }
        newest = Some(u);
        retransmitted |= u.retransmitted;
        seq[o].retire();
    }
    let newest = newest?;
    let raw_us = us.saturating_sub(newest.us);
    if !retransmitted {
        let base = seq[o].base_us.map_or(raw_us, |b| b.min(raw_us));
        seq[o].base_us = Some(base);
        if newest.syn {
            seq[o].handshake_us = Some(raw_us);
        }
        // Only prompt pure ACKs measure jitter: a delayed one measures the timer, one that
        // rides on data measures the program.
        let above = raw_us - base;
        if pure && above < DELAYED_ACK_MIN_US {
            let dir = &mut seq[o];
            dir.spread_us = if dir.spread_seen {
                (dir.spread_us * 7 + above) / 8
            } else {
                above
            };
            dir.spread_seen = true;
        }
    }
    Some(Acked {
        newest,
        retransmitted,
        raw_us,
    })
}

/// A segment with payload sent by `d`: finds retransmissions (and whether they followed a
/// timeout) and tracks the new bytes until they are acknowledged. A `late` segment (its IPv4
/// number behind its sender's last: the path reordered it) is no retransmission.
pub(super) fn send_data(
    seq: &mut [Sequence; 2],
    d: Direction,
    s: &Segment,
    us: u64,
    frame: u64,
    late: bool,
) -> Sent {
    let end = s.seq.wrapping_add(s.len);
    let sizes = sizes(seq, d);
    let small = sizes.is_small(s.len, u32::from(s.opt_len));
    let (full, announced) = sizes.full_segment();
    let dir = &mut seq[d];
    let base_seq = *dir.base_seq.get_or_insert(s.seq);
    match s.len.cmp(&dir.max_len) {
        std::cmp::Ordering::Greater => (dir.max_len, dir.max_len_count) = (s.len, 1),
        std::cmp::Ordering::Equal => dir.max_len_count += 1,
        std::cmp::Ordering::Less => {}
    }
    let retransmit = !late && dir.nxt.is_some_and(|n| seq_lt(s.seq, n));
    let contiguous = dir.nxt.is_none_or(|n| n == s.seq);
    let mut timeout = false;
    let mut probe = false;
    let (mut waited_us, mut last_frame) = (0, 0);
    if retransmit {
        let last = dir
            .unacked
            .iter()
            .find(|u| seq_lt(s.seq, u.end))
            .map(|u| (u.us, u.frame));
        let sent = last.map(|(t, _)| t);
        let peer = &seq[d.peer()];
        timeout = sent.is_some_and(|t| {
            peer.dupacks < 2 && !peer.sacked && us.saturating_sub(t) >= RTO_MIN_US
        });
        probe = !timeout && peer.dupacks < 2 && !peer.sacked;
        if let Some((t, f)) = last.filter(|_| timeout) {
            let from = t.max(seq[d].timeout_until_us);
            (waited_us, last_frame) = (us.saturating_sub(from), f);
            seq[d].timeout_until_us = us;
        }
        for u in seq[d].unacked.iter_mut() {
            if seq_lt(s.seq, u.end) && seq_le(u.end, end) {
                u.retransmitted = true;
                u.us = us;
                u.frame = frame;
            }
        }
    }
    let peer_us = seq[d.peer()].last_segment_us;
    let dir = &mut seq[d];
    if dir.nxt.is_none_or(|n| seq_lt(n, end)) {
        dir.nxt = Some(end);
        if dir.unacked.len() >= UNACKED_MAX {
            dir.retire();
        }
        // Nagle keeps one small segment in flight at most: a second, written later, is proof
        // it is off. (Sent at once with the first, both were pushed together: by a close, an
        // uncork, MSG_MORE ending.)
        // (Not from segments of three quarters of a full one or more: they may be the full
        // segments of a path that carries less, not yet seen twice. Where the full segment is
        // one this sender was seen to send (no SYN in the capture, or a path that carries
        // less, seen), any segment shorter by more than the options' 40 bytes is small.)
        // (Nor from the small tail of a large write, sent right behind its full segments:
        // Windows applies Nagle to each write, not to each segment, so such a tail leaves
        // beside a small segment in flight, and is not one Nagle counts either.)
        let clearly_small = if announced {
            s.len * 4 < full * 3
        } else {
            s.len + 40 < full
        };
        let tail = small && dir.last_full_us.is_some_and(|t| us < t + NAGLE_OFF_GAP_US);
        let counted = small && !tail;
        // (Nor from a tail-loss probe: with one small segment in flight and no ACK for the
        // probe timeout, the sender sends what it holds, Nagle or not.)
        let probe = dir.small_unacked == 1
            && us >= dir.last_small_us + PROBE_ALLOWANCE_US + dir.base_us.unwrap_or(0);
        // (Nor, from a Windows sender at its end, from a segment that left as the peer's
        // arrived: Windows lets held data go with an ACK it sends anyway, and on an ACK that
        // covers part of what is in flight.)
        let rode_an_ack = dir.unrouted()
            && dir.ttl == Some(128)
            && peer_us.is_some_and(|p| us <= p + NAGLE_OFF_GAP_US);
        if counted
            && clearly_small
            && !retransmit
            && !probe
            && !rode_an_ack
            && s.flags & flags::FIN == 0
        {
            dir.nagle_off |= dir.small_unacked > 0 && us >= dir.last_small_us + NAGLE_OFF_GAP_US;
        }
        if counted {
            dir.small_unacked += 1;
            dir.last_small_us = us;
        }
        if !small {
            dir.last_full_us = Some(us);
        }
        dir.unacked.push_back(Unacked {
            end,
            us,
            frame,
            retransmitted: retransmit,
            small: counted,
            syn: false,
        });
    }
    Sent {
        base_seq,
        retransmit,
        timeout,
        probe,
        contiguous,
        waited_us,
        last_frame,
    }
}

/// What is known of `d`'s segment sizes (see [`rule::SegmentSizes`]).
pub(super) fn sizes(seq: &[Sequence; 2], d: Direction) -> rule::SegmentSizes {
    rule::SegmentSizes {
        announced: [seq[d].mss, seq[d.peer()].mss],
        largest: seq[d].max_len,
        largest_count: seq[d].max_len_count,
    }
}

/// The receiver's side of the round trip for `d`'s data, the base its ACKs' delays are
/// measured from (0 where unknown): the fastest of its ACKs. Except where no handshake measured
/// it, that fastest ACK came [`DELAYED_ACK_MIN_US`] or more after the data, and the
/// receiver's packets reach the capture with their system's initial TTL: no router lies
/// between, so the capture was taken on its host or its link, and its fastest ACK measured
/// its delayed-ACK timer, not a path (a capture begun mid-connection, of a receiver that
/// delays every ACK: a Windows host's 200 ms). Its side is then nothing.
pub(super) fn receiver_side_us(seq: &[Sequence; 2], d: Direction) -> u64 {
    let base = seq[d].base_us.unwrap_or(0);
    let timer_only =
        seq[d].handshake_us.is_none() && base >= DELAYED_ACK_MIN_US && seq[d.peer()].unrouted();
    if timer_only {
        0
    } else {
        base
    }
}

/// A middlebox acknowledges a direction's data when the handshake took this many times its
/// fastest ACK of data...
const SPLIT_FACTOR: u64 = 4;
/// ...and this much more, µs...
const SPLIT_MIN_US: u64 = 5_000;
/// ...and less than this, µs (a SYN-ACK lost on the way and sent again comes a second later).
const SPLIT_MAX_US: u64 = 950_000;

/// The receiver's side of the round trip of `d`'s data as the far end answers it, when a
/// middlebox acknowledges that data for it (a NAT that splits connections, as VirtualBox's
/// does; a TCP proxy, or a link's accelerator): the handshake, which the far end answered,
/// took [`SPLIT_FACTOR`] times the fastest ACK of data and [`SPLIT_MIN_US`] more, and no
/// answer to that data came sooner than three quarters of it (a SYN-ACK that was only slow,
/// as a busy server's or a first packet's through a firewall, is disproved by the first
/// answer). `None` where the receiver acknowledges its own data.
pub(super) fn far_side_us(seq: &[Sequence; 2], d: Direction) -> Option<u64> {
    let (hs, base) = (seq[d].handshake_us?, seq[d].base_us?);
    let split = hs >= base.saturating_mul(SPLIT_FACTOR)
        && hs >= base + SPLIT_MIN_US
        && hs < SPLIT_MAX_US
        && seq[d].fastest_answer_us.is_none_or(|a| a >= hs - hs / 4);
    split.then_some(hs)
}

/// `d`'s data at `us` answered the peer's, whose last segment passed at `asked_us`.
pub(super) fn on_answer(seq: &mut [Sequence; 2], d: Direction, us: u64, asked_us: u64) {
    let gap = us.saturating_sub(asked_us);
    let q = &mut seq[d.peer()];
    q.fastest_answer_us = Some(q.fastest_answer_us.map_or(gap, |a| a.min(gap)));
}

/// The answering side's side of the round trip of the peer's data: the far end's where a
/// middlebox acknowledges for it ([`far_side_us`]), else [`receiver_side_us`].
pub(super) fn answer_side_us(seq: &[Sequence; 2], d: Direction) -> u64 {
    far_side_us(seq, d).unwrap_or_else(|| receiver_side_us(seq, d))
}

/// The round trip to the far end, µs, when a middlebox acknowledges one side's data for it
/// ([`far_side_us`]); `None` otherwise.
pub(super) fn far_round_trip_us(seq: &[Sequence; 2]) -> Option<u64> {
    let far = |d| far_side_us(seq, d);
    let (c, s) = (far(Direction::Client), far(Direction::Server));
    c.or(s)?;
    let side = |d, f: Option<u64>| f.unwrap_or_else(|| receiver_side_us(seq, d));
    Some(side(Direction::Client, c) + side(Direction::Server, s))
}

/// The base data-to-ACK times of both directions ([`receiver_side_us`]), client's data
/// first: `[server's side of the round trip, client's side]`.
pub(super) fn sides_of_round_trip(seq: &[Sequence; 2]) -> [u64; 2] {
    [
        receiver_side_us(seq, Direction::Client),
        receiver_side_us(seq, Direction::Server),
    ]
}

/// Whether `d`'s receiver acknowledged up to `end` already (as captured).
pub(super) fn acked_to(seq: &[Sequence; 2], d: Direction, end: u32) -> bool {
    seq[d.peer()].last_ack.is_some_and(|a| seq_le(end, a))
}

/// What `d` has sent that its peer has not acknowledged, bytes (0 if unknown).
pub(super) fn in_flight(seq: &[Sequence; 2], d: Direction) -> u64 {
    match (seq[d].nxt, seq[d.peer()].last_ack) {
        (Some(nxt), Some(acked)) if seq_lt(acked, nxt) => u64::from(nxt.wrapping_sub(acked)),
        _ => 0,
    }
}

/// The window `d` last advertised, bytes: known when both SYNs were captured (they tell
/// whether, and by how much, windows are scaled).
pub(super) fn window(seq: &[Sequence; 2], d: Direction) -> Option<u64> {
    let raw = u64::from(seq[d].window?);
    match (seq[d].scale?, seq[d.peer()].scale?) {
        (Some(shift), Some(_)) => Some(raw << shift.min(14)),
        _ => Some(raw),
    }
}

/// Whether `s` carries SYN, FIN or RST.
pub(super) fn is_control(s: &Segment) -> bool {
    s.flags & (flags::SYN | flags::FIN | flags::RST) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        assert!(seq_lt(u32::MAX - 5, 3));
        assert!(!seq_lt(3, u32::MAX - 5));
        assert!(seq_le(7, 7) && !seq_lt(7, 7));
    }
}
