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
