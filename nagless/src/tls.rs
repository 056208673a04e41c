//! The TLS layer (feature `tls`): rustls driven by the coalescer, so that one flush is one
//! TLS record batch and one `sendmsg`.
//!
//! Stacked as `rustls::StreamOwned<_, NaglessStream>`, every application write becomes its own
//! TLS record (rustls encrypts each `write` call separately): the records of one answer leave
//! in one segment, but each costs a header, an AEAD tag and its own encryption, and the peer
//! decrypts each. [`TlsStream`] decides the moment once for both layers:
//!
//! - **Plaintext is queued, not encrypted.** Application writes go into a [`Coalescer`]
//!   (the same state machine and [`FlushPolicy`] as [`NaglessStream`](crate::NaglessStream)).
//! - **At a flush point** (before a read that would wait, at the size threshold, at the linger
//!   bound, on [`flush`](Write::flush), on a [`Urgency::SendNow`] write, on close) the due
//!   plaintext is handed to rustls in **one** `write_vectored` call, which rustls seals as one
//!   record (or, past the record size limit of 16 KiB, as full records and one tail), and the
//!   records leave in one gathered send (`sendmsg`; `WSASend` on Windows). Only a flush of
//!   more than 64 queued slices, or more than rustls's buffer limit (64 KiB by default), takes
//!   more calls; one send carries at most 64 records. Threshold flushes seal whole records
//!   only: the core's "segment" is the record's plaintext size.
//! - **TLS's own messages never wait**: handshake flights, alerts, key update answers and
//!   session tickets are sent as soon as rustls produces them (after every batch of input it
//!   processes), not held by the linger. Plaintext waits until the handshake is complete, so
//!   rustls never buffers it as early data: written during the handshake, it leaves at the
//!   first flush point once the handshake is done (a flush, or a read, completes it; the
//!   linger bound alone does not).
//!
//! # How to drive it
//! Wrap a connected socket and a rustls connection ([`TlsStream::new`]: a
//! `rustls::ServerConnection`, a `ClientConnection` or the `rustls::Connection` enum of
//! both); use it as any
//! `Read + Write`. The handshake is driven by the first read or flush (or
//! [`TlsStream::complete_handshake`]). On a non-blocking socket every call may return
//! `WouldBlock`: retry it when the socket is ready (`flush` when writable, `read` when
//! readable); event loops sleep no later than [`TlsStream::next_deadline`] and then call
//! [`TlsStream::poll_deadline`], as with [`NaglessStream`](crate::NaglessStream). End with
//! [`TlsStream::send_close_notify`] (or [`TlsStream::shutdown`] / [`TlsStream::close`]).
//!
//! # Invariants
//! - No byte is lost, duplicated or reordered: plaintext leaves the queue only when rustls
//!   accepted it, ciphertext leaves rustls's buffer only when the socket accepted it, and on
//!   `WouldBlock` both stay where they are.
//! - close_notify is queued only after every pending plaintext byte was sealed before it.
//! - Memory is bounded: the plaintext queue by the policy's high-water mark (a write past it
//!   flushes first and may return `WouldBlock`), ciphertext by rustls's buffer limit (64 KiB
//!   by default: sealing pauses while the socket drains it).
//! - No `unsafe` here; the syscalls are [`crate::sys`]'s.
//!
//! The async twin, for tokio, is `nagless::tokio_tls` (features `tls` and `tokio`).

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::time::Instant;

use crate::coalescer::{Coalescer, Drive, Stats, MAX_IOV};
use crate::policy::{FlushPolicy, Urgency};
use crate::stream::{now, queue_vectored, set_nodelay_if_tcp, Clock};
use crate::sys::{self, AsOsSocket};

/// Plaintext bytes per full TLS record (2^14, the protocol's limit, rustls's default).
pub const MAX_RECORD_PLAINTEXT: usize = 16 * 1024;

