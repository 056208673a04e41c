//! Windows, through Winsock (`windows-sys`): `WSASend` with one `WSABUF` per slice as the one
//! gathered send, `TCP_NODELAY`, `ioctlsocket(FIONREAD)` for "input waiting", `WSAPoll` to
//! wait for room, `SIO_TCP_INFO` (Windows 10 1703 and later) for the segment size, else
//! `TCP_MAXSEG`.
//!
//! Winsock has no `MSG_MORE`, no `MSG_DONTWAIT`, no cork and no quick-ACK option:
//! - "more follows" between the calls of one flush is not passed on (a flush is one `WSASend`
//!   unless it has more than `MAX_IOV` slices or the socket takes it in parts);
//! - reading without waiting is `FIONREAD` then `recv` of what it counted.
//!
//! Errors are Winsock's own codes (`WSAGetLastError`), in `io::Error::raw_os_error`.

use std::io::{self, IoSlice};
use std::net::Shutdown;
use std::os::windows::io::{AsRawSocket, BorrowedSocket};
use std::time::Duration;

use windows_sys::Win32::Networking::WinSock as ws;

use super::unsupported;

/// The socket as Winsock's `SOCKET`.
fn raw(s: BorrowedSocket<'_>) -> ws::SOCKET {
    s.as_raw_socket() as ws::SOCKET
}

/// Converts a Winsock return value: `SOCKET_ERROR` (-1) means "see `WSAGetLastError`".
fn cvt(ret: i32) -> io::Result<usize> {
    if ret == ws::SOCKET_ERROR {
        // SAFETY: WSAGetLastError has no preconditions; it reads this thread's last error.
        Err(io::Error::from_raw_os_error(unsafe {
            ws::WSAGetLastError()
        }))
    } else {
        Ok(ret.max(0) as usize)
    }
}

/// One gathering send: `WSASend` with one `WSABUF` per slice (at most `MAX_IOV`), blocking or not
/// as the socket is. `more` has no Winsock counterpart and is ignored.
pub fn send_vectored(s: BorrowedSocket<'_>, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
    let _ = more;
    let count = bufs.len().min(crate::coalescer::MAX_IOV);
    let mut sent: u32 = 0;
    // SAFETY: IoSlice is guaranteed ABI-compatible with WSABUF on Windows, and WSASend only
    // reads the `count` buffers, borrowed from `bufs` for the call; `sent` is valid for
    // writes; no OVERLAPPED and no completion routine: the call completes before it returns.
    let ret = unsafe {
        ws::WSASend(
            raw(s),
            bufs.as_ptr().cast::<ws::WSABUF>(),
            count as u32,
            &mut sent,
            0,
            std::ptr::null_mut(),
            None,
        )
    };
    cvt(ret).map(|_| sent as usize)
}

fn setsockopt_int(s: BorrowedSocket<'_>, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its size is passed; the socket is borrowed.
    let ret = unsafe {
        ws::setsockopt(
            raw(s),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as i32,
        )
    };
    cvt(ret).map(drop)
}

fn getsockopt_int(s: BorrowedSocket<'_>, level: i32, name: i32) -> io::Result<i32> {
    let mut value: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as i32;
    // SAFETY: `value` and `len` are valid for writes and `len` holds value's size. Winsock may
    // write fewer bytes (a BOOL option as one byte): `value` starts at 0.
    let ret = unsafe {
        ws::getsockopt(
            raw(s),
            level,
            name,
            (&mut value as *mut i32).cast(),
            &mut len,
        )
    };
    cvt(ret).map(|_| value)
}

/// Sets or clears `TCP_NODELAY`.
pub fn set_nodelay(s: BorrowedSocket<'_>, on: bool) -> io::Result<()> {
    setsockopt_int(s, ws::IPPROTO_TCP, ws::TCP_NODELAY, on as i32)
}

/// Readies a socket for the library: sets `TCP_NODELAY` (a socket that is not TCP is left as
/// it is).
pub fn prepare(s: BorrowedSocket<'_>) -> io::Result<()> {
    match set_nodelay(s, true) {
        Err(e) if not_tcp(&e) => Ok(()),
        other => other,
    }
}

/// True for the errors of a descriptor that is not a TCP socket.
pub fn not_tcp(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(ws::WSAENOTSOCK | ws::WSAEOPNOTSUPP | ws::WSAENOPROTOOPT | ws::WSAEINVAL)
    )
}

/// True for the error of a socket call on a handle that is not a socket (`WSAENOTSOCK`).
pub fn is_not_socket(e: &io::Error) -> bool {
    e.raw_os_error() == Some(ws::WSAENOTSOCK)
}

