//! The interposed libc functions. Each hook finds the next definition of its symbol with
//! `dlsym(RTLD_NEXT)`, tells the burst policy what the program is doing (through `hooks` and
//! `waits`, which save and restore `errno`), calls the real function, and returns what it
//! returned. Nothing here panics: a missing real symbol reads as `ENOSYS`.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)] // the hooks' contracts are libc's own

use libc::{c_int, c_long, c_uint, c_void, size_t, sockaddr, socklen_t, ssize_t};

use crate::hooks;
use crate::sys::{self, next, set_errno};
use crate::waits::{self, Wait};

fn enosys<T: From<i8>>() -> T {
    set_errno(libc::ENOSYS);
    T::from(-1)
}

// ---- the hook macro ---------------------------------------------------------------------

/// Defines a hook: it finds the real `$name` (a missing one reads as `ENOSYS`), tells the
/// policy what the program does, and makes the call with the caller's arguments unchanged;
/// the C signature is spelled out at each use. The forms:
/// - `fn f(..) -> R { before }`: runs `before`, then the call;
/// - `fn f(..) -> R { before } => after(|r| after)`: then runs `after` with the call's
///   result `r`, and returns `r`;
/// - `fn f(..) -> R { before } => writing(fd, flags)`: the call is a write of `fd` (see
///   [`writing`]);
/// - `fn f(..) -> R => waits(kind, never, [sets(n, r, w, e),] probe(args))`: the call is a wait
///   (see [`waits::waiting`]), probed with `args`.
macro_rules! forward {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty { $before:expr }) => {
        forward!(@hook $(#[$doc])* fn $name($($arg: $ty),*) -> $ret; |call| {
            $before;
            call()
        });
    };
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty { $($before:expr)? }
        => after(|$r:ident| $after:expr)) => {
        forward!(@hook $(#[$doc])* fn $name($($arg: $ty),*) -> $ret; |call| {
            $($before;)?
            let $r = call();
            $after;
            $r
        });
    };
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty { $($before:expr)? }
        => writing($fd:expr, $flags:expr)) => {
        forward!(@hook $(#[$doc])* fn $name($($arg: $ty),*) -> $ret; |call| {
            $($before;)?
            // These calls cannot carry the shim's MSG_MORE (see `writing`).
            writing($fd, $flags, false, |_| call())
        });
    };
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty
        => waits($kind:expr, $never:expr, $(sets($n:ident, $r:ident, $w:ident, $e:ident),)?
            probe($($probe:expr),*))) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let Some(real) = next!(stringify!($name), unsafe extern "C" fn($($ty),*) -> $ret)
            else {
                return enosys();
            };
            waits::waiting(
                $kind,
                || $never,
                || forward!(@probe real; $(sets($n, $r, $w, $e);)? ($($probe),*)),
                // SAFETY: forwarding the caller's arguments unchanged.
                || unsafe { real($($arg),*) },
            )
        }
    };
    (@probe $real:ident; ($($probe:expr),*)) => {
        // SAFETY: the caller's arguments, the timeout made zero (a static zero).
        unsafe { $real($($probe),*) }
    };
    (@probe $real:ident; sets($n:ident, $r:ident, $w:ident, $e:ident); ($($probe:expr),*)) => {
        // SAFETY: the probe is given copies of the caller's sets (or null), and a zero
        // timeout.
        waits::select_probe($n, $r, $w, $e, |$r, $w, $e| unsafe { $real($($probe),*) })
    };
    (@hook $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;
        |$call:ident| $body:block) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            let Some(real) = next!(stringify!($name), unsafe extern "C" fn($($ty),*) -> $ret)
            else {
                return enosys();
            };
            // SAFETY: forwarding the caller's arguments unchanged.
            let $call = || unsafe { real($($arg),*) };
            $body
        }
    };
}

// ---- 32-bit programs built with 64-bit time ---------------------------------------------

