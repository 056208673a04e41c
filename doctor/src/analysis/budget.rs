//! Where a flow's time went ([`Budget`], issue 51): every stretch between two of its frames
//! labelled with a cause in a [`Ledger`], so that the causes add up to the flow's first to
//! last frame.
//!
//! Time is labelled a span at a time, from one data segment (either side's) to the next, when
//! the next comes: who the flow was waiting for is known only when the wait ends.
//! - The other side answered: its side of the round trip (as the capture point sees it) is
//!   the path's, the rest its own: think time, or, before the client's next question, idle.
//!   At the receiver's end, an answer's first full segment also took its time to cross at
//!   the path's rate (the least seen between two of its sender's full segments in a row):
//!   the path's too.
//!   Before that, while ACKs of the data before came later than its way back with more still
//!   in flight, the path drained its queue: its rate's.
//! - The same side went on with no ACK of its data between: the path's rate (within a
//!   millisecond, or within half a round trip after a full segment); within a round trip after
//!   a full one, its window's wait at the receiver's end (an ACK of earlier data released it)
//!   and the rate's at the sender's (no ACK passed); else a pause of its own (think) after a
//!   small segment, and unknown after a full one.
//! - The same side went on after the peer's ACK of its data: it waited for that ACK (unless it
//!   came sooner than that ACK could release it, or, after a full segment, within half a round
//!   trip: then the path's rate paced it). Up to
//!   the round trip that wait is its window's (a full segment or more in flight: the
//!   receiver's window if that was full, else its congestion window) or, for one small
//!   segment, a round trip the ACK clock's verdict may claim; beyond the receiver's side it is
//!   the receiver's delayed ACK (or, for an ACK of two full segments or more, which a receiver
//!   sends at once, the path's queue: its rate's), beyond the sender's its own pause. After a small segment, a
//!   sender that did not send as the ACK reached it was not waiting for it: all of it is its
//!   own time.
//! - A retransmission ends its span as loss recovery.
//!
//! Evidence judged later relabels the time it covers ([`Ledger::overlay`]): a Nagle stall
//! (the ACK's delay), a sender's hold (the held segment's wait), a retransmission timeout
//! (from the segment's last sending), a zero window (closed to opened). Time a round trip
//! was never measured to split is unknown: never forced into a class.

use super::direction::Direction;
use super::ledger::{Kind, Label, Ledger};
use super::output::{self, At, Cause, ExchangeBudget};
use super::sequence::{self, Sequence};
use nagless_stall_rule::DELAYED_ACK_MIN_US;

mod paths;
mod sum;

pub(super) use paths::Paths;
use paths::{JITTER_US, SLACK_US};
pub(super) use sum::Named;
use sum::{queue_behind_the_clock, spent, tally_total};

/// Gaps between one side's segments up to this long are the path's rate, whatever their
/// size, µs.
const RATE_GAP_US: u64 = 1_000;

/// What a sender waits on when its data is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// After a small segment: Nagle's (or the program's) round trip.
    Small,
    /// After a full segment, the receiver's window not full: its congestion window.
    Congestion,
    /// The receiver's window full.
    Receive,
    /// After a full segment, the receiver's window not known (no handshake captured): which
    /// window held the sender back is not told.
    Unknown,
}

impl Wait {
    /// What `d` waits on after a segment, `full` or not, with what it has in flight now. (A
    /// full segment says the sender had more to send; what it has in flight is as the
    /// capture point sees it, which at the receiver's end is little more than the segment.)
    pub(super) fn of(seq: &[Sequence; 2], d: Direction, full: bool) -> Wait {
        let in_flight = sequence::in_flight(seq, d);
        let segment = u64::from(sequence::sizes(seq, d).full_segment().0);
        match sequence::window(seq, d.peer()) {
            _ if !full => Wait::Small,
            // The receiver's window is used up (to a segment's room).
            Some(w) if in_flight + segment > w => Wait::Receive,
            Some(_) => Wait::Congestion,
            None => Wait::Unknown,
        }
    }

