//! The ACK-clocked socket: one that another thread reads while writers write (a client whose
//! writer threads share a connection and hand work to each other through locks and
//! semaphores, which are no waits of the shim's, while a reader thread sits in `recv`).
//!
//! No wait of the writers ends their bursts there, and the reader's next read comes only
//! when an answer arrives: the shim's own holds would keep every burst to the linger bound or
//! to that read, far longer than the round trip that clocks Nagle natively. So such a socket
//! is handed to the kernel's Nagle (the shim's `TCP_NODELAY` comes off, once): writes go
//! plainly, a small one leaves at once with nothing in flight and otherwise at the next ACK,
//! as natively. What the shim adds is the bound Nagle lacks, against the peer that delays its
//! ACK: each clocked write marks the socket (the first since the flusher's last look, after
//! the write, so the mark is never older than the bytes it covers), and the flusher, half a
//! bound later (`CLOCK_LOOKS_PER_BOUND`), asks the kernel what waits unsent and how many
//! data segments have left; if bytes wait and no segment left since its previous look, nothing
//! clocks them, and it pushes them (`TCP_NODELAY` on, then off). A held small write thus
//! waits about two bounds at most, never a delayed-ACK timer; while ACKs clock the socket, the
//! flusher only looks, less and less often (`CLOCK_BACKOFF_MAX`; further on a socket it never
//! had to push, `CLOCK_UNPUSHED_LONGEST_US`), and the mark stays (a busy socket's writes find
//! it set and mark nothing) until a look finds the socket idle.
//!
//! Invariants:
//! 1. A clocked write's mark is set after its bytes were queued, or a mark set before it is
//!    cleared only after the flusher looked at the kernel's queue (it clears first, then
//!    looks): no clocked byte goes unwatched. The socket's lock orders the two sides: the
//!    write queues its bytes under it, and the look ([`Kernel::sending`]) takes it too.
//! 2. Every mark counts once in `corked` (set by CAS from 0, counted down by whoever clears
//!    it from nonzero), so the flusher parks only with no mark left.
//! 3. The shim changes `TCP_NODELAY` on a socket only between `nodelay_busy` up and down,
//!    and not while the program chooses its own ([`Shim::program_nodelay_begins`]): a
//!    program's choice always lands after the shim's, never under it.

use crate::program_options::CORK_WAIT_TURNS;
use crate::slot::Slot;
use crate::sync::Ordering::*;
use crate::sync::{self, fence};
use crate::*;

/// The flusher's looks at a clocked socket per linger bound while bytes may wait: a push
/// needs two looks with no segment sent between them, so a held write waits one bound at
/// most (plus the flusher's timer slack).
pub(crate) const CLOCK_LOOKS_PER_BOUND: u64 = 2;

/// While ACKs clock a socket out (each look finds segments sent since the last), the time
/// to its next look doubles, up to `2^CLOCK_BACKOFF_MAX` times the first, and the flusher
/// sleeps that long (it wakes for nothing else while only clocked sockets are watched).
/// Its wake-ups are what a busy clocked socket pays: on two cores a thread that merely
/// wakes every 4 ms costs a writer looping on `send` a tenth of its writes, every 1 ms a
/// quarter (the writer pauses, the peer catches up, and more segments leave smaller). A
/// socket that keeps moving needs no push. A look that finds the socket idle, or that
/// pushes, starts again from the first. A socket that stops moving is thus pushed within
/// two of its current intervals: at most `2^CLOCK_BACKOFF_MAX` bounds after a long busy
/// stretch, far below a delayed-ACK timer.
///
/// That bound is for a socket the flusher has had to push before (its peer delays ACKs: a
/// request split into writes, a slow answer). One it never had to push backs off further,
/// up to [`CLOCK_UNPUSHED_LONGEST_US`] between looks: its peer's ACKs have come within a
/// look so far, so the looks are insurance, and their wake-ups cost a busy program more
/// than they are likely to save (the clocked writer of `scripts/bench-clocked-writer` paid
/// about 80 ns a write for looks at the 4-bound pace, 40 at 16 ms). Its first push brings it
/// back to `CLOCK_BACKOFF_MAX` for good.
pub(crate) const CLOCK_BACKOFF_MAX: u8 = 3;

