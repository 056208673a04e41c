//! The verdict for people ([`FlowReport::verdict`](super::FlowReport::verdict)): per side
//! whose writes stalled, who splits writes and who delays ACKs, then the fix at the sender and
//! at the receiver (the receiver's first when the capture was taken at its end); without a stall, "no Nagle stall" and what was seen instead. Also the
//! words for a [`Pattern`] and a [`CapturePoint`], and for the budget: the cause that took
//! most of the time waited, what to do about each cause, and each slow exchange's finding.

use super::direction::Direction;
use super::judge::Findings;
use super::output::{
    AckClocked, Budget, CapturePoint, Cause, Finding, FindingFrame, Pattern, Side,
};
use crate::rule::{self, AckTimer};

impl Pattern {
    /// What the sender does, for people.
    fn describe(self) -> &'static str {
        match self {
            Pattern::RequestSplit => "sends each request as two or more writes",
            Pattern::HeaderThenBody => "sends each response as a header write then a body write",
            Pattern::TinyTrailingFrame => "sends a tiny trailing frame after each message",
            Pattern::SmallWrites => "sends small writes back to back",
            Pattern::EventStream => {
                "streams small messages one by one (events, tokens, a feed), each held behind the last"
            }
            Pattern::TlsFirstAnswer => {
                "holds each connection's first answer behind the TLS 1.3 session tickets it sent as the handshake ended"
            }
            Pattern::RelayHop => {
                "relays onto this hop, piece by piece, what reaches it on another connection (a relay's hop without TCP_NODELAY)"
            }
        }
    }

    /// What the sender does, for people; a relay's hop names the flow it relays.
    fn describe_in(self, found: &Findings, d: Direction) -> String {
        let from = found
            .stalls
            .iter()
            .filter(|s| s.direction == super::judge::direction_name(d))
            .find_map(|s| s.relayed_from);
        match (self, from) {
            (Pattern::RelayHop, Some(n)) => format!(
                "relays onto this hop, piece by piece, what reaches it on flow {n} (a relay's hop without TCP_NODELAY)"
            ),
            _ => self.describe().to_string(),
        }
    }
}

impl Pattern {
    /// The fix at the sender, for this shape of held write.
    fn sender_fix(self) -> &'static str {
        match self {
            Pattern::EventStream => {
                "set TCP_NODELAY (each message is written when it is ready: there is nothing to coalesce), or run the program under `nagless run`"
            }
            Pattern::TlsFirstAnswer => {
                "set TCP_NODELAY on the server's sockets, or run it under `nagless run` (either sends the answer behind the tickets at once)"
            }
            Pattern::RelayHop => {
                "set TCP_NODELAY on the relay's socket of this hop, as on its other side, or run the relay under `nagless run`"
            }
            _ => rule::SENDER_FIX,
        }
    }
}

impl CapturePoint {
    /// For people.
    pub(crate) fn describe(self) -> &'static str {
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
    /// Where the capture was taken: the side at whose end it was is the one the user
    /// controls, and its fix comes first.
    pub(super) point: CapturePoint,
}

impl CapturePoint {
    /// Whether the capture was taken at the end of side `d`.
    fn at(self, d: Direction) -> bool {
        matches!(
            (self, d),
            (CapturePoint::ClientEnd, Direction::Client)
                | (CapturePoint::ServerEnd, Direction::Server)
        )
    }
}

