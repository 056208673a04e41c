//! The std API: [`NaglessStream`], a drop-in replacement for `BufWriter<TcpStream>` that
//! cannot stall, and its write-only use as a [`Sender`] in event loops.
//!
//! Wrapping a socket sets `TCP_NODELAY` (the kernel never holds a byte), and the
//! [`Coalescer`] decides when bytes leave: each flush is one gathered send (`sendmsg`;
//! `WSASend` on Windows) with all pending slices.
//!
//! **How linger is honoured here.** There is no thread: the deadline is checked on every
//! call (write, read, flush), and an event loop that waits elsewhere sleeps no later than
//! [`NaglessStream::next_deadline`] and then calls [`NaglessStream::poll_deadline`]. A program
//! that reads this stream needs neither: before-read sends everything before it waits.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::time::Instant;

use crate::clock::now;
use crate::coalescer::{Coalescer, Drive, Stats};
use crate::driver::refresh_segment;
use crate::driver::{Driver, Plain};
use crate::io_glue::{queue_vectored, set_nodelay_if_tcp, FdWire};
use crate::policy::{FlushPolicy, Urgency};
use crate::sys::{self, AsOsSocket, Sock};
use crate::tcp_info::TcpInfo;

/// A TCP stream (or any socket-backed `Read + Write`) whose output is coalesced.
///
/// Writes are queued; they leave as one `sendmsg` at the next flush point of the
/// [`FlushPolicy`]: before a read, at the size threshold, at the linger deadline, on
/// [`flush`](Write::flush), on a [`Urgency::SendNow`] write, and on close or drop.
///
/// # Errors and backpressure
/// - A send error met after a write was accepted is kept and returned by the next write,
///   flush, shutdown or close (never by a read: input that arrived is read first, such as the
///   peer's error reply); [`pending`](Self::pending) says how many bytes remain unsent.
/// - A write queues at most the room left below the high-water mark (a short write, which
///   `write_all` continues); when there is no room it flushes first and, on a non-blocking
///   socket that cannot take more, returns `WouldBlock` without accepting a byte.
///
/// # Closing without losing bytes
/// - [`close`](Self::close) sends everything, waiting for a non-blocking socket to become
///   writable, then closes; on an error it gives the stream back with the unsent bytes in it
///   ([`IntoInnerError`]).
/// - [`into_inner`](Self::into_inner) flushes and returns the socket, or the stream and the
///   error; [`into_parts`](Self::into_parts) returns the socket and the unsent bytes, sending
///   nothing.
/// - **Drop** sends everything pending on a blocking socket (it blocks as `write` would);
///   on a non-blocking socket it sends what the socket takes at once and the rest is lost.
///   Errors at drop are lost. Use `close` where every byte matters.
///
/// # Example
///
/// A server whose answers are written in parts: each answer leaves as one segment when the
/// loop reads again.
///
/// ```no_run
/// use std::io::{Read, Write};
/// use std::net::TcpListener;
/// use nagless::NaglessStream;
///
/// let listener = TcpListener::bind("127.0.0.1:7000")?;
/// let (tcp, _) = listener.accept()?;
/// let mut s = NaglessStream::new(tcp)?; // sets TCP_NODELAY
/// let mut request = [0u8; 512];
/// while s.read(&mut request)? > 0 {
///     s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")?; // queued
///     s.write_all(b"ok")?; // queued
/// }
/// s.close()?; // sends what is left, then closes
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct NaglessStream<S: AsOsSocket> {
    /// `None` only after `into_parts` took it (then the stream is being consumed).
    inner: Option<S>,
    /// The core, the clock, the deferred error; the socket is its wire ([`FdWire`]).
    driver: Driver<Plain>,
}