    fn label(self, d: Direction) -> Label {
        match self {
            Wait::Small => Label {
                kind: Kind::ClockWait,
                side: Some(d),
            },
            Wait::Congestion => Label::of(Cause::CongestionWindow, Some(d)),
            Wait::Receive => Label::of(Cause::ReceiveWindow, Some(d)),
            Wait::Unknown => Label::of(Cause::Unknown, None),
        }
    }
}

/// A data segment, as the budget needs it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Data {
    pub(super) retransmit: bool,
    /// It opens an exchange: the first speaker's first segment of a turn.
    pub(super) opens_exchange: bool,
    /// It is the client's first segment of a turn: the time before it, past the way to it,
    /// is the client's idle time (a server speaks when asked, or first: its time is think
    /// time).
    pub(super) asks: bool,
    /// It was a full segment.
    pub(super) full: bool,
    /// What its sender waits on now, with it in flight.
    pub(super) wait: Wait,
    /// What its sender has in flight with it, bytes (as the capture point sees it).
    pub(super) in_flight: u64,
    /// Its sender's full segment, bytes of payload.
    pub(super) segment: u32,
}

/// The last data segment.
#[derive(Debug, Clone, Copy)]
struct Last {
    sender: Direction,
    full: bool,
    wait: Wait,
    in_flight: u64,
}

/// At the sender's end, a wait for an ACK given to the congestion window, kept until the ACKs
/// after it show whether the path's queue was busy all along (then it was the path's rate).
#[derive(Debug, Clone, Copy)]
struct WindowWait {
    sender: Direction,
    from_us: u64,
    to_us: u64,
    /// What the sender had in flight as it began.
    in_flight: u64,
    /// The ACK that ended it, and the last since: when.
    first_ack_us: u64,
    last_ack_us: u64,
    /// Bytes the ACKs after the first acknowledged.
    acked_since: u64,
}

impl WindowWait {
    /// Whether the bytes in flight as the wait began took longer than a round trip (`rt_us`)
    /// to cross at the rate the ACKs since came at: the path's queue was never empty, and
    /// the wait was its rate's, not the window's (a window that holds a sender back leaves
    /// the path idle).
    fn queue_busy(&self, rt_us: u64) -> bool {
        let t = self.last_ack_us.saturating_sub(self.first_ack_us);
        self.acked_since > 0
            && t > 0
            && u128::from(self.in_flight) * u128::from(t)
                > u128::from(self.acked_since) * u128::from(rt_us)
    }
}

/// One flow's budget, as it goes.
pub(super) struct Budget {
    ledger: Ledger,
    /// The frame the ledger stands at.
    frame: u64,
    last: Option<Last>,
    /// The peer's first ACK of the last sender's data since it: when, its frame, and the bytes
    /// of new data it acknowledged.
    acked: Option<(u64, u64, u64)>,
    /// The peer's last ACK of the last sender's data since it that left more than a full
    /// segment unacknowledged: when, and its frame.
    draining: Option<(u64, u64)>,
    /// The ACKs after that one: the last (when, and its frame), and the longest gap between
    /// two of them, µs.
    drain_tail: Option<(u64, u64, u64)>,
    /// The first side to close (FIN or RST), when, and its frame; and when the other did.
    closed: Option<(Direction, u64, u64)>,
    closed_too: Option<(u64, u64)>,
    /// A wait given to the congestion window, until the ACKs after it are judged.
    window_wait: Option<WindowWait>,
    /// When the peer's last ACKs of the last sender's data passed (the newest last), since
    /// that side began its turn: at most one a millisecond ([`ACK_SPACING_US`]), so that
    /// they reach back a round trip however often the peer ACKs.
    peer_acks: [Option<u64>; PEER_ACKS],
    /// The newest of them, kept or not.
    last_peer_ack: Option<u64>,
    /// Per sender, the least time seen between two of its full segments in a row with no
    /// ACK of its data between, µs: at the receiver's end of a path with a rate, a full
    /// segment's time to cross at that rate (at the sender's end, or on a fast path, about
    /// nothing).
    crossing_us: [Option<u64>; 2],
    exchange: u64,
}

/// ACKs kept to tell whether one of them released a segment, and the least time between two
/// kept, µs: together they reach back 31 ms or more.
const PEER_ACKS: usize = 32;
const ACK_SPACING_US: u64 = 1_000;