/// The verdict lines of a flow with these `sides` (counters final), `found`, the receiver's
/// timer and the `path`, that lasted `duration_us`.
pub(super) fn verdict(
    sides: &[Side; 2],
    found: &Findings,
    timer: Option<AckTimer>,
    path: &Path,
    answers: Option<(Direction, (u64, usize))>,
    duration_us: u64,
    opened: Opened,
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
            pattern.describe_in(found, d),
            timer.describe_measured(mean_us, path.rtt_us, path.ttl[d.peer()]),
            side.stalls,
            found.lost[d].total_us as f64 / 1000.0,
            found.lost[d].worst_us as f64 / 1000.0,
        ));
        let sender = format!("at the sender ({}): {}", side.addr, pattern.sender_fix());
        // (Captured at the receiver's end: that side is the one the user has in hand.)
        let receiver = if path.point.at(d.peer()) {
            format!(
                "at the receiver ({peer}, where this capture was taken): {}",
                timer.receiver_fix()
            )
        } else {
            format!("at the receiver ({peer}): {}", timer.receiver_fix())
        };
        let (first, second) = if path.point.at(d.peer()) {
            (receiver, sender)
        } else {
            (sender, receiver)
        };
        out.push(format!("fix {first}"));
        out.push(format!("or {second}"));
    }
    if out.is_empty() {
        let mut line = no_stall(sides, found.delayed_count, opened);
        if let Some(longest) = longest_wait(sides, duration_us) {
            line += &format!("; {longest}");
        }
        // The honest negative: the time was the program's.
        if let Some((d, (median, n))) = answers.filter(|(_, (m, n))| {
            *m >= super::answer::NOTABLE_US && *n >= super::answer::MIN_ANSWERS
        }) {
            line += &format!(
                "; {} answered after ~{:.0} ms (median of {n} answers, its side of the round trip taken off): the time is the program's, not the network's",
                sides[d].addr,
                median as f64 / 1000.0
            );
        }
        out.push(line);
    }
    out
}

/// A span of time for people: "180 ms", "1.80 s".
fn span(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

/// A wait worth naming: at least this long, ms.
const NOTABLE_WAIT_MS: f64 = 20.0;

/// Without a stall, the longest of the waits measured (each kind totalled per side), if it is
/// worth naming: retransmission timeouts (the path lost packets) or a zero window (a receiver
/// that read nothing), with the side it belongs to, its share of the flow (the reader judges
/// it) and what to look at.
fn longest_wait(sides: &[Side; 2], duration_us: u64) -> Option<String> {
    let (w, side) = longest_measured(sides)?;
    let (what, meaning) = match w.cause {
        Cause::LossRecovery => (
            format!("retransmission timeouts of {}'s data", sides[side].addr),
            "the path lost packets (look at loss, not at the programs)",
        ),
        _ => (
            format!("{}'s zero window", sides[side].addr),
            "its application stopped reading (look at what it does between reads)",
        ),
    };
    Some(format!(
        "the longest of these waits: {what}, {} in all of the flow's {}: {meaning}",
        span(w.ms),
        span(duration_us as f64 / 1000.0)
    ))
}

/// A wait the counters measured: its cause (loss recovery for retransmission timeouts, the
/// sender's; a zero window, the receiver's) and its total, ms.
struct Measured {
    cause: Cause,
    ms: f64,
}

/// The longest wait the counters measured, and whose side it is (0: the client's), if it is
/// worth naming ([`NOTABLE_WAIT_MS`] or more).
fn longest_measured(sides: &[Side; 2]) -> Option<(Measured, usize)> {
    let mut waits = Vec::new();
    for (i, side) in sides.iter().enumerate() {
        waits.push((
            Measured {
                cause: Cause::LossRecovery,
                ms: side.retransmission_timeout_ms,
            },
            i,
        ));
        waits.push((
            Measured {
                cause: Cause::ZeroWindow,
                ms: side.zero_window_ms,
            },
            i,
        ));
    }
    waits
        .into_iter()
        .max_by(|a, b| a.0.ms.total_cmp(&b.0.ms))
        .filter(|(w, _)| w.ms >= NOTABLE_WAIT_MS)
}

/// How the connection opened, as the capture saw it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Opened {
    /// The client's SYNs: copies of one, sent again while unanswered.
    pub(super) syns: u32,
    /// From the first to the last, ms.
    pub(super) retried_ms: f64,
    /// The server answered with its SYN-ACK.
    pub(super) answered: bool,
    /// The server answered with a reset.
    pub(super) refused: bool,
}

