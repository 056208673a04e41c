//! Bursts: a managed socket's writes held (by `TCP_CORK`, or by `MSG_MORE` on a socket of a
//! learned shape) until its writer waits, a reader or `close` ends them, or its last write
//! completes its shape. Adoption of sockets, each write's two steps ([`WriteStep`]), the
//! thread's list of bursts it wrote to ([`ThreadBursts`]), their ends, and duplicated
//! descriptors of one socket.

use crate::config::Acks;
use crate::slot::Slot;
use crate::state::{Flags, HoldBy, Start};
use crate::sync::fence;
use crate::sync::Ordering::*;
use crate::*;

/// Bursts one thread can have open at once; a thread that opens more releases its oldest.
pub(crate) const THREAD_BURSTS: usize = 16;

/// The bursts one thread has written to and not yet seen released: `(fd, generation)`.
#[derive(Debug, Clone, Copy)]
pub struct ThreadBursts {
    entries: [(i32, u32); THREAD_BURSTS],
    len: usize,
}

impl ThreadBursts {
    /// An empty list (const, for a `thread_local!`).
    pub const fn new() -> Self {
        ThreadBursts {
            entries: [(-1, 0); THREAD_BURSTS],
            len: 0,
        }
    }

    /// Entries in the list (for the unit tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when the thread holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for ThreadBursts {
    fn default() -> Self {
        Self::new()
    }
}

/// What the libc layer does around one write on a managed socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct WriteStep {
    /// Wake or start the flusher (before the write).
    pub wake_flusher: bool,
    /// This write completes the burst's learned shape: call [`Shim::after_write`] with it.
    pub(crate) release_after: bool,
    /// Send this write with `MSG_MORE` (the burst is held by that flag, not by `TCP_CORK`)
    /// and call [`Shim::after_write`] with it: the burst may end while the write is made.
    pub more: bool,
    /// The burst it joined: another thread may end it and start a newer one meanwhile.
    generation: u32,
    /// A write on an ACK-clocked socket: [`Shim::after_write`] marks it for the flusher.
    pub(crate) clock: bool,
}

impl WriteStep {
    /// A write on an ACK-clocked socket, made plainly.
    pub(crate) fn clocked() -> WriteStep {
        WriteStep {
            clock: true,
            ..WriteStep::default()
        }
    }

    /// A write on an ACK-clocked socket: [`Shim::after_write`] only marks it (no system
    /// call).
    pub fn is_clocked(&self) -> bool {
        self.clock
    }

    /// Whether [`Shim::after_write`] has anything to do.
    pub fn needs_after(&self) -> bool {
        self.release_after || self.more || self.clock
    }
}

impl Shim {
    /// A new descriptor exists (socket, accept, connect of an unseen one): manage it if it
    /// is a TCP stream socket. A slot that still says "corked" belonged to a descriptor closed
    /// behind libc's back (a raw `close` syscall): its count is given back.
    pub fn adopt(&self, k: &impl Kernel, fd: i32) {
        self.adopt_as(k, fd, false);
    }

