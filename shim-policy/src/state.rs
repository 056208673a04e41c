//! One descriptor's state: who owns the socket, and how its burst in progress is held.
//!
//! Seven bits in one atomic byte ([`State`]), read as a [`Flags`] value. Every change goes
//! through one method of [`State`] (one transition each), and every value a transition
//! writes is checked against the invariants below with `debug_assert!`s (and so in every loom
//! model, which runs with debug assertions on).
//!
//! # The bits
//!
//! | bit | set by | cleared by | meaning |
//! |---|---|---|---|
//! | `MANAGED` | [`State::manage`] | [`State::reset`] | a TCP stream socket the shim knows |
//! | `SELF_MANAGED` | [`State::manage`], [`State::give_to_program`] | [`State::reset`] | the program holds bytes itself: the shim starts no burst |
//! | `PROGRAM_CORKED` | [`State::program_corks`], inheritance | [`State::program_uncorked`], [`State::reset`] | the program has `TCP_CORK` set (or is setting it): the shim never clears it |
//! | `CORKED` | [`State::start`] | [`State::end`], [`State::end_sent`], [`State::reset`] | a burst is in progress: counted in the shim's `corked` |
//! | `BY_MORE` | [`State::start`] | as `CORKED` | the burst is held by `MSG_MORE` on its writes (a learned shape), not by `TCP_CORK` |
//! | `CORK_ON` | [`State::start`], [`State::join_corked`] | as `CORKED` | `TCP_CORK` was set for the burst: whoever ends it clears it |
//! | `LAST_SENDING` | [`State::mark_last_sending`] | as `CORKED` | the write completing a `BY_MORE` burst is being made: a `MSG_MORE` write queued after it pushes itself |
//!
//! # Legal combinations
//!
//! Owner ([`Owner`]): no `MANAGED` is [`Owner::Nobody`] (a slot of a closed or never-seen
//! descriptor; a stale `SELF_MANAGED` or `PROGRAM_CORKED` left there by a program call that
//! raced a close means nothing, and the next adoption clears it); `MANAGED` alone is
//! [`Owner::Shim`]; `MANAGED | SELF_MANAGED` is [`Owner::Program`].
//!
//! Hold ([`Hold`]), the burst bits (`BURST`):
//!
//! | bits | [`Hold`] |
//! |---|---|
//! | none | [`Hold::Idle`] |
//! | `CORKED \| CORK_ON` | [`Hold::Cork`] |
//! | `CORKED \| BY_MORE` (+ `CORK_ON`) (+ `LAST_SENDING`) | [`Hold::More`] |
//!
//! # Invariants (checked at every transition)
//!
//! 1. `BY_MORE`, `CORK_ON` and `LAST_SENDING` each imply `CORKED`: they describe the burst in
//!    progress and are cleared with it, in one atomic step.
//! 2. `CORKED` without `BY_MORE` has `CORK_ON`: a burst is held by one of the two means.
//! 3. `LAST_SENDING` implies `BY_MORE`: only a burst of a learned shape has a last write.
//! 4. `CORKED` implies `MANAGED`: a burst starts only on a socket the shim owns (by CAS from
//!    such a value), and [`State::reset`] clears both at once. `CORKED` with `SELF_MANAGED` is
//!    transient: the thread that gave the socket to the program ends the burst next.
//! 5. Counting (held by [`crate::Shim`], not here): the shim's `corked` is at least the
//!    number of slots with `CORKED`, so it never underflows and the flusher never parks while
//!    a burst is held. A start counts up *before* it publishes `CORKED` (and gives the count
//!    back if it does not publish); an end counts down *after* it cleared `CORKED`.
//! 6. Generations: a start bumps the slot's generation after publishing, and
//!    [`crate::Shim`]'s `renew` at adoption and close; a thread's note `(fd, generation)` ends
//!    a burst only while the generation is unchanged.
use crate::sync::{AtomicU8, Ordering::*};

const MANAGED: u8 = 1;
const CORKED: u8 = 2;
const SELF_MANAGED: u8 = 4;
const BY_MORE: u8 = 8;
const LAST_SENDING: u8 = 16;
const CORK_ON: u8 = 32;
const PROGRAM_CORKED: u8 = 64;
/// Every bit that describes the burst in progress.
const BURST: u8 = CORKED | BY_MORE | LAST_SENDING | CORK_ON;