impl Budget {
    /// The budget of a flow whose first frame is `frame`, at `us`.
    pub(super) fn new(us: u64, frame: u64) -> Budget {
        Budget {
            ledger: Ledger::new(us),
            frame,
            last: None,
            acked: None,
            draining: None,
            drain_tail: None,
            closed: None,
            closed_too: None,
            window_wait: None,
            peer_acks: [None; PEER_ACKS],
            last_peer_ack: None,
            crossing_us: [None; 2],
            exchange: 0,
        }
    }

    /// `acker` acknowledged `newly` bytes of new data at `us`, with more than a full segment
    /// still in flight or not (`more`), in a pure ACK or on its own data (`pure` false).
    pub(super) fn on_ack(
        &mut self,
        acker: Direction,
        us: u64,
        frame: u64,
        more: bool,
        newly: u64,
        pure: bool,
    ) {
        if let Some(w) = self
            .window_wait
            .as_mut()
            .filter(|w| w.sender == acker.peer())
        {
            w.last_ack_us = us;
            w.acked_since += newly;
        }
        if self.last.is_some_and(|l| l.sender == acker.peer()) {
            self.last_peer_ack = Some(us);
            let newest = self.peer_acks[PEER_ACKS - 1];
            if newest.is_none_or(|n| us >= n + ACK_SPACING_US) {
                self.peer_acks.rotate_left(1);
                self.peer_acks[PEER_ACKS - 1] = Some(us);
            }
            self.acked.get_or_insert((us, frame, newly));
            if more {
                self.draining = Some((us, frame));
                self.drain_tail = None;
            } else if let Some((drained_us, _)) = self.draining.filter(|_| pure) {
                // (An ACK on the peer's next data came with its turn, not with the queue.)
                let (last_us, gap) = self.drain_tail.map_or((drained_us, 0), |t| (t.0, t.2));
                self.drain_tail = Some((us, frame, gap.max(us.saturating_sub(last_us))));
            }
        }
    }

    /// `d` closed (FIN or RST) at `us`.
    pub(super) fn on_close(&mut self, d: Direction, us: u64, frame: u64) {
        match self.closed {
            None => self.closed = Some((d, us, frame)),
            Some((c, ..)) if c != d => _ = self.closed_too.get_or_insert((us, frame)),
            Some(_) => {}
        }
    }

