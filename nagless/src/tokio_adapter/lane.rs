//! The owner's lane ([`Lane`]): normal writes that the writing handle (the stream, or its
//! write half) keeps itself, without taking the shared lock, while no other party could need
//! them before that handle's next call; and [`Owner`], that handle's hold on the shared
//! state, whose only way in hands the lane's bytes over first.

use super::shared::{lock, Locked, Shared};
use super::sync::{Arc, Mutex, MutexGuard};
use super::tasks::flush_on_drop;
use crate::driver::{Driver, Plain};
use crate::policy::{FlushPolicy, Linger};

/// Most bytes the lane holds before it hands them over (one copy into the shared queue).
const LANE_MAX: usize = 64 * 1024;

/// Normal writes held back by the handle that made them.
///
/// Invariant: the lane holds bytes only while it is open, and it is opened (under the shared
/// lock) only when nobody but its handle can act on those bytes before that handle's next
/// call: the policy has no linger (no timer task would need them) and either does not flush
/// before reads or no other handle reads, no flusher runs and no error waits. It
/// takes at most what [`Coalescer::quiet_room`] allows, so writing them could not have made
/// anything due. Every other call of the handle hands the bytes over first (order is kept),
/// under the same lock, and so does dropping it: the handle reaches the shared state only
/// through [`Owner::lock`], which does it.
#[derive(Debug)]
pub(super) struct Lane {
    bytes: Vec<u8>,
    /// One more than the length the lane may reach; 0: closed.
    end: usize,
    /// Writes whose bytes the lane holds.
    writes: u64,
    /// The capacity the last handed-over buffer had: the next one starts there (the lane
    /// keeps no memory while it holds nothing).
    hint: usize,
    /// The policy allows the lane for this handle: no linger, and no other handle (a read
    /// half) that flushes the shared queue before it reads. (A tokio stream's policy is set
    /// once, at its making.)
    usable: bool,
}

impl Lane {
    /// A closed lane for a handle under `policy`; `reader_elsewhere` for a write half.
    pub(super) fn new(policy: &FlushPolicy, reader_elsewhere: bool) -> Self {
        Self {
            bytes: Vec::new(),
            end: 0,
            writes: 0,
            hint: 0,
            usable: policy.linger == Linger::Off && !(reader_elsewhere && policy.before_read),
        }
    }

    /// Keeps `data` if the lane is open and has room for it.
    #[inline(always)]
    pub(super) fn push(&mut self, data: &[u8]) -> bool {
        if self.bytes.len() + data.len() >= self.end {
            return false;
        }
        if self.bytes.capacity() - self.bytes.len() < data.len() {
            self.grow(data.len());
        }
        self.bytes.extend_from_slice(data);
        self.writes += 1;
        true
    }

    /// Bytes held.
    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Writes held.
    pub(super) fn writes(&self) -> u64 {
        self.writes
    }

    /// Closes the lane, handing what it holds to the driver (under the shared lock).
    #[inline]
    fn hand_over(&mut self, driver: &mut Driver<Plain>) {
        self.end = 0;
        if self.writes > 0 {
            self.hand_over_slow(driver);
        }
    }

    #[cold]
    fn hand_over_slow(&mut self, driver: &mut Driver<Plain>) {
        driver.write_staged(&self.bytes, self.writes);
        self.writes = 0;
        // Freed: a handle that goes idle keeps no buffer; the next one starts this large.
        self.hint = self.bytes.capacity();
        self.bytes = Vec::new();
    }

    /// Makes room for `more` bytes: at least the last buffer's capacity, else doubling.
    #[cold]
    fn grow(&mut self, more: usize) {
        let want = (self.bytes.len() + more)
            .max(self.hint)
            .max(2 * self.bytes.capacity());
        self.bytes
            .reserve_exact(want.min(LANE_MAX) - self.bytes.len());
    }

    /// Opens the lane if the state allows (see the invariant), under the shared lock.
    #[inline]
    pub(super) fn open<T, S>(&mut self, shared: &Shared<T, S>) {
        debug_assert_eq!(self.writes, 0, "opened while holding bytes");
        if self.usable && shared.others_quiet() {
            self.end = shared.driver.core.quiet_room().min(LANE_MAX);
        }
    }
}

/// The writing handle's hold on the shared state (the stream, or its write half): the state
/// and the handle's own [`Lane`]. Its fields are private: the handle reaches the state for
/// any call that may act on the queue only through [`lock`](Self::lock), which hands the
/// lane's bytes over first, so that a new call cannot forget to and reorder bytes.
pub(crate) struct Owner<T> {
    shared: Arc<Mutex<Shared<T, Plain>>>,
    lane: Lane,
}

impl<T> Owner<T> {
    /// `shared`'s writing handle, with a lane for `reader_elsewhere` as in [`Lane::new`].
    pub(super) fn new(shared: Arc<Mutex<Shared<T, Plain>>>, reader_elsewhere: bool) -> Self {
        let lane = Lane::new(lock(&shared).driver.core.policy(), reader_elsewhere);
        Owner { shared, lane }
    }

    /// The shared state for a call of the handle, with what the lane held handed over first;
    /// the lane is opened again (if the state allows) when the guard ends.
    #[inline]
    pub(crate) fn lock(&mut self) -> Locked<'_, T, Plain> {
        let mut guard = lock(&self.shared);
        self.lane.hand_over(&mut guard.driver);
        Locked::with_lane(&self.shared, guard, &mut self.lane)
    }

    /// The shared state to look at (counters, the socket's `TCP_INFO`), not to act on: the
    /// lane's bytes stay where they are (see [`lane`](Self::lane)).
    pub(crate) fn peek(&self) -> Peek<'_, T> {
        Peek(lock(&self.shared))
    }

    /// The lane, to look at.
    pub(crate) fn lane(&self) -> &Lane {
        &self.lane
    }

    /// Keeps `data` in the lane if it is open and has room for it.
    #[inline(always)]
    pub(crate) fn push(&mut self, data: &[u8]) -> bool {
        self.lane.push(data)
    }

    /// The shared state, for another handle of the same stream (a read half, which keeps no
    /// lane), or to compare with one.
    pub(crate) fn share(&self) -> Arc<Mutex<Shared<T, Plain>>> {
        Arc::clone(&self.shared)
    }
}

impl<T: ::tokio::io::AsyncWrite + Unpin + 'static> Owner<T> {
    /// The handle is going away: hands the lane over, then releases the handle's share of
    /// the stream (the last one closes it, see [`flush_on_drop`]).
    pub(crate) fn drop_handle(&mut self) {
        if self.lane.writes() > 0 {
            drop(self.lock());
        }
        flush_on_drop(&self.shared);
    }
}

/// The shared state, locked to be looked at only.
pub(crate) struct Peek<'a, T>(MutexGuard<'a, Shared<T, Plain>>);

impl<T> std::ops::Deref for Peek<'_, T> {
    type Target = Shared<T, Plain>;
    fn deref(&self) -> &Shared<T, Plain> {
        &self.0
    }
}
