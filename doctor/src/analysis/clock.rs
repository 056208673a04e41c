//! The ACK-clocked connection ([`Clock`]): per sending direction, the evidence that
//! [`judge_clock`](crate::rule::judge_clock) judges: how many of the sender's small data segments left as an
//! ACK arrived carrying writes that had queued behind it, and how long they queued.
//!
//! A small data segment (less than a full one, not sent before) is **clocked** when all of:
//! - **released**: it is the sender's first data segment after the peer's segment that
//!   acknowledged everything the sender had sent (its previous segment included), which is
//!   when Nagle lets the next small segment go;
//! - **at once**: it passed the capture point within the time the path allows after that
//!   ACK: no sooner than the stall rule's earliest release
//!   ([`release_window_us`](crate::rule::release_window_us), where the handshake measured the
//!   sender's side of the round trip), and no later than that side, plus a quarter of it or
//!   twice its jitter, plus [`CLOCK_SLACK_US`]. At the sender's end that is within
//!   [`CLOCK_SLACK_US`] of the ACK; at the receiver's end, one round trip after it;
//! - **not an answer**: that ACK did not come with a question (the client's new data, after
//!   the server's turn). An answer leaves as its question arrives, ACK and all, whether or
//!   not any of it queued, and nothing on the wire tells which: a server with `TCP_NODELAY`
//!   that answers each segment of a clocked client's requests with one write (as Redis does)
//!   looks exactly as clocked as its client, and was named so, "Nagle is on" and all
//!   (`tests/causes.rs`, the ACK-clocked scenario). The limit: a server with Nagle on whose
//!   answers truly queue behind the ACKs its client's requests carry is not named either
//!   (`tests/clocked.rs`);
//! - **Nagle on**: the sender had not been seen with two small segments in flight at once
//!   (then Nagle is off), and is not seen so by the flow's end (else no verdict); nor did a
//!   quarter or more of its small segments leave beside another unacknowledged small one,
//!   however soon after it (the stall rule's proof of Nagle off wants a millisecond between
//!   the two, which a TCP_NODELAY sender on loopback never shows).
//!
//! A direction is judged only if its **writes were seen to merge**: at least [`MIN_MERGED`]
//! of its clocked segments, and a twentieth of them, carry twice the bytes of its smallest small
//! segment or more, so they hold more than one write (writes queued while the previous
//! segment was in flight, merged by Nagle). That is what tells the clock from a sequential
//! client, which sends each request when the last answer has come: on the wire its requests
//! also leave right after an inbound ACK (4-5 µs on loopback, as fast as Nagle's release),
//! but each carries one write that queued behind nothing. A clocked segment that carries one
//! write looks the same, so the segments are counted by their timing once the direction has
//! shown that its writes queue. The limit: a sequential client whose requests differ in size
//! twofold, seen where its answers cannot be timed apart from Nagle's release (loopback, or
//! the far end of a path), shows the same; none of the corpus's flows does.
//!
//! **Queued time** is an estimate, for each clocked segment: half the time from the sender's
//! previous data segment to it. Its writes came after that segment left (or they would have
//! gone with it) and before it left; half is their mean wait if they came evenly in between,
//! the first of them waited up to the whole of it. Intervals are the same at either end of
//! the path, so is the estimate. The window is the sender's first to last data segment.
//!
//! Memory is bounded: counters per direction, and the first [`KEPT`] clocked segments with
//! their releasing ACKs (for the report and Wireshark).

use super::direction::Direction;
use super::output::{AckClocked, At, Side};
use super::sequence::{self, Sequence};
use crate::rule;

/// Clocked segments (and their releasing ACKs) kept per direction.
const KEPT: usize = 32;

/// Clocked segments that must carry merged writes (and at least a twentieth of them): below
/// that, the sender's writes were not seen to queue.
pub(crate) const MIN_MERGED: u64 = 10;

/// How long after its releasing ACK, beyond the sender's side of the round trip, a clocked
/// segment may pass the capture point: the kernel sends a held segment while it takes in the
/// ACK (2-20 µs on loopback and through a TUN device, measured); 200 µs leaves room for a
/// loaded host.
pub(crate) const CLOCK_SLACK_US: u64 = 200;

/// A peer's segment that acknowledged everything the sender had sent.
#[derive(Clone, Copy)]
struct Release {
    us: u64,
    frame: u64,
    /// It carried the peer's question (new data opening an exchange): what the sender sends
    /// next is its answer, whatever Nagle did.
    question: bool,
}

/// One sending direction's evidence so far.
#[derive(Default)]
struct Evidence {
    /// The ACK that last acknowledged all of this sender's data, until its next data segment.
    release: Option<Release>,
    /// The sender sent data since the last release was taken.
    sent_since: bool,
    /// A small segment of the sender's is unacknowledged.
    small_out: bool,
    /// Small segments sent while another small one was unacknowledged: what Nagle does not
    /// do (save when a program pushes a burst at once: a cork, MSG_MORE, a close).
    beside: u64,
    /// When the sender's last data segment passed, and its first.
    last_data_us: Option<u64>,
    first_data_us: Option<u64>,
    /// The smallest small payload the sender sent.
    smallest: u32,
    /// Small data segments counted, clocked ones, and their queued time, µs.
    segments: u64,
    clocked: u64,
    queued_us: u64,
    /// Clocked segments that carried at least twice the smallest payload: writes merged.
    merged: u64,
    /// The first clocked segments and their releasing ACKs.
    kept: Vec<(At, At)>,
}

