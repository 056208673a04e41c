//! What the hooks call: the shim's process-wide state ([`shim`], this thread's burst list),
//! and the steps that tell the burst policy what the program does with its descriptors
//! (adopted, written, duplicated, read, closed) and its own socket options. Waits are in
//! `waits`, the flusher thread in `flusher`, start-up in `init`; the kernel is `sys`.
//!
//! Rules for everything here, since it runs inside the program's own calls: `errno` is saved
//! and restored around bookkeeping ([`quietly`]), nothing panics, nothing allocates after
//! start-up except starting the flusher thread once per process.

use std::cell::RefCell;
use std::sync::OnceLock;

use libc::c_int;

use nagless_shim_policy::{Kernel, Reading, Shim, ThreadBursts, WriteStep};

use crate::debug_log::log;
use crate::flusher::{ensure_flusher, wake_flusher};
use crate::signal_safe::SignalSafe;
use crate::sys::{errno, quietly, set_errno, Libc};

static SHIM: OnceLock<Shim> = OnceLock::new();

/// The shim, once initialised, where it acts (`standing`): not inside the program's signal
/// handlers, where every hook passes its call through and holds nothing.
pub fn shim() -> Option<&'static Shim> {
    SHIM.get().filter(|_| crate::standing::now().acts())
}

/// The shim, even inside a signal handler: its [`SignalSafe`] steps only, which allocate
/// nothing and start nothing (ending bursts at close, fork, exec and exit; what the program
/// sets and reads of its own options). `None` where the shim steps aside (`standing`): under
/// a seccomp filter, and in a child that shares the process's memory (a `vfork` child, whose
/// descriptor table is its own while the shim's table is the parent's).
pub fn shim_anywhere() -> Option<SignalSafe> {
    SHIM.get()
        .filter(|_| crate::standing::now().releases())
        .map(SignalSafe::from)
}

/// Every burst ends, none starts, and the flusher thread is gone when this returns.
fn end_bursts_and_flusher(s: SignalSafe) {
    s.flusher_cannot_run();
    crate::flusher::stop(s);
    // A burst a racing write began before it saw the first release.
    s.release_all();
}

/// The program is about to install a seccomp filter (`what` names the call): every burst
/// ends and the flusher stops, before the filter can refuse anything of ours; then the shim
/// steps aside for good (`standing`). Nothing where it already has, or in a `vfork` child
/// (the child's filter is its own: the parent's memory, where the standing lives, is not).
pub fn before_filter(what: &str) {
    // (Aside, or in a shared child: the standings where nothing is released.)
    if !crate::standing::now().releases() {
        return;
    }
    if let Some(s) = shim_anywhere() {
        quietly(|| end_bursts_and_flusher(s));
    }
    log(format_args!(
        "{what}: a seccomp filter comes: stepping aside"
    ));
    crate::standing::step_aside();
}

/// Before a child that shares this process's memory is made (`vfork`, `clone` with
/// `CLONE_VM` and `CLONE_VFORK`): every burst ends, and the child will find itself one. In
/// such a child (a `vfork` inside a `vfork` child), or aside, nothing. Its parent reports
/// the return to `standing` (`shared_child_returned`).
pub fn before_shared_child() {
    // (Aside, or in a shared child: the standings where nothing is released.)
    if !crate::standing::now().releases() {
        return;
    }
    release_everything();
    crate::standing::shared_child_begins();
}

/// In a child with memory of its own that no `pthread_atfork` handler ran in (`_Fork`,
/// `clone`), and in a forked one (from the atfork handler, perhaps in a signal handler: only
/// atomics are stored): no shared child runs here, the flusher is gone, and the next burst
/// starts one (a child that wrote would otherwise leave its bursts to the kernel's ~200 ms
/// timer).
pub fn after_fork_child() {
    crate::standing::own_child_begins();
    crate::flusher::forget_in_child();
    if let Some(s) = shim_anywhere() {
        s.after_fork_child();
    }
}

/// Stops the flusher for a call that a multithreaded process cannot make (`unshare` of a user
/// namespace, `setns`): every burst ends first, and the next burst starts the flusher again.
pub fn pause_flusher() {
    if let Some(s) = shim() {
        quietly(|| {
            end_bursts_and_flusher(s.into());
            s.flusher_stopped();
        });
    }
}

thread_local! {
    /// The bursts the current thread wrote to.
    static MINE: RefCell<ThreadBursts> = const { RefCell::new(ThreadBursts::new()) };
}

/// Runs `f` with this thread's burst list. A signal handler that writes while this thread is
/// inside a hook finds the list borrowed: its write is simply not noted (the linger bound
/// still holds for it).
pub fn with_mine(f: impl FnOnce(&mut ThreadBursts)) {
    let _ = MINE.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            f(&mut m);
        }
    });
}

/// Sets the shim up (once, at start-up): `None` if it already was.
pub fn install(shim: Shim) -> Option<&'static Shim> {
    SHIM.set(shim).ok()?;
    SHIM.get()
}

