//! The background tasks of a stream: the linger flusher (started, or woken, by
//! [`ensure_flusher`]), the drain that finishes the send of a stream dropped with bytes queued
//! ([`flush_on_drop`]), the [`Spawner`] that starts them on the runtime or in a `LocalSet`, and
//! the probes for tokio's time driver and for a `LocalSet`.

use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use ::tokio::io::AsyncWrite;

use super::shared::{lock, Shared};
use super::DRAIN_LIMIT;
use crate::clock::now;
use crate::coalescer::Drive;

/// How a stream starts its background tasks (the linger flusher, the drain on drop):
/// `tokio::spawn` for `Send` streams, `spawn_local` for the others (`from_io_local`). Chosen
/// where the stream is made, the only place that knows whether it is `Send`.
pub(super) struct Spawner<T> {
    flusher: fn(Weak<Mutex<Shared<T>>>) -> bool,
    drain: fn(Arc<Mutex<Shared<T>>>, bool) -> bool,
}

impl<T> Clone for Spawner<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Spawner<T> {}

pub(super) fn runtime_spawner<T: AsyncWrite + Unpin + Send + 'static>() -> Spawner<T> {
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

pub(super) fn local_spawner<T: AsyncWrite + Unpin + 'static>() -> Spawner<T> {
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
pub(super) fn quietly_succeeds(probe: impl FnOnce()) -> bool {
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
pub(super) fn quietly_succeeds(probe: impl FnOnce()) -> bool {
    probe();
    true
}

/// Starts the background flusher if bytes are waiting on a deadline or on socket space, or
/// wakes it from its sleep when bytes became due before the deadline it sleeps towards.
pub(super) fn ensure_flusher<T: AsyncWrite + Unpin + 'static>(
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

/// On release of the last handle: send what the socket takes at once; if bytes remain, a
/// background task finishes the send (at most [`DRAIN_LIMIT`]) and then drops the socket.
pub(super) fn flush_on_drop<T: AsyncWrite + Unpin + 'static>(arc: &Arc<Mutex<Shared<T>>>) {
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
