//! Reads: the socket's burst ends before a read, a receive (fortified forms included) or a
//! shutdown of it; while a read of it lasts, other threads' writes to it are clocked as Nagle
//! clocks them ([`Shim::read_begins`](nagless_shim_policy::Shim::read_begins)). TCP sockets
//! a `recvmsg` receives from another process (`SCM_RIGHTS`) are adopted.

use super::*;

forward!(
    /// `read(2)`.
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
        hooks::read_begins(fd)
    } => after(|reading, r| hooks::read_ends(fd, reading, r > 0))
);
forward!(
    /// `readv(2)`.
    fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
        hooks::read_begins(fd)
    } => after(|reading, r| hooks::read_ends(fd, reading, r > 0))
);
forward!(
    /// `recv(2)`.
    fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
        hooks::read_begins(fd)
    } => after(|reading, r| hooks::read_ends(fd, reading, r > 0))
);
forward!(
    /// `recvfrom(2)`.
    fn recvfrom(
        fd: c_int,
        buf: *mut c_void,
        n: size_t,
        flags: c_int,
        addr: *mut sockaddr,
        len: *mut socklen_t,
    ) -> ssize_t {
        hooks::read_begins(fd)
    } => after(|reading, r| hooks::read_ends(fd, reading, r > 0))
);
with_time64_twin!(
    /// `recvmsg(2)`.
    fn recvmsg / __recvmsg64(fd: c_int, msg: *mut Msghdr, flags: c_int) -> ssize_t {
        hooks::read_begins(fd)
    } => after(|reading, r| {
        hooks::read_ends(fd, reading, r > 0);
        if r >= 0 {
            // SAFETY: the call succeeded: the kernel filled `msg` (whose layout is the same
            // in both time forms), and with it any descriptors passed.
            unsafe {
                crate::sys::passed_descriptors(msg.cast(), |passed| {
                    hooks::adopt_passed(passed, &[]);
                })
            }
        }
    })
);

// Fortified reads (_FORTIFY_SOURCE builds call these instead of read/recv/recvfrom/poll).
forward!(
    /// `__read_chk`.
    fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t {
        hooks::read_begins(fd)
    } => after(|reading, r| hooks::read_ends(fd, reading, r > 0))
);
forward!(
    /// `__recv_chk`.
    fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t {
        hooks::read_begins(fd)
    } => after(|reading, r| hooks::read_ends(fd, reading, r > 0))
);
forward!(
    /// `__recvfrom_chk`.
    fn __recvfrom_chk(
        fd: c_int,
        buf: *mut c_void,
        n: size_t,
        buflen: size_t,
        flags: c_int,
        addr: *mut sockaddr,
        len: *mut socklen_t,
    ) -> ssize_t {
        hooks::read_begins(fd)
    } => after(|reading, r| hooks::read_ends(fd, reading, r > 0))
);
with_time64_twin!(
    /// `recvmmsg(2)`.
    fn recvmmsg / __recvmmsg64(
        fd: c_int,
        msgs: *mut Mmsghdr,
        n: c_uint,
        flags: c_int,
        timeout: *mut Timespec,
    ) -> c_int {
        hooks::read_begins(fd)
    } => after(|reading, r| hooks::read_ends(fd, reading, r > 0))
);

forward!(
    /// `shutdown(2)`: the socket's burst ends, as at a read.
    fn shutdown(fd: c_int, how: c_int) -> c_int {
        hooks::release_socket(fd)
    }
);
