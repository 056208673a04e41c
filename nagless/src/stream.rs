//! The std API: [`NaglessStream`], a drop-in replacement for `BufWriter<TcpStream>` that
//! cannot stall, and its write-only use as a [`Sender`] in event loops.
//!
//! Wrapping a socket sets `TCP_NODELAY` (the kernel never holds a byte), and the
//! [`Coalescer`] decides when bytes leave: each flush is one `sendmsg` with all pending slices.
//!
//! **How linger is honoured here.** There is no thread: the deadline is checked on every
//! call (write, read, flush), and an event loop that waits elsewhere sleeps no later than
//! [`NaglessStream::next_deadline`] and then calls [`NaglessStream::poll_deadline`]. A program
//! that reads this stream needs neither: before-read sends everything before it waits.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Instant;

use crate::core::{drive, Coalescer, Drive, Stats, Transport};
use crate::policy::{FlushPolicy, Urgency};
use crate::sys;
use crate::tcp_info::TcpInfo;

/// The clock of the I/O layers (the core never reads one).
#[allow(clippy::disallowed_methods)]
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// Sends through a socket descriptor with `sendmsg`.
pub(crate) struct FdTransport<'a>(pub BorrowedFd<'a>);

impl Transport for FdTransport<'_> {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        sys::send_vectored(self.0, bufs, more)
    }
}

/// Reads the socket's send MSS into the core, when the kernel tells it.
pub(crate) fn refresh_segment(core: &mut Coalescer, fd: BorrowedFd<'_>) {
    if let Ok(info) = TcpInfo::of(&fd) {
        if info.snd_mss > 0 {
            core.set_segment_size(info.snd_mss as usize);
        }
    }
}

/// A TCP stream (or any socket-backed `Read + Write`) whose output is coalesced.
///
/// Writes are queued; they leave as one `sendmsg` at the next flush point of the
/// [`FlushPolicy`]: before a read, at the size threshold, at the linger deadline, on
/// [`flush`](Write::flush), on a [`Urgency::SendNow`] write, and on close or drop.
///
/// # Errors and backpressure
/// - A send error met after a write was accepted is kept and returned by the next call;
///   [`pending`](Self::pending) says how many bytes remain unsent.
/// - Beyond the high-water mark a write flushes first; on a non-blocking socket that cannot
///   take more it returns `WouldBlock` without accepting a byte.
/// - Drop flushes best-effort (errors are lost there); use [`close`](Self::close) to see them.
pub struct NaglessStream<S: AsFd> {
    inner: S,
    core: Coalescer,
    deferred_error: Option<io::Error>,
}

/// The write-only use of [`NaglessStream`], for programs that read elsewhere (event loops).
///
/// Wrap a borrowed socket (`&TcpStream`) or an owned one you only write to. The loop calls
/// [`flush`](Write::flush) before it sleeps (as Redis does before `epoll_wait`), sleeps no
/// later than [`next_deadline`](NaglessStream::next_deadline), calls
/// [`poll_deadline`](NaglessStream::poll_deadline) when it wakes, and
/// [`on_writable`](NaglessStream::on_writable) when a non-blocking socket becomes writable.
pub type Sender<S> = NaglessStream<S>;

impl NaglessStream<TcpStream> {
    /// Connects to `addr` and wraps the stream with the default policy.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<Self> {
        Self::new(TcpStream::connect(addr)?)
    }
}

impl<S: AsFd> NaglessStream<S> {
    /// Wraps `inner` with the default [`FlushPolicy`]; sets `TCP_NODELAY`.
    pub fn new(inner: S) -> io::Result<Self> {
        Self::with_policy(inner, FlushPolicy::default())
    }

    /// Wraps `inner` with `policy`; sets `TCP_NODELAY` when `inner` is a TCP socket.
    pub fn with_policy(inner: S, policy: FlushPolicy) -> io::Result<Self> {
        match sys::set_nodelay(inner.as_fd(), true) {
            Ok(()) => {}
            // Not a TCP socket (a pipe, a UNIX socket): nothing to disable.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOTSOCK | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
                ) => {}
            Err(e) => return Err(e),
        }
        let mut core = Coalescer::new(policy);
        refresh_segment(&mut core, inner.as_fd());
        Ok(Self {
            inner,
            core,
            deferred_error: None,
        })
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped stream, mutably. Writing to it directly bypasses (and may reorder with)
    /// pending output: [`flush`](Write::flush) first.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The policy in force.
    pub fn policy(&self) -> &FlushPolicy {
        self.core.policy()
    }

    /// Replaces the policy; pending bytes are judged by the new one at the next call.
    pub fn set_policy(&mut self, policy: FlushPolicy) {
        self.core.set_policy(policy);
    }

    /// Bytes accepted but not yet taken by the socket.
    pub fn pending(&self) -> usize {
        self.core.pending()
    }

    /// Per-stream counters.
    pub fn stats(&self) -> &Stats {
        self.core.stats()
    }

    /// A `TCP_INFO` snapshot of the socket (Linux).
    pub fn tcp_info(&self) -> io::Result<TcpInfo> {
        TcpInfo::of(&self.inner)
    }

