//! The tokio adapter (feature `tokio`): [`NaglessStream`] implements `AsyncRead` and
//! `AsyncWrite` with the semantics of the std wrapper.
//!
//! - `poll_read` sends pending output first when the read would wait (before-read), so
//!   write-write-read never stalls; input already there is read without flushing.
//! - **Linger by timer**: when bytes are pending with a deadline, or are due but the socket was
//!   full, a small background task (spawned on the current runtime, holding only a weak
//!   reference) sleeps until the deadline and flushes, even while the owning task is busy
//!   awaiting something else. Errors it meets are returned by the next write, flush or
//!   shutdown. The runtime must have its time driver (`enable_time`/`enable_all`): making a
//!   stream on one without it is an error (built with `panic = "abort"`, where tokio's panic
//!   cannot be caught, the program stops there with tokio's message instead; a policy
//!   without linger needs no timer and is never probed).
//! - **One socket, several waiters.** A tokio socket wakes only the last task that polled it
//!   for write readiness, yet the writer, the read half (which flushes before it waits) and the
//!   timer task all send. The socket is therefore always polled with one fan-out waker that
//!   wakes every task waiting for socket space, so none of them can be forgotten.
//! - Streams that are not `Send` (a `LocalSet` program's) are made with
//!   [`NaglessStream::from_io_local`]; their background tasks are started with `spawn_local`.
//! - [`NaglessStream::into_split`] gives halves that share one queue, so the read half still
//!   flushes what the write half queued; [`WriteHalf::reunite`] puts them back together.
//! - **Closing**: `shutdown().await` sends everything, then shuts the write side down; errors
//!   come back from it. Dropping the last handle with bytes still queued hands them to a
//!   background task that finishes the send (for at most [`DRAIN_LIMIT`] where the stream
//!   knows of a timer; see [`NaglessStream::from_io`]) and then closes the
//!   socket, as the kernel does with a closed socket's send queue.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::clock::{now, Clock};
use crate::coalescer::{drive, Coalescer, Drive, Stats, Transport};
use crate::io_glue::{queue_vectored, refresh_segment, set_nodelay_if_tcp};
use crate::policy::{FlushPolicy, Urgency};
use crate::sys::AsOsSocket;
use crate::tcp_info::TcpInfo;

/// Longest time the background task spends finishing the send of a stream dropped with bytes
/// still queued.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);

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

/// The tasks waiting for the socket to take bytes; woken all at once.
#[derive(Default)]
pub(crate) struct WriteWaiters(Mutex<Vec<Waker>>);

impl WriteWaiters {
    pub(crate) fn register(&self, waker: &Waker) {
        let mut v = lock(&self.0);
        if !v.iter().any(|w| w.will_wake(waker)) {
            v.push(waker.clone());
        }
    }

    pub(crate) fn unregister(&self, waker: &Waker) {
        lock(&self.0).retain(|w| !w.will_wake(waker));
    }
}

impl Wake for WriteWaiters {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let waiting = std::mem::take(&mut *lock(&self.0));
        for w in waiting {
            w.wake();
        }
    }
}

/// How a stream starts its background tasks (the linger flusher, the drain on drop):
/// `tokio::spawn` for `Send` streams, `spawn_local` for the others (`from_io_local`). Chosen
/// where the stream is made, the only place that knows whether it is `Send`.
struct Spawner<T> {
    flusher: fn(Weak<Mutex<Shared<T>>>) -> bool,
    drain: fn(Arc<Mutex<Shared<T>>>, bool) -> bool,
}

impl<T> Clone for Spawner<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Spawner<T> {}

fn runtime_spawner<T: AsyncWrite + Unpin + Send + 'static>() -> Spawner<T> {
    Spawner {
        flusher: |weak| match ::tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(flusher(weak));
                true
            }
            Err(_) => false,
        },
        drain: |arc, timer| match ::tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(drain(arc, timer));
                true
            }
            Err(_) => false,
        },
    }
}

fn local_spawner<T: AsyncWrite + Unpin + 'static>() -> Spawner<T> {
    Spawner {
        flusher: |weak| {
            ::tokio::task::spawn_local(flusher(weak));
            true
        },
        drain: |arc, timer| {
            ::tokio::task::spawn_local(drain(arc, timer));
            true
        },
    }
}