/// The write-only use of [`NaglessStream`], for programs that read elsewhere (event loops).
///
/// Wrap a borrowed socket (`&TcpStream`) or an owned one you only write to. The loop calls
/// [`flush`](Write::flush) before it sleeps (as Redis does before `epoll_wait`), sleeps no
/// later than [`next_deadline`](NaglessStream::next_deadline), calls
/// [`poll_deadline`](NaglessStream::poll_deadline) when it wakes, and
/// [`on_writable`](NaglessStream::on_writable) when a non-blocking socket becomes writable.
///
/// ```no_run
/// use std::io::Write;
/// use std::net::TcpStream;
/// use nagless::Sender;
///
/// let tcp = TcpStream::connect("127.0.0.1:6379")?;
/// let mut out = Sender::new(&tcp)?; // writes here; the loop reads `tcp` itself
/// out.write_all(b"SET a 1\r\n")?;
/// out.write_all(b"SET b 2\r\n")?;
/// out.flush()?; // before the loop sleeps: both commands in one segment
/// let sleep_until = out.next_deadline(); // None: nothing is left waiting
/// # let _ = sleep_until;
/// # Ok::<(), std::io::Error>(())
/// ```
pub type Sender<S> = NaglessStream<S>;

/// A stream handed back with the error that stopped a flush ([`NaglessStream::close`],
/// [`NaglessStream::into_inner`]): nothing was lost, the unsent bytes are still queued in it.
///
/// ```no_run
/// use std::io::Write;
/// use nagless::NaglessStream;
///
/// let mut s = NaglessStream::connect("127.0.0.1:7000")?;
/// s.write_all(b"last words")?;
/// match s.close() {
///     Ok(()) => {}
///     Err(e) => {
///         eprintln!("close failed: {}", e.error());
///         let (_socket, unsent) = e.into_inner().into_parts();
///         eprintln!("{} bytes were not sent", unsent.len());
///     }
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct IntoInnerError<W> {
    stream: W,
    error: io::Error,
}

impl<W> IntoInnerError<W> {
    /// The error that stopped the flush.
    pub fn error(&self) -> &io::Error {
        &self.error
    }

    /// The stream, with its unsent bytes, to retry or to take apart with `into_parts`.
    pub fn into_inner(self) -> W {
        self.stream
    }

    /// The error and the stream.
    pub fn into_parts(self) -> (io::Error, W) {
        (self.error, self.stream)
    }
}

impl<W> std::fmt::Display for IntoInnerError<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "flush failed, unsent bytes kept: {}", self.error)
    }
}

impl<W: std::fmt::Debug> std::error::Error for IntoInnerError<W> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<W> From<IntoInnerError<W>> for io::Error {
    fn from(e: IntoInnerError<W>) -> io::Error {
        e.error
    }
}

impl NaglessStream<TcpStream> {
    /// Connects to `addr` and wraps the stream with the default policy.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<Self> {
        Self::new(TcpStream::connect(addr)?)
    }
}

impl<S: AsOsSocket> NaglessStream<S> {
    /// Wraps `inner` with the default [`FlushPolicy`]; sets `TCP_NODELAY`.
    pub fn new(inner: S) -> io::Result<Self> {
        Self::with_policy(inner, FlushPolicy::default())
    }

    /// Wraps `inner` with `policy`; sets `TCP_NODELAY` when `inner` is a TCP socket.
    pub fn with_policy(inner: S, policy: FlushPolicy) -> io::Result<Self> {
        set_nodelay_if_tcp(inner.as_os_socket())?;
        let mut core = Coalescer::new(policy);
        refresh_segment(&mut core, inner.as_os_socket());
        Ok(Self {
            inner: Some(inner),
            driver: Driver::new(core, Plain),
        })
    }

    /// The driver and the socket as its wire; no wire after `into_parts`.
    fn parts(&mut self) -> (&mut Driver<Plain>, Option<FdWire<'_>>) {
        let wire = self.inner.as_ref().map(|s| FdWire(s.as_os_socket()));
        (&mut self.driver, wire)
    }

