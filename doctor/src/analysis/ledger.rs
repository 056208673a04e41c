//! A flow's time as a ledger ([`Ledger`]): runs of time, each labelled with what it went to
//! and the exchange it belongs to, laid end to end from the flow's first frame, so that the
//! labels add up to the whole by construction.
//!
//! Runs are labelled as the flow goes (module `budget`); evidence that comes later (a stall
//! judged, a hold confirmed, a timeout's retransmission, a window opened) relabels the span
//! it covers ([`Ledger::overlay`]). The newest [`RUNS_MAX`] runs stay open to that; older ones
//! are folded into totals, per label and per exchange, so memory stays bounded however long
//! the flow.
//!
//! Invariants, asserted in debug builds: runs are in time order, each starts where the one
//! before it ended, and the folded time plus the open runs' time is the time the ledger has
//! been given.

use super::direction::Direction;
use super::output::Cause;

/// Open runs kept; half are folded when more are made (a run is 48 bytes: a flow holds a few
/// kB of them at most; what relabels a run comes within a few spans of it).
pub(super) const RUNS_MAX: usize = 128;
/// Overlays kept ahead of the time given (those of one label that touch are merged; beyond,
/// the newest are dropped and their time keeps its label).
const AHEAD_MAX: usize = 16;
/// Exchanges kept from the flow's start (exchange 0, the time before the first question,
/// among them), and the slowest kept besides.
const FIRST_EXCHANGES: u64 = 8;
const SLOWEST_EXCHANGES: usize = 8;

/// What a run went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A cause, as it will be reported.
    Is(Cause),
    /// A sender waited for the ACK of its small segment before it sent the next: the
    /// ACK clock's if the flow's verdict finds that direction ACK-clocked (made at the end),
    /// else the path's round trip.
    ClockWait,
    /// A sender's segment left about 200 ms after the one before it, the peer waiting: its
    /// hold if the flow's verdict names that direction's holds (two or more alike), else its
    /// own time.
    HoldWait,
}

/// A run's label: its kind and the side it belongs to (see [`Spent::side`](super::output::Spent::side)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Label {
    pub(super) kind: Kind,
    pub(super) side: Option<Direction>,
}

impl Label {
    pub(super) fn of(cause: Cause, side: Option<Direction>) -> Label {
        Label {
            kind: Kind::Is(cause),
            side,
        }
    }

    /// Its slot in a [`Tally`].
    fn slot(self) -> usize {
        let kind = match self.kind {
            Kind::Is(c) => c as usize,
            Kind::ClockWait => CAUSES,
            Kind::HoldWait => CAUSES + 1,
        };
        kind * 3 + self.side.map_or(0, |d| 1 + d.index())
    }

    fn of_slot(slot: usize) -> Label {
        let kind = match slot / 3 {
            k if k == CAUSES => Kind::ClockWait,
            k if k == CAUSES + 1 => Kind::HoldWait,
            k => Kind::Is(Cause::ALL[k]),
        };
        let side = match slot % 3 {
            0 => None,
            s => Some(Direction::BOTH[s - 1]),
        };
        Label { kind, side }
    }
}

const CAUSES: usize = Cause::ALL.len();
const SLOTS: usize = (CAUSES + 2) * 3;

/// A stretch of time and the frames it lies between (the frames before and after it: a run
/// split by later evidence keeps the frames of the run it was cut from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stretch {
    pub(super) from_us: u64,
    pub(super) to_us: u64,
    pub(super) frames: [u64; 2],
}

impl Stretch {
    fn us(&self) -> u64 {
        self.to_us - self.from_us
    }
}

#[derive(Debug, Clone, Copy)]
struct Run {
    time: Stretch,
    label: Label,
    exchange: u64,
}

impl Run {
    fn us(&self) -> u64 {
        self.time.us()
    }
}

/// Time per label, and each label's longest run.
#[derive(Clone)]
pub(super) struct Tally {
    us: [u64; SLOTS],
    longest: [Option<Stretch>; SLOTS],
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            us: [0; SLOTS],
            longest: [None; SLOTS],
        }
    }
}

impl Tally {
    fn add(&mut self, r: &Run) {
        let s = r.label.slot();
        self.us[s] += r.us();
        if self.longest[s].is_none_or(|l| l.us() < r.us()) {
            self.longest[s] = Some(r.time);
        }
    }

