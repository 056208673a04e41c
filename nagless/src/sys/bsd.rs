//! macOS, iOS, FreeBSD and the other BSDs: `TCP_MAXSEG` for the segment size. They have no
//! `MSG_MORE`.
//!
//! `TCP_NOPUSH` (their cork) is not used by the library's flushes: a flush is one `sendmsg` of
//! every pending slice (up to `MAX_IOV`), and `TCP_NODELAY` sends it at once. Only a flush of
//! more slices, or one the socket takes in parts, is several calls, and there a partial segment
//! may leave between two calls where Linux's `MSG_MORE` would hold it. Holding it with
//! `TCP_NOPUSH` would cost two more syscalls per flush, and clearing it does not push held
//! bytes on macOS (FreeBSD does push).

use std::io;
use std::os::fd::BorrowedFd;

use super::{maxseg, unsupported};

/// Linux's `struct tcp_info` does not exist here (macOS's `TCP_CONNECTION_INFO` and FreeBSD's
/// `TCP_INFO` have other layouts): `Unsupported`.
pub(crate) fn tcp_info_raw(_: BorrowedFd<'_>, _: &mut [u8; 512]) -> io::Result<usize> {
    unsupported("Linux's TCP_INFO")
}

/// The connection's maximum segment size, from `TCP_MAXSEG` (one syscall).
pub(crate) fn segment_size(fd: BorrowedFd<'_>) -> io::Result<u32> {
    maxseg(fd)
}