/// Counters of the ciphertext side of a [`TlsStream`] (the plaintext side is [`Stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WireStats {
    /// Plaintext batches handed to rustls (each sealed as one record, or full records).
    pub seals: u64,
    /// Gathered sends of ciphertext (each one `sendmsg`), `WouldBlock` ones included.
    pub sends: u64,
    /// Ciphertext bytes the socket accepted (records, handshake and alerts).
    pub bytes: u64,
    /// Sends that returned `WouldBlock`.
    pub would_block: u64,
    /// Reads of ciphertext from the socket.
    pub reads: u64,
}

/// What the std layer and the tokio layer share: the rustls connection, the plaintext queue
/// and the rules that join them. It does no I/O of its own; every call is given the transport.
pub(crate) struct Engine<C> {
    pub(crate) conn: C,
    pub(crate) core: Coalescer,
    pub(crate) wire: WireStats,
    /// close_notify was queued: no more plaintext is accepted.
    pub(crate) closed: bool,
}

/// The outcome of reading from the transport.
pub(crate) enum Input {
    /// Bytes were read and processed.
    Read,
    /// The peer closed the TCP stream.
    Eof,
}

mod sealed {
    pub trait Sealed {}
}

/// A rustls connection the TLS layer can drive: `rustls::ServerConnection`,
/// `rustls::ClientConnection` and the `rustls::Connection` enum of both. Sealed:
/// implemented here only.
pub trait TlsConnection: sealed::Sealed {
    #[doc(hidden)]
    fn wants_write(&self) -> bool;
    #[doc(hidden)]
    fn wants_read(&self) -> bool;
    #[doc(hidden)]
    fn is_handshaking(&self) -> bool;
    #[doc(hidden)]
    fn write_tls(&mut self, wr: &mut dyn Write) -> io::Result<usize>;
    #[doc(hidden)]
    fn read_tls(&mut self, rd: &mut dyn Read) -> io::Result<usize>;
    #[doc(hidden)]
    fn process_new_packets(&mut self) -> Result<(), rustls::Error>;
    #[doc(hidden)]
    fn write_plain(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    #[doc(hidden)]
    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    #[doc(hidden)]
    fn send_close_notify(&mut self);
    #[doc(hidden)]
    fn refresh_traffic_keys(&mut self) -> Result<(), rustls::Error>;
}

/// `ServerConnection` and `ClientConnection` dereference to a `ConnectionCommon`.
macro_rules! impl_tls_connection {
    ($ty:ty) => {
        impl sealed::Sealed for $ty {}

        impl TlsConnection for $ty {
            fn wants_write(&self) -> bool {
                (**self).wants_write()
            }
            fn wants_read(&self) -> bool {
                (**self).wants_read()
            }
            fn is_handshaking(&self) -> bool {
                (**self).is_handshaking()
            }
            fn write_tls(&mut self, wr: &mut dyn Write) -> io::Result<usize> {
                (**self).write_tls(wr)
            }
            fn read_tls(&mut self, rd: &mut dyn Read) -> io::Result<usize> {
                (**self).read_tls(rd)
            }
            fn process_new_packets(&mut self) -> Result<(), rustls::Error> {
                (**self).process_new_packets().map(drop)
            }
            fn write_plain(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                (**self).writer().write_vectored(bufs)
            }
            fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                (**self).reader().read(buf)
            }
            fn send_close_notify(&mut self) {
                (**self).send_close_notify()
            }
            fn refresh_traffic_keys(&mut self) -> Result<(), rustls::Error> {
                (**self).refresh_traffic_keys()
            }
        }
    };
}

impl_tls_connection!(rustls::ServerConnection);
impl_tls_connection!(rustls::ClientConnection);

impl sealed::Sealed for rustls::Connection {}