// A 32-bit program built with `_TIME_BITS=64` (the only way past 2038 on i386 and armhf, and
// the default of newer distributions there) calls other glibc names for the calls whose
// arguments carry a time (directly, or in what they point to: a `timespec`, `timeval`,
// `rusage`, or the control messages of a `msghdr`, which may carry timestamps): the same
// calls, with 64-bit times, which the shim passes through untouched. Each such hook is
// defined once, with its time-carrying types named by the aliases below, and
// `with_time64_twin!` defines it twice: under its own name with libc's types, and, in 32-bit
// builds (the twins exist in 32-bit glibc only), under the 64-bit-time name with opaque
// pointers.

/// A hook's time-carrying argument types in its own form: libc's.
mod native_time {
    pub type Timespec = libc::timespec;
    pub type Timeval = libc::timeval;
    /// A time's integer (what `waits::is_zero_time` reads).
    pub type TimeT = libc::time_t;
    pub type Rusage = libc::rusage;
    pub type Msghdr = libc::msghdr;
    pub type Mmsghdr = libc::mmsghdr;
}

/// A hook's time-carrying argument types in its 64-bit-time twin: opaque (passed through),
/// times read as 64-bit integers.
#[cfg(target_pointer_width = "32")]
mod time64 {
    use libc::c_void;
    pub type Timespec = c_void;
    pub type Timeval = c_void;
    pub type TimeT = i64;
    pub type Rusage = c_void;
    pub type Msghdr = c_void;
    pub type Mmsghdr = c_void;
}

/// Defines a hook as [`forward!`] does, written with the aliases `Timespec`, `Timeval`,
/// `TimeT`, `Rusage`, `Msghdr`, `Mmsghdr` for its time-carrying types: `fn name / name64(..)`
/// defines `name` with libc's types ([`native_time`]) and, in 32-bit builds, `name64`, its
/// 64-bit-time twin, with opaque ones (`time64`).
macro_rules! with_time64_twin {
    ($(#[$doc:meta])* fn $name:ident / $name64:ident $($rest:tt)*) => {
        const _: () = {
            use self::native_time::*;
            forward!($(#[$doc])* fn $name $($rest)*);
        };
        #[cfg(target_pointer_width = "32")]
        const _: () = {
            use self::time64::*;
            forward!(
                #[doc = concat!("`", stringify!($name), "` in a 32-bit program built with 64-bit time.")]
                fn $name64 $($rest)*
            );
        };
    };
}

// ---- sockets come and go: adopted, duplicated, forgotten --------------------------------

/// Whether `socket(domain, ty, protocol)` makes a TCP stream socket (any flags in `ty`).
fn is_tcp(domain: c_int, ty: c_int, protocol: c_int) -> bool {
    matches!(domain, libc::AF_INET | libc::AF_INET6)
        && ty & 0xf == libc::SOCK_STREAM
        && matches!(protocol, 0 | libc::IPPROTO_TCP)
}

forward!(
    /// `socket(2)`: TCP stream sockets are adopted whatever flags they were made with. Any
    /// other socket's number is forgotten: a number whose earlier TCP socket closed unseen
    /// (inside libc, by a raw syscall) must not keep that socket's slot (a UDP socket sent
    /// `MSG_MORE` merges datagrams).
    fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {}
    => after(|fd| if is_tcp(domain, ty, protocol) { hooks::adopt(fd) } else { hooks::forget(fd) })
);

forward!(
    /// `accept(2)`.
    fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {}
    => after(|new| hooks::adopt_accepted(fd, new))
);
forward!(
    /// `accept4(2)`.
    fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {}
    => after(|new| hooks::adopt_accepted(fd, new))
);

forward!(
    /// `connect(2)`: adopts sockets the shim did not see created (inherited, raw syscalls).
    fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {}
    => after(|r| if (r == 0 || sys::errno() == libc::EINPROGRESS)
        && hooks::shim().is_some_and(|s| !s.is_managed(fd))
    {
        hooks::adopt(fd)
    })
);

forward!(
    /// `close(2)`: the burst ends, the counters are taken, the slot is freed.
    fn close(fd: c_int) -> c_int {
        hooks::on_close(fd)
    }
);

forward!(
    /// `close_range(2)`: every descriptor in the range is closed, ours included.
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
        close_managed_in_range(first, last, flags)
    }
);

/// The managed descriptors in `first..=last` are about to be closed (unless only marked
/// close-on-exec).
fn close_managed_in_range(first: c_uint, last: c_uint, flags: c_int) {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        if let Some(s) = hooks::shim() {
            let end = last.min(1 << 20);
            for fd in first..=end {
                if s.is_managed(fd as c_int) {
                    hooks::on_close(fd as c_int);
                }
            }
        }
    }
}

/// `syscall(2)`, libc's generic entry: libuv (and so node) closes descriptors with
/// `syscall(SYS_close, fd)`, which the `close` hook never sees. Only `close` and
/// `close_range` are looked at; every call is forwarded unchanged. Declared with the six
/// argument registers: on x86-64 and AArch64 Linux a variadic call passes integer arguments
/// exactly as a fixed one does (on 32-bit x86 every argument is on the stack either way),
/// and glibc's `syscall` reads no more (stable Rust cannot define a C-variadic function).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86"))]
#[no_mangle]
pub unsafe extern "C" fn syscall(
    number: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    type Syscall =
        unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;
    let Some(real) = next!("syscall", Syscall) else {
        return enosys();
    };
    if number == libc::SYS_close {
        hooks::on_close(a1 as c_int);
    } else if number == libc::SYS_close_range {
        close_managed_in_range(a1 as c_uint, a2 as c_uint, a3 as c_int);
    }
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(number, a1, a2, a3, a4, a5, a6) }
}