/// How many times the interval between the looks at a clocked socket the flusher never had
/// to push may double (its time is capped by [`CLOCK_UNPUSHED_LONGEST_US`]).
pub(crate) const CLOCK_BACKOFF_UNPUSHED: u8 = 8;

/// The longest interval between the looks at a clocked socket the flusher never had to push
/// (or `2^CLOCK_BACKOFF_MAX` first intervals, if longer): two of them, the most a stall after
/// a long busy stretch waits, stay below the shortest delayed-ACK timer (Linux's 40 ms), so
/// that the flusher, not the peer's timer, sends what stalls, and the socket learns that its
/// peer delays ACKs. Never later than natively either way: the flusher only ever sends sooner
/// what the kernel's Nagle holds for the peer's ACK.
pub(crate) const CLOCK_UNPUSHED_LONGEST_US: u64 = 16_000;

/// How many times the interval between looks at a clocked socket may double; `pushed`: the
/// flusher has had to push it before.
fn widest_backoff(pushed: bool) -> u8 {
    if pushed {
        CLOCK_BACKOFF_MAX
    } else {
        CLOCK_BACKOFF_UNPUSHED
    }
}

/// The interval between looks at a clocked socket after `backoff` doublings of `first`
/// (at most [`widest_backoff`]); `pushed`: the flusher has had to push it before.
fn clock_interval(first: u64, backoff: u8, pushed: bool) -> u64 {
    let interval = first << backoff.min(widest_backoff(pushed));
    if pushed {
        interval
    } else {
        interval.min(CLOCK_UNPUSHED_LONGEST_US.max(first << CLOCK_BACKOFF_MAX))
    }
}

/// What the kernel holds for a socket, and what it sent ([`Kernel::sending`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sending {
    /// Bytes written and not yet sent (`tcpi_notsent_bytes`).
    pub unsent: u32,
    /// Data segments sent so far (`tcpi_data_segs_out`).
    pub data_segments: u32,
}

impl Shim {
    /// Whether the write about to be made on `fd` (a socket of the shim's) is clocked by
    /// the kernel's Nagle: the socket was handed to it, or is now, because another thread
    /// waits in a read of it. Not for a descriptor shared with others (its duplicates'
    /// bursts are held by the shim, released with `TCP_NODELAY` on).
    pub(crate) fn clocks(&self, k: &impl Kernel, fd: i32, slot: &Slot) -> bool {
        if self.config.mode != Mode::Nagless {
            return false;
        }
        if !slot.clocked.load(Acquire) {
            if slot.readers.load(Relaxed) == 0 || slot.shared.load(Acquire) != 0 {
                return false;
            }
            if slot.clocked.swap(true, AcqRel) {
                return true;
            }
            // What a burst held goes first, with the shim's `TCP_NODELAY` still on.
            self.release(k, fd);
            if !self.shims_nodelay(k, fd, slot, false) {
                slot.clocked.store(false, Release);
                return false;
            }
            self.stats.clocked_sockets.fetch_add(1, Relaxed);
            self.any_clocked.store(true, Relaxed);
        }
        if slot.flags.peek().is_held() {
            // A burst another thread started as the socket turned: it ends (what Nagle then
            // holds of it goes with this write's, under this write's mark).
            self.release(k, fd);
        }
        self.stats.clocked.fetch_add(1, Relaxed);
        true
    }

    /// The write about to be made on `fd`, if the socket is clocked already and nothing else
    /// is to be done before it: loads only, no counter shared between threads unless the
    /// counters are asked for ([`Config::counts_writes`]), no thread list.
    ///
    /// The hook's cost lands inside the program's call, which on a busy clocked socket is
    /// made by threads that hand a lock to each other around it (a Python client's writers
    /// hold their connection's lock across `send`, with the interpreter's released): a
    /// 200 ns spin added to `send` cost such a client a tenth of its requests, 50 ns about
    /// a twentieth. [`Shim::before_write`] is the full decision; this is its common case.
    pub fn clocked_write(&self, fd: i32) -> Option<WriteStep> {
        // (No socket of this process was ever clocked: not even its slot is looked up, for
        // the writes of the common program. A socket turning clocked as this reads is found
        // by `before_write`, which clocks it all the same.)
        if self.config.mode != Mode::Nagless
            || !self.any_clocked.load(Relaxed)
            || self.hold_nothing.load(Relaxed)
        {
            return None;
        }
        let slot = self.slot(fd)?;
        if !slot.clocked.load(Acquire) {
            return None;
        }
        let flags = slot.flags.get();
        if !flags.is_shims() || flags.is_held() {
            return None;
        }
        if self.config.counts_writes {
            self.stats.writes.fetch_add(1, Relaxed);
            self.stats.clocked.fetch_add(1, Relaxed);
        }
        Some(WriteStep::clocked())
    }