/// The enum of both sides, for code that holds either.
impl TlsConnection for rustls::Connection {
    fn wants_write(&self) -> bool {
        (**self).wants_write()
    }
    fn wants_read(&self) -> bool {
        (**self).wants_read()
    }
    fn is_handshaking(&self) -> bool {
        (**self).is_handshaking()
    }
    fn write_tls(&mut self, wr: &mut dyn Write) -> io::Result<usize> {
        rustls::Connection::write_tls(self, wr)
    }
    fn read_tls(&mut self, rd: &mut dyn Read) -> io::Result<usize> {
        rustls::Connection::read_tls(self, rd)
    }
    fn process_new_packets(&mut self) -> Result<(), rustls::Error> {
        rustls::Connection::process_new_packets(self).map(drop)
    }
    fn write_plain(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.writer().write_vectored(bufs)
    }
    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reader().read(buf)
    }
    fn send_close_notify(&mut self) {
        (**self).send_close_notify()
    }
    fn refresh_traffic_keys(&mut self) -> Result<(), rustls::Error> {
        rustls::Connection::refresh_traffic_keys(self)
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl<C: TlsConnection> Engine<C> {
    pub(crate) fn new(conn: C, policy: FlushPolicy) -> Self {
        let mut core = Coalescer::new(policy);
        // Threshold flushes then seal whole records only.
        core.set_segment_size(MAX_RECORD_PLAINTEXT);
        Engine {
            conn,
            core,
            wire: WireStats::default(),
            closed: false,
        }
    }

    /// Fails once close_notify was queued.
    pub(crate) fn check_open(&self) -> io::Result<()> {
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "nagless tls: write after close_notify",
            ));
        }
        Ok(())
    }

    /// Hands the ciphertext rustls holds to `io`: one gathered send per `write_tls` call (up
    /// to 64 records). `Blocked` when `io` would block; the rest stays in rustls.
    pub(crate) fn send_tls(&mut self, io: &mut dyn Write) -> io::Result<Drive> {
        while self.conn.wants_write() {
            self.wire.sends += 1;
            match self.conn.write_tls(io) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "socket accepted no bytes",
                    ))
                }
                Ok(n) => self.wire.bytes += n as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wire.would_block += 1;
                    return Ok(Drive::Blocked);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Drive::Idle)
    }

    /// Seals what the policy made due, as few `write_vectored` calls into rustls as its
    /// buffer allows, and sends the records. With `handshake`, a handshake in progress is
    /// completed first (reading from `io`); without, due plaintext waits for it.
    pub(crate) fn pump<T: Read + Write>(
        &mut self,
        io: &mut T,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive> {
        loop {
            if self.conn.is_handshaking() {
                if self.send_tls(io)? == Drive::Blocked {
                    return Ok(Drive::Blocked);
                }
                let due = self.core.poll_transmit(now).is_some();
                if !(handshake && due && self.conn.wants_read()) {
                    return Ok(Drive::Idle);
                }
                match self.read_input(io)? {
                    Input::Read => continue,
                    Input::Eof => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "peer closed during the TLS handshake",
                        ))
                    }
                }
            }
            let Some(tx) = self.core.poll_transmit(now) else {
                return self.send_tls(io);
            };
            let took = {
                let mut slices = [IoSlice::new(&[]); MAX_IOV];
                let n = self.core.io_slices(&mut slices, tx.len);
                self.conn.write_plain(&slices[..n])?
            };
            if took > 0 {
                self.wire.seals += 1;
                self.core.on_sent(took);
                continue;
            }
            // rustls's buffer is full: send it, then seal more.
            if !self.conn.wants_write() {
                return Err(io::Error::other(
                    "nagless tls: rustls took no plaintext with an empty buffer",
                ));
            }
            if self.send_tls(io)? == Drive::Blocked {
                self.core.on_would_block();
                return Ok(Drive::Blocked);
            }
        }
    }

    /// Reads one batch of ciphertext from `io`, processes it and sends at once whatever rustls
    /// must answer (handshake, alerts, key update). `WouldBlock` from `io` is returned as is.
    pub(crate) fn read_input<T: Read + Write>(&mut self, io: &mut T) -> io::Result<Input> {
        self.wire.reads += 1;
        let n = loop {
            match self.conn.read_tls(io) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        let processed = self.conn.process_new_packets();
        // Answers (or the alert for an error) leave now; a full socket keeps them queued in
        // rustls for the next send.
        // A send error here does not hide the input: rustls keeps the bytes and the next
        // send meets the error again.
        let _ = self.send_tls(io);
        processed.map_err(tls_error)?;
        Ok(if n == 0 { Input::Eof } else { Input::Read })
    }

    /// Plaintext rustls has already decrypted: `None` when none is buffered (more input is
    /// needed), `Some(Ok(0))` after the peer's close_notify.
    pub(crate) fn read_plain(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        match self.conn.read_plain(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            other => Some(other),
        }
    }

    /// Queues close_notify after all plaintext, which must be sealed already.
    pub(crate) fn queue_close_notify(&mut self) {
        debug_assert_eq!(self.core.pending(), 0);
        self.closed = true;
        self.conn.send_close_notify();
    }
}

