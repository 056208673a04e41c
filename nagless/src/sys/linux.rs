//! Linux and Android: `TCP_CORK`, `TCP_QUICKACK`, `TCP_NOTSENT_LOWAT` and `TCP_INFO`, whose
//! `tcpi_snd_mss` gives the segment size.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::cvt;

/// Reads the raw `struct tcp_info` into `buf`; returns the length the kernel filled.
pub(crate) fn tcp_info_raw(fd: BorrowedFd<'_>, buf: &mut [u8; 512]) -> io::Result<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is valid for `len` bytes of writes; the kernel writes at most `len` and
    // stores the length it wrote back into `len`.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    cvt(ret as libc::c_long).map(|_| (len as usize).min(buf.len()))
}

/// The connection's current send MSS, from `TCP_INFO` (one syscall).
pub(crate) fn segment_size(fd: BorrowedFd<'_>) -> io::Result<u32> {
    crate::TcpInfo::of(&fd).map(|info| info.snd_mss)
}

/// Reads one `int` an `ioctl` of the socket's send queue answers.
fn send_queue_ioctl(fd: BorrowedFd<'_>, request: libc::c_ulong) -> io::Result<u32> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ and SIOCOUTQNSD write one int through the pointer, which is valid for
    // writes and lives across the call; fd is a live descriptor borrowed for the call.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, &mut n as *mut libc::c_int) };
    cvt(ret as libc::c_long).map(|_| n.max(0) as u32)
}

/// Bytes written to the socket and not yet acknowledged by the peer, sent or not
/// (`SIOCOUTQ`; one syscall that takes no lock).
pub(crate) fn unacknowledged(fd: BorrowedFd<'_>) -> io::Result<u32> {
    send_queue_ioctl(fd, libc::TIOCOUTQ as libc::c_ulong)
}

/// Bytes written to the socket and not yet sent (`SIOCOUTQNSD`): what the kernel holds.
pub(crate) fn unsent(fd: BorrowedFd<'_>) -> io::Result<u32> {
    send_queue_ioctl(fd, libc::SIOCOUTQNSD as libc::c_ulong)
}
