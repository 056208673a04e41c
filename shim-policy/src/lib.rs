//! # nagless-shim-policy
//!
//! The burst policy of nagless's LD_PRELOAD shim (`nagless-preload`), in safe code with no
//! libc and no clock: which descriptor is held, by whom, and when it is released. The shim's
//! libc layer calls it from its hooks and hands it a [`Kernel`] for the few socket calls it
//! makes (and the time), so the policy is unit-tested with a fake kernel, as quinn-proto
//! stands to quinn.
//!
//! # How to drive it
//!
//! One [`Shim`] per process, shared by every thread; each thread keeps its own
//! [`ThreadBursts`] (a `thread_local!`). By role, in the order a hook calls them:
//!
//! - **Start-up**: [`Config::from_env`], then [`Shim::new`] (the descriptor range to cover).
//! - **Descriptors**: [`Shim::adopt_inherited`] at start-up for the sockets the program
//!   inherited as stdin, stdout or stderr; [`Shim::adopt`] after `socket`/`connect`,
//!   [`Shim::adopt_accepted`] after `accept`; [`Shim::duplicate`] after `dup*`;
//!   [`Shim::release`] then [`Shim::forget`] before `close`.
//! - **Writes**: [`Shim::before_write`] gives a [`WriteStep`]; make the write (with
//!   `MSG_MORE` if [`WriteStep::more`]); then, if [`WriteStep::needs_after`],
//!   [`Shim::after_write`]. Before the write, if [`Shim::needs_flusher`], start the flusher
//!   (or, if it cannot start, call [`Shim::flusher_cannot_run`]: nothing is held from then
//!   on). If [`WriteStep::wake_flusher`]: [`Shim::claim_flusher_start`]
//!   says whether to start the flusher, else wake it on [`Shim::park_word`].
//! - **Ends**: [`Shim::release_thread`] before a wait that would block;
//!   [`Shim::release_socket`] before a read, receive, shutdown or `splice` from it, or a
//!   `dup2` over it; [`Shim::release_all`] (and the thread's own [`Shim::release_thread`])
//!   before `fork`, `exec`, `_exit`, and at exit.
//! - **The program's options**: [`Shim::program_cork_begins`], the program's
//!   `setsockopt(TCP_CORK)`, [`Shim::program_cork_done`], then [`Shim::program_holds`] if it
//!   set the cork; [`Shim::program_nodelay`] after its `TCP_NODELAY`;
//!   [`Shim::program_holds`] before its send with `MSG_MORE`; [`Shim::program_view`] for
//!   what its `getsockopt` returns.
//! - **The flusher thread**: [`Shim::flusher_tick`] in a loop, sleeping or parking (a futex
//!   wait on [`Shim::park_word`] while it reads 0, then [`Shim::flusher_unparked`]) as told;
//!   in a forked child, [`Shim::after_fork_child`].
//!
//! Not its job: system calls, clocks, sleeps (the caller does them, told what and how long;
//! `clippy.toml` bans `Instant::now` and `thread::sleep` here), or holding bytes in user
//! space (the kernel holds them, under `TCP_CORK` or `MSG_MORE`).
//!
//! **A burst follows the thread that wrote it.** The first write on an idle managed socket
//! starts a burst with a new generation number (held by `TCP_CORK`, or by `MSG_MORE` on its
//! writes once the socket's shape is learned, below); every thread that writes to it while
//! it is held notes `(fd, generation)` in its own short list ([`ThreadBursts`]). The burst
//! ends when one of those threads turns to wait (poll family, sleeps, signal waits,
//! `waitpid`; not condition variables, which interpreters pass their lock through: the
//! libc layer calls
//! [`Shim::release_thread`]), when any thread reads or closes that socket, or at the linger
//! bound (the flusher). Another thread's wait never touches it, and a wait costs O(bursts of
//! this thread), not O(descriptors). A stale list entry (the burst already ended, the
//! descriptor was closed and reused) carries an old generation and is ignored.
//!
//! Only a wait that puts the thread to sleep ends its bursts: the libc layer passes on a
//! wait with a zero timeout, or one whose events are already ready (it probes with a zero
//! timeout first), without calling [`Shim::release_thread`].
//!
//! **Programs that hold bytes themselves** (they set `TCP_CORK`, set or clear `TCP_NODELAY`, or send
//! with `MSG_MORE`) already know their moment: such a socket is marked
//! [`SELF_MANAGED`](Shim::program_holds) and the shim stops holding it. Setting
//! `TCP_NODELAY` off where the program already saw it off is no choice
//! ([`Shim::program_nodelay`]), and what the program reads of its options is its own
//! ([`Shim::program_view`]).
//!
//! **A burst's learned shape.** Most servers answer each request with the same number of
//! writes (python's http.server: headers, then body). When a socket's last
//! [`LEARN_AFTER`] bursts that ended in a wait (or left a thread's full list: an event loop
//! that answered many other sockets since) all had the same number of writes, the write
//! that completes that number sends the burst at once instead of at the wait, which may
//! come much later in an interpreter: the response leaves when nodelay's last segment
//! would, as one segment. Such a burst is held by `MSG_MORE` on its earlier writes, not by
//! `TCP_CORK`, and sent by its last write (made without the flag): no `setsockopt` when that
//! write sends it (one uncork when a wait, a read or the bound ends it first); a
//! one-write shape is never held. A
//! burst that turns out longer holds its remaining writes to the wait as before and unlearns
//! the shape; a guess can cost a segment, not time. One exception, bounded: on a socket
//! whose writer was seen pausing inside its bursts (a burst split by the linger bound, then
//! completed to its shape: an interpreter's thread waiting for its global lock), a burst
//! still short of its shape waits up to [`SHAPE_PATIENCE`] linger bounds for the rest; a
//! short burst that was in fact a whole response then waits that long if its writer does
//! not wait visibly, and unlearns the shape at its writer's next wait.
//!
//! **The flusher**, while anything is held, sleeps until the oldest held burst reaches the
//! linger bound and releases it (bursts their writers end sooner cost it nothing). With
//! nothing held it looks once per bound while bursts come often (no wake-up per burst), and
//! parks until the next burst as soon as they come rarely ([`RARE_BURSTS_X128`]), or after
//! [`FLUSHER_IDLE`] without any: never more wake-ups than the cheaper of the two ways.
//!
//! **Programs that set `TCP_NODELAY` themselves** (nginx, redis, node) already send each
//! response with one write, or cork it themselves: holding their bursts only adds two
//! `setsockopt` calls per response, so their sockets are left to them too.
//!
//! # Events and effects
//!
//! What the libc layer reports, the [`Shim`] method it calls, and what changes. "Ends the
//! burst" is always the one step `end_burst`: the burst bits are cleared in one atomic step
//! (see the invariants in the `state` module's docs, held by `debug_assert!`s at each
//! transition), `corked` is counted down, and the cork comes off (which sends the held
//! tail), unless the program has its own `TCP_CORK` set.
//!
//! | event (hook) | call | effect |
//! |---|---|---|
//! | `socket`, `accept`, `connect` of an unseen descriptor | [`Shim::adopt`], [`Shim::adopt_accepted`] | a burst left on the number (closed behind libc's back) ends; generation bumped, learning forgotten; a TCP stream socket becomes the shim's (`TCP_NODELAY` set), or the program's if its listener was |
//! | write on an idle socket of the shim's | [`Shim::before_write`] | a burst starts: held by `TCP_CORK` (one `setsockopt`), or by `MSG_MORE` on its writes if the socket has a learned shape; noted in the thread's list |
//! | write on a held socket | [`Shim::before_write`] | joins the burst (noted); made with `MSG_MORE` if the burst is held so |
//! | write that completes the learned shape | [`Shim::before_write`], then [`Shim::after_write`] | marks `LAST_SENDING` before the write, which goes out plainly and sends the burst; then the burst ends with no `setsockopt` (one if a corked start joined it, or the write failed) |
//! | `MSG_MORE` write returns | [`Shim::after_write`] | pushes its own bytes if its burst ended meanwhile or its last write is on its way |
//! | a wait that would block (poll, select, epoll families, sleeps, signal waits, `waitpid`) | [`Shim::release_thread`] | ends the bursts this thread noted (stale notes ignored); learns their shape |
//! | a wait that would not block (zero timeout, events ready) | none | nothing: the bursts go on |
//! | `read`, `recv*`, `shutdown`, `splice` from it, `dup2`/`dup3` over it | [`Shim::release_socket`] | ends the socket's burst, whoever wrote it; learns its shape |
//! | `close` (and `close_range`, `syscall(SYS_close)`) | [`Shim::release`], [`Shim::forget`] | ends the burst; the descriptor becomes nobody's; generation bumped |
//! | `dup`, `dup2`, `dup3` | [`Shim::duplicate`] | the target number is forgotten (as `close`), then shares the source's owner and program cork; each keeps its own burst, and the two are linked as one socket: a read of either ends both |
//! | start-up, a TCP socket as stdin, stdout or stderr | [`Shim::adopt_inherited`] | adopted; linked to the other inherited descriptors of the same socket |
//! | the flusher cannot start, or fails | [`Shim::flusher_cannot_run`] | every burst ends; none starts again in this process |
//! | `fork`, `exec*` | [`Shim::release_all`], [`Shim::release_thread`]; the child: [`Shim::after_fork_child`] | every burst ends first; a child starts its own flusher at its first burst |
//! | `exit`, `_exit` | [`Shim::release_all`] | every burst ends |
//! | the flusher's tick | [`Shim::flusher_tick`] | ends bursts older than the linger bound ([`SHAPE_PATIENCE`] bounds for a patient socket short of its shape); sleeps to the next deadline, or parks |
//! | a thread notes more than [`THREAD_BURSTS`] bursts | (inside [`Shim::before_write`]) | its oldest burst ends, and teaches as a wait |
//! | program's `setsockopt(TCP_CORK)` | [`Shim::program_cork_begins`], [`Shim::program_cork_done`], then [`Shim::program_holds`] if on | marked `PROGRAM_CORKED` before the call (the shim never clears it), unmarked when the program clears it; on: the socket becomes the program's and the shim's burst ends |
//! | program's `setsockopt(TCP_NODELAY)` | [`Shim::program_nodelay`] | off where it saw off: the shim's `TCP_NODELAY` is set again, nothing else; any other choice: the socket becomes the program's, its burst ends |
//! | program's send with `MSG_MORE` | [`Shim::program_holds`] | the socket becomes the program's, its burst ends |
//! | program's `getsockopt(TCP_NODELAY / TCP_CORK)` | [`Shim::program_view`] | the program's own value, or the kernel's default; never the shim's |
//!
//! # Concurrency
//!
//! Every call above may come from any thread at any time; the per-descriptor state is one
//! atomic byte changed only by compare-and-swap or read-modify-write transitions, and the
//! kernel's socket lock orders the socket calls. The races past reviews found are loom
//! models, run by `scripts/test` (`RUSTFLAGS="--cfg loom -C debug-assertions" cargo test -p
//! nagless-shim-policy --release --lib loom`): a `MSG_MORE` write racing the burst's last
//! write, a reader ending a burst while another thread starts one, a corked start racing a
//! `MSG_MORE` start, adoption or close during a burst, and the program corking the socket
//! during a corked start or while a reader ends a burst, the flusher parking while a burst
//! starts, `fork`/`exec`'s release of every burst racing a start (then `after_fork_child`),
//! and a duplicate's link racing a read of the original or the clearing of an old link.
//!
//! One wait exists, outside the shim's own paths: the program's `setsockopt(TCP_CORK)` waits
//! for an uncork of the shim's already on its way to the kernel, so that it cannot clear the
//! cork the program is setting ([`Shim::program_cork_begins`]; bounded, [`CORK_WAIT_TURNS`]).
#![forbid(unsafe_code)]

