//! A sender's own hold that is not Nagle's ([`SenderHolds`], issue 51): a cork left on. A
//! program that sends a message's last piece with `MSG_MORE`, or sets `TCP_CORK` and does not
//! clear it, leaves that piece in its kernel; with nothing in flight no ACK comes to push it,
//! and it leaves when the kernel's ceiling on a cork ends it (its probe timer: 200 ms, or the
//! retransmission timeout when longer). HAProxy #3447 was this, with `TCP_NODELAY` on.
//!
//! On the wire, at either end: the sender answered the peer's data with a segment, then, with
//! all of it acknowledged and nothing from the peer in between, sent a small segment about
//! 200 ms later (the round trip and 200 ms, at least, on a long path:
//! [`is_cork_ceiling_on_path`]), which the peer was waiting for: it sends its next data (or closes) soon
//! after. A periodic feed (the same gap, no peer data before it) and an answer after think
//! time (the first segment of a turn) are not it.

use nagless_stall_rule::{is_cork_ceiling_on_path, CORK_CEILING_US as CEILING_US};

use super::direction::Direction;
use super::output::{At, SenderHold};

/// How long after the held segment the peer's next data shows it was waiting for it, beyond
/// the round trip.
const WAITED_US: u64 = 100_000;
/// Holds listed per direction (the counts cover all).
const KEPT: usize = 8;
/// A direction is named only with this many holds within [`SPREAD_US`] of each other: a
/// ceiling is the same every time, where a program's time to write the rest of an answer
/// varies (a program that takes as long every time is named too: the verdict says so).
const MIN_HOLDS: usize = 2;
const SPREAD_US: u64 = 20_000;
/// Hold lengths kept per direction to judge that by.
const GAPS_KEPT: usize = 64;
/// How long, beyond a round trip and a quarter, before the held segment the peer's ACK of
/// all the sender had sent must have passed the capture point: a segment leaving as that ACK
/// reaches the sender (its side of the round trip later, at most) was released by it
/// (Nagle's release, which the stall rule judges), not by a timer of the sender's.
const AFTER_ACK_US: u64 = 10_000;

/// The sender's previous data segment, when it opened its turn.
#[derive(Clone, Copy)]
struct Opened {
    at: At,
    us: u64,
}

/// A hold waiting for the peer's next data to confirm it.
#[derive(Clone, Copy)]
struct Pending {
    previous: At,
    held: At,
    held_us: u64,
    gap_us: u64,
    /// The path's round trip as known then, µs.
    rtt_us: u64,
}

/// One flow's sender holds.
#[derive(Default)]
pub(super) struct SenderHolds {
    /// Per sender: its last data segment, if it opened a turn and nothing followed it yet.
    opened: [Option<Opened>; 2],
    pending: [Option<Pending>; 2],
    found: [SenderHold; 2],
    /// Per sender: the first holds' lengths.
    gaps_us: [Vec<u64>; 2],
    /// Per sender: when the peer last acknowledged all it had sent.
    all_acked_us: [Option<u64>; 2],
    /// Holds confirmed since the budget last took them: the sender, and the time the cork
    /// held the segment, µs: the kernel's ceiling (its retransmission timeout: 200 ms and the
    /// round trip) before it left; what came before, the program's time to write it, is the
    /// program's.
    pub(super) confirmed: Vec<(Direction, u64, u64)>,
}

impl SenderHolds {
    /// A data segment from `d` at `us` (`new_turn`: the peer sent data last; `in_flight`:
    /// `d` had data unacknowledged as it left; `small`: under a full segment); `rtt_us`, the
    /// path's round trip as known now.
    #[allow(clippy::too_many_arguments)] // one segment's facts, as the flow has them
    pub(super) fn on_data(
        &mut self,
        d: Direction,
        new_turn: bool,
        in_flight: bool,
        small: bool,
        us: u64,
        frame: u64,
        rtt_us: u64,
    ) {
        let peer = d.peer();
        // The peer's data: a hold of its it was waiting for is confirmed.
        if let Some(p) = self.pending[peer].take() {
            if us <= p.held_us + rtt_us + WAITED_US {
                self.confirm(peer, p);
            }
        }
        // The peer's turn ends with this: a hold of its needs nothing from `d` between.
        // (`new_turn` alone does not say so: a retransmission of the peer's may have come
        // after this side's last data.)
        self.opened[peer] = None;
        let opened = self.opened[d].take();
        if let (false, Some(o)) = (new_turn, opened) {
            let gap = us.saturating_sub(o.us);
            let ceiling = CEILING_US.max(4 * rtt_us);
            let acked_before = self.all_acked_us[d]
                .is_some_and(|a| a >= o.us && a + AFTER_ACK_US + rtt_us * 5 / 4 < us);
            if small
                && !in_flight
                && acked_before
                && is_cork_ceiling_on_path(gap, rtt_us)
                && gap <= ceiling + 4 * rtt_us + 50_000
            {
                self.pending[d] = Some(Pending {
                    previous: o.at,
                    held: At::new(frame, us),
                    held_us: us,
                    gap_us: gap,
                    rtt_us,
                });
            }
        }
        if new_turn {
            self.opened[d] = Some(Opened {
                at: At::new(frame, us),
                us,
            });
        }
    }

    /// The peer acknowledged all `d` had sent, at `us`.
    pub(super) fn on_all_acked(&mut self, d: Direction, us: u64) {
        self.all_acked_us[d] = Some(us);
    }

    /// `d` closed the connection at `us` (a FIN): a hold of the peer's it waited for ends it.
    pub(super) fn on_fin(&mut self, d: Direction, us: u64, rtt_us: u64) {
        if let Some(p) = self.pending[d.peer()].take() {
            if us <= p.held_us + rtt_us + WAITED_US {
                self.confirm(d.peer(), p);
            }
        }
    }

    fn confirm(&mut self, d: Direction, p: Pending) {
        // (The kernel's ceiling is its retransmission timeout, at least 200 ms beyond the
        // round trip.)
        let held_for = p.gap_us.min(CEILING_US + p.rtt_us);
        self.confirmed
            .push((d, p.held_us.saturating_sub(held_for), p.held_us));
        if self.gaps_us[d].len() < GAPS_KEPT {
            self.gaps_us[d].push(p.gap_us);
        }
        let f = &mut self.found[d];
        f.count += 1;
        f.held_ms += p.gap_us as f64 / 1000.0;
        if f.first.len() < KEPT {
            f.first.push(super::output::HeldTail {
                previous: p.previous,
                held: p.held,
                after_ms: p.gap_us as f64 / 1000.0,
            });
        }
    }

    /// The holds found, per sending direction that held [`MIN_HOLDS`] or more, alike.
    pub(super) fn report(self, sides: &[super::output::Side; 2]) -> Vec<SenderHold> {
        let mut out = Vec::new();
        for d in Direction::BOTH {
            let mut f = self.found[d].clone();
            // Two or more within the spread of each other (an outlier hides nothing).
            let mut g = self.gaps_us[d].clone();
            g.sort_unstable();
            let alike = g
                .windows(MIN_HOLDS)
                .any(|w| w[MIN_HOLDS - 1] - w[0] <= SPREAD_US);
            if alike {
                f.sender = sides[d].addr.clone();
                f.direction = super::judge::direction_name(d);
                out.push(f);
            }
        }
        out
    }
}
