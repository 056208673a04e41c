//! The shim's libc layer: the [`Kernel`] the burst policy uses, the process-wide state, the
//! flusher thread, fork handling, the log and the exit report. With `interpose` (the hooks),
//! the only unsafe code of the crate.
//!
//! Rules for everything here, since it runs inside the program's own calls: `errno` is saved
//! and restored around bookkeeping ([`quietly`]), nothing panics, nothing allocates after
//! start-up except starting the flusher thread once per process.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::os::fd::BorrowedFd;
use std::sync::OnceLock;
use std::time::Instant;

use libc::{c_int, c_void, size_t, socklen_t, ssize_t};

use nagless_shim_policy::{Config, FlusherStep, Kernel, Mode, Shim, ThreadBursts, WriteStep};

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

pub fn borrow(fd: c_int) -> BorrowedFd<'static> {
    // SAFETY: only used for the duration of one setsockopt/getsockopt on a descriptor the
    // program holds open across the interposed call that passed it to us.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// `getsockopt` of an int through libc's own definition (the shim's hook shows the program
/// its own view of some options, not the kernel's).
fn sockopt_int(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    type GetSockOpt =
        unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
    let real = next!("getsockopt", GetSockOpt)?;
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: `v` and `len` are valid for writes; `len` holds v's size.
    let r = unsafe { real(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) };
    (r == 0).then_some(v)
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
        // SAFETY: fstat fills a zeroed stat for a descriptor number; failure is handled.
        let st = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            (libc::fstat(fd, &mut st) == 0).then_some(st)
        }?;
        #[allow(clippy::unnecessary_cast)] // 32-bit fields on 32-bit targets
        (st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some(st.st_ino as u64)
    }
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // The libc layer owns the clock: the policy crate bans it (its clippy.toml) and takes
    // the time from `Kernel::now_us`.
    *EPOCH.get_or_init(Instant::now)
}

/// The largest number of descriptors the process may open.
fn fd_limit() -> usize {
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

/// Most descriptors the table covers (the hard RLIMIT_NOFILE, up to this); the table is made
/// in chunks as sockets appear, so covering many costs nothing until they are used.
const MAX_FDS: usize = 1 << 24;

static SHIM: OnceLock<Shim> = OnceLock::new();

/// The shim, once initialised, outside the program's signal handlers: inside one (see
/// `signals`) every hook passes its call through and holds nothing.
pub fn shim() -> Option<&'static Shim> {
    SHIM.get().filter(|_| !crate::signals::in_handler())
}

/// The shim, even inside a signal handler: for the steps that allocate nothing and start
/// nothing (ending bursts at close, fork, exec and exit; what the program sets and reads of
/// its own options).
fn shim_anywhere() -> Option<&'static Shim> {
    SHIM.get()
}

thread_local! {
    /// The bursts the current thread wrote to.
    static MINE: RefCell<ThreadBursts> = const { RefCell::new(ThreadBursts::new()) };
}

/// Runs `f` with this thread's burst list. A signal handler that writes while this thread is
/// inside a hook finds the list borrowed: its write is simply not noted (the linger bound
/// still holds for it).
fn with_mine(f: impl FnOnce(&mut ThreadBursts)) {
    let _ = MINE.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            f(&mut m);
        }
    });
}

// ---- what the hooks call -------------------------------------------------------------

/// A new descriptor exists: manage it if it is a TCP stream socket.
pub fn adopt(fd: c_int) {
    if fd >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.adopt(&Libc, fd));
            log(format_args!("adopt fd {fd}"));
        }
    }
}

/// `fd` was accepted on `listener`.
pub fn adopt_accepted(listener: c_int, fd: c_int) {
    if fd >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.adopt_accepted(&Libc, listener, fd));
            log(format_args!("adopt fd {fd} (accepted on {listener})"));
        }
    }
}

/// The calling thread writes to `fd`; `carries_more`: the call can be made with `MSG_MORE`.
pub fn on_write(fd: c_int, carries_more: bool) -> WriteStep {
    let Some(s) = shim() else {
        return WriteStep::default();
    };
    quietly(|| {
        if s.needs_flusher(fd) {
            ensure_flusher(s);
        }
        let mut step = WriteStep::default();
        with_mine(|m| step = s.before_write(&Libc, fd, m, carries_more));
        if step.wake_flusher {
            wake_flusher(s);
        }
        step
    })
}

/// The write `step` was made for returned (`failed`: with an error).
pub fn after_write(fd: c_int, step: WriteStep, failed: bool) {
    if step.needs_after() {
        if let Some(s) = shim() {
            quietly(|| s.after_write(&Libc, fd, step, failed));
        }
    }
}

