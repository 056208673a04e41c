//! The TLS layer for tokio (features `tls` and `tokio`): [`TlsStream`] is `AsyncRead +
//! AsyncWrite` over a rustls connection, with the rules of [`crate::tls`]: plaintext queued,
//! sealed as one record (or full records) and sent with one gathered write per flush, at the
//! same moments as [`crate::tokio_adapter::NaglessStream`] releases bytes.
//!
//! It replaces `tokio_rustls::server::TlsStream<NaglessStream>` (which writes one record per
//! `poll_write`): wrap the accepted socket and a `rustls::ServerConnection` (or a
//! `ClientConnection` for a client) and hand the stream to hyper, axum or your own protocol.
//!
//! - **Handshake**: driven by the first read or flush (or [`TlsStream::handshake`]);
//!   plaintext written before it completes waits in the queue.
//! - **Before-read**: `poll_read` first reads input that is already there without flushing;
//!   when it would wait, it seals and sends pending plaintext first.
//! - **Linger by timer**: with a linger deadline pending, a small background task (holding
//!   only a weak reference) sleeps until it and flushes, as the tokio adapter does; the
//!   runtime needs its time driver for a linger policy.
//! - **One socket, several waiters**: the socket is always polled for write readiness with
//!   one fan-out waker that wakes every task waiting for socket space (the writer, the reader
//!   and the timer task), so none is forgotten. Input is polled with the waker of the task
//!   that asks: while the handshake is incomplete a flush may read too, so a stream split
//!   into a reading and a writing task should complete the handshake first
//!   ([`TlsStream::handshake`]), or a waiter for input may be forgotten.
//! - **Closing**: `shutdown().await` seals everything, sends close_notify after it, then
//!   shuts the write side down. Dropping the stream sends what the socket takes at once and
//!   hands the rest to a background task (at most [`DRAIN_LIMIT`]); no close_notify.
//!   Plaintext written while the handshake is still incomplete is lost on drop.
//! - **TLS's own messages** (handshake, alerts, key update answers) are sent as soon as rustls
//!   produces them.

use std::future::Future;
use std::io::{self, IoSlice, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::clock::now;
use crate::coalescer::{Coalescer, Drive, Stats};
use crate::legacy::io_glue::{queue_vectored, set_nodelay_if_tcp};
use crate::legacy::tls::{Engine, TlsConnection, WireStats};
use crate::legacy::tokio_adapter::{has_time_driver, lock, WriteWaiters};
use crate::policy::{FlushPolicy, Urgency};
use crate::sys::AsOsSocket;
use crate::tcp_info::TcpInfo;

pub use crate::legacy::tokio_adapter::DRAIN_LIMIT;

/// The async transport seen by the engine as `Read + Write`: `Pending` reads as
/// `WouldBlock`. Reads register the caller's waker, writes the fan-out waker.
struct Adapter<'a, 'r, 'w, T> {
    io: &'a mut T,
    read_cx: &'a mut Context<'r>,
    write_cx: &'a mut Context<'w>,
}