    /// Runs one of the driver's steps with the socket as its wire (invariant as in `io`).
    fn step<R>(&mut self, f: impl FnOnce(&mut Driver<Plain>, &mut FdWire<'_>) -> R) -> R {
        let (driver, wire) = self.parts();
        let mut wire = wire.expect("stream used after into_parts");
        f(driver, &mut wire)
    }

    fn io(&self) -> &S {
        // Invariant: `inner` is only taken by `into_parts`, which consumes the stream.
        self.inner.as_ref().expect("stream used after into_parts")
    }

    fn fd(&self) -> Sock<'_> {
        self.io().as_os_socket()
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        self.io()
    }

    /// The wrapped stream, mutably. Writing to it directly bypasses (and may reorder with)
    /// pending output: [`flush`](Write::flush) first.
    pub fn get_mut(&mut self) -> &mut S {
        // Invariant as in `io`.
        self.inner.as_mut().expect("stream used after into_parts")
    }

    /// The bytes accepted and not yet sent, slice by slice, front to back (`BufWriter::buffer`
    /// with the queue's own layout).
    pub fn buffer(&self) -> impl Iterator<Item = &[u8]> {
        self.driver.core.pending_slices()
    }

    /// The policy in force.
    pub fn policy(&self) -> &FlushPolicy {
        self.driver.core.policy()
    }

    /// Replaces the policy; pending bytes are judged by the new one at the next call.
    pub fn set_policy(&mut self, policy: FlushPolicy) {
        self.driver.core.set_policy(policy);
    }

    /// Bytes accepted but not yet taken by the socket.
    pub fn pending(&self) -> usize {
        self.driver.core.pending()
    }

    /// Per-stream counters.
    pub fn stats(&self) -> &Stats {
        self.driver.core.stats()
    }

    /// A `TCP_INFO` snapshot of the socket (Linux; `ErrorKind::Unsupported` elsewhere).
    pub fn tcp_info(&self) -> io::Result<TcpInfo> {
        TcpInfo::of(&self.fd())
    }

    /// Accepts one application write of `len` bytes ([`Driver::accept`]).
    fn accept(
        &mut self,
        len: usize,
        queue: impl FnOnce(&mut Coalescer, usize, Instant),
    ) -> io::Result<usize> {
        self.step(|d, w| d.accept(w, len, queue))
    }

    /// Queues `buf` (or as much as fits below the high-water mark) with an explicit
    /// [`Urgency`]; returns how many bytes were accepted.
    #[inline]
    pub fn write_with(&mut self, buf: &[u8], urgency: Urgency) -> io::Result<usize> {
        if urgency == Urgency::Normal && self.write_fast(buf) {
            return Ok(buf.len());
        }
        self.step(|d, w| d.write_with(w, buf, urgency))
    }

    /// The fast path of a normal write ([`Driver::write_fast`]). False (nothing queued) when
    /// the write needs the full path.
    #[inline(always)]
    fn write_fast(&mut self, buf: &[u8]) -> bool {
        self.driver.write_fast(buf)
    }

    /// Queues an owned buffer whole (its memory is already spent, so the high-water mark does
    /// not cut it); large ones are sent from it without another copy.
    pub fn write_owned(&mut self, buf: Vec<u8>, urgency: Urgency) -> io::Result<()> {
        // Past the backpressure check the whole buffer is queued, whatever room is left.
        self.accept(buf.len(), |core, _, now| {
            core.write_owned(buf, urgency, now)
        })
        .map(drop)
    }

    /// Sends everything pending now, whatever the policy (`flush` may be a hint under
    /// [`FlushPolicy::explicit_flush`]); `WouldBlock` when a non-blocking socket is full.
    pub fn flush_now(&mut self) -> io::Result<()> {
        self.step(|d, w| d.flush_now(w))
    }

