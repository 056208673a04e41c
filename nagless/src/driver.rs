//! The one driver under the library's four streams (std and tokio, plain and TLS).
//!
//! [`Driver`] owns the [`Coalescer`], the [`Clock`], the error a send met after its bytes
//! were accepted (returned by the next write, flush or close), and the state of the clocked
//! hand-over; it holds the steps every stream takes: pump what is due, accept a write, flush,
//! get ready to wait for input, close. It is generic over what seals the due bytes before
//! they leave ([`Seal`]: nothing, [`Plain`]; or rustls, `tls::Tls`) and over how they are
//! moved ([`Wire`]: a descriptor, blocking or not, or tokio's poll functions). The streams
//! keep only what is theirs: how they read, and their public faces.

use std::io::{self, IoSlice};
use std::time::Instant;

use crate::clock::{now, Clock};
use crate::coalescer::{drive, Coalescer, Drive, Transport};
use crate::policy::{FlushReason, Urgency};
use crate::sys::Sock;

/// How due bytes are moved: a gathered send, and what the socket under it can tell.
pub(crate) trait Wire {
    /// Sends a prefix of `bufs` in one call; `more` asks the kernel to hold a partial segment
    /// (`MSG_MORE`). `WouldBlock` when the socket is full (tokio: `Pending`, with the fan-out
    /// waker registered by the socket).
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize>;

    /// The socket under the wire, when there is one: its segment size is read at the
    /// threshold.
    fn socket(&self) -> Option<Sock<'_>> {
        None
    }

    /// Whether the kernel can be asked to hold a send for the next ACK (`MSG_MORE` reaches
    /// it) and tells its send queue ([`FlushPolicy::clocked`](crate::FlushPolicy::clocked)).
    fn can_clock(&self) -> bool {
        cfg!(any(target_os = "linux", target_os = "android")) && self.socket().is_some()
    }

    /// Bytes written and not yet acknowledged, sent or not (`SIOCOUTQ`).
    fn unacknowledged(&mut self) -> io::Result<u32> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(fd) = self.socket() {
            return crate::sys::unacknowledged(fd);
        }
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Bytes written and not yet sent: what the kernel holds (`SIOCOUTQNSD`).
    fn unsent(&mut self) -> io::Result<u32> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(fd) = self.socket() {
            return crate::sys::unsent(fd);
        }
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Sends everything the kernel holds (`TCP_NODELAY` set again).
    fn push(&mut self) -> io::Result<()> {
        match self.socket() {
            Some(fd) => crate::sys::set_nodelay(fd, true),
            None => Ok(()),
        }
    }

    /// Turns the kernel's Nagle algorithm on or off (`TCP_NODELAY` cleared or set); turning
    /// it off sends what it held.
    fn nagle(&mut self, on: bool) -> io::Result<()> {
        match self.socket() {
            Some(fd) => crate::sys::set_nodelay(fd, !on),
            None => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    /// What the kernel has sent of the stream in all, and what it holds unsent (`TCP_INFO`'s
    /// `bytes_sent` and `notsent_bytes`).
    fn progress(&mut self) -> io::Result<(u64, u32)> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(fd) = self.socket() {
            let mut buf = [0u8; 512];
            let len = crate::sys::tcp_info_raw(fd, &mut buf)?;
            let info = crate::tcp_info::TcpInfo::parse(&buf[..len]);
            if let Some((Some(sent), Some(unsent))) = info.map(|i| (i.bytes_sent, i.notsent_bytes))
            {
                return Ok((sent, unsent));
            }
        }
        Err(io::ErrorKind::Unsupported.into())
    }

    /// The caller will wait for socket space if the send that follows blocks: the tokio wire
    /// registers its task with the fan-out waker (before the send, so that readiness arriving
    /// after the socket said "full" finds it). Nothing for a blocking descriptor.
    fn wait_for_room(&mut self) {}

    /// The send did not block after all: the caller no longer waits.
    fn stop_waiting(&mut self) {}
}