/// Who owns a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Not a socket the shim manages.
    Nobody,
    /// The shim holds its bursts.
    Shim,
    /// The program holds bytes itself (`TCP_CORK`, `TCP_NODELAY`, `MSG_MORE` of its own).
    Program,
}

/// How the burst in progress is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// No burst.
    Idle,
    /// Held by `TCP_CORK`.
    Cork,
    /// Held by `MSG_MORE` on each write (a learned shape).
    More {
        /// Its last write is being made.
        last_sending: bool,
        /// A corked start joined it: `TCP_CORK` is on too.
        cork_on: bool,
    },
}

/// A snapshot of one descriptor's state bits.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Flags(u8);

impl Flags {
    /// The owner.
    pub(crate) fn owner(self) -> Owner {
        match (self.0 & MANAGED != 0, self.0 & SELF_MANAGED != 0) {
            (false, _) => Owner::Nobody,
            (true, false) => Owner::Shim,
            (true, true) => Owner::Program,
        }
    }

    /// How its burst is held.
    pub(crate) fn hold(self) -> Hold {
        if !self.is_held() {
            Hold::Idle
        } else if self.0 & BY_MORE == 0 {
            Hold::Cork
        } else {
            Hold::More {
                last_sending: self.last_sending(),
                cork_on: self.cork_on(),
            }
        }
    }

    /// A socket the shim knows (its own or the program's).
    pub(crate) fn is_managed(self) -> bool {
        self.0 & MANAGED != 0
    }

    /// A socket whose bursts the shim holds.
    pub(crate) fn is_shims(self) -> bool {
        self.owner() == Owner::Shim
    }

    /// A burst is in progress (counted in `corked`).
    pub(crate) fn is_held(self) -> bool {
        self.0 & CORKED != 0
    }

    /// The burst is held by `MSG_MORE`.
    pub(crate) fn by_more(self) -> bool {
        self.0 & BY_MORE != 0
    }

    /// The burst's last write is being made.
    pub(crate) fn last_sending(self) -> bool {
        self.0 & LAST_SENDING != 0
    }

    /// `TCP_CORK` was set for the burst.
    pub(crate) fn cork_on(self) -> bool {
        self.0 & CORK_ON != 0
    }

    /// The program has `TCP_CORK` set.
    pub(crate) fn program_corked(self) -> bool {
        self.0 & PROGRAM_CORKED != 0
    }

    /// The bits a duplicate descriptor shares (not the burst: it stays tracked on the
    /// original).
    fn shared(self) -> Flags {
        Flags(self.0 & (MANAGED | SELF_MANAGED | PROGRAM_CORKED))
    }

    /// The first invariant (see the module docs) this value breaks, if any.
    pub(crate) fn broken_invariant(self) -> Option<&'static str> {
        let b = self.0;
        if b & (BY_MORE | CORK_ON | LAST_SENDING) != 0 && b & CORKED == 0 {
            Some("1: a burst bit without CORKED")
        } else if b & CORKED != 0 && b & (BY_MORE | CORK_ON) == 0 {
            Some("2: a burst held by neither TCP_CORK nor MSG_MORE")
        } else if b & LAST_SENDING != 0 && b & BY_MORE == 0 {
            Some("3: LAST_SENDING on a burst not held by MSG_MORE")
        } else if b & CORKED != 0 && b & MANAGED == 0 {
            Some("4: a burst on an unmanaged descriptor")
        } else {
            None
        }
    }
}

impl std::fmt::Debug for Flags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flags")
            .field("owner", &self.owner())
            .field("hold", &self.hold())
            .field("program_corked", &self.program_corked())
            .field("bits", &format_args!("{:#09b}", self.0))
            .finish()
    }
}

/// Checks a value a transition wrote; returns it.
#[track_caller]
fn checked(new: Flags, transition: &str) -> Flags {
    debug_assert!(
        new.broken_invariant().is_none(),
        "{transition} wrote {new:?}: invariant {}",
        new.broken_invariant().unwrap_or_default()
    );
    new
}

/// How a burst is to be held when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldBy {
    /// `TCP_CORK` (already set by the starter).
    Cork,
    /// `MSG_MORE` on its writes.
    More,
}

