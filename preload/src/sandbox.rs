//! Seccomp sandboxes: a filter may kill the program (SIGSYS) for any system call it forbids,
//! and the shim cannot read the filter to learn which. So from the moment a filter is, or may
//! be, in force, the shim makes no system call the program did not ask for: before the
//! program's own call that installs one (`prctl(PR_SET_SECCOMP)`, or `seccomp(2)` through
//! libc's `syscall()`, as libseccomp makes it) it ends every burst and stops its flusher
//! thread (a filter with `TSYNC` applies to that thread too), and from then on it steps
//! aside (`standing`): every hook passes its call through untouched. A program born under a filter (one
//! its parent installed before `exec`, as systemd's `SystemCallFilter=` starts services) is
//! found at start-up: `Seccomp:` in `/proc/self/status`, read with `openat`, `read` and
//! `close`, the calls the loader itself has just made to load the shim. If that file cannot
//! be read, a filter may be in force: the shim steps aside there too.
//!
//! What is out of reach: a filter installed by an inline system call, not through libc
//! (Chromium's sandbox): the shim does not see it.
//!
//! This module finds a filter at start-up; the hooks of the calls that install one end the
//! bursts and step aside (`hooks::before_filter`).

/// Whether a seccomp filter is, or may be, in force at start-up (`/proc/self/status` says so,
/// or cannot be read).
#[cfg(not(test))]
pub fn filter_at_start() -> bool {
    let mut status = [0u8; 4096];
    match crate::sys::read_file(c"/proc/self/status", &mut status) {
        // (Allocation-free, as the rest of this read: see nagless_host::text.)
        Some(n) => nagless_host::text::seccomp_in_force(&status[..n]),
        None => true,
    }
}
