//! The owner's lane ([`Lane`]): normal writes that the writing handle (the stream, or its
//! write half) keeps itself, without taking the shared lock, while no other party could need
//! them before that handle's next call.

use ::tokio::io::AsyncWrite;

use super::shared::Shared;
use crate::clock::Clock;
use crate::coalescer::Coalescer;
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
/// under the same lock, and so does dropping it.
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

    /// Closes the lane, handing what it holds to `core` (under the shared lock).
    #[inline]
    pub(super) fn hand_over(&mut self, core: &mut Coalescer, clock: &mut Clock) {
        self.end = 0;
        if self.writes > 0 {
            self.hand_over_slow(core, clock);
        }
    }

    #[cold]
    fn hand_over_slow(&mut self, core: &mut Coalescer, clock: &mut Clock) {
        // No linger while the lane was open: the time is only the core's input, never read.
        let now = clock.for_write(core);
        core.write_staged(&self.bytes, self.writes, now);
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
    pub(super) fn open<T: AsyncWrite + Unpin>(&mut self, shared: &Shared<T>) {
        debug_assert_eq!(self.writes, 0, "opened while holding bytes");
        if self.usable && shared.others_quiet() {
            self.end = shared.core.quiet_room().min(LANE_MAX);
        }
    }
}
