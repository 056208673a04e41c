//! The thin syscall layer: the only module of this crate with `unsafe` code.
//!
//! One helper turns `-1` + errno into `io::Error` (errno intact), one loop retries `EINTR`.
//! Linux-only options (`TCP_CORK`, `TCP_QUICKACK`, `TCP_INFO`, `MSG_MORE`) return
//! `ErrorKind::Unsupported` elsewhere, so the crate still compiles on other Unix systems.
#![allow(unsafe_code)]

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd};

/// Converts a C return value: negative means "see errno".
fn cvt(ret: libc::c_long) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Runs `f` until it fails with something other than `EINTR`.
fn retry_eintr(mut f: impl FnMut() -> libc::c_long) -> io::Result<usize> {
    loop {
        match cvt(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
const NOSIGNAL: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const NOSIGNAL: libc::c_int = 0;

#[cfg(any(target_os = "linux", target_os = "android"))]
const MORE: libc::c_int = libc::MSG_MORE;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const MORE: libc::c_int = 0;

/// One gathering send: `sendmsg` with `MSG_NOSIGNAL` (and `MSG_MORE` when `more`); a
/// descriptor that is not a socket falls back to `writev`. Retries `EINTR`.
pub fn send_vectored(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
    let iovcnt = bufs.len().min(1024);
    let flags = NOSIGNAL | if more { MORE } else { 0 };
    let res = retry_eintr(|| {
        // SAFETY: an all-zero msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        // IoSlice is guaranteed ABI-compatible with iovec on Unix; sendmsg only reads them.
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iovcnt as _;
        // SAFETY: fd is a live descriptor borrowed for this call; msg points at `iovcnt`
        // valid iovecs borrowed from `bufs` for the duration of the call.
        unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags) as libc::c_long }
    });
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

fn setsockopt_int(
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

fn getsockopt_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
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

/// Reads `TCP_NODELAY`.
pub fn nodelay(fd: BorrowedFd<'_>) -> io::Result<bool> {
    getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY).map(|v| v != 0)
}

/// Sets `TCP_MAXSEG` (before connect or listen, to emulate an Ethernet path on loopback).
pub fn set_maxseg(fd: BorrowedFd<'_>, mss: u32) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, mss as libc::c_int)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux {
    use super::*;

    /// Sets or clears `TCP_CORK`: partial segments are held until uncorked.
    pub fn set_cork(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
        setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, on as libc::c_int)
    }

    /// Sets `TCP_QUICKACK`. The kernel clears it again after the next prompt reply: re-arm
    /// it after every read to keep ACKs immediate.
    pub fn set_quickack(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
        setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, on as libc::c_int)
    }

    /// Sets `TCP_NOTSENT_LOWAT`: caps unsent bytes the kernel accepts.
    pub fn set_notsent_lowat(fd: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
        setsockopt_int(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            bytes.min(i32::MAX as u32) as libc::c_int,
        )
    }

    pub fn tcp_info_raw(fd: BorrowedFd<'_>, buf: &mut [u8; 512]) -> io::Result<usize> {
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: `buf` is valid for `len` bytes of writes; the kernel writes at most `len`
        // and stores the length it wrote back into `len`.
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
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod linux {
    use super::*;

    fn unsupported<T>() -> io::Result<T> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "Linux-only socket option",
        ))
    }
    pub fn set_cork(_: BorrowedFd<'_>, _: bool) -> io::Result<()> {
        unsupported()
    }
    pub fn set_quickack(_: BorrowedFd<'_>, _: bool) -> io::Result<()> {
        unsupported()
    }
    pub fn set_notsent_lowat(_: BorrowedFd<'_>, _: u32) -> io::Result<()> {
        unsupported()
    }
    pub fn tcp_info_raw(_: BorrowedFd<'_>, _: &mut [u8; 512]) -> io::Result<usize> {
        unsupported()
    }
}

pub use linux::{set_cork, set_notsent_lowat, set_quickack};

/// Reads the raw `struct tcp_info` into `buf`; returns the length the kernel filled.
pub(crate) use linux::tcp_info_raw;

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
    let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as libc::c_int);
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    let n = retry_eintr(|| unsafe { libc::poll(&mut p, 1, ms) as libc::c_long })?;
    Ok(n > 0)
}

/// A cheap cycle counter that never runs slower than one tick per nanosecond, for the stream's
/// "has a deadline possibly passed?" test: x86-64's invariant TSC (~7 ns to read, against
/// ~20 ns for the system clock), when CPUID says the TSC is invariant (it runs at a constant
/// rate in every power state); `None` where no such counter is known. The CPUID answer is
/// asked once per process; the caller keeps reading the counter with [`ticks_now`].
pub fn fast_ticks() -> Option<u64> {
    static INVARIANT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *INVARIANT.get_or_init(invariant_tsc) {
        ticks_now()
    } else {
        None
    }
}

/// Whether CPUID reports an invariant TSC (leaf 0x8000_0007, EDX bit 8).
fn invariant_tsc() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86-64 processor and has no preconditions (the
        // intrinsic is an `unsafe fn` before Rust 1.94, safe after). Leaf 0x8000_0000 gives
        // the highest extended leaf; 0x8000_0007 is asked only when it is within that range.
        #[allow(unused_unsafe)]
        unsafe {
            __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The counter of [`fast_ticks`] read again, for a caller that already got `Some` from it.
#[inline]
pub fn ticks_now() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86-64; it only reads the time-stamp counter.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}
