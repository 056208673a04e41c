//! The state the quiet lane's end is computed from, and that end, kept in step by
//! construction: outside this module the state can be read, and changed only through
//! [`Quiet::edit`], whose guard recomputes the end when it is dropped, or by
//! [`Quiet::push_quiet`], the one change that keeps it (asserted in debug builds).

use std::ops::{Deref, DerefMut};
use std::time::Instant;

use crate::policy::{FlushPolicy, FlushReason, Linger};
use crate::queue::SendQueue;

/// Everything but the counters.
#[derive(Debug)]
pub(super) struct State {
    pub(super) queue: SendQueue,
    pub(super) policy: FlushPolicy,
    pub(super) segment: usize,
    /// Bytes at the front that a flush point made due; they leave as soon as the socket
    /// allows.
    pub(super) must_send: usize,
    pub(super) must_reason: FlushReason,
    /// Arrival of the oldest pending byte not covered by `must_send` (the linger clock).
    /// Set with [`set_oldest_unflushed`](Self::set_oldest_unflushed), which keeps
    /// `deadline` with it.
    pub(super) oldest_unflushed: Option<Instant>,
    /// `oldest_unflushed` + linger, kept so that the per-write check adds nothing.
    pub(super) deadline: Option<Instant>,
    /// The burst in progress (the bytes written since everything pending was last made
    /// due) has had its first full segment made due ([`State::first_segment`]).
    pub(super) first_segment_out: bool,
    /// The last write was smaller than a segment: the burst is being built piece by
    /// piece (see [`State::first_segment`]).
    pub(super) last_write_small: bool,
    /// Under [`FlushPolicy::clocked`]: the caller's flushes mark where its batches end
    /// (it has flushed once), so a normal write waits for its batch's flush instead of
    /// being handed over by itself.
    pub(super) flush_delimits: bool,
}

/// [`State`] and the quiet lane's end.
#[derive(Debug)]
pub(super) struct Quiet {
    state: State,
    /// The quiet lane ([`Coalescer::write_if_nothing_due`](super::Coalescer::write_if_nothing_due)):
    /// normal writes may fill the queue's tail buffer up to below this length with nothing
    /// becoming due and no time needed.
    ///
    /// Invariant (recomputed whenever an [`Edit`] ends): 0 (closed) if bytes are due or a
    /// linger window needs opening (linger immediate, or no window open); else one more
    /// than the tail's length plus the bytes that keep the queue below the threshold and
    /// the high-water mark and fit the tail buffer.
    end: usize,
}

/// A change of [`State`] in progress; the quiet lane's end is recomputed when it ends.
pub(super) struct Edit<'a>(&'a mut Quiet);

impl Quiet {
    pub(super) fn new(state: State) -> Self {
        let end = state.quiet_end();
        Quiet { state, end }
    }

    /// Opens a change of the state.
    #[inline]
    pub(super) fn edit(&mut self) -> Edit<'_> {
        Edit(self)
    }

    /// Queues `data` if it stays within the quiet lane. The lane's end is unchanged: the
    /// tail grows by `data.len()` and the room below the limits shrinks by as much, and
    /// some room is left (`push_within` takes strictly less than the end allows).
    #[inline]
    pub(super) fn push_quiet(&mut self, data: &[u8]) -> bool {
        if !self.state.queue.push_within(data, self.end) {
            return false;
        }
        debug_assert_eq!(self.end, self.state.quiet_end());
        true
    }
}

impl Deref for Quiet {
    type Target = State;
    #[inline]
    fn deref(&self) -> &State {
        &self.state
    }
}

impl Deref for Edit<'_> {
    type Target = State;
    #[inline]
    fn deref(&self) -> &State {
        &self.0.state
    }
}

impl DerefMut for Edit<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut State {
        &mut self.0.state
    }
}

impl Drop for Edit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.end = self.0.state.quiet_end();
    }
}

impl State {
    /// The quiet lane's end as the state stands (see [`Quiet`]'s `end`).
    fn quiet_end(&self) -> usize {
        match self.quiet_room() {
            0 => 0,
            room => self.queue.tail_len() + room.min(self.queue.tail_room() + 1),
        }
    }

