//! The sans-IO coalescing core: pending output plus the flush policy, as a pure state machine.
//!
//! [`Coalescer`] performs no I/O and reads no clock: time is passed in. Its inputs are "the
//! application wrote", "is about to read", "flushed", "closes", "the socket took n bytes",
//! "the socket would block" and "time is now T"; its outputs are "send these bytes now"
//! ([`Coalescer::poll_transmit`] + [`Coalescer::io_slices`]) and "wake me at T"
//! ([`Coalescer::poll_timeout`]). [`drive`] runs that loop against any [`Transport`], which is
//! how the real sockets in [`crate::stream`] and the fake ones in tests share one code path.

use std::io::IoSlice;
use std::time::Instant;

use crate::policy::{FlushPolicy, FlushReason, Urgency};
use crate::queue::SendQueue;

mod drive;
mod quiet;

pub use drive::{drive, Drive, Transport};

/// Segment size assumed until the I/O layer reports the socket's MSS (an Ethernet path).
pub const DEFAULT_SEGMENT: usize = 1448;

/// Most slices handed to one gathered send (`sendmsg`, `writev`, `WSASend`): the only limit on
/// slices in the crate (well below `IOV_MAX`, 1024 on Linux, macOS and the BSDs).
///
/// ```
/// use std::io::IoSlice;
/// use std::time::Instant;
/// use nagless::{Coalescer, FlushPolicy, Urgency, MAX_IOV};
///
/// let mut core = Coalescer::new(FlushPolicy::default());
/// core.write(b"header", Urgency::Normal, Instant::now());
/// core.write(b"body", Urgency::SendNow, Instant::now());
/// let tx = core.poll_transmit(Instant::now()).unwrap();
/// let mut slices = [IoSlice::new(&[]); MAX_IOV]; // enough for any one send
/// let n = core.io_slices(&mut slices, tx.len);
/// assert_eq!(slices[..n].iter().map(|s| s.len()).sum::<usize>(), 10);
/// ```
pub const MAX_IOV: usize = 64;

/// Per-stream counters.
///
/// ```
/// use std::io::IoSlice;
/// use std::time::Instant;
/// use nagless::{drive, Coalescer, FlushPolicy, FlushReason, Transport, Urgency};
///
/// struct Sink(Vec<u8>); // a socket that takes everything
/// impl Transport for Sink {
///     fn send(&mut self, bufs: &[IoSlice<'_>], _more: bool) -> std::io::Result<usize> {
///         bufs.iter().for_each(|b| self.0.extend_from_slice(b));
///         Ok(bufs.iter().map(|b| b.len()).sum())
///     }
/// }
///
/// let mut core = Coalescer::new(FlushPolicy::default());
/// let now = Instant::now();
/// core.write(b"GET / HTTP/1.1\r\n", Urgency::Normal, now);
/// core.write(b"\r\n", Urgency::Normal, now);
/// core.before_read();
/// drive(&mut core, &mut Sink(Vec::new()), now)?;
/// let stats = core.stats();
/// assert_eq!((stats.writes, stats.flushes, stats.bytes_sent), (2, 1, 18));
/// assert_eq!(stats.flushes_for(FlushReason::BeforeRead), 1);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Writes accepted from the application.
    pub writes: u64,
    /// Bytes accepted from the application.
    pub bytes_written: u64,
    /// Flushes that sent at least one byte (one flush may take several syscalls).
    pub flushes: u64,
    /// Syscalls the stream made beside the application's reads: every send (short,
    /// interrupted, blocked and failed ones included), every check for waiting input before a
    /// read and every `TCP_INFO` query for the segment size.
    pub syscalls: u64,
    /// Checks for waiting input made before reads (a non-blocking read), included in
    /// `syscalls`.
    pub input_checks: u64,
    /// `TCP_INFO` queries for the socket's segment size, included in `syscalls`.
    pub segment_checks: u64,
    /// Queries of the kernel's send queue under [`FlushPolicy::clocked`] (`SIOCOUTQ`,
    /// `SIOCOUTQNSD`), included in `syscalls`.
    pub clock_checks: u64,
    /// Clocked sends the kernel was asked to hold for the next ACK (`MSG_MORE`, data in
    /// flight).
    pub held_for_ack: u64,
    /// Pushes of bytes the kernel held (`TCP_NODELAY` set again): nothing was left in flight
    /// to bring an ACK, they waited past the bound, or the stream was asked to send now;
    /// included in `syscalls`.
    pub pushes: u64,
    /// Send syscalls that returned `WouldBlock`.
    pub would_block: u64,
    /// Bytes the socket accepted.
    pub bytes_sent: u64,
    /// Flushes counted by the reason that started them, indexed like [`FlushReason::ALL`]
    /// (read with [`flushes_for`](Self::flushes_for)).
    flushes_by_reason: [u64; FlushReason::ALL.len()],
}