    /// A data segment from `d` at `us`: the span since the last one is labelled.
    pub(super) fn on_data(&mut self, d: Direction, us: u64, frame: u64, data: Data, p: &Paths) {
        let think = if data.asks { Cause::Idle } else { Cause::Think };
        let mine = |c| Label::of(c, Some(d));
        // A wait given to the window is judged by the first release the path's ACKs pace;
        // segments back to back keep it waiting, anything else ends it.
        let window_wait = self.window_wait.take().filter(|w| w.sender == d);
        let mut keep_wait = None;
        match self.last {
            // The time before the first data: the handshake, then the first speaker's.
            None => self.path_then(us, frame, p.answer_round_trip_us(), mine(think)),
            Some(_) if data.retransmit => self.push(us, frame, mine(Cause::LossRecovery)),
            // An answer: the way to the answerer and back, then its time. At the receiver's
            // end, a full segment's last byte comes its time at the path's rate after its
            // first: that is the path's too.
            Some(l) if l.sender != d => {
                self.drain(us, p);
                let crossing = match self.crossing_us[d] {
                    Some(c) if data.full && p.near_receiver(d) => c,
                    _ => 0,
                };
                let rate = (crossing, Label::of(Cause::Transfer, None));
                let path = Label::of(Cause::RoundTrip, None);
                let way = p.answer_way_us(l.sender);
                self.split_via(us, frame, way, path, rate, mine(think))
            }
            Some(l) => {
                // Since the last data segment, and the round trip, to judge the span by.
                let gap = us.saturating_sub(self.ledger.until_us());
                let rt = p.round_trip_us();
                if l.full && data.full && self.acked.is_none() {
                    let c = &mut self.crossing_us[d];
                    *c = Some(c.map_or(gap, |c| c.min(gap)));
                }
                match self
                    .acked
                    .filter(|&(ack_us, _, _)| !(l.full && p.too_soon(us, ack_us, d, SLACK_US)))
                {
                    // Back to back: the path's rate.
                    None if gap <= RATE_GAP_US => {
                        keep_wait = window_wait;
                        self.push(us, frame, Label::of(Cause::Transfer, None))
                    }
                    // At the receiver's end, after a full segment that filled the receiver's
                    // window, within a round trip: an ACK of earlier data opened it. (At the
                    // sender's end an ACK that opened a window would have passed.)
                    None if l.full
                        && l.wait == Wait::Receive
                        && p.near_receiver(d)
                        && rt.is_some_and(|rt| gap <= rt + SLACK_US && self.released(us, rt)) =>
                    {
                        self.push(us, frame, l.wait.label(d))
                    }
                    // After a full segment within half a round trip: the path's rate.
                    None if l.full && rt.is_some_and(|rt| gap <= rt / 2) => {
                        self.push(us, frame, Label::of(Cause::Transfer, None))
                    }
                    // At the receiver's end, after a full segment, within a round trip: an ACK of
                    // earlier data released it (a delayed ACK's receiver ACKs every other
                    // segment), its window's wait.
                    None if l.full
                        && p.near_receiver(d)
                        && rt.is_some_and(|rt| gap <= rt + SLACK_US && self.released(us, rt)) =>
                    {
                        self.push(us, frame, l.wait.label(d))
                    }
                    // At the sender's end, within a round trip and no ACK seen: no window opened;
                    // the path's rate.
                    None if l.full && rt.is_some_and(|rt| gap <= rt) => {
                        self.push(us, frame, Label::of(Cause::Transfer, None))
                    }
                    // After a full segment, longer and no ACK seen: not told.
                    None if l.full => self.push(us, frame, Label::of(Cause::Unknown, None)),
                    None => self.push(us, frame, mine(Cause::Think)),
                    // After a full segment, the window not full, a sender that went on within half a
                    // round trip: ACKs paced by the path's rate released it (its queue drained, a
                    // segment at a time), not a window waiting a whole round trip.
                    Some(_) if l.wait == Wait::Congestion && rt.is_some_and(|rt| gap < rt / 2) => {
                        self.push(us, frame, Label::of(Cause::Transfer, None));
                        // So did the wait for the first ACK before, if the path's queue held
                        // the sender's bytes all that time.
                        if let Some(w) =
                            window_wait.filter(|w| rt.is_some_and(|rt| w.queue_busy(rt)))
                        {
                            self.overlay(w.from_us, w.to_us, Label::of(Cause::Transfer, None));
                        }
                    }
                    // After a small segment, a sender that did not send as the ACK reached it was
                    // not waiting for it: the ACK passed during its own time.
                    Some((ack_us, _, _))
                        if l.wait == Wait::Small
                            && p.side_us[d.peer()]
                                .is_some_and(|side| us > ack_us + side + SLACK_US + side / 4) =>
                    {
                        self.push(us, frame, mine(Cause::Think))
                    }
                    Some((ack_us, ack_frame, newly)) => {
                        // The wait for the ACK: up to the receiver's side its window's, then the
                        // receiver's delay; from the ACK, up to the sender's side its window's,
                        // then its own pause. An ACK of two full segments or more was sent as
                        // the second came (a receiver delays only an ACK of less): its lateness
                        // was the path's queue, at its rate.
                        // (Later by less than a millisecond: the path's jitter, no timer.)
                        let waited = l.wait.label(d);
                        let from_us = self.ledger.until_us();
                        let late = ack_us.saturating_sub(from_us + p.side_us[d].unwrap_or(0));
                        let acker = if newly * 2 >= u64::from(data.segment) * 3 {
                            Label::of(Cause::Transfer, None)
                        } else if late < JITTER_US {
                            waited
                        } else {
                            Label::of(Cause::DelayedAck, Some(d.peer()))
                        };
                        self.split(ack_us, ack_frame, p.side_us[d], waited, acker);
                        self.split(us, frame, p.side_us[d.peer()], waited, mine(Cause::Think));
                        // At the sender's end (the round trip known to say so), the ACKs to come
                        // tell whether the path's queue was busy meanwhile. The wait is the
                        // window's part, not the sender's own pause after the ACK; the pace
                        // is counted from the last ACK before its end.
                        if l.wait == Wait::Congestion && rt.is_some() && !p.near_receiver(d) {
                            let last_ack = self.last_peer_ack.unwrap_or(ack_us);
                            self.window_wait = Some(WindowWait {
                                sender: d,
                                from_us,
                                to_us: p.side_us[d.peer()].map_or(ack_us, |s| (ack_us + s).min(us)),
                                in_flight: l.in_flight,
                                first_ack_us: last_ack,
                                last_ack_us: last_ack,
                                acked_since: 0,
                            });
                        }
                    }
                }
            }
        }
        if data.opens_exchange {
            self.exchange += 1;
        }
        if self.last.is_some_and(|l| l.sender != d) {
            self.peer_acks = [None; PEER_ACKS];
            self.last_peer_ack = None;
        }
        self.last = Some(Last {
            sender: d,
            full: data.full,
            wait: data.wait,
            in_flight: data.in_flight,
        });
        self.acked = None;
        self.draining = None;
        self.drain_tail = None;
        if self.window_wait.is_none() {
            self.window_wait = keep_wait;
        }
    }

