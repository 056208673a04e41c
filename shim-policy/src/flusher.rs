//! The flusher's side of the policy: what its thread does at each tick
//! ([`Shim::flusher_tick`]: end the bursts older than the linger bound, then sleep to the
//! next deadline or park), when it must be started or woken, and the fork and failure cases
//! (no flusher: nothing is held).

use std::time::Duration;

use crate::slot::{Slot, SHAPE_PATIENCE};
use crate::sync::Ordering::*;
use crate::sync::{fence, AtomicU32};
use crate::*;

/// How long the flusher keeps ticking with nothing held before it parks, at most.
pub(crate) const FLUSHER_IDLE: Duration = Duration::from_millis(20);

/// Below this many bursts per linger bound (×128, averaged), the flusher parks as soon as
/// nothing is held: waking it at each burst (a futex wake, then one look at the burst's
/// deadline) costs two wake-ups per burst, fewer than a look per bound when bursts come
/// less often than one per four bounds (250 a second at the default 1 ms).
pub(crate) const RARE_BURSTS_X128: u64 = 32;

/// What the flusher remembers between its looks (kept by its loop, given to each
/// [`Shim::flusher_tick`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct FlusherState {
    /// How long no burst has started or been held.
    idle_for: Duration,
    /// The last look, if any: the burst count then, and when it was (µs).
    last_look: Option<Look>,
    /// Bursts started per linger bound, ×128, averaged over the looks (each weighs 1/8).
    rate_x128: u64,
}

/// One look of the flusher's: the bursts started by then, and when it was (µs).
#[derive(Debug, Clone, Copy)]
struct Look {
    bursts: u64,
    at_us: u64,
}

/// The flusher's shortest sleep while bursts are held.
pub(crate) const MIN_NAP: Duration = Duration::from_micros(50);

/// What the flusher should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlusherStep {
    /// Sleep this long, then call [`Shim::flusher_tick`] again.
    Sleep(Duration),
    /// Nothing held for a while: wait on [`Shim::park_word`] while it reads 0.
    Park,
}

impl Shim {
    /// In a child after fork: it has no flusher thread (a burst's second write starts one:
    /// see `Shim::first_write_plainly`) and inherits no burst (the parent released them
    /// before forking).
    pub fn after_fork_child(&self) {
        self.forked.store(true, Relaxed);
        self.flusher_stopped();
    }

    /// Whether a write on `slot` leaves plainly, as the first of a burst in a forked child
    /// that has no flusher yet: nothing is held, so no thread is needed for it. A child of a
    /// fork-per-connection server (rsync's daemon) that answers each line with one write
    /// then stays single-threaded, and its `setuid` and friends (which glibc broadcasts to
    /// every thread, each to be scheduled in turn) cost what they cost natively; a burst of
    /// two or more writes starts the thread at its second write, which is held as any.
    pub(crate) fn first_write_plainly(&self, slot: &Slot) -> bool {
        self.config.mode == Mode::Nagless
            && self.forked.load(Relaxed)
            && self.flusher_missing.load(Acquire)
            && slot.writes.load(Relaxed) == 0
            && slot.readers.load(Relaxed) == 0
            && !slot.clocked.load(Acquire)
            && !slot.flags.peek().is_held()
    }

    /// The flusher thread was stopped (and nothing is held: see
    /// [`Shim::flusher_cannot_run`]): the next burst starts one again.
    pub fn flusher_stopped(&self) {
        self.flusher_parked.store(false, Release);
        self.flusher_missing.store(true, Release);
        self.hold_nothing.store(false, Release);
    }

    /// Whether a write on `fd` must first start the flusher (default mode, none runs yet, and
    /// `fd` a socket whose bursts the shim holds): the libc layer starts it before the write,
    /// where it can, so that no burst is held without it. A process that writes only to
    /// other descriptors never gets the thread.
    pub fn needs_flusher(&self, fd: i32) -> bool {
        self.config.mode == Mode::Nagless
            && self.flusher_missing.load(Acquire)
            && !self.hold_nothing.load(Acquire)
            && self
                .slot(fd)
                .is_some_and(|s| s.flags.peek().is_shims() && !self.first_write_plainly(s))
    }

