//! # nagless-preload
//!
//! `libnagless_preload.so`: loaded with `LD_PRELOAD` (or by `nagless run -- CMD`), it gives
//! an unmodified program's TCP sockets the nagless behaviour, in any language that goes
//! through libc.
//!
//! **What it does.** Every TCP stream socket the program creates, accepts or connects (any
//! flags, any descriptor number) gets `TCP_NODELAY`. The first write of a burst sets
//! `TCP_CORK`; the burst ends, and the cork comes off, when the thread that wrote it turns to
//! wait (before it blocks in the poll, select or epoll families, sleeps, signal waits,
//! waitpid), when any thread reads, receives on, shuts down or closes that socket, and before
//! dup2/dup3 onto it, fork, exec and `_exit`. A wait that would not block (a zero timeout, or
//! events already ready, found by the same call made first with a zero timeout) is not a
//! wait: a relay or event loop that finds its next chunk ready goes on adding to the burst.
//! The program never sees the shim's options: `getsockopt` of `TCP_NODELAY` and `TCP_CORK`
//! returns its own values (or the kernel's defaults), and setting `TCP_NODELAY` off where it
//! already saw it off (a server copying its listener's default) keeps the socket held.
//! With `TCP_NODELAY` on, uncorking sends the held tail at once, so the burst leaves as
//! ⌈bytes / MSS⌉ segments with no Nagle or delayed-ACK wait. A socket whose bursts keep the
//! same number of writes (headers, then body) has that shape learned: such a burst is held
//! by `MSG_MORE` on its earlier writes (`write` made as `send`, `writev` as `sendmsg`) instead
//! of `TCP_CORK`, and its last write, sent without the flag, sends it: the response leaves
//! when its last byte is written, not at the program's next wait, with no `setsockopt`
//! call. A program that writes and then
//! neither reads nor polls still has its data on the wire within the linger bound
//! (`NAGLESS_LINGER_US`, default 1000 µs), enforced by a flusher thread; a burst short of
//! its learned shape on a socket whose writer pauses inside its bursts (an interpreter
//! waiting for its global lock) is given five bounds for the rest.
//!
//! **Why the kernel holds the bytes.** Unsent bytes stay in the socket's send queue under
//! `TCP_CORK` or `MSG_MORE`, never in a user-space buffer of ours: `write()` returns exactly
//! what the kernel returned, a crash, `_exit` or `exec` cannot lose accepted data (the kernel
//! sends it at close, or at worst after its ~200 ms probe timer), and a forked child shares
//! no half-built buffer. The price is two `setsockopt` calls per burst; a burst of a learned
//! shape costs none when its last write sends it, one when a wait, a read or the linger
//! bound ends it first. Holding by `MSG_MORE` means a `write` is made as `send` (`writev` as
//! `sendmsg`): a seccomp filter that allows the one and not the other sees the other.
//!
//! **Modes** (`NAGLESS_MODE`): `nagless` (the above), `cork` (libautocork's rule: release only
//! on a read of the socket or on poll/select; epoll users wait for the kernel's cork limit),
//! `nodelay` (set `TCP_NODELAY` only). `NAGLESS_STATS=1` prints counters at exit;
//! `NAGLESS_STATS_FILE=PATH` keeps them current in `PATH.PID` (for daemons stopped by a signal);
//! `NAGLESS_LOG=FILE` appends a debug trace.
//!
//! Limits: programs that bypass libc (Go, static binaries, inline system calls, io_uring) are
//! not reached (libc's `syscall()` is, for close);
//! `nagless run` detects the first two.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

//!
//! The policy (when a burst starts and ends, what is learned) is the crate
//! `nagless-shim-policy`, safe code tested with a fake kernel; this crate only forwards the
//! program's calls to it (`interpose`, `exec` and `signals`, the hooks, through `hooks` and
//! `waits`) and gives it the real kernel (`sys`, the crate's one module of kernel calls). The
//! flusher thread is `flusher`; start-up and exit `init`; the exit report and stats file
//! `report`; the debug log `debug_log`; what a hook may use inside a signal handler
//! `signal_safe`; the shim carried into programs started with an environment that dropped it
//! `carry`; what the shim may do in the process right now (active, in a signal handler, in a
//! `vfork` child, aside under a seccomp filter) `standing`, and a filter found at start-up
//! `sandbox`.

// The hooks would interpose the test runner itself: unit tests build without them.
#[cfg(not(test))]
mod carry;
#[cfg(not(test))]
mod debug_log;
#[cfg(not(test))]
mod exec;
#[cfg(not(test))]
mod flusher;
#[cfg(not(test))]
mod hooks;
#[cfg(not(test))]
mod init;
#[cfg(not(test))]
mod interpose;
#[cfg(not(test))]
mod report;
mod sandbox;
#[cfg(not(test))]
mod signal_safe;
#[cfg(not(test))]
mod signals;
#[cfg(not(test))]
mod standing;
#[cfg(not(test))]
mod symbols;
#[cfg(not(test))]
mod sys;
mod task_limit;
#[cfg(not(test))]
mod user_memory;
#[cfg(not(test))]
mod waits;