    /// Whether one of the peer's ACKs of this turn's data passed a round trip (`rt_us`, less
    /// a quarter and the scheduler's slack) to two before `us` (the path's jitter allowed):
    /// at the receiver's end, the ACK that may have released data arriving at `us`. Without
    /// one (the turn's first segments, sent before any ACK of them), a wait within a round
    /// trip was the path's (its rate, its jitter), not a window's.
    fn released(&self, us: u64, rt_us: u64) -> bool {
        let soonest = (rt_us - rt_us / 4).saturating_sub(SLACK_US);
        self.peer_acks.iter().flatten().any(|&a| {
            let since = us.saturating_sub(a);
            since >= soonest && since <= 2 * rt_us + SLACK_US
        })
    }

    /// ACKs of the last sender's data still came, leaving more in flight, later than their
    /// way back after its last segment: that data queued on the path, which drained it at its
    /// rate (up to `to_us`). The ACKs that follow such an ACK, each within half a round trip
    /// (and half a delayed-ACK timer) of the one before, acknowledge the last of the queue
    /// as it came: the drain goes on to the last of them.
    fn drain(&mut self, to_us: u64, p: &Paths) {
        let (Some(l), Some(mut last)) = (self.last, self.draining) else {
            return;
        };
        let Some(way) = p.base_us[l.sender] else {
            return;
        };
        let paced = |gap: u64| {
            p.round_trip_us()
                .is_some_and(|rt| gap < rt / 2 && gap < DELAYED_ACK_MIN_US / 2)
        };
        if let Some((us, frame, _)) = self.drain_tail.filter(|t| paced(t.2)) {
            last = (us, frame);
        }
        let (ack_us, ack_frame) = last;
        let drained = ack_us.saturating_sub(way).min(to_us);
        if drained > self.ledger.until_us() {
            self.push(drained, ack_frame, Label::of(Cause::Transfer, None));
        }
    }

    /// The client sent its SYN again until `us` (frame `frame`, the last copy): the time since
    /// the first was its connect's retransmission timeouts, loss recovery.
    pub(super) fn handshake_retried(&mut self, us: u64, frame: u64) {
        self.push(
            us,
            frame,
            Label::of(Cause::LossRecovery, Some(Direction::Client)),
        );
    }

    /// The time from `from_us` to `to_us` went to `label` instead, as later evidence shows.
    pub(super) fn overlay(&mut self, from_us: u64, to_us: u64, label: Label) {
        self.ledger.overlay(from_us, to_us, label);
    }

    /// Where the labelled time ends now, µs.
    pub(super) fn until_us(&self) -> u64 {
        self.ledger.until_us()
    }

    /// Whether enough is open to fold: judge what is pending and overlay it first.
    pub(super) fn full(&self) -> bool {
        self.ledger.full()
    }

    pub(super) fn fold_older(&mut self) {
        self.ledger.fold_older();
    }