mod config;
#[cfg(all(test, loom))]
mod loom_models;
mod state;
mod sync;

pub use config::{Config, Mode, Stats, DEFAULT_LINGER, LINGER_RANGE_US};
use std::sync::OnceLock;
use std::time::Duration;

use state::{Flags, HoldBy, Start, State};
use sync::Ordering::*;
use sync::{fence, AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

/// How long the flusher keeps ticking with nothing held before it parks, at most.
pub const FLUSHER_IDLE: Duration = Duration::from_millis(20);

/// Below this many bursts per linger bound (×128, averaged), the flusher parks as soon as
/// nothing is held: waking it at each burst (a futex wake, then one look at the burst's
/// deadline) costs two wake-ups per burst, fewer than a look per bound when bursts come
/// less often than one per four bounds (250 a second at the default 1 ms).
pub const RARE_BURSTS_X128: u64 = 32;

/// What the flusher remembers between its looks (kept by its loop, given to each
/// [`Shim::flusher_tick`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct FlusherState {
    /// How long no burst has started or been held.
    idle_for: Duration,
    /// The burst count at the last look, and when that look was (µs; 0: none yet).
    bursts_seen: u64,
    looked_at_us: u64,
    /// Bursts started per linger bound, ×128, averaged over the looks (each weighs 1/8).
    rate_x128: u64,
}

