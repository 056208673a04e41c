//! What every Unix shares (Linux, macOS, the BSDs): descriptors, `sendmsg`/`writev`,
//! `poll`, `FIONREAD`, `MSG_DONTWAIT`. One helper turns `-1` + errno into `io::Error` (errno
//! intact), one loop retries `EINTR`. The OS-specific options live in `linux.rs` and `bsd.rs`.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd};

/// Converts a C return value: negative means "see errno".
pub(super) fn cvt(ret: libc::c_long) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Runs `f` until it fails with something other than `EINTR`.
pub(super) fn retry_eintr(mut f: impl FnMut() -> libc::c_long) -> io::Result<usize> {
    loop {
        match cvt(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// No `SIGPIPE` on a closed peer: `MSG_NOSIGNAL` on Linux and FreeBSD; macOS and the other
/// BSDs use the socket option `SO_NOSIGPIPE` instead (set by [`prepare`]).
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
const NOSIGNAL: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
const NOSIGNAL: libc::c_int = 0;

/// `MSG_MORE` exists on Linux only; elsewhere "more follows" is not passed to the kernel.
#[cfg(any(target_os = "linux", target_os = "android"))]
const MORE: libc::c_int = libc::MSG_MORE;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const MORE: libc::c_int = 0;

/// One gathering send: `send` for one slice, else `sendmsg`, with `MSG_NOSIGNAL` (and, on
/// Linux, `MSG_MORE` when `more`);
/// a descriptor that is not a socket falls back to `writev`. At most
/// [`MAX_IOV`](crate::coalescer::MAX_IOV) slices per call. Retries `EINTR`.
pub fn send_vectored(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
    let iovcnt = bufs.len().min(crate::coalescer::MAX_IOV);
    let flags = NOSIGNAL | if more { MORE } else { 0 };
    let res = if let [one] = bufs {
        // One slice (the common flush): `send`, which spares the kernel the message header.
        retry_eintr(|| {
            // SAFETY: fd is a live descriptor borrowed for this call; `one` is valid for
            // reads of its length for the duration of the call.
            unsafe { libc::send(fd.as_raw_fd(), one.as_ptr().cast(), one.len(), flags) as _ }
        })
    } else {
        retry_eintr(|| {
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            // IoSlice is guaranteed ABI-compatible with iovec on Unix; sendmsg only reads them.
            msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = iovcnt as _;
            // SAFETY: fd is a live descriptor borrowed for this call; msg points at `iovcnt`
            // valid iovecs borrowed from `bufs` for the duration of the call.
            unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags) as libc::c_long }
        })
    };
    match res {
        Err(e) if e.raw_os_error() == Some(libc::ENOTSOCK) => retry_eintr(|| {
            // SAFETY: as above; writev reads `iovcnt` iovecs from `bufs`.
            unsafe {
                libc::writev(
                    fd.as_raw_fd(),
                    bufs.as_ptr() as *const libc::iovec,
                    iovcnt as _,
                ) as libc::c_long
            }
        }),
        other => other,
    }
}

pub(super) fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its size is passed; fd is borrowed.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(ret as libc::c_long).map(drop)
}

pub(super) fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for writes and `len` holds value's size.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    cvt(ret as libc::c_long).map(|_| value)
}

/// Sets or clears `TCP_NODELAY`. Setting it also pushes anything the kernel holds (a
/// one-syscall flush of corked or `MSG_MORE` data).
pub fn set_nodelay(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, on as libc::c_int)
}

/// Reads `TCP_MAXSEG`: the connection's maximum segment size.
#[allow(dead_code)] // Linux reads the send MSS from TCP_INFO instead
pub(crate) fn maxseg(fd: BorrowedFd<'_>) -> io::Result<u32> {
    getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG).map(|v| v.max(0) as u32)
}

/// Readies a socket for the library: sets `TCP_NODELAY` on TCP sockets (other descriptors,
/// such as pipes and UNIX sockets, are fine as they are) and, on macOS and the BSDs other than
/// FreeBSD, `SO_NOSIGPIPE` (their `sendmsg` has no `MSG_NOSIGNAL`).
pub fn prepare(fd: BorrowedFd<'_>) -> io::Result<()> {
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    match setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_NOSIGPIPE, 1) {
        Err(e) if !not_tcp(&e) => return Err(e),
        _ => {}
    }
    match set_nodelay(fd, true) {
        Err(e) if not_tcp(&e) => Ok(()),
        other => other,
    }
}

/// True for the errors of a descriptor that is not a TCP socket.
pub fn not_tcp(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTSOCK | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
    )
}

/// True for the error of a socket call on a descriptor that is not a socket (`ENOTSOCK`).
pub fn is_not_socket(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOTSOCK)
}

/// `shutdown(2)` on a socket descriptor.
pub fn shutdown(fd: BorrowedFd<'_>, how: std::net::Shutdown) -> io::Result<()> {
    let how = match how {
        std::net::Shutdown::Read => libc::SHUT_RD,
        std::net::Shutdown::Write => libc::SHUT_WR,
        std::net::Shutdown::Both => libc::SHUT_RDWR,
    };
    // SAFETY: plain syscall on a borrowed, live descriptor.
    let ret = unsafe { libc::shutdown(fd.as_raw_fd(), how) };
    cvt(ret as libc::c_long).map(drop)
}

/// Bytes that can be read without waiting (`FIONREAD`); `None` if the descriptor cannot say.
pub fn readable_bytes(fd: BorrowedFd<'_>) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which is valid for writes.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n as *mut libc::c_int) };
    (ret == 0 && n >= 0).then_some(n as usize)
}

/// `recv` with `MSG_DONTWAIT`: reads what is already buffered, never waits. `WouldBlock` when
/// nothing is; `ENOTSOCK` on descriptors that are not sockets. Retries `EINTR`.
pub fn recv_nowait(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    retry_eintr(|| {
        // SAFETY: `buf` is valid for `buf.len()` bytes of writes; fd is borrowed for the call.
        unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            ) as libc::c_long
        }
    })
}

/// Waits until `fd` can take more output (`poll` for `POLLOUT`), at most `timeout` (`None`:
/// no limit). Returns false on timeout. Retries `EINTR`.
pub fn wait_writable(fd: BorrowedFd<'_>, timeout: Option<std::time::Duration>) -> io::Result<bool> {
    wait_for(fd, libc::POLLOUT, timeout)
}

/// Waits until `fd` has input (or its end) to read (`poll` for `POLLIN`), at most `timeout`.
/// Returns false on timeout. Retries `EINTR`.
#[cfg_attr(not(feature = "tls"), allow(dead_code))] // the TLS layer's close waits with it
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<std::time::Duration>) -> io::Result<bool> {
    wait_for(fd, libc::POLLIN, timeout)
}

fn wait_for(
    fd: BorrowedFd<'_>,
    events: libc::c_short,
    timeout: Option<std::time::Duration>,
) -> io::Result<bool> {
    let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as libc::c_int);
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    let n = retry_eintr(|| unsafe { libc::poll(&mut p, 1, ms) as libc::c_long })?;
    Ok(n > 0)
}
