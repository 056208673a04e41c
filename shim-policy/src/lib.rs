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
//!   [`Shim::after_write`] (true: wake the flusher, as below). Before the write, if [`Shim::needs_flusher`], start the flusher
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
//!   [`Shim::program_holds`] before its send with `MSG_MORE`; [`Shim::program_nodelay_begins`]
//!   before its `setsockopt(TCP_NODELAY)` ([`Shim::program_nodelay_failed`] if it fails); [`Shim::program_view`] for
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
//! `LEARN_AFTER` bursts that ended in a wait (or left a thread's full list: an event loop
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
//! still short of its shape waits up to `SHAPE_PATIENCE` linger bounds for the rest; a
//! short burst that was in fact a whole response then waits that long if its writer does
//! not wait visibly, and unlearns the shape at its writer's next wait.
//!
//! **The flusher**, while anything is held, sleeps until the oldest held burst reaches the
//! linger bound and releases it (bursts their writers end sooner cost it nothing). With
//! nothing held it looks once per bound while bursts come often (no wake-up per burst), and
//! parks until the next burst as soon as they come rarely (`RARE_BURSTS_X128`), or after
//! `FLUSHER_IDLE` without any: never more wake-ups than the cheaper of the two ways.
//!
//! **The ACK-clocked socket.** A write on a socket that another thread is reading (between
//! [`Shim::read_begins`] and [`Shim::read_ends`]: a client's reader thread, while its writer
//! threads hand work to each other through locks, which are no waits of the shim's) hands the
//! socket to the kernel's Nagle once (`TCP_NODELAY` off): from then on its writes go
//! plainly and leave as Nagle clocks them, with nothing in flight at once, else at the next
//! ACK. The bound Nagle lacks is the flusher's: each clocked write marks the socket, and a
//! look finding bytes unsent and no segment sent since its previous look pushes them
//! (`CLOCK_LOOKS_PER_BOUND` looks per linger bound, spreading out while the socket keeps
//! moving: up to 4 bounds apart once it has needed a push, else up to
//! `CLOCK_UNPUSHED_LONGEST_US`, two of which stay below a delayed-ACK timer). A duplicated
//! socket, or one whose flusher cannot run, goes back to the shim's `TCP_NODELAY`.
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
//! | write while another thread reads the socket | [`Shim::before_write`], then [`Shim::after_write`] | the socket is clocked by Nagle (`TCP_NODELAY` off, once; a held burst ends first); the write goes plainly, then marks the socket for the flusher (counted in `corked`) unless a mark is pending |
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
//! | the flusher's tick | [`Shim::flusher_tick`] | ends bursts older than the linger bound (`SHAPE_PATIENCE` bounds for a patient socket short of its shape); looks at due clock marks (clears, then asks `TCP_INFO`: bytes unsent and no segment since its last look: `TCP_NODELAY` on and off, which sends them; unsent but moving: marked again); sleeps to the next deadline, or parks |
//! | a thread notes more than `THREAD_BURSTS` bursts | (inside [`Shim::before_write`]) | its oldest burst ends, and teaches as a wait |
//! | program's `setsockopt(TCP_CORK)` | [`Shim::program_cork_begins`], [`Shim::program_cork_done`], then [`Shim::program_holds`] if on | marked `PROGRAM_CORKED` before the call (the shim never clears it), unmarked when the program clears it; on: the socket becomes the program's and the shim's burst ends |
//! | program's `setsockopt(TCP_NODELAY)` | [`Shim::program_nodelay_begins`], then [`Shim::program_nodelay`] | before: the shim changes the option no more, and a change of its own on its way lands first; after: off where it saw off: the shim's `TCP_NODELAY` is set again (left off on a clocked socket), nothing else; any other choice: the socket becomes the program's, its burst ends |
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
//! cork the program is setting ([`Shim::program_cork_begins`]; bounded, `CORK_WAIT_TURNS`).
//!
//! # The code
//!
//! `shim` holds [`Shim`], its table of descriptors and the [`Kernel`] it acts through;
//! `slot` one descriptor's state and the shape learned from its bursts; `state` the owner
//! and burst bits of a slot and their transitions. What the calls above do: `bursts`
//! (adoption, writes, the ends of bursts, duplicates), `program_options` (the program's own
//! `TCP_CORK` and `TCP_NODELAY`), `flusher` (the linger bound, parking, fork). `config`:
//! settings and counters.
//!
//! Public is what the shim's libc layer (`nagless-preload`) calls; the policy's constants
//! and the rest are its own (`unreachable_pub` holds it).
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod bursts;
mod clock;
mod config;
mod flusher;
#[cfg(all(test, loom))]
mod loom_models;
mod program_options;
mod reads;
mod shim;
mod slot;
mod state;
mod sync;

pub use bursts::{ThreadBursts, WriteStep};
pub use clock::Sending;
pub use config::{Config, Mode, Stats};
pub use flusher::{FlusherState, FlusherStep};
pub use reads::Reading;
pub use shim::{Kernel, Shim};

#[cfg(all(test, not(loom)))]
mod tests;
