//! The system calls of the crate (the only unsafe code in it).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Moves the calling thread into the network namespace `ns` (a `/proc/PID/ns/net`
/// descriptor): `setns(2)`.
pub(crate) fn enter_net_ns(ns: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setns takes a descriptor we hold open and a flag; it changes only the calling
    // thread's namespace.
    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