/// The flusher's shortest sleep while bursts are held.
pub const MIN_NAP: Duration = Duration::from_micros(50);

/// Bursts one thread can have open at once; a thread that opens more releases its oldest.
pub const THREAD_BURSTS: usize = 16;

/// Bursts of the same number of writes, each ended by a wait, before that number is
/// learned as the socket's shape.
pub const LEARN_AFTER: u8 = 3;

/// How many linger bounds a burst short of its learned shape may wait for its remaining
/// writes, on a socket whose writer was seen pausing inside its bursts (a burst split by the
/// plain bound, then completed to its shape). An interpreter's thread can lose its global
/// lock between a response's writes for a whole switch interval (CPython's is 5 ms): sending
/// the first part alone at the plain bound costs a segment and gains nothing, the response
/// being complete only with its last write.
pub const SHAPE_PATIENCE: u64 = 5;

/// Most turns (each a `sched_yield`) the program's `setsockopt(TCP_CORK)` waits for an uncork
/// of the shim's that is on its way to the kernel (see [`Shim::program_cork_begins`]).
pub const CORK_WAIT_TURNS: u32 = if cfg!(loom) { u32::MAX } else { 10_000 };

/// The socket calls the policy needs, provided by the libc layer (or a fake in tests).
pub trait Kernel {
    /// Whether `fd` is a TCP stream socket over IPv4 or IPv6.
    fn is_tcp_stream(&self, fd: i32) -> bool;
    /// Sets `TCP_NODELAY`.
    fn set_nodelay(&self, fd: i32) -> bool;
    /// Sets or clears `TCP_CORK`; false if the kernel refused.
    fn set_cork(&self, fd: i32, on: bool) -> bool;
    /// Microseconds on a monotonic clock.
    fn now_us(&self) -> u64;
    /// What identifies the socket `fd` refers to, the same for every descriptor of it (its
    /// inode number); `None` if unknown.
    fn socket_id(&self, fd: i32) -> Option<u64>;
}

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

    /// Entries in the list.
    #[cfg(test)]
    pub fn len(&self) -> usize {
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

/// Per-descriptor state.
#[derive(Default)]
struct Slot {
    /// Owner and burst bits, changed only by [`State`]'s transitions.
    flags: State,
    /// Generation of the burst in progress (or of the last one).
    generation: AtomicU32,
    corked_at_us: AtomicU64,
    /// Writes since the socket's last burst ended in a wait.
    writes: AtomicU16,
    /// Writes of the last burst that ended in a wait, and how many in a row had as many.
    last_len: AtomicU16,
    streak: AtomicU8,
    /// The learned shape: the write that brings `writes` to this leaves at once (0: none).
    shape: AtomicU16,
    /// The linger bound released part of the burst in progress before its shape was complete.
    split: AtomicBool,
    /// A burst of this socket was split by the linger bound and then completed its shape: its
    /// writer pauses between writes (an interpreter's lock), so bursts short of the shape are
    /// given [`SHAPE_PATIENCE`] bounds.
    patient: AtomicBool,
    /// The `TCP_NODELAY` the program sees (`getsockopt`): the value it set itself, or the
    /// kernel's default (off) when it set none, never the shim's own `TCP_NODELAY`. An accepted
    /// socket inherits its listener's, as the kernel's option does.
    program_nodelay: AtomicBool,
    /// Uncorks of the shim's on their way to the kernel (see [`Shim::set_cork`]).
    uncorking: AtomicU16,
    /// Nonzero when another managed descriptor refers to the same socket (a `dup`, or
    /// descriptors inherited as stdin and stdout): a read on this one ends the bursts of
    /// every one. Bumped at each link ([`Shim::share`]), so that a reader that finds no
    /// other descriptor left clears it only if no link was made meanwhile.
    shared: AtomicU32,
    /// The socket's identity ([`Kernel::socket_id`]), known for shared descriptors.
    socket: AtomicU64,
}

impl Slot {
    /// The descriptor now names another socket (or none): older thread-list entries go
    /// stale, and what was learned of the old one is forgotten.
    fn renew(&self) {
        self.generation.fetch_add(1, AcqRel);
        self.writes.store(0, Relaxed);
        self.last_len.store(0, Relaxed);
        self.streak.store(0, Relaxed);
        self.shape.store(0, Relaxed);
        self.split.store(false, Relaxed);
        self.patient.store(false, Relaxed);
        self.program_nodelay.store(false, Relaxed);
        self.shared.store(0, Release);
        self.socket.store(0, Relaxed);
    }

    /// The burst in progress has fewer writes than its learned shape.
    fn short_of_its_shape(&self) -> bool {
        let shape = self.shape.load(Relaxed);
        shape != 0 && self.writes.load(Relaxed) < shape
    }

    /// A burst ended in a wait: learn from its number of writes. Races between threads
    /// sharing a socket only blur the guess; a guess never holds bytes longer.
    fn learn(&self) {
        // Most reads find no writes since the last one: a plain load, no locked swap.
        if self.writes.load(Relaxed) == 0 {
            return;
        }
        let n = self.writes.swap(0, Relaxed);
        self.split.store(false, Relaxed);
        if n == 0 {
            return;
        }
        let streak = if self.last_len.swap(n, Relaxed) == n {
            self.streak.load(Relaxed).saturating_add(1)
        } else {
            1
        };
        self.streak.store(streak, Relaxed);
        let shape = if streak >= LEARN_AFTER { n } else { 0 };
        self.shape.store(shape, Relaxed);
        if shape == 0 {
            self.patient.store(false, Relaxed);
        }
    }
}

/// What the libc layer does around one write on a managed socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct WriteStep {
    /// Wake or start the flusher (before the write).
    pub wake_flusher: bool,
    /// This write completes the burst's learned shape: call [`Shim::after_write`] with it.
    pub release_after: bool,
    /// Send this write with `MSG_MORE` (the burst is held by that flag, not by `TCP_CORK`)
    /// and call [`Shim::after_write`] with it: the burst may end while the write is made.
    pub more: bool,
    /// The burst it joined: another thread may end it and start a newer one meanwhile.
    generation: u32,
}