struct Shared<T> {
    io: T,
    core: Coalescer,
    /// Judges, for writes that join an open window, whether its deadline may have passed
    /// (the flusher cannot run while a task on its runtime's thread keeps writing).
    clock: Clock,
    deferred_error: Option<io::Error>,
    flusher_running: bool,
    /// The flusher's waker while it sleeps towards a linger deadline: a write that makes bytes
    /// due sooner (or finds the socket full) wakes it, so they do not wait for that deadline.
    flusher_sleeping: Option<Waker>,
    /// The runtime the stream was made on has tokio's time driver.
    has_timer: bool,
    spawner: Spawner<T>,
    /// Live user handles (the stream, or its two halves). Counted under the lock, not read
    /// off the `Arc`: the flusher's brief upgrades and two halves dropped at once on two
    /// threads must not make the last drop skip the final send.
    handles: usize,
    waiters: Arc<WriteWaiters>,
    /// Wakes every waiter: the only waker the socket ever sees for write readiness.
    fanout: Waker,
}

impl<T: AsyncWrite + Unpin> Shared<T> {
    /// Sends what is due. `waiter`, if given, is woken when the socket has room again should
    /// the send block (the writer and the timer task wait; a reader does not).
    fn drive(&mut self, waiter: Option<&Waker>, now: Instant) -> io::Result<Drive> {
        if self.core.pending() == 0 {
            return Ok(Drive::Idle);
        }
        if let Some(w) = waiter {
            // Before the send: readiness that arrives after the socket said "full" finds us.
            self.waiters.register(w);
        }
        let fanout = self.fanout.clone();
        let mut cx = Context::from_waker(&fanout);
        let mut t = PollTransport {
            io: Pin::new(&mut self.io),
            cx: &mut cx,
        };
        let r = drive(&mut self.core, &mut t, now);
        if let (Some(w), false) = (waiter, matches!(r, Ok(Drive::Blocked))) {
            self.waiters.unregister(w);
        }
        r
    }

    fn take_deferred(&mut self) -> io::Result<()> {
        self.deferred_error.take().map_or(Ok(()), Err)
    }

    /// The fast path of a normal write, as the std stream's: a write that joins an open
    /// window in time and makes nothing due is queued with no clock reading, no send and no
    /// flusher check. False (nothing queued) when the write needs the full path.
    #[inline]
    fn write_fast(&mut self, buf: &[u8]) -> bool {
        if self.deferred_error.is_some() {
            return false;
        }
        let in_time = match self.core.poll_timeout() {
            Some(deadline) => self.clock.certainly_before(deadline),
            None => true,
        };
        in_time && self.core.write_if_nothing_due(buf)
    }

    fn defer(&mut self, e: io::Error) {
        if self.deferred_error.is_none() {
            self.deferred_error = Some(e);
        }
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

/// An async stream whose output is coalesced. All handles ([`NaglessStream`], [`ReadHalf`],
/// [`WriteHalf`]) share one queue.
pub struct NaglessStream<T: AsyncWrite + Unpin + 'static> {
    shared: Arc<Mutex<Shared<T>>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding the lock; if something did, the state is still consistent
    // (every mutation is a single call into the core), so keep going.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl NaglessStream<::tokio::net::TcpStream> {
    /// Connects to `addr` and wraps the stream with the default policy.
    pub async fn connect(addr: impl ::tokio::net::ToSocketAddrs) -> io::Result<Self> {
        Self::new(::tokio::net::TcpStream::connect(addr).await?)
    }

    /// Wraps a tokio TCP stream with the default policy; sets `TCP_NODELAY`.
    pub fn new(stream: ::tokio::net::TcpStream) -> io::Result<Self> {
        Self::with_policy(stream, FlushPolicy::default())
    }

    /// Wraps a tokio TCP stream with `policy`; sets `TCP_NODELAY`.
    pub fn with_policy(stream: ::tokio::net::TcpStream, policy: FlushPolicy) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        let mut core = Coalescer::new(policy);
        refresh_segment(&mut core, stream.as_os_socket());
        Self::from_parts(stream, core)
    }
}

impl<T: AsyncWrite + Unpin + 'static> NaglessStream<T> {
    /// Wraps an async stream that is not `Send` (for a `LocalSet`) with `policy`: its
    /// background tasks are started with `spawn_local`, so it must be made and used inside a
    /// `LocalSet` (or a `LocalRuntime`); outside one this is an error, not a later panic.
    pub fn from_io_local(io: T, policy: FlushPolicy) -> io::Result<Self> {
        let in_local_set = ::tokio::runtime::Handle::try_current().is_ok()
            && quietly_succeeds(|| drop(::tokio::task::spawn_local(async {})));
        if !in_local_set {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "nagless: from_io_local must be called inside a tokio LocalSet (or LocalRuntime)",
            ));
        }
        Self::build(io, Coalescer::new(policy), local_spawner())
    }
}

