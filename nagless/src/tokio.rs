//! The tokio adapter (feature `tokio`): [`NaglessStream`] implements `AsyncRead` and
//! `AsyncWrite` with the semantics of the std wrapper.
//!
//! - `poll_read` sends pending output first (before-read), so write-write-read never stalls.
//! - **Linger by timer**: when bytes are pending with a deadline, or are due but the socket was
//!   full, a small background task (spawned on the current runtime, holding only a weak
//!   reference) sleeps until the deadline and flushes, even while the owning task is busy
//!   awaiting something else. Errors it meets are returned by the next call on the stream.
//! - [`NaglessStream::into_split`] gives halves that share one queue, so the read half still
//!   flushes what the write half queued.
//! - Drop flushes best-effort with what the socket takes at once, without waiting.

use std::io::{self, IoSlice};
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::core::{drive, Coalescer, Drive, Stats, Transport};
use crate::policy::{FlushPolicy, Urgency};
use crate::stream::{now, refresh_segment};
use crate::tcp_info::TcpInfo;

/// Sends through `poll_write_vectored`; `Pending` reads as `WouldBlock` to the drive loop,
/// with the waker of `cx` registered by the inner stream.
struct PollTransport<'a, 'b, T> {
    io: Pin<&'a mut T>,
    cx: &'a mut Context<'b>,
}

impl<T: AsyncWrite> Transport for PollTransport<'_, '_, T> {
    fn send(&mut self, bufs: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
        match self.io.as_mut().poll_write_vectored(self.cx, bufs) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

struct Shared<T> {
    io: T,
    core: Coalescer,
    deferred_error: Option<io::Error>,
    flusher_running: bool,
}

impl<T: AsyncWrite + Unpin> Shared<T> {
    fn drive(&mut self, cx: &mut Context<'_>, now: Instant) -> io::Result<Drive> {
        let mut t = PollTransport {
            io: Pin::new(&mut self.io),
            cx,
        };
        drive(&mut self.core, &mut t, now)
    }

    fn take_deferred(&mut self) -> io::Result<()> {
        self.deferred_error.take().map_or(Ok(()), Err)
    }

    /// When the background flusher should next act, if there is anything for it.
    fn flusher_wake(&self, now: Instant) -> Option<Instant> {
        if self.core.must_send() > 0 {
            Some(now)
        } else {
            self.core.poll_timeout()
        }
    }
}

/// An async stream whose output is coalesced. Cheap to clone internally: all handles
/// ([`NaglessStream`], [`ReadHalf`], [`WriteHalf`]) share one queue.
pub struct NaglessStream<T: AsyncWrite + Unpin + Send + 'static> {
    shared: Arc<Mutex<Shared<T>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding the lock; if something did, the state is still consistent
    // (every mutation is a single call into the core), so keep going.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl NaglessStream<::tokio::net::TcpStream> {
    /// Wraps a tokio TCP stream with the default policy; sets `TCP_NODELAY`.
    pub fn tcp(stream: ::tokio::net::TcpStream) -> io::Result<Self> {
        Self::tcp_with_policy(stream, FlushPolicy::default())
    }

    /// Wraps a tokio TCP stream with `policy`; sets `TCP_NODELAY`.
    pub fn tcp_with_policy(
        stream: ::tokio::net::TcpStream,
        policy: FlushPolicy,
    ) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        let mut core = Coalescer::new(policy);
        refresh_segment(&mut core, stream.as_fd());
        Ok(Self::from_parts(stream, core))
    }

    /// A `TCP_INFO` snapshot of the socket (Linux).
    pub fn tcp_info(&self) -> io::Result<TcpInfo> {
        TcpInfo::of(&lock(&self.shared).io)
    }
}

