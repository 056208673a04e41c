//! A flow's budget summed up: its labels as causes for people (`spent`), with what the
//! flow's verdict named ([`Named`]) deciding the kinds the budget left pending.

use super::super::direction::Direction;
use super::super::ledger::{Kind, Label, Stretch, Tally};
use super::super::output::{At, Cause, Spent};
use super::super::verdict;

pub(super) fn tally_total(t: &Tally) -> u64 {
    t.labels().map(|(_, us, _)| us).sum()
}

/// What the flow's verdict named, per direction: the budget's pending kinds are named so too.
#[derive(Debug, Clone, Copy, Default)]
pub(in super::super) struct Named {
    /// Found ACK-clocked.
    pub(in super::super) clocked: [bool; 2],
    /// Found holding its own writes.
    pub(in super::super) holds: [bool; 2],
    /// Per direction found ACK-clocked: the time its writes queued behind the clock, as the
    /// clock's verdict estimates it (µs), and its first clocked segment (the ACK that released
    /// it, and it) as evidence. That queueing ran while round trips did (many requests in
    /// flight): the flow's budget gives it that much of the round trips' time.
    pub(in super::super) queued: [Option<(u64, Stretch)>; 2],
}

/// Labels and their times as causes for people, most time first: a wait for the ACK of one
/// small segment is the ACK clock's in a direction found ACK-clocked, else the round trip's;
/// a segment's wait of about 200 ms is its sender's hold where its holds were named, else its
/// sender's own time.
pub(super) fn spent(
    labels: impl Iterator<Item = (Label, u64, Stretch)>,
    total_us: u64,
    named: Named,
) -> Vec<Spent> {
    let mut by: Vec<(Cause, Option<Direction>, u64, Stretch)> = Vec::new();
    for (label, us, longest) in labels {
        let (cause, side) = match (label.kind, label.side) {
            (Kind::Is(c), side) => (c, side),
            (Kind::ClockWait, Some(d)) if named.clocked[d] => (Cause::AckClocked, Some(d)),
            (Kind::ClockWait, _) => (Cause::RoundTrip, None),
            (Kind::HoldWait, Some(d)) if named.holds[d] => (Cause::SenderHold, Some(d)),
            (Kind::HoldWait, side) => (Cause::Think, side),
        };
        match by.iter_mut().find(|b| b.0 == cause && b.1 == side) {
            Some(b) => {
                b.2 += us;
                if b.3.to_us - b.3.from_us < longest.to_us - longest.from_us {
                    b.3 = longest;
                }
            }
            None => by.push((cause, side, us, longest)),
        }
    }
    by.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    by.into_iter()
        .map(|(cause, side, us, longest)| Spent {
            cause,
            side: side.map(side_name),
            ms: us as f64 / 1000.0,
            share: if total_us > 0 {
                us as f64 / total_us as f64
            } else {
                0.0
            },
            longest: [
                At::new(longest.frames[0], longest.from_us),
                At::new(longest.frames[1], longest.to_us),
            ],
            fix: verdict::fix(cause),
        })
        .collect()
}

/// Gives each ACK-clocked direction the time its writes queued behind the clock (`queued`,
/// beyond what its one-sided waits gave it already), out of the round trips' time (as much of
/// it as there is), and sorts the causes again.
pub(super) fn queue_behind_the_clock(
    causes: &mut Vec<Spent>,
    queued: &[Option<(u64, Stretch)>; 2],
    total_us: u64,
) {
    for (d, q) in Direction::BOTH.iter().zip(queued) {
        let Some((queued_us, first)) = q else {
            continue;
        };
        let side = Some(side_name(*d));
        let already: f64 = causes
            .iter()
            .filter(|s| s.cause == Cause::AckClocked && s.side == side)
            .map(|s| s.ms)
            .sum();
        let Some(path) = causes
            .iter_mut()
            .find(|s| s.cause == Cause::RoundTrip && s.side.is_none())
        else {
            continue;
        };
        let moved_ms = (*queued_us as f64 / 1000.0 - already).clamp(0.0, path.ms);
        path.ms -= moved_ms;
        match causes
            .iter_mut()
            .find(|s| s.cause == Cause::AckClocked && s.side == side)
        {
            Some(c) => c.ms += moved_ms,
            None => causes.push(Spent {
                cause: Cause::AckClocked,
                side,
                ms: moved_ms,
                share: 0.0,
                longest: [
                    At::new(first.frames[0], first.from_us),
                    At::new(first.frames[1], first.to_us),
                ],
                fix: verdict::fix(Cause::AckClocked),
            }),
        }
    }
    causes.retain(|s| s.ms > 0.0);
    for s in causes.iter_mut() {
        s.share = if total_us > 0 {
            s.ms * 1000.0 / total_us as f64
        } else {
            0.0
        };
    }
    causes.sort_by(|a, b| b.ms.total_cmp(&a.ms).then(a.cause.cmp(&b.cause)));
}

fn side_name(d: Direction) -> &'static str {
    match d {
        Direction::Client => "client",
        Direction::Server => "server",
    }
}
