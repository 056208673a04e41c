//! What the wait hooks call: a wait that puts the thread to sleep ends the bursts it wrote
//! ([`on_wait`]); one that would not ([`waiting`]: a zero timeout, or events already ready,
//! which a probe with a zero timeout finds) does not. With the probes' helpers: the zero
//! timeout, reading the caller's timeout, and `select`'s probe on copies of its sets.
#![allow(unsafe_code)]

use libc::c_int;

use nagless_shim_policy::Mode;

use crate::hooks::{shim, with_mine};
use crate::sys::{quietly, set_errno, Libc};

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
    // One probe per page for the three sets (they usually share one), not two per set.
    let mut checked = crate::user_memory::Checked::default();
    let mut sets = [None, None, None];
    for (set, p) in sets.iter_mut().zip([r, w, e]) {
        if p.is_null() {
            continue;
        }
        // SAFETY: an all-zero fd_set is valid.
        let mut c: libc::fd_set = unsafe { std::mem::zeroed() };
        if !crate::user_memory::read_bytes_in(
            &mut checked,
            p.cast::<u8>().cast_const(),
            as_bytes(&mut c),
        ) {
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
                let (to, from, was) = (to.cast::<u8>(), as_bytes(from), as_bytes(was));
                if !crate::user_memory::write_bytes_in(&mut checked, to, from, was) {
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