    /// One more than the bytes that normal writes, in any number, may add with nothing
    /// becoming due and no time needed; 0 if none may (bytes are due, or a linger window
    /// needs opening).
    pub(super) fn quiet_room(&self) -> usize {
        let needs_time = match self.policy.linger {
            Linger::Off => false,
            Linger::Immediate => true,
            Linger::Deadline(_) => self.oldest_unflushed.is_none(),
        };
        // A write of `n` makes nothing due while `pending + n < min(threshold, high water)`.
        let limit = self.threshold_now().min(self.policy.high_water);
        if self.must_send != 0 || needs_time || self.queue.len() >= limit {
            return 0;
        }
        limit - self.queue.len()
    }

    /// The pending bytes at which a write may make bytes due under the threshold point:
    /// one segment while the burst in progress has sent none early (a small write that
    /// fills it sends it: [`State::first_segment`]), then the policy's threshold (never
    /// below a segment); `usize::MAX` with no threshold.
    pub(super) fn threshold_now(&self) -> usize {
        match self.policy.threshold {
            None => usize::MAX,
            Some(_) if !self.first_segment_out => self.segment,
            Some(t) => t.max(self.segment),
        }
    }

    /// The first full segment of a burst built piece by piece leaves at once (under a
    /// threshold): when a write smaller than a segment fills the burst's first segment,
    /// the program is building the burst write by write (BGP's UPDATEs, a template's
    /// chunks), and on a path whose segments are small next to the burst its first bytes
    /// travel while it writes the rest, at no segment more (the segments are whole
    /// either way) and one send more per such burst. A write of a segment or more is not
    /// split so: its writer hands over whole messages and flushes them (early, its first
    /// segment would cost a send and gain a few microseconds). The bytes become due as a
    /// flush point makes them, so a socket that is full keeps them due.
    pub(super) fn first_segment(&mut self) {
        if !self.first_segment_due() {
            return;
        }
        self.first_segment_out = true;
        self.must_send = self.whole_segments();
        self.must_reason = FlushReason::Threshold;
    }

    /// Whether [`first_segment`](Self::first_segment) would make bytes due now (read
    /// only: the transmit path asks before it opens an edit).
    pub(super) fn first_segment_due(&self) -> bool {
        // (Bytes another flush point made due are no early segment of this burst.)
        self.policy.threshold.is_some()
            && !self.first_segment_out
            && self.last_write_small
            && self.whole_segments() > self.must_send
    }

    /// The pending bytes that fill whole segments.
    fn whole_segments(&self) -> usize {
        self.queue.len() / self.segment * self.segment
    }

    pub(super) fn set_oldest_unflushed(&mut self, at: Option<Instant>) {
        self.oldest_unflushed = at;
        self.deadline = at
            .zip(self.policy.linger.deadline())
            .map(|(t, linger)| t.checked_add(linger).unwrap_or(t));
    }

    /// What a write of `len` bytes, already queued, changes.
    pub(super) fn after_write(&mut self, len: usize, urgency: crate::Urgency, now: Instant) {
        use crate::Urgency;
        self.last_write_small = len < self.segment;
        if len > 0 && self.oldest_unflushed.is_none() && self.queue.len() > self.must_send {
            self.set_oldest_unflushed(Some(now));
        }
        let immediate = self.policy.linger == Linger::Immediate;
        match urgency {
            Urgency::SendNow => self.make_all_due(FlushReason::Urgent),
            // A piece of the caller's batch: its flush hands the batch over whole.
            Urgency::Normal if immediate && self.policy.clocked && self.flush_delimits => {}
            Urgency::Normal if immediate && self.policy.clocked => {
                self.make_all_due(FlushReason::Clocked)
            }
            Urgency::Normal if immediate => self.make_all_due(FlushReason::Urgent),
            Urgency::Normal | Urgency::MoreFollows => {}
        }
    }

    pub(super) fn make_all_due(&mut self, reason: FlushReason) {
        // Bytes due for a clocked hand-over become due for any stronger reason that comes
        // (an urgent write, `flush_all`, a read that would wait, close): sent now.
        let upgrade = self.must_send > 0
            && self.must_reason == FlushReason::Clocked
            && reason != FlushReason::Clocked;
        // ...and bytes due for a stronger reason (still waiting for socket space) stay due
        // for it when a clocked flush adds more: nothing urgent is handed to Nagle.
        let downgrade = self.must_send > 0
            && self.must_reason != FlushReason::Clocked
            && reason == FlushReason::Clocked;
        if self.queue.len() > self.must_send || upgrade {
            self.must_send = self.queue.len();
            if !downgrade {
                self.must_reason = reason;
            }
        }
        self.set_oldest_unflushed(None);
        // Everything is due: the burst ends, and the next write begins another.
        self.first_segment_out = false;
    }
}
