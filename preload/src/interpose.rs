//! The interposed libc functions and the shim's few syscalls: the only unsafe code here.
//!
//! Each hook finds the next definition of its symbol with `dlsym(RTLD_NEXT)`, does its
//! bookkeeping with `errno` saved and restored exactly, calls the real function, and returns
//! what it returned. Nothing here panics: a missing real symbol reads as `ENOSYS`.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)] // the hooks' contracts are libc's own

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_void, size_t, sockaddr, socklen_t, ssize_t};

use crate::state::{shim, Mode};

/// Resolves the next definition of a libc symbol once and caches it.
macro_rules! next {
    ($name:literal: $ty:ty) => {{
        static SLOT: AtomicUsize = AtomicUsize::new(0);
        let mut p = SLOT.load(Ordering::Relaxed);
        if p == 0 {
            // SAFETY: RTLD_NEXT lookup of a NUL-terminated name; dlsym has no other contract.
            p = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!($name, "\0").as_ptr().cast()) }
                as usize;
            SLOT.store(p, Ordering::Relaxed);
        }
        if p == 0 {
            None
        } else {
            // SAFETY: `p` is the address of the libc function named $name, whose C signature
            // is $ty.
            Some(unsafe { std::mem::transmute::<usize, $ty>(p) })
        }
    }};
}

fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

fn set_errno(v: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = v }
}

/// Runs bookkeeping without disturbing the caller's errno.
fn quietly(f: impl FnOnce()) {
    let saved = errno();
    f();
    set_errno(saved);
}

fn borrow(fd: c_int) -> BorrowedFd<'static> {
    // SAFETY: only used for the duration of one setsockopt/getsockopt on a descriptor the
    // program holds open across the interposed call that passed it to us.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

fn sockopt_int(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: `v` and `len` are valid for writes; `len` holds v's size.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) };
    (r == 0).then_some(v)
}

/// Whether `fd` is a TCP stream socket over IPv4 or IPv6.
pub fn is_tcp_stream(fd: c_int) -> bool {
    sockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
        && matches!(
            sockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN),
            Some(libc::AF_INET | libc::AF_INET6)
        )
        && sockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) == Some(libc::IPPROTO_TCP)
}

/// Sets TCP_NODELAY.
pub fn set_nodelay(fd: c_int) -> std::io::Result<()> {
    nagless::sys::set_nodelay(borrow(fd), true)
}

/// Sets or clears TCP_CORK.
pub fn set_cork(fd: c_int, on: bool) -> std::io::Result<()> {
    nagless::sys::set_cork(borrow(fd), on)
}

/// Data segments and payload bytes the socket has sent (TCP_INFO).
pub fn sent_counters(fd: c_int) -> Option<(u64, u64)> {
    let info = nagless::TcpInfo::of(&borrow(fd)).ok()?;
    Some((info.data_segs_out? as u64, info.bytes_sent?))
}

/// The largest number of descriptors the process may open.
pub fn fd_limit() -> usize {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 1024;
    }
    r.rlim_max.max(r.rlim_cur).min(usize::MAX as libc::rlim_t) as usize
}

/// Opens the debug log for appending.
pub fn open_log(path: &str) -> Option<c_int> {
    use std::os::fd::IntoRawFd;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .ok()
        .map(|f| f.into_raw_fd())
}

/// Writes all of `buf` to `fd`, ignoring errors (stats and logs only).
pub fn write_all_raw(fd: c_int, mut buf: &[u8]) {
    let Some(real) = next!("write": unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t)
    else {
        return;
    };
    let saved = errno();
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for `buf.len()` bytes of reads.
        let n = unsafe { real(fd, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        buf = &buf[n as usize..];
    }
    set_errno(saved);
}

fn enosys<T: From<i8>>() -> T {
    set_errno(libc::ENOSYS);
    T::from(-1)
}

// ---- start-up and exit ----------------------------------------------------------------

extern "C" fn at_exit() {
    if let Some(s) = shim() {
        s.release_all();
        s.print_stats();
    }
}

extern "C" fn init_hook() {
    quietly(|| {
        crate::state::init();
        // SAFETY: registering a plain extern "C" function with no arguments.
        unsafe { libc::atexit(at_exit) };
    });
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init_hook;

// ---- creation ---------------------------------------------------------------------------

fn adopt_result(fd: c_int) -> c_int {
    if fd >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.adopt(fd));
        }
    }
    fd
}