/// Linux's `struct tcp_info` does not exist on Windows: `Unsupported`.
pub(crate) fn tcp_info_raw(_: BorrowedSocket<'_>, _: &mut [u8; 512]) -> io::Result<usize> {
    unsupported("Linux's TCP_INFO")
}

/// The connection's maximum segment size: `SIO_TCP_INFO` version 0's `Mss` where the system
/// has it (Windows 10 1703 and later), else `TCP_MAXSEG` (one or two calls).
pub(crate) fn segment_size(s: BorrowedSocket<'_>) -> io::Result<u32> {
    let version: u32 = 0;
    // SAFETY: TCP_INFO_v0 is plain data; all-zero is a valid value.
    let mut info: ws::TCP_INFO_v0 = unsafe { std::mem::zeroed() };
    let mut returned: u32 = 0;
    // SAFETY: the input buffer is `version` (4 bytes), the output buffer is `info` with its
    // size; both live across the call; no OVERLAPPED: the call completes before it returns.
    let ret = unsafe {
        ws::WSAIoctl(
            raw(s),
            ws::SIO_TCP_INFO,
            (&version as *const u32).cast(),
            std::mem::size_of::<u32>() as u32,
            (&mut info as *mut ws::TCP_INFO_v0).cast(),
            std::mem::size_of::<ws::TCP_INFO_v0>() as u32,
            &mut returned,
            std::ptr::null_mut(),
            None,
        )
    };
    match cvt(ret) {
        Ok(_) if info.Mss > 0 => Ok(info.Mss),
        _ => getsockopt_int(s, ws::IPPROTO_TCP, ws::TCP_MAXSEG).map(|v| v.max(0) as u32),
    }
}

/// `shutdown` on a socket.
pub fn shutdown(s: BorrowedSocket<'_>, how: Shutdown) -> io::Result<()> {
    let how = match how {
        Shutdown::Read => ws::SD_RECEIVE,
        Shutdown::Write => ws::SD_SEND,
        Shutdown::Both => ws::SD_BOTH,
    };
    // SAFETY: plain call on a borrowed, live socket.
    cvt(unsafe { ws::shutdown(raw(s), how) }).map(drop)
}

/// Bytes that can be read without waiting (`ioctlsocket(FIONREAD)`); `None` if the socket
/// cannot say.
pub fn readable_bytes(s: BorrowedSocket<'_>) -> Option<usize> {
    let mut n: u32 = 0;
    // SAFETY: FIONREAD writes one u32 through the pointer, which is valid for writes.
    let ret = unsafe { ws::ioctlsocket(raw(s), ws::FIONREAD, &mut n) };
    (ret == 0).then_some(n as usize)
}

/// Reads what is already buffered, never waits: `FIONREAD`, then `recv` of at most that many
/// bytes. `WouldBlock` when nothing is buffered (also at the end of input: the read that
/// follows then returns 0 at once).
pub fn recv_nowait(s: BorrowedSocket<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let mut n: u32 = 0;
    // SAFETY: as in `readable_bytes`.
    cvt(unsafe { ws::ioctlsocket(raw(s), ws::FIONREAD, &mut n) })?;
    if n == 0 {
        return Err(io::ErrorKind::WouldBlock.into());
    }
    let len = buf.len().min(n as usize).min(i32::MAX as usize);
    // SAFETY: `buf` is valid for `len` bytes of writes; the socket is borrowed for the call.
    // At least `len` bytes are buffered, so the call does not wait.
    cvt(unsafe { ws::recv(raw(s), buf.as_mut_ptr(), len as i32, 0) })
}

/// Waits until the socket can take more output (`WSAPoll` for `POLLWRNORM`), at most
/// `timeout` (`None`: no limit). Returns false on timeout.
pub fn wait_writable(s: BorrowedSocket<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    wait_for(s, ws::POLLWRNORM, timeout)
}

/// Waits until the socket has input (or its end) to read (`WSAPoll` for `POLLRDNORM`), at
/// most `timeout`. Returns false on timeout.
#[cfg_attr(not(feature = "tls"), allow(dead_code))] // the TLS layer's close waits with it
pub fn wait_readable(s: BorrowedSocket<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    wait_for(s, ws::POLLRDNORM, timeout)
}

fn wait_for(s: BorrowedSocket<'_>, events: i16, timeout: Option<Duration>) -> io::Result<bool> {
    let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32);
    let mut p = ws::WSAPOLLFD {
        fd: raw(s),
        events,
        revents: 0,
    };
    // SAFETY: `p` is one valid WSAPOLLFD for the duration of the call.
    let n = cvt(unsafe { ws::WSAPoll(&mut p, 1, ms) })?;
    Ok(n > 0)
}
