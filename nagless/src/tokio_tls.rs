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
//!   only a weak reference) sleeps until it and flushes, the tokio adapter's own (its sleep
//!   ends early when bytes become due and find the socket full); the runtime needs its time
//!   driver for a linger policy.
//! - Streams that are not `Send` (a `LocalSet` program's) are made with
//!   [`TlsStream::from_io_local`]; their background tasks are started with `spawn_local`.
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

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::clock::now;
use crate::coalescer::{Drive, Stats};
use crate::driver::Driver;
use crate::io_glue::{queue_vectored, set_nodelay_if_tcp};
use crate::policy::{FlushPolicy, Urgency};
use crate::sys::AsOsSocket;
use crate::tcp_info::TcpInfo;
use crate::tls::{plaintext_core, tls_error, Input, Tls, TlsConnection, WireStats};
use crate::tokio_adapter::{
    check_local_set, ensure_flusher, flush_on_drop, local_spawner, lock, poll_flush_locked,
    poll_write_locked, runtime_spawner, shared, Arc, Locked, Mutex, Shared, SocketAccess, Spawner,
};

pub use crate::tokio_adapter::DRAIN_LIMIT;

type Arced<T, C> = Arc<Mutex<Shared<T, Tls<C>>>>;

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
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    C: TlsConnection + 'static,
{
    shared: Arced<T, C>,
}

// (tokio has no `net` under loom's model checker.)
#[cfg(not(loom))]
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
        Self::build(conn, io, policy, SocketAccess::socket(), runtime_spawner())
    }

    /// Wraps any async byte stream with `policy`. A policy with a linger deadline needs a
    /// runtime with tokio's time driver.
    pub fn from_io(conn: C, io: T, policy: FlushPolicy) -> io::Result<Self> {
        Self::build(conn, io, policy, SocketAccess::none(), runtime_spawner())
    }
}

impl<T, C> TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    C: TlsConnection + 'static,
{
    /// Wraps an async byte stream that is not `Send`, or a connection that is not (for a
    /// `LocalSet`), with `policy`: its background tasks are started with `spawn_local`, so it
    /// must be made and used inside a `LocalSet` (or a `LocalRuntime`); outside one this is an
    /// error, not a later panic.
    pub fn from_io_local(conn: C, io: T, policy: FlushPolicy) -> io::Result<Self> {
        check_local_set()?;
        Self::build(conn, io, policy, SocketAccess::none(), local_spawner())
    }

    fn build(
        conn: C,
        io: T,
        policy: FlushPolicy,
        access: SocketAccess<T>,
        spawner: Spawner<T, Tls<C>>,
    ) -> io::Result<Self> {
        let driver = Driver::new(plaintext_core(policy), Tls::new(conn));
        Ok(Self {
            shared: shared(io, driver, access, spawner)?,
        })
    }

    /// Runs `f` on the rustls connection (the negotiated protocol, the peer's certificates).
    pub fn with_conn<R>(&self, f: impl FnOnce(&C) -> R) -> R {
        f(&lock(&self.shared).driver.seal.conn)
    }

    /// Plaintext bytes accepted and not yet sealed.
    pub fn pending(&self) -> usize {
        lock(&self.shared).driver.core.pending()
    }

    /// Plaintext counters: writes, flushes by reason; here `bytes_sent` counts plaintext
    /// handed to rustls and `syscalls` counts seals and input checks (the socket's sends are
    /// in [`wire_stats`](Self::wire_stats)).
    pub fn stats(&self) -> Stats {
        lock(&self.shared).driver.core.stats().clone()
    }

