//! The shim's state: [`Shim`], one [`Slot`] per descriptor in a table made by chunks as
//! sockets appear, the counters and the flusher's flags; and the [`Kernel`] it acts through.
//! What the program's calls do to it is in `bursts`, `program_options` and `flusher`.

use std::sync::OnceLock;

use crate::slot::Slot;
use crate::sync::Ordering::*;
use crate::sync::{AtomicBool, AtomicU32, AtomicUsize};
use crate::*;

/// The socket calls the policy needs, provided by the libc layer (or a fake in tests).
pub trait Kernel {
    /// Whether `fd` is a TCP stream socket over IPv4 or IPv6.
    fn is_tcp_stream(&self, fd: i32) -> bool;
    /// Sets `TCP_NODELAY`.
    fn set_nodelay(&self, fd: i32) -> bool;
    /// Sets or clears `TCP_CORK`; false if the kernel refused.
    fn set_cork(&self, fd: i32, on: bool) -> bool;
    /// Microseconds on a monotonic clock.
    fn now_us(&self) -> u64;
    /// What identifies the socket `fd` refers to, the same for every descriptor of it (its
    /// inode number); `None` if unknown.
    fn socket_id(&self, fd: i32) -> Option<u64>;
    /// Clears `TCP_NODELAY` (the kernel's Nagle clocks the socket's small writes again).
    fn clear_nodelay(&self, fd: i32) -> bool;
    /// What `fd`'s kernel holds unsent and how many data segments it sent (`TCP_INFO`);
    /// `None` if unknown. Read under the socket's lock, which a write takes to queue its
    /// bytes (Linux's `tcp_get_info` takes `lock_sock_fast`, `tcp_sendmsg` `lock_sock`):
    /// the clock's invariant 1 rests on it.
    fn sending(&self, fd: i32) -> Option<Sending>;
    /// Sets `TCP_QUICKACK` (the kernel acknowledges what it received at once, and goes on
    /// doing so until it next decides to delay).
    fn set_quickack(&self, fd: i32) -> bool;
    /// Sets `TCP_DELACK_MAX_US` (Linux 6.15); false if the kernel refused.
    fn set_delack_max_us(&self, fd: i32, us: u32) -> bool;
}

/// Descriptors per table chunk; a chunk is allocated when the first socket in its range is
/// adopted, so an idle process with a high descriptor limit holds no table at all. (Eight in
/// the loom models, whose checker tracks every atomic.)
pub(crate) const CHUNK: usize = if cfg!(loom) { 8 } else { 4096 };

/// The shim's state: one slot per descriptor, counters, and the flusher's bookkeeping.
pub struct Shim {
    /// Settings.
    pub config: Config,
    /// Chunks of [`CHUNK`] slots, made on first use.
    pub(crate) chunks: Box<[OnceLock<Box<[Slot]>>]>,
    /// Highest descriptor ever managed, plus one: the flusher's scan covers this range.
    pub(crate) high: AtomicUsize,
    /// Bursts in progress; the flusher parks on this word when it is zero.
    pub(crate) corked: AtomicU32,
    /// The flusher is parked (waiting on `corked`): the next burst must wake it.
    pub(crate) flusher_parked: AtomicBool,
    /// The process has no flusher (not started yet, or a forked child): start one.
    pub(crate) flusher_missing: AtomicBool,
    /// The flusher could not be started (or died): nothing may be held, since nothing
    /// would release a burst its writer does not end.
    pub(crate) hold_nothing: AtomicBool,
    /// A forked child: until it has a flusher, the first write of each burst leaves plainly
    /// and only a second one starts the thread (see [`Shim::first_write_plainly`]).
    pub(crate) forked: AtomicBool,
    /// Some socket of this process was clocked once ([`Shim::clocked_write`] looks no
    /// further while none was). Written once, read by every write: beside the read-mostly
    /// flags, not the counters.
    pub(crate) any_clocked: AtomicBool,
    /// Counters.
    pub stats: Stats,
}

impl Shim {
    /// A shim covering descriptors `0..size` (rounded up to whole chunks).
    pub fn new(config: Config, size: usize) -> Shim {
        Shim {
            config,
            chunks: (0..size.div_ceil(CHUNK)).map(|_| OnceLock::new()).collect(),
            high: AtomicUsize::new(0),
            corked: AtomicU32::new(0),
            flusher_parked: AtomicBool::new(false),
            flusher_missing: AtomicBool::new(true),
            hold_nothing: AtomicBool::new(false),
            forked: AtomicBool::new(false),
            any_clocked: AtomicBool::new(false),
            stats: Stats::default(),
        }
    }

    /// The slot of `fd`, if its chunk exists.
    #[inline]
    pub(crate) fn slot(&self, fd: i32) -> Option<&Slot> {
        let i = usize::try_from(fd).ok()?;
        self.chunks.get(i / CHUNK)?.get().map(|c| &c[i % CHUNK])
    }

    /// The slot of `fd`, making its chunk if needed (adoption only).
    pub(crate) fn slot_or_make(&self, fd: i32) -> Option<&Slot> {
        let i = usize::try_from(fd).ok()?;
        let chunk = self.chunks.get(i / CHUNK)?;
        Some(&chunk.get_or_init(|| (0..CHUNK).map(|_| Slot::default()).collect())[i % CHUNK])
    }

    /// Slots that exist, with their descriptors, up to the highest one ever managed.
    pub(crate) fn live_slots(&self) -> impl Iterator<Item = (i32, &Slot)> + '_ {
        let high = self.high.load(Relaxed);
        self.chunks
            .iter()
            .enumerate()
            .take(high.div_ceil(CHUNK))
            .filter_map(|(n, c)| c.get().map(|c| (n, c)))
            .flat_map(move |(n, c)| {
                c.iter()
                    .enumerate()
                    .map(move |(k, s)| ((n * CHUNK + k) as i32, s))
            })
            .take_while(move |(fd, _)| (*fd as usize) < high)
    }

    /// The managed descriptors in `first..=last` (a `close_range`): only as far as the highest
    /// descriptor ever managed, whatever the range's end.
    pub fn managed_in(&self, first: u32, last: u32) -> impl Iterator<Item = i32> + '_ {
        let end = (last as usize).min(self.high.load(Relaxed).saturating_sub(1));
        (first as usize..=end)
            .map(|fd| fd as i32)
            .filter(|&fd| fd >= 0 && self.is_managed(fd))
    }

    /// Whether `fd` is a socket we manage.
    pub fn is_managed(&self, fd: i32) -> bool {
        self.slot(fd).is_some_and(|s| s.flags.peek().is_managed())
    }

    /// Whether any burst is held in the process.
    pub fn holds_any(&self) -> bool {
        self.corked.load(Acquire) != 0
    }

    /// Whether the shim currently holds a burst on `fd`.
    #[cfg(test)]
    pub(crate) fn is_corked(&self, fd: i32) -> bool {
        self.slot(fd).is_some_and(|s| s.flags.peek().is_held())
    }

    /// Bursts in progress.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u32 {
        self.corked.load(Acquire)
    }

    /// Descriptors that are managed now (for the exit report).
    pub fn managed_fds(&self) -> impl Iterator<Item = i32> + '_ {
        self.live_slots()
            .filter(|(_, s)| s.flags.peek().is_managed())
            .map(|(fd, _)| fd)
    }
}
