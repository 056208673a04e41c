//! The TLS layer (feature `tls`): rustls driven by the coalescer, so that one flush is one
//! TLS record batch and one `sendmsg`.
//!
//! Stacked as `rustls::StreamOwned<_, NaglessStream>`, every application write becomes its own
//! TLS record (rustls encrypts each `write` call separately): the records of one answer leave
//! in one segment, but each costs a header, an AEAD tag and its own encryption, and the peer
//! decrypts each. [`TlsStream`] decides the moment once for both layers:
//!
//! - **Plaintext is queued, not encrypted.** Application writes go into a
//!   [`Coalescer`](crate::Coalescer) (the same state machine and [`FlushPolicy`] as
//!   [`NaglessStream`](crate::NaglessStream)), which the stream's driver owns.
//! - **At a flush point** (before a read that would wait, at the size threshold, at the linger
//!   bound, on [`flush`](Write::flush), on a [`Urgency::SendNow`] write, on close) the due
//!   plaintext is handed to rustls in **one** `write_vectored` call, which rustls seals as one
//!   record (or, past the record size limit of 16 KiB, as full records and one tail), and the
//!   records leave in one gathered send (`sendmsg`; `WSASend` on Windows). Only a flush of
//!   more than 64 queued slices, or more than rustls's buffer limit (64 KiB by default), takes
//!   more calls; one send carries at most 64 records. Threshold flushes seal whole records
//!   only: the core's "segment" is the record's plaintext size.
//! - **TLS's own messages never wait**: handshake flights, alerts, key updates we ask for and
//!   session tickets are sent as soon as rustls produces them (after every batch of input it
//!   processes), not held by the linger. Plaintext waits until the handshake is complete, so
//!   rustls never buffers it as early data: written during the handshake, it leaves at the
//!   first flush point once the handshake is done (a flush, or a read, completes it; the
//!   linger bound alone does not). (rustls itself holds its answer to a peer's
//!   "update requested" until our next record: it leaves with the next flush.)
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
//! - No `unsafe` here; the syscalls are the crate's syscall layer's.
//!
//! The async twin, for tokio, is `nagless::tokio_tls` (features `tls` and `tokio`).

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::time::Instant;

use crate::clock::now;
use crate::coalescer::{Drive, Stats};
use crate::driver::{Driver, Wire};
use crate::io_glue::{queue_vectored, set_nodelay_if_tcp};
use crate::policy::{FlushPolicy, Urgency};
use crate::sys::{self, AsOsSocket, Sock};

mod engine;

pub use engine::TlsConnection;
pub(crate) use engine::{plaintext_core, tls_error, Input, Tls};

/// Plaintext bytes per full TLS record (2^14, the protocol's limit, rustls's default).
pub const MAX_RECORD_PLAINTEXT: usize = 16 * 1024;

/// Counters of the ciphertext side of a [`TlsStream`] (the plaintext side is [`Stats`]).
///
/// ```no_run
/// # fn demo(tls: nagless::tls::TlsStream<rustls::ServerConnection, std::net::TcpStream>) {
/// let wire = tls.wire_stats();
/// println!("{} seals, {} sends, {} ciphertext bytes", wire.seals, wire.sends, wire.bytes);
/// # }
/// ```
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

/// The std wire: reads with the socket's own `Read`, sends with one gathered send.
struct SockIo<'a, S>(&'a mut S);

impl<S: AsOsSocket> Wire for SockIo<'_, S> {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        sys::send_vectored(self.0.as_os_socket(), bufs, more)
    }
    fn socket(&self) -> Option<Sock<'_>> {
        Some(self.0.as_os_socket())
    }
}

impl<S: Read> Read for SockIo<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

/// The std wire for a read that must not wait: `recv(MSG_DONTWAIT)`.
struct NoWait<'a, S>(&'a mut S);

impl<S: AsOsSocket> Read for NoWait<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        sys::recv_nowait(self.0.as_os_socket(), buf)
    }
}

