//! # nagless C API
//!
//! `nagless.h`, `libnagless.so` and `libnagless.a`: the library's std stream
//! ([`nagless::NaglessStream`]) behind an opaque handle over a socket descriptor the caller
//! owns, in C's conventions. The reference for C programmers is `capi/README.md`; the header
//! is generated from this file by cbindgen.
//!
//! Conventions of every function: failure is `-1` (or `NULL`) with `errno` set (on Windows:
//! the thread's last error, `WSAGetLastError()`, with Winsock's codes); a `NULL` handle gives
//! `EINVAL` (`WSAEINVAL`); no Rust panic crosses the boundary (one would give `EIO`;
//! `ERROR_INTERNAL_ERROR` on Windows). `nagless.h` is the same file on every OS: the socket
//! is a `nagless_socket_t`, an `int` descriptor on Unix and a `SOCKET` on Windows. A handle
//! must not be used by two threads at once (wrap it in your own lock if you share it); distinct
//! handles are independent. None of these functions is async-signal-safe.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![allow(clippy::missing_safety_doc)] // each function's contract is in its C documentation

use std::io::{self, IoSlice, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use libc::{c_int, c_void, size_t, ssize_t};
use nagless::{AsOsSocket, FlushPolicy, NaglessStream, Sock, Urgency};

mod convert;
mod os;

use convert::{policy_from_c, policy_to_c, stats_to_c};
pub use os::{iovec, NaglessSocket};
use os::{EAGAIN, EBADF, EINVAL, EIO, ETIMEDOUT};

/// Let the policy decide.
pub const NAGLESS_NORMAL: c_int = 0;
/// Send this and everything before it now (a keepalive, an error notice, the last reply).
pub const NAGLESS_SEND_NOW: c_int = 1;
/// More follows: pack this with the next write.
pub const NAGLESS_MORE_FOLLOWS: c_int = 2;

/// When pending bytes leave. Fill it with `nagless_policy_default`, then change fields.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NaglessPolicy {
    /// 1: send pending bytes when the program is about to wait for input (`nagless_read`
    /// that would block, `nagless_before_wait`). 0: off. Default 1.
    pub before_read: c_int,
    /// Send whole segments once this many bytes are pending; 0: off. Default 65536.
    pub threshold: size_t,
    /// No byte waits longer than this many microseconds (checked at every call, and by an
    /// event loop through `nagless_timeout_ms`); -1: off; 0: every write leaves at once.
    /// Default 500.
    pub linger_us: i64,
    /// Beyond this many pending bytes, writes flush first and a full non-blocking socket
    /// gives `EAGAIN`. At least 1. Default 4194304.
    pub high_water: size_t,
    /// 1: `MSG_MORE` between the syscalls of one flush. Default 1.
    pub msg_more: c_int,
    /// 1: `nagless_flush` sends at once. 0: it is a hint (before-read, the threshold and the
    /// linger bound decide). Default 1.
    pub explicit_flush: c_int,
    /// 1: every write is handed to the kernel at once and **clocked as Nagle clocks it**
    /// (the library's `FlushPolicy::clocked`), for a connection several threads write
    /// requests to (each under a lock) while another reads the answers: a write leaves at
    /// once when nothing is unacknowledged, and is held by the kernel (`MSG_MORE`) for the
    /// next ACK otherwise, then sent with everything held since in one segment. Nothing waits
    /// in the handle, so no linger bound applies: needs `linger_us` 0. Linux and Android;
    /// elsewhere every write leaves at once. 0: off. Default 0.
    pub clocked: c_int,
}

/// Counters of one handle (`nagless_get_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NaglessStats {
    /// Writes accepted.
    pub writes: u64,
    /// Bytes accepted.
    pub bytes_written: u64,
    /// Flushes that sent at least one byte.
    pub flushes: u64,
    /// Syscalls made: sends, input checks and TCP_INFO queries.
    pub syscalls: u64,
    /// Sends that met a full socket (`EAGAIN`).
    pub would_block: u64,
    /// Bytes the socket took.
    pub bytes_sent: u64,
    /// Bytes accepted and not yet sent.
    pub pending: u64,
    /// Queries of the kernel's send queue under the clocked policy (`SIOCOUTQ`,
    /// `SIOCOUTQNSD`): how often a hand-over was clocked.
    pub clock_checks: u64,
    /// Clocked sends the kernel was asked to hold for the next ACK.
    pub held_for_ack: u64,
    /// Pushes of bytes the kernel held with nothing left in flight to bring an ACK.
    pub pushes: u64,
}