impl<T: AsyncWrite + Unpin + Send + 'static> NaglessStream<T> {
    /// Wraps any async stream with `policy` (set `TCP_NODELAY` yourself on TCP sockets).
    pub fn new(io: T, policy: FlushPolicy) -> Self {
        Self::from_parts(io, Coalescer::new(policy))
    }

    fn from_parts(io: T, core: Coalescer) -> Self {
        Self {
            shared: Arc::new(Mutex::new(Shared {
                io,
                core,
                deferred_error: None,
                flusher_running: false,
            })),
        }
    }

    /// Splits into a read half and a write half sharing one queue: reading through the read
    /// half still flushes what the write half queued.
    pub fn into_split(self) -> (ReadHalf<T>, WriteHalf<T>) {
        let other = Arc::clone(&self.shared);
        let shared = Arc::clone(&self.shared);
        drop(self);
        (ReadHalf { shared }, WriteHalf { shared: other })
    }
}

/// Starts the background flusher if bytes are waiting on a deadline or on socket space.
fn ensure_flusher<T: AsyncWrite + Unpin + Send + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    guard: &mut Shared<T>,
    now: Instant,
) {
    if guard.flusher_running || guard.flusher_wake(now).is_none() {
        return;
    }
    let Ok(handle) = ::tokio::runtime::Handle::try_current() else {
        // Outside a runtime no timer exists: the deadline is honoured at the next call.
        return;
    };
    guard.flusher_running = true;
    let weak = Arc::downgrade(arc);
    handle.spawn(flusher(weak));
}

async fn flusher<T: AsyncWrite + Unpin + Send + 'static>(weak: Weak<Mutex<Shared<T>>>) {
    loop {
        let wake = {
            let Some(arc) = weak.upgrade() else { return };
            let mut g = lock(&arc);
            match g.flusher_wake(now()) {
                Some(t) => t,
                None => {
                    g.flusher_running = false;
                    return;
                }
            }
        };
        ::tokio::time::sleep_until(::tokio::time::Instant::from_std(wake)).await;
        let result = std::future::poll_fn(|cx| {
            let Some(arc) = weak.upgrade() else {
                return Poll::Ready(Ok(()));
            };
            let mut g = lock(&arc);
            match g.drive(cx, now()) {
                Ok(Drive::Idle) => Poll::Ready(Ok(())),
                Ok(Drive::Blocked) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            }
        })
        .await;
        if let Err(e) = result {
            if let Some(arc) = weak.upgrade() {
                let mut g = lock(&arc);
                g.deferred_error = Some(e);
                g.flusher_running = false;
            }
            return;
        }
    }
}

fn poll_write_shared<T: AsyncWrite + Unpin + Send + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    cx: &mut Context<'_>,
    buf: &[u8],
    urgency: Urgency,
) -> Poll<io::Result<usize>> {
    let mut g = lock(arc);
    g.take_deferred()?;
    let now = now();
    if g.core.over_high_water() {
        g.drive(cx, now)?;
        if g.core.over_high_water() {
            return Poll::Pending;
        }
    }
    g.core.write(buf, urgency, now);
    if let Err(e) = g.drive(cx, now) {
        g.deferred_error = Some(e);
    }
    ensure_flusher(arc, &mut g, now);
    Poll::Ready(Ok(buf.len()))
}

fn poll_flush_shared<T: AsyncWrite + Unpin + Send + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    cx: &mut Context<'_>,
    closing: bool,
) -> Poll<io::Result<()>> {
    let mut g = lock(arc);
    g.take_deferred()?;
    if closing {
        g.core.close();
    } else {
        g.core.flush();
    }
    match g.drive(cx, now())? {
        Drive::Blocked => Poll::Pending,
        Drive::Idle if closing => Pin::new(&mut g.io).poll_shutdown(cx),
        Drive::Idle => Pin::new(&mut g.io).poll_flush(cx),
    }
}

