//! Knowing when a hook runs inside a signal handler of the program. A handler may interrupt
//! the program anywhere, inside `malloc` or holding a libc lock: there the shim must not
//! allocate, start a thread or look up a symbol, so its hooks pass the call through and hold
//! nothing (`standing` says `InHandler` there), except the steps that only release bursts.
//!
//! The program's handlers are installed as given, behind one trampoline of ours that counts,
//! per thread, how deep in handlers it is: the hooks of `sigaction`, `signal`, `sysv_signal`,
//! `bsd_signal` and `sigset` record the program's handler and flags in a table and put the
//! trampoline (with `SA_SIGINFO`) in its place, with the program's mask and other flags
//! unchanged; every answer the program reads back (the old action) is its own handler and
//! flags, never ours. A handler that leaves by `siglongjmp` leaves its thread counted as in a
//! handler: the shim then passes that thread's calls through (the program runs as without it).
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering::Relaxed};

use libc::{c_int, c_void, sighandler_t};

use crate::sys::{next, set_errno};
use crate::user_memory;

/// Signal numbers 1..NSIG (Linux: 64 signals).
const NSIG: usize = 65;

/// The program's handler and `sa_flags` for each signal it caught through the trampoline.
static HANDLERS: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
static FLAGS: [AtomicI32; NSIG] = [const { AtomicI32::new(0) }; NSIG];

// Counts the calling thread in and out of the program's handlers: an initial-exec
// thread-local of `c/handler_depth.c` (Rust's thread-locals in a shared library go through
// `__tls_get_addr`, which may allocate), read by `standing::in_handler`.
extern "C" {
    fn nagless_handler_enter();
    fn nagless_handler_leave();
}

/// Runs the program's handler for `sig`, counted. Always called with the three arguments of
/// an `SA_SIGINFO` handler: a `void f(int)` ignores the other two on every Linux ABI (the
/// kernel itself passes them to every handler on x86-64), so a handler and its flags read
/// a moment apart can never disagree. `C-unwind`: a handler that throws (C++ with
/// `-fnon-call-exceptions`) unwinds through it as through the kernel's frame.
extern "C-unwind" fn trampoline(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let Some(i) = index(sig) else { return };
    let handler = HANDLERS[i].load(Relaxed);
    if !catches(handler) {
        return;
    }
    // SAFETY: counts this thread in; no arguments, no preconditions.
    unsafe { nagless_handler_enter() };
    type Action = extern "C-unwind" fn(c_int, *mut libc::siginfo_t, *mut c_void);
    // SAFETY: `handler` is the program's handler for `sig`, a `void f(int, siginfo_t *,
    // void *)` or a `void f(int)`, which the C ABI lets us call with the same arguments.
    let f = unsafe { std::mem::transmute::<usize, Action>(handler) };
    f(sig, info, ctx);
    // SAFETY: as above.
    unsafe { nagless_handler_leave() };
}

/// The trampoline's address.
fn tramp() -> sighandler_t {
    trampoline as *const () as sighandler_t
}

fn index(sig: c_int) -> Option<usize> {
    usize::try_from(sig)
        .ok()
        .filter(|&i| (1..NSIG).contains(&i))
}

/// `sigset`'s "hold the signal", which is no handler.
const SIG_HOLD: sighandler_t = 2;

/// Whether `h` is a handler of the program's (not a disposition, not ours).
fn catches(h: sighandler_t) -> bool {
    ![
        libc::SIG_DFL,
        libc::SIG_IGN,
        libc::SIG_ERR,
        SIG_HOLD,
        tramp(),
    ]
    .contains(&h)
}

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