impl Stats {
    /// Flushes started for `reason`.
    pub fn flushes_for(&self, reason: FlushReason) -> u64 {
        self.flushes_by_reason[reason.index()]
    }
}

/// What the socket should be given now.
///
/// ```
/// use std::time::Instant;
/// use nagless::{Coalescer, FlushPolicy, FlushReason, Transmit, Urgency};
///
/// let mut core = Coalescer::new(FlushPolicy::default());
/// core.write(b"PING\r\n", Urgency::SendNow, Instant::now());
/// let tx = core.poll_transmit(Instant::now());
/// assert_eq!(tx, Some(Transmit { len: 6, reason: FlushReason::Urgent }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes due now, from the front of the queue.
    pub len: usize,
    /// Why they are due.
    pub reason: FlushReason,
}

/// Pending output and the flush policy: the pure heart of nagless.
///
/// # How to drive it
/// 1. **Configure**: [`new`](Self::new) with a [`FlushPolicy`]; report the socket's send MSS
///    with [`set_segment_size`](Self::set_segment_size) when known.
/// 2. **Application events**: [`write`](Self::write) / [`write_owned`](Self::write_owned) for
///    each message; [`before_read`](Self::before_read) before reading or waiting for input;
///    [`flush`](Self::flush) and [`close`](Self::close) when the caller asks.
/// 3. **Transmit**: after every event, loop on [`poll_transmit`](Self::poll_transmit); for each
///    [`Transmit`] gather [`io_slices`](Self::io_slices), hand them to the socket, then report
///    [`on_sent`](Self::on_sent), [`on_would_block`](Self::on_would_block) (stop; try again when
///    writable) or [`on_error`](Self::on_error). [`drive`] does exactly this.
/// 4. **Timers**: sleep no later than [`poll_timeout`](Self::poll_timeout); when it passes, call
///    `poll_transmit` again with the new time.
///
/// Non-goals: no socket, no clock, no threads, no allocation policy beyond the queue; it never
/// reorders, drops or duplicates a byte.
///
/// # Example
///
/// The write-write-read exchange, driven by hand: two writes wait, the read makes them due,
/// and they leave as one send.
///
/// ```
/// use std::io::IoSlice;
/// use std::time::Instant;
/// use nagless::{Coalescer, FlushPolicy, FlushReason, Urgency, MAX_IOV};
///
/// let mut core = Coalescer::new(FlushPolicy::default());
/// let now = Instant::now();
/// core.write(b"GET / HTTP/1.1\r\n", Urgency::Normal, now);
/// core.write(b"Host: a\r\n\r\n", Urgency::Normal, now);
/// assert_eq!(core.poll_transmit(now), None); // nothing due yet: the burst may go on
/// core.before_read(); // the program is about to wait for the answer
/// let tx = core.poll_transmit(now).unwrap();
/// assert_eq!((tx.len, tx.reason), (27, FlushReason::BeforeRead));
/// let mut slices = [IoSlice::new(&[]); MAX_IOV];
/// let n = core.io_slices(&mut slices, tx.len); // hand slices[..n] to one sendmsg
/// let sent: Vec<u8> = slices[..n].iter().flat_map(|s| s.iter().copied()).collect();
/// assert_eq!(sent, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
/// core.on_sent(tx.len); // the socket took everything
/// assert_eq!((core.pending(), core.poll_transmit(now)), (0, None));
/// ```
#[derive(Debug)]
pub struct Coalescer {
    /// The pending bytes and what decides when they leave, with the quiet lane's end kept in
    /// step (see [`quiet`]).
    q: quiet::Quiet,
    /// Set when the transmit in progress is the first of a flush (for counting flushes).
    flush_open: bool,
    stats: Stats,
}