/// A socket the caller owns: borrowed for every call, never closed here.
struct CallerFd(os::RawSock);

impl AsOsSocket for CallerFd {
    fn as_os_socket(&self) -> Sock<'_> {
        // SAFETY: the caller keeps the socket open for the handle's life (nagless_new's
        // contract); it is only used for the duration of each call.
        unsafe { Sock::borrow_raw(self.0) }
    }
}

impl Read for CallerFd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        os::read(self.0, buf)
    }
}

/// The opaque handle (`nagless *` in C).
pub struct Nagless {
    stream: NaglessStream<CallerFd>,
}

/// Sets `errno` (on Windows, the thread's last error, which `WSAGetLastError` reads).
fn set_errno(e: c_int) {
    errno::set_errno(errno::Errno(e));
}

/// The errno for an error: the OS's own, or the closest one for the library's errors.
fn errno_of(e: &io::Error) -> c_int {
    e.raw_os_error().unwrap_or(match e.kind() {
        io::ErrorKind::WouldBlock => EAGAIN,
        io::ErrorKind::InvalidInput => EINVAL,
        io::ErrorKind::TimedOut => ETIMEDOUT,
        _ => EIO,
    })
}

/// Runs `f`; a panic becomes `failed` with `errno` = `EIO`.
fn guard<T>(failed: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(EIO);
        failed
    })
}

/// `-1` with errno, or the value.
fn ret_int(r: io::Result<c_int>) -> c_int {
    r.unwrap_or_else(|e| {
        set_errno(errno_of(&e));
        -1
    })
}

fn ret_size(r: io::Result<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(errno_of(&e));
            -1
        }
    }
}

fn einval<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(EINVAL))
}

/// The handle behind `h`, or `EINVAL`.
///
/// # Safety
/// `h` is NULL or a handle from `nagless_new` not yet freed, used by one thread at a time.
unsafe fn handle<'a>(h: *mut Nagless) -> io::Result<&'a mut Nagless> {
    // SAFETY: per this function's contract.
    unsafe { h.as_mut() }.map_or_else(einval, Ok)
}

/// Reads `len` bytes at `buf`, or `EINVAL` for a NULL pointer with a non-zero length.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes of reads.
unsafe fn bytes<'a>(buf: *const c_void, len: size_t) -> io::Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return einval();
    }
    // SAFETY: per this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast(), len) })
}

/// Fills `*policy` with the defaults (before-read on, threshold 64 KiB, linger 500 µs,
/// high-water 4 MiB, MSG_MORE on, explicit flush on). Does nothing if `policy` is NULL.
/// Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn nagless_policy_default(policy: *mut NaglessPolicy) {
    let p = policy_to_c(&FlushPolicy::default());
    // SAFETY: `policy` is NULL or points to a writable nagless_policy (the caller's contract).
    if let Some(out) = unsafe { policy.as_mut() } {
        *out = p;
    }
}

/// Wraps the connected socket `fd` (which the caller keeps open, and closes, itself) with
/// `policy` (NULL: the defaults); sets `TCP_NODELAY` on TCP sockets. Returns NULL with errno:
/// `EBADF` (not an open descriptor; `WSAENOTSOCK` on Windows, for anything but an open
/// socket), `EINVAL` (a policy field out of range), or the error of `setsockopt`.
/// Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn nagless_new(
    fd: NaglessSocket,
    policy: *const NaglessPolicy,
) -> *mut Nagless {
    guard(std::ptr::null_mut(), || {
        let made = (|| {
            if !os::is_open(fd) {
                return Err(io::Error::from_raw_os_error(EBADF));
            }
            // SAFETY: `policy` is NULL or points to a readable nagless_policy.
            let policy = match unsafe { policy.as_ref() } {
                None => FlushPolicy::default(),
                Some(p) => policy_from_c(p)?,
            };
            let stream = NaglessStream::with_policy(CallerFd(fd as os::RawSock), policy)?;
            Ok(Box::into_raw(Box::new(Nagless { stream })))
        })();
        made.unwrap_or_else(|e| {
            set_errno(errno_of(&e));
            std::ptr::null_mut()
        })
    })
}