impl<T: AsyncWrite + Unpin + Send + 'static> NaglessStream<T> {
    /// Wraps any async stream with `policy`. (Built with `panic = "abort"`, a policy without a
    /// linger deadline is not probed for tokio's timer, so a dropped stream's drain has no
    /// [`DRAIN_LIMIT`].) For a socket, [`from_socket`](Self::from_socket)
    /// also sets `TCP_NODELAY` and reads the MSS; for a stream that is not `Send`,
    /// [`from_io_local`](Self::from_io_local).
    pub fn from_io(io: T, policy: FlushPolicy) -> io::Result<Self> {
        Self::from_parts(io, Coalescer::new(policy))
    }

    /// Wraps an async socket with `policy`; sets `TCP_NODELAY` if it is a TCP socket.
    pub fn from_socket(io: T, policy: FlushPolicy) -> io::Result<Self>
    where
        T: AsOsSocket,
    {
        set_nodelay_if_tcp(io.as_os_socket())?;
        let mut core = Coalescer::new(policy);
        refresh_segment(&mut core, io.as_os_socket());
        Self::from_parts(io, core)
    }

    fn from_parts(io: T, core: Coalescer) -> io::Result<Self> {
        Self::build(io, core, runtime_spawner())
    }
}

impl<T: AsyncWrite + Unpin + 'static> NaglessStream<T> {
    fn build(io: T, core: Coalescer, spawner: Spawner<T>) -> io::Result<Self> {
        let needs_timer = core
            .policy()
            .linger_deadline()
            .is_some_and(|d| !d.is_zero());
        // Under panic = "abort" a failed probe cannot be caught: probe only when the policy
        // needs the timer. A stream not probed counts as timerless: a dropped stream's drain
        // then has no time limit (it ends when the peer takes the bytes or the socket fails).
        let has_timer = (needs_timer || cfg!(panic = "unwind")) && has_time_driver();
        if needs_timer && !has_timer {
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
                io,
                core,
                clock: Clock::new(),
                deferred_error: None,
                flusher_running: false,
                flusher_sleeping: None,
                handles: 1,
                has_timer,
                spawner,
                fanout: Waker::from(Arc::clone(&waiters)),
                waiters,
            })),
        })
    }

    /// Splits into a read half and a write half sharing one queue: reading through the read
    /// half still flushes what the write half queued.
    pub fn into_split(self) -> (ReadHalf<T>, WriteHalf<T>) {
        lock(&self.shared).handles += 2;
        let other = Arc::clone(&self.shared);
        let shared = Arc::clone(&self.shared);
        drop(self);
        (ReadHalf { shared }, WriteHalf { shared: other })
    }
}

/// Accepts one connection from `listener` and wraps it with the default policy: the accept
/// loop of a server (hyper, axum, your own) in one call.
pub async fn accept(
    listener: &::tokio::net::TcpListener,
) -> io::Result<(NaglessStream<::tokio::net::TcpStream>, std::net::SocketAddr)> {
    let (tcp, peer) = listener.accept().await?;
    Ok((NaglessStream::new(tcp)?, peer))
}

/// Whether the current runtime has tokio's time driver (true outside a runtime, where no
/// timer is ever started). The linger timer needs it; a runtime built without it would panic
/// inside the timer task, so the constructors ask first.
pub(crate) fn has_time_driver() -> bool {
    ::tokio::runtime::Handle::try_current().is_err()
        || quietly_succeeds(|| drop(::tokio::time::sleep(Duration::ZERO)))
}

/// Runs `probe` and says whether it returned rather than panicked, without the panic's
/// message on stderr. tokio offers no queries for its time driver or for a `LocalSet`, only
/// panics (tokio-rs/tokio#8361 asks for one); the message is kept off stderr only on this
/// thread and only while probing, every other panic goes to the hook the program had.
#[cfg(panic = "unwind")]
fn quietly_succeeds(probe: impl FnOnce()) -> bool {
    use std::cell::Cell;
    use std::sync::Once;
    thread_local!(static PROBING: Cell<bool> = const { Cell::new(false) });
    static QUIET_PROBE: Once = Once::new();
    QUIET_PROBE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !PROBING.with(Cell::get) {
                previous(info);
            }
        }));
    });
    PROBING.with(|p| p.set(true));
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(probe)).is_ok();
    PROBING.with(|p| p.set(false));
    ok
}

