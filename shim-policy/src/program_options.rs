//! The program's own view of its socket options: the shim's `TCP_CORK` never clears one the
//! program set (the one wait of the policy, [`CORK_WAIT_TURNS`]), `getsockopt` of
//! `TCP_NODELAY` and `TCP_CORK` reads the program's own values, and a program that holds its
//! own bytes (`TCP_CORK`, `MSG_MORE`, a `TCP_NODELAY` choice of its own) gets its socket
//! back.

use crate::sync::fence;
use crate::sync::Ordering::*;
use crate::*;

/// Most turns (each a `sched_yield`) the program's `setsockopt(TCP_CORK)` waits for an uncork
/// of the shim's that is on its way to the kernel (see [`Shim::program_cork_begins`]).
pub(crate) const CORK_WAIT_TURNS: u32 = if cfg!(loom) { u32::MAX } else { 10_000 };

impl Shim {
    /// `TCP_CORK` on or off (off sends what is held), counted.
    /// Never clears a `TCP_CORK` the program set itself (it holds its bytes to its own
    /// uncork, which sends ours too).
    ///
    /// An uncork is announced in the slot's `uncorking` before it looks for the program's
    /// mark, and withdrawn after the kernel call: with the fences here and in
    /// [`Shim::program_cork_begins`], either this look sees the mark, or the program's call
    /// waits for this uncork to be done (it cannot land after the program's cork).
    pub(crate) fn set_cork(&self, k: &impl Kernel, fd: i32, on: bool) -> bool {
        let slot = self.slot(fd).filter(|_| !on);
        if let Some(slot) = slot {
            slot.uncorking.fetch_add(1, Relaxed);
            fence(SeqCst);
            if slot.flags.peek().program_corked() {
                slot.uncorking.fetch_sub(1, Release);
                return false;
            }
        }
        self.stats.cork_calls.fetch_add(1, Relaxed);
        let done = k.set_cork(fd, on);
        if let Some(slot) = slot {
            slot.uncorking.fetch_sub(1, Release);
        }
        done
    }

    /// The program is about to set `TCP_CORK` on `fd` (either way): from now on the shim
    /// never clears it. Returns what to hand to [`Shim::program_cork_done`].
    ///
    /// An uncork of the shim's that looked before the mark was set may still be on its way
    /// to the kernel: this waits for it (one `setsockopt` of another thread), so that it
    /// cannot clear the cork the program is setting. The wait is bounded
    /// (`CORK_WAIT_TURNS` turns): a signal handler that sets `TCP_CORK` while its own
    /// thread is inside such an uncork must not hang (that one case stays open).
    pub fn program_cork_begins(&self, fd: i32) -> bool {
        let Some(slot) = self.slot(fd) else {
            return false;
        };
        let was = slot.flags.program_corks();
        fence(SeqCst);
        let mut turns = 0;
        while slot.uncorking.load(Acquire) != 0 && turns < CORK_WAIT_TURNS {
            sync::spin();
            turns += 1;
        }
        was
    }

    /// The program's `TCP_CORK` call returned: `on` is the value it set, `None` if the call
    /// failed (then the mark is as it was before, `was`).
    pub fn program_cork_done(&self, fd: i32, was: bool, on: Option<bool>) {
        let Some(slot) = self.slot(fd) else { return };
        if !on.unwrap_or(was) {
            slot.flags.program_uncorked();
        }
    }

    /// What the program sees of `TCP_NODELAY` (`nodelay`) or `TCP_CORK` (`!nodelay`) on `fd`
    /// when it reads the option: its own value, or the kernel's default when it set none;
    /// `None` when the shim does not manage `fd` (the kernel's value is the program's).
    /// The shim's own `TCP_NODELAY` and `TCP_CORK` stay invisible.
    pub fn program_view(&self, fd: i32, nodelay: bool) -> Option<bool> {
        let slot = self.slot(fd)?;
        let flags = slot.flags.get();
        if !flags.is_managed() {
            return None;
        }
        Some(if nodelay {
            slot.program_nodelay.load(Relaxed)
        } else {
            flags.program_corked()
        })
    }

    /// The program set `TCP_NODELAY` to `on` on `fd` (the call succeeded). Asking for what
    /// it already saw (off) on a socket the shim holds, as a server copying its listener's
    /// default to each connection does, changes nothing natively: the shim sets its own
    /// `TCP_NODELAY` again and goes on holding the socket. Any other choice is the
    /// program's own: it packetizes its output there, and the shim leaves the socket to it.
    pub fn program_nodelay(&self, k: &impl Kernel, fd: i32, on: bool) {
        let Some(slot) = self.slot(fd) else { return };
        let flags = slot.flags.get();
        // The shim may change `TCP_NODELAY` again from here on (after the choice below).
        let choosing = || slot.program_choosing.store(false, SeqCst);
        if !flags.is_managed() {
            choosing();
            return;
        }
        let seen = slot.program_nodelay.swap(on, Relaxed);
        if flags.is_shims() && !seen && !on {
            // Setting it pushes whatever Nagle held in between (nothing is left waiting),
            // unless the socket is clocked: there the program's off is the shim's too.
            if !slot.clocked.load(Acquire) {
                k.set_nodelay(fd);
            }
            self.stats.kept_defaults.fetch_add(1, Relaxed);
            choosing();
            return;
        }
        slot.clocked.store(false, Release);
        self.program_holds(k, fd);
        choosing();
    }

    /// The program set `TCP_CORK`, chose `TCP_NODELAY` or sent with `MSG_MORE` on `fd`:
    /// it holds bytes itself, so the shim ends its own burst there and holds it no more.
    /// Its burst ends (with no uncork if the program has just corked the socket itself: see
    /// [`Shim::program_cork_begins`]).
    pub fn program_holds(&self, k: &impl Kernel, fd: i32) {
        let Some(slot) = self.slot(fd) else { return };
        if !slot.flags.get().is_shims() {
            return;
        }
        // Marked first: no burst of the shim's starts on it from here on.
        let marked = slot.flags.give_to_program();
        self.release(k, fd);
        if marked {
            self.stats.self_managed.fetch_add(1, Relaxed);
        }
    }
}