    /// The read about to be made on `fd`, if the socket is clocked already and nothing else
    /// is to be done before it ([`Shim::read_begins`] would only look): loads only. Its
    /// reader's calls, as its writers', come between the program's own steps (the answers it
    /// hands on to waiting writers).
    pub fn clocked_read(&self, fd: i32) -> Option<Reading> {
        let slot = self.slot(fd)?;
        if !slot.clocked.load(Acquire) || slot.shared.load(Acquire) != 0 {
            return None;
        }
        let flags = slot.flags.peek();
        if flags.is_held() || slot.writes.load(Relaxed) != 0 {
            return None;
        }
        Some(Reading::default())
    }

    /// After a clocked write: marks `fd` for the flusher's look unless a mark is pending;
    /// true if the flusher must be woken (or started).
    pub(crate) fn mark_clocked(&self, k: &impl Kernel, fd: i32) -> bool {
        let Some(slot) = self.slot(fd) else {
            return false;
        };
        // Pairs with the flusher's clearing swap (invariant 1) through the socket's lock, no
        // fence of ours: the write queued its bytes under the lock (Linux's `tcp_sendmsg`
        // takes `lock_sock`), and the flusher's look takes it after its swap (`tcp_get_info`
        // takes `lock_sock_fast`). Either the look took it first, and this load, after the
        // write's taking of it, sees the mark cleared (and sets a new one); or the write took
        // it first, and the look sees the bytes. (A kernel that read `TCP_INFO` unlocked
        // could leave a write racing a look unwatched: its bytes would wait for the peer's
        // ACK, as natively.)
        if slot.clock_mark_us.load(SeqCst) != 0 {
            return false;
        }
        if slot
            .clock_mark_us
            .compare_exchange(0, k.now_us().max(1), SeqCst, Relaxed)
            .is_err()
        {
            return false;
        }
        self.stats.clock_marks.fetch_add(1, Relaxed);
        let first = self.corked.fetch_add(1, AcqRel) == 0;
        // Pairs with the fence in `flusher_tick`'s park, as a burst's start does.
        fence(SeqCst);
        self.flusher_missing.load(Acquire) || (first && self.flusher_parked.load(Acquire))
    }

