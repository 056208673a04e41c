//! Under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked), in a tokio stream whose
//! caller's flushes delimit its batches (see [`Batch`](super::Batch)) and which has a timer,
//! and under another policy for the flushes made while the peer answers
//! ([`FlushPolicy::clock_answered`](crate::FlushPolicy::clock_answered)): the kernel's own
//! Nagle clocks whole batches, bounded by looks.
//!
//! Such a caller (redis-rs's multiplexed connection, hyper, a codec) already writes each batch
//! whole and flushes it. Each batch is one plain send to a socket with Nagle on: the kernel
//! sends it at once when no small segment of ours is unacknowledged (Minshall's rule), and
//! otherwise with the next ACK, together with everything written since, which is what the
//! `MSG_MORE` hand-over does with two to four system calls per batch instead of one send. A batch's
//! own pieces are in its one send, so they never wait for each other's ACK.
//!
//! The bound: what Nagle holds waits for an ACK, and a peer that does not answer the earlier
//! bytes (an HTTP/2 `SETTINGS` acknowledgement, a `WINDOW_UPDATE`) delays it (40 ms on
//! Linux). So after every send a look is owed: the kernel is asked what it has sent in all
//! and what it holds. The first is made at once, right after the send (or, for bytes handed
//! over elsewhere, when the reader is about to wait); every look that finds bytes held owes
//! the next one [`CLOCK_BOUND`](super::CLOCK_BOUND) later, which the stream's background task
//! makes. When the kernel has sent fewer bytes since the previous look
//! than it held then, bytes have waited a whole bound with no ACK to release them: they are
//! pushed (`TCP_NODELAY` set and cleared). A look that finds nothing held ends the looking
//! until the next send.
//!
//! Invariants: `On` only while the socket has `TCP_NODELAY` off; while `On`, a look is
//! scheduled whenever bytes of ours may be held (from every send until a look finds none or
//! a push sends them).

use std::time::{Duration, Instant};

/// Whether, and how, the kernel's Nagle clocks this stream's batches.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelClock {
    /// Not for this stream: the std stream and the C API (whose writers may flush once and
    /// wait elsewhere), a stream without a timer to make the looks, or no socket to clock.
    #[default]
    Unavailable,
    /// Allowed; the socket has `TCP_NODELAY` on: no batch clocked yet, or (under a policy
    /// that clocks only the flushes its peer answered) the last batch left at once.
    Ready,
    /// Nagle is on; `look` is when to next ask the kernel what it holds.
    On { look: Option<Look> },
    /// The socket refused to turn Nagle on: under `clocked` the `MSG_MORE` hand-over stays,
    /// under another policy every batch is sent plainly.
    Refused,
}

/// A look the stream owes the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Look {
    /// When it is due.
    pub(crate) at: Instant,
    /// At the previous look, when the kernel held bytes then: what it had sent in all, and
    /// what it held.
    held: Option<(u64, u32)>,
}

/// What a look found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing held: no more looks until the next send.
    Clear,
    /// Bytes held, none seen held before (the first look since a send): look again then.
    Moving(Instant),
    /// The bytes held at the previous look have left, sent by ACKs before a whole bound
    /// passed (answers are coming): look again then, if newer bytes are held.
    Released(Option<Instant>),
    /// Bytes held a whole bound with nothing sent: push them.
    Stuck,
}

impl KernelClock {
    /// Whether batches go to a Nagle socket (now, or from the next delimited batch on).
    pub(crate) fn usable(self) -> bool {
        matches!(self, KernelClock::Ready | KernelClock::On { .. })
    }

    /// Nagle was turned on (or refused: `ok` false).
    pub(crate) fn turned_on(&mut self, ok: bool) {
        debug_assert_eq!(*self, KernelClock::Ready);
        *self = if ok {
            KernelClock::On { look: None }
        } else {
            KernelClock::Refused
        };
    }

    /// Bytes were handed to the Nagle socket at `now`: a look is due a bound later, unless one
    /// is already scheduled (it comes sooner).
    pub(crate) fn sent(&mut self, now: Instant, bound: Duration) {
        if let KernelClock::On { look: look @ None } = self {
            *look = Some(Look {
                at: now + bound,
                held: None,
            });
        }
    }

    /// When the next look is due, if one is.
    pub(crate) fn due(self) -> Option<Instant> {
        match self {
            KernelClock::On { look: Some(l) } => Some(l.at),
            _ => None,
        }
    }

    /// Whether a look is owed and none was made since the last send: the reader, about to
    /// wait, makes it early.
    pub(crate) fn first_look_owed(self) -> bool {
        matches!(
            self,
            KernelClock::On {
                look: Some(Look { held: None, .. })
            }
        )
    }

    /// A look at `now` found the kernel had sent `sent` bytes in all and held `unsent`.
    pub(crate) fn looked(
        &mut self,
        now: Instant,
        bound: Duration,
        sent: u64,
        unsent: u32,
    ) -> Found {
        let KernelClock::On { look } = self else {
            return Found::Clear;
        };
        let before = look.and_then(|l| l.held);
        // The kernel sends in order: the bytes it held at the previous look have all left
        // once it has sent as many since.
        let stuck = before.is_some_and(|(was_sent, was_held)| {
            sent.saturating_sub(was_sent) < u64::from(was_held)
        });
        if stuck && unsent > 0 {
            *look = None;
            return Found::Stuck;
        }
        let next = (unsent > 0).then(|| now + bound);
        *look = next.map(|at| Look {
            at,
            held: Some((sent, unsent)),
        });
        match (before.is_some(), next) {
            (true, next) => Found::Released(next),
            (false, Some(at)) => Found::Moving(at),
            (false, None) => Found::Clear,
        }
    }