impl<T: AsyncRead + Unpin> Read for Adapter<'_, '_, '_, T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut rb = ReadBuf::new(buf);
        match Pin::new(&mut *self.io).poll_read(self.read_cx, &mut rb) {
            Poll::Ready(Ok(())) => Ok(rb.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<T: AsyncWrite + Unpin> Write for Adapter<'_, '_, '_, T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write_vectored(self.write_cx, bufs) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Shared<T, C> {
    engine: Engine<C>,
    io: T,
    deferred_error: Option<io::Error>,
    flusher_running: bool,
    // Converged (the driver's flusher): the flusher's waker while it sleeps.
    flusher_sleeping: Option<Waker>,
    waiters: Arc<WriteWaiters>,
    fanout: Waker,
}

impl<T, C> Shared<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin,
    C: TlsConnection,
{
    /// Seals and sends what is due. The caller's waker (`cx`) is registered for input when
    /// the handshake must read, and for socket space when the send blocks. `WouldBlock`
    /// from a handshake read comes back as an error.
    fn pump(&mut self, cx: &mut Context<'_>, now: Instant, handshake: bool) -> io::Result<Drive> {
        self.waiters.register(cx.waker());
        let fanout = self.fanout.clone();
        let mut wcx = Context::from_waker(&fanout);
        let mut io = Adapter {
            io: &mut self.io,
            read_cx: cx,
            write_cx: &mut wcx,
        };
        let r = self.engine.pump(&mut io, now, handshake);
        if !matches!(r, Ok(Drive::Blocked)) {
            self.waiters.unregister(cx.waker());
        }
        r
    }

    fn take_deferred(&mut self) -> io::Result<()> {
        self.deferred_error.take().map_or(Ok(()), Err)
    }

    fn defer(&mut self, e: io::Error) {
        self.deferred_error.get_or_insert(e);
    }

    /// When the background flusher should act next, if at all. Nothing while handshaking:
    /// the reads and flushes of the owner drive the handshake.
    fn flusher_wake(&self, now: Instant) -> Option<Instant> {
        if self.engine.conn.is_handshaking() {
            None
        } else if self.engine.core.must_send() > 0 || self.engine.conn.wants_write() {
            Some(now)
        } else {
            self.engine.core.poll_timeout()
        }
    }
}

/// An async TLS stream whose plaintext is coalesced: one record batch and one gathered
/// write per flush. See the [module docs](self).
///
/// ```no_run
/// # async fn demo(config: std::sync::Arc<rustls::ServerConfig>) -> std::io::Result<()> {
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use nagless::tokio_tls::TlsStream;
///
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8443").await?;
/// let (tcp, _) = listener.accept().await?;
/// let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
/// let mut tls = TlsStream::new(conn, tcp)?;
/// tls.handshake().await?;
/// let mut request = [0u8; 1024];
/// tls.read(&mut request).await?;
/// tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n").await?;
/// tls.write_all(b"ok").await?; // one record with the line above, one send
/// tls.shutdown().await?; // then close_notify
/// # Ok(()) }
/// ```
pub struct TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    shared: Arc<Mutex<Shared<T, C>>>,
}

type Arced<T, C> = Arc<Mutex<Shared<T, C>>>;

impl<C: TlsConnection + Send + 'static> TlsStream<::tokio::net::TcpStream, C> {
    /// Wraps a connected tokio TCP stream and a fresh rustls connection with the default
    /// [`FlushPolicy`]; sets `TCP_NODELAY`.
    pub fn new(conn: C, tcp: ::tokio::net::TcpStream) -> io::Result<Self> {
        Self::from_socket(conn, tcp, FlushPolicy::default())
    }
}