    /// Each label with time, its time (µs) and its longest run.
    pub(super) fn labels(&self) -> impl Iterator<Item = (Label, u64, Stretch)> + '_ {
        (0..SLOTS).filter_map(|s| {
            let longest = self.longest[s]?;
            (self.us[s] > 0).then(|| (Label::of_slot(s), self.us[s], longest))
        })
    }

    fn total_us(&self) -> u64 {
        self.us.iter().sum()
    }
}

/// One exchange's time, per label (sparse: most touch a few).
#[derive(Debug, Clone)]
pub(super) struct Exchange {
    pub(super) index: u64,
    /// Its first frame, and when.
    pub(super) start: (u64, u64),
    parts: Vec<(Label, u64, Stretch)>,
}

impl Exchange {
    fn add(&mut self, r: &Run) {
        match self.parts.iter_mut().find(|p| p.0 == r.label) {
            Some(p) => {
                p.1 += r.us();
                if p.2.us() < r.us() {
                    p.2 = r.time;
                }
            }
            None => self.parts.push((r.label, r.us(), r.time)),
        }
    }

    pub(super) fn total_us(&self) -> u64 {
        self.parts.iter().map(|p| p.1).sum()
    }

    /// Each label with time, its time (µs) and its longest run.
    pub(super) fn labels(&self) -> impl Iterator<Item = (Label, u64, Stretch)> + '_ {
        self.parts.iter().map(|p| (p.0, p.1, p.2))
    }
}

/// A flow's time, labelled.
pub(super) struct Ledger {
    /// Open runs, oldest first, end to end.
    runs: Vec<Run>,
    /// Where the ledger stands: the end of its last run (or its start), µs.
    until_us: u64,
    folded: Tally,
    /// The exchange being folded, and those kept.
    open: Option<Exchange>,
    first: Vec<Exchange>,
    slowest: Vec<Exchange>,
    /// All the time given, µs (for the invariant).
    given_us: u64,
    /// Overlays that reach past the time given, for the time still to come.
    ahead: Vec<(u64, u64, Label)>,
}

impl Ledger {
    /// A ledger from `start`, the flow's first frame.
    pub(super) fn new(start_us: u64) -> Ledger {
        Ledger {
            runs: Vec::new(),
            until_us: start_us,
            folded: Tally::default(),
            open: None,
            first: Vec::new(),
            slowest: Vec::new(),
            given_us: 0,
            ahead: Vec::new(),
        }
    }

    /// Where the ledger stands, µs.
    pub(super) fn until_us(&self) -> u64 {
        self.until_us
    }

    /// The time from where the ledger stands to `to_us` went to `label`, in `exchange`; it
    /// lies between `frames` (nothing if `to_us` is not later).
    pub(super) fn push(&mut self, to_us: u64, frames: [u64; 2], label: Label, exchange: u64) {
        let from_us = self.until_us;
        if to_us <= from_us {
            return;
        }
        self.given_us += to_us - from_us;
        self.until_us = to_us;
        match self.runs.last_mut() {
            Some(last) if last.label == label && last.exchange == exchange => {
                last.time.to_us = to_us;
                last.time.frames[1] = frames[1];
            }
            _ => self.runs.push(Run {
                time: Stretch {
                    from_us,
                    to_us,
                    frames,
                },
                label,
                exchange,
            }),
        }
        // Overlays made ahead of the time given relabel it as it comes.
        for i in 0..self.ahead.len() {
            let (from, to, label) = self.ahead[i];
            self.relabel(from.max(from_us), to, label);
        }
        self.ahead.retain(|a| a.1 > to_us);
        self.check();
    }

    /// Whether the open runs are many enough to fold (after the evidence still to come is
    /// in: the caller judges what it holds first).
    pub(super) fn full(&self) -> bool {
        self.runs.len() > RUNS_MAX
    }

    /// The time between `from_us` and `to_us` goes to `label` instead: in the open runs now
    /// (time already folded keeps its label), and in those yet to come as they come.
    pub(super) fn overlay(&mut self, from_us: u64, to_us: u64, label: Label) {
        if to_us <= from_us {
            return;
        }
        self.relabel(from_us, to_us, label);
        if to_us > self.until_us {
            let from_us = from_us.max(self.until_us);
            let full = self.ahead.len() >= AHEAD_MAX;
            let touching = self
                .ahead
                .iter_mut()
                .find(|a| a.2 == label && from_us <= a.1 && a.0 <= to_us);
            match touching {
                Some(a) => (a.0, a.1) = (a.0.min(from_us), a.1.max(to_us)),
                None if full => {}
                None => self.ahead.push((from_us, to_us, label)),
            }
        }
    }

