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
//! - **The owner's lane.** Under a policy without linger, a normal write that makes nothing
//!   due is kept by the writing handle itself, without the shared lock, as long as no other
//!   party could act on it (no flusher, no waiting error, and no read half that flushes before
//!   it reads); the handle's next other call, or dropping it, hands it over first: the handle
//!   reaches the shared state only through its `Owner`, whose one way in does it. Bytes leave
//!   at the same moments; a small write costs about what one to tokio's `BufWriter` costs.
//! - Streams that are not `Send` (a `LocalSet` program's) are made with
//!   [`NaglessStream::from_io_local`]; their background tasks are started with `spawn_local`.
//! - [`NaglessStream::into_split`] gives halves that share one queue, so the read half still
//!   flushes what the write half queued; [`WriteHalf::reunite`] puts them back together.
//! - **Closing**: `shutdown().await` sends everything, then shuts the write side down; errors
//!   come back from it. Dropping the last handle with bytes still queued hands them to a
//!   background task that finishes the send (for at most [`DRAIN_LIMIT`] where the stream
//!   knows of a timer; see [`NaglessStream::from_io`]) and then closes the
//!   socket, as the kernel does with a closed socket's send queue.
//!
//! The protocol itself (write, flush, before-read, close, the deferred error) is the crate's
//! driver (private module `driver`), shared with the std stream and both TLS streams; this
//! module holds what is tokio's: the shared state, the socket as a wire of poll functions,
//! the flusher and drain tasks (the TLS stream's too) and the lane.
//!
//! How its files lean on each other: `shared` is the one state every handle and task holds
//! (behind `sync`'s lock, loom's under the models); it names the types of two of its fields,
//! the `lane`'s `Lane` and the `tasks`' `Spawner`, and those two modules act on the state
//! through `shared`'s lock. So `shared` and `tasks` point at each other by type only
//! (`shared` calls nothing of `tasks`); `shared` calls the lane once, when a guard that
//! holds it is dropped (the lane opens again, checked to be empty), and the rest of the
//! lane's work runs in `lane`, on `shared`'s lock (its drop hands a write over through
//! `tasks::flush_on_drop`, as `halves` does). Kept so: the state is one, and its lock
//! and its guard must know what they guard. `halves` and `poll` sit above all three.

mod halves;
mod lane;
#[cfg(all(test, loom))]
mod loom_models;
mod poll;
mod shared;
mod sync;
mod tasks;

use std::io;
use std::time::Duration;

use ::tokio::io::AsyncWrite;

use crate::coalescer::Coalescer;
use crate::driver::refresh_segment;
use crate::driver::{Driver, Plain, Seal};
use crate::io_glue::set_nodelay_if_tcp;
use crate::policy::FlushPolicy;
use crate::sys::AsOsSocket;

pub use self::halves::{ReadHalf, ReuniteError, WriteHalf};
// What the TLS stream (`tokio_tls`) drives through.
#[cfg_attr(not(feature = "tls"), allow(unused_imports))]
pub(crate) use self::poll::{poll_flush_locked, poll_write_locked};
#[cfg_attr(not(feature = "tls"), allow(unused_imports))]
pub(crate) use self::shared::{lock, Locked, Shared, SocketAccess};
pub(crate) use self::sync::{Arc, Mutex};
#[cfg_attr(not(feature = "tls"), allow(unused_imports))]
pub(crate) use self::tasks::{
    ensure_flusher, flush_on_drop, in_local_set, local_spawner, runtime_spawner, Spawner,
};

use self::lane::Owner;