fn poll_read_shared<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    let mut g = lock(arc);
    g.take_deferred()?;
    let now = now();
    // Try the read first: input that is already there is read without flushing, so output
    // keeps coalescing; pending output stays bounded by the linger timer.
    let filled = buf.filled().len();
    match Pin::new(&mut g.io).poll_read(cx, buf) {
        Poll::Ready(Ok(())) if buf.filled().len() > filled || buf.remaining() == 0 => {
            ensure_flusher(arc, &mut g, now);
            return Poll::Ready(Ok(()));
        }
        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
        // Pending: we are about to wait. Ready with nothing: EOF; flush before reporting it.
        Poll::Ready(Ok(())) | Poll::Pending => {}
    }
    g.core.before_read();
    // A full socket must not stop us from reading: the flusher finishes the send.
    g.drive(cx, now)?;
    ensure_flusher(arc, &mut g, now);
    // Poll again so that the read waker is registered after the flush (and a reply to what
    // we just sent may already be there).
    Pin::new(&mut g.io).poll_read(cx, buf)
}

/// Best-effort flush on release of the last handle: sends what the socket takes at once.
fn flush_on_drop<T: AsyncWrite + Unpin + Send + 'static>(arc: &Arc<Mutex<Shared<T>>>) {
    // The flusher holds only weak references, so a strong count of 1 means "last handle".
    if Arc::strong_count(arc) != 1 {
        return;
    }
    let mut g = lock(arc);
    g.core.close();
    let mut cx = Context::from_waker(Waker::noop());
    let _ = g.drive(&mut cx, now());
}

macro_rules! impl_async_write {
    ($ty:ident) => {
        impl<T: AsyncWrite + Unpin + Send + 'static> $ty<T> {
            /// Queues `buf` with an explicit [`Urgency`] (the async twin of
            /// [`crate::NaglessStream::write_with`]); waits only past the high-water mark.
            pub fn poll_write_with(
                &self,
                cx: &mut Context<'_>,
                buf: &[u8],
                urgency: Urgency,
            ) -> Poll<io::Result<usize>> {
                poll_write_shared(&self.shared, cx, buf, urgency)
            }

            /// Queues `buf` with an explicit [`Urgency`], e.g. `SendNow` for a keepalive.
            pub async fn write_with(&self, buf: &[u8], urgency: Urgency) -> io::Result<usize> {
                std::future::poll_fn(|cx| self.poll_write_with(cx, buf, urgency)).await
            }

            /// Bytes accepted but not yet taken by the socket.
            pub fn pending(&self) -> usize {
                lock(&self.shared).core.pending()
            }

            /// Per-stream counters.
            pub fn stats(&self) -> Stats {
                lock(&self.shared).core.stats().clone()
            }
        }

        impl<T: AsyncWrite + Unpin + Send + 'static> AsyncWrite for $ty<T> {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                poll_write_shared(&self.shared, cx, buf, Urgency::Normal)
            }
            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                poll_flush_shared(&self.shared, cx, false)
            }
            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                poll_flush_shared(&self.shared, cx, true)
            }
        }
        impl<T: AsyncWrite + Unpin + Send + 'static> Drop for $ty<T> {
            fn drop(&mut self) {
                flush_on_drop(&self.shared);
            }
        }
    };
}

macro_rules! impl_async_read {
    ($ty:ident) => {
        impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncRead for $ty<T> {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                poll_read_shared(&self.shared, cx, buf)
            }
        }
    };
}

/// The read half of a split [`NaglessStream`]; reading flushes the write half's queue first.
pub struct ReadHalf<T: AsyncWrite + Unpin + Send + 'static> {
    shared: Arc<Mutex<Shared<T>>>,
}

/// The write half of a split [`NaglessStream`].
pub struct WriteHalf<T: AsyncWrite + Unpin + Send + 'static> {
    shared: Arc<Mutex<Shared<T>>>,
}

impl<T: AsyncWrite + Unpin + Send + 'static> Drop for ReadHalf<T> {
    fn drop(&mut self) {
        flush_on_drop(&self.shared);
    }
}

impl_async_write!(NaglessStream);
impl_async_write!(WriteHalf);
impl_async_read!(NaglessStream);
impl_async_read!(ReadHalf);