forward!(
    /// `dup(2)`.
    fn dup(fd: c_int) -> c_int {}
    => after(|new| hooks::on_dup(fd, new))
);
forward!(
    /// `dup2(2)`: `new` is closed by the call, so its burst ends first.
    fn dup2(old: c_int, new: c_int) -> c_int {
        hooks::release_socket(new)
    } => after(|r| hooks::on_dup(old, r))
);
forward!(
    /// `dup3(2)`: as `dup2`.
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
        hooks::release_socket(new)
    } => after(|r| hooks::on_dup(old, r))
);

/// Defines an `fcntl` hook (`fcntl`, and `fcntl64`, which programs built against glibc 2.28
/// or later call): `F_DUPFD` and `F_DUPFD_CLOEXEC` make a duplicate, as `dup` does (Python's
/// `os.dup` and `socket.dup` make theirs so). Declared with the third argument as a `long`:
/// on the Linux ABIs the shim builds for, a variadic integer or pointer argument is passed
/// exactly as a fixed one, and glibc's `fcntl` reads no more (as `syscall` above).
macro_rules! fcntl_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "x86"))]
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
            let Some(real) =
                next!(stringify!($name), unsafe extern "C" fn(c_int, c_int, c_long) -> c_int)
            else {
                return enosys();
            };
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { real(fd, cmd, arg) };
            if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
                hooks::on_dup(fd, r);
            }
            r
        }
    };
}
fcntl_hook!(
    /// `fcntl(2)`.
    fcntl
);
fcntl_hook!(
    /// `fcntl64`.
    fcntl64
);

// ---- writes: a burst starts or grows ----------------------------------------------------

/// Makes the write `f` on `fd` between the policy's two steps (a send with `MSG_MORE`
/// means the program packs its own bursts). `f` gets the flags the shim adds to the call:
/// `MSG_MORE` when the policy holds the burst by that flag (see
/// [`Shim::before_write`](nagless_shim_policy::Shim::before_write)), else 0; `carries_more` says
/// whether `f` can add them (`sendfile` and `splice` cannot).
fn writing<R: Copy + Default + PartialOrd>(
    fd: c_int,
    flags: c_int,
    carries_more: bool,
    f: impl FnOnce(c_int) -> R,
) -> R {
    if flags & libc::MSG_MORE != 0 {
        hooks::program_holds(fd);
    }
    let step = hooks::on_write(fd, carries_more);
    let r = f(if step.more { libc::MSG_MORE } else { 0 });
    // An error or 0: nothing was queued, so nothing held before was pushed by this call.
    hooks::after_write(fd, step, r <= R::default());
    r
}

type SendFn = unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
type SendMsgFn = unsafe extern "C" fn(c_int, *const libc::msghdr, c_int) -> ssize_t;