    /// Ciphertext counters (seals, sends, bytes).
    pub fn wire_stats(&self) -> WireStats {
        lock(&self.shared).driver.seal.wire.clone()
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
            let mut g = Locked::new(&self.shared);
            loop {
                let handshaking = g.driver.seal.conn.is_handshaking();
                match g.step(cx, |d, w| d.pump_waiting(w, now(), false)) {
                    Ok(Drive::Idle) if !handshaking => return Poll::Ready(Ok(())),
                    Ok(Drive::Idle) => {}
                    Ok(Drive::Blocked) => return Poll::Pending,
                    Err(e) => return Poll::Ready(Err(e)),
                }
                match g.step(cx, |d, w| d.seal.read_input(w)) {
                    Ok(Input::Read) => {}
                    Ok(Input::Eof) => return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
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
            .driver
            .seal
            .conn
            .refresh_traffic_keys()
            .map_err(tls_error)?;
        std::future::poll_fn(|cx| {
            let mut g = Locked::new(&self.shared);
            match g.step(cx, |d, w| d.pump_waiting(w, now(), false)) {
                Ok(Drive::Idle) => {
                    // (A record left to the kernel's clock is owed a look.)
                    let arc = g.arc;
                    ensure_flusher(arc, &mut g);
                    Poll::Ready(Ok(()))
                }
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
        poll_write_locked(
            &mut Locked::new(&self.shared),
            cx,
            buf.len(),
            None,
            |core, n, now| core.write(&buf[..n], urgency, now),
        )
    }
}

/// The TLS stream's read: plaintext rustls already decrypted first; else ciphertext that is
/// already there, without flushing; when the read would wait, pending plaintext is sealed and
/// sent first (before-read), then the socket is read again, so that the read waker is
/// registered after the flush.
fn poll_read_tls<T, C>(
    g: &mut Locked<'_, T, Tls<C>>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>>
where
    T: AsyncRead + AsyncWrite + Unpin,
    C: TlsConnection,
{
    let mut flushed = false;
    loop {
        if let Some(r) = g.driver.seal.read_plain(buf.initialize_unfilled()) {
            let n = r?;
            buf.advance(n);
            if n == 0 && g.driver.core.pending() > 0 {
                // The peer ended its side: flush before reporting it.
                g.step(cx, |d, w| d.read_would_wait(w, true));
            }
            let arc = g.arc;
            ensure_flusher(arc, g);
            return Poll::Ready(Ok(()));
        }
        // More input is needed: read what is there without flushing first.
        match g.step(cx, |d, w| d.seal.read_input(w)) {
            // Bytes, or the end of the stream (reported by the reader next round). They may
            // have completed the handshake, letting plaintext queued during it leave: the next
            // wait flushes again. rustls may have answered them (a key update, an alert): what
            // it sent is owed a look (the flusher is made sure of below, before any return).
            Ok(input) => {
                flushed = false;
                if matches!(input, Input::Read) {
                    g.driver.input_arrived();
                }
                g.driver.owe_look(now());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !flushed => {
                // About to wait: seal and send pending plaintext first (before-read), then
                // read again. A send error belongs to the writer (the next write, flush or
                // shutdown).
                flushed = true;
                g.step(cx, |d, w| d.read_would_wait(w, true));
                let arc = g.arc;
                ensure_flusher(arc, g);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

impl<T, C> AsyncRead for TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    C: TlsConnection + 'static,
{
    /// Decrypted plaintext; seals and sends pending plaintext first when the read would wait.
    /// Ends (`Ok` with nothing read) at the peer's close_notify; `UnexpectedEof` if the peer
    /// closed TCP without one.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read_tls(&mut Locked::new(&self.shared), cx, buf)
    }
}

impl<T, C> AsyncWrite for TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    C: TlsConnection + 'static,
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
        poll_write_locked(
            &mut Locked::new(&self.shared),
            cx,
            total,
            None,
            |core, n, now| queue_vectored(core, bufs, n, now),
        )
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Seals everything pending as one record batch and sends it (completing the handshake
    /// first if needed).
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        poll_flush_locked(&mut Locked::new(&self.shared), cx, false)
    }

    /// Seals everything, sends close_notify after it, then shuts the write side down.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        poll_flush_locked(&mut Locked::new(&self.shared), cx, true)
    }
}

impl<T, C> Drop for TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    C: TlsConnection + 'static,
{
    fn drop(&mut self) {
        flush_on_drop(&self.shared);
    }
}

impl<T, C> std::fmt::Debug for TlsStream<T, C>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    C: TlsConnection + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = lock(&self.shared);
        f.debug_struct("TlsStream")
            .field("pending", &g.driver.core.pending())
            .field("handshaking", &g.driver.seal.conn.is_handshaking())
            .field("policy", g.driver.core.policy())
            .finish_non_exhaustive()
    }
}