    /// Sends everything pending, waiting for a full socket to take it, at most `timeout`
    /// (`None`: as long as it takes); `TimedOut` with the rest still queued.
    pub fn flush_wait(&mut self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        let start = now();
        loop {
            match self.flush_now() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
            let left = timeout.map(|t| t.saturating_sub(now().duration_since(start)));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(io::ErrorKind::TimedOut.into());
            }
            sys::wait_writable(self.fd(), left)?;
        }
    }

    /// The program is about to wait for input somewhere else (an event loop's `poll` or
    /// `epoll_wait`): send what before-read would send before a read that waits.
    pub fn before_wait(&mut self) -> io::Result<()> {
        self.step(|d, w| d.before_wait(w))
    }

    /// True when bytes are due but the socket could not take them (non-blocking and full):
    /// an event loop should wait for it to become writable and call
    /// [`on_writable`](Self::on_writable).
    pub fn waiting_for_socket(&self) -> bool {
        self.driver.core.must_send() > 0
    }

    /// When the linger deadline of pending output passes, if any (for event loops).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.driver.core.poll_timeout()
    }

    /// Sends what has come due (call when [`next_deadline`](Self::next_deadline) passes).
    pub fn poll_deadline(&mut self) -> io::Result<()> {
        self.step(|d, w| d.poll_deadline(w)).map(drop)
    }

    /// The socket became writable: continue a flush that met `WouldBlock`. Returns true when
    /// nothing due is left.
    pub fn on_writable(&mut self) -> io::Result<bool> {
        Ok(self.step(|d, w| d.poll_deadline(w))? == Drive::Idle)
    }

    /// Flushes, then shuts the socket down (`how` as in `TcpStream::shutdown`).
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if how != Shutdown::Read {
            self.flush_now()?;
        }
        sys::shutdown(self.fd(), how)
    }

    /// Sends everything pending, waiting for a non-blocking socket to become writable as
    /// often as it takes, then closes the socket. On an error the stream comes back inside
    /// the error with every unsent byte still queued: nothing is lost.
    #[allow(clippy::result_large_err)] // the stream comes back by value, as BufWriter's does
    pub fn close(mut self) -> Result<(), IntoInnerError<Self>> {
        match self
            .driver
            .close_begins()
            .and_then(|()| self.flush_wait(None))
        {
            Ok(()) => {
                // Everything was sent (a plain stream queues nothing after it): dropping
                // closes the socket without another send.
                let ended = self.driver.close_ends();
                debug_assert!(ended, "close sent everything");
                drop(self);
                Ok(())
            }
            Err(error) => Err(IntoInnerError {
                stream: self,
                error,
            }),
        }
    }

    /// Flushes everything and returns the socket; on any error (a non-blocking socket that
    /// is full gives `WouldBlock`) returns the stream with the unsent bytes and the error.
    #[allow(clippy::result_large_err)] // as `close`
    pub fn into_inner(mut self) -> Result<S, IntoInnerError<Self>> {
        match self.flush_now() {
            Ok(()) => Ok(self.into_parts().0),
            Err(error) => Err(IntoInnerError {
                stream: self,
                error,
            }),
        }
    }

    /// Takes the stream apart without sending anything: the socket and the unsent bytes.
    pub fn into_parts(mut self) -> (S, Vec<u8>) {
        let bytes = self.driver.core.pending_bytes();
        // Invariant as in `io`: this is the only place that takes it, and it consumes self.
        let inner = self.inner.take().expect("stream used after into_parts");
        (inner, bytes)
    }
}