    /// True when a read would return at once: input is buffered in the kernel.
    fn input_ready(&mut self) -> bool {
        self.core.on_input_check();
        sys::readable_bytes(self.inner.as_fd()).is_some_and(|n| n > 0)
    }

    fn take_deferred(&mut self) -> io::Result<()> {
        self.deferred_error.take().map_or(Ok(()), Err)
    }

    /// Sends whatever is due now.
    fn pump(&mut self, now: Instant) -> io::Result<Drive> {
        if self
            .core
            .policy()
            .threshold_bytes()
            .is_some_and(|t| self.core.pending() >= t)
        {
            refresh_segment(&mut self.core, self.inner.as_fd());
        }
        drive(&mut self.core, &mut FdTransport(self.inner.as_fd()), now)
    }

    /// Accepts one application write: backpressure first, then queue, then send what is due.
    /// A send error after the bytes were accepted is deferred to the next call.
    fn accept(&mut self, queue: impl FnOnce(&mut Coalescer, Instant)) -> io::Result<()> {
        self.take_deferred()?;
        let now = now();
        if self.core.over_high_water() {
            self.pump(now)?;
            if self.core.over_high_water() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        queue(&mut self.core, now);
        if let Err(e) = self.pump(now) {
            self.deferred_error = Some(e);
        }
        Ok(())
    }

    /// Queues `buf` with an explicit [`Urgency`]; returns `buf.len()` once accepted.
    pub fn write_with(&mut self, buf: &[u8], urgency: Urgency) -> io::Result<usize> {
        self.accept(|core, now| core.write(buf, urgency, now))?;
        Ok(buf.len())
    }

    /// Queues an owned buffer; large ones are sent from it without another copy.
    pub fn write_owned(&mut self, buf: Vec<u8>, urgency: Urgency) -> io::Result<()> {
        self.accept(|core, now| core.write_owned(buf, urgency, now))
    }

    /// When the linger deadline of pending output passes, if any (for event loops).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    /// Sends what has come due (call when [`next_deadline`](Self::next_deadline) passes).
    pub fn poll_deadline(&mut self) -> io::Result<()> {
        self.take_deferred()?;
        self.pump(now()).map(drop)
    }

    /// The socket became writable: continue a flush that met `WouldBlock`. Returns true when
    /// nothing due is left.
    pub fn on_writable(&mut self) -> io::Result<bool> {
        self.take_deferred()?;
        Ok(self.pump(now())? == Drive::Idle)
    }

    /// Flushes, then shuts the socket down (`how` as in `TcpStream::shutdown`).
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if how != Shutdown::Read {
            self.take_deferred()?;
            self.core.close();
            if self.pump(now())? == Drive::Blocked {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        sys::shutdown(self.inner.as_fd(), how)
    }

    /// Flushes everything and closes, reporting any error (drop cannot).
    pub fn close(mut self) -> io::Result<()> {
        self.take_deferred()?;
        self.core.close();
        match self.pump(now())? {
            Drive::Idle => Ok(()),
            Drive::Blocked => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} bytes could not be sent", self.core.pending()),
            )),
        }
    }
}

impl<S: AsFd> Write for NaglessStream<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_with(buf, Urgency::Normal)
    }

    /// Queues all slices as one message (the last one carries the normal urgency).
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total = bufs.iter().map(|b| b.len()).sum();
        self.accept(|core, now| {
            for (i, b) in bufs.iter().enumerate() {
                let last = i + 1 == bufs.len();
                let urgency = if last {
                    Urgency::Normal
                } else {
                    Urgency::MoreFollows
                };
                core.write(b, urgency, now);
            }
        })?;
        Ok(total)
    }

    /// Sends everything pending. On a non-blocking socket that cannot take it all, returns
    /// `WouldBlock` with the rest still queued.
    fn flush(&mut self) -> io::Result<()> {
        self.take_deferred()?;
        self.core.flush();
        match self.pump(now())? {
            Drive::Idle => Ok(()),
            Drive::Blocked => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<S: AsFd + Read> Read for NaglessStream<S> {
    /// Sends pending output first if the read would wait (before-read), then reads.
    ///
    /// Input already buffered in the kernel is read without flushing: the read cannot wait,
    /// so output keeps coalescing (pipelined requests answered in one segment). The moment
    /// a read would wait, everything pending leaves first.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.take_deferred()?;
        if self.core.pending() > 0 && !self.input_ready() {
            self.core.before_read();
        }
        // A non-blocking socket that is full still lets us read; the rest stays queued.
        self.pump(now())?;
        self.inner.read(buf)
    }
}

impl<S: AsFd> AsFd for NaglessStream<S> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl<S: AsFd> AsRawFd for NaglessStream<S> {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_fd().as_raw_fd()
    }
}

impl<S: AsFd> Drop for NaglessStream<S> {
    fn drop(&mut self) {
        self.core.close();
        // Best effort: an error here has nobody to go to.
        let _ = self.pump(now());
    }
}

impl<S: AsFd> std::fmt::Debug for NaglessStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NaglessStream")
            .field("fd", &self.inner.as_fd().as_raw_fd())
            .field("pending", &self.core.pending())
            .field("policy", self.core.policy())
            .finish()
    }
}