/// The std transport: reads with the socket's own `Read`, sends with one gathered send.
struct SockIo<'a, S>(&'a mut S);

impl<S: AsOsSocket> Write for SockIo<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        sys::send_vectored(self.0.as_os_socket(), &[IoSlice::new(buf)], false)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        sys::send_vectored(self.0.as_os_socket(), bufs, false)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<S: Read> Read for SockIo<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

/// The std transport for a read that must not wait: `recv(MSG_DONTWAIT)`.
struct NoWait<'a, S>(&'a mut S);

impl<S: AsOsSocket> Read for NoWait<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        sys::recv_nowait(self.0.as_os_socket(), buf)
    }
}

impl<S: AsOsSocket> Write for NoWait<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        SockIo(self.0).write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        SockIo(self.0).write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A TLS connection over a socket whose output is coalesced: each flush seals the queued
/// plaintext as one TLS record (or full records) and sends it with one `sendmsg`.
///
/// `C` is a `rustls::ServerConnection`, a `rustls::ClientConnection` or a
/// `rustls::Connection` ([`TlsConnection`]), `S` the socket (`TcpStream`, `&TcpStream`, a
/// `UnixStream`: anything [`AsOsSocket`] whose `Read` reads the descriptor).
///
/// Flushes come at the [`FlushPolicy`]'s points: before a read that would wait for input, at
/// the size threshold (whole records), at the linger bound (checked on every call; see
/// [`next_deadline`](Self::next_deadline)), on [`flush`](Write::flush), on a
/// [`Urgency::SendNow`] write and on close. Errors met by a send after a write was accepted
/// are returned by the next write, flush or close.
///
/// Dropping the stream sends pending plaintext on a blocking socket (best effort, errors
/// lost) but no close_notify: end with [`close`](Self::close) or
/// [`send_close_notify`](Self::send_close_notify) where the peer must see a clean end.
pub struct TlsStream<C: TlsConnection, S: AsOsSocket + Read> {
    engine: Engine<C>,
    sock: S,
    clock: Clock,
    deferred_error: Option<io::Error>,
}

impl<C: TlsConnection, S: AsOsSocket + Read> TlsStream<C, S> {
    /// Wraps a connected socket and a fresh rustls connection with the default
    /// [`FlushPolicy`]; sets `TCP_NODELAY`.
    pub fn new(conn: C, sock: S) -> io::Result<Self> {
        Self::with_policy(conn, sock, FlushPolicy::default())
    }

    /// As [`new`](Self::new), with `policy` for the plaintext.
    pub fn with_policy(conn: C, sock: S, policy: FlushPolicy) -> io::Result<Self> {
        set_nodelay_if_tcp(sock.as_os_socket())?;
        Ok(Self {
            engine: Engine::new(conn, policy),
            sock,
            clock: Clock::new(),
            deferred_error: None,
        })
    }

    /// The rustls connection (to ask for the negotiated protocol, the peer's certificates...).
    pub fn conn(&self) -> &C {
        &self.engine.conn
    }

