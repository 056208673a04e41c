//! Seccomp sandboxes: a filter may kill the program (SIGSYS) for any system call it forbids,
//! and the shim cannot read the filter to learn which. So from the moment a filter is, or may
//! be, in force, the shim makes no system call the program did not ask for: before the
//! program's own call that installs one (`prctl(PR_SET_SECCOMP)`, or `seccomp(2)` through
//! libc's `syscall()`, as libseccomp makes it) it ends every burst and stops its flusher
//! thread (a filter with `TSYNC` applies to that thread too), and from then on it steps
//! aside: every hook passes its call through untouched. A program born under a filter (one
//! its parent installed before `exec`, as systemd's `SystemCallFilter=` starts services) is
//! found at start-up: `Seccomp:` in `/proc/self/status`, read with `openat`, `read` and
//! `close`, the calls the loader itself has just made to load the shim. If that file cannot
//! be read, a filter may be in force: the shim steps aside there too.
//!
//! What is out of reach: a filter installed by an inline system call, not through libc
//! (Chromium's sandbox): the shim does not see it.

#[cfg(not(test))]
use std::sync::atomic::{AtomicBool, Ordering::*};

#[cfg(not(test))]
use crate::debug_log::log;

#[cfg(not(test))]
/// The shim has stepped aside for good in this process (and in its children: a filter is
/// inherited across `fork` and `exec`).
static ASIDE: AtomicBool = AtomicBool::new(false);

/// Whether the shim has stepped aside: its hooks then pass every call through.
#[cfg(not(test))]
pub fn aside() -> bool {
    ASIDE.load(Relaxed)
}

/// A filter was found in force at start-up: the shim stays aside for the process's life.
#[cfg(not(test))]
pub fn aside_from_start() {
    ASIDE.store(true, Relaxed);
}

/// Whether a seccomp filter is, or may be, in force at start-up (`/proc/self/status` says so,
/// or cannot be read).
#[cfg(not(test))]
pub fn filter_at_start() -> bool {
    let mut status = [0u8; 4096];
    match crate::sys::read_file(c"/proc/self/status", &mut status) {
        Some(n) => filtered(&status[..n]),
        None => true,
    }
}

/// Whether a `/proc/PID/status` text says a seccomp mode is in force (strict or filter). No
/// `Seccomp:` line (a kernel built without seccomp) means none.
fn filtered(status: &[u8]) -> bool {
    status
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"Seccomp:"))
        .is_some_and(|v| v.trim_ascii() != b"0")
}

/// The program is about to install a seccomp filter (`what` names the call): end every
/// burst, stop the flusher, and step aside, before the filter can refuse anything of ours.
#[cfg(not(test))]
pub fn before_filter(what: &str) {
    // A `vfork` child's filter is its own: the parent's memory, where this flag lives, is not.
    if aside() || crate::children::in_shared_child() {
        return;
    }
    crate::hooks::stop_holding();
    log(format_args!(
        "{what}: a seccomp filter comes: stepping aside"
    ));
    ASIDE.store(true, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::filtered;

    #[test]
    fn the_status_line_says_whether_a_filter_is_in_force() {
        let with =
            |v: &str| format!("Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t{v}\nSeccomp_filters:\t1\n");
        assert!(!filtered(with("0").as_bytes()));
        assert!(filtered(with("2").as_bytes()));
        assert!(filtered(with("1").as_bytes()));
        assert!(!filtered(b"Name:\tx\nState:\tR\n"));
    }
}