    /// The flusher could not be started, or stopped: the shim holds nothing from now on (in
    /// this process; a forked child tries again), and what it holds now is released.
    pub fn flusher_cannot_run(&self, k: &impl Kernel) {
        self.hold_nothing.store(true, Release);
        self.release_all(k);
        // Nor is a clocked socket left to Nagle without the flusher's bound.
        for (fd, slot) in self.live_slots() {
            self.unclock(k, fd, slot);
        }
    }

    /// The libc layer is about to start the flusher; false if one runs already.
    pub fn claim_flusher_start(&self) -> bool {
        self.config.mode == Mode::Nagless && self.flusher_missing.swap(false, AcqRel)
    }

    /// The word the parked flusher waits on (it sleeps while it reads 0).
    pub fn park_word(&self) -> &AtomicU32 {
        &self.corked
    }

    /// One pass of the flusher: release bursts older than the linger bound; say what to do
    /// next. `st` is the flusher's memory between passes.
    pub fn flusher_tick(&self, k: &impl Kernel, st: &mut FlusherState) -> FlusherStep {
        // With nothing held, one look per linger bound: a burst that starts just after a
        // look is released at the next one, about one bound (plus timer slack) after it
        // began, as with shorter ticks give or take that slack. Unless bursts are rare:
        // then it parks at once, and the next burst wakes it.
        let tick = self.config.linger;
        let now = k.now_us();
        // A clocked socket's marks come and go as bursts do.
        let bursts = self.stats.bursts.load(Relaxed) + self.stats.clock_marks.load(Relaxed);
        if let Some(last) = st.last_look {
            let n = bursts.saturating_sub(last.bursts);
            let elapsed = now.saturating_sub(last.at_us).max(1);
            let per_bound_x128 = (n * 128 * tick.as_micros() as u64 / elapsed).min(128 * 64);
            st.rate_x128 = st.rate_x128 - st.rate_x128.div_ceil(8) + per_bound_x128 / 8;
            if n > 0 {
                // Bursts came and went since the last look: not idle.
                st.idle_for = Duration::ZERO;
            }
        }
        st.last_look = Some(Look { bursts, at_us: now });
        if self.corked.load(Acquire) == 0 {
            st.idle_for += tick;
            if st.rate_x128 < RARE_BURSTS_X128 || st.idle_for >= FLUSHER_IDLE {
                st.idle_for = Duration::ZERO;
                self.flusher_parked.store(true, Release);
                // A burst that started just before we said "parked" must not be slept on
                // (the fence pairs with the one in `start_burst`).
                fence(SeqCst);
                if self.corked.load(Acquire) != 0 {
                    self.flusher_parked.store(false, Release);
                    return FlusherStep::Sleep(tick);
                }
                return FlusherStep::Park;
            }
            return FlusherStep::Sleep(tick);
        }
        st.idle_for = Duration::ZERO;
        let limit = self.config.linger.as_micros() as u64;
        // Sleep until the oldest burst still held reaches the bound (not a fixed tick: most
        // bursts end long before, released by their writer), or until the next look at a
        // clocked socket is due (which may be several bounds away: a busy clocked socket
        // wakes the flusher no more often than it is looked at), at least `MIN_NAP`.
        let mut next_us: Option<u64> = None;
        let mut soonest = |due: u64| next_us = Some(next_us.map_or(due, |n| n.min(due)));
        for (fd, slot) in self.live_slots() {
            if let Some(due) = self.look_at_clock(k, fd, slot, now, limit) {
                soonest(due);
            }
            if !slot.flags.peek().is_held() {
                continue;
            }
            let age = now.saturating_sub(slot.corked_at_us.load(Relaxed));
            let short = slot.short_of_its_shape();
            let limit = if short && slot.patient.load(Relaxed) {
                limit * SHAPE_PATIENCE
            } else {
                limit
            };
            if age >= limit {
                if self.release(k, fd) {
                    self.stats.linger_releases.fetch_add(1, Relaxed);
                    // Split only if the burst is still going: a wait that ended it at the
                    // same moment (and reset its count) says nothing of a pause.
                    if short && slot.writes.load(Relaxed) > 0 {
                        slot.split.store(true, Relaxed);
                    }
                }
            } else {
                soonest(limit - age);
            }
        }
        // Nothing found (a mark or burst counted but not yet published): one bound.
        let next_us = next_us.unwrap_or(limit);
        FlusherStep::Sleep(Duration::from_micros(next_us).max(MIN_NAP))
    }

    /// The flusher woke from parking.
    pub fn flusher_unparked(&self) {
        self.flusher_parked.store(false, Release);
    }
}