    /// `fd` was accepted on `listener`: adopted as any new socket, but left to the program,
    /// untouched (no `TCP_NODELAY` of ours), if the listener was: an accepted socket inherits
    /// the listener's `TCP_NODELAY` and `TCP_CORK`, so a server that set them there, as
    /// memcached does, chose for its connections too.
    ///
    /// A listener the shim never saw made (inherited: a service manager's, as systemd's
    /// `NoDelay=yes` sets `TCP_NODELAY` on it) says nothing of what the program chose, so
    /// `found` tells what the kernel gave the new socket: `(TCP_NODELAY, TCP_CORK)`, read
    /// before any option of the shim's. Either on, and the socket is left as the program got
    /// it (what it reads of its options is then the kernel's, as natively).
    pub fn adopt_accepted(
        &self,
        k: &impl Kernel,
        listener: i32,
        fd: i32,
        found: impl FnOnce() -> (bool, bool),
    ) {
        let from = self
            .slot(listener)
            .filter(|l| listener != fd && l.flags.peek().is_managed());
        let flags = from.map_or(Flags::default(), |l| l.flags.get());
        let found = from.is_none().then(found);
        let chosen = match found {
            None => flags.owner() == state::Owner::Program,
            Some((nodelay, cork)) => nodelay || cork,
        };
        self.adopt_as(k, fd, chosen);
        if let (Some((nodelay, cork)), Some(to)) = (found, self.slot(fd)) {
            if to.flags.get().is_managed() {
                to.program_nodelay.store(nodelay, Relaxed);
                if cork {
                    to.flags.program_corks();
                }
            }
        }
        // The connection inherits the listener's options, so what the program sees of them.
        if let (Some(from), Some(to)) = (from, self.slot(fd)) {
            if to.flags.get().is_managed() {
                let nodelay = from.program_nodelay.load(Relaxed);
                to.program_nodelay.store(nodelay, Relaxed);
                to.flags.inherit_program_cork(flags);
            }
        }
    }

    pub(crate) fn adopt_as(&self, k: &impl Kernel, fd: i32, program_chose: bool) {
        let slot = if k.is_tcp_stream(fd) {
            self.slot_or_make(fd)
        } else {
            self.slot(fd)
        };
        let Some(slot) = slot else { return };
        // A burst of the number's earlier socket, or one a racing write just began.
        let old = slot.flags.reset();
        self.end_burst(k, fd, old, false);
        self.clear_clock_mark(slot);
        slot.renew();
        if !k.is_tcp_stream(fd) {
            return;
        }
        self.high.fetch_max(fd as usize + 1, Relaxed);
        self.stats.sockets.fetch_add(1, Relaxed);
        // The receiver's half, whoever holds the sender's: the program chose how it sends,
        // not how soon the kernel acknowledges what it receives.
        if let Acks::DelackMaxUs(us) = self.config.acks {
            if k.set_delack_max_us(fd, us) {
                self.stats.ack_calls.fetch_add(1, Relaxed);
            }
        }
        slot.flags.manage(program_chose);
        if program_chose {
            self.stats.self_managed.fetch_add(1, Relaxed);
            return;
        }
        // Setting NODELAY makes every release immediate; errors leave the socket as it was.
        k.set_nodelay(fd);
    }

    /// A descriptor the program inherited (stdin and stdout of an inetd-style service, a
    /// socket passed by its parent): adopted as any new socket (its `TCP_NODELAY`, which
    /// the program sees, is `nodelay`: what it was when inherited; set by the parent, often
    /// by the parent's own shim, it is no choice of this program's), and linked to the
    /// earlier inherited descriptors `others` that name the same socket.
    pub fn adopt_inherited(&self, k: &impl Kernel, fd: i32, nodelay: bool, others: &[i32]) {
        self.adopt(k, fd);
        let Some(slot) = self.slot(fd).filter(|s| s.flags.get().is_managed()) else {
            return;
        };
        slot.program_nodelay.store(nodelay, Relaxed);
        let Some(id) = k.socket_id(fd) else { return };
        for &o in others {
            if o != fd && self.is_managed(o) && k.socket_id(o) == Some(id) {
                if let Some(a) = self.slot(o) {
                    Self::share(a, slot, id);
                }
            }
        }
    }