/// What the connection's opening says, if it says something: refused, or its SYN sent again
/// (the client's connect retries: on Linux after 1 s, then doubling), answered at last or
/// never.
fn opening(o: Opened, sides: &[Side; 2]) -> Option<String> {
    let (client, server) = (&sides[0].addr, &sides[1].addr);
    let (n, span) = (o.syns, span(o.retried_ms));
    if o.refused {
        let retried = if n > 1 {
            format!(", after {n} SYNs over {span}")
        } else {
            String::new()
        };
        return Some(format!(
            "the connection was refused: {server} answered {client}'s SYN with a reset{retried} (nothing listens there, or a firewall rejects it)"
        ));
    }
    if n < 2 {
        return None;
    }
    Some(if o.answered {
        format!(
            "{client} sent its SYN {n} times before {server} answered: {span} of connect retries (a SYN or its answer lost or late, or a listen queue full)"
        )
    } else {
        format!(
            "{client}'s SYN went unanswered: sent {n} times over {span} (connect retries): {server} is down, filtered, or its listen queue is full"
        )
    })
}

/// "no Nagle stall", and what the flow had instead.
fn no_stall(sides: &[Side; 2], delayed_acks: u64, opened: Opened) -> String {
    let mut seen = Vec::new();
    let count = |n: u64, what: &str| (n > 0).then(|| format!("{n} {what}"));
    let s = |f: fn(&Side) -> u64| sides.iter().map(f).sum::<u64>();
    let ms = |f: fn(&Side) -> f64| sides.iter().map(f).sum::<f64>();
    seen.extend(
        count(
            s(|x| x.retransmission_timeouts),
            "retransmission timeout(s)",
        )
        .map(|c| format!("{c} ({} waited)", span(ms(|x| x.retransmission_timeout_ms)))),
    );
    seen.extend(count(
        s(|x| x.retransmissions) - s(|x| x.retransmission_timeouts),
        "fast retransmission(s)",
    ));
    seen.extend(
        count(s(|x| x.zero_window_waits), "zero-window wait(s)")
            .map(|c| format!("{c} ({} in all)", span(ms(|x| x.zero_window_ms)))),
    );
    seen.extend(count(s(|x| x.keepalives), "keep-alive probe(s)"));
    seen.extend(count(
        delayed_acks,
        "delayed ACK(s) that no write waited for",
    ));
    let mut line = "no Nagle stall".to_string();
    if let Some(o) = opening(opened, sides) {
        line += &format!("; {o}");
    }
    if !seen.is_empty() {
        line += &format!("; {}", seen.join(", "));
    }
    line
}

/// What to do about an ACK-clocked sender.
pub(super) const CLOCKED_FIX: &str =
    "set TCP_NODELAY, run it under `nagless run`, or `nagless fix --pid PID --nodelay`";

/// `n` with a comma between thousands: 9,041.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The verdict line of an ACK-clocked direction.
pub(super) fn clocked(c: &AckClocked) -> String {
    format!(
        "ACK-clocked, {} ({}): {} of {} small segments ({:.0} %) left as an ACK arrived; writes queued behind the clock ~{:.2} s per second (~{} µs per segment); Nagle is on: {CLOCKED_FIX}",
        c.direction,
        c.sender,
        thousands(c.clocked),
        thousands(c.segments),
        c.share * 100.0,
        c.queued_per_s,
        thousands(c.mean_queued_us),
    )
}

/// The finding the Wireshark plugin marks for an ACK-clocked direction: its first clocked
/// segments and their releasing ACKs.
pub(super) fn clocked_finding(c: &AckClocked) -> Finding {
    let mut frames = Vec::with_capacity(2 * c.first.len());
    for s in &c.first {
        frames.push(FindingFrame {
            frame: s.ack.frame,
            role: "release",
        });
        frames.push(FindingFrame {
            frame: s.segment.frame,
            role: "clocked",
        });
    }
    Finding {
        kind: "ack-clocked",
        frames,
        delay_ms: c.mean_queued_us as f64 / 1000.0,
        direction: c.direction,
        summary: format!(
            "{} is ACK-clocked: {} of {} small segments ({:.0} %) left as an ACK arrived; writes queued ~{:.2} s per second; Nagle is on: {CLOCKED_FIX}",
            c.sender,
            thousands(c.clocked),
            thousands(c.segments),
            c.share * 100.0,
            c.queued_per_s
        ),
    }
}