/// `socket(2)`: TCP stream sockets are adopted whatever flags they were made with.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    let Some(real) = next!("socket": unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) else {
        return enosys();
    };
    // SAFETY: forwarding the caller's arguments unchanged.
    let fd = unsafe { real(domain, ty, protocol) };
    let tcp = matches!(domain, libc::AF_INET | libc::AF_INET6)
        && ty & 0xf == libc::SOCK_STREAM
        && matches!(protocol, 0 | libc::IPPROTO_TCP);
    if tcp {
        adopt_result(fd)
    } else {
        fd
    }
}

/// `accept(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let Some(real) =
        next!("accept": unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int)
    else {
        return enosys();
    };
    // SAFETY: forwarding the caller's arguments unchanged.
    adopt_result(unsafe { real(fd, addr, len) })
}

/// `accept4(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let Some(real) = next!(
        "accept4": unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int
    ) else {
        return enosys();
    };
    // SAFETY: forwarding the caller's arguments unchanged.
    adopt_result(unsafe { real(fd, addr, len, flags) })
}

/// `connect(2)`: adopts sockets the shim did not see created (inherited, raw syscalls).
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(real) =
        next!("connect": unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int)
    else {
        return enosys();
    };
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(fd, addr, len) };
    if let Some(s) = shim() {
        let e = errno();
        if (r == 0 || e == libc::EINPROGRESS) && !s.is_managed(fd) {
            quietly(|| s.adopt(fd));
        }
    }
    r
}

// ---- writes: a burst starts ---------------------------------------------------------------

fn before_write(fd: c_int) {
    if let Some(s) = shim() {
        quietly(|| s.before_write(fd));
    }
}

/// `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let Some(real) = next!("write": unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t)
    else {
        return enosys();
    };
    before_write(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, buf, n) }
}

/// `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    let Some(real) =
        next!("writev": unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t)
    else {
        return enosys();
    };
    before_write(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, iov, cnt) }
}

/// `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(real) =
        next!("send": unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t)
    else {
        return enosys();
    };
    before_write(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, buf, n, flags) }
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
        "sendto": unsafe extern "C" fn(
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
    before_write(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, buf, n, flags, addr, len) }
}

/// `sendmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t {
    let Some(real) =
        next!("sendmsg": unsafe extern "C" fn(c_int, *const libc::msghdr, c_int) -> ssize_t)
    else {
        return enosys();
    };
    before_write(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, msg, flags) }
}

// ---- reads and waits: the burst ends ----------------------------------------------------

fn before_read(fd: c_int) {
    if let Some(s) = shim() {
        quietly(|| s.release(fd));
    }
}

fn before_poll(is_epoll: bool) {
    if let Some(s) = shim() {
        // libautocork's rule (mode cork) knows no epoll.
        if is_epoll && s.config.mode == Mode::Cork {
            return;
        }
        quietly(|| s.release_all());
    }
}

/// `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let Some(real) = next!("read": unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t)
    else {
        return enosys();
    };
    before_read(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, buf, n) }
}

/// `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    let Some(real) =
        next!("readv": unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> ssize_t)
    else {
        return enosys();
    };
    before_read(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, iov, cnt) }
}

/// `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    let Some(real) =
        next!("recv": unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t)
    else {
        return enosys();
    };
    before_read(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, buf, n, flags) }
}

/// `recvfrom(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    let Some(real) = next!(
        "recvfrom": unsafe extern "C" fn(
            c_int,
            *mut c_void,
            size_t,
            c_int,
            *mut sockaddr,
            *mut socklen_t,
        ) -> ssize_t
    ) else {
        return enosys();
    };
    before_read(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, buf, n, flags, addr, len) }
}

/// `recvmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t {
    let Some(real) =
        next!("recvmsg": unsafe extern "C" fn(c_int, *mut libc::msghdr, c_int) -> ssize_t)
    else {
        return enosys();
    };
    before_read(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, msg, flags) }
}

/// `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    let Some(real) =
        next!("poll": unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int)
    else {
        return enosys();
    };
    before_poll(false);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fds, n, timeout) }
}

