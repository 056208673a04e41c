//! What the shim may do in this process right now: one answer ([`now`]), which the hooks
//! ask, and the transitions that change it, reported here by whoever notices them. Nothing
//! here calls back into the hooks: the arrows run hooks -> standing, never back.
//!
//! | standing | what the shim does | entered when | left when |
//! |---|---|---|---|
//! | [`Standing::Active`] | everything: holds bursts, starts its flusher | start-up | never for good |
//! | [`Standing::InHandler`] | its signal-safe steps only: releases, the program's own options | the calling thread runs a handler of the program | the handler returns |
//! | [`Standing::SharedChild`] | nothing: every call passes through | a `vfork` (or `clone` with `CLONE_VM` and `CLONE_VFORK`) made a child on this memory | the call that made it returns in the parent |
//! | [`Standing::Aside`] | nothing, for good | a seccomp filter is, or may be, in force | never (a filter is inherited) |
//!
//! [`now`] checks them from the table's last row up (aside, then a shared child, then a
//! handler): a shared child inside a handler does nothing, as one outside.
//!
//! - **A seccomp filter** may kill the program (SIGSYS) for any system call it forbids, and
//!   the shim cannot read the filter: from the moment one is, or may be, in force it makes no
//!   system call the program did not ask for (`sandbox` finds one at start-up; the hooks of
//!   `prctl(PR_SET_SECCOMP)` and `seccomp(2)` end every burst, stop the flusher, then step
//!   aside).
//! - **A child that shares the process's memory** (`vfork`) runs on the shim's table with a
//!   descriptor table of its own, until it calls `exec` or `_exit`: a write goes out as it
//!   would natively, and a `close` or `dup2` of the child's leaves the parent's table alone.
//!   Bursts end before the child is made. While such a child may run, [`now`] asks the kernel
//!   for the process ID (`getpid`) to tell the child from the parent's threads: a few calls
//!   while the child lives, none otherwise.
//! - **A child with memory of its own** (`fork`, `_Fork`, `clone` without `CLONE_VM`) starts
//!   from a copy of this memory: no shared child runs there ([`own_child_begins`]).
//! - **A signal handler** may interrupt the program anywhere, inside `malloc` or holding a
//!   libc lock: the shim must not allocate, start a thread or look up a symbol there. The
//!   handler depth is counted per thread by `signals`' trampoline (`c/handler_depth.c`).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering::*};

/// What the shim may do in the calling thread of this process now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Everything.
    Active,
    /// Its signal-safe steps only.
    InHandler,
    /// Nothing: a child that shares the process's memory runs the call.
    SharedChild,
    /// Nothing, for good: a seccomp filter is, or may be, in force.
    Aside,
}

impl Standing {
    /// The shim holds bursts, starts its flusher, allocates.
    pub fn acts(self) -> bool {
        self == Standing::Active
    }

    /// The shim takes its signal-safe steps (ends bursts; notes the program's own options).
    pub fn releases(self) -> bool {
        matches!(self, Standing::Active | Standing::InHandler)
    }
}

/// The shim has stepped aside for good in this process (and in its children: a filter is
/// inherited across `fork` and `exec`).
static ASIDE: AtomicBool = AtomicBool::new(false);
/// Children sharing this process's memory that may be running (made and not yet returned to
/// their parent's hook).
static SHARING: AtomicU32 = AtomicU32::new(0);
/// The process that made them.
static PARENT: AtomicI32 = AtomicI32::new(0);

// How many handlers the calling thread is inside: an initial-exec thread-local of
// `c/handler_depth.c` (Rust's thread-locals in a shared library go through
// `__tls_get_addr`, which may allocate).
extern "C" {
    fn nagless_handler_depth() -> libc::c_uint;
}

/// What the shim may do in the calling thread now.
pub fn now() -> Standing {
    if ASIDE.load(Relaxed) {
        Standing::Aside
    } else if in_shared_child() {
        Standing::SharedChild
    } else if in_handler() {
        Standing::InHandler
    } else {
        Standing::Active
    }
}

/// Whether the calling thread runs a signal handler of the program.
pub fn in_handler() -> bool {
    #[allow(unsafe_code)]
    // SAFETY: reads this thread's counter; no arguments, no preconditions.
    let depth = unsafe { nagless_handler_depth() };
    depth > 0
}

/// Whether the caller runs in a child that shares its parent's memory.
fn in_shared_child() -> bool {
    if SHARING.load(Acquire) == 0 {
        return false;
    }
    crate::sys::pid() != PARENT.load(Relaxed)
}

/// A seccomp filter is, or may be, in force: the shim steps aside for the process's life.
/// (Its bursts and flusher ended before, by the caller.)
pub fn step_aside() {
    ASIDE.store(true, Relaxed);
}

/// A child that shares this process's memory is about to be made (its bursts ended, by the
/// caller): it will find itself one.
pub fn shared_child_begins() {
    PARENT.store(crate::sys::pid(), Relaxed);
    SHARING.fetch_add(1, AcqRel);
}

/// In the parent, once the call that made such a child returned (the child has called
/// `exec` or `_exit`, or the call failed). Not in a child that made one itself (it counted
/// nothing); never below zero (a filter that came meanwhile let the child's start count
/// nothing).
pub fn shared_child_returned() {
    if in_shared_child() {
        return;
    }
    let _ = SHARING.fetch_update(AcqRel, Acquire, |n| n.checked_sub(1));
}

/// In a child with memory of its own (`fork`, `_Fork`, `clone` without `CLONE_VM`): its copy
/// of the parent's count shares with nobody.
pub fn own_child_begins() {
    SHARING.store(0, Relaxed);
}