    /// The flusher's look at a clocked socket's mark, at `now` with the bound `bound` (µs):
    /// how long until its next look, if one is pending.
    pub(crate) fn look_at_clock(
        &self,
        k: &impl Kernel,
        fd: i32,
        slot: &Slot,
        now: u64,
        bound: u64,
    ) -> Option<u64> {
        let pushed = slot.clock_pushed.load(Relaxed);
        let widest = widest_backoff(pushed);
        let first = (bound / CLOCK_LOOKS_PER_BOUND).max(1);
        let backoff = slot.clock_backoff.load(Relaxed).min(widest);
        let limit = clock_interval(first, backoff, pushed);
        let mark = slot.clock_mark_us.load(Acquire);
        if mark == 0 {
            return None;
        }
        let age = now.saturating_sub(mark);
        if age < limit {
            return Some(limit - age);
        }
        if !self.clear_clock_mark(slot) {
            return None;
        }
        if !slot.clocked.load(Acquire) || !slot.flags.peek().is_shims() {
            return None;
        }
        let s = k.sending(fd)?;
        let before = slot
            .clock_segments
            .swap(u64::from(s.data_segments) + 1, Relaxed);
        let moved = before != u64::from(s.data_segments) + 1;
        // Segments left since the last look: the socket moves, looked at less often; none,
        // and nothing waits: it is idle, and the next write is looked at soon again.
        let backoff = if moved { (backoff + 1).min(widest) } else { 0 };
        if !moved && s.unsent == 0 {
            // Idle: the next write marks it again.
            slot.clock_backoff.store(backoff, Relaxed);
            return None;
        }
        if !moved {
            // Bytes wait, and nothing left since the last look, a bound ago at least: no ACK
            // clocks them (the peer delays its own). They go now.
            slot.nodelay_busy.fetch_add(1, SeqCst);
            // Pairs with the fence in `program_nodelay_begins` (invariant 3).
            fence(SeqCst);
            if !slot.program_choosing.load(SeqCst) && slot.clocked.load(SeqCst) {
                k.set_nodelay(fd);
                k.clear_nodelay(fd);
                self.stats.linger_releases.fetch_add(1, Relaxed);
                slot.clock_pushed.store(true, Relaxed);
            }
            slot.nodelay_busy.fetch_sub(1, SeqCst);
            slot.clock_backoff.store(0, Relaxed);
            return None;
        }
        // Still clocked out by ACKs: look again, later (`clock_interval`).
        slot.clock_backoff.store(backoff, Relaxed);
        if slot
            .clock_mark_us
            .compare_exchange(0, now.max(1), SeqCst, Relaxed)
            .is_ok()
        {
            self.corked.fetch_add(1, AcqRel);
        }
        Some(clock_interval(first, backoff, pushed))
    }

    /// Clears `slot`'s mark, counting it down (invariant 2); whether there was one.
    pub(crate) fn clear_clock_mark(&self, slot: &Slot) -> bool {
        if slot.clock_mark_us.load(Relaxed) == 0 {
            return false;
        }
        let had = slot.clock_mark_us.swap(0, SeqCst) != 0;
        if had {
            self.count_down();
        }
        had
    }

    /// `fd` stops being clocked (duplicated, or the flusher cannot run): the shim's
    /// `TCP_NODELAY` goes back on, which sends what Nagle held.
    pub(crate) fn unclock(&self, k: &impl Kernel, fd: i32, slot: &Slot) {
        if slot.clocked.swap(false, AcqRel) {
            self.shims_nodelay(k, fd, slot, true);
        }
        self.clear_clock_mark(slot);
    }

    /// Sets (`on`) or clears the shim's `TCP_NODELAY` on `fd`, unless the socket is no
    /// longer the shim's or the program is choosing its own (invariant 3).
    pub(crate) fn shims_nodelay(&self, k: &impl Kernel, fd: i32, slot: &Slot, on: bool) -> bool {
        slot.nodelay_busy.fetch_add(1, SeqCst);
        fence(SeqCst);
        let done = !slot.program_choosing.load(SeqCst)
            && slot.flags.peek().is_shims()
            && if on {
                k.set_nodelay(fd)
            } else {
                k.clear_nodelay(fd)
            };
        slot.nodelay_busy.fetch_sub(1, SeqCst);
        done
    }

    /// The program is about to set `TCP_NODELAY` on `fd` itself: the shim changes it no more
    /// until [`Shim::program_nodelay`] (or [`Shim::program_nodelay_failed`]), and one change
    /// of the shim's on its way lands first.
    pub fn program_nodelay_begins(&self, fd: i32) {
        let Some(slot) = self.slot(fd) else { return };
        slot.program_choosing.store(true, SeqCst);
        // Either the shim's look after its count sees this mark, or this look sees its count
        // (a fence on each side: loom's model fails with SeqCst accesses alone).
        fence(SeqCst);
        // A change of the shim's on its way (one or two `setsockopt` calls of another
        // thread) lands first; bounded as the cork's wait is, for a signal handler.
        let mut turns = 0;
        while slot.nodelay_busy.load(SeqCst) != 0 && turns < CORK_WAIT_TURNS {
            sync::spin();
            turns += 1;
        }
    }

    /// The program's `setsockopt(TCP_NODELAY)` that [`Shim::program_nodelay_begins`]
    /// announced failed: nothing changed.
    pub fn program_nodelay_failed(&self, fd: i32) {
        if let Some(slot) = self.slot(fd) {
            slot.program_choosing.store(false, SeqCst);
        }
    }
}