/// Longest time the background task spends finishing the send of a stream dropped with bytes
/// still queued.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// An async stream whose output is coalesced. All handles ([`NaglessStream`], [`ReadHalf`],
/// [`WriteHalf`]) share one queue.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// use nagless::tokio_adapter::NaglessStream;
///
/// let mut s = NaglessStream::connect("127.0.0.1:7000").await?;
/// s.write_all(b"GET / HTTP/1.1\r\n").await?; // queued
/// s.write_all(b"Host: a\r\n\r\n").await?; // queued
/// let mut reply = [0u8; 512];
/// let n = s.read(&mut reply).await?; // both leave in one send, then it reads
/// # let _ = n; Ok(()) }
/// ```
pub struct NaglessStream<T: AsyncWrite + Unpin + 'static> {
    /// The shared state, and this writing handle's lane.
    owner: Owner<T>,
}

// (tokio has no `net` under loom's model checker.)
#[cfg(not(loom))]
impl NaglessStream<::tokio::net::TcpStream> {
    /// Connects to `addr` and wraps the stream with the default policy.
    pub async fn connect(addr: impl ::tokio::net::ToSocketAddrs) -> io::Result<Self> {
        Self::new(::tokio::net::TcpStream::connect(addr).await?)
    }

    /// Wraps a tokio TCP stream with the default policy; sets `TCP_NODELAY` (cleared while
    /// the flushes the peer answers are clocked: [`FlushPolicy::clock_answered`]).
    pub fn new(stream: ::tokio::net::TcpStream) -> io::Result<Self> {
        Self::with_policy(stream, FlushPolicy::default())
    }

    /// Wraps a tokio TCP stream with `policy`; sets `TCP_NODELAY` (under
    /// [`FlushPolicy::clocked`], cleared again after the caller's first flush: the kernel's
    /// Nagle then clocks its batches, see there; under another policy, cleared while the
    /// flushes the peer answers are clocked: [`FlushPolicy::clock_answered`]).
    pub fn with_policy(stream: ::tokio::net::TcpStream, policy: FlushPolicy) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        let mut core = Coalescer::new(policy);
        refresh_segment(&mut core, stream.as_os_socket());
        Self::from_parts(stream, core, SocketAccess::socket())
    }
}

impl<T: AsyncWrite + Unpin + 'static> NaglessStream<T> {
    /// Wraps an async stream that is not `Send` (for a `LocalSet`) with `policy`: its
    /// background tasks are started with `spawn_local`, so it must be made and used inside a
    /// `LocalSet` (or a `LocalRuntime`); outside one this is an error, not a later panic.
    pub fn from_io_local(io: T, policy: FlushPolicy) -> io::Result<Self> {
        check_local_set()?;
        let driver = Driver::new(Coalescer::new(policy), Plain);
        let shared = shared(io, driver, SocketAccess::none(), local_spawner())?;
        Ok(Self::from_shared(shared))
    }
}

impl<T: AsyncWrite + Unpin + Send + 'static> NaglessStream<T> {
    /// Wraps any async stream with `policy`. (Built with `panic = "abort"`, a policy without a
    /// linger deadline is not probed for tokio's timer, so a dropped stream's drain has no
    /// [`DRAIN_LIMIT`].) For a socket, [`from_socket`](Self::from_socket)
    /// also sets `TCP_NODELAY` and reads the MSS; for a stream that is not `Send`,
    /// [`from_io_local`](Self::from_io_local).
    pub fn from_io(io: T, policy: FlushPolicy) -> io::Result<Self> {
        Self::from_parts(io, Coalescer::new(policy), SocketAccess::none())
    }

    /// Wraps an async socket with `policy`; sets `TCP_NODELAY` if it is a TCP socket.
    pub fn from_socket(io: T, policy: FlushPolicy) -> io::Result<Self>
    where
        T: AsOsSocket,
    {
        set_nodelay_if_tcp(io.as_os_socket())?;
        let mut core = Coalescer::new(policy);
        refresh_segment(&mut core, io.as_os_socket());
        Self::from_parts(io, core, SocketAccess::socket())
    }

    fn from_parts(io: T, core: Coalescer, access: SocketAccess<T>) -> io::Result<Self> {
        let shared = shared(io, Driver::new(core, Plain), access, runtime_spawner())?;
        Ok(Self::from_shared(shared))
    }
}

