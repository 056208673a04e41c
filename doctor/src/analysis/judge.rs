//! Judging ([`Findings`]): the candidates one flow collected, judged with the round trips known
//! now by the stall rule ([`crate::rule`]): delayed ACKs, stalls and the shape of each held
//! write ([`Pattern`]), the receiver's delayed-ACK timer; and, once the flow ends, where the
//! capture was taken ([`capture_point`]).
//!
//! At most [`KEPT`] stalls (the worst, unless every stall is asked for) and delayed ACKs (the
//! first) are kept per flow; the counts cover everything.

use std::collections::HashMap;

use super::candidates::{Candidate, Collector, DelayedCandidate};
use super::direction::Direction;
use super::output::{CapturePoint, DelayedAck, Pattern, Side, Stall};
use super::sequence::{self, Sequence};
use crate::rule::{self, AckTimer, HoldEvidence};

/// Details kept per flow; counts cover everything.
const KEPT: usize = 32;

/// Small data segments in one turn that make it a stream: a request, or an answer as a
/// header and a body, takes two or three.
const STREAM_SMALL_SEGMENTS: u32 = 5;

/// Time a side's writes lost to stalls.
#[derive(Clone, Copy, Default)]
pub(super) struct Lost {
    /// All its stalls, µs.
    pub(super) total_us: u64,
    /// Its longest stall, µs.
    pub(super) worst_us: u64,
}

/// What one flow's judged candidates came to.
#[derive(Default)]
pub(super) struct Findings {
    /// The worst stalls so far (cut to [`KEPT`] when twice that many, unless `every_stall`).
    pub(super) stalls: Vec<Stall>,
    /// Keep every stall.
    pub(super) every_stall: bool,
    pub(super) stall_count: u64,
    /// Per sending side.
    pub(super) lost: [Lost; 2],
    /// Stalls by the receiver's timer, indexed by [`AckTimer`].
    pub(super) timers: [u64; 2],
    /// Stalls by pattern, per sending side.
    pub(super) patterns: [HashMap<Pattern, u64>; 2],
    /// The turn of each side's last stall.
    pub(super) last_stall_turn: [Option<u64>; 2],
    /// The first delayed ACKs.
    pub(super) delayed: Vec<DelayedAck>,
    pub(super) delayed_count: u64,
    /// The stalls judged since the budget last took them: the sender, and the time its
    /// write waited (the ACK's delay), µs.
    pub(super) stalled_spans: Vec<(Direction, u64, u64)>,
}

impl Findings {
    /// Judges the pending candidates with the round trips known now; counts go to `sides`.
    pub(super) fn settle(
        &mut self,
        collected: &mut Collector,
        seq: &[Sequence; 2],
        sides: &mut [Side; 2],
    ) {
        let base = sequence::sides_of_round_trip(seq);
        for c in std::mem::take(&mut collected.pending_delayed) {
            self.delayed_ack(c, base, sides);
        }
        for c in std::mem::take(&mut collected.pending) {
            let small = collected
                .stalled_turns
                .iter()
                .find(|t| t.0 == c.sender && t.1 == c.turn)
                .map_or(0, |t| t.2);
            self.stall(c, small, base, seq, sides);
        }
    }

    fn delayed_ack(&mut self, c: DelayedCandidate, base: [u64; 2], sides: &mut [Side; 2]) {
        let delay = c.raw_us.saturating_sub(base[c.acker.peer()]);
        if !rule::is_delayed_ack(delay) {
            return;
        }
        self.delayed_count += 1;
        sides[c.acker].delayed_acks += 1;
        if self.delayed.len() < KEPT {
            self.delayed.push(DelayedAck {
                acker: sides[c.acker].addr.clone(),
                ack: c.ack,
                data: c.data,
                delay_us: delay,
            });
        }
    }