// ---- descriptors and writes --------------------------------------------------------------

/// A new descriptor exists: manage it if it is a TCP stream socket.
pub fn adopt(fd: c_int) {
    if fd >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.adopt(&Libc, fd));
            log(format_args!("adopt fd {fd}"));
        }
    }
}

/// A TCP socket another process made reaches this one (inherited as stdin, stdout or
/// stderr; received by `SCM_RIGHTS`, as a daemon hands a client's connection to the worker
/// that serves it): adopted unless its owner holds bytes on it (`TCP_CORK` set), its
/// `TCP_NODELAY` as it finds it (set by the other process, or that one's shim: this program
/// made no choice). `others`: descriptors that may name the same socket. Whether it was.
pub fn adopt_passed(fd: c_int, others: &[c_int]) -> bool {
    let Some(s) = shim() else { return false };
    quietly(|| {
        if !Libc.is_tcp_stream(fd) {
            return false;
        }
        if crate::sys::sockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK) != Some(0) {
            log(format_args!("fd {fd}: corked by its owner, left alone"));
            return false;
        }
        let nodelay = crate::sys::sockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY) == Some(1);
        s.adopt_inherited(&Libc, fd, nodelay, others);
        log(format_args!("adopt fd {fd} (passed by another process)"));
        true
    })
}

/// `fd` now listens: the shim's own `TCP_NODELAY` on it (set when it was made) goes, unless
/// the program set it, so that the listener is as natively. A program that inherits it (a
/// server exec'd on its listener, socket activation) must not find an option of the shim's
/// on its connections and take it for its own choice.
pub fn on_listen(fd: c_int) {
    if let Some(s) = shim() {
        if s.program_view(fd, true) == Some(false) {
            quietly(|| crate::sys::clear_nodelay(fd));
        }
    }
}

/// `fd` was accepted on `listener`.
pub fn adopt_accepted(listener: c_int, fd: c_int) {
    if fd >= 0 {
        if let Some(s) = shim() {
            quietly(|| {
                s.adopt_accepted(&Libc, listener, fd, || {
                    let on = |name| {
                        crate::sys::sockopt_int(fd, libc::IPPROTO_TCP, name).is_some_and(|v| v != 0)
                    };
                    (on(libc::TCP_NODELAY), on(libc::TCP_CORK))
                })
            });
            log(format_args!("adopt fd {fd} (accepted on {listener})"));
        }
    }
}

/// The calling thread writes to `fd`; `carries_more`: the call can be made with `MSG_MORE`.
pub fn on_write(fd: c_int, carries_more: bool) -> WriteStep {
    let Some(s) = shim() else {
        return WriteStep::default();
    };
    // Loads only (no system call: errno is untouched).
    if let Some(step) = s.clocked_write(fd) {
        return step;
    }
    quietly(|| {
        if s.needs_flusher(fd) {
            ensure_flusher(s);
        }
        let mut step = WriteStep::default();
        with_mine(|m| step = s.before_write(&Libc, fd, m, carries_more));
        if step.wake_flusher {
            wake_flusher(s);
        }
        step
    })
}

/// The write `step` was made for returned (`failed`: with an error).
pub fn after_write(fd: c_int, step: WriteStep, failed: bool) {
    if step.needs_after() {
        if let Some(s) = shim() {
            if step.is_clocked() {
                // A write on an ACK-clocked socket marks it for the flusher, which may be
                // parked: no system call (errno stays) unless it must be woken.
                if s.after_write(&Libc, fd, step, failed) {
                    quietly(|| wake_flusher(s));
                }
                return;
            }
            if quietly(|| s.after_write(&Libc, fd, step, failed)) {
                wake_flusher(s);
            }
        }
    }
}

/// The program is about to set TCP_CORK on `fd`: see [`Shim::program_cork_begins`].
pub fn program_cork_begins(fd: c_int) -> bool {
    shim_anywhere().is_some_and(|s| s.program_cork_begins(fd))
}

/// The program's TCP_CORK call on `fd` returned (`on`: the value set, `None`: it failed).
pub fn program_cork_done(fd: c_int, was: bool, on: Option<bool>) {
    if let Some(s) = shim_anywhere() {
        s.program_cork_done(fd, was, on);
    }
}

/// The program holds bytes on `fd` itself (TCP_CORK, MSG_MORE, Nagle back on).
pub fn program_holds(fd: c_int) {
    if let Some(s) = shim_anywhere() {
        quietly(|| s.program_holds(fd));
        log(format_args!("fd {fd}: the program holds its own bytes"));
    }
}

/// The program is about to set `TCP_NODELAY` on `fd`: see [`Shim::program_nodelay_begins`].
pub fn program_nodelay_begins(fd: c_int) {
    if let Some(s) = shim_anywhere() {
        s.program_nodelay_begins(fd);
    }
}