impl<T, C> TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    /// Wraps an async socket with `policy`; sets `TCP_NODELAY` if it is a TCP socket.
    pub fn from_socket(conn: C, io: T, policy: FlushPolicy) -> io::Result<Self>
    where
        T: AsOsSocket,
    {
        set_nodelay_if_tcp(io.as_os_socket())?;
        Self::from_io(conn, io, policy)
    }

    /// Wraps any async byte stream with `policy`. A policy with a linger deadline needs a
    /// runtime with tokio's time driver.
    pub fn from_io(conn: C, io: T, policy: FlushPolicy) -> io::Result<Self> {
        if policy.linger.deadline().is_some() && !has_time_driver() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "nagless: this tokio runtime has no time driver, which the linger deadline \
                 needs; build it with enable_time() or enable_all(), or use a policy without \
                 linger",
            ));
        }
        let waiters = Arc::new(WriteWaiters::default());
        Ok(Self {
            shared: Arc::new(Mutex::new(Shared {
                engine: Engine::new(conn, policy),
                io,
                deferred_error: None,
                flusher_running: false,
                flusher_sleeping: None,
                fanout: Waker::from(Arc::clone(&waiters)),
                waiters,
            })),
        })
    }

    /// Runs `f` on the rustls connection (the negotiated protocol, the peer's certificates).
    pub fn with_conn<R>(&self, f: impl FnOnce(&C) -> R) -> R {
        f(&lock(&self.shared).engine.conn)
    }

    /// Plaintext bytes accepted and not yet sealed.
    pub fn pending(&self) -> usize {
        lock(&self.shared).engine.core.pending()
    }

    /// Plaintext counters: writes, flushes by reason; here `bytes_sent` counts plaintext
    /// handed to rustls and `syscalls` counts seals and input checks (the socket's sends are
    /// in [`wire_stats`](Self::wire_stats)).
    pub fn stats(&self) -> Stats {
        lock(&self.shared).engine.core.stats().clone()
    }

    /// Ciphertext counters (seals, sends, bytes).
    pub fn wire_stats(&self) -> WireStats {
        lock(&self.shared).engine.wire.clone()
    }

    /// A `TCP_INFO` snapshot of the socket (Linux; `ErrorKind::Unsupported` elsewhere).
    pub fn tcp_info(&self) -> io::Result<TcpInfo>
    where
        T: AsOsSocket,
    {
        TcpInfo::of(&lock(&self.shared).io)
    }

    /// Completes the handshake (it otherwise completes at the first read or flush).
    pub async fn handshake(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| {
            let mut g = lock(&self.shared);
            loop {
                if !g.engine.conn.is_handshaking() {
                    return match g.pump(cx, now(), false) {
                        Ok(Drive::Idle) => Poll::Ready(Ok(())),
                        Ok(Drive::Blocked) => Poll::Pending,
                        Err(e) => Poll::Ready(Err(e)),
                    };
                }
                match g.pump(cx, now(), false) {
                    Ok(Drive::Idle) => {}
                    Ok(Drive::Blocked) => return Poll::Pending,
                    Err(e) => return Poll::Ready(Err(e)),
                }
                let g = &mut *g;
                let fanout = g.fanout.clone();
                let mut wcx = Context::from_waker(&fanout);
                let mut io = Adapter {
                    io: &mut g.io,
                    read_cx: cx,
                    write_cx: &mut wcx,
                };
                match g.engine.read_input(&mut io) {
                    Ok(crate::legacy::tls::Input::Read) => {}
                    Ok(crate::legacy::tls::Input::Eof) => {
                        return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()))
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        })
        .await
    }

    /// Sends a TLS 1.3 KeyUpdate now; what follows is sealed under the new keys, in order.
    /// Fails before the handshake completes or under TLS 1.2.
    pub async fn refresh_traffic_keys(&mut self) -> io::Result<()> {
        lock(&self.shared)
            .engine
            .conn
            .refresh_traffic_keys()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        std::future::poll_fn(|cx| {
            let mut g = lock(&self.shared);
            match g.pump(cx, now(), false) {
                Ok(Drive::Idle) => Poll::Ready(Ok(())),
                Ok(Drive::Blocked) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            }
        })
        .await
    }

    /// Queues `buf` (as much as fits below the high-water mark) with an explicit
    /// [`Urgency`]; waits only when nothing fits.
    pub fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
        urgency: Urgency,
    ) -> Poll<io::Result<usize>> {
        poll_write_shared(&self.shared, cx, buf.len(), |core, n, now| {
            core.write(&buf[..n], urgency, now)
        })
    }
}

