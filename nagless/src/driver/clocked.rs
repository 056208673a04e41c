//! The clocked hand-over ([`FlushPolicy::clocked`](crate::FlushPolicy::clocked)) of the
//! [`Driver`]: a write or batch handed to the kernel at once, sent now or with the next ACK.
//! Two ways, one chosen per stream: the `MSG_MORE` hand-over, which asks the kernel's send
//! queue before and after each send (every stream), and, in a tokio stream whose caller's
//! flushes delimit its batches, whole batches left to the kernel's own Nagle, bounded by looks
//! ([`KernelClock`]). Both release what the kernel holds when the caller wants everything on
//! the wire. Under another policy, in such a tokio stream, the flushes made while the peer
//! answers ([`Answers`](super::Answers)) take the second way, and everything else leaves at
//! once ([`Driver::pump_answered`]).

use std::io;
use std::time::Instant;

use super::kernel_clock::{Found, KernelClock};
use super::{Driver, Seal, SealOver, Wire, CLOCK_BOUND};
use crate::coalescer::Drive;
use crate::policy::FlushReason;

impl<S: Seal> Driver<S> {
    /// Under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked): sends what the kernel
    /// holds for an ACK, if it may hold anything (the caller wants everything on the wire).
    pub(crate) fn release_held<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()> {
        if self.kernel.due().is_some() {
            return self.push_kernel(wire);
        }
        if self.held.is_some() {
            self.held = None;
            self.core.on_push();
            wire.push()?;
        }
        Ok(())
    }

    /// Sends what is due under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked).
    ///
    /// A transmit for a clocked write or flush is sent at once when nothing is
    /// unacknowledged (`SIOCOUTQ` 0), or when bytes held earlier have waited
    /// [`CLOCK_BOUND`]; otherwise it is sent with `MSG_MORE`, and then the kernel is asked
    /// whether it now holds bytes with nothing in flight (no ACK will come to send them): if
    /// so they are pushed at once. A transmit for any other reason (an urgent write,
    /// `flush_now`, a read that would wait, close) is sent plainly, which also sends what
    /// the kernel held.
    ///
    /// Why nothing strands: the kernel sends held bytes on every ACK it processes (with
    /// `TCP_NODELAY` on), and an ACK that arrives while the send runs is processed after the
    /// bytes are queued. So bytes can be held with nothing in flight only when every byte in
    /// flight was acknowledged before the send began, and the check after the send sees that
    /// (both counters stay put in that state, whatever order they are read in).
    pub(super) fn pump_clocked<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive>
    where
        S: SealOver<W>,
    {
        let tx = self.core.poll_transmit(now);
        let clocked = tx.is_some_and(|tx| tx.reason == FlushReason::Clocked);
        let overdue = self
            .held
            .is_some_and(|t| now.saturating_duration_since(t) >= CLOCK_BOUND);
        // In flight ahead of this send: bytes of earlier batches only (the caller's own
        // batch's first pieces would wait for an ACK its peer delays until the rest comes).
        let own = self.batch.own(self.core.stats().bytes_sent).unwrap_or(0);
        let in_flight = clocked
            && !overdue
            // Bytes held already mean data in flight (or the check after the send finds out).
            && (self.held.is_some() || {
                self.core.on_clock_check();
                wire.unacknowledged().is_ok_and(|n| u64::from(n) > own)
            });
        if !in_flight {
            let had_due = tx.is_some() || self.seal.backlog();
            let r = self
                .seal
                .send_due(&mut self.core, wire, now, handshake, false);
            if had_due && matches!(r, Ok(Drive::Idle)) {
                // The last send went without MSG_MORE: the kernel sent everything it held.
                self.held = None;
            }
            return r;
        }
        let sent_before = self.core.stats().bytes_sent;
        let r = self
            .seal
            .send_due(&mut self.core, wire, now, handshake, true);
        self.core.on_held_for_ack();
        let ours = self.core.stats().bytes_sent - sent_before;
        self.core.on_clock_check();
        let stranded = match wire.unsent() {
            Ok(0) => {
                self.held = None;
                false
            }
            Ok(unsent) => {
                self.core.on_clock_check();
                match wire.unacknowledged() {
                    Ok(unacked) if unacked > unsent => {
                        // Something is in flight: its ACK sends what is held. Only this
                        // send's bytes held: the older ones have left, so the bound restarts.
                        if u64::from(unsent) <= ours {
                            self.held = Some(now);
                        } else {
                            self.held.get_or_insert(now);
                        }
                        false
                    }
                    _ => true,
                }
            }
            Err(_) => true,
        };
        if stranded {
            self.release_held_now(wire)?;
        }
        r
    }