    /// The rustls connection, mutably. Writing through its `writer()` bypasses the queue and
    /// may reorder with pending plaintext: [`flush`](Write::flush) first.
    pub fn conn_mut(&mut self) -> &mut C {
        &mut self.engine.conn
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.sock
    }

    /// Plaintext bytes accepted and not yet sealed.
    pub fn pending(&self) -> usize {
        self.engine.core.pending()
    }

    /// Plaintext counters: writes, flushes by reason; here `bytes_sent` counts plaintext
    /// handed to rustls and `syscalls` counts seals and input checks (the socket's sends are
    /// in [`wire_stats`](Self::wire_stats)).
    pub fn stats(&self) -> &Stats {
        self.engine.core.stats()
    }

    /// Ciphertext counters (seals, sends, bytes).
    pub fn wire_stats(&self) -> &WireStats {
        &self.engine.wire
    }

    /// The policy in force.
    pub fn policy(&self) -> &FlushPolicy {
        self.engine.core.policy()
    }

    fn take_deferred(&mut self) -> io::Result<()> {
        self.deferred_error.take().map_or(Ok(()), Err)
    }

    fn pump(&mut self, now: Instant, handshake: bool) -> io::Result<Drive> {
        self.engine
            .pump(&mut SockIo(&mut self.sock), now, handshake)
    }

    fn pump_deferring(&mut self, now: Instant) {
        if let Err(e) = self.pump(now, false) {
            self.deferred_error.get_or_insert(e);
        }
    }