/// The shared state of a new stream (plain or TLS), refused where a policy with a linger
/// deadline finds no timer to honour it.
pub(crate) fn shared<T, S: Seal>(
    io: T,
    driver: Driver<S>,
    access: SocketAccess<T>,
    spawner: Spawner<T, S>,
) -> io::Result<Arc<Mutex<Shared<T, S>>>> {
    let needs_timer = driver.core.policy().linger_mode().deadline().is_some();
    // Under panic = "abort" a failed probe cannot be caught: probe only when the policy
    // needs the timer. A stream not probed counts as timerless: a dropped stream's drain
    // then has no time limit (it ends when the peer takes the bytes or the socket fails).
    let has_timer = (needs_timer || cfg!(panic = "unwind")) && tasks::has_time_driver();
    if needs_timer && !has_timer {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "nagless: this tokio runtime has no time driver, which the linger deadline \
             needs; build it with enable_time() or enable_all(), or use a policy without \
             linger",
        ));
    }
    let mut driver = driver;
    // The looks a Nagle socket needs are made by the flusher task, on the timer: only a
    // stream made on a runtime (one that has the timer) can start it.
    if has_timer && access.can_clock() && ::tokio::runtime::Handle::try_current().is_ok() {
        driver.allow_kernel_clock();
    }
    Ok(Arc::new(Mutex::new(Shared::new(
        io, driver, access, has_timer, spawner,
    ))))
}

/// Fails outside a tokio `LocalSet` (or `LocalRuntime`), where `spawn_local` would panic.
pub(crate) fn check_local_set() -> io::Result<()> {
    if in_local_set() {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "nagless: from_io_local must be called inside a tokio LocalSet (or LocalRuntime)",
    ))
}

impl<T: AsyncWrite + Unpin + 'static> NaglessStream<T> {
    fn from_shared(shared: Arc<Mutex<Shared<T, Plain>>>) -> Self {
        NaglessStream {
            owner: Owner::new(shared, false),
        }
    }

    /// Splits into a read half and a write half sharing one queue: reading through the read
    /// half still flushes what the write half queued.
    pub fn into_split(self) -> (ReadHalf<T>, WriteHalf<T>) {
        let shared = self.owner.share();
        lock(&shared).handles += 2;
        // Dropping the stream hands its lane over and gives its handle up.
        drop(self);
        let write = WriteHalf {
            owner: Owner::new(std::sync::Arc::clone(&shared), true),
        };
        (ReadHalf { shared }, write)
    }
}

/// Accepts one connection from `listener` and wraps it with the default policy: the accept
/// loop of a server (hyper, axum, your own) in one call.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
///
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:7000").await?;
/// loop {
///     let (mut s, _peer) = nagless::tokio_adapter::accept(&listener).await?;
///     tokio::spawn(async move {
///         let mut request = [0u8; 512];
///         while let Ok(n) = s.read(&mut request).await {
///             if n == 0 || s.write_all(b"+OK\r\n").await.is_err() {
///                 break;
///             }
///         }
///     });
/// }
/// # }
/// ```
#[cfg(not(loom))]
pub async fn accept(
    listener: &::tokio::net::TcpListener,
) -> io::Result<(NaglessStream<::tokio::net::TcpStream>, std::net::SocketAddr)> {
    let (tcp, peer) = listener.accept().await?;
    Ok((NaglessStream::new(tcp)?, peer))
}

impl<T: AsyncWrite + Unpin + 'static> std::fmt::Debug for NaglessStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.owner.peek();
        f.debug_struct("NaglessStream")
            .field(
                "pending",
                &(g.driver.core.pending() + self.owner.lane().len()),
            )
            .field("policy", g.driver.core.policy())
            .finish_non_exhaustive()
    }
}