/// Starts the background flusher if plaintext waits on a deadline or on socket space.
fn ensure_flusher<T, C>(arc: &Arced<T, C>, g: &mut Shared<T, C>, now: Instant)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    // Converged (the driver's flusher): a sleeping flusher is woken when bytes become due.
    if g.flusher_running {
        if g.engine.core.must_send() > 0 || g.engine.conn.wants_write() {
            if let Some(w) = g.flusher_sleeping.take() {
                w.wake();
            }
        }
        return;
    }
    if g.flusher_wake(now).is_none() {
        return;
    }
    if let Ok(h) = ::tokio::runtime::Handle::try_current() {
        g.flusher_running = true;
        h.spawn(flusher(Arc::downgrade(arc)));
    }
}

async fn flusher<T, C>(weak: Weak<Mutex<Shared<T, C>>>)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
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
        // Converged (the driver's flusher): the sleep ends early when bytes become due.
        if wake > now() {
            let sleep = ::tokio::time::sleep_until(::tokio::time::Instant::from_std(wake));
            let mut sleep = std::pin::pin!(sleep);
            std::future::poll_fn(|cx| {
                if sleep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
                let Some(arc) = weak.upgrade() else {
                    return Poll::Ready(());
                };
                let mut g = lock(&arc);
                if g.engine.core.must_send() > 0 || g.engine.conn.wants_write() {
                    return Poll::Ready(());
                }
                g.flusher_sleeping = Some(cx.waker().clone());
                Poll::Pending
            })
            .await;
            if let Some(arc) = weak.upgrade() {
                lock(&arc).flusher_sleeping = None;
            }
        }
        let result = std::future::poll_fn(|cx| {
            let Some(arc) = weak.upgrade() else {
                return Poll::Ready(Ok(()));
            };
            let mut g = lock(&arc);
            match g.pump(cx, now(), false) {
                Ok(Drive::Idle) => Poll::Ready(Ok(())),
                Ok(Drive::Blocked) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            }
        })
        .await;
        if let Err(e) = result {
            if let Some(arc) = weak.upgrade() {
                let mut g = lock(&arc);
                g.defer(e);
                g.flusher_running = false;
            }
            return;
        }
    }
}

fn poll_write_shared<T, C>(
    arc: &Arced<T, C>,
    cx: &mut Context<'_>,
    len: usize,
    queue: impl FnOnce(&mut Coalescer, usize, Instant),
) -> Poll<io::Result<usize>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    let mut g = lock(arc);
    g.take_deferred()?;
    g.engine.check_open()?;
    let now = now();
    if g.engine.core.room() == 0 && len > 0 {
        match g.pump(cx, now, true) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
            Ok(_) => {}
        }
        if g.engine.core.room() == 0 {
            return Poll::Pending;
        }
    }
    let take = len.min(g.engine.core.room());
    queue(&mut g.engine.core, take, now);
    let noop = Waker::noop();
    let mut quiet = Context::from_waker(noop);
    if let Err(e) = g.pump(&mut quiet, now, false) {
        g.defer(e);
    }
    ensure_flusher(arc, &mut g, now);
    Poll::Ready(Ok(take))
}

fn poll_flush_shared<T, C>(
    arc: &Arced<T, C>,
    cx: &mut Context<'_>,
    closing: bool,
) -> Poll<io::Result<()>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    let mut g = lock(arc);
    g.take_deferred()?;
    let now = now();
    if closing {
        g.engine.core.close();
    } else {
        g.engine.core.flush();
    }
    let blocked = |g: &mut Shared<T, C>| {
        ensure_flusher(arc, g, now);
        Poll::Pending
    };
    match g.pump(cx, now, true) {
        Ok(Drive::Idle) => {}
        Ok(Drive::Blocked) => return blocked(&mut g),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
        Err(e) => return Poll::Ready(Err(e)),
    }
    if !closing {
        return Pin::new(&mut g.io).poll_flush(cx);
    }
    if !g.engine.closed && g.engine.core.pending() == 0 {
        g.engine.queue_close_notify();
    }
    match g.pump(cx, now, true) {
        Ok(Drive::Idle) => Pin::new(&mut g.io).poll_shutdown(cx),
        Ok(Drive::Blocked) => blocked(&mut g),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        Err(e) => Poll::Ready(Err(e)),
    }
}

