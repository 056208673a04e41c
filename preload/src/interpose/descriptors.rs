//! Sockets come and go: made, accepted, connected (adopted), duplicated (`dup*`,
//! `fcntl(F_DUPFD)`), closed (`close`, `close_range`, `syscall(SYS_close)`), or any other
//! socket's number forgotten. (libc's `syscall()` is hooked here; besides closes, it also
//! watches for `seccomp`, `unshare` and `setns` made through it: see `process`.)

use super::*;

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
    /// `listen(2)`: the shim's `TCP_NODELAY` comes off a listener (see `hooks::on_listen`).
    fn listen(fd: c_int, backlog: c_int) -> c_int {}
    => after(|r| if r == 0 { hooks::on_listen(fd) })
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
            for fd in s.managed_in(first, last) {
                hooks::on_close(fd);
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
    } else if number == libc::SYS_seccomp && (a1 == 0 || a1 == 1) {
        // libseccomp's way (and a program's own) to install a filter: SECCOMP_SET_MODE_STRICT
        // or SECCOMP_SET_MODE_FILTER (its other operations only ask).
        hooks::before_filter("seccomp(2)");
    } else if (number == libc::SYS_unshare && super::process::unshare_needs_one_thread(a1 as c_int))
        || (number == libc::SYS_setns && super::process::setns_needs_one_thread(a2 as c_int))
    {
        hooks::pause_flusher();
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