/// Frees the handle: first hands the socket what it takes without waiting for space (on a
/// blocking descriptor the send blocks as `write(2)` would). Returns
/// how many accepted bytes it could not send and so discarded (0: none were lost; call
/// `nagless_flush_wait` first to make sure), or -1 with errno if that last send failed (the
/// bytes are discarded too). The descriptor stays open. `NULL` is a no-op returning 0.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_free(h: *mut Nagless) -> ssize_t {
    if h.is_null() {
        return 0;
    }
    guard(-1, || {
        // SAFETY: `h` came from nagless_new (Box::into_raw) and is freed once, here.
        let n = unsafe { Box::from_raw(h) };
        match n.stream.into_inner() {
            Ok(_caller_fd) => 0,
            Err(e) => {
                let (error, stream) = e.into_parts();
                // Taking the parts sends nothing more: what is left is dropped, as reported.
                let left = stream.into_parts().1.len();
                if error.kind() == io::ErrorKind::WouldBlock {
                    left as ssize_t
                } else {
                    set_errno(errno_of(&error));
                    -1
                }
            }
        }
    })
}

/// Queues `len` bytes (at most the room below the high-water mark: a short count, as
/// `write(2)` may give); sends what the policy makes due. Returns the bytes accepted, or -1:
/// `EAGAIN` when a non-blocking socket is full and nothing fits (wait for `POLLOUT`, call
/// `nagless_on_writable`, retry), an earlier send's error, `EINVAL`.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_write(
    h: *mut Nagless,
    buf: *const c_void,
    len: size_t,
) -> ssize_t {
    // SAFETY: as `nagless_write_urgent`, with the same arguments.
    unsafe { nagless_write_urgent(h, buf, len, NAGLESS_NORMAL) }
}

/// `nagless_write` with an urgency: `NAGLESS_NORMAL`, `NAGLESS_SEND_NOW` (this and
/// everything before it leave now) or `NAGLESS_MORE_FOLLOWS` (pack with the next write).
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_write_urgent(
    h: *mut Nagless,
    buf: *const c_void,
    len: size_t,
    urgency: c_int,
) -> ssize_t {
    guard(-1, || {
        ret_size((|| {
            // SAFETY: the caller's contract: a live handle and `len` readable bytes.
            let (n, data) = unsafe { (handle(h)?, bytes(buf, len)?) };
            let urgency = match urgency {
                NAGLESS_NORMAL => Urgency::Normal,
                NAGLESS_SEND_NOW => Urgency::SendNow,
                NAGLESS_MORE_FOLLOWS => Urgency::MoreFollows,
                _ => return einval(),
            };
            n.stream.write_with(data, urgency)
        })())
    })
}

/// Queues the `iovcnt` buffers as one message (as many bytes as fit below the high-water
/// mark). Returns and fails as `nagless_write`.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_writev(
    h: *mut Nagless,
    iov: *const iovec,
    iovcnt: c_int,
) -> ssize_t {
    guard(-1, || {
        ret_size((|| {
            // SAFETY: the caller's contract: a live handle.
            let n = unsafe { handle(h)? };
            if iovcnt < 0 || (iovcnt > 0 && iov.is_null()) {
                return einval();
            }
            if iovcnt == 0 {
                return Ok(0);
            }
            // SAFETY: `iov` points to `iovcnt` iovecs, each valid for its length.
            let iovs = unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) };
            let mut slices = Vec::with_capacity(iovs.len());
            for v in iovs {
                // SAFETY: as above.
                slices.push(IoSlice::new(unsafe { bytes(v.iov_base, v.iov_len)? }));
            }
            n.stream.write_vectored(&slices)
        })())
    })
}

/// Sends everything pending. 0, or -1: `EAGAIN` when a non-blocking socket could not take it
/// all (the rest stays queued: wait for `POLLOUT` and call `nagless_on_writable`), or the
/// send's error.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_flush(h: *mut Nagless) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract: a live handle.
        ret_int(unsafe { handle(h) }.and_then(|n| n.stream.flush().map(|()| 0)))
    })
}

/// Sends everything pending, waiting for a full socket to take it, for at most `timeout_ms`
/// milliseconds (-1: no limit): the way to finish before `nagless_free` and `close(2)`.
/// 0, or -1: `ETIMEDOUT` (bytes remain queued), the send's error.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_flush_wait(h: *mut Nagless, timeout_ms: c_int) -> c_int {
    guard(-1, || {
        ret_int((|| {
            // SAFETY: the caller's contract: a live handle.
            let n = unsafe { handle(h)? };
            let limit = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
            // Everything, even where `nagless_flush` is only a hint (explicit_flush = 0).
            n.stream.flush_wait(limit).map(|()| 0)
        })())
    })
}

/// The program is about to wait for input elsewhere (`poll`, `epoll_wait`): sends what
/// before-read sends. 0, or -1 as `nagless_flush`.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_before_wait(h: *mut Nagless) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract: a live handle.
        ret_int(unsafe { handle(h) }.and_then(|n| n.stream.before_wait().map(|()| 0)))
    })
}