impl Coalescer {
    /// A coalescer with an empty queue.
    pub fn new(policy: FlushPolicy) -> Self {
        Self {
            q: quiet::Quiet::new(quiet::State {
                queue: SendQueue::new(),
                policy,
                segment: DEFAULT_SEGMENT,
                must_send: 0,
                must_reason: FlushReason::Explicit,
                oldest_unflushed: None,
                deadline: None,
                first_segment_out: false,
                last_write_small: false,
                flush_delimits: false,
            }),
            flush_open: false,
            stats: Stats::default(),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &FlushPolicy {
        &self.q.policy
    }

    /// Replaces the policy; pending bytes stay queued and are judged by the new one.
    pub fn set_policy(&mut self, policy: FlushPolicy) {
        let mut s = self.q.edit();
        s.policy = policy;
        let oldest = s.oldest_unflushed;
        s.set_oldest_unflushed(oldest);
    }

    /// Sets the segment size the threshold rounds to (the socket's send MSS).
    pub fn set_segment_size(&mut self, mss: usize) {
        self.q.edit().segment = mss.max(1);
    }

    /// The segment size in use.
    pub fn segment_size(&self) -> usize {
        self.q.segment
    }

    /// Bytes pending (accepted, not yet sent).
    pub fn pending(&self) -> usize {
        self.q.queue.len()
    }

    /// Bytes that a flush point already made due but the socket has not taken.
    pub fn must_send(&self) -> usize {
        self.q.must_send
    }

    /// True when pending bytes exceed the high-water mark: writers should wait.
    pub fn over_high_water(&self) -> bool {
        self.q.queue.len() >= self.q.policy.high_water
    }

    /// How many more bytes a write may queue before the high-water mark: the I/O layers
    /// accept at most this much of one write (a short write, as `BufWriter` passes large
    /// writes through), so one huge write never copies more than the mark allows.
    pub fn room(&self) -> usize {
        self.q.policy.high_water.saturating_sub(self.q.queue.len())
    }

    /// Counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    fn count_write(&mut self, len: usize) {
        self.stats.writes += 1;
        self.stats.bytes_written += len as u64;
    }

    /// Queues a copy of `data`.
    pub fn write(&mut self, data: &[u8], urgency: Urgency, now: Instant) {
        self.count_write(data.len());
        let mut s = self.q.edit();
        s.queue.push_copy(data);
        s.after_write(data.len(), urgency, now);
    }

    /// Queues an owned buffer; large ones are sent later without another copy.
    pub fn write_owned(&mut self, data: Vec<u8>, urgency: Urgency, now: Instant) {
        let len = data.len();
        self.count_write(len);
        let mut s = self.q.edit();
        s.queue.push_owned(data);
        s.after_write(len, urgency, now);
    }

    /// The fast path of a normal write, for a caller that knows the pending deadline (if any,
    /// see [`poll_timeout`](Self::poll_timeout)) has not passed: queues `data` and returns true
    /// if that makes nothing due, so that no time and no transmit check are needed. Returns
    /// false without queuing anything when the write needs the full path: it would open a
    /// linger window (its arrival time matters), reach the threshold or the high-water mark,
    /// need a new buffer, or bytes are already due.
    ///
    /// Its cost is one comparison with a limit every other call keeps up to date, and the
    /// copy.
    #[inline]
    pub fn write_if_nothing_due(&mut self, data: &[u8]) -> bool {
        if !self.q.push_quiet(data) {
            return false;
        }
        self.count_write(data.len());
        true
    }

    /// One more than the bytes that normal writes, in any number, may add with nothing
    /// becoming due and no time needed; 0 if none may (bytes are due, or a linger window
    /// needs opening). The quiet lane is this room cut to the tail buffer; an I/O layer may
    /// also hold back up to this many bytes of normal writes and hand them over later with
    /// [`write_staged`](Self::write_staged), if nothing else can act on the queue meanwhile.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn quiet_room(&self) -> usize {
        self.q.quiet_room()
    }