/// `ppoll(2)`.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    let Some(real) = next!(
        "ppoll": unsafe extern "C" fn(
            *mut libc::pollfd,
            libc::nfds_t,
            *const libc::timespec,
            *const libc::sigset_t,
        ) -> c_int
    ) else {
        return enosys();
    };
    before_poll(false);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fds, n, timeout, mask) }
}

/// `select(2)`.
#[no_mangle]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    let Some(real) = next!(
        "select": unsafe extern "C" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::timeval,
        ) -> c_int
    ) else {
        return enosys();
    };
    before_poll(false);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(n, r, w, e, timeout) }
}

/// `pselect(2)`.
#[no_mangle]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    let Some(real) = next!(
        "pselect": unsafe extern "C" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *const libc::timespec,
            *const libc::sigset_t,
        ) -> c_int
    ) else {
        return enosys();
    };
    before_poll(false);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(n, r, w, e, timeout, mask) }
}

/// `epoll_wait(2)`.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let Some(real) = next!(
        "epoll_wait": unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int
    ) else {
        return enosys();
    };
    before_poll(true);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(epfd, events, max, timeout) }
}

/// `epoll_pwait(2)`.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    let Some(real) = next!(
        "epoll_pwait": unsafe extern "C" fn(
            c_int,
            *mut libc::epoll_event,
            c_int,
            c_int,
            *const libc::sigset_t,
        ) -> c_int
    ) else {
        return enosys();
    };
    before_poll(true);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(epfd, events, max, timeout, mask) }
}

// ---- descriptor lifetime ------------------------------------------------------------------

/// `close(2)`: the burst ends, the counters are taken, the slot is freed.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let Some(real) = next!("close": unsafe extern "C" fn(c_int) -> c_int) else {
        return enosys();
    };
    if let Some(s) = shim() {
        quietly(|| s.forget(fd));
    }
    // SAFETY: forwarding the caller's argument unchanged.
    unsafe { real(fd) }
}

/// `shutdown(2)`.
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    let Some(real) = next!("shutdown": unsafe extern "C" fn(c_int, c_int) -> c_int) else {
        return enosys();
    };
    before_read(fd);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(fd, how) }
}

/// `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let Some(real) = next!("dup": unsafe extern "C" fn(c_int) -> c_int) else {
        return enosys();
    };
    // SAFETY: forwarding the caller's argument unchanged.
    let new = unsafe { real(fd) };
    if new >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.duplicate(fd, new));
        }
    }
    new
}

/// `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let Some(real) = next!("dup2": unsafe extern "C" fn(c_int, c_int) -> c_int) else {
        return enosys();
    };
    if let Some(s) = shim() {
        // `new` is closed by dup2: end its burst first.
        quietly(|| s.release(new));
    }
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(old, new) };
    if r >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.duplicate(old, r));
        }
    }
    r
}

/// `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let Some(real) = next!("dup3": unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) else {
        return enosys();
    };
    if let Some(s) = shim() {
        quietly(|| s.release(new));
    }
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(old, new, flags) };
    if r >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.duplicate(old, r));
        }
    }
    r
}

/// `fork(2)`: bursts end before, so neither process inherits a half-sent one.
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let Some(real) = next!("fork": unsafe extern "C" fn() -> libc::pid_t) else {
        return enosys();
    };
    before_poll(false);
    // SAFETY: plain call of the real fork.
    let pid = unsafe { real() };
    if pid == 0 {
        if let Some(s) = shim() {
            quietly(|| s.after_fork_child());
        }
    }
    pid
}

/// `execve(2)`: bursts end before the program is replaced.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(real) = next!(
        "execve": unsafe extern "C" fn(
            *const c_char,
            *const *const c_char,
            *const *const c_char,
        ) -> c_int
    ) else {
        return enosys();
    };
    before_poll(false);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(path, argv, envp) }
}

/// `execv(3)`.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(real) =
        next!("execv": unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int)
    else {
        return enosys();
    };
    before_poll(false);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(path, argv) }
}

/// `execvp(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    let Some(real) =
        next!("execvp": unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int)
    else {
        return enosys();
    };
    before_poll(false);
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(file, argv) }
}
