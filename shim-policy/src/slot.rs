//! One descriptor's state ([`Slot`]): its owner and burst bits, the burst in progress, and
//! the shape learned from its bursts (how many writes the next one has: as many as the last,
//! once [`LEARN_AFTER`] in a row ended in a wait with as many; or, on a socket whose bursts
//! alternate between two lengths (an MQTT broker's two-write SUBACK and one-write PUBLISH),
//! as many as the one before the last, once [`LEARN_AFTER`] in a row had as many as the one
//! two before), with the patience given to a writer that pauses inside its bursts
//! ([`SHAPE_PATIENCE`]).

use crate::state::State;
use crate::sync::Ordering::*;
use crate::sync::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8};

/// Bursts of the same number of writes, each ended by a wait, before that number is
/// learned as the socket's shape.
pub(crate) const LEARN_AFTER: u8 = 3;

/// How many linger bounds a burst short of its learned shape may wait for its remaining
/// writes, on a socket whose writer was seen pausing inside its bursts (a burst split by the
/// plain bound, then completed to its shape). An interpreter's thread can lose its global
/// lock between a response's writes for a whole switch interval (CPython's is 5 ms): sending
/// the first part alone at the plain bound costs a segment and gains nothing, the response
/// being complete only with its last write.
pub(crate) const SHAPE_PATIENCE: u64 = 5;

/// Per-descriptor state.
#[derive(Default)]
pub(crate) struct Slot {
    /// Owner and burst bits, changed only by [`State`]'s transitions.
    pub(crate) flags: State,
    /// Generation of the burst in progress (or of the last one).
    pub(crate) generation: AtomicU32,
    pub(crate) corked_at_us: AtomicU64,
    /// Writes since the socket's last burst ended in a wait.
    pub(crate) writes: AtomicU16,
    /// Writes of the last burst that ended in a wait, and how many in a row had as many.
    pub(crate) last_len: AtomicU16,
    pub(crate) streak: AtomicU8,
    /// Writes of the burst before that one, and how many bursts in a row had as many as the
    /// one two before them, and not as many as the one before (a period of two).
    pub(crate) before_last: AtomicU16,
    pub(crate) alternations: AtomicU8,
    /// The learned shape: the write that brings `writes` to this leaves at once (0: none).
    pub(crate) shape: AtomicU16,
    /// The linger bound released part of the burst in progress before its shape was complete.
    pub(crate) split: AtomicBool,
    /// A burst of this socket was split by the linger bound and then completed its shape: its
    /// writer pauses between writes (an interpreter's lock), so bursts short of the shape are
    /// given [`SHAPE_PATIENCE`] bounds.
    pub(crate) patient: AtomicBool,
    /// The `TCP_NODELAY` the program sees (`getsockopt`): the value it set itself, or the
    /// kernel's default (off) when it set none, never the shim's own `TCP_NODELAY`. An accepted
    /// socket inherits its listener's, as the kernel's option does.
    pub(crate) program_nodelay: AtomicBool,
    /// Uncorks of the shim's on their way to the kernel (see [`Shim::set_cork`]).
    pub(crate) uncorking: AtomicU16,
    /// Nonzero when another managed descriptor refers to the same socket (a `dup`, or
    /// descriptors inherited as stdin and stdout): a read on this one ends the bursts of
    /// every one. Bumped at each link ([`Shim::share`]), so that a reader that finds no
    /// other descriptor left clears it only if no link was made meanwhile.
    pub(crate) shared: AtomicU32,
    /// The socket's identity ([`Kernel::socket_id`]), known for shared descriptors.
    pub(crate) socket: AtomicU64,
    /// Threads in a read of this socket now (between [`Shim::read_begins`] and
    /// [`Shim::read_ends`]), counted only while it is not clocked (the count decides
    /// nothing else): a hint, never below zero (a read of a descriptor renewed meanwhile
    /// ends on the new one's count, saturating). A socket unclocked while its reader waits
    /// counts that reader again from its next read.
    pub(crate) readers: AtomicU16,
    /// The socket is handed to the kernel's Nagle (the shim's `TCP_NODELAY` is off): see
    /// the `clock` module. Until the descriptor is renewed, duplicated, or the program's.
    pub(crate) clocked: AtomicBool,
    /// When the first clocked write since the flusher's last look was made (µs; 0: none).
    pub(crate) clock_mark_us: AtomicU64,
    /// Data segments sent at the flusher's last look, plus one (0: no look yet).
    pub(crate) clock_segments: AtomicU64,
    /// How many times the interval between the flusher's looks has doubled (see the
    /// `clock` module's `clock_interval`).
    pub(crate) clock_backoff: AtomicU8,
    /// The flusher has pushed what waited on this clocked socket once: its looks back off
    /// no further than `CLOCK_BACKOFF_MAX` (else up to `CLOCK_UNPUSHED_LONGEST_US`).
    pub(crate) clock_pushed: AtomicBool,
    /// Changes of the shim's `TCP_NODELAY` on their way to the kernel.
    pub(crate) nodelay_busy: AtomicU16,
    /// The program is setting `TCP_NODELAY` itself (see `Shim::program_nodelay_begins`).
    pub(crate) program_choosing: AtomicBool,
}

impl Slot {
    /// The descriptor now names another socket (or none): older thread-list entries go
    /// stale, and what was learned of the old one is forgotten.
    pub(crate) fn renew(&self) {
        self.generation.fetch_add(1, AcqRel);
        self.writes.store(0, Relaxed);
        self.last_len.store(0, Relaxed);
        self.streak.store(0, Relaxed);
        self.before_last.store(0, Relaxed);
        self.alternations.store(0, Relaxed);
        self.shape.store(0, Relaxed);
        self.split.store(false, Relaxed);
        self.patient.store(false, Relaxed);
        self.program_nodelay.store(false, Relaxed);
        self.shared.store(0, Release);
        self.socket.store(0, Relaxed);
        self.clocked.store(false, Relaxed);
        self.clock_segments.store(0, Relaxed);
        self.clock_backoff.store(0, Relaxed);
        self.clock_pushed.store(false, Relaxed);
        self.program_choosing.store(false, Relaxed);
    }

    /// The burst in progress has fewer writes than its learned shape.
    pub(crate) fn short_of_its_shape(&self) -> bool {
        let shape = self.shape.load(Relaxed);
        shape != 0 && self.writes.load(Relaxed) < shape
    }

    /// A burst ended in a wait: learn from its number of writes. Races between threads
    /// sharing a socket only blur the guess; a guess never holds bytes longer.
    pub(crate) fn learn(&self) {
        // Most reads find no writes since the last one: a plain load, no locked swap.
        if self.writes.load(Relaxed) == 0 {
            return;
        }
        let n = self.writes.swap(0, Relaxed);
        self.split.store(false, Relaxed);
        if n == 0 {
            return;
        }
        let last = self.last_len.swap(n, Relaxed);
        let before = self.before_last.swap(last, Relaxed);
        let streak = if last == n {
            self.streak.load(Relaxed).saturating_add(1)
        } else {
            1
        };
        self.streak.store(streak, Relaxed);
        let alternations = if before == n && last != n && last != 0 {
            self.alternations.load(Relaxed).saturating_add(1)
        } else {
            0
        };
        self.alternations.store(alternations, Relaxed);
        let shape = if streak >= LEARN_AFTER {
            n
        } else if alternations >= LEARN_AFTER {
            // ...a, b, a, b, a: the next is b.
            last
        } else {
            0
        };
        self.shape.store(shape, Relaxed);
        if shape == 0 {
            self.patient.store(false, Relaxed);
        }
    }
}
