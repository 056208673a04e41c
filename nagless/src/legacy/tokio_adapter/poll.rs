//! The poll functions every handle shares (write; flush or shutdown; read, which flushes
//! before it waits) and the `AsyncRead`/`AsyncWrite` impls and inherent methods they back on
//! [`NaglessStream`], [`WriteHalf`] and [`ReadHalf`].

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::lane::Lane;
use super::shared::{lock, Shared};
use super::tasks::{ensure_flusher, flush_on_drop};
use super::{NaglessStream, ReadHalf, WriteHalf};
use crate::clock::now;
use crate::coalescer::{Coalescer, Drive, Stats};
use crate::legacy::io_glue::queue_vectored;
use crate::policy::Urgency;
use crate::sys::AsOsSocket;
use crate::tcp_info::TcpInfo;

/// Queues as much of one message as fits below the high-water mark; waits (registering the
/// writer) only when nothing fits. What `lane` holds goes first, and the lane is opened again
/// afterwards if the state allows.
///
/// `fast`: the bytes of a normal write, which may take the fast path.
#[inline]
fn poll_write_shared<T: AsyncWrite + Unpin + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    lane: &mut Lane,
    cx: &mut Context<'_>,
    len: usize,
    fast: Option<&[u8]>,
    queue: impl FnOnce(&mut Coalescer, usize, Instant),
) -> Poll<io::Result<usize>> {
    let mut g = lock(arc);
    g.take_lane(lane);
    let r = if fast.is_some_and(|buf| g.write_fast(buf)) {
        Poll::Ready(Ok(len))
    } else {
        poll_write_full(arc, &mut g, cx, len, queue)
    };
    lane.open(&g);
    r
}

/// The full path of [`poll_write_shared`], kept out of line so that the fast path inlines.
#[inline(never)]
fn poll_write_full<T: AsyncWrite + Unpin + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    g: &mut MutexGuard<'_, Shared<T>>,
    cx: &mut Context<'_>,
    len: usize,
    queue: impl FnOnce(&mut Coalescer, usize, Instant),
) -> Poll<io::Result<usize>> {
    g.take_deferred()?;
    let now = {
        let g = &mut **g;
        g.clock.for_write(&g.core)
    };
    if g.core.room() == 0 && len > 0 {
        g.drive(Some(cx.waker()), now)?;
        if g.core.room() == 0 {
            return Poll::Pending;
        }
    }
    let take = len.min(g.core.room());
    queue(&mut g.core, take, now);
    if let Err(e) = g.drive(None, now) {
        g.defer(e);
    }
    ensure_flusher(arc, g, now);
    Poll::Ready(Ok(take))
}

fn poll_flush_shared<T: AsyncWrite + Unpin + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    lane: &mut Lane,
    cx: &mut Context<'_>,
    closing: bool,
) -> Poll<io::Result<()>> {
    let mut g = lock(arc);
    g.take_lane(lane);
    g.take_deferred()?;
    if closing {
        g.core.close();
    } else {
        g.core.flush();
    }
    let now = now();
    match g.drive(Some(cx.waker()), now)? {
        Drive::Blocked => {
            // Should this flush be given up (its future dropped), the bytes it made due must
            // not wait for a linger deadline the flusher sleeps towards.
            ensure_flusher(arc, &mut g, now);
            Poll::Pending
        }
        Drive::Idle if closing => Pin::new(&mut g.io).poll_shutdown(cx),
        Drive::Idle => Pin::new(&mut g.io).poll_flush(cx),
    }
}

/// `lane`: the writing handle's, when it reads too (the unsplit stream).
fn poll_read_shared<T: AsyncRead + AsyncWrite + Unpin + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    lane: Option<&mut Lane>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    let mut g = lock(arc);
    if let Some(lane) = lane {
        g.take_lane(lane);
    }
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
    // A full socket must not stop us from reading: the flusher finishes the send. A send
    // error belongs to the writer (the next write, flush or shutdown), not to this read.
    if let Err(e) = g.drive(None, now) {
        g.defer(e);
    }
    ensure_flusher(arc, &mut g, now);
    // Poll again so that the read waker is registered after the flush (and a reply to what
    // we just sent may already be there).
    Pin::new(&mut g.io).poll_read(cx, buf)
}