/// The program is about to set TCP_CORK on `fd`: see [`Shim::program_cork_begins`].
pub fn program_cork_begins(fd: c_int) -> bool {
    shim_anywhere().is_some_and(|s| s.program_cork_begins(fd))
}

/// The program's TCP_CORK call on `fd` returned (`on`: the value set, `None`: it failed).
pub fn program_cork_done(fd: c_int, was: bool, on: Option<bool>) {
    if let Some(s) = shim_anywhere() {
        s.program_cork_done(fd, was, on);
    }
}

/// The program holds bytes on `fd` itself (TCP_CORK, MSG_MORE, Nagle back on).
pub fn program_holds(fd: c_int) {
    if let Some(s) = shim_anywhere() {
        quietly(|| s.program_holds(&Libc, fd));
        log(format_args!("fd {fd}: the program holds its own bytes"));
    }
}

/// The program set `TCP_NODELAY` to `on` on `fd`: see [`Shim::program_nodelay`].
pub fn program_nodelay(fd: c_int, on: bool) {
    if let Some(s) = shim_anywhere() {
        quietly(|| s.program_nodelay(&Libc, fd, on));
        log(format_args!(
            "fd {fd}: the program set TCP_NODELAY {}",
            on as u8
        ));
    }
}

/// What the program sees of `TCP_NODELAY` (`nodelay`) or `TCP_CORK` on `fd`: see
/// [`Shim::program_view`].
pub fn program_view(fd: c_int, nodelay: bool) -> Option<bool> {
    quietly(|| shim_anywhere().and_then(|s| s.program_view(fd, nodelay)))
}

/// `fd` is about to be read, received on, shut down, spliced from, or replaced by
/// `dup2`/`dup3`: the burst of its socket ends, on every descriptor that names it (see
/// [`Shim::release_socket`]).
pub fn release_socket(fd: c_int) {
    if let Some(s) = shim() {
        quietly(|| s.release_socket(&Libc, fd));
    }
}

/// The calling thread turns to wait: the bursts it wrote to end. In cork mode (libautocork's
/// rule) only the poll family counts, and it releases everything.
pub fn on_wait(kind: Wait) {
    let Some(s) = shim() else { return };
    quietly(|| match (s.config.mode, kind) {
        (Mode::Nagless, _) => with_mine(|m| s.release_thread(&Libc, m)),
        (Mode::Cork, Wait::Poll) => s.release_all(&Libc),
        _ => {}
    });
}

/// A `waitpid`-like call with these `options`: a wait, unless `WNOHANG` makes it a look.
pub fn on_wait_unless_nohang(options: c_int) {
    if options & libc::WNOHANG == 0 {
        on_wait(Wait::Other);
    }
}

/// A wait of the poll, select or epoll families (`kind`), made by `call`. Only a wait that
/// puts the thread to sleep ends its bursts (in the default mode): one whose timeout is zero
/// (`never_blocks` says `Some(true)`) never does, and when the thread holds bursts, `probe`
/// (the same call with a zero timeout) tells first whether events are ready. If they are, or
/// the probe fails at once (a signal, a bad argument), its result is the call's, as the call
/// would have returned it without sleeping: the writes that follow (a relay forwarding the
/// next chunk, an event loop answering the next ready socket) join the same bursts, which the
/// linger bound still caps. A timeout that cannot be read (`None`: a bad pointer) makes no
/// probe: the call is made as asked, and fails as it would. Cork mode keeps libautocork's
/// rule: every poll releases.
pub fn waiting<R: Copy + Default + PartialEq>(
    kind: Wait,
    never_blocks: impl FnOnce() -> Option<bool>,
    probe: impl FnOnce() -> R,
    call: impl FnOnce() -> R,
) -> R {
    if let Some(s) = shim().filter(|s| s.config.mode == Mode::Nagless) {
        // A thread that holds nothing has nothing to end: its timeout is not even looked at.
        let mut holds = false;
        with_mine(|m| holds = !m.is_empty());
        if !holds {
            return call();
        }
        match never_blocks() {
            Some(true) => return call(),
            None => {
                on_wait(kind);
                return call();
            }
            Some(false) => {}
        }
        {
            let r = probe();
            if r != R::default() {
                s.stats
                    .ready_waits
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return r;
            }
        }
    }
    on_wait(kind);
    call()
}