    /// The calling thread writes to `fd`: start a burst if none is in progress, and note it in
    /// the thread's list; say what to do around the write. `carries_more`: the call can be
    /// made with `MSG_MORE` (a write or send, not a `sendfile` or `splice`).
    ///
    /// A burst short of the socket's learned shape is held by `MSG_MORE` on its writes: the
    /// write that completes the shape, sent without it, sends the burst; no `setsockopt` at
    /// all. Other bursts are held by `TCP_CORK` (the kernel then holds them even when an ACK
    /// arrives, which `MSG_MORE` does not), uncorked at their end. A write that cannot carry
    /// the flag inside a `MSG_MORE` burst (a file body by `sendfile`) goes out plainly and so
    /// sends what was held: a segment early at worst, never late.
    pub fn before_write(
        &self,
        k: &impl Kernel,
        fd: i32,
        mine: &mut ThreadBursts,
        carries_more: bool,
    ) -> WriteStep {
        let none = WriteStep::default();
        if self.config.mode == Mode::Nodelay || self.hold_nothing.load(Acquire) {
            return none;
        }
        let Some(slot) = self.slot(fd) else {
            return none;
        };
        let flags = slot.flags.get();
        if !flags.is_shims() {
            return none;
        }
        self.stats.writes.fetch_add(1, Relaxed);
        // Another thread waits in a read of this socket: it is ACK-clocked (see the `clock`
        // module), and its writes go plainly, clocked by the kernel's Nagle, bounded by the
        // flusher's look after them.
        if self.clocks(k, fd, slot) {
            return WriteStep {
                clock: true,
                ..none
            };
        }
        if self.first_write_plainly(slot) {
            // A forked child's first write of a burst, no flusher yet: plainly, noted (the
            // wait ends the burst and still teaches), and the next write before the wait
            // starts the thread.
            slot.writes.store(1, Relaxed);
            self.note(k, mine, fd, slot.generation.load(Acquire));
            return none;
        }
        let nth = slot.writes.load(Relaxed).saturating_add(1);
        slot.writes.store(nth, Relaxed);
        let shape = slot.shape.load(Relaxed);
        let learned = self.config.mode == Mode::Nagless && shape != 0;
        let completes = learned && shape == nth;
        if completes {
            self.stats.shaped.fetch_add(1, Relaxed);
            if slot.split.load(Relaxed) {
                slot.patient.store(true, Relaxed);
            }
        }
        if flags.is_held() {
            return self.join_burst(k, fd, slot, mine, flags, completes, carries_more);
        }
        if completes {
            // A burst of the learned shape's length whose earlier writes already left (a
            // one-write shape): nothing to hold. Noted, so the wait still teaches.
            self.note(k, mine, fd, slot.generation.load(Acquire));
            return none;
        }
        let by = match self.config.mode {
            // Held by the flag alone: nothing is left in the socket that only the shim's
            // code would clear. A `TCP_CORK` outlives a process that dies, stops, or hands
            // the socket on, and slows every later writer of that socket; a `MSG_MORE` tail
            // goes with the next plain write, whoever makes it.
            Mode::Nagless if carries_more => HoldBy::More,
            Mode::Nagless => {
                // `sendfile`, `splice`: cannot carry the flag, so it goes out plainly (and
                // sends nothing held: none is). Noted, so that the wait still teaches.
                self.note(k, mine, fd, slot.generation.load(Acquire));
                return none;
            }
            _ => HoldBy::Cork,
        };
        self.start_burst(k, fd, slot, mine, by)
    }