macro_rules! impl_async_write {
    ($ty:ident) => {
        impl<T: AsyncWrite + Unpin + 'static> $ty<T> {
            /// Queues `buf` (or as much as fits below the high-water mark) with an explicit
            /// [`Urgency`] (the async twin of [`crate::NaglessStream::write_with`]); waits
            /// only when nothing fits below the high-water mark.
            // Always inlined: the lane, and the shared fast path under the lock, are the cost
            // of a small write; the full path stays out of line.
            #[inline(always)]
            pub fn poll_write_with(
                &mut self,
                cx: &mut Context<'_>,
                buf: &[u8],
                urgency: Urgency,
            ) -> Poll<io::Result<usize>> {
                let normal = urgency == Urgency::Normal;
                if normal && self.lane.push(buf) {
                    return Poll::Ready(Ok(buf.len()));
                }
                let fast = normal.then_some(buf);
                poll_write_shared(
                    &self.shared,
                    &mut self.lane,
                    cx,
                    buf.len(),
                    fast,
                    |core, n, now| core.write(&buf[..n], urgency, now),
                )
            }

            /// Queues `buf` with an explicit [`Urgency`], e.g. `SendNow` for a keepalive;
            /// returns how many bytes were accepted.
            pub async fn write_with(&mut self, buf: &[u8], urgency: Urgency) -> io::Result<usize> {
                std::future::poll_fn(|cx| self.poll_write_with(cx, buf, urgency)).await
            }

            /// Bytes accepted but not yet taken by the socket.
            pub fn pending(&self) -> usize {
                lock(&self.shared).core.pending() + self.lane.len()
            }

            /// Per-stream counters.
            pub fn stats(&self) -> Stats {
                let mut stats = lock(&self.shared).core.stats().clone();
                stats.writes += self.lane.writes();
                stats.bytes_written += self.lane.len() as u64;
                stats
            }
        }

        impl<T: AsyncWrite + Unpin + 'static + AsOsSocket> $ty<T> {
            /// A `TCP_INFO` snapshot of the socket (Linux; `ErrorKind::Unsupported` elsewhere).
            pub fn tcp_info(&self) -> io::Result<TcpInfo> {
                TcpInfo::of(&lock(&self.shared).io)
            }
        }

        impl<T: AsyncWrite + Unpin + 'static> AsyncWrite for $ty<T> {
            #[inline]
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.get_mut().poll_write_with(cx, buf, Urgency::Normal)
            }
            /// Queues the slices as one message, as many bytes as fit below the high-water
            /// mark: hyper and rustls hand whole responses over this way.
            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                let total = bufs.iter().map(|b| b.len()).sum();
                let this = self.get_mut();
                poll_write_shared(
                    &this.shared,
                    &mut this.lane,
                    cx,
                    total,
                    None,
                    |core, n, now| queue_vectored(core, bufs, n, now),
                )
            }
            fn is_write_vectored(&self) -> bool {
                true
            }
            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                let this = self.get_mut();
                poll_flush_shared(&this.shared, &mut this.lane, cx, false)
            }
            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                let this = self.get_mut();
                poll_flush_shared(&this.shared, &mut this.lane, cx, true)
            }
        }
        impl<T: AsyncWrite + Unpin + 'static> Drop for $ty<T> {
            fn drop(&mut self) {
                if self.lane.writes() > 0 {
                    lock(&self.shared).take_lane(&mut self.lane);
                }
                flush_on_drop(&self.shared);
            }
        }
    };
}

impl_async_write!(NaglessStream);
impl_async_write!(WriteHalf);

impl<T: AsyncRead + AsyncWrite + Unpin + 'static> AsyncRead for NaglessStream<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        poll_read_shared(&this.shared, Some(&mut this.lane), cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin + 'static> AsyncRead for ReadHalf<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read_shared(&self.shared, None, cx, buf)
    }
}