/// What [`State::start`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// A new burst is published.
    Started,
    /// Another thread started one first: this write joins it (a corked start marked
    /// `CORK_ON` on it, so that its end clears the cork).
    Joined,
    /// The socket is no longer the shim's (closed, renewed or given to the program).
    Lost,
}

/// One descriptor's state bits; one method per transition.
#[derive(Default)]
pub(crate) struct State(AtomicU8);

impl State {
    /// The current value.
    pub(crate) fn get(&self) -> Flags {
        Flags(self.0.load(Acquire))
    }

    /// The current value, with no ordering (a hint; a transition decides).
    pub(crate) fn peek(&self) -> Flags {
        Flags(self.0.load(Relaxed))
    }

    /// Nobody's any more (close, or adoption of a new socket under the number): returns the
    /// old value, whose burst, if any, the caller ends ([`crate::Shim`]'s `end_burst`).
    pub(crate) fn reset(&self) -> Flags {
        Flags(self.0.swap(0, AcqRel))
    }

    /// A newly adopted socket: the shim's, or the program's (`programs`).
    pub(crate) fn manage(&self, programs: bool) {
        let new = if programs {
            MANAGED | SELF_MANAGED
        } else {
            MANAGED
        };
        self.0.store(checked(Flags(new), "manage").0, Release);
    }

    /// A duplicate of a socket whose state is `from`: the same owner and program cork.
    pub(crate) fn duplicate_of(&self, from: Flags) {
        self.0
            .store(checked(from.shared(), "duplicate_of").0, Release);
    }

    /// An accepted socket inherits its listener's `TCP_CORK` (as `from` says).
    pub(crate) fn inherit_program_cork(&self, from: Flags) {
        let bit = from.0 & PROGRAM_CORKED;
        let old = self.0.fetch_or(bit, AcqRel);
        checked(Flags(old | bit), "inherit_program_cork");
    }

    /// The program takes the socket: returns whether it was not yet its own. No burst of the
    /// shim's starts from here on; the caller ends the one in progress.
    pub(crate) fn give_to_program(&self) -> bool {
        let old = self.0.fetch_or(SELF_MANAGED, AcqRel);
        checked(Flags(old | SELF_MANAGED), "give_to_program");
        old & SELF_MANAGED == 0
    }

    /// The program is setting `TCP_CORK`: returns whether it was marked already.
    pub(crate) fn program_corks(&self) -> bool {
        let old = self.0.fetch_or(PROGRAM_CORKED, AcqRel);
        checked(Flags(old | PROGRAM_CORKED), "program_corks");
        old & PROGRAM_CORKED != 0
    }

    /// The program's `TCP_CORK` is off.
    pub(crate) fn program_uncorked(&self) {
        let old = self.0.fetch_and(!PROGRAM_CORKED, AcqRel);
        checked(Flags(old & !PROGRAM_CORKED), "program_uncorked");
    }

    /// Publishes a new burst held `by`, unless one is in progress or the socket is not the
    /// shim's. `stamp` runs before each attempt to publish (the burst's start time, which
    /// the flusher must never read from the previous burst). A corked start that finds
    /// another burst marks `CORK_ON` on it ([`State::join_corked`]'s step).
    pub(crate) fn start(&self, by: HoldBy, stamp: impl Fn()) -> Start {
        let held = match by {
            HoldBy::Cork => CORKED | CORK_ON,
            HoldBy::More => CORKED | BY_MORE,
        };
        let mut cur = self.0.load(Acquire);
        loop {
            let flags = Flags(cur);
            if !flags.is_shims() {
                return Start::Lost;
            }
            if flags.is_held() {
                if by == HoldBy::More {
                    return Start::Joined;
                }
                match self.join_corked(cur) {
                    Ok(()) => return Start::Joined,
                    Err(now) => {
                        cur = now;
                        continue;
                    }
                }
            }
            stamp();
            // A LAST_SENDING or CORK_ON cannot be left here (invariant 1), but the burst
            // bits are rebuilt whole all the same.
            let start = checked(Flags((cur & !BURST) | held), "start");
            match self.0.compare_exchange_weak(cur, start.0, AcqRel, Acquire) {
                Ok(_) => return Start::Started,
                Err(now) => cur = now,
            }
        }
    }