/// `write(2)`. Held by `MSG_MORE`, it is made as `send(2)` with that flag (the same call on
/// a socket, with flags). If the descriptor is no socket any more (closed where the shim
/// could not see it, inside libc by `fclose`, and reused), `send` refuses at once with
/// `ENOTSOCK`, the shim forgets the descriptor and makes the write as asked.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let Some(real) = next!(
        "write",
        unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t
    ) else {
        return enosys();
    };
    writing(fd, 0, true, |more| {
        if more != 0 {
            if let Some(send) = next!("send", SendFn) {
                // SAFETY: the caller's buffer and length, to send(2) on the same socket.
                if let Some(r) = hooks::held_send(fd, || unsafe { send(fd, buf, n, more) }) {
                    return r;
                }
            }
        }
        // SAFETY: forwarding the caller's arguments unchanged.
        unsafe { real(fd, buf, n) }
    })
}

/// `writev(2)`. Held by `MSG_MORE`, it is made as `sendmsg(2)` of the same vector (and as
/// `writev` if the descriptor turns out to be no socket, as for `write`).
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    let Some(real) = next!(
        "writev",
        unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t
    ) else {
        return enosys();
    };
    writing(fd, 0, true, |more| {
        // Made as sendmsg only where the two calls agree: writev refuses more than IOV_MAX
        // entries with EINVAL (sendmsg with EMSGSIZE), and returns 0 for an empty vector
        // without looking at the socket (sendmsg may report its error, and raise SIGPIPE).
        // Looked at only when the write is to be held (a managed socket), as writev would.
        // The vector is read as the kernel reads it: one that cannot be read (a bad pointer)
        // is no fault here, and makes the plain writev, which reports EFAULT as it would.
        let nonempty = || {
            if !(1..=1024).contains(&cnt) {
                return false;
            }
            const AT_ONCE: usize = 64;
            let mut entries = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; AT_ONCE];
            let mut at = 0;
            while at < cnt as usize {
                let k = (cnt as usize - at).min(AT_ONCE);
                // SAFETY: `entries` is plain data, writable for `k` iovecs.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        entries.as_mut_ptr().cast::<u8>(),
                        k * std::mem::size_of::<libc::iovec>(),
                    )
                };
                if !crate::user_memory::read_bytes(iov.wrapping_add(at).cast(), dst) {
                    return false;
                }
                if entries[..k].iter().any(|v| v.iov_len > 0) {
                    return true;
                }
                at += k;
            }
            false
        };
        if more != 0 && nonempty() {
            if let Some(sendmsg) = next!("sendmsg", SendMsgFn) {
                // SAFETY: an all-zero msghdr is valid (no name, no control data).
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = iov.cast_mut();
                msg.msg_iovlen = cnt as _;
                // SAFETY: the caller's vector, unchanged, in a header that lives across the
                // call.
                if let Some(r) = hooks::held_send(fd, || unsafe { sendmsg(fd, &msg, more) }) {
                    return r;
                }
            }
        }
        // SAFETY: forwarding the caller's arguments unchanged.
        unsafe { real(fd, iov, cnt) }
    })
}

/// `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(real) = next!("send", SendFn) else {
        return enosys();
    };
    // SAFETY: forwarding the caller's arguments, with the shim's MSG_MORE.
    writing(fd, flags, true, |more| unsafe {
        real(fd, buf, n, flags | more)
    })
}

/// `sendto(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    let Some(real) = next!(
        "sendto",
        unsafe extern "C" fn(
            c_int,
            *const c_void,
            size_t,
            c_int,
            *const sockaddr,
            socklen_t,
        ) -> ssize_t
    ) else {
        return enosys();
    };
    // SAFETY: forwarding the caller's arguments, with the shim's MSG_MORE.
    writing(fd, flags, true, |more| unsafe {
        real(fd, buf, n, flags | more, addr, len)
    })
}

/// Defines a `sendmsg` hook (`sendmsg`, and `__sendmsg64` in 32-bit programs built with
/// 64-bit time: the same `msghdr`, whose control messages may carry 64-bit timestamps).
macro_rules! sendmsg_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            msg: *const libc::msghdr,
            flags: c_int,
        ) -> ssize_t {
            let Some(real) = next!(stringify!($name), SendMsgFn) else {
                return enosys();
            };
            // SAFETY: forwarding the caller's arguments, with the shim's MSG_MORE.
            writing(fd, flags, true, |more| unsafe { real(fd, msg, flags | more) })
        }
    };
}
sendmsg_hook!(
    /// `sendmsg(2)`.
    sendmsg
);
sendmsg_hook!(
    /// `sendmsg` with 64-bit time.
    #[cfg(target_pointer_width = "32")]
    __sendmsg64
);