    /// Nagle was turned off (`TCP_NODELAY` set, which sends what it held): a batch leaves at
    /// once, and no look is owed.
    pub(crate) fn turned_off(&mut self) {
        debug_assert!(matches!(self, KernelClock::On { .. }));
        *self = KernelClock::Ready;
    }

    /// Whether Nagle is on now.
    pub(crate) fn is_on(self) -> bool {
        matches!(self, KernelClock::On { .. })
    }

    /// The socket would not turn Nagle back on after a push (it has `TCP_NODELAY`): the
    /// `MSG_MORE` hand-over takes over.
    pub(crate) fn refused(&mut self) {
        *self = KernelClock::Refused;
    }

    /// Everything held was pushed: no look is owed until the next send.
    pub(crate) fn pushed(&mut self) {
        if let KernelClock::On { look } = self {
            *look = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_micros(500);

    fn on() -> (KernelClock, Instant) {
        let mut k = KernelClock::Ready;
        k.turned_on(true);
        (k, crate::clock::now())
    }

    #[test]
    fn a_send_schedules_one_look_a_bound_later() {
        let (mut k, t) = on();
        assert_eq!(k.due(), None, "nothing sent, nothing to look at");
        k.sent(t, BOUND);
        k.sent(t + BOUND / 2, BOUND);
        assert_eq!(k.due(), Some(t + BOUND), "the earlier look stands");
    }

    #[test]
    fn nothing_held_ends_the_looking() {
        let (mut k, t) = on();
        k.sent(t, BOUND);
        assert_eq!(k.looked(t + BOUND, BOUND, 100, 0), Found::Clear);
        assert_eq!(k.due(), None);
        // Held at one look, gone at the next: released, and no look more.
        k.sent(t + 2 * BOUND, BOUND);
        assert!(matches!(
            k.looked(t + 3 * BOUND, BOUND, 100, 40),
            Found::Moving(_)
        ));
        assert_eq!(
            k.looked(t + 4 * BOUND, BOUND, 100, 0),
            Found::Released(None)
        );
        assert_eq!(k.due(), None);
    }

    #[test]
    fn bytes_held_while_the_kernel_sends_are_looked_at_again() {
        let (mut k, t) = on();
        k.sent(t, BOUND);
        let t1 = t + BOUND;
        assert_eq!(k.looked(t1, BOUND, 100, 40), Found::Moving(t1 + BOUND));
        // An ACK came and released the 40 bytes held (the kernel sent 40 more); 40 newer
        // ones wait: look again.
        assert_eq!(
            k.looked(t1 + BOUND, BOUND, 140, 40),
            Found::Released(Some(t1 + 2 * BOUND))
        );
        assert_eq!(k.due(), Some(t1 + 2 * BOUND));
        // Only 39 sent since: a byte held then still waits.
        assert_eq!(k.looked(t1 + 2 * BOUND, BOUND, 179, 10), Found::Stuck);
    }

    #[test]
    fn bytes_held_a_whole_bound_with_nothing_sent_are_pushed() {
        let (mut k, t) = on();
        k.sent(t, BOUND);
        assert!(matches!(
            k.looked(t + BOUND, BOUND, 100, 40),
            Found::Moving(_)
        ));
        assert_eq!(k.looked(t + 2 * BOUND, BOUND, 100, 40), Found::Stuck);
        assert_eq!(k.due(), None, "the push ends the looking");
        k.sent(t + 3 * BOUND, BOUND);
        assert_eq!(
            k.looked(t + 4 * BOUND, BOUND, 100, 40),
            Found::Moving(t + 5 * BOUND),
            "a new send starts a new count: one look alone never pushes"
        );
    }

    #[test]
    fn the_first_look_is_owed_from_a_send_until_it_is_made() {
        let (mut k, t) = on();
        assert!(!k.first_look_owed());
        k.sent(t, BOUND);
        assert!(k.first_look_owed());
        // Made early (the reader waits): the next one is due a bound after it.
        let early = t + BOUND / 10;
        assert_eq!(k.looked(early, BOUND, 0, 40), Found::Moving(early + BOUND));
        assert!(!k.first_look_owed());
        assert_eq!(k.looked(early + BOUND, BOUND, 0, 40), Found::Stuck);
    }

    #[test]
    fn only_a_socket_with_nagle_on_is_looked_at() {
        for mut k in [
            KernelClock::Unavailable,
            KernelClock::Ready,
            KernelClock::Refused,
        ] {
            let t = crate::clock::now();
            k.sent(t, BOUND);
            assert_eq!(k.due(), None);
            assert_eq!(k.looked(t, BOUND, 1, 1), Found::Clear);
        }
        let mut k = KernelClock::Ready;
        k.turned_on(false);
        assert_eq!(k, KernelClock::Refused);
        assert!(!k.usable());
    }
}