    fn send_due(&mut self) -> io::Result<()> {
        match self.pump(now(), true)? {
            Drive::Idle => Ok(()),
            Drive::Blocked => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Completes the handshake now (it otherwise completes at the first read or flush).
    /// `WouldBlock` on a non-blocking socket that has no input yet.
    pub fn complete_handshake(&mut self) -> io::Result<()> {
        while self.engine.conn.is_handshaking() {
            if self.engine.send_tls(&mut SockIo(&mut self.sock))? == Drive::Blocked {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if let Input::Eof = self.engine.read_input(&mut SockIo(&mut self.sock))? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        match self.engine.send_tls(&mut SockIo(&mut self.sock))? {
            Drive::Idle => Ok(()),
            Drive::Blocked => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn accept(
        &mut self,
        len: usize,
        queue: impl FnOnce(&mut Coalescer, usize, Instant),
    ) -> io::Result<usize> {
        self.take_deferred()?;
        self.engine.check_open()?;
        let deadline = self.engine.core.poll_timeout();
        let lingers = self
            .engine
            .core
            .policy()
            .linger_deadline()
            .is_some_and(|d| !d.is_zero());
        let now = self
            .clock
            .for_write(deadline, lingers && deadline.is_none());
        if self.engine.core.room() == 0 && len > 0 {
            self.pump(now, true)?;
            if self.engine.core.room() == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        let take = len.min(self.engine.core.room());
        queue(&mut self.engine.core, take, now);
        self.pump_deferring(now);
        Ok(take)
    }

    /// Queues `buf` (as much as fits below the high-water mark) with an explicit [`Urgency`].
    pub fn write_with(&mut self, buf: &[u8], urgency: Urgency) -> io::Result<usize> {
        self.accept(buf.len(), |core, n, now| {
            core.write(&buf[..n], urgency, now)
        })
    }

    /// Seals and sends everything pending now, whatever the policy; `WouldBlock` when a
    /// non-blocking socket is full (the rest stays queued).
    pub fn flush_now(&mut self) -> io::Result<()> {
        self.take_deferred()?;
        self.engine.core.close();
        self.send_due()
    }

    /// When the linger deadline of pending plaintext passes, if any (for event loops).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.engine.core.poll_timeout()
    }

    /// Seals and sends what has come due (call when [`next_deadline`](Self::next_deadline)
    /// passes, or when a non-blocking socket becomes writable).
    pub fn poll_deadline(&mut self) -> io::Result<()> {
        self.take_deferred()?;
        self.pump(now(), false).map(drop)
    }

    /// True when sealed records or due plaintext wait for socket space.
    pub fn waiting_for_socket(&self) -> bool {
        self.engine.conn.wants_write() || self.engine.core.must_send() > 0
    }

    /// Seals every pending byte, then queues close_notify behind it and sends it all.
    /// `WouldBlock` on a full non-blocking socket: call again when it is writable (nothing is
    /// queued twice). Writes after it fail with `BrokenPipe`.
    pub fn send_close_notify(&mut self) -> io::Result<()> {
        self.take_deferred()?;
        if !self.engine.closed {
            self.engine.core.close();
            if self.pump(now(), true)? == Drive::Blocked || self.engine.core.pending() > 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.engine.queue_close_notify();
        }
        match self.engine.send_tls(&mut SockIo(&mut self.sock))? {
            Drive::Idle => Ok(()),
            Drive::Blocked => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Sends a TLS 1.3 KeyUpdate now (new keys for what follows; pending plaintext is sealed
    /// under the new keys, in order). Fails before the handshake completes or under TLS 1.2.
    pub fn refresh_traffic_keys(&mut self) -> io::Result<()> {
        self.take_deferred()?;
        self.engine.conn.refresh_traffic_keys().map_err(tls_error)?;
        match self.engine.send_tls(&mut SockIo(&mut self.sock))? {
            Drive::Idle => Ok(()),
            Drive::Blocked => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Sends close_notify (after every pending byte) when `how` shuts the write side, waiting
    /// for a full non-blocking socket, then shuts the socket down.
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if how != Shutdown::Read {
            self.close_notify_wait()?;
        }
        sys::shutdown(self.sock.as_os_socket(), how)
    }

    fn close_notify_wait(&mut self) -> io::Result<()> {
        loop {
            match self.send_close_notify() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    sys::wait_writable(self.sock.as_os_socket(), None)?;
                }
                other => return other,
            }
        }
    }

    /// Seals and sends everything, then close_notify, waiting for a non-blocking socket to
    /// take it all, and closes the socket.
    pub fn close(mut self) -> io::Result<()> {
        self.close_notify_wait()
    }
}

impl<C: TlsConnection, S: AsOsSocket + Read> Write for TlsStream<C, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_with(buf, Urgency::Normal)
    }

    /// Queues the slices as one message (all but the last [`Urgency::MoreFollows`]).
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total = bufs.iter().map(|b| b.len()).sum();
        self.accept(total, |core, n, now| queue_vectored(core, bufs, n, now))
    }

    /// Seals everything pending as one record batch and sends it (completing the handshake
    /// first if needed); `WouldBlock` on a full non-blocking socket, the rest kept.
    fn flush(&mut self) -> io::Result<()> {
        self.take_deferred()?;
        self.engine.core.flush();
        self.send_due()
    }
}

impl<C: TlsConnection, S: AsOsSocket + Read> Read for TlsStream<C, S> {
    /// Returns decrypted plaintext; when more input is needed and none is waiting on the
    /// socket, seals and sends pending plaintext first (before-read). `Ok(0)` after the peer's
    /// close_notify; `UnexpectedEof` if the peer closed TCP without one.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some(r) = self.engine.read_plain(buf) {
                if matches!(r, Ok(0)) && self.engine.core.pending() > 0 {
                    // The peer ended its side: flush before reporting it, as a read that
                    // would wait does.
                    self.engine.core.before_read();
                    self.pump_deferring(now());
                } else if r.is_ok() {
                    // Input keeps coming: still honour the linger bound of our output.
                    if let Some(d) = self.engine.core.poll_timeout() {
                        if !self.clock.certainly_before(d) {
                            self.pump_deferring(now());
                        }
                    }
                }
                return r;
            }
            if self.engine.core.pending() > 0 || self.engine.conn.wants_write() {
                // Input already there is read without flushing (one `recv(MSG_DONTWAIT)`), so
                // answers to pipelined requests still coalesce; when none is, the read would
                // wait: everything pending leaves first (before-read).
                self.engine.core.on_input_check();
                match self.engine.read_input(&mut NoWait(&mut self.sock)) {
                    Ok(_) => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.engine.core.before_read();
                    }
                    Err(e) if sys::is_not_socket(&e) => {
                        // Not a socket: ask how much is buffered instead.
                        let fd = self.sock.as_os_socket();
                        if sys::readable_bytes(fd).is_none_or(|n| n == 0) {
                            self.engine.core.before_read();
                        }
                    }
                    Err(e) => return Err(e),
                }
                // A full non-blocking socket still lets us read; the rest stays queued.
                self.pump_deferring(now());
            }
            self.engine.read_input(&mut SockIo(&mut self.sock))?;
        }
    }
}

impl<C: TlsConnection, S: AsOsSocket + Read> Drop for TlsStream<C, S> {
    fn drop(&mut self) {
        // Best effort, without completing a handshake; see the type's docs.
        self.engine.core.close();
        let _ = self.pump(now(), false);
    }
}

impl<C: TlsConnection, S: AsOsSocket + Read> std::fmt::Debug for TlsStream<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("pending", &self.engine.core.pending())
            .field("handshaking", &self.engine.conn.is_handshaking())
            .field("policy", self.engine.core.policy())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    //! The engine against an in-memory transport that takes a scripted number of bytes per
    //! send (0: `WouldBlock`), with a real rustls client decrypting what it sent.
    use super::*;
    use proptest::prelude::*;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use std::sync::Arc;

