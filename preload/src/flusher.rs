//! The flusher thread: it enforces the linger bound on bursts nobody ends (a program that
//! writes and then neither reads nor waits), parks on a futex while no burst is held, and
//! keeps the stats file current (`report`). Started on the first held burst; if it cannot
//! start, or fails, the shim holds nothing in the process from then on.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::*};

use nagless_shim_policy::{FlusherStep, Shim};

use crate::debug_log::{log, write_formatted};
use crate::signal_safe::SignalSafe;
use crate::sys::{self, Libc};

/// The flusher thread (its `pthread_t`), 0 if none runs, and the process it runs in (a child
/// made by a raw `fork` system call, which no hook sees, inherits a copy of both).
static THREAD: AtomicUsize = AtomicUsize::new(0);
static THREAD_PID: AtomicI32 = AtomicI32::new(0);
/// A thread is being started (between the claim and [`THREAD`] naming it).
static STARTING: AtomicBool = AtomicBool::new(false);
/// Asks the flusher to end (see [`stop`]).
static STOP: AtomicBool = AtomicBool::new(false);
/// The flusher saw [`STOP`] and is ending.
static ENDING: AtomicBool = AtomicBool::new(false);

/// Starts the flusher before the first burst is held, if none runs yet.
pub fn ensure_flusher(s: &'static Shim) {
    if s.claim_flusher_start() {
        start_or_hold_nothing(s);
    }
}

/// Starts the flusher; if it cannot start, or would count against a tight task limit
/// (`task_limit`), the shim holds nothing in this process.
fn start_or_hold_nothing(s: &'static Shim) {
    STARTING.store(true, SeqCst);
    start_or_hold_nothing_now(s);
    STARTING.store(false, SeqCst);
}

fn start_or_hold_nothing_now(s: &'static Shim) {
    if crate::task_limit::tight() {
        s.flusher_cannot_run(&Libc);
        log(format_args!(
            "a tight task limit: no flusher thread, holding nothing"
        ));
        return;
    }
    if !start_flusher(s) {
        s.flusher_cannot_run(&Libc);
        log(format_args!(
            "cannot start the flusher thread: holding nothing"
        ));
    }
}

/// Wakes the flusher if it is parked (for a burst, or to write a stale stats file).
pub fn nudge_flusher(s: SignalSafe) {
    sys::futex_wake(s.park_word());
}

/// Wakes the flusher for a burst, starting it if none runs yet.
pub fn wake_flusher(s: &'static Shim) {
    if s.claim_flusher_start() {
        start_or_hold_nothing(s);
    } else {
        nudge_flusher(s.into());
    }
}

/// Stops the flusher thread, if one runs, and waits until it has ended: the process is then
/// as it was before the shim started it (one thread fewer; a program may now `unshare` a user
/// namespace, or install a seccomp filter that would refuse the thread's calls). The caller
/// first makes sure that nothing is held, or will be, that needs it.
pub fn stop(s: SignalSafe) {
    // A start in progress names its thread first (bounded: a start is a `clone`).
    for _ in 0..10_000 {
        if !STARTING.load(SeqCst) {
            break;
        }
        sys::nap(std::time::Duration::from_micros(100));
    }
    let t = THREAD.swap(0, AcqRel);
    if t == 0 || THREAD_PID.load(Relaxed) != sys::pid() {
        // None, or the parent's, in a child the hooks did not see made.
        return;
    }
    STOP.store(true, SeqCst);
    // Woken until it says it is ending: a wake that comes just before it parks is lost, so
    // it is sent again (it sleeps at most a few linger bounds otherwise). Bounded (10 s): a
    // flusher that does not answer is left as it is, never waited for forever.
    let mut ended = false;
    for _ in 0..100_000 {
        if ENDING.load(SeqCst) {
            ended = true;
            break;
        }
        nudge_flusher(s);
        sys::nap(std::time::Duration::from_micros(100));
    }
    if !ended {
        return;
    }
    sys::join_thread(t);
    ENDING.store(false, SeqCst);
    STOP.store(false, SeqCst);
}

/// In a child made by `fork` (or `_Fork`, or `clone` without `CLONE_VM`): the parent's
/// flusher is not here.
pub fn forget_in_child() {
    THREAD.store(0, Relaxed);
    // A start another thread of the parent had under way is not this child's.
    STARTING.store(false, Relaxed);
    STOP.store(false, Relaxed);
    ENDING.store(false, Relaxed);
}

/// Starts the flusher with every signal blocked, so that signals the program blocks in its
/// own threads (sigwait, signalfd, sigsuspend loops) are never delivered to it.
fn start_flusher(s: &'static Shim) -> bool {
    use std::os::unix::thread::JoinHandleExt;
    let spawned = sys::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("nagless-flusher".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                // A panic must not leave bursts held with nobody to release them.
                if std::panic::catch_unwind(|| flusher_loop(s)).is_err() {
                    ENDING.store(true, SeqCst);
                    s.flusher_cannot_run(&Libc);
                    if sys::stderr_takes_our_lines() {
                        write_formatted(
                            2,
                            format_args!(
                                "nagless: the flusher thread failed; holding nothing from now on\n"
                            ),
                        );
                    }
                }
            })
    });
    match spawned {
        Ok(handle) => {
            THREAD_PID.store(sys::pid(), Relaxed);
            THREAD.store(handle.into_pthread_t() as usize, Release);
            true
        }
        Err(_) => false,
    }
}

/// The flusher's life: what the policy's tick says, sleep or park, until [`stop`].
fn flusher_loop(s: &'static Shim) {
    let mut idle = nagless_shim_policy::FlusherState::default();
    loop {
        if STOP.load(SeqCst) {
            ENDING.store(true, SeqCst);
            return;
        }
        match s.flusher_tick(&Libc, &mut idle) {
            FlusherStep::Sleep(d) => {
                // Never while bursts are held: a slow file system must not delay them.
                if s.park_word().load(std::sync::atomic::Ordering::Acquire) == 0 {
                    crate::report::refresh(s.into());
                }
                std::thread::sleep(d)
            }
            FlusherStep::Park => {
                crate::report::refresh(s.into());
                // A stats file not yet current: wake once more to write it.
                let stale = crate::report::stale(s.into());
                // Parked while no burst is held (the word reads 0).
                sys::futex_wait(
                    s.park_word(),
                    stale.then_some(crate::report::STATS_FILE_EVERY),
                );
                s.flusher_unparked();
            }
        }
    }
}
