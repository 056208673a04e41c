//! The Unix side: the socket is an `int` descriptor, `struct iovec` and the error codes are
//! libc's, and the caller's descriptor is read with `read(2)` and checked with `fcntl(2)`.

use std::io;

/// The caller's socket (`nagless_socket_t` in C): a descriptor, `int`, on Unix.
pub type NaglessSocket = libc::c_int;
pub use libc::iovec;
pub(crate) use libc::{EAGAIN, EBADF, EINVAL, EIO, ETIMEDOUT};

/// The OS's number for the caller's socket.
pub(crate) type RawSock = std::os::fd::RawFd;

/// `read(2)` on the caller's descriptor, retrying `EINTR`.
pub(crate) fn read(fd: RawSock, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for `buf.len()` bytes of writes, all read(2) may write.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether `fd` is an open descriptor.
pub(crate) fn is_open(fd: NaglessSocket) -> bool {
    // SAFETY: F_GETFD only reads the flags of the descriptor number; a closed or invalid
    // number gives EBADF, nothing else.
    fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1
}
