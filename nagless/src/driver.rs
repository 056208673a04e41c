//! The one driver under the library's four streams (std and tokio, plain and TLS).
//!
//! [`Driver`] owns the [`Coalescer`], the [`Clock`], the error a send met after its bytes
//! were accepted (returned by the next write, flush or close), and the state of the clocked
//! hand-over; it holds the steps every stream takes: pump what is due, accept a write, flush,
//! get ready to wait for input, close. It is generic over what seals the due bytes before
//! they leave ([`Seal`]: nothing, [`Plain`]; or rustls, `tls::Tls`) and over how they are
//! moved ([`Wire`]: a descriptor, blocking or not, or tokio's poll functions). The streams
//! keep only what is theirs: how they read, and their public faces.

use std::io;
use std::time::Instant;

use crate::clock::{now, Clock};
use crate::coalescer::{drive, Coalescer, Drive};
use crate::policy::Urgency;
use crate::sys::Sock;

pub(crate) use wire::{refresh_segment, Sends, Wire};

/// What seals the due bytes before they are moved.
pub(crate) trait Seal {
    /// The core's segment is the socket's MSS, read again at the threshold (for rustls it is
    /// a record's plaintext).
    const SOCKET_SEGMENT: bool;
    /// A normal write that makes nothing due may be queued without a send
    /// ([`Clock::join_burst`]): nothing else waits to be moved, and no state refuses writes.
    const QUIET_WRITES: bool;

    /// Sealed bytes wait for the socket (records rustls holds).
    fn backlog(&self) -> bool {
        false
    }

    /// A handshake is in progress: the owner's reads and flushes drive it, not a timer.
    fn handshaking(&self) -> bool {
        false
    }

    /// Fails once no more bytes are accepted (after close_notify).
    fn check_open(&self) -> io::Result<()> {
        Ok(())
    }

    /// The write side ends: once every byte of `core` has left, queues what the seal sends
    /// last (close_notify). Nothing for [`Plain`].
    fn end(&mut self, core: &Coalescer) {
        let _ = core;
    }
}

/// A [`Seal`] that can move its bytes through a `W`.
pub(crate) trait SealOver<W: ?Sized>: Seal {
    /// Seals what `core` made due and moves it, after what was sealed before, through `wire`;
    /// with `hold`, every send asks the kernel to hold it for an ACK. With `handshake`, a
    /// handshake in progress is completed first (reading from `wire`); without, due bytes
    /// wait for it. `Blocked` when the wire would block; nothing is lost or sent twice.
    fn send_due(
        &mut self,
        core: &mut Coalescer,
        wire: &mut W,
        now: Instant,
        handshake: bool,
        hold: bool,
    ) -> io::Result<Drive>;
}

/// Nothing seals the bytes: the core's slices go to the socket as they are.
#[derive(Debug, Default)]
pub(crate) struct Plain;

impl Seal for Plain {
    const SOCKET_SEGMENT: bool = true;
    const QUIET_WRITES: bool = true;
}

impl<W: Wire + ?Sized> SealOver<W> for Plain {
    fn send_due(
        &mut self,
        core: &mut Coalescer,
        wire: &mut W,
        now: Instant,
        _handshake: bool,
        hold: bool,
    ) -> io::Result<Drive> {
        drive(core, &mut Sends { wire, hold }, now)
    }
}

/// Longest a clocked write's bytes are left to the kernel's ACK clock when later writes come:
/// a clocked write that finds older bytes held this long sends them all at once.
pub(crate) const CLOCK_BOUND: std::time::Duration = crate::policy::DEFAULT_LINGER;

/// The core, the seal and the state every stream keeps around them; see the module docs.
pub(crate) struct Driver<S> {
    pub(crate) core: Coalescer,
    pub(crate) seal: S,
    clock: Clock,
    /// A send error met after its bytes were accepted: returned by the next write, flush or
    /// close (the first one met wins), never by a read.
    deferred: Option<io::Error>,
    /// Under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked): since when the kernel
    /// holds bytes of ours for an ACK, as last seen (`None`: it holds none).
    held: Option<Instant>,
    /// Under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked): the caller's batch, as
    /// its flushes delimit it.
    batch: Batch,
    /// In a tokio stream: whether the kernel's Nagle clocks whole batches, and the next look
    /// at what it holds (under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked) every
    /// batch once flushes delimit them; under other policies a flush the peer answered).
    kernel: KernelClock,
    /// Whether the peer answers the batches the caller's flushes hand over (see
    /// [`Answers`]).
    answers: Answers,
}