/// A wire as the core's [`Transport`]; with `hold`, every send asks the kernel to hold it.
pub(crate) struct Sends<'w, W: ?Sized> {
    pub(crate) wire: &'w mut W,
    pub(crate) hold: bool,
}

impl<W: Wire + ?Sized> Transport for Sends<'_, W> {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        self.wire.send(bufs, more || self.hold)
    }
}

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
    /// Under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked), in a tokio stream: whether
    /// the kernel's Nagle clocks whole batches, and the next look at what it holds.
    kernel: KernelClock,
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
        }
    }

    /// The stream can make the looks a Nagle socket needs (a tokio stream with a timer, over
    /// a socket it clocks): once the caller's flushes delimit its batches, a clocked batch is
    /// handed to the socket with Nagle on (see [`KernelClock`]).
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
            match (self.core.poll_timeout(), self.kernel.due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
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
    /// [`FlushPolicy::clocked`](crate::FlushPolicy::clocked) the bytes are clocked.
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
                crate::io_glue::refresh_segment(&mut self.core, fd);
            }
        }
        if self.core.policy().is_clocked() && wire.can_clock() && !self.seal.handshaking() {
            if self.kernel.usable() && self.core.flushes_delimit() {
                return self.pump_kernel_clocked(wire, now, handshake);
            }
            return self.pump_clocked(wire, now, handshake);
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
    pub(crate) fn flush_point(&mut self, queue: bool) {
        self.core.flush();
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

    /// Under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked): sends what the kernel
    /// holds for an ACK, if it may hold anything (the caller wants everything on the wire).
    pub(crate) fn release_held<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()> {
        if self.kernel.due().is_some() {
            return self.push_kernel(wire);
        }
        if self.held.is_some() {
            self.held = None;
            self.core.on_push();
            wire.push()?;
        }
        Ok(())
    }

    /// Sends what is due under [`FlushPolicy::clocked`](crate::FlushPolicy::clocked).
    ///
    /// A transmit for a clocked write or flush is sent at once when nothing is
    /// unacknowledged (`SIOCOUTQ` 0), or when bytes held earlier have waited
    /// [`CLOCK_BOUND`]; otherwise it is sent with `MSG_MORE`, and then the kernel is asked
    /// whether it now holds bytes with nothing in flight (no ACK will come to send them): if
    /// so they are pushed at once. A transmit for any other reason (an urgent write,
    /// `flush_now`, a read that would wait, close) is sent plainly, which also sends what
    /// the kernel held.
    ///
    /// Why nothing strands: the kernel sends held bytes on every ACK it processes (with
    /// `TCP_NODELAY` on), and an ACK that arrives while the send runs is processed after the
    /// bytes are queued. So bytes can be held with nothing in flight only when every byte in
    /// flight was acknowledged before the send began, and the check after the send sees that
    /// (both counters stay put in that state, whatever order they are read in).
    fn pump_clocked<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive>
    where
        S: SealOver<W>,
    {
        let tx = self.core.poll_transmit(now);
        let clocked = tx.is_some_and(|tx| tx.reason == FlushReason::Clocked);
        let overdue = self
            .held
            .is_some_and(|t| now.saturating_duration_since(t) >= CLOCK_BOUND);
        // In flight ahead of this send: bytes of earlier batches only (the caller's own
        // batch's first pieces would wait for an ACK its peer delays until the rest comes).
        let own = self.batch.own(self.core.stats().bytes_sent).unwrap_or(0);
        let in_flight = clocked
            && !overdue
            // Bytes held already mean data in flight (or the check after the send finds out).
            && (self.held.is_some() || {
                self.core.on_clock_check();
                wire.unacknowledged().is_ok_and(|n| u64::from(n) > own)
            });
        if !in_flight {
            let had_due = tx.is_some() || self.seal.backlog();
            let r = self
                .seal
                .send_due(&mut self.core, wire, now, handshake, false);
            if had_due && matches!(r, Ok(Drive::Idle)) {
                // The last send went without MSG_MORE: the kernel sent everything it held.
                self.held = None;
            }
            return r;
        }
        let sent_before = self.core.stats().bytes_sent;
        let r = self
            .seal
            .send_due(&mut self.core, wire, now, handshake, true);
        self.core.on_held_for_ack();
        let ours = self.core.stats().bytes_sent - sent_before;
        self.core.on_clock_check();
        let stranded = match wire.unsent() {
            Ok(0) => {
                self.held = None;
                false
            }
            Ok(unsent) => {
                self.core.on_clock_check();
                match wire.unacknowledged() {
                    Ok(unacked) if unacked > unsent => {
                        // Something is in flight: its ACK sends what is held. Only this
                        // send's bytes held: the older ones have left, so the bound restarts.
                        if u64::from(unsent) <= ours {
                            self.held = Some(now);
                        } else {
                            self.held.get_or_insert(now);
                        }
                        false
                    }
                    _ => true,
                }
            }
            Err(_) => true,
        };
        if stranded {
            self.release_held_now(wire)?;
        }
        r
    }

    /// Sends what is due to a socket with Nagle on, under
    /// [`FlushPolicy::clocked`](crate::FlushPolicy::clocked) once the caller's flushes delimit
    /// its batches (see [`KernelClock`]): one plain send per batch, which the kernel sends at
    /// once or with the next ACK; a look is then owed. A transmit for an urgent write,
    /// `flush_now` or close is pushed out at once.
    fn pump_kernel_clocked<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive>
    where
        S: SealOver<W>,
    {
        if self.kernel == KernelClock::Ready {
            let ok = wire.nagle(true).is_ok();
            self.kernel.turned_on(ok);
            if !ok {
                return self.pump_clocked(wire, now, handshake);
            }
            // What a `MSG_MORE` hand-over left held is now the kernel's Nagle's to send: it
            // is looked at with the rest.
            if self.held.take().is_some() {
                self.kernel.sent(now, CLOCK_BOUND);
            }
        }
        let tx = self.core.poll_transmit(now);
        let urgent = tx.is_some_and(|tx| {
            matches!(
                tx.reason,
                FlushReason::Urgent | FlushReason::Explicit | FlushReason::Close
            )
        });
        let sent_before = self.core.stats().bytes_sent;
        let r = self
            .seal
            .send_due(&mut self.core, wire, now, handshake, false);
        if self.core.stats().bytes_sent > sent_before {
            self.kernel.sent(now, CLOCK_BOUND);
        }
        if urgent && matches!(r, Ok(Drive::Idle)) {
            self.push_kernel(wire)?;
        }
        r
    }

    /// Under a [`KernelClock`] that is on: the look owed, if it is due at `now` (the stream's
    /// background task calls it) or, `early`, if it is the first since a send (a reader
    /// about to wait): bytes the kernel held a whole bound are pushed.
    pub(crate) fn look_at_kernel<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        now: Instant,
        early: bool,
    ) -> io::Result<()> {
        let owed = if early {
            self.kernel.first_look_owed()
        } else {
            self.kernel.due().is_some_and(|at| at <= now)
        };
        if !owed {
            return Ok(());
        }
        self.core.on_clock_check();
        let found = match wire.progress() {
            Ok((sent, unsent)) => self.kernel.looked(now, CLOCK_BOUND, sent, unsent),
            // The kernel cannot say: push, so that nothing waits on what is not known.
            Err(_) => Found::Stuck,
        };
        if found == Found::Stuck {
            return self.push_kernel(wire);
        }
        Ok(())
    }

    /// Sends everything a Nagle socket holds (`TCP_NODELAY` set, then cleared again).
    fn push_kernel<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()> {
        self.kernel.pushed();
        self.core.on_push();
        wire.nagle(false)?;
        wire.nagle(true)
    }

    /// Pushes what the kernel holds, whatever was last seen.
    fn release_held_now<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<()> {
        self.held = None;
        self.core.on_push();
        wire.push()
    }
}

mod batch;
mod kernel_clock;
use batch::Batch;
use kernel_clock::{Found, KernelClock};

// (The std stream's half runs over a Unix `SOCK_SEQPACKET` pair: on Unix only.)
#[cfg(all(test, unix))]
mod model;
#[cfg(test)]
mod tests;