impl WriteStep {
    /// Whether [`Shim::after_write`] has anything to do.
    pub fn needs_after(&self) -> bool {
        self.release_after || self.more
    }
}

/// Descriptors per table chunk; a chunk is allocated when the first socket in its range is
/// adopted, so an idle process with a high descriptor limit holds no table at all. (Eight in
/// the loom models, whose checker tracks every atomic.)
pub const CHUNK: usize = if cfg!(loom) { 8 } else { 4096 };

/// The shim's state: one slot per descriptor, counters, and the flusher's bookkeeping.
pub struct Shim {
    /// Settings.
    pub config: Config,
    /// Chunks of [`CHUNK`] slots, made on first use.
    chunks: Box<[OnceLock<Box<[Slot]>>]>,
    /// Highest descriptor ever managed, plus one: the flusher's scan covers this range.
    high: AtomicUsize,
    /// Bursts in progress; the flusher parks on this word when it is zero.
    corked: AtomicU32,
    /// The flusher is parked (waiting on `corked`): the next burst must wake it.
    flusher_parked: AtomicBool,
    /// The process has no flusher (not started yet, or a forked child): start one.
    flusher_missing: AtomicBool,
    /// The flusher could not be started (or died): nothing may be held, since nothing
    /// would release a burst its writer does not end.
    hold_nothing: AtomicBool,
    /// Counters.
    pub stats: Stats,
}