/// A `timespec` of zero: the probe's timeout for the waits that only read theirs (select
/// writes the time left into its `timeval`: its probe passes a zero of its own). Two 64-bit
/// words are a zero of every layout (32-bit programs' 64-bit-time names read the same sixteen
/// bytes; the 32-bit layouts read the first eight).
pub static ZERO_TIME: [i64; 2] = [0, 0];

/// Whether the `timespec` or `timeval` at `t` is zero (a wait that never blocks); null is
/// "forever"; `None` if it cannot be read (the call itself then fails with `EFAULT`). Both
/// layouts put two integers of the same width one after the other, and zero is zero in any
/// width. Read as the kernel reads it, so a bad pointer is no fault here.
pub fn is_zero_time<T: Default + PartialEq + Copy>(t: *const T) -> Option<bool> {
    if t.is_null() {
        return Some(false);
    }
    let pair = crate::user_memory::read(t.cast::<[T; 2]>())?;
    Some(pair[0] == T::default() && pair[1] == T::default())
}

/// The zero-timeout probe of a `select` on descriptors below `n` (`f`, given the sets to
/// use): made on copies of the caller's sets `r`, `w`, `e`, of the bytes the kernel reads
/// and writes for `n` (a program may size its sets by `n`, smaller than an `fd_set`), written
/// back only when descriptors are ready (the result the call then returns); after 0 or an
/// error the caller's sets are untouched, for the call that follows. With `n` above
/// `FD_SETSIZE` (sets larger than an `fd_set`) it makes no probe and says "nothing ready":
/// the wait then ends the thread's bursts as any wait did. The sets are read and written as
/// the kernel does: a set that cannot be read makes no probe (the call then fails as it
/// would), one that cannot be written back fails the probe with `EFAULT`, as `select` does.
pub fn select_probe(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    f: impl FnOnce(*mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set) -> c_int,
) -> c_int {
    let set_size = std::mem::size_of::<libc::fd_set>();
    if n < 0 || n as usize > libc::FD_SETSIZE {
        return 0;
    }
    // The kernel's FDS_BYTES(n): whole longs.
    let long = std::mem::size_of::<libc::c_ulong>();
    let bytes = (n as usize).div_ceil(8 * long) * long;
    debug_assert!(bytes <= set_size);
    let as_bytes = |c: &mut libc::fd_set| {
        // SAFETY: an fd_set is plain bytes, `set_size` >= `bytes` of them.
        unsafe { std::slice::from_raw_parts_mut((c as *mut libc::fd_set).cast::<u8>(), bytes) }
    };
    let mut sets = [None, None, None];
    for (set, p) in sets.iter_mut().zip([r, w, e]) {
        if p.is_null() {
            continue;
        }
        // SAFETY: an all-zero fd_set is valid.
        let mut c: libc::fd_set = unsafe { std::mem::zeroed() };
        if !crate::user_memory::read_bytes(p.cast::<u8>().cast_const(), as_bytes(&mut c)) {
            return 0;
        }
        *set = Some(c);
    }
    // What the caller's sets hold now, for the write-back's probes.
    let was = sets;
    let [rc, wc, ec] = sets.each_mut().map(|c| {
        c.as_mut()
            .map_or(std::ptr::null_mut(), |s| s as *mut libc::fd_set)
    });
    let ready = f(rc, wc, ec);
    if ready > 0 {
        for ((to, from), mut was) in [r, w, e].into_iter().zip(sets.iter_mut()).zip(was) {
            if let (Some(from), Some(was)) = (from, was.as_mut()) {
                if !crate::user_memory::write_bytes(to.cast::<u8>(), as_bytes(from), as_bytes(was))
                {
                    set_errno(libc::EFAULT);
                    return -1;
                }
            }
        }
    }
    ready
}

/// What kind of wait a hook reports.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// poll, ppoll, select, pselect.
    Poll,
    /// epoll_wait and friends (libautocork's rule ignores them).
    Epoll,
    /// Condition variables, semaphores, sleeps, signal waits, waitpid.
    Other,
}

/// Before fork and exec: no burst may be half-held across them.
pub fn release_everything() {
    if let Some(s) = shim_anywhere() {
        quietly(|| {
            s.release_all(&Libc);
            // Not in a signal handler, where the thread-local may allocate on a thread's
            // first access: what the list holds is only a hint, and `release_all` ended
            // every burst it names.
            if !crate::signals::in_handler() {
                with_mine(|m| s.release_thread(&Libc, m));
            }
        });
    }
}