/// The program's `TCP_NODELAY` call on `fd` failed: see [`Shim::program_nodelay_failed`].
pub fn program_nodelay_failed(fd: c_int) {
    if let Some(s) = shim_anywhere() {
        s.program_nodelay_failed(fd);
    }
}

/// The program set `TCP_NODELAY` to `on` on `fd`: see [`Shim::program_nodelay`].
pub fn program_nodelay(fd: c_int, on: bool) {
    if let Some(s) = shim_anywhere() {
        quietly(|| s.program_nodelay(fd, on));
        log(format_args!(
            "fd {fd}: the program set TCP_NODELAY {}",
            on as u8
        ));
    }
}

/// What the program sees of `TCP_NODELAY` (`nodelay`) or `TCP_CORK` on `fd`: see
/// [`Shim::program_view`]. Read from memory only, so also where the shim steps aside (its own
/// `TCP_NODELAY`, set before, stays invisible there too).
pub fn program_view(fd: c_int, nodelay: bool) -> Option<bool> {
    SHIM.get().and_then(|s| s.program_view(fd, nodelay))
}

/// `fd` is about to be read, received on, shut down, spliced from, or replaced by
/// `dup2`/`dup3`: the burst of its socket ends, on every descriptor that names it (see
/// [`Shim::release_socket`]).
pub fn release_socket(fd: c_int) {
    if let Some(s) = shim() {
        quietly(|| s.release_socket(&Libc, fd));
    }
}

/// `fd` is about to be read or received on: as [`release_socket`], and the thread counts as
/// waiting in a read of it until [`read_ends`].
pub fn read_begins(fd: c_int) -> Option<Reading> {
    let s = shim()?;
    // Loads only (no system call: errno is untouched).
    if let Some(reading) = s.clocked_read(fd) {
        return Some(reading);
    }
    Some(quietly(|| s.read_begins(&Libc, fd)))
}

/// The read [`read_begins`] announced (`reading`) returned, with data if `got` (the same
/// call: inside a signal handler neither counts).
pub fn read_ends(fd: c_int, reading: Option<Reading>, got: bool) {
    if let (Some(s), Some(reading)) = (shim(), reading) {
        if s.read_ends_needed(reading) {
            quietly(|| s.read_ends(&Libc, fd, reading, got));
        }
    }
}

/// The program sends on `fd`, which the shim does not manage, a message whose control data
/// (`has_control`, asked only if a burst is held) may pass descriptors (`SCM_RIGHTS`): the
/// process that receives them knows nothing of a burst held here, so every burst ends
/// first (a segment early at worst).
pub fn before_passing(fd: c_int, has_control: impl FnOnce() -> bool) {
    if let Some(s) = shim() {
        if s.holds_any() && !s.is_managed(fd) && has_control() {
            quietly(|| s.release_all(&Libc));
        }
    }
}

/// Before fork and exec: no burst may be half-held across them.
pub fn release_everything() {
    if let Some(s) = shim_anywhere() {
        quietly(|| {
            s.release_all();
            // Not in a signal handler (`shim()` is `None` there), where the thread-local may
            // allocate on a thread's first access: what the list holds is only a hint, and
            // `release_all` ended every burst it names.
            if let Some(s) = shim() {
                with_mine(|m| s.release_thread(&Libc, m));
            }
        });
    }
}

/// `fd` is being closed: end its burst, count what it sent, forget it.
pub fn on_close(fd: c_int) {
    if let Some(s) = shim_anywhere() {
        quietly(|| {
            if s.is_managed(fd) {
                // The held tail leaves first, so that the count includes it.
                s.release(fd);
                if crate::report::account(s, fd) {
                    crate::flusher::nudge_flusher(s);
                }
            }
            s.forget(fd);
        });
    }
}

/// Makes `send`, the `MSG_MORE` form the shim chose for a program's `write`/`writev` on
/// `fd`: its result, or `None` if the descriptor is no socket any more (closed unseen, its
/// number reused by a file or pipe: `ENOTSOCK`, which has no side effects). The shim then
/// forgets it, errno is as before, and the caller makes the plain call.
pub fn held_send<R: Default + PartialOrd>(fd: c_int, send: impl FnOnce() -> R) -> Option<R> {
    let saved = errno();
    let r = send();
    if r >= R::default() || errno() != libc::ENOTSOCK {
        return Some(r);
    }
    if let Some(s) = shim() {
        quietly(|| s.forget(&Libc, fd));
        log(format_args!(
            "fd {fd}: no socket any more (closed unseen), forgotten"
        ));
    }
    set_errno(saved);
    None
}

/// `fd` is a new descriptor the shim does not manage (a socket other than TCP): whatever its
/// slot says of an earlier descriptor of that number is forgotten (no system call unless it
/// was managed).
pub fn forget(fd: c_int) {
    if fd >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.forget(&Libc, fd));
        }
    }
}

/// `new` now refers to what `old` refers to.
pub fn on_dup(old: c_int, new: c_int) {
    if new >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.duplicate(&Libc, old, new));
        }
    }
}