/// What to do about a sender's own hold.
pub(super) const HOLD_FIX: &str = nagless_stall_rule::CORK_FIX;

/// The verdict line of a direction whose sender held its own writes.
pub(super) fn sender_hold(h: &super::output::SenderHold) -> String {
    let mean = h.held_ms / h.count.max(1) as f64;
    format!(
        "not Nagle: {} holds its own writes, {}: {} answer(s) finished by a small segment ~{mean:.0} ms after they began, with nothing in flight and the peer waiting: a cork left on (TCP_CORK, or a last send with MSG_MORE), released by the kernel's 200 ms ceiling (or a program that takes as long, every time, to write the rest); {HOLD_FIX}",
        h.sender, h.direction, h.count
    )
}

/// The finding the Wireshark plugin marks for a sender's own hold.
pub(super) fn sender_hold_finding(h: &super::output::SenderHold) -> Finding {
    let mut frames = Vec::with_capacity(2 * h.first.len());
    for t in &h.first {
        frames.push(FindingFrame {
            frame: t.previous.frame,
            role: "previous",
        });
        frames.push(FindingFrame {
            frame: t.held.frame,
            role: "held",
        });
    }
    Finding {
        kind: "sender-hold",
        frames,
        delay_ms: h.held_ms / h.count.max(1) as f64,
        direction: h.direction,
        summary: format!(
            "{} held this small segment itself (a cork left on, released by the kernel's 200 ms ceiling), not Nagle: {HOLD_FIX}",
            h.sender
        ),
    }
}

/// A cause worth naming in the verdict: this much time or more, ms.
const NOTABLE_MS: f64 = 20.0;

/// Without a stall, the verdict's clause for the cause that took most of the time waited
/// (idle left out), if it took [`NOTABLE_MS`] or more: what it was, whose, its share, and
/// what to do.
///
/// Not when that cause is one the line already named (the same words twice), with nearly all
/// of its time: the longest of the waits measured (a retransmission timeout's loss recovery,
/// or a zero window, on the same side), or the client's connect retries.
pub(super) fn most_waited(b: &Budget, sides: &[Side; 2], opened: Opened) -> Option<String> {
    let waited: f64 = b
        .causes
        .iter()
        .filter(|s| s.cause != Cause::Idle)
        .map(|s| s.ms)
        .sum();
    let top = b.causes.iter().find(|s| s.cause != Cause::Idle)?;
    if top.ms < NOTABLE_MS {
        return None;
    }
    // (Named already when the clause's wait is the same cause and side, and nearly all of
    // its time.)
    let named = |ms: f64| ms >= top.ms * 0.9;
    let side_of = |i: usize| Some(if i == 0 { "client" } else { "server" });
    if longest_measured(sides)
        .is_some_and(|(w, i)| w.cause == top.cause && side_of(i) == top.side && named(w.ms))
    {
        return None;
    }
    if opened.syns > 1
        && top.cause == Cause::LossRecovery
        && top.side == Some("client")
        && named(opened.retried_ms)
    {
        return None;
    }
    let whose = match top.side {
        Some("client") => format!("{}'s ", sides[0].addr),
        Some(_) => format!("{}'s ", sides[1].addr),
        None => String::new(),
    };
    let mut line = format!(
        "most of the time waited (idle left out) was {whose}{}: {:.1} ms of {:.1} ms ({:.0} %)",
        top.cause.describe(),
        top.ms,
        waited,
        top.ms * 100.0 / waited
    );
    if let Some(fix) = top.fix {
        line += &format!(": {fix}");
    }
    Some(line)
}