    /// Judges a stall candidate; `turn_small`: the small data segments of its turn so far.
    fn stall(
        &mut self,
        c: Candidate,
        turn_small: u32,
        base: [u64; 2],
        seq: &[Sequence; 2],
        sides: &mut [Side; 2],
    ) {
        let d = c.sender;
        let (mss, counts_options) = sequence::sizes(seq, d).full_segment();
        let evidence = HoldEvidence {
            held_len: c.held_len,
            options: if counts_options { c.options } else { 0 },
            mss,
            ack_delay_us: c.raw_ack_delay_us.saturating_sub(base[d]),
            release_gap_us: c.release_gap_us,
            sender_side_rtt_us: base[d.peer()],
            sender_side_spread_us: seq[d.peer()].spread_us,
            sender_side_rtt_known: seq[d.peer()].handshake_us.is_some(),
            nagle_off: c.nagle_off,
            zero_window: c.zero_window,
            loss_recovery: c.loss_recovery,
        };
        if rule::judge(&evidence).is_err() {
            return;
        }
        // A second stall in one turn, or a stall in a turn of many small segments, is a
        // stream's, whatever the shape of its first write.
        let streaming =
            self.last_stall_turn[d] == Some(c.turn) || turn_small >= STREAM_SMALL_SEGMENTS;
        let pattern = match Pattern::of(&c) {
            Pattern::RelayHop | Pattern::TlsFirstAnswer => Pattern::of(&c),
            _ if streaming => Pattern::EventStream,
            p => p,
        };
        self.last_stall_turn[d] = Some(c.turn);
        let stalled = evidence.ack_delay_us;
        let ack_us = (c.ack.time_s * 1e6).round() as u64;
        self.stalled_spans
            .push((d, ack_us.saturating_sub(stalled), ack_us));
        self.stall_count += 1;
        let lost = &mut self.lost[d];
        lost.total_us += stalled;
        lost.worst_us = lost.worst_us.max(stalled);
        sides[d].stalls += 1;
        *self.patterns[d].entry(pattern).or_default() += 1;
        if let Some(t) = AckTimer::of_acker(stalled, base[0] + base[1], seq[d.peer()].ttl) {
            self.timers[t as usize] += 1;
        }
        self.stalls.push(Stall {
            sender: sides[d].addr.clone(),
            direction: direction_name(d),
            previous: c.previous,
            ack: c.ack,
            held: c.held,
            held_len: c.held_len,
            held_offset: c.held_offset,
            stalled_us: stalled,
            pattern,
            relayed_from: c.relayed_from,
        });
        if !self.every_stall && self.stalls.len() >= 2 * KEPT {
            self.keep_worst();
        }
    }

    /// Keeps the [`KEPT`] worst stalls (all if `every_stall`), worst first (then capture order).
    pub(super) fn keep_worst(&mut self) {
        self.stalls.sort_by(|a, b| {
            b.stalled_us
                .cmp(&a.stalled_us)
                .then(a.held.frame.cmp(&b.held.frame))
        });
        if !self.every_stall {
            self.stalls.truncate(KEPT);
        }
    }

    /// The pattern seen most often in `d`'s stalls (ties: the later [`Pattern`]).
    pub(super) fn usual_pattern(&self, d: Direction) -> Pattern {
        self.patterns[d]
            .iter()
            .max_by_key(|(p, n)| (**n, **p as u8))
            .map_or(Pattern::SmallWrites, |(p, _)| *p)
    }
}

impl Pattern {
    /// Names a held write from what came before it.
    fn of(c: &Candidate) -> Pattern {
        use crate::packet::Head;
        let app_data = |h: Head| h.is_tls_record(Head::TLS_APPLICATION_DATA);
        // The previous write opened its turn: this one is the second part of a message.
        if c.relayed_from.is_some() {
            Pattern::RelayHop
        } else if c.sender == Direction::Server
            && c.turn == 2
            && c.prev_first_of_turn
            && c.first_head.is_tls_record(Head::TLS_HANDSHAKE)
            && app_data(c.prev_head)
            && app_data(c.held_head)
        {
            Pattern::TlsFirstAnswer
        } else if c.held_len <= 16 && c.prev_len >= 4 * c.held_len {
            Pattern::TinyTrailingFrame
        } else if c.prev_first_of_turn && c.sender == Direction::Client {
            Pattern::RequestSplit
        } else if c.prev_first_of_turn {
            Pattern::HeaderThenBody
        } else {
            Pattern::SmallWrites
        }
    }
}

/// Which way `d`'s segments go, as reports write it.
pub(super) fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Client => "client->server",
        Direction::Server => "server->client",
    }
}

/// The round trip, ms, and where along the path the capture was taken, from the two sides of
/// the round trip (`None` and [`CapturePoint::Unknown`] unless both are known).
pub(super) fn capture_point(seq: &[Sequence; 2]) -> (Option<f64>, CapturePoint) {
    // The client's data is timed by the server's side of the round trip, and back.
    match (
        seq[Direction::Client].base_us,
        seq[Direction::Server].base_us,
    ) {
        (Some(server_side), Some(client_side)) => {
            let rtt = server_side + client_side;
            let point = if rtt < 1_000 {
                CapturePoint::Local
            } else if client_side * 10 <= rtt {
                CapturePoint::ClientEnd
            } else if server_side * 10 <= rtt {
                CapturePoint::ServerEnd
            } else {
                CapturePoint::Between
            };
            (Some(rtt as f64 / 1000.0), point)
        }
        _ => (None, CapturePoint::Unknown),
    }
}
