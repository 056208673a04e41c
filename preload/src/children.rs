//! Children the `pthread_atfork` handler never hears of, made by the hooks of `vfork`,
//! `_Fork` and `clone` (`interpose::process`).
//!
//! - **A child of its own memory** (`_Fork`, `clone` without `CLONE_VM`): a fork without
//!   atfork handlers. Bursts end before it is made, and the child, like a forked one, has
//!   no flusher: [`after_fork_child`] tells the policy so (the next burst starts one), where
//!   a child that wrote would otherwise leave its bursts to the kernel's ~200 ms timer.
//! - **A child that shares the process's memory** (`vfork`, `clone` with `CLONE_VM` and
//!   `CLONE_VFORK`): it runs on the parent's memory, and so on the shim's table, with a
//!   descriptor table of its own, until it calls `exec` or `_exit`. There the shim steps
//!   aside: every hook passes its call through (a write goes out as it would natively; a
//!   `close` or `dup2` of the child's leaves the parent's table alone), and nothing the
//!   parent relies on (its flusher, its handlers) is touched. Bursts end before the child is
//!   made. While such a child may run, each hook asks the kernel for its process ID
//!   (`getpid`) to tell the child from the parent's threads: a few calls while the child
//!   lives, none otherwise.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering::*};

use crate::hooks;

/// Children sharing this process's memory that may be running (made and not yet returned to
/// their parent's hook).
static SHARING: AtomicU32 = AtomicU32::new(0);
/// The process that made them.
static PARENT: AtomicI32 = AtomicI32::new(0);

/// Whether the caller runs in a child that shares its parent's memory.
pub fn in_shared_child() -> bool {
    if SHARING.load(Acquire) == 0 {
        return false;
    }
    crate::sys::pid() != PARENT.load(Relaxed)
}

/// Before a child that shares this process's memory is made: every burst ends, and the
/// child will find itself one. In such a child (a `vfork` inside a `vfork` child), nothing.
pub fn before_shared_child() {
    if crate::sandbox::aside() || in_shared_child() {
        return;
    }
    hooks::release_everything();
    PARENT.store(crate::sys::pid(), Relaxed);
    SHARING.fetch_add(1, AcqRel);
}

/// In the parent, once the call that made such a child returned (the child has called
/// `exec` or `_exit`, or the call failed). Not in a child that made one itself (it counted
/// nothing); never below zero (a filter that came meanwhile made [`before_shared_child`]
/// count nothing).
pub fn after_shared_child() {
    if in_shared_child() {
        return;
    }
    let _ = SHARING.fetch_update(AcqRel, Acquire, |n| n.checked_sub(1));
}

/// In a child with memory of its own that no `pthread_atfork` handler ran in (`_Fork`,
/// `clone`): as after a `fork`, it has no flusher, and the next burst starts one.
pub fn after_fork_child() {
    // A copy of the parent's count: this child's memory is its own, and shares with nobody.
    SHARING.store(0, Relaxed);
    crate::flusher::forget_in_child();
    if let Some(s) = hooks::shim_anywhere() {
        s.after_fork_child();
    }
}
