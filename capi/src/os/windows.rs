//! The Windows side: the socket is a Winsock `SOCKET`, `struct iovec` is declared here with
//! the Unix layout, the error codes are Winsock's, and the caller's socket is read with `recv`
//! and checked with `getsockopt`.

use windows_sys::Win32::Foundation::ERROR_INTERNAL_ERROR;
use windows_sys::Win32::Networking::WinSock as ws;

/// The caller's socket (`nagless_socket_t` in C): a `SOCKET`, `uintptr_t`, on Windows.
pub type NaglessSocket = usize;

/// One buffer of `nagless_writev`: the header declares `struct iovec` on Windows, which
/// has none, with the layout it has on Unix.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct iovec {
    /// Start of the buffer.
    pub iov_base: *mut libc::c_void,
    /// Its length in bytes.
    pub iov_len: libc::size_t,
}

/// The OS's number for the caller's socket.
pub(crate) type RawSock = std::os::windows::io::RawSocket;

/// `recv` on the caller's socket.
pub(crate) fn read(s: RawSock, buf: &mut [u8]) -> std::io::Result<usize> {
    let len = buf.len().min(i32::MAX as usize);
    // SAFETY: `buf` is valid for `len` bytes of writes, all recv may write.
    let n = unsafe { ws::recv(s as ws::SOCKET, buf.as_mut_ptr(), len as i32, 0) };
    if n == ws::SOCKET_ERROR {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Whether `s` is an open socket: asks for its `SO_TYPE`.
pub(crate) fn is_open(s: NaglessSocket) -> bool {
    let mut value: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as i32;
    // SAFETY: `value` and `len` are valid for writes; an invalid or closed handle gives
    // WSAENOTSOCK, nothing else.
    let ret = unsafe {
        ws::getsockopt(
            s as ws::SOCKET,
            ws::SOL_SOCKET,
            ws::SO_TYPE,
            (&mut value as *mut i32).cast(),
            &mut len,
        )
    };
    ret == 0
}

pub(crate) const EAGAIN: i32 = ws::WSAEWOULDBLOCK;
pub(crate) const EBADF: i32 = ws::WSAENOTSOCK;
pub(crate) const EINVAL: i32 = ws::WSAEINVAL;
pub(crate) const EIO: i32 = ERROR_INTERNAL_ERROR as i32;
pub(crate) const ETIMEDOUT: i32 = ws::WSAETIMEDOUT;
