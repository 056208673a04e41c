//! The shim's libc and kernel calls: the [`Kernel`] the burst policy uses (socket options,
//! what a descriptor is, the clock), `errno`, and the calls the rest of the shim makes for
//! itself (futexes, signal masks, exit and fork handlers, `fstat`, raw writes). The hooks'
//! forwarding calls are made where they are defined (`interpose`, `exec`, `signals`);
//! nothing else calls the kernel.
//!
//! Rules for everything here, since it runs inside the program's own calls: nothing panics,
//! nothing allocates.
#![allow(unsafe_code)]

use std::sync::atomic::AtomicU32;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libc::{c_int, c_void, size_t, socklen_t, ssize_t};

use nagless_shim_policy::{Kernel, Sending};

pub(crate) use crate::symbols::next;

pub fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(v: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = v }
}

/// Runs bookkeeping without disturbing the caller's errno.
pub fn quietly<R>(f: impl FnOnce() -> R) -> R {
    let saved = errno();
    let r = f();
    set_errno(saved);
    r
}

/// `getsockopt` through libc's own definition (the shim's hook shows the program its own
/// view of some options, not the kernel's), into `buf`: how many bytes the kernel wrote.
fn real_getsockopt(fd: c_int, level: c_int, name: c_int, buf: &mut [u8]) -> Option<usize> {
    type GetSockOpt =
        unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
    let real = next!("getsockopt", GetSockOpt)?;
    let mut len = socklen_t::try_from(buf.len()).ok()?;
    // SAFETY: `buf` and `len` are valid for writes; `len` holds buf's size, which the kernel
    // writes no more than.
    let r = unsafe { real(fd, level, name, buf.as_mut_ptr().cast(), &mut len) };
    (r == 0).then(|| (len as usize).min(buf.len()))
}

/// `TCP_INFO` of `fd`, read into a buffer of ours (no borrowed descriptor: the flusher asks
/// about descriptors the program may close meanwhile, which then fails with `EBADF` or reads
/// another socket's counters, never touches memory).
pub fn tcp_info(fd: c_int) -> Option<nagless::TcpInfo> {
    let mut buf = [0u8; 256];
    let n = real_getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf)?;
    nagless::TcpInfo::parse(&buf[..n])
}

/// `getsockopt` of an int (see [`real_getsockopt`]).
pub fn sockopt_int(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v = [0u8; std::mem::size_of::<c_int>()];
    real_getsockopt(fd, level, name, &mut v)?;
    Some(c_int::from_ne_bytes(v))
}

/// `setsockopt` through libc's own definition: the shim's `setsockopt` hook watches the
/// program's calls, not ours.
fn real_setsockopt_int(fd: c_int, level: c_int, name: c_int, value: c_int) -> bool {
    type SetSockOpt = unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
    let Some(real) = next!("setsockopt", SetSockOpt) else {
        return false;
    };
    let len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: `value` lives across the call and its size is passed.
    unsafe { real(fd, level, name, (&value as *const c_int).cast(), len) == 0 }
}

/// Sets `TCP_NODELAY` off on `fd` (the kernel's default), through libc's own `setsockopt`.
pub fn clear_nodelay(fd: c_int) -> bool {
    real_setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 0)
}

/// `TCP_DELACK_MAX_US` (Linux 6.15; not in the libc crate yet).
const TCP_DELACK_MAX_US: c_int = 46;

/// The real kernel, through libc.
pub struct Libc;

impl Kernel for Libc {
    fn is_tcp_stream(&self, fd: i32) -> bool {
        sockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
            && matches!(
                sockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN),
                Some(libc::AF_INET | libc::AF_INET6)
            )
            && sockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) == Some(libc::IPPROTO_TCP)
    }
    fn set_nodelay(&self, fd: i32) -> bool {
        real_setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
    }
    fn set_cork(&self, fd: i32, on: bool) -> bool {
        real_setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, c_int::from(on))
    }
    fn now_us(&self) -> u64 {
        epoch().elapsed().as_micros() as u64
    }
    fn socket_id(&self, fd: i32) -> Option<u64> {
        let st = fstat(fd)?;
        #[allow(clippy::unnecessary_cast)] // 32-bit fields on 32-bit targets
        (st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some(st.st_ino as u64)
    }
    fn set_quickack(&self, fd: i32) -> bool {
        real_setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1)
    }
    fn set_delack_max_us(&self, fd: i32, us: u32) -> bool {
        let us = c_int::try_from(us).unwrap_or(c_int::MAX);
        real_setsockopt_int(fd, libc::IPPROTO_TCP, TCP_DELACK_MAX_US, us)
    }
    fn clear_nodelay(&self, fd: i32) -> bool {
        clear_nodelay(fd)
    }
    fn sending(&self, fd: i32) -> Option<Sending> {
        let info = tcp_info(fd)?;
        Some(Sending {
            unsent: info.notsent_bytes?,
            data_segments: info.data_segs_out?,
        })
    }
}

/// The shim's clock's zero (the first call's time: start-up reads it).
pub fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // The libc layer owns the clock: the policy crate bans it (its clippy.toml) and takes
    // the time from `Kernel::now_us`.
    *EPOCH.get_or_init(Instant::now)
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

/// This user's limit on tasks (`RLIMIT_NPROC`), if one applies: none for root (the kernel
/// does not count it) or when unlimited.
pub fn nproc_limit() -> Option<u64> {
    // SAFETY: getuid has no arguments and cannot fail.
    if unsafe { libc::getuid() } == 0 {
        return None;
    }
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // 32-bit on 32-bit targets
    Some(r.rlim_cur as u64)
}