/// Under `panic = "abort"` a panic cannot be caught: the probe runs as is, so a runtime
/// without a time driver (or a local stream made outside a `LocalSet`) stops the program at
/// the constructor, with tokio's message naming the fix, rather than later inside a
/// background task.
#[cfg(not(panic = "unwind"))]
fn quietly_succeeds(probe: impl FnOnce()) -> bool {
    probe();
    true
}

/// Starts the background flusher if bytes are waiting on a deadline or on socket space, or
/// wakes it from its sleep when bytes became due before the deadline it sleeps towards.
fn ensure_flusher<T: AsyncWrite + Unpin + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    guard: &mut Shared<T>,
    now: Instant,
) {
    if guard.flusher_running {
        if guard.core.must_send() > 0 {
            if let Some(w) = guard.flusher_sleeping.take() {
                w.wake();
            }
        }
        return;
    }
    if guard.flusher_wake(now).is_none() {
        return;
    }
    // Outside a runtime no task can run: the deadline is honoured at the next call.
    guard.flusher_running = (guard.spawner.flusher)(Arc::downgrade(arc));
}

async fn flusher<T: AsyncWrite + Unpin + 'static>(weak: Weak<Mutex<Shared<T>>>) {
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
        // A deadline in the future exists only under a linger policy, which the constructors
        // allow only on runtimes with a timer. The sleep ends early if a write makes bytes due
        // (they found the socket full: the send below waits for room instead).
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
                if g.core.must_send() > 0 {
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
            match g.drive(Some(cx.waker()), now()) {
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

/// Queues as much of one message as fits below the high-water mark; waits (registering the
/// writer) only when nothing fits.
///
/// `fast`: the bytes of a normal write, which may take the fast path.
fn poll_write_shared<T: AsyncWrite + Unpin + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    cx: &mut Context<'_>,
    len: usize,
    fast: Option<&[u8]>,
    queue: impl FnOnce(&mut Coalescer, usize, Instant),
) -> Poll<io::Result<usize>> {
    let mut g = lock(arc);
    if fast.is_some_and(|buf| g.write_fast(buf)) {
        return Poll::Ready(Ok(len));
    }
    g.take_deferred()?;
    let now = {
        let g = &mut *g;
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
    ensure_flusher(arc, &mut g, now);
    Poll::Ready(Ok(take))
}

fn poll_flush_shared<T: AsyncWrite + Unpin + 'static>(
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

fn poll_read_shared<T: AsyncRead + AsyncWrite + Unpin + 'static>(
    arc: &Arc<Mutex<Shared<T>>>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    let mut g = lock(arc);
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

/// On release of the last handle: send what the socket takes at once; if bytes remain, a
/// background task finishes the send (at most [`DRAIN_LIMIT`]) and then drops the socket.
fn flush_on_drop<T: AsyncWrite + Unpin + 'static>(arc: &Arc<Mutex<Shared<T>>>) {
    let mut g = lock(arc);
    g.handles -= 1;
    if g.handles > 0 {
        return;
    }
    g.core.close();
    if !matches!(g.drive(None, now()), Ok(Drive::Blocked)) {
        return;
    }
    let (has_timer, spawner) = (g.has_timer, g.spawner);
    drop(g);
    // Without a runtime to finish it, what the socket took is all that leaves.
    let _ = (spawner.drain)(Arc::clone(arc), has_timer);
}

/// Finishes the send of a dropped stream's queue (at most [`DRAIN_LIMIT`] with a timer).
async fn drain<T: AsyncWrite + Unpin + 'static>(owned: Arc<Mutex<Shared<T>>>, has_timer: bool) {
    let drain = std::future::poll_fn(|cx| match lock(&owned).drive(Some(cx.waker()), now()) {
        Ok(Drive::Blocked) => Poll::Pending,
        Ok(Drive::Idle) | Err(_) => Poll::Ready(()),
    });
    if has_timer {
        let _ = ::tokio::time::timeout(DRAIN_LIMIT, drain).await;
    } else {
        drain.await;
    }
}