    /// Sends what is due to a socket with Nagle on, under
    /// [`FlushPolicy::clocked`](crate::FlushPolicy::clocked) once the caller's flushes delimit
    /// its batches (see [`KernelClock`]): one plain send per batch, which the kernel sends at
    /// once or with the next ACK; a look is then owed. A transmit for an urgent write,
    /// `flush_now` or close is pushed out at once.
    pub(super) fn pump_kernel_clocked<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive>
    where
        S: SealOver<W>,
    {
        if self.kernel == KernelClock::Ready {
            // The looks need the kernel's counters (the send queue's): without them, the
            // `MSG_MORE` hand-over stays.
            let ok = wire.progress().is_ok() && wire.nagle(true).is_ok();
            self.kernel.turned_on(ok);
            if !ok && !self.core.policy().is_clocked() {
                // Under a policy that clocks only answered flushes: they leave at once.
                return self
                    .seal
                    .send_due(&mut self.core, wire, now, handshake, false);
            }
            if !ok {
                return self.pump_clocked(wire, now, handshake);
            }
            // What a `MSG_MORE` hand-over left held is now the kernel's Nagle's to send: it
            // is looked at with the rest.
            if self.held.take().is_some() {
                self.kernel.sent(now, CLOCK_BOUND);
            }
        }
        let tx = self.core.poll_transmit(now);
        // (At the high-water mark a transmit's reason says so, whatever made its bytes due:
        // pushing then costs nothing, full segments are leaving.)
        let urgent = tx.is_some_and(|tx| {
            matches!(
                tx.reason,
                FlushReason::Urgent
                    | FlushReason::Explicit
                    | FlushReason::Close
                    | FlushReason::HighWater
            )
        });
        // Anything handed over (plaintext, or records the seal holds: a key update, an
        // alert) may be held by the kernel: a look is owed.
        let had_due = tx.is_some() || self.seal.backlog();
        let r = self
            .seal
            .send_due(&mut self.core, wire, now, handshake, false);
        if had_due {
            let first = self.kernel.due().is_none();
            self.kernel.sent(now, CLOCK_BOUND);
            // The first look at once: a batch the kernel sent whole owes nothing more (no
            // timer wakes for it); what it holds is pushed a bound from now, unless an ACK
            // sends it first.
            if first && !urgent {
                self.look_at_kernel(wire, now, true)?;
            }
        }
        if urgent && matches!(r, Ok(Drive::Idle)) {
            self.push_kernel(wire)?;
        }
        r
    }

    /// Sends what is due under a policy that clocks only the flushes its peer answered
    /// ([`FlushPolicy::clock_answered`](crate::FlushPolicy::clock_answered)), in a stream
    /// with a [`KernelClock`]: such a flush's batch (due as clocked) goes to the kernel's
    /// Nagle as [`pump_kernel_clocked`](Self::pump_kernel_clocked) hands it; anything else
    /// due (a flush with no answer since the one before, a linger deadline, the threshold, an
    /// urgent write, close) leaves at once, Nagle turned off first, which sends what the
    /// kernel held before it.
    pub(super) fn pump_answered<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive>
    where
        S: SealOver<W>,
    {
        match self.core.poll_transmit(now) {
            Some(tx) if tx.reason == FlushReason::Clocked => {
                return self.pump_kernel_clocked(wire, now, handshake);
            }
            // Records the seal holds, after a clocked batch: looked at with it.
            None if self.kernel.is_on() => {
                return self.pump_kernel_clocked(wire, now, handshake);
            }
            Some(_) if self.kernel.is_on() => {
                self.nagle_off(wire)?;
                self.kernel.turned_off();
            }
            _ => {}
        }
        self.seal
            .send_due(&mut self.core, wire, now, handshake, false)
    }

    /// Under a [`KernelClock`] that is on: the look owed, if it is due at `now` (the stream's
    /// background task calls it) or, `early`, if it is the first since a send (a reader
    /// about to wait): bytes the kernel held a whole bound are pushed.
    pub(crate) fn look_at_kernel<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        now: Instant,
        early: bool,
    ) -> io::Result<()> {
        let owed = if early {
            self.kernel.first_look_owed()
        } else {
            self.kernel.due().is_some_and(|at| at <= now)
        };
        if !owed {
            return Ok(());
        }
        self.core.on_clock_check();
        let found = match wire.progress() {
            Ok((sent, unsent)) => self.kernel.looked(now, CLOCK_BOUND, sent, unsent),
            // The kernel cannot say: push, so that nothing waits on what is not known (which
            // says nothing of the peer).
            Err(_) => return self.push_kernel(wire),
        };
        match found {
            Found::Stuck => {
                self.answers.unanswered();
                return self.push_kernel(wire);
            }
            Found::Released(_) => self.answers.released(),
            Found::Clear | Found::Moving(_) => {}
        }
        Ok(())
    }

    /// Sends everything a Nagle socket holds (`TCP_NODELAY` set, then cleared again). The
    /// look stays owed until the push is made; a socket that refuses to turn Nagle back on
    /// keeps `TCP_NODELAY` from then on ([`KernelClock::Refused`]).
    fn push_kernel<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()> {
        self.nagle_off(wire)?;
        self.kernel.pushed();
        if wire.nagle(true).is_err() {
            self.kernel.refused();
        }
        Ok(())
    }

    /// Turns the kernel's Nagle off (`TCP_NODELAY` set), which sends what it held.
    fn nagle_off<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()> {
        self.core.on_push();
        wire.nagle(false)
    }

    /// Pushes what the kernel holds, whatever was last seen.
    fn release_held_now<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()> {
        self.held = None;
        self.core.on_push();
        wire.push()
    }
}