/// One flow's ACK-clock evidence, per sending direction.
#[derive(Default)]
pub(super) struct Clock {
    dirs: [Evidence; 2],
}

impl Clock {
    /// The peer of `sender` acknowledged new data of `sender`'s: a release if that was all of
    /// it (sequence tracking has retired what it covered). `question`: the acknowledging
    /// segment carried the peer's question.
    pub(super) fn on_ack(
        &mut self,
        sender: Direction,
        seq: &[Sequence; 2],
        us: u64,
        frame: u64,
        question: bool,
    ) {
        let e = &mut self.dirs[sender];
        if seq[sender].all_acked() {
            e.small_out = false;
            if e.sent_since && e.release.is_none() {
                e.release = Some(Release {
                    us,
                    frame,
                    question,
                });
            }
        }
    }

    /// The client asked (its new data, after the server's turn): the server's pending
    /// release, if its ACK came first on its own, now comes with a question too, and what the
    /// server sends next is its answer.
    pub(super) fn on_question(&mut self, server: Direction) {
        if let Some(r) = &mut self.dirs[server].release {
            r.question = true;
        }
    }

    /// A data segment from `sender` (`retransmit`: it carries bytes sent before).
    #[allow(clippy::too_many_arguments)] // one segment's facts, as the flow has them
    pub(super) fn on_data(
        &mut self,
        sender: Direction,
        seq: &[Sequence; 2],
        len: u32,
        options: u32,
        retransmit: bool,
        us: u64,
        frame: u64,
    ) {
        if retransmit {
            return;
        }
        let window = release_bounds(seq, sender);
        let small = sequence::sizes(seq, sender).is_small(len, options);
        let e = &mut self.dirs[sender];
        // A segment that follows the peer's question is its answer: nothing tells from the
        // wire whether any of it had queued behind the ACK that came with the question.
        let release = e.release.take().filter(|r| !r.question);
        let previous = e.last_data_us.replace(us);
        e.first_data_us.get_or_insert(us);
        e.sent_since = true;
        if !small || seq[sender].nagle_off {
            return;
        }
        if e.segments == 0 || len < e.smallest {
            e.smallest = len;
        }
        e.segments += 1;
        e.beside += u64::from(e.small_out);
        e.small_out = true;
        let (Some(rel), Some(prev)) = (release, previous) else {
            return;
        };
        let gap = us.saturating_sub(rel.us);
        if (window.0..=window.1).contains(&gap) {
            e.clocked += 1;
            e.merged += u64::from(u64::from(len) >= 2 * u64::from(e.smallest));
            e.queued_us += us.saturating_sub(prev) / 2;
            if e.kept.len() < KEPT {
                e.kept
                    .push((At::new(frame, us), At::new(rel.frame, rel.us)));
            }
        }
    }

    /// The directions the rule finds ACK-clocked, client's first.
    pub(super) fn report(&self, seq: &[Sequence; 2], sides: &[Side; 2]) -> Vec<AckClocked> {
        let mut out = Vec::new();
        for d in Direction::BOTH {
            let e = &self.dirs[d];
            let window_us = match (e.first_data_us, e.last_data_us) {
                (Some(a), Some(b)) => b - a,
                _ => 0,
            };
            // Nagle must not be seen off, and writes must be seen to merge (see the module
            // docs).
            let off = seq[d].nagle_off || e.beside * 4 >= e.segments;
            if off || e.merged < MIN_MERGED.max(e.clocked / 20) {
                continue;
            }
            let evidence = rule::ClockEvidence {
                releases: e.clocked,
                held_us: e.queued_us,
                window_us,
                connections: 1,
                data_segments: Some(e.segments),
            };
            let Ok(c) = rule::judge_clock(&evidence) else {
                continue;
            };
            out.push(AckClocked {
                sender: sides[d].addr.clone(),
                direction: super::judge::direction_name(d),
                clocked: e.clocked,
                segments: e.segments,
                share: e.clocked as f64 / e.segments.max(1) as f64,
                queued_s: e.queued_us as f64 / 1e6,
                queued_per_s: c.held_ms_per_s / 1000.0,
                mean_queued_us: e.queued_us / e.clocked.max(1),
                window_s: window_us as f64 / 1e6,
                first: e
                    .kept
                    .iter()
                    .map(|&(segment, ack)| super::output::ClockedSegment { segment, ack })
                    .collect(),
            });
        }
        out
    }
}

/// When after its releasing ACK a clocked segment of `sender`'s may pass the capture point:
/// `(earliest, latest)` µs (see the module docs).
fn release_bounds(seq: &[Sequence; 2], sender: Direction) -> (u64, u64) {
    let peer = &seq[sender.peer()];
    let side = sequence::receiver_side_us(seq, sender.peer());
    let spread = peer.spread_us;
    let earliest = if peer.handshake_us.is_some() {
        rule::release_window_us(side, spread).0
    } else {
        0
    };
    let latest = side + (side / 4).max(2 * spread) + CLOCK_SLACK_US;
    (earliest, latest)
}
