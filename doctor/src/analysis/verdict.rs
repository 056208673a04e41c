//! The verdict for people ([`FlowReport::verdict`](super::FlowReport::verdict)): per side
//! whose writes stalled, who splits writes and who delays ACKs, then the fix at the sender and
//! at the receiver; without a stall, "no Nagle stall" and what was seen instead. Also the
//! words for a [`Pattern`] and a [`CapturePoint`].

use super::direction::Direction;
use super::judge::Findings;
use super::output::{CapturePoint, Pattern, Side};
use crate::rule::{self, AckTimer};

impl Pattern {
    /// What the sender does, for people.
    fn describe(self) -> &'static str {
        match self {
            Pattern::RequestSplit => "sends each request as two or more writes",
            Pattern::HeaderThenBody => "sends each response as a header write then a body write",
            Pattern::TinyTrailingFrame => "sends a tiny trailing frame after each message",
            Pattern::SmallWrites => "sends small writes back to back",
        }
    }
}

impl CapturePoint {
    /// For people.
    pub fn describe(self) -> &'static str {
        match self {
            CapturePoint::Local => "on the same host or LAN",
            CapturePoint::ClientEnd => "captured at the client's end",
            CapturePoint::ServerEnd => "captured at the server's end",
            CapturePoint::Between => "captured between the ends",
            CapturePoint::Unknown => "capture point unknown",
        }
    }
}

/// What the verdict needs to know of the path, to name a receiver's timer by what was
/// measured.
pub(super) struct Path {
    /// The round trip (the two sides' fastest ACKs), µs.
    pub(super) rtt_us: u64,
    /// The IP TTL each side's packets reached the capture with (client first).
    pub(super) ttl: [Option<u8>; 2],
}

/// The verdict lines of a flow with these `sides` (counters final), `found`, the receiver's
/// timer and the `path`.
pub(super) fn verdict(
    sides: &[Side; 2],
    found: &Findings,
    timer: Option<AckTimer>,
    path: &Path,
) -> Vec<String> {
    let mut out = Vec::new();
    for d in Direction::BOTH {
        let side = &sides[d];
        if side.stalls == 0 {
            continue;
        }
        let pattern = found.usual_pattern(d);
        let peer = &sides[d.peer()].addr;
        let timer = timer.unwrap_or(AckTimer::Linux40ms);
        let mean_us = found.lost[d].total_us / side.stalls;
        out.push(format!(
            "{} {} and {peer} delays its ACKs ({}): {} stall(s), {:.1} ms lost, worst {:.1} ms",
            side.addr,
            pattern.describe(),
            timer.describe_measured(mean_us, path.rtt_us, path.ttl[d.peer()]),
            side.stalls,
            found.lost[d].total_us as f64 / 1000.0,
            found.lost[d].worst_us as f64 / 1000.0,
        ));
        out.push(format!(
            "fix at the sender ({}): {}",
            side.addr,
            rule::SENDER_FIX
        ));
        out.push(format!(
            "or at the receiver ({peer}): {}",
            timer.receiver_fix()
        ));
    }
    if out.is_empty() {
        out.push(no_stall(sides, found.delayed_count));
    }
    out
}

/// "no Nagle stall", and what the flow had instead.
fn no_stall(sides: &[Side; 2], delayed_acks: u64) -> String {
    let mut seen = Vec::new();
    let count = |n: u64, what: &str| (n > 0).then(|| format!("{n} {what}"));
    let s = |f: fn(&Side) -> u64| sides.iter().map(f).sum::<u64>();
    seen.extend(count(
        s(|x| x.retransmission_timeouts),
        "retransmission timeout(s)",
    ));
    seen.extend(count(
        s(|x| x.retransmissions) - s(|x| x.retransmission_timeouts),
        "fast retransmission(s)",
    ));
    seen.extend(count(s(|x| x.zero_window_waits), "zero-window wait(s)"));
    seen.extend(count(s(|x| x.keepalives), "keep-alive probe(s)"));
    seen.extend(count(
        delayed_acks,
        "delayed ACK(s) that no write waited for",
    ));
    if seen.is_empty() {
        "no Nagle stall".to_string()
    } else {
        format!("no Nagle stall; {}", seen.join(", "))
    }
}
