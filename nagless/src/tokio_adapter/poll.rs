//! The poll functions every tokio handle shares, plain or TLS (write; flush or shutdown), the
//! plain stream's read (which flushes before it waits), and the `AsyncRead`/`AsyncWrite`
//! impls and inherent methods they back on [`NaglessStream`], [`WriteHalf`] and
//! [`ReadHalf`].

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::shared::Locked;
use super::tasks::{ensure_flusher, TokioSeal};
use super::{NaglessStream, ReadHalf, WriteHalf};
use crate::clock::now;
use crate::coalescer::{Coalescer, Drive, Stats};
use crate::driver::Plain;
use crate::io_glue::queue_vectored;
use crate::policy::Urgency;
use crate::sys::AsOsSocket;
use crate::tcp_info::TcpInfo;

/// Starts (or wakes) the flusher if the state needs it.
fn flusher_if_needed<T, S: TokioSeal<T>>(g: &mut Locked<'_, T, S>) {
    let arc = g.arc;
    ensure_flusher(arc, g);
}

/// Queues as much of one message as fits below the high-water mark ([`Driver::accept`]);
/// waits (registering the writer) only when nothing fits.
///
/// `fast`: the bytes of a normal write, which may take the fast path.
///
/// [`Driver::accept`]: crate::driver::Driver::accept
#[inline]
pub(crate) fn poll_write_locked<T, S>(
    g: &mut Locked<'_, T, S>,
    cx: &mut Context<'_>,
    len: usize,
    fast: Option<&[u8]>,
    queue: impl FnOnce(&mut Coalescer, usize, Instant),
) -> Poll<io::Result<usize>>
where
    T: AsyncWrite + Unpin,
    S: TokioSeal<T>,
{
    if fast.is_some_and(|buf| g.driver.write_fast(buf)) {
        return Poll::Ready(Ok(len));
    }
    poll_write_full(g, cx, len, queue)
}

/// The full path of [`poll_write_locked`], kept out of line so that the fast path inlines.
#[inline(never)]
fn poll_write_full<T, S>(
    g: &mut Locked<'_, T, S>,
    cx: &mut Context<'_>,
    len: usize,
    queue: impl FnOnce(&mut Coalescer, usize, Instant),
) -> Poll<io::Result<usize>>
where
    T: AsyncWrite + Unpin,
    S: TokioSeal<T>,
{
    match g.step(cx, |d, w| d.accept(w, len, queue)) {
        Ok(take) => {
            flusher_if_needed(g);
            Poll::Ready(Ok(take))
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        Err(e) => Poll::Ready(Err(e)),
    }
}

/// Flushes (or, `closing`, sends everything and what the seal sends last, then shuts the
/// write side down); waits for socket space, and for a handshake's input.
pub(crate) fn poll_flush_locked<T, S>(
    g: &mut Locked<'_, T, S>,
    cx: &mut Context<'_>,
    closing: bool,
) -> Poll<io::Result<()>>
where
    T: AsyncWrite + Unpin,
    S: TokioSeal<T>,
{
    if closing {
        g.driver.close_begins()?;
    } else {
        g.driver.take_deferred()?;
        let queue = g.access.can_clock();
        g.driver.flush_point(queue);
    }
    let now = now();
    let pumped = g.pump(cx, true, now, true);
    if let Some(waiting) = wait_on(g, pumped) {
        return waiting;
    }
    if !closing {
        g.driver.batch_ended();
        // A batch handed to a Nagle socket is owed a look (clocked batches).
        flusher_if_needed(g);
        return Pin::new(&mut g.io).poll_flush(cx);
    }
    // (Bytes still pending here were refused by a full socket: `wait_on` returned above.)
    g.driver.close_ends();
    let pumped = g.pump(cx, true, now, true);
    if let Some(waiting) = wait_on(g, pumped) {
        return waiting;
    }
    Pin::new(&mut g.io).poll_shutdown(cx)
}

/// What a flush does after a pump: nothing more to wait for (`None`), or this.
fn wait_on<T, S: TokioSeal<T>>(
    g: &mut Locked<'_, T, S>,
    pumped: io::Result<Drive>,
) -> Option<Poll<io::Result<()>>> {
    match pumped {
        Ok(Drive::Idle) => None,
        Ok(Drive::Blocked) => {
            // Should this flush be given up (its future dropped), the bytes it made due must
            // not wait for a linger deadline the flusher sleeps towards.
            flusher_if_needed(g);
            Some(Poll::Pending)
        }
        // A handshake waits for the peer's input (the read registered the waker).
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(Poll::Pending),
        Err(e) => Some(Poll::Ready(Err(e))),
    }
}

/// The plain stream's read: input that is already there is read without flushing, so output
/// keeps coalescing (pending output stays bounded by the linger timer); when the read would
/// wait, pending output leaves first (before-read).
fn poll_read_plain<T>(
    g: &mut Locked<'_, T, Plain>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let filled = buf.filled().len();
    match poll_socket_read(g, cx, buf) {
        Poll::Ready(Ok(())) if buf.filled().len() > filled || buf.remaining() == 0 => {
            flusher_if_needed(g);
            return Poll::Ready(Ok(()));
        }
        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
        // Pending: we are about to wait. Ready with nothing: EOF; flush before reporting it.
        Poll::Ready(Ok(())) | Poll::Pending => {}
    }
    // A full socket must not stop us from reading: the flusher finishes the send. A send
    // error belongs to the writer (the next write, flush or shutdown), not to this read.
    g.step(cx, |d, w| d.read_would_wait(w, false));
    flusher_if_needed(g);
    // Poll again so that the read waker is registered after the flush (and a reply to what
    // we just sent may already be there).
    poll_socket_read(g, cx, buf)
}

/// One poll of the socket's read; input that came tells the driver the peer answers.
fn poll_socket_read<T>(
    g: &mut Locked<'_, T, Plain>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let filled = buf.filled().len();
    let r = Pin::new(&mut g.io).poll_read(cx, buf);
    if buf.filled().len() > filled {
        g.driver.input_arrived();
    }
    r
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
                if normal && self.owner.push(buf) {
                    return Poll::Ready(Ok(buf.len()));
                }
                let fast = normal.then_some(buf);
                poll_write_locked(
                    &mut self.owner.lock(),
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
                self.owner.peek().driver.core.pending() + self.owner.lane().len()
            }

            /// Per-stream counters.
            pub fn stats(&self) -> Stats {
                let mut stats = self.owner.peek().driver.core.stats().clone();
                stats.writes += self.owner.lane().writes();
                stats.bytes_written += self.owner.lane().len() as u64;
                stats
            }
        }

        impl<T: AsyncWrite + Unpin + 'static + AsOsSocket> $ty<T> {
            /// A `TCP_INFO` snapshot of the socket (Linux; `ErrorKind::Unsupported` elsewhere).
            pub fn tcp_info(&self) -> io::Result<TcpInfo> {
                TcpInfo::of(&self.owner.peek().io)
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
                poll_write_locked(
                    &mut self.get_mut().owner.lock(),
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
                poll_flush_locked(&mut self.get_mut().owner.lock(), cx, false)
            }
            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                poll_flush_locked(&mut self.get_mut().owner.lock(), cx, true)
            }
        }
        impl<T: AsyncWrite + Unpin + 'static> Drop for $ty<T> {
            fn drop(&mut self) {
                self.owner.drop_handle();
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
        poll_read_plain(&mut self.get_mut().owner.lock(), cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin + 'static> AsyncRead for ReadHalf<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read_plain(&mut Locked::new(&self.shared), cx, buf)
    }
}