    /// A corked start found the burst `cur` in progress: marks `CORK_ON` on it, so that its
    /// end clears the cork; `Err` with the value found if it changed meanwhile.
    fn join_corked(&self, cur: u8) -> Result<(), u8> {
        let new = checked(Flags(cur | CORK_ON), "join_corked");
        self.0
            .compare_exchange_weak(cur, new.0, AcqRel, Acquire)
            .map(drop)
    }

    /// The write that completes a `MSG_MORE` burst is about to be made: marks it, while that
    /// burst (or one just started in its place) is held by `MSG_MORE`. Returns whether it
    /// marked.
    pub(crate) fn mark_last_sending(&self) -> bool {
        let mut cur = self.0.load(Acquire);
        loop {
            let flags = Flags(cur);
            if !flags.is_held() || !flags.by_more() {
                return false;
            }
            let new = checked(Flags(cur | LAST_SENDING), "mark_last_sending");
            match self.0.compare_exchange_weak(cur, new.0, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Ends the burst in progress, whoever holds it: returns the old value (the caller ends
    /// the burst it names, if any).
    pub(crate) fn end(&self) -> Flags {
        let old = Flags(self.0.fetch_and(!BURST, AcqRel));
        checked(Flags(old.0 & !BURST), "end");
        old
    }

    /// Ends the burst in progress only if its last write is being made (a burst a reader
    /// ended meanwhile, and one started since, whose start found no mark, are not that
    /// write's): returns the old value, or the default if it ended nothing.
    pub(crate) fn end_sent(&self) -> Flags {
        let mut cur = self.0.load(Acquire);
        loop {
            let flags = Flags(cur);
            if !flags.is_held() || !flags.last_sending() {
                return Flags::default();
            }
            let new = checked(Flags(cur & !BURST), "end_sent");
            match self.0.compare_exchange_weak(cur, new.0, AcqRel, Acquire) {
                Ok(_) => return flags,
                Err(now) => cur = now,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_transition_keeps_the_invariants() {
        let s = State::default();
        assert_eq!(s.get().owner(), Owner::Nobody);
        assert_eq!(s.start(HoldBy::Cork, || {}), Start::Lost);
        s.manage(false);
        assert_eq!(s.start(HoldBy::More, || {}), Start::Started);
        assert_eq!(
            s.get().hold(),
            Hold::More {
                last_sending: false,
                cork_on: false
            }
        );
        assert_eq!(s.start(HoldBy::Cork, || {}), Start::Joined);
        assert!(s.mark_last_sending());
        assert_eq!(
            s.get().hold(),
            Hold::More {
                last_sending: true,
                cork_on: true
            }
        );
        let old = s.end_sent();
        assert!(old.is_held() && old.cork_on());
        assert_eq!(s.get().hold(), Hold::Idle);
        assert!(!s.mark_last_sending(), "no burst to mark");
        assert!(!s.end_sent().is_held());
        assert_eq!(s.start(HoldBy::Cork, || {}), Start::Started);
        assert_eq!(s.get().hold(), Hold::Cork);
        assert!(s.give_to_program());
        assert!(!s.give_to_program());
        assert!(s.end().is_held());
        assert_eq!(s.start(HoldBy::Cork, || {}), Start::Lost);
        assert_eq!(s.get().owner(), Owner::Program);
        assert!(!s.program_corks());
        assert!(s.get().program_corked());
        s.program_uncorked();
        assert!(!s.get().program_corked());
        assert_eq!(s.reset().owner(), Owner::Program);
        assert_eq!(s.get(), Flags::default());
    }

    #[test]
    fn the_invariants_reject_what_no_transition_may_write() {
        for bad in [
            CORK_ON,
            MANAGED | BY_MORE,
            MANAGED | CORKED,
            CORKED | CORK_ON,
        ] {
            assert!(Flags(bad).broken_invariant().is_some(), "{bad:#b}");
        }
        let last_on_cork = MANAGED | CORKED | CORK_ON | LAST_SENDING;
        assert!(Flags(last_on_cork).broken_invariant().is_some());
        for good in [
            0,
            SELF_MANAGED | PROGRAM_CORKED,
            MANAGED,
            MANAGED | CORKED | CORK_ON,
            MANAGED | CORKED | BY_MORE | LAST_SENDING | CORK_ON,
            MANAGED | SELF_MANAGED | CORKED | CORK_ON | PROGRAM_CORKED,
        ] {
            assert_eq!(Flags(good).broken_invariant(), None, "{good:#b}");
        }
    }
}