// Writes of file bodies: part of the burst (nginx sends headers with writev, then the body).
forward!(
    /// `sendfile(2)`.
    fn sendfile(out: c_int, inp: c_int, off: *mut libc::off_t, n: size_t) -> ssize_t {
    } => writing(out, 0)
);
forward!(
    /// `sendfile64`.
    fn sendfile64(out: c_int, inp: c_int, off: *mut libc::off64_t, n: size_t) -> ssize_t {
    } => writing(out, 0)
);
forward!(
    /// `splice(2)`: out of a socket it is a read (that socket's burst ends), into one a write
    /// (part of the burst; `SPLICE_F_MORE` is the program's own `MSG_MORE`).
    fn splice(
        fd_in: c_int,
        off_in: *mut libc::loff_t,
        fd_out: c_int,
        off_out: *mut libc::loff_t,
        len: size_t,
        flags: c_uint,
    ) -> ssize_t {
        hooks::release_socket(fd_in)
    } => writing(
        fd_out,
        if flags & libc::SPLICE_F_MORE != 0 { libc::MSG_MORE } else { 0 }
    )
);
with_time64_twin!(
    /// `sendmmsg(2)`.
    fn sendmmsg / __sendmmsg64(fd: c_int, msgs: *mut Mmsghdr, n: c_uint, flags: c_int) -> c_int {
    } => writing(fd, flags)
);

// ---- reads: the socket's burst ends -----------------------------------------------------

forward!(
    /// `read(2)`.
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
        hooks::release_socket(fd)
    }
);
forward!(
    /// `readv(2)`.
    fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
        hooks::release_socket(fd)
    }
);
forward!(
    /// `recv(2)`.
    fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
        hooks::release_socket(fd)
    }
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
        hooks::release_socket(fd)
    }
);
with_time64_twin!(
    /// `recvmsg(2)`.
    fn recvmsg / __recvmsg64(fd: c_int, msg: *mut Msghdr, flags: c_int) -> ssize_t {
        hooks::release_socket(fd)
    }
);

// Fortified reads (_FORTIFY_SOURCE builds call these instead of read/recv/recvfrom/poll).
forward!(
    /// `__read_chk`.
    fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t {
        hooks::release_socket(fd)
    }
);
forward!(
    /// `__recv_chk`.
    fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t {
        hooks::release_socket(fd)
    }
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
        hooks::release_socket(fd)
    }
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
        hooks::release_socket(fd)
    }
);

forward!(
    /// `shutdown(2)`: the socket's burst ends, as at a read.
    fn shutdown(fd: c_int, how: c_int) -> c_int {
        hooks::release_socket(fd)
    }
);

// ---- waits of the poll, select and epoll families ---------------------------------------
//
// Each is made through `waits::waiting`: a wait that would not put the thread to sleep (a zero
// timeout, or events already ready, which the probe, the same call with a zero timeout, finds)
// does not end the thread's bursts. `never` says the call's own timeout is zero.