    /// The open runs' time between `from_us` and `to_us` goes to `label`.
    fn relabel(&mut self, from_us: u64, to_us: u64, label: Label) {
        let start = self.runs.partition_point(|r| r.time.to_us <= from_us);
        let end = self.runs.partition_point(|r| r.time.from_us < to_us);
        if start >= end {
            return;
        }
        let mut pieces = Vec::with_capacity(end - start + 2);
        for r in &self.runs[start..end] {
            let t = r.time;
            // Up to three pieces: before the span, in it, after it.
            let cut = [t.from_us.max(from_us), t.to_us.min(to_us)];
            let piece = |from_us, to_us, label| Run {
                time: Stretch {
                    from_us,
                    to_us,
                    ..t
                },
                label,
                ..*r
            };
            if cut[0] > t.from_us {
                pieces.push(piece(t.from_us, cut[0], r.label));
            }
            pieces.push(piece(cut[0], cut[1], label));
            if cut[1] < t.to_us {
                pieces.push(piece(cut[1], t.to_us, r.label));
            }
        }
        self.runs.splice(start..end, pieces);
        self.check();
    }

    /// Folds the older half of the open runs.
    pub(super) fn fold_older(&mut self) {
        let n = self.runs.len() / 2;
        let older: Vec<Run> = self.runs.drain(..n).collect();
        for r in &older {
            self.fold(r);
        }
        self.check();
    }

    fn fold(&mut self, r: &Run) {
        self.folded.add(r);
        if self.open.as_ref().is_some_and(|e| e.index != r.exchange) {
            let done = self.open.take().expect("checked");
            self.keep(done);
        }
        self.open
            .get_or_insert_with(|| Exchange {
                index: r.exchange,
                start: (r.time.frames[0], r.time.from_us),
                parts: Vec::new(),
            })
            .add(r);
    }

    /// Keeps a finished exchange if it is among the first or the slowest.
    fn keep(&mut self, e: Exchange) {
        if e.index < FIRST_EXCHANGES {
            self.first.push(e);
        } else if self.slowest.len() < SLOWEST_EXCHANGES {
            self.slowest.push(e);
        } else if let Some((i, least)) = self
            .slowest
            .iter()
            .enumerate()
            .min_by_key(|(_, x)| x.total_us())
        {
            if least.total_us() < e.total_us() {
                self.slowest[i] = e;
            }
        }
    }

    /// All of it: the time per label, and the exchanges kept, in capture order.
    pub(super) fn close(mut self) -> (Tally, Vec<Exchange>) {
        for r in std::mem::take(&mut self.runs) {
            self.fold(&r);
        }
        if let Some(e) = self.open.take() {
            self.keep(e);
        }
        debug_assert_eq!(self.folded.total_us(), self.given_us);
        let mut exchanges = self.first;
        exchanges.append(&mut self.slowest);
        exchanges.sort_by_key(|e| e.index);
        (self.folded, exchanges)
    }