    /// Queues `data`, the bytes of `writes` normal writes an I/O layer held back (at most
    /// [`quiet_room`](Self::quiet_room) − 1 of them, taken while nothing else acted on the
    /// queue), counted as that many writes. They are copied as the writes would have been
    /// (into the tail buffer: the queue's slices are the same as without holding them back).
    /// Nothing becomes due.
    #[cfg(feature = "tokio")]
    pub(crate) fn write_staged(&mut self, data: &[u8], writes: u64, now: Instant) {
        let len = data.len();
        debug_assert!(writes > 0 && len < self.quiet_room());
        self.stats.writes += writes;
        self.stats.bytes_written += len as u64;
        let mut s = self.q.edit();
        s.queue.push_copy(data);
        s.after_write(len, Urgency::Normal, now);
        debug_assert_eq!(s.must_send, 0, "held-back writes made nothing due");
    }

    /// The application flushed: everything pending is due (unless the policy makes flushes
    /// hints: [`FlushPolicy::explicit_flush`]).
    pub fn flush(&mut self) {
        self.flush_for(self.q.policy.clocked);
    }

    /// The application flushed; with `clocked`, everything pending is due for a clocked
    /// hand-over (a flush the peer answered: [`FlushPolicy::clock_answered`]), unless the
    /// policy makes flushes hints.
    pub(crate) fn flush_for(&mut self, clocked: bool) {
        if self.q.policy.explicit_flush {
            let reason = if clocked {
                FlushReason::Clocked
            } else {
                FlushReason::Explicit
            };
            self.q.edit().make_all_due(reason);
        }
    }

    /// Under [`FlushPolicy::clocked`]: the caller's flushes mark where its batches end, so
    /// from now on its normal writes wait for the flush that ends their batch.
    pub(crate) fn flushes_delimit_batches(&mut self) {
        // (A flush that is a hint ends no batch: it would leave the batch's bytes waiting.)
        if self.q.policy.clocked && self.q.policy.explicit_flush && !self.q.flush_delimits {
            self.q.edit().flush_delimits = true;
        }
    }

    /// Whether the caller's flushes mark where its batches end (see
    /// [`flushes_delimit_batches`](Self::flushes_delimit_batches)).
    pub(crate) fn flushes_delimit(&self) -> bool {
        self.q.flush_delimits
    }

    /// A burst sent its first segment early and has not ended, though nothing of it is
    /// pending: the next [`before_read`](Self::before_read) still changes the state (it ends
    /// the burst, so that the next one's first segment leaves early too). An I/O layer that
    /// asks whether a read would wait only while output is pending asks then too.
    pub(crate) fn burst_open_empty(&self) -> bool {
        // (Under a policy without before-read, `before_read` changes nothing: no check.)
        self.q.policy.before_read && self.q.first_segment_out && self.q.queue.is_empty()
    }

    /// The application asked for everything pending to leave now, whatever the policy (a
    /// flush that is never a hint: `flush_now`).
    pub fn flush_all(&mut self) {
        self.q.edit().make_all_due(FlushReason::Explicit);
    }

    /// The application is about to wait for input: under a before-read policy, everything
    /// pending is due. (The I/O layers call it when a read would wait, not for input that is
    /// already buffered.)
    pub fn before_read(&mut self) {
        if self.q.policy.before_read {
            self.q.edit().make_all_due(FlushReason::BeforeRead);
        }
    }

    /// The stream is closing, shutting down or being dropped: everything pending is due.
    pub fn close(&mut self) {
        self.q.edit().make_all_due(FlushReason::Close);
    }