/// Writes all of `buf` to `fd` through libc's own `write` (stats and logs only); false if it
/// could not.
pub fn write_all_raw(fd: c_int, mut buf: &[u8]) -> bool {
    let Some(real) = next!(
        "write",
        unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t
    ) else {
        return false;
    };
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for `buf.len()` bytes of reads.
        let n = unsafe { real(fd, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

/// Reads the start of the file at `path` into `buf` with `open`, `read` and `close` (the calls
/// the loader makes): the bytes read, or `None` if it cannot be opened or read.
pub fn read_file(path: &std::ffi::CStr, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: a NUL-terminated path; flags only.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // libc's own, not the shim's hooks of them.
    let read = next!(
        "read",
        unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t
    );
    let close = next!("close", unsafe extern "C" fn(c_int) -> c_int);
    let mut n = 0;
    while let Some(read) = read.filter(|_| n < buf.len()) {
        // SAFETY: `buf[n..]` is valid for writes of its length.
        let r = unsafe { read(fd, buf[n..].as_mut_ptr().cast(), buf.len() - n) };
        if r < 0 && errno() == libc::EINTR {
            continue;
        }
        if r <= 0 {
            break;
        }
        n += r as usize;
    }
    if let Some(close) = close {
        // SAFETY: closing the descriptor opened above.
        unsafe { close(fd) };
    }
    (n > 0).then_some(n)
}

/// Whether the shim may write its own lines to stderr: it is open and no socket (an inetd
/// service's, or vsftpd's sessions', is their connection: a line there would reach the peer
/// as part of the program's stream).
pub fn stderr_takes_our_lines() -> bool {
    fstat(2).is_some_and(|st| st.st_mode & libc::S_IFMT != libc::S_IFSOCK)
}

/// `fstat` of `fd`: `None` if it is not open.
pub fn fstat(fd: c_int) -> Option<libc::stat> {
    // SAFETY: fstat fills a zeroed stat for a descriptor number; failure is handled.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some(st)
    }
}

/// Moves `fd`, a descriptor of ours, to the lowest free number at or above `min`,
/// close-on-exec: the new number, or `fd` itself if it cannot be moved.
pub fn move_fd_up(fd: c_int, min: c_int) -> c_int {
    // SAFETY: plain fcntl on our own descriptor.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if high < 0 {
        return fd;
    }
    // SAFETY: closing the low duplicate we own.
    unsafe { libc::close(fd) };
    high
}

/// Wakes one thread parked on `word` by [`futex_wait`].
pub fn futex_wake(word: &AtomicU32) {
    let word = word as *const AtomicU32 as *const u32;
    // SAFETY: FUTEX_WAKE on the address of a live atomic; no memory is written.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    };
}

/// Parks the calling thread while `word` reads 0, until [`futex_wake`] (or a signal), or
/// for at most `timeout` if there is one.
pub fn futex_wait(word: &AtomicU32, timeout: Option<Duration>) {
    let timeout = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let word = word as *const AtomicU32 as *const u32;
    // SAFETY: FUTEX_WAIT on a live atomic: sleeps while it reads 0 (at most `timeout`, a
    // live local, when there is one).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            0,
            timeout
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec),
        )
    };
}

/// The calling process's ID (a system call each time: glibc keeps no copy).
pub fn pid() -> libc::pid_t {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::getpid() }
}

/// Sleeps the calling thread for `d` (the shim's own waits: `std`'s sleep, no hook sees it).
pub fn nap(d: Duration) {
    std::thread::sleep(d);
}

/// Waits for the thread `t` (a `pthread_t` of the shim's own, never detached) to end.
pub fn join_thread(t: usize) {
    // SAFETY: `t` is a joinable thread of ours, joined once (its owner gave it up).
    unsafe { libc::pthread_join(t as libc::pthread_t, std::ptr::null_mut()) };
}

/// Runs `f` with every signal blocked in the calling thread (a thread `f` starts inherits
/// that mask), then restores the thread's mask.
pub fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sigfillset/pthread_sigmask on local, initialised sigset_t values.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    };
    let r = f();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

/// Registers `at_exit` to run at the process's exit (`atexit`), and `child` to run in the
/// child after a fork (`pthread_atfork`).
pub fn on_exit_and_fork(at_exit: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: registering plain extern "C" functions with no arguments.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(child));
    }
}

/// Calls `each` with every descriptor a `struct msghdr` carries (`SCM_RIGHTS`).
///
/// # Safety
/// `msg` is NULL or a `struct msghdr` the kernel just filled (a successful `recvmsg`, whose
/// layout is the same in both of 32-bit glibc's time forms), its control buffer with it.
pub unsafe fn passed_descriptors(msg: *const c_void, mut each: impl FnMut(c_int)) {
    let msg = msg.cast::<libc::msghdr>();
    // SAFETY: the caller's promise; the CMSG macros stay inside `msg_controllen`, and each
    // SCM_RIGHTS message holds `cmsg_len - CMSG_LEN(0)` bytes of descriptors, unaligned.
    unsafe {
        if msg.is_null() || (*msg).msg_control.is_null() {
            return;
        }
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<c_int>();
                let bytes = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                for i in 0..bytes / std::mem::size_of::<c_int>() {
                    each(data.add(i).read_unaligned());
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}