forward!(
    /// `poll(2)`.
    fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int
    => waits(Wait::Poll, Some(timeout == 0), probe(fds, n, 0))
);
forward!(
    /// `__poll_chk` (fortified `poll`).
    fn __poll_chk(
        fds: *mut libc::pollfd,
        n: libc::nfds_t,
        timeout: c_int,
        fdslen: size_t,
    ) -> c_int
    => waits(Wait::Poll, Some(timeout == 0), probe(fds, n, 0, fdslen))
);
with_time64_twin!(
    /// `ppoll(2)`.
    fn ppoll / __ppoll64(
        fds: *mut libc::pollfd,
        n: libc::nfds_t,
        timeout: *const Timespec,
        mask: *const libc::sigset_t,
    ) -> c_int
        => waits(Wait::Poll, waits::is_zero_time(timeout.cast::<TimeT>()),
        probe(fds, n, waits::ZERO_TIME.as_ptr().cast(), mask))
);
with_time64_twin!(
    /// `__ppoll_chk` (fortified `ppoll`).
    fn __ppoll_chk / __ppoll64_chk(
        fds: *mut libc::pollfd,
        n: libc::nfds_t,
        timeout: *const Timespec,
        mask: *const libc::sigset_t,
        fdslen: size_t,
    ) -> c_int
        => waits(Wait::Poll, waits::is_zero_time(timeout.cast::<TimeT>()),
        probe(fds, n, waits::ZERO_TIME.as_ptr().cast(), mask, fdslen))
);
with_time64_twin!(
    /// `select(2)`.
    fn select / __select64(
        n: c_int,
        r: *mut libc::fd_set,
        w: *mut libc::fd_set,
        e: *mut libc::fd_set,
        timeout: *mut Timeval,
    ) -> c_int
        => waits(Wait::Poll, waits::is_zero_time(timeout.cast::<TimeT>().cast_const()),
        sets(n, r, w, e), probe(n, r, w, e, [0i64; 2].as_mut_ptr().cast()))
);
with_time64_twin!(
    /// `pselect(2)`.
    fn pselect / __pselect64(
        n: c_int,
        r: *mut libc::fd_set,
        w: *mut libc::fd_set,
        e: *mut libc::fd_set,
        timeout: *const Timespec,
        mask: *const libc::sigset_t,
    ) -> c_int
        => waits(Wait::Poll, waits::is_zero_time(timeout.cast::<TimeT>()),
        sets(n, r, w, e), probe(n, r, w, e, waits::ZERO_TIME.as_ptr().cast(), mask))
);
forward!(
    /// `epoll_wait(2)`.
    fn epoll_wait(
        epfd: c_int,
        events: *mut libc::epoll_event,
        max: c_int,
        timeout: c_int,
    ) -> c_int
    => waits(Wait::Epoll, Some(timeout == 0), probe(epfd, events, max, 0))
);
forward!(
    /// `epoll_pwait(2)`.
    fn epoll_pwait(
        epfd: c_int,
        events: *mut libc::epoll_event,
        max: c_int,
        timeout: c_int,
        mask: *const libc::sigset_t,
    ) -> c_int
    => waits(Wait::Epoll, Some(timeout == 0), probe(epfd, events, max, 0, mask))
);
with_time64_twin!(
    /// `epoll_pwait2(2)`.
    fn epoll_pwait2 / __epoll_pwait2_time64(
        epfd: c_int,
        events: *mut libc::epoll_event,
        max: c_int,
        timeout: *const Timespec,
        mask: *const libc::sigset_t,
    ) -> c_int
        => waits(Wait::Epoll, waits::is_zero_time(timeout.cast::<TimeT>()),
        probe(epfd, events, max, waits::ZERO_TIME.as_ptr().cast(), mask))
);

// ---- other waits: the thread's bursts end -----------------------------------------------