impl<S> Driver<S> {
    pub(crate) fn new(core: Coalescer, seal: S) -> Self {
        Driver {
            core,
            seal,
            clock: Clock::new(),
            deferred: None,
            held: None,
            batch: Batch::default(),
            kernel: KernelClock::default(),
            answers: Answers::default(),
        }
    }

    /// Input came from the peer (a tokio stream's read got bytes).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn input_arrived(&mut self) {
        self.answers.input();
    }

    /// Bytes may have gone to the socket outside a pump (rustls's answers to input: a key
    /// update, an alert): under a [`KernelClock`] that is on, a look is owed.
    #[cfg(all(feature = "tokio", feature = "tls"))]
    pub(crate) fn owe_look(&mut self, now: Instant) {
        self.kernel.sent(now, CLOCK_BOUND);
    }

    /// The stream can make the looks a Nagle socket needs (a tokio stream with a timer, over
    /// a socket it clocks): once the caller's flushes delimit its batches, a clocked batch is
    /// handed to the socket with Nagle on (see [`KernelClock`]); under the other policies
    /// that flush, a batch whose flush the peer answered (see [`flush_point`](Self::flush_point)).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn allow_kernel_clock(&mut self) {
        if self.kernel == KernelClock::Unavailable {
            self.kernel = KernelClock::Ready;
        }
    }

    /// The deferred error, if any, now.
    pub(crate) fn take_deferred(&mut self) -> io::Result<()> {
        self.deferred.take().map_or(Ok(()), Err)
    }

    /// Keeps `e` for the next write, flush or close, unless an earlier error waits.
    pub(crate) fn defer(&mut self, e: io::Error) {
        self.deferred.get_or_insert(e);
    }

    /// An error waits to be returned.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn has_deferred(&self) -> bool {
        self.deferred.is_some()
    }
}

impl<S: Seal> Driver<S> {
    /// Output waits somewhere: queued, sealed and unsent, or held by the kernel.
    pub(crate) fn output_waiting(&self) -> bool {
        self.core.pending() > 0 || self.held.is_some() || self.seal.backlog()
    }

    /// A read that may wait asks first whether input is there (and tells the core, by
    /// [`input_checked`](Self::input_checked), when none is): output waits, or a burst the
    /// core has not yet ended ([`Coalescer::burst_open_empty`]).
    pub(crate) fn read_checks_input(&self) -> bool {
        self.output_waiting() || self.core.burst_open_empty()
    }

    /// Bytes are due now (or sealed bytes wait): they wait only for socket space.
    #[cfg_attr(not(any(feature = "tokio", feature = "tls")), allow(dead_code))]
    pub(crate) fn due_now(&self) -> bool {
        self.core.must_send() > 0 || self.seal.backlog()
    }