impl<S: AsOsSocket> Wire for NoWait<'_, S> {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        SockIo(&mut *self.0).send(bufs, more)
    }
    fn socket(&self) -> Option<Sock<'_>> {
        Some(self.0.as_os_socket())
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
/// Plaintext written while the handshake is still incomplete is lost on drop (a drop does
/// not wait for the peer): flush, read or close first.
///
/// ```no_run
/// # fn demo(config: std::sync::Arc<rustls::ServerConfig>) -> std::io::Result<()> {
/// use std::io::{Read, Write};
/// use nagless::tls::TlsStream;
///
/// let listener = std::net::TcpListener::bind("127.0.0.1:8443")?;
/// let (tcp, _) = listener.accept()?;
/// let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
/// let mut tls = TlsStream::new(conn, tcp)?;
/// let mut request = [0u8; 1024];
/// let n = tls.read(&mut request)?; // the handshake, then the request
/// tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")?;
/// tls.write_all(b"ok")?;
/// println!("{} records sealed", tls.wire_stats().seals);
/// tls.close()?; // both writes as one record, one send, then close_notify
/// # let _ = n; Ok(()) }
/// ```
pub struct TlsStream<C: TlsConnection, S: AsOsSocket + Read> {
    /// The plaintext queue, the clock, the deferred error, rustls as the seal.
    driver: Driver<Tls<C>>,
    sock: S,
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
            driver: Driver::new(plaintext_core(policy), Tls::new(conn)),
            sock,
        })
    }

    /// Runs one of the driver's steps with the socket as its wire.
    fn step<R>(&mut self, f: impl FnOnce(&mut Driver<Tls<C>>, &mut SockIo<'_, S>) -> R) -> R {
        f(&mut self.driver, &mut SockIo(&mut self.sock))
    }

    /// The rustls connection (to ask for the negotiated protocol, the peer's certificates...).
    pub fn conn(&self) -> &C {
        &self.driver.seal.conn
    }

    /// The rustls connection, mutably. Writing through its `writer()` bypasses the queue and
    /// may reorder with pending plaintext: [`flush`](Write::flush) first.
    pub fn conn_mut(&mut self) -> &mut C {
        &mut self.driver.seal.conn
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.sock
    }

    /// Plaintext bytes accepted and not yet sealed.
    pub fn pending(&self) -> usize {
        self.driver.core.pending()
    }

    /// Plaintext counters: writes, flushes by reason; here `bytes_sent` counts plaintext
    /// handed to rustls and `syscalls` counts seals and input checks (the socket's sends are
    /// in [`wire_stats`](Self::wire_stats)).
    pub fn stats(&self) -> &Stats {
        self.driver.core.stats()
    }

    /// Ciphertext counters (seals, sends, bytes).
    pub fn wire_stats(&self) -> &WireStats {
        &self.driver.seal.wire
    }

    /// The policy in force.
    pub fn policy(&self) -> &FlushPolicy {
        self.driver.core.policy()
    }

    /// Completes the handshake now (it otherwise completes at the first read or flush).
    /// `WouldBlock` on a non-blocking socket that has no input yet.
    pub fn complete_handshake(&mut self) -> io::Result<()> {
        let tls = &mut self.driver.seal;
        while tls.conn.is_handshaking() {
            if tls.send_tls(&mut SockIo(&mut self.sock))? == Drive::Blocked {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if let Input::Eof = tls.read_input(&mut SockIo(&mut self.sock))? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        match tls.send_tls(&mut SockIo(&mut self.sock))? {
            Drive::Idle => Ok(()),
            Drive::Blocked => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Queues `buf` (as much as fits below the high-water mark) with an explicit [`Urgency`].
    pub fn write_with(&mut self, buf: &[u8], urgency: Urgency) -> io::Result<usize> {
        self.step(|d, w| d.write_with(w, buf, urgency))
    }

    /// Seals and sends everything pending now, whatever the policy; `WouldBlock` when a
    /// non-blocking socket is full (the rest stays queued).
    pub fn flush_now(&mut self) -> io::Result<()> {
        self.step(|d, w| d.flush_now(w))
    }

    /// When the linger deadline of pending plaintext passes, if any (for event loops).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.driver.core.poll_timeout()
    }

    /// Seals and sends what has come due (call when [`next_deadline`](Self::next_deadline)
    /// passes, or when a non-blocking socket becomes writable).
    pub fn poll_deadline(&mut self) -> io::Result<()> {
        self.step(|d, w| d.poll_deadline(w)).map(drop)
    }

    /// True when sealed records or due plaintext wait for socket space.
    pub fn waiting_for_socket(&self) -> bool {
        self.driver.due_now()
    }

    /// Seals every pending byte, then queues close_notify behind it and sends it all.
    /// `WouldBlock` on a full non-blocking socket: call again when it is writable (nothing is
    /// queued twice). Writes after it fail with `BrokenPipe`.
    pub fn send_close_notify(&mut self) -> io::Result<()> {
        if self.driver.seal.closed {
            self.driver.take_deferred()?;
        } else {
            self.driver.close_begins()?;
            let d = self.step(|d, w| d.pump(w, now(), true))?;
            if d == Drive::Blocked || !self.driver.close_ends() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        match self.driver.seal.send_tls(&mut SockIo(&mut self.sock))? {
            Drive::Idle => Ok(()),
            Drive::Blocked => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Sends a TLS 1.3 KeyUpdate now (new keys for what follows; pending plaintext is sealed
    /// under the new keys, in order). Fails before the handshake completes or under TLS 1.2.
    pub fn refresh_traffic_keys(&mut self) -> io::Result<()> {
        self.driver.take_deferred()?;
        self.driver
            .seal
            .conn
            .refresh_traffic_keys()
            .map_err(tls_error)?;
        match self.driver.seal.send_tls(&mut SockIo(&mut self.sock))? {
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
                    // A handshake still waiting for the peer blocks on input, not on room
                    // to write (waiting for room would return at once and spin).
                    let conn = &self.driver.seal.conn;
                    if conn.is_handshaking() && !conn.wants_write() {
                        sys::wait_readable(self.sock.as_os_socket(), None)?;
                    } else {
                        sys::wait_writable(self.sock.as_os_socket(), None)?;
                    }
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
        self.step(|d, w| d.accept(w, total, |core, n, now| queue_vectored(core, bufs, n, now)))
    }

    /// Seals everything pending as one record batch and sends it (completing the handshake
    /// first if needed); `WouldBlock` on a full non-blocking socket, the rest kept.
    fn flush(&mut self) -> io::Result<()> {
        self.step(|d, w| d.flush(w))
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
            if let Some(r) = self.driver.seal.read_plain(buf) {
                if matches!(r, Ok(0)) && self.driver.core.pending() > 0 {
                    // The peer ended its side: flush before reporting it, as a read that
                    // would wait does.
                    self.step(|d, w| d.read_would_wait(w, false));
                } else if r.is_ok() {
                    // Input keeps coming: still honour the linger bound of our output.
                    self.step(|d, w| d.input_came(w));
                }
                return r;
            }
            if self.driver.read_checks_input() {
                // Input already there is read without flushing (one `recv(MSG_DONTWAIT)`), so
                // answers to pipelined requests still coalesce; when none is, the read would
                // wait: everything pending leaves first (before-read).
                // Whatever it read (records, or the end of input) is rustls's to process.
                let peeked = self.driver.seal.read_input(&mut NoWait(&mut self.sock));
                let fd = self.sock.as_os_socket();
                if self.driver.input_checked(peeked.map(Some), fd)?.is_some() {
                    continue;
                }
                // A full non-blocking socket still lets us read; the rest stays queued.
                self.step(|d, w| d.about_to_wait(w, false));
            }
            self.driver.seal.read_input(&mut SockIo(&mut self.sock))?;
        }
    }
}

impl<C: TlsConnection, S: AsOsSocket + Read> Drop for TlsStream<C, S> {
    fn drop(&mut self) {
        // Best effort, without completing a handshake; see the type's docs.
        self.step(|d, w| d.close_quietly(w));
    }
}

impl<C: TlsConnection, S: AsOsSocket + Read> std::fmt::Debug for TlsStream<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("pending", &self.driver.core.pending())
            .field("handshaking", &self.driver.seal.conn.is_handshaking())
            .field("policy", self.driver.core.policy())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