// The thread turns to wait on something other than a socket: its bursts end. Condition
// variables and semaphores are not among these waits: they are also how interpreters pass
// their global lock between threads (CPython's GIL, Ruby's GVL), which happens between the
// writes of one response. Releasing there split python http.server's responses (1.50 data
// segments per response under wrk -c10, against 1.17 without); the linger bound covers a
// thread pool's hand-back instead.
with_time64_twin!(
    /// `nanosleep(2)`.
    fn nanosleep / __nanosleep64(req: *const Timespec, rem: *mut Timespec) -> c_int {
        waits::on_wait(Wait::Other)
    }
);
with_time64_twin!(
    /// `clock_nanosleep(2)`.
    fn clock_nanosleep / __clock_nanosleep_time64(
        clock: libc::clockid_t,
        flags: c_int,
        req: *const Timespec,
        rem: *mut Timespec,
    ) -> c_int {
        waits::on_wait(Wait::Other)
    }
);
forward!(
    /// `usleep(3)`.
    fn usleep(us: libc::useconds_t) -> c_int {
        waits::on_wait(Wait::Other)
    }
);
forward!(
    /// `sigwait(3)`.
    fn sigwait(set: *const libc::sigset_t, sig: *mut c_int) -> c_int {
        waits::on_wait(Wait::Other)
    }
);
forward!(
    /// `sigwaitinfo(2)`.
    fn sigwaitinfo(set: *const libc::sigset_t, info: *mut libc::siginfo_t) -> c_int {
        waits::on_wait(Wait::Other)
    }
);
with_time64_twin!(
    /// `sigtimedwait(2)`.
    fn sigtimedwait / __sigtimedwait64(
        set: *const libc::sigset_t,
        info: *mut libc::siginfo_t,
        t: *const Timespec,
    ) -> c_int {
        waits::on_wait(Wait::Other)
    }
);
forward!(
    /// `sigsuspend(2)`: nginx's master waits here.
    fn sigsuspend(mask: *const libc::sigset_t) -> c_int {
        waits::on_wait(Wait::Other)
    }
);
forward!(
    /// `pause(2)`.
    fn pause() -> c_int {
        waits::on_wait(Wait::Other)
    }
);
forward!(
    /// `waitpid(2)`.
    fn waitpid(pid: libc::pid_t, status: *mut c_int, options: c_int) -> libc::pid_t {
        waits::on_wait_unless_nohang(options)
    }
);
forward!(
    /// `wait(2)`.
    fn wait(status: *mut c_int) -> libc::pid_t {
        waits::on_wait(Wait::Other)
    }
);
with_time64_twin!(
    /// `wait4(2)`.
    fn wait4 / __wait4_time64(
        pid: libc::pid_t,
        status: *mut c_int,
        options: c_int,
        usage: *mut Rusage,
    ) -> libc::pid_t {
        waits::on_wait_unless_nohang(options)
    }
);
forward!(
    /// `waitid(2)`.
    fn waitid(
        idtype: libc::idtype_t,
        id: libc::id_t,
        info: *mut libc::siginfo_t,
        options: c_int,
    ) -> c_int {
        waits::on_wait_unless_nohang(options)
    }
);

/// `sleep(3)` (returns unsigned, so it cannot share the macro's `-1` on a missing symbol).
#[no_mangle]
pub unsafe extern "C" fn sleep(seconds: c_uint) -> c_uint {
    waits::on_wait(Wait::Other);
    let Some(real) = next!("sleep", unsafe extern "C" fn(c_uint) -> c_uint) else {
        return seconds;
    };
    // SAFETY: forwarding the caller's argument unchanged.
    unsafe { real(seconds) }
}

// ---- the process ends or changes: every burst ends --------------------------------------

/// Defines an `_exit`-like hook: the process ends without its atexit handlers (a forked
/// child's usual way out), so its bursts are released first. Its sockets may live on in
/// another process (the parent, one they were passed to): a tail held by `MSG_MORE` would
/// otherwise wait for the kernel's ~200 ms probe timer.
macro_rules! exit_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(status: c_int) -> ! {
            hooks::release_everything();
            if let Some(real) = next!(stringify!($name), unsafe extern "C" fn(c_int) -> !) {
                // SAFETY: forwarding the caller's argument unchanged.
                unsafe { real(status) }
            }
            loop {
                // SAFETY: exit_group takes an int and does not return.
                unsafe { libc::syscall(libc::SYS_exit_group, status) };
            }
        }
    };
}
exit_hook!(
    /// `_exit(2)`.
    _exit
);
exit_hook!(
    /// `_Exit(3)`.
    _Exit
);

forward!(
    /// `fork(2)`: bursts end before, so neither process inherits a half-sent one (the
    /// child's flusher restarts from the pthread_atfork handler's mark, also for daemon()
    /// and other internal forks).
    fn fork() -> libc::pid_t {
        hooks::release_everything()
    }
);
// exec, in all its forms, and the calls that exec inside libc: `exec.rs`.

// ---- the program's own socket options ---------------------------------------------------