    /// When the linger deadline of the oldest unflushed byte passes, if one is pending.
    ///
    /// A zero linger is no deadline: it means "normal writes leave at once", and
    /// [`Urgency::MoreFollows`] bytes then wait for the next write or flush point.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.q.deadline
    }

    /// What must be sent now, if anything. Call again after each `on_sent`.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let pending = self.q.queue.len();
        if pending == 0 {
            self.flush_open = false;
            return None;
        }
        if self.poll_timeout().is_some_and(|deadline| now >= deadline) {
            self.q.edit().make_all_due(FlushReason::Linger);
        }
        let mut due = Transmit {
            len: self.q.must_send,
            reason: self.q.must_reason,
        };
        if pending >= self.q.policy.high_water {
            due = Transmit {
                len: pending,
                reason: FlushReason::HighWater,
            };
        } else if let Some(threshold) = self.q.policy.threshold {
            if self.q.first_segment_due() {
                self.q.edit().first_segment();
                due = Transmit {
                    len: self.q.must_send,
                    reason: self.q.must_reason,
                };
            }
            let seg = self.q.segment;
            if pending >= threshold.max(seg) {
                let whole = pending / seg * seg;
                if whole > due.len {
                    due = Transmit {
                        len: whole,
                        reason: FlushReason::Threshold,
                    };
                }
            }
        }
        if due.len == 0 {
            self.flush_open = false;
            return None;
        }
        if !self.flush_open {
            self.flush_open = true;
            self.stats.flushes += 1;
            self.stats.flushes_by_reason[due.reason.index()] += 1;
        }
        Some(due)
    }

    /// Fills `out` with slices covering at most `limit` bytes from the front of the queue;
    /// returns how many slices were filled.
    pub fn io_slices<'a>(&'a self, out: &mut [IoSlice<'a>], limit: usize) -> usize {
        self.q.queue.io_slices(out, limit)
    }

    /// The socket accepted `n` bytes from the front.
    ///
    /// # Panics
    /// If `n` exceeds [`pending`](Self::pending): the transport reported more than it was given.
    pub fn on_sent(&mut self, n: usize) {
        self.stats.syscalls += 1;
        self.stats.bytes_sent += n as u64;
        let mut s = self.q.edit();
        s.queue.consume(n);
        s.must_send = s.must_send.saturating_sub(n);
        if s.queue.is_empty() {
            s.set_oldest_unflushed(None);
        }
    }

    /// The socket would block: due bytes stay queued until it is writable.
    pub fn on_would_block(&mut self) {
        self.stats.syscalls += 1;
        self.stats.would_block += 1;
        self.flush_open = false;
    }

    /// Counts a send interrupted by a signal (`EINTR`), retried.
    fn on_interrupted(&mut self) {
        self.stats.syscalls += 1;
    }

    /// The I/O layer asked the kernel whether input is waiting (a syscall, for the counters).
    pub fn on_input_check(&mut self) {
        self.stats.syscalls += 1;
        self.stats.input_checks += 1;
    }

    /// The I/O layer asked the kernel for the segment size (`TCP_INFO`, a syscall).
    pub fn on_segment_check(&mut self) {
        self.stats.syscalls += 1;
        self.stats.segment_checks += 1;
    }

    /// The I/O layer asked the kernel about its send queue for clocking (a syscall).
    pub(crate) fn on_clock_check(&mut self) {
        self.stats.syscalls += 1;
        self.stats.clock_checks += 1;
    }

    /// The I/O layer asked the kernel to hold a clocked send for the next ACK.
    pub(crate) fn on_held_for_ack(&mut self) {
        self.stats.held_for_ack += 1;
    }

    /// The I/O layer pushed what the kernel held (a syscall).
    pub(crate) fn on_push(&mut self) {
        self.stats.syscalls += 1;
        self.stats.pushes += 1;
    }

    /// A send failed (or was interrupted); the bytes stay queued.
    pub fn on_error(&mut self) {
        self.stats.syscalls += 1;
        self.flush_open = false;
    }

    /// Every pending byte, front to back (diagnostics and tests).
    pub fn pending_bytes(&self) -> Vec<u8> {
        self.q.queue.to_vec()
    }

    /// The pending bytes as the queue holds them: slices, front to back.
    pub fn pending_slices(&self) -> impl Iterator<Item = &[u8]> {
        self.q.queue.slices()
    }
}