/// Without a stall, the connection's first wait, if it is worth naming: the time from its
/// handshake to its first data, the sender's own (idle in the budget), when it is
/// [`NOTABLE_MS`] or more and no other cause but later idle took as long. A program that
/// connects and then takes a second to send its request is slow to begin (the client latency
/// of a slow web request), and naming the round trips of the rest would send its reader to
/// the network.
pub(super) fn first_wait(b: &Budget, sides: &[Side; 2], handshake: bool) -> Option<String> {
    if !handshake {
        return None;
    }
    let first = b.exchanges.iter().find(|e| e.index == 0)?;
    let idle = first.causes.iter().find(|s| s.cause == Cause::Idle)?;
    let top_other = b
        .causes
        .iter()
        .find(|s| s.cause != Cause::Idle)
        .map_or(0.0, |s| s.ms);
    if idle.ms < NOTABLE_MS || idle.ms < top_other {
        return None;
    }
    let who = match idle.side {
        Some("server") => &sides[1].addr,
        _ => &sides[0].addr,
    };
    Some(format!(
        "{who} sent the connection's first data {} after its handshake: its own time, not the network's (a program slow to begin, or a connection opened before it was needed)",
        span(idle.ms)
    ))
}

/// The findings the Wireshark plugin marks for the budget: one per exchange kept that took
/// [`NOTABLE_MS`] or more, on its first frame (role `exchange`) and the frames its largest
/// cause's longest stretch lies between (roles `from`, unless that is the first frame, and
/// the cause), with the exchange's causes as its summary.
pub(super) fn budget_findings(b: &Budget) -> Vec<Finding> {
    b.exchanges
        .iter()
        .filter(|e| e.total_ms >= NOTABLE_MS)
        .filter_map(|e| {
            let top = e.causes.first()?;
            let parts: Vec<String> = e
                .causes
                .iter()
                .take(4)
                .map(|s| {
                    let side = s.side.map(|x| format!(" ({x})")).unwrap_or_default();
                    format!("{}{side} {:.1} ms", s.cause.describe(), s.ms)
                })
                .collect();
            let frame = |frame, role| FindingFrame { frame, role };
            let [from, to] = top.longest.map(|a| a.frame);
            let mut frames = vec![frame(e.start.frame, "exchange")];
            if from != e.start.frame && from != to {
                frames.push(frame(from, "from"));
            }
            frames.push(frame(to, top.cause.name()));
            Some(Finding {
                kind: "exchange-budget",
                frames,
                delay_ms: e.total_ms,
                direction: match top.side {
                    Some("server") => "server->client",
                    _ => "client->server",
                },
                summary: format!(
                    "exchange {}: {:.1} ms: {}",
                    e.index,
                    e.total_ms,
                    parts.join(", ")
                ),
            })
        })
        .collect()
}

/// What to do about time that went to `cause`, where something can be done.
pub(super) fn fix(cause: Cause) -> Option<&'static str> {
    Some(match cause {
        Cause::NagleStall => crate::rule::SENDER_FIX,
        Cause::AckClocked => super::verdict::CLOCKED_FIX,
        Cause::SenderHold => super::verdict::HOLD_FIX,
        Cause::RoundTrip => {
            "fewer round trips: reuse connections, pipeline or batch requests, or bring the ends closer"
        }
        Cause::Transfer => "fewer bytes, or a faster path: the data crossed at the path's rate",
        Cause::LossRecovery => {
            "the path lost packets: look at loss (drops, errors, full queues), not at the programs"
        }
        Cause::ZeroWindow => {
            "the receiving program stopped reading: look at what it does between reads"
        }
        Cause::ReceiveWindow => {
            "the receiver's window held the sender back: raise its receive buffer (net.ipv4.tcp_rmem, SO_RCVBUF)"
        }
        Cause::CongestionWindow => {
            "the sender's congestion window held it back (slow start, or a restart after idle: net.ipv4.tcp_slow_start_after_idle=0 keeps a reused connection's window)"
        }
        Cause::DelayedAck => {
            "the receiver delayed its ACK while the sender waited for it: TCP_QUICKACK at the receiver"
        }
        Cause::Think => "the program's own time, not the network's: profile that side",
        Cause::Idle | Cause::Unknown => return None,
    })
}
