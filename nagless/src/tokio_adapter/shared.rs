//! The state every handle of one tokio stream shares ([`Shared`]: the socket, the driver, the
//! flusher's bookkeeping), for the plain stream and the TLS one alike; the socket as the
//! driver's wire ([`PollWire`]: `poll_write_vectored`, with one fan-out waker,
//! [`WriteWaiters`], for every task that waits for socket space); and [`Locked`], the one way
//! a call gets at the shared state.

use std::io::{self, IoSlice, Read};
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::lane::Lane;
use super::sync::{Arc, Mutex, MutexGuard};
use super::tasks::Spawner;
use crate::coalescer::Drive;
use crate::driver::{Driver, Seal, SealOver, Wire};
use crate::sys::{AsOsSocket, Sock};

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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    super::sync::lock(m)
}

/// What the stream knows of the socket under its `AsyncWrite`, for the driver.
pub(crate) struct SocketAccess<T> {
    /// The descriptor, when the stream is a socket: its segment size, its send queue.
    pub(crate) socket: Option<fn(&T) -> Sock<'_>>,
    /// The `AsyncWrite` writes to the descriptor as it is (tokio's own socket types), so a
    /// send may go to the descriptor directly, with `MSG_MORE`.
    pub(crate) direct: bool,
    /// It is tokio's `TcpStream`: a socket with Nagle and ACKs to clock by (a `UnixStream`
    /// has neither, and its sends are never held).
    pub(crate) tcp: bool,
}

impl<T> Clone for SocketAccess<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SocketAccess<T> {}

impl<T> SocketAccess<T> {
    /// Whether a send can be held for the next ACK (`MSG_MORE` reaches the descriptor of a
    /// TCP socket) and its send queue asked: [`FlushPolicy::clocked`](crate::FlushPolicy::clocked)
    /// clocks.
    pub(crate) fn can_clock(&self) -> bool {
        cfg!(any(target_os = "linux", target_os = "android"))
            && self.direct
            && self.tcp
            && self.socket.is_some()
    }
}

impl<T> SocketAccess<T> {
    /// A stream that is not known to be a socket.
    pub(crate) fn none() -> Self {
        SocketAccess {
            socket: None,
            direct: false,
            tcp: false,
        }
    }

    /// A socket, read through `T`'s [`AsOsSocket`]; sent to directly if `T` is one of
    /// tokio's socket types (another `AsyncWrite` may do more than write the descriptor:
    /// every send goes through it).
    pub(crate) fn socket() -> Self
    where
        T: AsOsSocket + 'static,
    {
        SocketAccess {
            socket: Some(<T as AsOsSocket>::as_os_socket),
            direct: tokio_socket::<T>(),
            tcp: tokio_tcp::<T>(),
        }
    }
}

/// Whether `T` is one of tokio's socket types, whose `AsyncWrite` writes the descriptor as
/// it is.
fn tokio_socket<T: 'static>() -> bool {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    // (tokio has no `net` under loom's model checker.)
    #[cfg(all(unix, not(loom)))]
    if t == TypeId::of::<::tokio::net::UnixStream>() {
        return true;
    }
    #[cfg(not(loom))]
    if t == TypeId::of::<::tokio::net::TcpStream>() {
        return true;
    }
    let _ = t;
    false
}

/// Whether `T` is tokio's `TcpStream`.
fn tokio_tcp<T: 'static>() -> bool {
    // (tokio has no `net` under loom's model checker.)
    #[cfg(not(loom))]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<::tokio::net::TcpStream>() {
        return true;
    }
    false
}

/// The socket as the driver's wire: sends through `poll_write` (one slice) or
/// `poll_write_vectored`, whose `Pending` reads as `WouldBlock`, with the fan-out waker
/// (registered by the socket); reads through `poll_read` with the caller's waker. A caller that waits for socket space is registered
/// with the fan-out around the send ([`Wire::wait_for_room`]).
pub(crate) struct PollWire<'a, 'r, T> {
    io: &'a mut T,
    /// The calling task: its waker is registered for input, and for socket space when it
    /// waits for it.
    cx: &'a mut Context<'r>,
    fanout: &'a Waker,
    waiters: &'a WriteWaiters,
    access: SocketAccess<T>,
    /// Bytes the socket has taken from this stream in all ([`Shared::wired`]).
    wired: &'a mut u64,
}