/// What the flusher should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlusherStep {
    /// Sleep this long, then call [`Shim::flusher_tick`] again.
    Sleep(Duration),
    /// Nothing held for a while: wait on [`Shim::park_word`] while it reads 0.
    Park,
}

impl Shim {
    /// A shim covering descriptors `0..size` (rounded up to whole chunks).
    pub fn new(config: Config, size: usize) -> Shim {
        Shim {
            config,
            chunks: (0..size.div_ceil(CHUNK)).map(|_| OnceLock::new()).collect(),
            high: AtomicUsize::new(0),
            corked: AtomicU32::new(0),
            flusher_parked: AtomicBool::new(false),
            flusher_missing: AtomicBool::new(true),
            hold_nothing: AtomicBool::new(false),
            stats: Stats::default(),
        }
    }

    /// `TCP_CORK` on or off (off sends what is held), counted.
    /// Never clears a `TCP_CORK` the program set itself (it holds its bytes to its own
    /// uncork, which sends ours too).
    ///
    /// An uncork is announced in the slot's `uncorking` before it looks for the program's
    /// mark, and withdrawn after the kernel call: with the fences here and in
    /// [`Shim::program_cork_begins`], either this look sees the mark, or the program's call
    /// waits for this uncork to be done (it cannot land after the program's cork).
    fn set_cork(&self, k: &impl Kernel, fd: i32, on: bool) -> bool {
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
    /// ([`CORK_WAIT_TURNS`] turns): a signal handler that sets `TCP_CORK` while its own
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
        if !flags.is_managed() {
            return;
        }
        let seen = slot.program_nodelay.swap(on, Relaxed);
        if flags.is_shims() && !seen && !on {
            // Setting it pushes whatever Nagle held in between (nothing is left waiting).
            k.set_nodelay(fd);
            self.stats.kept_defaults.fetch_add(1, Relaxed);
            return;
        }
        self.program_holds(k, fd);
    }