    /// The invariants (module docs).
    fn check(&self) {
        if cfg!(debug_assertions) {
            for w in self.runs.windows(2) {
                debug_assert_eq!(w[0].time.to_us, w[1].time.from_us, "runs end to end");
            }
            debug_assert!(self.runs.iter().all(|r| r.time.from_us < r.time.to_us));
            let open: u64 = self.runs.iter().map(Run::us).sum();
            debug_assert_eq!(self.folded.total_us() + open, self.given_us);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(c: Cause) -> Label {
        Label::of(c, None)
    }

    #[test]
    fn labels_add_up_and_overlays_relabel_what_they_cover() {
        let mut l = Ledger::new(100);
        l.push(200, [1, 2], label(Cause::RoundTrip), 0);
        l.push(300, [2, 3], label(Cause::RoundTrip), 0);
        l.push(1300, [3, 4], label(Cause::DelayedAck), 1);
        l.push(
            1400,
            [4, 5],
            Label::of(Cause::Think, Some(Direction::Server)),
            1,
        );
        l.overlay(250, 1200, label(Cause::NagleStall));
        let (tally, exchanges) = l.close();
        let got: Vec<(Label, u64)> = tally.labels().map(|(l, us, _)| (l, us)).collect();
        assert!(got.contains(&(label(Cause::RoundTrip), 150)), "{got:?}");
        assert!(got.contains(&(label(Cause::NagleStall), 950)), "{got:?}");
        assert!(got.contains(&(label(Cause::DelayedAck), 100)), "{got:?}");
        assert_eq!(tally.total_us(), 1300);
        let (_, _, stall) = tally
            .labels()
            .find(|(l, _, _)| l.kind == Kind::Is(Cause::NagleStall))
            .expect("a stall");
        assert_eq!(stall.frames, [3, 4], "the frames the stall lies between");
        assert_eq!(exchanges.len(), 2);
        assert_eq!(exchanges[0].total_us() + exchanges[1].total_us(), 1300);
        assert_eq!(exchanges[1].start, (3, 300));
    }

    #[test]
    fn an_overlay_ahead_of_the_time_given_relabels_it_as_it_comes() {
        let mut l = Ledger::new(0);
        l.push(100, [1, 2], label(Cause::Transfer), 1);
        // A window closed at 150 and opened at 900, before the next data at 1000.
        l.overlay(150, 900, label(Cause::ZeroWindow));
        l.push(
            1000,
            [2, 3],
            Label::of(Cause::Think, Some(Direction::Client)),
            1,
        );
        l.push(1100, [3, 4], label(Cause::RoundTrip), 1);
        let (tally, _) = l.close();
        let got: Vec<(Label, u64)> = tally.labels().map(|(l, us, _)| (l, us)).collect();
        assert!(got.contains(&(label(Cause::ZeroWindow), 750)), "{got:?}");
        assert!(got.contains(&(label(Cause::RoundTrip), 100)), "{got:?}");
        let think = Label::of(Cause::Think, Some(Direction::Client));
        assert!(got.contains(&(think, 150)), "{got:?}");
    }

    #[test]
    fn overlays_ahead_are_bounded_and_merged() {
        let mut l = Ledger::new(0);
        l.push(10, [1, 2], label(Cause::Transfer), 1);
        for i in 0..10_000u64 {
            // A window that closes and opens, over and over, after the last data.
            l.overlay(10 + i, 11 + i, label(Cause::ZeroWindow));
            l.overlay(20_000 + 2 * i, 20_001 + 2 * i, label(Cause::DelayedAck));
        }
        assert!(l.ahead.len() <= AHEAD_MAX, "{}", l.ahead.len());
        l.push(10_010, [2, 3], label(Cause::Think), 1);
        let (tally, _) = l.close();
        let zero: u64 = tally
            .labels()
            .filter(|(l, _, _)| l.kind == Kind::Is(Cause::ZeroWindow))
            .map(|(_, us, _)| us)
            .sum();
        assert_eq!(zero, 10_000, "the touching overlays merged into one");
    }

    #[test]
    fn folding_keeps_totals_the_first_and_the_slowest_exchanges() {
        let mut l = Ledger::new(0);
        let mut t = 0;
        let mut folds = 0;
        for x in 0..2000u64 {
            // Exchange 1500 is the slowest.
            let think = if x == 1500 { 5_000 } else { 10 + x % 7 };
            t += think;
            let f = 2 * x;
            l.push(
                t,
                [f, f + 1],
                Label::of(Cause::Think, Some(Direction::Server)),
                x,
            );
            t += 3;
            l.push(t, [f + 1, f + 2], label(Cause::RoundTrip), x);
            if l.full() {
                l.fold_older();
                folds += 1;
            }
        }
        assert!(folds > 2, "{folds}");
        let (tally, exchanges) = l.close();
        assert_eq!(tally.total_us(), t);
        let indexes: Vec<u64> = exchanges.iter().map(|e| e.index).collect();
        assert_eq!(&indexes[..8], &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert!(indexes.contains(&1500), "{indexes:?}");
        assert_eq!(exchanges.len(), 16);
        let (_, _, longest) = tally
            .labels()
            .find(|(l, _, _)| l.kind == Kind::Is(Cause::Think))
            .expect("think time");
        assert_eq!(longest.us(), 5_000, "the longest run is the evidence");
    }

    #[test]
    fn slots_name_their_labels_back() {
        for s in 0..SLOTS {
            assert_eq!(Label::of_slot(s).slot(), s);
        }
        for (i, c) in Cause::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