impl<S: AsOsSocket> Write for NaglessStream<S> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_with(buf, Urgency::Normal)
    }

    /// As `Write::write_all`, with the fast path of a small write inlined at the caller.
    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.write_fast(buf) {
            return Ok(());
        }
        write_all_slow(self, buf)
    }

    /// Queues the slices as one message (all but the last marked
    /// [`Urgency::MoreFollows`]), as many bytes as fit below the high-water mark.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total = bufs.iter().map(|b| b.len()).sum();
        self.accept(total, |core, n, now| queue_vectored(core, bufs, n, now))
    }

    /// Sends everything pending. On a non-blocking socket that cannot take it all, returns
    /// `WouldBlock` with the rest still queued.
    fn flush(&mut self) -> io::Result<()> {
        self.step(|d, w| d.flush(w))
    }
}

/// `Write::write_all`'s loop, kept out of line.
#[inline(never)]
fn write_all_slow(w: &mut impl Write, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match w.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The socket's number, for `Debug`.
fn raw_of(s: Sock<'_>) -> sys::RawSock {
    #[cfg(unix)]
    return std::os::fd::AsRawFd::as_raw_fd(&s);
    #[cfg(windows)]
    return std::os::windows::io::AsRawSocket::as_raw_socket(&s);
}

/// `S`'s `Read` must read the descriptor itself, as `TcpStream`, `UnixStream` and their
/// references do: with output pending, the input check reads the descriptor directly.
impl<S: AsOsSocket + Read> Read for NaglessStream<S> {
    /// Reads; if the read would wait, sends pending output first (before-read).
    ///
    /// With output pending, a socket is first read without waiting (`MSG_DONTWAIT`): input
    /// that is already there is returned without flushing, so output keeps coalescing
    /// (pipelined requests answered in one segment). The moment a read would wait, everything
    /// pending leaves first. A send error met here does not hide the input: it is kept for
    /// the next write, flush or close.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.driver.read_checks_input() && !buf.is_empty() {
            // (The field, not `fd()`: the driver is borrowed beside it.)
            let fd = self
                .inner
                .as_ref()
                .expect("stream used after into_parts")
                .as_os_socket();
            // Nothing buffered, or end of input (flush before reporting it): `None`.
            let peeked = sys::recv_nowait(fd, buf).map(|n| (n > 0).then_some(n));
            if let Some(n) = self.driver.input_checked(peeked, fd)? {
                // Input keeps coming: still honour the linger deadline of our output.
                self.step(|d, w| d.input_came(w));
                return Ok(n);
            }
        }
        // A non-blocking socket that is full still lets us read; the rest stays queued. The
        // read may wait: what the kernel holds for an ACK leaves first (before-read).
        self.step(|d, w| d.about_to_wait(w, false));
        self.get_mut().read(buf)
    }
}

#[cfg(unix)]
impl<S: AsOsSocket> std::os::fd::AsFd for NaglessStream<S> {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd()
    }
}

#[cfg(unix)]
impl<S: AsOsSocket> std::os::fd::AsRawFd for NaglessStream<S> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.fd())
    }
}

#[cfg(windows)]
impl<S: AsOsSocket> std::os::windows::io::AsSocket for NaglessStream<S> {
    fn as_socket(&self) -> std::os::windows::io::BorrowedSocket<'_> {
        self.fd()
    }
}

#[cfg(windows)]
impl<S: AsOsSocket> std::os::windows::io::AsRawSocket for NaglessStream<S> {
    fn as_raw_socket(&self) -> std::os::windows::io::RawSocket {
        std::os::windows::io::AsRawSocket::as_raw_socket(&self.fd())
    }
}

impl<S: AsOsSocket> Drop for NaglessStream<S> {
    fn drop(&mut self) {
        // Best effort (see the type's docs): an error here has nobody to go to.
        if let (driver, Some(mut wire)) = self.parts() {
            driver.close_quietly(&mut wire);
        }
    }
}

impl<S: AsOsSocket> std::fmt::Debug for NaglessStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("NaglessStream");
        if let Some(io) = &self.inner {
            d.field("fd", &raw_of(io.as_os_socket()));
        }
        d.field("pending", &self.driver.core.pending())
            .field("policy", self.driver.core.policy())
            .finish()
    }
}