impl<T: AsyncWrite + Unpin> Wire for PollWire<'_, '_, T> {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        if let (true, true, Some(fd)) = (more, self.access.direct, self.access.socket) {
            // `MSG_MORE` does not pass through `AsyncWrite`: straight to the descriptor. If it
            // is full, tokio's send below finds so too and registers the waker.
            match crate::sys::send_vectored(fd(self.io), bufs, true) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other.inspect(|&n| *self.wired += n as u64),
            }
        }
        let mut cx = Context::from_waker(self.fanout);
        // One slice (a batch, a record) is a plain write: the kernel's `send` path is shorter
        // than `writev`'s (no vector to check and copy in).
        let io = Pin::new(&mut *self.io);
        let r = match bufs {
            [one] => io.poll_write(&mut cx, one),
            _ => io.poll_write_vectored(&mut cx, bufs),
        };
        match r {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
        .inspect(|&n| *self.wired += n as u64)
    }

    /// What the kernel has sent of the stream in all, and holds unsent: every byte reaches
    /// the socket through this wire, so what it sent is what the wire gave it less what it
    /// holds (`SIOCOUTQNSD`, read without the socket's lock, where `TCP_INFO` takes it and
    /// fills a whole record: the cost of a look after every batch).
    fn progress(&mut self) -> io::Result<(u64, u32)> {
        let unsent = self.unsent()?;
        Ok((self.wired.saturating_sub(u64::from(unsent)), unsent))
    }

    fn socket(&self) -> Option<Sock<'_>> {
        self.access.socket.map(|fd| fd(self.io))
    }

    fn can_clock(&self) -> bool {
        self.access.can_clock()
    }

    fn wait_for_room(&mut self) {
        self.waiters.register(self.cx.waker());
    }

    fn stop_waiting(&mut self) {
        self.waiters.unregister(self.cx.waker());
    }
}

