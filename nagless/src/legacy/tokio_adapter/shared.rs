//! The state every handle of one stream shares ([`Shared`]: the socket, the coalescer, the
//! deferred error, the flusher's bookkeeping) and its drive: the send of what is due through
//! the socket's `poll_write_vectored`, with one fan-out waker ([`WriteWaiters`]) for every task
//! that waits for socket space.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use ::tokio::io::AsyncWrite;

use super::lane::Lane;
use super::tasks::Spawner;
use crate::clock::Clock;
use crate::coalescer::{drive, Coalescer, Drive, Transport};

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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding the lock; if something did, the state is still consistent
    // (every mutation is a single call into the core), so keep going.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) struct Shared<T> {
    pub(super) io: T,
    pub(super) core: Coalescer,
    /// Judges, for writes that join an open window, whether its deadline may have passed
    /// (the flusher cannot run while a task on its runtime's thread keeps writing).
    pub(super) clock: Clock,
    pub(super) deferred_error: Option<io::Error>,
    pub(super) flusher_running: bool,
    /// The flusher's waker while it sleeps towards a linger deadline: a write that makes bytes
    /// due sooner (or finds the socket full) wakes it, so they do not wait for that deadline.
    pub(super) flusher_sleeping: Option<Waker>,
    /// The runtime the stream was made on has tokio's time driver.
    pub(super) has_timer: bool,
    pub(super) spawner: Spawner<T>,
    /// Live user handles (the stream, or its two halves). Counted under the lock, not read
    /// off the `Arc`: the flusher's brief upgrades and two halves dropped at once on two
    /// threads must not make the last drop skip the final send.
    pub(super) handles: usize,
    pub(super) waiters: Arc<WriteWaiters>,
    /// Wakes every waiter: the only waker the socket ever sees for write readiness.
    pub(super) fanout: Waker,
}

impl<T: AsyncWrite + Unpin> Shared<T> {
    /// Sends what is due. `waiter`, if given, is woken when the socket has room again should
    /// the send block (the writer and the timer task wait; a reader does not).
    pub(super) fn drive(&mut self, waiter: Option<&Waker>, now: Instant) -> io::Result<Drive> {
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

    pub(super) fn take_deferred(&mut self) -> io::Result<()> {
        self.deferred_error.take().map_or(Ok(()), Err)
    }

    /// The fast path of a normal write, as the std stream's ([`Clock::join_burst`]: no clock
    /// reading, no send, no flusher check), unless an error waits to be returned. False
    /// (nothing queued) when the write needs the full path.
    #[inline(always)]
    pub(super) fn write_fast(&mut self, buf: &[u8]) -> bool {
        // A deferred error must meet the next write.
        self.deferred_error.is_none() && self.clock.join_burst(&mut self.core, buf)
    }

    /// No background flusher runs and no error waits to be returned (with a policy the lane
    /// is usable under, see [`Lane`]'s invariant: nobody but the writing handle can act on
    /// the queue for now).
    pub(super) fn others_quiet(&self) -> bool {
        !self.flusher_running && self.deferred_error.is_none()
    }

    /// Takes what `lane` holds into the queue (before anything else the handle does).
    #[inline]
    pub(super) fn take_lane(&mut self, lane: &mut Lane) {
        lane.hand_over(&mut self.core, &mut self.clock);
    }

    pub(super) fn defer(&mut self, e: io::Error) {
        if self.deferred_error.is_none() {
            self.deferred_error = Some(e);
        }
    }

    /// When the background flusher should next act, if there is anything for it.
    pub(super) fn flusher_wake(&self, now: Instant) -> Option<Instant> {
        if self.core.must_send() > 0 {
            Some(now)
        } else {
            self.core.poll_timeout()
        }
    }
}