    /// Server-to-client bytes, limited per send by `budgets` (cycled); client-to-server bytes
    /// read until empty (then `WouldBlock`).
    struct Pipe {
        to_client: Vec<u8>,
        to_server: Vec<u8>,
        budgets: Vec<usize>,
        turn: usize,
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let budget = self.budgets[self.turn % self.budgets.len()];
            self.turn += 1;
            if budget == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut left = budget;
            for b in bufs {
                let n = b.len().min(left);
                self.to_client.extend_from_slice(&b[..n]);
                left -= n;
            }
            Ok(budget - left)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.to_server.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.to_server.len());
            buf[..n].copy_from_slice(&self.to_server[..n]);
            self.to_server.drain(..n);
            Ok(n)
        }
    }

    fn pair() -> (rustls::ServerConnection, rustls::ClientConnection) {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = CertificateDer::from(ck.cert.der().to_vec());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        server.send_tls13_tickets = 0;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (
            rustls::ServerConnection::new(Arc::new(server)).unwrap(),
            rustls::ClientConnection::new(
                Arc::new(client),
                ServerName::try_from("localhost").unwrap(),
            )
            .unwrap(),
        )
    }

    /// The client's side: takes what reached it, returns the plaintext and the number of
    /// application-data records (content type 23; no tickets are sent).
    fn client_receive(client: &mut rustls::ClientConnection, pipe: &mut Pipe) -> (Vec<u8>, usize) {
        let mut records = 0;
        let mut at = 0;
        while at + 5 <= pipe.to_client.len() {
            records += usize::from(pipe.to_client[at] == 23);
            at += 5 + usize::from(u16::from_be_bytes([
                pipe.to_client[at + 3],
                pipe.to_client[at + 4],
            ]));
        }
        let mut wire = &pipe.to_client[..];
        let mut plain = Vec::new();
        while !wire.is_empty() {
            client.read_tls(&mut wire).unwrap();
            client.process_new_packets().unwrap();
            let _ = client.reader().read_to_end(&mut plain);
        }
        pipe.to_client.clear();
        (plain, records)
    }

    /// Runs the handshake over `pipe` with unlimited budgets.
    fn handshake(
        engine: &mut Engine<rustls::ServerConnection>,
        client: &mut rustls::ClientConnection,
    ) -> Pipe {
        let mut pipe = Pipe {
            to_client: Vec::new(),
            to_server: Vec::new(),
            budgets: vec![usize::MAX],
            turn: 0,
        };
        for _ in 0..10 {
            while client.wants_write() {
                client.write_tls(&mut pipe.to_server).unwrap();
            }
            while !pipe.to_server.is_empty() {
                engine.read_input(&mut pipe).unwrap();
            }
            let (_, _) = client_receive(client, &mut pipe);
            if !engine.conn.is_handshaking() && !client.is_handshaking() {
                pipe.turn = 0;
                return pipe;
            }
        }
        panic!("no handshake");
    }

    #[test]
    fn three_writes_and_a_flush_are_one_record() {
        let (server, mut client) = pair();
        let mut engine = Engine::new(server, FlushPolicy::default());
        let mut pipe = handshake(&mut engine, &mut client);
        let t = now();
        for part in [&b"head"[..], b"body", b"tail"] {
            engine.core.write(part, Urgency::Normal, t);
            assert_eq!(engine.pump(&mut pipe, t, false).unwrap(), Drive::Idle);
        }
        assert!(pipe.to_client.is_empty(), "sent before a flush point");
        engine.core.flush();
        assert_eq!(engine.pump(&mut pipe, t, false).unwrap(), Drive::Idle);
        assert_eq!(pipe.turn, 1, "one send");
        let (plain, records) = client_receive(&mut client, &mut pipe);
        assert_eq!(plain, b"headbodytail");
        assert_eq!(records, 1);
    }

    #[test]
    fn a_large_flush_is_full_records_and_a_tail() {
        let (server, mut client) = pair();
        let mut engine = Engine::new(server, FlushPolicy::explicit_only());
        let mut pipe = handshake(&mut engine, &mut client);
        let t = now();
        let data: Vec<u8> = (0..3 * MAX_RECORD_PLAINTEXT + 100)
            .map(|i| i as u8)
            .collect();
        for chunk in data.chunks(1000) {
            engine.core.write(chunk, Urgency::Normal, t);
        }
        engine.core.flush();
        assert_eq!(engine.pump(&mut pipe, t, false).unwrap(), Drive::Idle);
        let (plain, records) = client_receive(&mut client, &mut pipe);
        assert!(plain == data);
        assert_eq!(records, 4);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Writes of any size, flushes anywhere, a transport that takes any number of bytes
        /// or would block: every byte arrives once, in order.
        #[test]
        fn no_byte_lost_or_reordered(
            writes in proptest::collection::vec((1usize..40_000, any::<bool>()), 1..30),
            budgets in proptest::collection::vec(0usize..70_000, 1..12),
        ) {
            let (server, mut client) = pair();
            let mut engine = Engine::new(server, FlushPolicy::explicit_only());
            let mut pipe = handshake(&mut engine, &mut client);
            // Progress is certain: one budget is never zero.
            pipe.budgets = budgets;
            pipe.budgets.push(1 + pipe.budgets.len());
            pipe.turn = 0;
            let t = now();
            let mut sent = Vec::new();
            let mut got = Vec::new();
            for (i, (len, flush)) in writes.into_iter().enumerate() {
                let data: Vec<u8> = (0..len).map(|j| (i * 7 + j) as u8).collect();
                let take = len.min(engine.core.room());
                engine.core.write(&data[..take], Urgency::Normal, t);
                sent.extend_from_slice(&data[..take]);
                if flush {
                    engine.core.flush();
                }
                engine.pump(&mut pipe, t, false).unwrap();
                got.extend(client_receive(&mut client, &mut pipe).0);
            }
            engine.core.close();
            let mut rounds = 0;
            while engine.pump(&mut pipe, t, false).unwrap() == Drive::Blocked {
                got.extend(client_receive(&mut client, &mut pipe).0);
                rounds += 1;
                prop_assert!(rounds < 1_000_000, "no progress");
            }
            got.extend(client_receive(&mut client, &mut pipe).0);
            prop_assert_eq!(engine.core.pending(), 0);
            prop_assert!(!engine.conn.wants_write());
            prop_assert!(got == sent, "{} bytes received of {}", got.len(), sent.len());
        }
    }
}
