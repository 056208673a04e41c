//! macOS, iOS, FreeBSD and the other BSDs: `TCP_NOPUSH` as the cork, `TCP_MAXSEG` for the
//! segment size. They have no `MSG_MORE`, no `TCP_QUICKACK` and no `TCP_NOTSENT_LOWAT` the
//! library uses.
//!
//! `TCP_NOPUSH` is not used by the library's own flushes: a flush is one `sendmsg` of every
//! pending slice (up to 1024), and `TCP_NODELAY` sends it at once. Only a flush of more than
//! 1024 slices, or one the socket takes in parts, is several calls, and there a partial segment
//! may leave between two calls where Linux's `MSG_MORE` would hold it. Holding it with
//! `TCP_NOPUSH` would cost two more syscalls per flush, and clearing it does not push held
//! bytes on macOS (FreeBSD does push).

use std::io;
use std::os::fd::BorrowedFd;

use super::{maxseg, setsockopt_int, unsupported};

/// Sets or clears `TCP_NOPUSH`, the BSD counterpart of Linux's `TCP_CORK`: partial segments
/// are held while it is set. FreeBSD sends what it held when it is cleared; macOS sends it
/// with the next write or flush of the connection.
pub fn set_cork(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NOPUSH, on as libc::c_int)
}

/// `TCP_QUICKACK` is Linux-only: `ErrorKind::Unsupported` here.
pub fn set_quickack(_: BorrowedFd<'_>, _: bool) -> io::Result<()> {
    unsupported("TCP_QUICKACK")
}

/// `TCP_NOTSENT_LOWAT` is Linux's (macOS has it only in private headers): `Unsupported` here.
pub fn set_notsent_lowat(_: BorrowedFd<'_>, _: u32) -> io::Result<()> {
    unsupported("TCP_NOTSENT_LOWAT")
}

/// Linux's `struct tcp_info` does not exist here (macOS's `TCP_CONNECTION_INFO` and FreeBSD's
/// `TCP_INFO` have other layouts): `Unsupported`.
pub(crate) fn tcp_info_raw(_: BorrowedFd<'_>, _: &mut [u8; 512]) -> io::Result<usize> {
    unsupported("Linux's TCP_INFO")
}

/// The connection's maximum segment size, from `TCP_MAXSEG` (one syscall).
pub(crate) fn segment_size(fd: BorrowedFd<'_>) -> io::Result<u32> {
    maxseg(fd)
}
