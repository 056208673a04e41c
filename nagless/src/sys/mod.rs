//! The thin syscall layer: the only module of this crate with `unsafe` code, one file per OS
//! family under one set of functions.
//!
//! | file | OSes | gathered send | "more follows" | segment size | input waiting |
//! |---|---|---|---|---|---|
//! | `unix.rs` + `linux.rs` | Linux, Android | `sendmsg` (`writev` for non-sockets) | `MSG_MORE` | `TCP_INFO` `tcpi_snd_mss` | `recv(MSG_DONTWAIT)`, `FIONREAD` |
//! | `unix.rs` + `bsd.rs` | macOS, iOS, FreeBSD and the other BSDs | `sendmsg` (`writev`) | none | `TCP_MAXSEG` | `recv(MSG_DONTWAIT)`, `FIONREAD` |
//! | `windows.rs` | Windows | `WSASend` with one `WSABUF` per slice | none | `SIO_TCP_INFO` `Mss`, else `TCP_MAXSEG` | `ioctlsocket(FIONREAD)` |
//!
//! Every OS sets `TCP_NODELAY` the same way. Linux and Android also tell the send queue's
//! state (`SIOCOUTQ`: bytes not yet acknowledged; `SIOCOUTQNSD`: not yet sent), which
//! [`FlushPolicy::clocked`](crate::FlushPolicy::clocked) needs.
//!
//! Sockets are named by [`Sock`] (`BorrowedFd` on Unix, `BorrowedSocket` on Windows), and the
//! library's types accept anything [`AsOsSocket`]: every `AsFd` type on Unix, every `AsSocket`
//! type on Windows.
#![allow(unsafe_code)]

use std::io;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use linux::{segment_size, tcp_info_raw, unacknowledged, unsent};

#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
mod bsd;
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
pub(crate) use bsd::{segment_size, tcp_info_raw};

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

/// A socket borrowed for one call: `BorrowedFd` on Unix.
///
/// ```
/// use nagless::{AsOsSocket, Sock};
///
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let sock: Sock<'_> = listener.as_os_socket(); // borrowed, not owned: nothing is closed
/// # let _ = sock;
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(unix)]
pub type Sock<'a> = std::os::fd::BorrowedFd<'a>;
/// A socket borrowed for one call: `BorrowedSocket` on Windows.
///
/// ```
/// use nagless::{AsOsSocket, Sock};
///
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let sock: Sock<'_> = listener.as_os_socket(); // borrowed, not owned: nothing is closed
/// # let _ = sock;
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(windows)]
pub type Sock<'a> = std::os::windows::io::BorrowedSocket<'a>;

/// The OS's number for a socket: `RawFd` on Unix.
#[cfg(unix)]
pub type RawSock = std::os::fd::RawFd;
/// The OS's number for a socket: `RawSocket` on Windows.
#[cfg(windows)]
pub type RawSock = std::os::windows::io::RawSocket;

/// Anything that holds an OS socket: implemented for every `AsFd` type on Unix and every
/// `AsSocket` type on Windows (`TcpStream`, `&TcpStream`, tokio's `TcpStream`, ...), so
/// [`NaglessStream`](crate::NaglessStream) takes the same types on every OS.
///
/// ```
/// use nagless::{AsOsSocket, NaglessStream};
///
/// // Generic over the socket type, as NaglessStream is: TcpStream, &TcpStream, UnixStream...
/// fn coalesced<S: AsOsSocket>(socket: S) -> std::io::Result<NaglessStream<S>> {
///     NaglessStream::new(socket)
/// }
/// # let _ = coalesced::<std::net::TcpStream>;
/// ```
pub trait AsOsSocket {
    /// Borrows the socket.
    fn as_os_socket(&self) -> Sock<'_>;
}

#[cfg(unix)]
impl<T: std::os::fd::AsFd + ?Sized> AsOsSocket for T {
    fn as_os_socket(&self) -> Sock<'_> {
        self.as_fd()
    }
}

#[cfg(windows)]
impl<T: std::os::windows::io::AsSocket + ?Sized> AsOsSocket for T {
    fn as_os_socket(&self) -> Sock<'_> {
        self.as_socket()
    }
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

/// The error of an option or system this OS does not have.
#[allow(dead_code)] // not every OS has something unsupported
pub(crate) fn unsupported<T>(what: &str) -> io::Result<T> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{what} is not available on this OS"),
    ))
}