    /// A write joins the burst in progress on `fd` (`flags`, as `before_write` read them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn join_burst(
        &self,
        k: &impl Kernel,
        fd: i32,
        slot: &Slot,
        mine: &mut ThreadBursts,
        flags: Flags,
        completes: bool,
        carries_more: bool,
    ) -> WriteStep {
        self.stats.joined.fetch_add(1, Relaxed);
        let generation = slot.generation.load(Acquire);
        self.note(k, mine, fd, generation);
        if flags.by_more() && completes {
            // Before the write: a MSG_MORE write of another thread that reaches the kernel
            // after this one sees the mark and pushes itself (see `after_write`).
            slot.flags.mark_last_sending();
        }
        WriteStep {
            release_after: completes,
            more: flags.by_more() && !completes && carries_more,
            generation,
            ..WriteStep::default()
        }
    }

    /// The write starts a burst on `fd`, held `by` `TCP_CORK` or `MSG_MORE`.
    ///
    /// The order is the protocol: cork first (a corked burst: the flusher never uncorks a
    /// socket before it is corked); count it in `corked` (so that no end counts it down
    /// before it is counted); publish it by CAS, only on a slot that is the shim's, so that
    /// nothing is ever undone on flags another party owns; then bump the generation. A start
    /// that does not publish gives back its count and undoes its cork.
    pub(crate) fn start_burst(
        &self,
        k: &impl Kernel,
        fd: i32,
        slot: &Slot,
        mine: &mut ThreadBursts,
        by: HoldBy,
    ) -> WriteStep {
        if by == HoldBy::Cork && !self.set_cork(k, fd, true) {
            return WriteStep::default();
        }
        let first = self.corked.fetch_add(1, AcqRel) == 0;
        // Before publishing: the flusher must not see the previous burst's start time.
        let stamp = || slot.corked_at_us.store(k.now_us(), Relaxed);
        match slot.flags.start(by, stamp) {
            Start::Started => {}
            Start::Joined => {
                // Another thread started a burst this very moment. A MSG_MORE write goes out
                // plainly (a segment early at worst); a corked one joined it, marking CORK_ON
                // so that its end takes the cork off. Noted either way, so that this
                // thread's wait ends that burst too.
                self.count_down();
                self.note(k, mine, fd, slot.generation.load(Acquire));
                return WriteStep::default();
            }
            Start::Lost => {
                // Forgotten, renewed or given to the program meanwhile: take our cork off
                // (unless the program holds its own: `set_cork` leaves that).
                self.count_down();
                if by == HoldBy::Cork {
                    self.set_cork(k, fd, false);
                }
                return WriteStep::default();
            }
        }
        let generation = slot.generation.fetch_add(1, AcqRel).wrapping_add(1);
        self.stats.bursts.fetch_add(1, Relaxed);
        self.note(k, mine, fd, generation);
        // Pairs with the fence in `flusher_tick`'s park: either the flusher's look after
        // saying "parked" sees this burst counted, or this look sees it parked and wakes it
        // (with acquire/release alone both could miss: the loom model (e) fails so).
        fence(SeqCst);
        WriteStep {
            wake_flusher: self.flusher_missing.load(Acquire)
                || (first && self.flusher_parked.load(Acquire)),
            release_after: false,
            more: by == HoldBy::More,
            generation,
            clock: false,
        }
    }

    /// After the write `step` was made for. A write that completed the learned shape sends
    /// its burst now (not a newer one another thread started meanwhile). A write sent with
    /// `MSG_MORE` pushes its bytes out itself if its burst ended while it was being made, or
    /// if the burst's last write was on its way: whoever sent the burst may have done so
    /// before these bytes were queued.
    /// `failed`: the call returned an error or 0 (it queued nothing, so it pushed nothing).
    /// A write on an ACK-clocked socket marks it for the flusher's look; true: wake the
    /// flusher then (as [`WriteStep::wake_flusher`] says before a write).
    pub fn after_write(&self, k: &impl Kernel, fd: i32, step: WriteStep, failed: bool) -> bool {
        if step.clock {
            return !failed && self.mark_clocked(k, fd);
        }
        if step.more {
            // Pairs with the RMWs (and fences) of `release`, `release_sent` and the
            // LAST_SENDING mark: either they come after this load, and so after the bytes
            // were queued, or this load sees them.
            fence(SeqCst);
            let flags = self
                .live_generation(fd, step.generation)
                .map_or(Flags::default(), |s| s.flags.peek());
            if !flags.is_held() || flags.last_sending() {
                self.set_cork(k, fd, false);
            }
        }
        if step.release_after {
            if let Some(slot) = self.live_generation(fd, step.generation) {
                if slot.flags.get().by_more() {
                    self.release_sent(k, fd, slot, failed);
                } else {
                    self.release(k, fd);
                }
            }
        }
        false
    }

    /// Ends a burst held by `MSG_MORE` whose last write went out plainly and so sent it: no
    /// push needed, unless that write queued nothing, or `TCP_CORK` went on meanwhile.
    ///
    /// Only a burst still marked LAST_SENDING is this write's: between its generation check
    /// and here, its burst may have been ended by a reader and a newer one started (whose
    /// start clears the mark, and whose bytes this write did not send).
    pub(crate) fn release_sent(&self, k: &impl Kernel, fd: i32, slot: &Slot, failed: bool) {
        let old = slot.flags.end_sent();
        // A write that queued nothing pushed nothing: what was held before it goes now.
        self.end_burst(k, fd, old, !failed);
    }

    /// Ends the burst `ended` names (the value a transition just cleared its bits from,
    /// [`State::end`], [`State::end_sent`] or [`State::reset`]); nothing if it names none.
    /// The one place a burst ends: it is counted down, then the cork comes off, which sends
    /// the held tail at once with `TCP_NODELAY` on, whether `TCP_CORK` or `MSG_MORE` held it
    /// (the kernel pushes pending data on every clear). `sent`: the burst's last write went
    /// out plainly and sent it, so the cork comes off only if a corked start put it on.
    /// Never clears the program's own `TCP_CORK` (see [`Shim::set_cork`]).
    pub(crate) fn end_burst(&self, k: &impl Kernel, fd: i32, ended: Flags, sent: bool) -> bool {
        if !ended.is_held() {
            return false;
        }
        self.count_down();
        // Pairs with the fence in `after_write` (a write with MSG_MORE made meanwhile).
        fence(SeqCst);
        if !sent || ended.cork_on() {
            self.set_cork(k, fd, false);
        }
        true
    }

    /// One burst fewer in `corked` (invariant 5 of [`state`]: never below zero).
    pub(crate) fn count_down(&self) {
        let before = self.corked.fetch_sub(1, AcqRel);
        debug_assert!(
            before > 0,
            "corked underflows: a burst ended before it was counted"
        );
    }

    pub(crate) fn note(&self, k: &impl Kernel, mine: &mut ThreadBursts, fd: i32, generation: u32) {
        if mine.entries[..mine.len].contains(&(fd, generation)) {
            return;
        }
        if mine.len == THREAD_BURSTS {
            // Full: the thread has moved on to many other sockets since it wrote this one
            // (an event loop answering one request on each); that burst ends here.
            let (old_fd, old_gen) = mine.entries[0];
            self.end_noted(k, old_fd, old_gen);
            mine.entries.copy_within(1.., 0);
            mine.len -= 1;
        }
        mine.entries[mine.len] = (fd, generation);
        mine.len += 1;
    }

    /// The calling thread turns to wait: end every burst it wrote to.
    pub fn release_thread(&self, k: &impl Kernel, mine: &mut ThreadBursts) {
        for &(fd, generation) in &mine.entries[..mine.len] {
            self.end_noted(k, fd, generation);
        }
        mine.len = 0;
    }

    /// Ends the burst a thread noted, unless the entry is stale, and learns its shape.
    pub(crate) fn end_noted(&self, k: &impl Kernel, fd: i32, generation: u32) {
        if let Some(slot) = self.live_generation(fd, generation) {
            slot.learn();
            self.release(k, fd);
        }
    }

    /// The slot of `fd` if `generation` is still its burst's (the entry is not stale).
    pub(crate) fn live_generation(&self, fd: i32, generation: u32) -> Option<&Slot> {
        self.slot(fd)
            .filter(|s| s.generation.load(Acquire) == generation)
    }

    /// Ends the burst of the socket `fd` names, and learns its shape: the program reads from,
    /// receives on, shuts down or splices from `fd`, or `dup2`s over it (it waits on the
    /// socket, or is done with this descriptor of it). A descriptor shared with others (see
    /// [`Shim::duplicate`]) ends theirs too: `TCP_CORK` belongs to the socket, and a program
    /// that reads its stdin and writes its stdout, both one socket, waits on the one for
    /// what the other holds.
    pub fn release_socket(&self, k: &impl Kernel, fd: i32) {
        self.release_socket_only(k, fd);
    }

    pub(crate) fn release_socket_only(&self, k: &impl Kernel, fd: i32) {
        let Some(slot) = self.slot(fd) else { return };
        slot.learn();
        self.release(k, fd);
        // Acquire: pairs with `share`, which links the new descriptor before this one.
        let link = slot.shared.load(Acquire);
        if link != 0 {
            let id = slot.socket.load(Relaxed);
            let mut others = false;
            for (other, s) in self.live_slots() {
                if other != fd && s.shared.load(Acquire) != 0 && s.socket.load(Relaxed) == id {
                    others |= s.flags.peek().is_managed();
                    s.learn();
                    self.release(k, other);
                }
            }
            if !others {
                // Its other descriptors are closed (`dup2(s, 0); close(s)`): no more scans,
                // unless a link was made since this look (the loom model (g) fails if it
                // is cleared unconditionally).
                let _ = slot.shared.compare_exchange(link, 0, AcqRel, Relaxed);
            }
        }
    }

    /// Ends the burst on `fd`, whoever started it (the program reads, shuts down or closes it).
    pub fn release(&self, k: &impl Kernel, fd: i32) -> bool {
        let Some(slot) = self.slot(fd) else {
            return false;
        };
        // Most calls find no burst: a plain load, no locked RMW.
        if !slot.flags.peek().is_held() {
            return false;
        }
        let old = slot.flags.end();
        self.end_burst(k, fd, old, false)
    }

    /// Ends every burst of the process (fork, exec, exit): O(descriptors), for rare events.
    pub fn release_all(&self, k: &impl Kernel) {
        if self.corked.load(Acquire) == 0 {
            return;
        }
        for (fd, _) in self.live_slots() {
            self.release(k, fd);
        }
    }

    /// `fd` is being closed: end its burst and forget it. Returns whether it was managed (the
    /// caller then counts what it sent).
    pub fn forget(&self, k: &impl Kernel, fd: i32) -> bool {
        let Some(slot) = self.slot(fd) else {
            return false;
        };
        if !slot.flags.peek().is_managed() {
            return false;
        }
        // Its burst ends, and no burst starts on it from here on (a start in progress finds
        // it nobody's, and undoes itself).
        let old = slot.flags.reset();
        self.end_burst(k, fd, old, false);
        self.clear_clock_mark(slot);
        slot.renew();
        true
    }

    /// `new` now refers to what `old` refers to (dup, dup2, dup3).
    pub fn duplicate(&self, k: &impl Kernel, old: i32, new: i32) {
        if old == new {
            return;
        }
        self.forget(k, new);
        let Some(from) = self.slot(old) else { return };
        let Some(to) = self.slot_or_make(new) else {
            return;
        };
        // Its duplicate's bursts are the shim's, released with `TCP_NODELAY` on.
        self.unclock(k, old, from);
        let flags = from.flags.get();
        if flags.is_managed() {
            // The duplicate shares the socket; the burst stays tracked on `old`.
            to.flags.duplicate_of(flags);
            let nodelay = from.program_nodelay.load(Relaxed);
            to.program_nodelay.store(nodelay, Relaxed);
            self.high.fetch_max(new as usize + 1, Relaxed);
            if let Some(id) = k.socket_id(old) {
                Self::share(from, to, id);
            }
        }
    }

    /// Marks `old` and `new` as descriptors of one socket, `id`: `new` first (Release), so
    /// that a reader of `old` that sees the link finds `new` linked too.
    pub(crate) fn share(old: &Slot, new: &Slot, id: u64) {
        for s in [new, old] {
            s.socket.store(id, Relaxed);
            // Never 0 ("unlinked"), also when the epoch wraps.
            let _ = s
                .shared
                .fetch_update(AcqRel, Acquire, |v| Some(v.wrapping_add(1).max(1)));
        }
    }
}
