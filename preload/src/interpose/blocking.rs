//! The calls that may put the thread to sleep: the poll, select and epoll families (made
//! through `waits::waiting`, which ends the thread's bursts only if the call would block),
//! sleeps, signal waits and `waitpid` and friends (which end them).

use super::*;

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