fn poll_read_shared<T, C>(
    arc: &Arced<T, C>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    let mut g = lock(arc);
    let mut flushed = false;
    loop {
        if let Some(r) = g.engine.read_plain(buf.initialize_unfilled()) {
            let n = r?;
            buf.advance(n);
            let now = now();
            if n == 0 && g.engine.core.pending() > 0 {
                // The peer ended its side: flush before reporting it.
                g.engine.core.before_read();
                match g.pump(cx, now, false) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => g.defer(e),
                }
            }
            ensure_flusher(arc, &mut g, now);
            return Poll::Ready(Ok(()));
        }
        // More input is needed: read what is there without flushing first.
        let g2 = &mut *g;
        let fanout = g2.fanout.clone();
        let mut wcx = Context::from_waker(&fanout);
        let mut io = Adapter {
            io: &mut g2.io,
            read_cx: cx,
            write_cx: &mut wcx,
        };
        match g2.engine.read_input(&mut io) {
            // Bytes, or the end of the stream (reported by the reader next round). They may
            // have completed the handshake, letting plaintext queued during it leave: the next
            // wait flushes again.
            Ok(_) => flushed = false,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !flushed => {
                // About to wait: seal and send pending plaintext first (before-read), then
                // read again, so that the read waker is registered after the flush.
                flushed = true;
                let now = now();
                g.engine.core.before_read();
                match g.pump(cx, now, false) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // A send error belongs to the writer (the next write, flush or shutdown).
                    Err(e) => g.defer(e),
                }
                ensure_flusher(arc, &mut g, now);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

impl<T, C> AsyncRead for TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    /// Decrypted plaintext; seals and sends pending plaintext first when the read would wait.
    /// Ends (`Ok` with nothing read) at the peer's close_notify; `UnexpectedEof` if the peer
    /// closed TCP without one.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read_shared(&self.shared, cx, buf)
    }
}

impl<T, C> AsyncWrite for TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, buf, Urgency::Normal)
    }

    /// Queues the slices as one message (hyper hands whole responses over this way).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total = bufs.iter().map(|b| b.len()).sum();
        poll_write_shared(&self.shared, cx, total, |core, n, now| {
            queue_vectored(core, bufs, n, now)
        })
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Seals everything pending as one record batch and sends it (completing the handshake
    /// first if needed).
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        poll_flush_shared(&self.shared, cx, false)
    }

    /// Seals everything, sends close_notify after it, then shuts the write side down.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        poll_flush_shared(&self.shared, cx, true)
    }
}

impl<T, C> Drop for TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    fn drop(&mut self) {
        let mut g = lock(&self.shared);
        g.engine.core.close();
        let mut quiet = Context::from_waker(Waker::noop());
        if !matches!(g.pump(&mut quiet, now(), false), Ok(Drive::Blocked)) {
            return;
        }
        drop(g);
        let Ok(h) = ::tokio::runtime::Handle::try_current() else {
            return;
        };
        let owned = Arc::clone(&self.shared);
        let timer = has_time_driver();
        h.spawn(async move {
            let drain = std::future::poll_fn(|cx| match lock(&owned).pump(cx, now(), false) {
                Ok(Drive::Blocked) => Poll::Pending,
                Ok(Drive::Idle) | Err(_) => Poll::Ready(()),
            });
            if timer {
                let _ = ::tokio::time::timeout(DRAIN_LIMIT, drain).await;
            } else {
                drain.await;
            }
        });
    }
}

impl<T, C> std::fmt::Debug for TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: TlsConnection + Send + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = lock(&self.shared);
        f.debug_struct("TlsStream")
            .field("pending", &g.engine.core.pending())
            .field("handshaking", &g.engine.conn.is_handshaking())
            .field("policy", g.engine.core.policy())
            .finish_non_exhaustive()
    }
}
