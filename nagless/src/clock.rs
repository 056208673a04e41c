//! The I/O layers' clocks (the core never reads one): [`now`], and [`Clock`], which reads
//! the system clock only when a linger deadline could have passed, judging "certainly not
//! yet" by the cycle counter.

use std::time::Instant;

use crate::coalescer::Coalescer;
use crate::sys;

/// The clock of the I/O layers (the core never reads one).
#[allow(clippy::disallowed_methods)]
pub(crate) fn now() -> Instant {
    #[cfg(test)]
    if let Some(t) = fake::now() {
        return t;
    }
    Instant::now()
}

/// A test's clock for its thread, read instead of the system's by [`now`] and [`Clock`]
/// (which then judges deadlines by it exactly, without the cycle counter).
#[cfg(test)]
pub(crate) mod fake {
    use std::cell::RefCell;
    use std::time::Instant;

    type Source = Box<dyn Fn() -> Instant>;

    thread_local!(static SOURCE: RefCell<Option<Source>> = const { RefCell::new(None) });

    /// Sets (or with `None` ends) this thread's fake clock. (Its one user, the driver's
    /// model, runs on Unix only.)
    #[cfg_attr(not(unix), allow(dead_code))]
    pub(crate) fn set(source: Option<Source>) {
        SOURCE.with(|s| *s.borrow_mut() = source);
    }

    /// The fake time, if this thread has a fake clock.
    pub(crate) fn now() -> Option<Instant> {
        SOURCE.with(|s| s.borrow().as_ref().map(|f| f()))
    }
}

/// The streams' clock: reads the system clock only when a deadline could have passed.
///
/// Each precise reading is kept with a cycle-counter reading beside it ([`sys::fast_ticks`]).
/// The counter ticks at least once per nanosecond, so while fewer ticks than nanoseconds to
/// the deadline have passed since that reading, the deadline has certainly not passed and
/// the kept reading serves as "now" (it is earlier than the true time: only "not yet" is ever
/// concluded from it). A counter found slower than that is never trusted again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    anchor: Instant,
    anchor_ticks: Option<u64>,
    /// A deadline and the counter value before which it has certainly not passed.
    tick_deadline: Option<(Instant, u64)>,
}

/// Set when the cycle counter was seen running slower than one tick per nanosecond.
static SLOW_TICKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Clock {
    pub(crate) fn new() -> Self {
        // The counter first: time that passes between the two reads then counts as
        // elapsed (a "not yet" verdict can only come early, never late).
        let anchor_ticks = sys::fast_ticks();
        Clock {
            anchor: now(),
            anchor_ticks,
            tick_deadline: None,
        }
    }

    /// The true time, read now.
    pub(crate) fn precise(&mut self) -> Instant {
        use std::sync::atomic::Ordering::Relaxed;
        #[cfg(test)]
        if let Some(t) = fake::now() {
            self.anchor = t;
            return t;
        }
        // The counter first, as in `new`.
        let ticks = sys::fast_ticks();
        let t = now();
        if let (Some(a), Some(b)) = (self.anchor_ticks, ticks) {
            let ns = t.duration_since(self.anchor).as_nanos();
            // Fewer ticks than nanoseconds looks slow, unless the thread was preempted between
            // the counter and the clock: then a counter read after the clock (which covers
            // every nanosecond counted) must show it too before the counter is distrusted.
            let slow = |ticks: u64| ns >= 1_000_000 && u128::from(ticks.wrapping_sub(a)) < ns;
            if slow(b) && sys::ticks_now().is_some_and(slow) {
                SLOW_TICKS.store(true, Relaxed);
            }
        }
        self.anchor = t;
        self.anchor_ticks = ticks;
        t
    }

    /// True if `deadline` has certainly not passed, judged by the cycle counter alone (one
    /// counter read; the conversion is done once per deadline).
    #[inline]
    pub(crate) fn certainly_before(&mut self, deadline: Instant) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        #[cfg(test)]
        if let Some(t) = fake::now() {
            return t < deadline;
        }
        if SLOW_TICKS.load(Relaxed) {
            return false;
        }
        let limit = match self.tick_deadline {
            Some((d, limit)) if d == deadline => limit,
            _ => {
                let Some(a) = self.anchor_ticks else {
                    return false;
                };
                let room = deadline.saturating_duration_since(self.anchor).as_nanos();
                let limit = a.saturating_add(u64::try_from(room).unwrap_or(u64::MAX));
                self.tick_deadline = Some((deadline, limit));
                limit
            }
        };
        // `anchor_ticks` is only ever set from `fast_ticks`, which vetted the counter.
        sys::ticks_now().is_some_and(|t| t < limit)
    }

    /// The fast path of a normal write to `core`: queues `buf` if it joins an open linger
    /// window whose deadline certainly has not passed (one counter read) and makes nothing
    /// due, with no clock reading and no transmit check. False, with nothing queued, when the
    /// write needs the full path.
    #[inline(always)]
    pub(crate) fn join_burst(&mut self, core: &mut Coalescer, buf: &[u8]) -> bool {
        let in_time = match core.poll_timeout() {
            Some(deadline) => self.certainly_before(deadline),
            None => true,
        };
        in_time && core.write_if_nothing_due(buf)
    }

    /// A time good enough for a write to `core`: the kept reading while the pending deadline
    /// (if any) certainly has not passed, else the true time. With no deadline pending, the
    /// true time only if this write may open a linger window (its arrival time matters).
    pub(crate) fn for_write(&mut self, core: &Coalescer) -> Instant {
        let opens_window = || core.policy().linger.deadline().is_some();
        match core.poll_timeout() {
            None if opens_window() => self.precise(),
            None => self.anchor,
            Some(d) if self.certainly_before(d) => self.anchor,
            Some(_) => self.precise(),
        }
    }
}