macro_rules! impl_async_write {
    ($ty:ident) => {
        impl<T: AsyncWrite + Unpin + 'static> $ty<T> {
            /// Queues `buf` (or as much as fits below the high-water mark) with an explicit
            /// [`Urgency`] (the async twin of [`crate::NaglessStream::write_with`]); waits
            /// only when nothing fits below the high-water mark.
            pub fn poll_write_with(
                &self,
                cx: &mut Context<'_>,
                buf: &[u8],
                urgency: Urgency,
            ) -> Poll<io::Result<usize>> {
                let fast = (urgency == Urgency::Normal).then_some(buf);
                poll_write_shared(&self.shared, cx, buf.len(), fast, |core, n, now| {
                    core.write(&buf[..n], urgency, now)
                })
            }

            /// Queues `buf` with an explicit [`Urgency`], e.g. `SendNow` for a keepalive;
            /// returns how many bytes were accepted.
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

        impl<T: AsyncWrite + Unpin + 'static + AsOsSocket> $ty<T> {
            /// A `TCP_INFO` snapshot of the socket (Linux; `ErrorKind::Unsupported` elsewhere).
            pub fn tcp_info(&self) -> io::Result<TcpInfo> {
                TcpInfo::of(&lock(&self.shared).io)
            }
        }

        impl<T: AsyncWrite + Unpin + 'static> AsyncWrite for $ty<T> {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.poll_write_with(cx, buf, Urgency::Normal)
            }
            /// Queues the slices as one message, as many bytes as fit below the high-water
            /// mark: hyper and rustls hand whole responses over this way.
            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                let total = bufs.iter().map(|b| b.len()).sum();
                poll_write_shared(&self.shared, cx, total, None, |core, n, now| {
                    queue_vectored(core, bufs, n, now)
                })
            }
            fn is_write_vectored(&self) -> bool {
                true
            }
            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                poll_flush_shared(&self.shared, cx, false)
            }
            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                poll_flush_shared(&self.shared, cx, true)
            }
        }
        impl<T: AsyncWrite + Unpin + 'static> Drop for $ty<T> {
            fn drop(&mut self) {
                flush_on_drop(&self.shared);
            }
        }
    };
}

macro_rules! impl_async_read {
    ($ty:ident) => {
        impl<T: AsyncRead + AsyncWrite + Unpin + 'static> AsyncRead for $ty<T> {
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
pub struct ReadHalf<T: AsyncWrite + Unpin + 'static> {
    shared: Arc<Mutex<Shared<T>>>,
}

/// The write half of a split [`NaglessStream`].
pub struct WriteHalf<T: AsyncWrite + Unpin + 'static> {
    shared: Arc<Mutex<Shared<T>>>,
}

/// The halves given to [`WriteHalf::reunite`] came from different streams.
#[derive(Debug, thiserror::Error)]
#[error("tried to reunite halves that are not from the same stream")]
pub struct ReuniteError<T: AsyncWrite + Unpin + 'static>(pub ReadHalf<T>, pub WriteHalf<T>);

impl<T: AsyncWrite + Unpin + 'static> WriteHalf<T> {
    /// Puts the halves of one [`NaglessStream::into_split`] back together.
    pub fn reunite(self, read: ReadHalf<T>) -> Result<NaglessStream<T>, ReuniteError<T>> {
        if !Arc::ptr_eq(&self.shared, &read.shared) {
            return Err(ReuniteError(read, self));
        }
        let shared = Arc::clone(&self.shared);
        lock(&shared).handles += 1;
        drop(read);
        drop(self);
        Ok(NaglessStream { shared })
    }
}

impl<T: AsyncWrite + Unpin + 'static + AsOsSocket> ReadHalf<T> {
    /// A `TCP_INFO` snapshot of the socket (Linux; `ErrorKind::Unsupported` elsewhere).
    pub fn tcp_info(&self) -> io::Result<TcpInfo> {
        TcpInfo::of(&lock(&self.shared).io)
    }
}

impl<T: AsyncWrite + Unpin + 'static> ReadHalf<T> {
    /// Puts the halves of one [`NaglessStream::into_split`] back together.
    pub fn reunite(self, write: WriteHalf<T>) -> Result<NaglessStream<T>, ReuniteError<T>> {
        write.reunite(self)
    }
}

impl<T: AsyncWrite + Unpin + 'static> std::fmt::Debug for NaglessStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = lock(&self.shared);
        f.debug_struct("NaglessStream")
            .field("pending", &g.core.pending())
            .field("policy", g.core.policy())
            .finish_non_exhaustive()
    }
}

impl<T: AsyncWrite + Unpin + 'static> std::fmt::Debug for ReadHalf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadHalf { .. }")
    }
}

impl<T: AsyncWrite + Unpin + 'static> std::fmt::Debug for WriteHalf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteHalf { .. }")
    }
}

impl<T: AsyncWrite + Unpin + 'static> Drop for ReadHalf<T> {
    fn drop(&mut self) {
        flush_on_drop(&self.shared);
    }
}

impl_async_write!(NaglessStream);
impl_async_write!(WriteHalf);
impl_async_read!(NaglessStream);
impl_async_read!(ReadHalf);