    /// The flow ended at `us`, frame `frame`: the time since the last data is labelled, and
    /// all of it summed up with what the flow's verdict `named`.
    pub(super) fn close(mut self, us: u64, frame: u64, p: &Paths, named: Named) -> output::Budget {
        let unknown = Label::of(Cause::Unknown, None);
        match (self.last, self.closed) {
            (None, _) => self.path_then(us, frame, p.round_trip_us(), unknown),
            (Some(l), Some((c, close_us, close_frame))) => {
                // Up to the close: the closing side's idle time (after the way to it, if the
                // other side spoke last); then the closing handshake, and the other's idle.
                let idle = |d| Label::of(Cause::Idle, Some(d));
                if c == l.sender {
                    self.drain(close_us, p);
                    self.push(close_us, close_frame, idle(c));
                    self.drain(us, p);
                } else {
                    self.drain(close_us, p);
                    self.path_then(close_us, close_frame, p.side_us[l.sender], idle(c));
                }
                // The other's FIN passes the capture point the way to it and back after the
                // closer's (the far end's, where a middlebox acknowledges for it; none if it
                // spoke since, a half-close), and the last ACK the way to the closer and back.
                match self.closed_too.filter(|&(too_us, _)| too_us <= us) {
                    Some((too_us, too_frame)) => {
                        let spoke = l.sender != c && self.ledger.until_us() > close_us;
                        let way = if spoke { Some(0) } else { p.answer_way_us(c) };
                        self.path_then(too_us, too_frame, way, idle(c.peer()));
                        self.path_then(us, frame, p.side_us[c.peer()], idle(c));
                    }
                    None => self.path_then(us, frame, p.round_trip_us(), idle(c.peer())),
                }
            }
            // The capture ended with the flow open.
            (Some(l), None) => {
                self.drain(us, p);
                self.path_then(us, frame, p.side_us[l.sender], unknown)
            }
        }
        let (tally, exchanges) = self.ledger.close();
        let total_us = tally_total(&tally);
        let mut causes = spent(tally.labels(), total_us, named);
        queue_behind_the_clock(&mut causes, &named.queued, total_us);
        output::Budget {
            total_ms: total_us as f64 / 1000.0,
            causes,
            exchanges: exchanges
                .iter()
                .map(|e| {
                    let total_us = e.total_us();
                    ExchangeBudget {
                        index: e.index,
                        start: At::new(e.start.0, e.start.1),
                        total_ms: total_us as f64 / 1000.0,
                        causes: spent(e.labels(), total_us, named),
                    }
                })
                .collect(),
        }
    }

    fn push(&mut self, to_us: u64, frame: u64, label: Label) {
        let from = self.frame;
        self.ledger.push(to_us, [from, frame], label, self.exchange);
        self.frame = frame;
    }

    /// Up to `to_us`: the path's round trip for `path_us` (all of it unknown if that was never
    /// measured), then `rest`.
    fn path_then(&mut self, to_us: u64, frame: u64, path_us: Option<u64>, rest: Label) {
        self.split(
            to_us,
            frame,
            path_us,
            Label::of(Cause::RoundTrip, None),
            rest,
        );
    }

    /// Up to `to_us`: `first` for `first_us` (all of it unknown if that is), then `rest`.
    fn split(&mut self, to_us: u64, frame: u64, first_us: Option<u64>, first: Label, rest: Label) {
        self.split_via(to_us, frame, first_us, first, (0, rest), rest);
    }

    /// Up to `to_us`: `first` for `first_us` (all of it unknown if that is), `then` for
    /// `then_us`, then `rest`.
    fn split_via(
        &mut self,
        to_us: u64,
        frame: u64,
        first_us: Option<u64>,
        first: Label,
        (then_us, then): (u64, Label),
        rest: Label,
    ) {
        let Some(first_us) = first_us else {
            return self.push(to_us, frame, Label::of(Cause::Unknown, None));
        };
        let cut = (self.ledger.until_us() + first_us).min(to_us);
        let then_cut = (cut + then_us).min(to_us);
        let from = self.frame;
        self.ledger.push(cut, [from, frame], first, self.exchange);
        // (A span of no time is not pushed: `then` is skipped when `then_us` is 0.)
        self.ledger
            .push(then_cut, [from, frame], then, self.exchange);
        self.ledger.push(to_us, [from, frame], rest, self.exchange);
        self.frame = frame;
    }
}

#[cfg(test)]
mod tests;