/// `fd` is being closed: end its burst, count what it sent, forget it.
pub fn on_close(fd: c_int) {
    if let Some(s) = shim_anywhere() {
        quietly(|| {
            if s.is_managed(fd) {
                // The held tail leaves first, so that the count includes it.
                s.release(&Libc, fd);
                crate::report::account(s, fd);
            }
            s.forget(&Libc, fd);
        });
    }
}

/// Makes `send`, the `MSG_MORE` form the shim chose for a program's `write`/`writev` on
/// `fd`: its result, or `None` if the descriptor is no socket any more (closed unseen, its
/// number reused by a file or pipe: `ENOTSOCK`, which has no side effects). The shim then
/// forgets it, errno is as before, and the caller makes the plain call.
pub fn held_send<R: Default + PartialOrd>(fd: c_int, send: impl FnOnce() -> R) -> Option<R> {
    let saved = errno();
    let r = send();
    if r >= R::default() || errno() != libc::ENOTSOCK {
        return Some(r);
    }
    if let Some(s) = shim() {
        quietly(|| s.forget(&Libc, fd));
        log(format_args!(
            "fd {fd}: no socket any more (closed unseen), forgotten"
        ));
    }
    set_errno(saved);
    None
}

/// `fd` is a new descriptor the shim does not manage (a socket other than TCP): whatever its
/// slot says of an earlier descriptor of that number is forgotten (no system call unless it
/// was managed).
pub fn forget(fd: c_int) {
    if fd >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.forget(&Libc, fd));
        }
    }
}

/// `new` now refers to what `old` refers to.
pub fn on_dup(old: c_int, new: c_int) {
    if new >= 0 {
        if let Some(s) = shim() {
            quietly(|| s.duplicate(&Libc, old, new));
        }
    }
}

// ---- the flusher ---------------------------------------------------------------------

/// Starts the flusher before the first burst is held, if none runs yet.
fn ensure_flusher(s: &'static Shim) {
    if s.claim_flusher_start() {
        start_or_hold_nothing(s);
    }
}

/// Starts the flusher; if it cannot start, the shim holds nothing in this process.
fn start_or_hold_nothing(s: &'static Shim) {
    if !start_flusher(s) {
        s.flusher_cannot_run(&Libc);
        log(format_args!(
            "cannot start the flusher thread: holding nothing"
        ));
    }
}

/// Wakes the flusher if it is parked (for a burst, or to write a stale stats file).
pub fn nudge_flusher(s: &Shim) {
    let word = s.park_word() as *const _ as *const u32;
    // SAFETY: FUTEX_WAKE on the address of a live static atomic; no memory is written.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    };
}

fn wake_flusher(s: &'static Shim) {
    if s.claim_flusher_start() {
        start_or_hold_nothing(s);
    } else {
        nudge_flusher(s);
    }
}

/// Starts the flusher with every signal blocked, so that signals the program blocks in its
/// own threads (sigwait, signalfd, sigsuspend loops) are never delivered to it.
fn start_flusher(s: &'static Shim) -> bool {
    // SAFETY: sigfillset/pthread_sigmask on local, initialised sigset_t values.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    };
    let spawned = std::thread::Builder::new()
        .name("nagless-flusher".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            // A panic must not leave bursts held with nobody to release them.
            if std::panic::catch_unwind(|| flusher_loop(s)).is_err() {
                s.flusher_cannot_run(&Libc);
                write_formatted(
                    2,
                    format_args!(
                        "nagless: the flusher thread failed; holding nothing from now on\n"
                    ),
                );
            }
        });
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    spawned.is_ok()
}

fn flusher_loop(s: &'static Shim) -> ! {
    let mut idle = nagless_shim_policy::FlusherState::default();
    loop {
        match s.flusher_tick(&Libc, &mut idle) {
            FlusherStep::Sleep(d) => {
                // Never while bursts are held: a slow file system must not delay them.
                if s.park_word().load(std::sync::atomic::Ordering::Acquire) == 0 {
                    crate::report::refresh(s);
                }
                std::thread::sleep(d)
            }
            FlusherStep::Park => {
                crate::report::refresh(s);
                // A stats file not yet current: wake once more to write it.
                let stale = crate::report::stale(s);
                let timeout = libc::timespec {
                    tv_sec: crate::report::STATS_FILE_EVERY.as_secs() as libc::time_t,
                    tv_nsec: 0,
                };
                let word = s.park_word() as *const _ as *const u32;
                // SAFETY: FUTEX_WAIT on a live static atomic: sleeps while it reads 0 (at most
                // `timeout`, a live local, when the stats file is stale).
                unsafe {
                    libc::syscall(
                        libc::SYS_futex,
                        word,
                        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                        0,
                        if stale {
                            &timeout as *const libc::timespec
                        } else {
                            std::ptr::null()
                        },
                    )
                };
                s.flusher_unparked();
            }
        }
    }
}