/// `read(2)` on the socket; if it would wait, pending bytes are sent first (before-read).
/// Input already buffered is read without flushing. A send error met here is kept for the
/// next write or flush; the input comes first. Returns bytes read (0 at end of input) or -1.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_read(h: *mut Nagless, buf: *mut c_void, len: size_t) -> ssize_t {
    guard(-1, || {
        ret_size((|| {
            // SAFETY: the caller's contract: a live handle.
            let n = unsafe { handle(h)? };
            if len == 0 {
                return Ok(0);
            }
            if buf.is_null() {
                return einval();
            }
            // SAFETY: `buf` is valid for `len` bytes of writes.
            let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
            n.stream.read(out)
        })())
    })
}

/// Milliseconds until the linger deadline of pending bytes (rounded up), for the timeout of
/// `poll`/`epoll_wait`: -1 when nothing waits on a deadline, 0 when it has passed (call
/// `nagless_poll_deadline`). -1 with errno `EINVAL` for a NULL handle.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_timeout_ms(h: *const Nagless) -> c_int {
    guard(-1, || {
        // SAFETY: `h` is NULL or a live handle.
        let Some(n) = (unsafe { h.as_ref() }) else {
            set_errno(EINVAL);
            return -1;
        };
        #[allow(clippy::disallowed_methods)] // the C layer reads the real clock
        let now = std::time::Instant::now();
        n.stream.next_deadline().map_or(-1, |d| {
            let us = d.saturating_duration_since(now).as_micros();
            us.div_ceil(1000).min(c_int::MAX as u128) as c_int
        })
    })
}

/// Sends what has come due by the linger deadline (call when the timeout from
/// `nagless_timeout_ms` expires). 0, or -1 as `nagless_flush`.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_poll_deadline(h: *mut Nagless) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract: a live handle.
        ret_int(unsafe { handle(h) }.and_then(|n| n.stream.poll_deadline().map(|()| 0)))
    })
}

/// The socket became writable: continues a send that met `EAGAIN`. 1 when nothing due is
/// left (stop waiting for `POLLOUT`), 0 when the socket filled again, -1 on error.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_on_writable(h: *mut Nagless) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's contract: a live handle.
        ret_int(unsafe { handle(h) }.and_then(|n| n.stream.on_writable().map(c_int::from)))
    })
}

/// 1 when bytes are due but the socket was full (wait for `POLLOUT`, then call
/// `nagless_on_writable`), 0 otherwise, -1 (`EINVAL`) for a NULL handle.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_wants_writable(h: *const Nagless) -> c_int {
    // SAFETY: `h` is NULL or a live handle.
    match unsafe { h.as_ref() } {
        Some(n) => c_int::from(n.stream.waiting_for_socket()),
        None => {
            set_errno(EINVAL);
            -1
        }
    }
}

/// Bytes accepted and not yet sent (0 for a NULL handle).
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_pending(h: *const Nagless) -> size_t {
    // SAFETY: `h` is NULL or a live handle.
    unsafe { h.as_ref() }.map_or(0, |n| n.stream.pending())
}

/// Copies the handle's counters into `*out`. 0, or -1 (`EINVAL`) for NULL arguments.
/// Not thread-safe: one thread at a time per handle.
#[no_mangle]
pub unsafe extern "C" fn nagless_get_stats(h: *const Nagless, out: *mut NaglessStats) -> c_int {
    // SAFETY: `h` is NULL or a live handle; `out` is NULL or writable.
    let (Some(n), Some(out)) = (unsafe { h.as_ref() }, unsafe { out.as_mut() }) else {
        set_errno(EINVAL);
        return -1;
    };
    *out = stats_to_c(n.stream.stats(), n.stream.pending());
    0
}

/// The library's version, e.g. "0.1.0" (a static string). Thread-safe.
#[no_mangle]
pub extern "C" fn nagless_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    #[test]
    fn header_is_current() {
        let generated = std::fs::read_to_string(concat!(env!("OUT_DIR"), "/nagless.h")).unwrap();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/include/nagless.h");
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        if std::env::var_os("NAGLESS_BLESS").is_some() {
            std::fs::write(path, &generated).unwrap();
            return;
        }
        assert!(
            generated == checked_in,
            "capi/include/nagless.h differs from the code: run NAGLESS_BLESS=1 cargo test -p nagless-capi header_is_current"
        );
    }
}