    /// The slot of `fd`, if its chunk exists.
    fn slot(&self, fd: i32) -> Option<&Slot> {
        let i = usize::try_from(fd).ok()?;
        self.chunks.get(i / CHUNK)?.get().map(|c| &c[i % CHUNK])
    }

    /// The slot of `fd`, making its chunk if needed (adoption only).
    fn slot_or_make(&self, fd: i32) -> Option<&Slot> {
        let i = usize::try_from(fd).ok()?;
        let chunk = self.chunks.get(i / CHUNK)?;
        Some(&chunk.get_or_init(|| (0..CHUNK).map(|_| Slot::default()).collect())[i % CHUNK])
    }

    /// Slots that exist, with their descriptors, up to the highest one ever managed.
    fn live_slots(&self) -> impl Iterator<Item = (i32, &Slot)> + '_ {
        let high = self.high.load(Relaxed);
        self.chunks
            .iter()
            .enumerate()
            .take(high.div_ceil(CHUNK))
            .filter_map(|(n, c)| c.get().map(|c| (n, c)))
            .flat_map(move |(n, c)| {
                c.iter()
                    .enumerate()
                    .map(move |(k, s)| ((n * CHUNK + k) as i32, s))
            })
            .take_while(move |(fd, _)| (*fd as usize) < high)
    }

    /// Whether `fd` is a socket we manage.
    pub fn is_managed(&self, fd: i32) -> bool {
        self.slot(fd).is_some_and(|s| s.flags.peek().is_managed())
    }

    /// Whether the shim currently holds a burst on `fd`.
    #[cfg(test)]
    pub fn is_corked(&self, fd: i32) -> bool {
        self.slot(fd).is_some_and(|s| s.flags.peek().is_held())
    }

    /// Bursts in progress.
    #[cfg(test)]
    pub fn held(&self) -> u32 {
        self.corked.load(Acquire)
    }

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
    pub fn adopt_accepted(&self, k: &impl Kernel, listener: i32, fd: i32) {
        let from = self.slot(listener).filter(|_| listener != fd);
        let flags = from.map_or(Flags::default(), |l| l.flags.get());
        self.adopt_as(k, fd, flags.owner() == state::Owner::Program);
        // The connection inherits the listener's options, so what the program sees of them.
        if let (Some(from), Some(to)) = (from, self.slot(fd)) {
            if to.flags.get().is_managed() {
                let nodelay = from.program_nodelay.load(Relaxed);
                to.program_nodelay.store(nodelay, Relaxed);
                to.flags.inherit_program_cork(flags);
            }
        }
    }

    fn adopt_as(&self, k: &impl Kernel, fd: i32, program_chose: bool) {
        let slot = if k.is_tcp_stream(fd) {
            self.slot_or_make(fd)
        } else {
            self.slot(fd)
        };
        let Some(slot) = slot else { return };
        // A burst of the number's earlier socket, or one a racing write just began.
        let old = slot.flags.reset();
        self.end_burst(k, fd, old, false);
        slot.renew();
        if !k.is_tcp_stream(fd) {
            return;
        }
        self.high.fetch_max(fd as usize + 1, Relaxed);
        self.stats.sockets.fetch_add(1, Relaxed);
        slot.flags.manage(program_chose);
        if program_chose {
            self.stats.self_managed.fetch_add(1, Relaxed);
            return;
        }
        // Setting NODELAY makes every release immediate; errors leave the socket as it was.
        k.set_nodelay(fd);
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
        let by = if learned && nth < shape && carries_more {
            HoldBy::More
        } else {
            HoldBy::Cork
        };
        self.start_burst(k, fd, slot, mine, by)
    }

    /// A write joins the burst in progress on `fd` (`flags`, as `before_write` read them).
    #[allow(clippy::too_many_arguments)]
    fn join_burst(
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
    fn start_burst(
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
        }
    }

    /// After the write `step` was made for. A write that completed the learned shape sends
    /// its burst now (not a newer one another thread started meanwhile). A write sent with
    /// `MSG_MORE` pushes its bytes out itself if its burst ended while it was being made, or
    /// if the burst's last write was on its way: whoever sent the burst may have done so
    /// before these bytes were queued.
    /// `failed`: the call returned an error or 0 (it queued nothing, so it pushed nothing).
    pub fn after_write(&self, k: &impl Kernel, fd: i32, step: WriteStep, failed: bool) {
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
    }

    /// Ends a burst held by `MSG_MORE` whose last write went out plainly and so sent it: no
    /// push needed, unless that write queued nothing, or `TCP_CORK` went on meanwhile.
    ///
    /// Only a burst still marked LAST_SENDING is this write's: between its generation check
    /// and here, its burst may have been ended by a reader and a newer one started (whose
    /// start clears the mark, and whose bytes this write did not send).
    fn release_sent(&self, k: &impl Kernel, fd: i32, slot: &Slot, failed: bool) {
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
    fn end_burst(&self, k: &impl Kernel, fd: i32, ended: Flags, sent: bool) -> bool {
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
    fn count_down(&self) {
        let before = self.corked.fetch_sub(1, AcqRel);
        debug_assert!(
            before > 0,
            "corked underflows: a burst ended before it was counted"
        );
    }

    fn note(&self, k: &impl Kernel, mine: &mut ThreadBursts, fd: i32, generation: u32) {
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
    fn end_noted(&self, k: &impl Kernel, fd: i32, generation: u32) {
        if let Some(slot) = self.live_generation(fd, generation) {
            slot.learn();
            self.release(k, fd);
        }
    }

    /// The slot of `fd` if `generation` is still its burst's (the entry is not stale).
    fn live_generation(&self, fd: i32, generation: u32) -> Option<&Slot> {
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
    fn share(old: &Slot, new: &Slot, id: u64) {
        for s in [new, old] {
            s.socket.store(id, Relaxed);
            // Never 0 ("unlinked"), also when the epoch wraps.
            let _ = s
                .shared
                .fetch_update(AcqRel, Acquire, |v| Some(v.wrapping_add(1).max(1)));
        }
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

    /// In a child after fork: it has no flusher thread (the next burst starts one) and
    /// inherits no burst (the parent released them before forking).
    pub fn after_fork_child(&self) {
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
            && self.slot(fd).is_some_and(|s| s.flags.peek().is_shims())
    }

    /// The flusher could not be started, or stopped: the shim holds nothing from now on (in
    /// this process; a forked child tries again), and what it holds now is released.
    pub fn flusher_cannot_run(&self, k: &impl Kernel) {
        self.hold_nothing.store(true, Release);
        self.release_all(k);
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
        let bursts = self.stats.bursts.load(Relaxed);
        if st.looked_at_us != 0 {
            let n = bursts.saturating_sub(st.bursts_seen);
            let elapsed = now.saturating_sub(st.looked_at_us).max(1);
            let per_bound_x128 = (n * 128 * tick.as_micros() as u64 / elapsed).min(128 * 64);
            st.rate_x128 = st.rate_x128 - st.rate_x128.div_ceil(8) + per_bound_x128 / 8;
            if n > 0 {
                // Bursts came and went since the last look: not idle.
                st.idle_for = Duration::ZERO;
            }
        }
        st.bursts_seen = bursts;
        st.looked_at_us = now.max(1);
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
        // bursts end long before, released by their writer), at least `MIN_NAP`.
        let mut next_us = limit;
        for (fd, slot) in self.live_slots() {
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
                next_us = next_us.min(limit - age);
            }
        }
        FlusherStep::Sleep(Duration::from_micros(next_us).max(MIN_NAP))
    }

    /// The flusher woke from parking.
    pub fn flusher_unparked(&self) {
        self.flusher_parked.store(false, Release);
    }

    /// Descriptors that are managed now (for the exit report).
    pub fn managed_fds(&self) -> impl Iterator<Item = i32> + '_ {
        self.live_slots()
            .filter(|(_, s)| s.flags.peek().is_managed())
            .map(|(fd, _)| fd)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