impl<T: AsyncRead + Unpin> Read for PollWire<'_, '_, T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut rb = ReadBuf::new(buf);
        match Pin::new(&mut *self.io).poll_read(self.cx, &mut rb) {
            Poll::Ready(Ok(())) => Ok(rb.filled().len()),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

pub(crate) struct Shared<T, S> {
    pub(crate) io: T,
    /// The core, the clock, the deferred error, the seal.
    pub(crate) driver: Driver<S>,
    pub(crate) access: SocketAccess<T>,
    pub(crate) flusher_running: bool,
    /// The flusher's waker while it sleeps towards a linger deadline: a call that makes bytes
    /// due sooner (or finds the socket full) wakes it, so they do not wait for that deadline.
    pub(crate) flusher_sleeping: Option<Waker>,
    /// When the sleeping flusher wakes by itself: a call that brings its next wake sooner (a
    /// look owed to a Nagle socket before a later linger deadline) wakes it too.
    pub(crate) flusher_until: Option<Instant>,
    /// The runtime the stream was made on has tokio's time driver.
    pub(crate) has_timer: bool,
    pub(crate) spawner: Spawner<T, S>,
    /// Live user handles (the stream, or its two halves). Counted under the lock, not read
    /// off the `Arc`: the flusher's brief upgrades and two halves dropped at once on two
    /// threads must not make the last drop skip the final send.
    pub(crate) handles: usize,
    pub(crate) waiters: Arc<WriteWaiters>,
    /// Wakes every waiter: the only waker the socket ever sees for write readiness.
    pub(crate) fanout: Waker,
    /// Bytes the socket has taken from this stream in all (every send goes through
    /// [`PollWire`]).
    pub(crate) wired: u64,
}

impl<T, S: Seal> Shared<T, S> {
    pub(crate) fn new(
        io: T,
        driver: Driver<S>,
        access: SocketAccess<T>,
        has_timer: bool,
        spawner: Spawner<T, S>,
    ) -> Self {
        let waiters = Arc::new(WriteWaiters::default());
        Shared {
            io,
            driver,
            access,
            flusher_running: false,
            flusher_sleeping: None,
            flusher_until: None,
            handles: 1,
            has_timer,
            spawner,
            fanout: Waker::from(Arc::clone(&waiters)),
            waiters,
            wired: 0,
        }
    }

    /// Runs one of the driver's steps with the socket as its wire; `cx` is the calling task.
    pub(crate) fn step<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(&mut Driver<S>, &mut PollWire<'_, '_, T>) -> R,
    ) -> R {
        let mut wire = PollWire {
            io: &mut self.io,
            cx,
            fanout: &self.fanout,
            waiters: &self.waiters,
            access: self.access,
            wired: &mut self.wired,
        };
        f(&mut self.driver, &mut wire)
    }

    /// Sends what is due. With `waiting`, the calling task is woken when the socket has room
    /// again should the send block (a writer, the flusher and the drain wait; a reader of
    /// the plain stream does not, the flusher finishes for it).
    pub(crate) fn pump(
        &mut self,
        cx: &mut Context<'_>,
        waiting: bool,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive>
    where
        S: for<'a, 'r> SealOver<PollWire<'a, 'r, T>>,
        T: AsyncWrite + Unpin,
    {
        if self.driver.core.pending() == 0 && !self.driver.seal.backlog() {
            return Ok(Drive::Idle);
        }
        self.step(cx, |d, w| {
            if waiting {
                d.pump_waiting(w, now, handshake)
            } else {
                d.pump(w, now, handshake)
            }
        })
    }
}

impl<T, S> Shared<T, S> {
    /// No background flusher runs and no error waits to be returned (with a policy the lane
    /// is usable under, see [`Lane`]'s invariant: nobody but the writing handle can act on
    /// the queue for now).
    pub(crate) fn others_quiet(&self) -> bool {
        !self.flusher_running && !self.driver.has_deferred()
    }
}

/// The shared state, locked for one call of a handle. For the writing handle of a plain
/// stream it comes only from [`Owner::lock`](super::lane::Owner::lock): what the handle's
/// lane held was handed over first (so nothing acts on the queue before those bytes are in
/// it), and the lane is opened again, if the state allows, when the guard ends.
pub(crate) struct Locked<'a, T, S> {
    pub(crate) arc: &'a Arc<Mutex<Shared<T, S>>>,
    guard: MutexGuard<'a, Shared<T, S>>,
    lane: Option<&'a mut Lane>,
}

impl<'a, T, S: Seal> Locked<'a, T, S> {
    /// The state of a handle that keeps no lane (a read half, a TLS stream).
    pub(crate) fn new(arc: &'a Arc<Mutex<Shared<T, S>>>) -> Self {
        Locked {
            arc,
            guard: lock(arc),
            lane: None,
        }
    }

    /// The state of a handle with `lane`, which has been handed over under `guard`.
    pub(super) fn with_lane(
        arc: &'a Arc<Mutex<Shared<T, S>>>,
        guard: MutexGuard<'a, Shared<T, S>>,
        lane: &'a mut Lane,
    ) -> Self {
        debug_assert_eq!(lane.writes(), 0, "the lane was handed over");
        Locked {
            arc,
            guard,
            lane: Some(lane),
        }
    }
}

impl<T, S> Deref for Locked<'_, T, S> {
    type Target = Shared<T, S>;
    fn deref(&self) -> &Shared<T, S> {
        &self.guard
    }
}

impl<T, S> DerefMut for Locked<'_, T, S> {
    fn deref_mut(&mut self) -> &mut Shared<T, S> {
        &mut self.guard
    }
}

impl<T, S> Drop for Locked<'_, T, S> {
    fn drop(&mut self) {
        if let Some(lane) = self.lane.take() {
            lane.open(&self.guard);
        }
    }
}