/// Defines a `setsockopt` hook (`setsockopt`, and `__setsockopt64` in 32-bit programs built
/// with 64-bit time): the real call, watched by [`program_setsockopt`].
macro_rules! setsockopt_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            level: c_int,
            name: c_int,
            value: *const c_void,
            len: socklen_t,
        ) -> c_int {
            let Some(real) = next!(
                stringify!($name),
                unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int
            ) else {
                return enosys();
            };
            // SAFETY: forwarding the caller's arguments unchanged.
            unsafe {
                program_setsockopt(fd, level, name, value, len, || {
                    real(fd, level, name, value, len)
                })
            }
        }
    };
}
setsockopt_hook!(
    /// `setsockopt(2)`: a program that sets `TCP_CORK`, or chooses `TCP_NODELAY` either way,
    /// packetizes its own output; the shim leaves that socket to it.
    setsockopt
);
setsockopt_hook!(
    /// `setsockopt` in a 32-bit program built with 64-bit time (see `with_time64_twin!`).
    #[cfg(target_pointer_width = "32")]
    __setsockopt64
);

/// The program's `setsockopt`, made by `call`. `TCP_CORK` either way: from before the call
/// the shim never clears it (its own uncork would undo the program's), until the program
/// clears it itself. `TCP_CORK` on, or any `TCP_NODELAY` choice: the program packetizes its
/// own output on `fd`, and the shim stops holding it.
///
/// # Safety
/// `call` makes the program's call with these arguments.
unsafe fn program_setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let cork = level == libc::IPPROTO_TCP && name == libc::TCP_CORK;
    let was = cork && hooks::program_cork_begins(fd);
    let r = call();
    let v = (r == 0 && !value.is_null() && len as usize >= 4)
        // SAFETY: the kernel just read an int from `value` (len >= 4) without fault.
        .then(|| unsafe { value.cast::<c_int>().read_unaligned() });
    if cork {
        hooks::program_cork_done(fd, was, v.map(|v| v != 0));
    }
    match (level == libc::IPPROTO_TCP, v) {
        (true, Some(v)) if name == libc::TCP_CORK && v != 0 => hooks::program_holds(fd),
        (true, Some(v)) if name == libc::TCP_NODELAY => hooks::program_nodelay(fd, v != 0),
        _ => {}
    }
    r
}

/// Defines a `getsockopt` hook: the real call, then what the program sees of the options the
/// shim sets itself ([`program_getsockopt`]).
macro_rules! getsockopt_hook {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            level: c_int,
            name: c_int,
            value: *mut c_void,
            len: *mut socklen_t,
        ) -> c_int {
            let Some(real) = next!(
                stringify!($name),
                unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int
            ) else {
                return enosys();
            };
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { real(fd, level, name, value, len) };
            // SAFETY: the real call returned 0, so it wrote `*len` bytes to `value`.
            unsafe { program_getsockopt(r, fd, level, name, value, len) };
            r
        }
    };
}
getsockopt_hook!(
    /// `getsockopt(2)`: `TCP_NODELAY` and `TCP_CORK` read what the program set, or the
    /// kernel's default, never the shim's own (a server that copies its listener's options to
    /// each connection copies its own choice, not the shim's).
    getsockopt
);
getsockopt_hook!(
    /// `getsockopt` in a 32-bit program built with 64-bit time (glibc's other name for it).
    #[cfg(target_pointer_width = "32")]
    __getsockopt64
);

/// After the program's `getsockopt` returned `r`: a successful read of `TCP_NODELAY` or
/// `TCP_CORK` on a socket the shim manages gets the program's own value, written in the
/// bytes the kernel wrote (an int, or its first `*len` bytes for a shorter buffer).
///
/// # Safety
/// When `r == 0`, `len` and `value` are the pointers the kernel just filled: `*len` readable,
/// `*len` bytes (at most an int's) writable at `value`.
unsafe fn program_getsockopt(
    r: c_int,
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: *mut socklen_t,
) {
    if r != 0
        || level != libc::IPPROTO_TCP
        || (name != libc::TCP_NODELAY && name != libc::TCP_CORK)
        || value.is_null()
        || len.is_null()
    {
        return;
    }
    let Some(on) = hooks::program_view(fd, name == libc::TCP_NODELAY) else {
        return;
    };
    let bytes = c_int::from(on).to_ne_bytes();
    // SAFETY: the kernel set `*len` (readable) to the bytes it wrote at `value`.
    let n = (unsafe { len.read_unaligned() } as usize).min(bytes.len());
    // SAFETY: the kernel just wrote `n` bytes at `value` without fault.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), value.cast::<u8>(), n) };
}