extern "C" fn after_fork_child() {
    // Also after a fork made in a signal handler: only atomics are stored.
    if let Some(s) = shim_anywhere() {
        s.after_fork_child();
    }
}

// ---- start-up, exit, log -------------------------------------------------------------

/// The debug log: a descriptor of ours, and the file it must still be (a daemon that closes
/// every descriptor may get this number back for one of its own files).
struct Log {
    fd: c_int,
    dev: u64,
    ino: u64,
}

static LOG: OnceLock<Log> = OnceLock::new();

fn open_log(path: &str) -> Option<Log> {
    use std::os::fd::IntoRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    let fd = f.into_raw_fd();
    // Far from the low numbers programs use and reuse.
    // SAFETY: plain fcntl on our own descriptor.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 900) };
    let fd = if high >= 0 {
        // SAFETY: closing the low duplicate we own.
        unsafe { libc::close(fd) };
        high
    } else {
        fd
    };
    Some(Log {
        fd,
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// Writes a debug line if `NAGLESS_LOG` is set and its file is still ours.
pub fn log(args: std::fmt::Arguments<'_>) {
    let Some(l) = LOG.get() else { return };
    quietly(|| {
        #[allow(clippy::unnecessary_cast)] // 32-bit fields on 32-bit targets
        // SAFETY: fstat fills a zeroed stat for a descriptor number; failure is handled.
        let same = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(l.fd, &mut st) == 0
                && st.st_dev as u64 == l.dev
                && st.st_ino as u64 == l.ino
        };
        if same {
            let pid = std::process::id();
            let now = Libc.now_us();
            write_formatted(l.fd, format_args!("nagless[{pid}] {now:>10} us {args}\n"));
        }
    });
}

/// Formats into a stack buffer (no allocation: this runs inside interposed calls) and writes
/// the result to `fd`; anything beyond 512 bytes is cut.
pub fn write_formatted(fd: c_int, args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut buf = [0u8; 512];
    let mut c = std::io::Cursor::new(&mut buf[..]);
    let _ = c.write_fmt(args);
    let n = c.position() as usize;
    let _ = write_all_raw(fd, &buf[..n]);
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

/// The descriptors a program may inherit as its connection: stdin, stdout and stderr.
const INHERITED: [c_int; 3] = [0, 1, 2];

/// Adopts the TCP sockets the program inherited as stdin, stdout or stderr (an inetd-style
/// service, a helper a server starts per connection), unless their owner holds bytes on them
/// (`TCP_CORK` set): a read of any of them ends the bursts of all that name the same socket.
/// Their `TCP_NODELAY` may be on (set by the parent, or the parent's shim): the program, which
/// made no choice, is held as any other.
fn adopt_inherited(s: &Shim) {
    for (n, &fd) in INHERITED.iter().enumerate() {
        if !Libc.is_tcp_stream(fd) {
            continue;
        }
        if sockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK) != Some(0) {
            log(format_args!(
                "inherited fd {fd}: corked by its owner, left alone"
            ));
            continue;
        }
        let nodelay = sockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY) == Some(1);
        s.adopt_inherited(&Libc, fd, nodelay, &INHERITED[..n]);
        log(format_args!("adopt inherited fd {fd}"));
    }
}

extern "C" fn at_exit() {
    let Some(s) = shim_anywhere() else { return };
    quietly(|| {
        s.release_all(&Libc);
        crate::report::at_exit(s);
    });
}

extern "C" fn init_hook() {
    quietly(|| {
        crate::symbols::resolve_all();
        let _ = epoch();
        let (config, complaints) = Config::from_env(|k| std::env::var(k).ok());
        if let Some(log) = std::env::var("NAGLESS_LOG").ok().and_then(|p| open_log(&p)) {
            let _ = LOG.set(log);
        }
        crate::report::init(std::env::var_os("NAGLESS_STATS_FILE"));
        for c in &complaints {
            log(format_args!("ignored: {c}"));
        }
        let size = fd_limit().clamp(1024, MAX_FDS);
        if SHIM.set(Shim::new(config, size)).is_err() {
            return;
        }
        if let Some(s) = SHIM.get() {
            adopt_inherited(s);
        }
        // SAFETY: registering plain extern "C" functions with no arguments.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(after_fork_child));
        }
    });
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init_hook;