    /// When a background flusher should next act, if there is anything for it: now for due
    /// bytes, else the linger deadline; nothing while a handshake is in progress (the
    /// owner's reads and flushes drive it).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn next_wake(&self, now: Instant) -> Option<Instant> {
        if self.seal.handshaking() {
            None
        } else if self.due_now() {
            Some(now)
        } else {
            self.earliest_wake()
        }
    }

    /// The earliest of the linger deadline and the look owed to a Nagle socket, if any.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn earliest_wake(&self) -> Option<Instant> {
        match (self.core.poll_timeout(), self.kernel.due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A background flusher has something to do: due bytes wait for socket space, or a
    /// linger deadline is pending (not while a handshake is in progress).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn needs_flusher(&self) -> bool {
        !self.seal.handshaking()
            && (self.due_now() || self.core.poll_timeout().is_some() || self.kernel.due().is_some())
    }

    /// The fast path of a normal write ([`Clock::join_burst`]), unless an error waits to be
    /// returned (it must meet the next write) or the seal has its own bytes to move. False
    /// (nothing queued) when the write needs the full path.
    #[inline(always)]
    pub(crate) fn write_fast(&mut self, buf: &[u8]) -> bool {
        S::QUIET_WRITES && self.deferred.is_none() && self.clock.join_burst(&mut self.core, buf)
    }

    /// Queues the bytes of normal writes an I/O layer held back (see
    /// [`Coalescer::write_staged`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn write_staged(&mut self, data: &[u8], writes: u64) {
        // Held back only while no linger window could open: the time is only the core's input.
        let now = self.clock.for_write(&self.core);
        self.core.write_staged(data, writes, now);
    }

    /// Sends what is due through `wire`; with `handshake`, a TLS handshake in progress is
    /// completed first. At the threshold the socket's segment size is read again; under
    /// [`FlushPolicy::clocked`](crate::FlushPolicy::clocked) the bytes are clocked, and
    /// under another policy a flush the peer answered ([`flush_point`](Self::flush_point)).
    pub(crate) fn pump<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive>
    where
        S: SealOver<W>,
    {
        if S::SOCKET_SEGMENT
            && self
                .core
                .policy()
                .threshold_bytes()
                .is_some_and(|t| self.core.pending() >= t)
        {
            if let Some(fd) = wire.socket() {
                refresh_segment(&mut self.core, fd);
            }
        }
        if wire.can_clock() && !self.seal.handshaking() {
            if self.core.policy().is_clocked() {
                if self.kernel.usable() && self.core.flushes_delimit() {
                    return self.pump_kernel_clocked(wire, now, handshake);
                }
                return self.pump_clocked(wire, now, handshake);
            }
            if self.kernel.usable() {
                return self.pump_answered(wire, now, handshake);
            }
        }
        self.seal
            .send_due(&mut self.core, wire, now, handshake, false)
    }

    /// [`pump`](Self::pump) for a caller that waits for socket space if it blocks (see
    /// [`Wire::wait_for_room`]).
    pub(crate) fn pump_waiting<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive>
    where
        S: SealOver<W>,
    {
        wire.wait_for_room();
        let r = self.pump(wire, now, handshake);
        if !matches!(r, Ok(Drive::Blocked)) {
            wire.stop_waiting();
        }
        r
    }

    /// Sends what is due; an error is kept for the next write, flush or close.
    pub(crate) fn pump_deferring<W: Wire + ?Sized>(&mut self, wire: &mut W, now: Instant)
    where
        S: SealOver<W>,
    {
        if let Err(e) = self.pump(wire, now, false) {
            self.defer(e);
        }
    }

    /// Sends what is due, a handshake first: `WouldBlock` when the wire cannot take it all.
    pub(crate) fn send_due<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()>
    where
        S: SealOver<W>,
    {
        match self.pump_waiting(wire, now(), true)? {
            Drive::Idle => Ok(()),
            Drive::Blocked => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Accepts one application write of `len` bytes: the deferred error first, then
    /// backpressure, then queue at most the room below the high-water mark (`queue` gets how
    /// many bytes to take and the time), then send what is due. A send error after the bytes
    /// were accepted is deferred to the next call. `WouldBlock` (nothing accepted) when there
    /// is no room and the wire cannot take more now.
    pub(crate) fn accept<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        len: usize,
        queue: impl FnOnce(&mut Coalescer, usize, Instant),
    ) -> io::Result<usize>
    where
        S: SealOver<W>,
    {
        self.take_deferred()?;
        self.seal.check_open()?;
        let now = self.clock.for_write(&self.core);
        if self.core.room() == 0 && len > 0 {
            self.pump_waiting(wire, now, true)?;
            if self.core.room() == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        let take = len.min(self.core.room());
        queue(&mut self.core, take, now);
        self.pump_deferring(wire, now);
        Ok(take)
    }

    /// Queues `buf` (or as much as fits below the high-water mark) with `urgency`: the fast
    /// path for a normal write that makes nothing due, else [`accept`](Self::accept); a
    /// [`Urgency::SendNow`] write also takes what the kernel holds for an ACK with it.
    #[inline]
    pub(crate) fn write_with<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        buf: &[u8],
        urgency: Urgency,
    ) -> io::Result<usize>
    where
        S: SealOver<W>,
    {
        if urgency == Urgency::Normal && self.write_fast(buf) {
            return Ok(buf.len());
        }
        let n = self.accept(wire, buf.len(), |core, n, now| {
            core.write(&buf[..n], urgency, now)
        })?;
        if urgency == Urgency::SendNow {
            self.release_held(wire)?;
        }
        Ok(n)
    }

    /// `flush()`: what is pending becomes due (unless the policy makes flushes hints) and is
    /// sent; `WouldBlock` when the wire cannot take it all (the rest stays queued).
    pub(crate) fn flush<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()>
    where
        S: SealOver<W>,
    {
        self.take_deferred()?;
        self.flush_point(false);
        let r = self.send_due(wire);
        self.batch_ended();
        r
    }

    /// The caller flushed: what is pending becomes due (unless the policy makes flushes
    /// hints). With `queue`, the caller's flushes also say when its batches leave from now
    /// on: its writes wait for their batch's flush (the tokio streams over a socket they can
    /// clock, whose callers flush after each batch as `AsyncWrite` asks; never the std
    /// stream or the C API, whose writers may flush once and then wait elsewhere). The
    /// flush's own send belongs to the batch it ends: [`batch_ended`](Self::batch_ended)
    /// follows it.
    ///
    /// Under a policy that is not [`clocked`](crate::FlushPolicy::clocked), in a stream whose
    /// kernel's Nagle can be bounded by looks (a tokio stream over tokio's `TcpStream`, with
    /// a timer), a flush made while the peer answers ([`Answers`]: redis-rs's, hyper's, a
    /// database driver's connection task, whose batches overlap the answers to earlier ones)
    /// hands its batch to the kernel's Nagle, as the clocked policy does: it leaves at once
    /// when nothing small of ours is unacknowledged, and otherwise with the next answer's
    /// ACK, together with the batches written meanwhile, or a bound later. Any other flush
    /// (a stream that only sends, an SSE server's tokens) leaves at once.
    pub(crate) fn flush_point(&mut self, queue: bool) {
        // (A flush with nothing to hand over leaves the answer for the batch that comes.)
        let answered = queue
            && self.kernel.usable()
            && self.core.pending() > 0
            && self.core.policy().is_clock_answered()
            && self.answers.clock();
        self.core
            .flush_for(answered || self.core.policy().is_clocked());
        if queue {
            self.core.flushes_delimit_batches();
        }
    }

    /// The caller's flush has handed its batch to the wire: the next bytes begin another.
    pub(crate) fn batch_ended(&mut self) {
        self.batch.ended();
    }

    /// `flush_now()`: everything pending is sent now, whatever the policy, and what the
    /// kernel holds for an ACK with it.
    pub(crate) fn flush_now<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()>
    where
        S: SealOver<W>,
    {
        self.take_deferred()?;
        self.core.flush_all();
        self.send_due(wire)?;
        self.release_held(wire)
    }

    /// The program is about to wait for input elsewhere: what before-read would send.
    pub(crate) fn before_wait<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()>
    where
        S: SealOver<W>,
    {
        self.take_deferred()?;
        self.core.before_read();
        self.pump(wire, now(), false)?;
        self.release_held(wire)
    }

    /// Sends what has come due (a deadline passed, or the socket became writable).
    pub(crate) fn poll_deadline<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<Drive>
    where
        S: SealOver<W>,
    {
        self.take_deferred()?;
        self.pump(wire, now(), false)
    }

    /// The input check before a read that may wait, with output pending: `peeked` is what
    /// reading `fd` without waiting (`MSG_DONTWAIT`) gave, its input if any came (`Some`).
    /// When none is there the read would wait, and everything pending becomes due
    /// (before-read); a descriptor that is no socket (a pipe) is asked how much is buffered
    /// instead. The caller then returns the input it got, or sends and reads
    /// ([`about_to_wait`](Self::about_to_wait)).
    pub(crate) fn input_checked<T>(
        &mut self,
        peeked: io::Result<Option<T>>,
        fd: Sock<'_>,
    ) -> io::Result<Option<T>> {
        self.core.on_input_check();
        let nothing_there = match peeked {
            Ok(Some(input)) => return Ok(Some(input)),
            Ok(None) => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
            Err(e) if crate::sys::is_not_socket(&e) => {
                crate::sys::readable_bytes(fd).is_none_or(|n| n == 0)
            }
            Err(e) => return Err(e),
        };
        if nothing_there {
            self.core.before_read();
        }
        Ok(None)
    }

    /// Input arrived while output is pending: the linger deadline still holds (the cycle
    /// counter says when it certainly has not passed, without a clock reading).
    pub(crate) fn input_came<W: Wire + ?Sized>(&mut self, wire: &mut W)
    where
        S: SealOver<W>,
    {
        if let Some(d) = self.core.poll_timeout() {
            if !self.clock.certainly_before(d) {
                self.pump_deferring(wire, now());
            }
        }
    }

    /// The stream is about to wait for input (the core was told, by `before_read`, if the
    /// read would wait): what is due leaves, and what the kernel holds for an ACK with it
    /// under a before-read policy. Errors are kept for the writer.
    pub(crate) fn about_to_wait<W: Wire + ?Sized>(&mut self, wire: &mut W, waiting: bool)
    where
        S: SealOver<W>,
    {
        let now = now();
        let r = if waiting {
            self.pump_waiting(wire, now, false)
        } else {
            self.pump(wire, now, false)
        };
        if let Err(e) = r {
            self.defer(e);
        }
        if self.held.is_some() && self.core.policy().is_before_read() {
            if let Err(e) = self.release_held(wire) {
                self.defer(e);
            }
        }
        // A batch the kernel may hold starts to cost now: its first look is made at once.
        if self.kernel.first_look_owed() {
            if let Err(e) = self.look_at_kernel(wire, now, true) {
                self.defer(e);
            }
        }
    }

    /// A graceful close, its first step: everything pending becomes due (pump it next).
    /// Every stream closes in the same order: [`close_begins`](Self::close_begins), a pump,
    /// then, once the pump has handed everything on, [`close_ends`](Self::close_ends) and a
    /// pump of what the seal queued last.
    pub(crate) fn close_begins(&mut self) -> io::Result<()> {
        self.take_deferred()?;
        self.core.close();
        Ok(())
    }

    /// A graceful close, once the pump after [`close_begins`](Self::close_begins) handed every
    /// byte on: the seal's last words (TLS close_notify) are queued behind them; false (and
    /// nothing queued) while bytes are still pending.
    pub(crate) fn close_ends(&mut self) -> bool {
        if self.core.pending() > 0 {
            return false;
        }
        self.seal.end(&self.core);
        true
    }

    /// A read is about to wait, or found the end of input, with output pending: everything
    /// pending becomes due (before-read) and leaves as [`about_to_wait`](Self::about_to_wait)
    /// sends it. (The std stream's reads come here through
    /// [`input_checked`](Self::input_checked).)
    #[cfg_attr(not(any(feature = "tokio", feature = "tls")), allow(dead_code))]
    pub(crate) fn read_would_wait<W: Wire + ?Sized>(&mut self, wire: &mut W, waiting: bool)
    where
        S: SealOver<W>,
    {
        self.core.before_read();
        self.about_to_wait(wire, waiting);
    }

    /// Closing without a caller to tell (drop): everything pending becomes due and is sent
    /// as far as the wire takes it at once, and what the kernel holds leaves too. `Blocked`
    /// when bytes are left.
    pub(crate) fn close_quietly<W: Wire + ?Sized>(&mut self, wire: &mut W) -> Drive
    where
        S: SealOver<W>,
    {
        self.core.close();
        let r = self.pump(wire, now(), false);
        // A clone of the socket may keep it open: what the kernel holds leaves now.
        let _ = self.release_held(wire);
        match r {
            Ok(d) => d,
            Err(_) => Drive::Idle,
        }
    }
}

mod answers;
mod batch;
mod clocked;
mod kernel_clock;
mod wire;
use answers::Answers;
use batch::Batch;
use kernel_clock::KernelClock;

// (The std stream's half runs over a Unix `SOCK_SEQPACKET` pair: on Unix only.)
#[cfg(all(test, unix))]
mod model;
#[cfg(test)]
mod tests;