/// `sigaction(2)`: the program's handler goes behind the trampoline; its old action reads as
/// it set it.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(real) = next!("sigaction", SigactionFn) else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    let Some(i) = index(sig) else {
        // SAFETY: forwarding the caller's arguments unchanged (the kernel refuses the number).
        return unsafe { real(sig, act, old) };
    };
    let before = (HANDLERS[i].load(Relaxed), FLAGS[i].load(Relaxed));
    let mut wrapped = None;
    // Where the shim steps aside (a seccomp filter, a `vfork` child on the parent's table),
    // the action is installed as given: no probe, and the table stays as the parent left it.
    if !act.is_null() && crate::standing::now().releases() {
        // An unreadable action: the real call reports EFAULT, as it would.
        if let Some(mut a) = user_memory::read(act) {
            if catches(a.sa_sigaction) {
                HANDLERS[i].store(a.sa_sigaction, Relaxed);
                FLAGS[i].store(a.sa_flags, Relaxed);
                a.sa_sigaction = tramp();
                a.sa_flags |= libc::SA_SIGINFO;
                wrapped = Some(a);
            }
        }
    }
    let act = wrapped
        .as_ref()
        .map_or(act, |a| a as *const libc::sigaction);
    // SAFETY: the caller's arguments, or a copy of its action with our trampoline.
    let r = unsafe { real(sig, act, old) };
    if r != 0 && wrapped.is_some() {
        HANDLERS[i].store(before.0, Relaxed);
        FLAGS[i].store(before.1, Relaxed);
    }
    if r == 0 && !old.is_null() {
        // SAFETY: the call succeeded, so the kernel wrote the old action at `old`.
        let o = unsafe { &mut *old };
        if o.sa_sigaction == tramp() {
            // The kernel's flags (SA_RESTORER, a siginterrupt change) with the program's own
            // SA_SIGINFO bit.
            o.sa_sigaction = before.0;
            o.sa_flags = (o.sa_flags & !libc::SA_SIGINFO) | (before.1 & libc::SA_SIGINFO);
        }
    }
    r
}

/// Adds `SA_SIGINFO` to the trampoline libc just installed for `sig` (with libc's own flags
/// and mask), so that the kernel always hands it the three arguments it passes on.
fn with_siginfo(sig: c_int) {
    let Some(real) = next!("sigaction", SigactionFn) else {
        return;
    };
    // SAFETY: an all-zero sigaction is valid; a query into `cur`, then the same action with
    // one more flag.
    unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        if real(sig, std::ptr::null(), &mut cur) == 0
            && cur.sa_sigaction == tramp()
            && cur.sa_flags & libc::SA_SIGINFO == 0
        {
            cur.sa_flags |= libc::SA_SIGINFO;
            real(sig, &cur, std::ptr::null_mut());
        }
    }
}

/// Defines a hook of a `signal`-like function `fn(int, handler) -> handler`: the program's
/// handler goes in the table and libc's call installs the trampoline in its place, with the
/// flags and mask libc chooses (BSD or System V semantics, `siginterrupt`), so the handler
/// never runs uncounted. What it returns is the program's old handler, never the trampoline.
macro_rules! signal_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(sig: c_int, handler: sighandler_t) -> sighandler_t {
            let Some(real) = next!(
                stringify!($name),
                unsafe extern "C" fn(c_int, sighandler_t) -> sighandler_t
            ) else {
                set_errno(libc::ENOSYS);
                return libc::SIG_ERR;
            };
            let Some(i) = index(sig).filter(|_| catches(handler) && crate::standing::now().releases())
            else {
                // A disposition (or a number the kernel refuses): made as asked.
                let before = index(sig).map_or(0, |i| HANDLERS[i].load(Relaxed));
                // SAFETY: forwarding the caller's arguments unchanged.
                let r = unsafe { real(sig, handler) };
                return if r == tramp() { before } else { r };
            };
            let before = (HANDLERS[i].load(Relaxed), FLAGS[i].load(Relaxed));
            HANDLERS[i].store(handler, Relaxed);
            FLAGS[i].store(0, Relaxed);
            // SAFETY: the caller's signal, with our trampoline as its handler.
            let r = unsafe { real(sig, tramp()) };
            if r == libc::SIG_ERR {
                HANDLERS[i].store(before.0, Relaxed);
                FLAGS[i].store(before.1, Relaxed);
                return r;
            }
            with_siginfo(sig);
            if r == tramp() {
                before.0
            } else {
                r
            }
        }
    };
}
signal_hook!(
    /// `signal(2)`.
    signal
);
signal_hook!(
    /// `sysv_signal(3)`.
    sysv_signal
);
signal_hook!(
    /// `bsd_signal(3)`.
    bsd_signal
);
signal_hook!(
    /// `sigset(3)`.
    sigset
);
signal_hook!(
    /// `__sysv_signal`: what `signal` becomes in a strict ISO C build.
    __sysv_signal
);
