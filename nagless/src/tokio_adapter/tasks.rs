//! The background tasks of a tokio stream, plain or TLS: the linger flusher (started, or
//! woken, by [`ensure_flusher`]), the drain that finishes the send of a stream dropped with
//! bytes queued ([`flush_on_drop`]), the [`Spawner`] that starts them on the runtime or in a
//! `LocalSet`, and the probes for tokio's time driver and for a `LocalSet`.

use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use ::tokio::io::AsyncWrite;

use super::shared::{lock, PollWire, Shared};
use super::sync::{Arc, Mutex, Weak};
#[cfg(not(loom))]
use super::DRAIN_LIMIT;
use crate::clock::now;
use crate::coalescer::Drive;
use crate::driver::{Seal, SealOver};

/// A seal the tokio streams can drive: one that moves its bytes through the socket's poll
/// functions.
pub(crate) trait TokioSeal<T>: Seal + for<'a, 'r> SealOver<PollWire<'a, 'r, T>> {}

impl<T, S: Seal + for<'a, 'r> SealOver<PollWire<'a, 'r, T>>> TokioSeal<T> for S {}

type Arced<T, S> = Arc<Mutex<Shared<T, S>>>;
type Weaked<T, S> = Weak<Mutex<Shared<T, S>>>;

/// How a stream starts its background tasks (the linger flusher, the drain on drop):
/// `tokio::spawn` for `Send` streams, `spawn_local` for the others (`from_io_local`). Chosen
/// where the stream is made, the only place that knows whether it is `Send`.
pub(crate) struct Spawner<T, S> {
    flusher: fn(Weaked<T, S>) -> bool,
    drain: fn(Arced<T, S>, bool) -> bool,
}

impl<T, S> Clone for Spawner<T, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, S> Copy for Spawner<T, S> {}

pub(crate) fn runtime_spawner<T, S>() -> Spawner<T, S>
where
    T: AsyncWrite + Unpin + Send + 'static,
    S: TokioSeal<T> + Send + 'static,
{
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

pub(crate) fn local_spawner<T, S>() -> Spawner<T, S>
where
    T: AsyncWrite + Unpin + 'static,
    S: TokioSeal<T> + 'static,
{
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

/// Under the loom models: each background task runs on a thread of its own, whose
/// interleavings with the others loom explores.
#[cfg(all(test, loom))]
pub(crate) fn loom_spawner<T, S>() -> Spawner<T, S>
where
    T: AsyncWrite + Unpin + Send + 'static,
    S: TokioSeal<T> + Send + 'static,
{
    Spawner {
        flusher: |weak| {
            loom::thread::spawn(move || loom::future::block_on(flusher(weak)));
            true
        },
        drain: |arc, timer| {
            loom::thread::spawn(move || loom::future::block_on(drain(arc, timer)));
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

/// Whether the caller runs inside a tokio `LocalSet` (or a `LocalRuntime`), where
/// `spawn_local` works.
pub(crate) fn in_local_set() -> bool {
    ::tokio::runtime::Handle::try_current().is_ok()
        && quietly_succeeds(|| drop(::tokio::task::spawn_local(async {})))
}

/// Runs `probe` and says whether it returned rather than panicked, without the panic's
/// message on stderr. tokio offers no queries for its time driver or for a `LocalSet`, only
/// panics (tokio-rs/tokio#8361 asks for one); the message is kept off stderr only on this
/// thread and only while probing, every other panic goes to the hook the program had.
#[cfg(panic = "unwind")]
pub(crate) fn quietly_succeeds(probe: impl FnOnce()) -> bool {
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
pub(crate) fn quietly_succeeds(probe: impl FnOnce()) -> bool {
    probe();
    true
}

/// Starts the background flusher if bytes are waiting on a deadline or on socket space, or
/// wakes it from its sleep when bytes became due before the deadline it sleeps towards.
pub(crate) fn ensure_flusher<T, S: Seal>(arc: &Arced<T, S>, guard: &mut Shared<T, S>) {
    if guard.flusher_running {
        if wakes_sooner(guard) {
            if let Some(w) = guard.flusher_sleeping.take() {
                w.wake();
            }
        }
        return;
    }
    if !guard.driver.needs_flusher() {
        return;
    }
    // Outside a runtime no task can run: the deadline is honoured at the next call.
    guard.flusher_running = (guard.spawner.flusher)(Arc::downgrade(arc));
}

/// The sleeping flusher must act before it wakes by itself: bytes are due now, or its next
/// wake came sooner than the one it sleeps towards.
fn wakes_sooner<T, S: Seal>(g: &Shared<T, S>) -> bool {
    g.driver.due_now()
        || matches!((g.driver.earliest_wake(), g.flusher_until), (Some(w), Some(until)) if w < until)
}

/// What the flusher does next, decided under the lock.
pub(crate) enum FlusherStep {
    /// Nothing is left for it: it has ended (`flusher_running` is false again).
    Done,
    /// Sleep until then (the linger deadline), unless woken early.
    SleepUntil(Instant),
    /// Send now.
    Send,
}

/// The flusher's decision: end, sleep towards the deadline, or send.
pub(crate) fn flusher_next<T, S: Seal>(g: &mut Shared<T, S>, now: Instant) -> FlusherStep {
    match g.driver.next_wake(now) {
        None => {
            g.flusher_running = false;
            FlusherStep::Done
        }
        Some(t) if t > now => {
            g.flusher_until = Some(t);
            FlusherStep::SleepUntil(t)
        }
        Some(_) => FlusherStep::Send,
    }
}

/// One poll of the flusher's sleep, under the lock, after the timer said it has not fired:
/// ready if bytes became due meanwhile (or it must wake sooner), else the waker is left for
/// whoever makes them due.
pub(crate) fn flusher_sleep<T, S: Seal>(g: &mut Shared<T, S>, waker: &Waker) -> Poll<()> {
    if wakes_sooner(g) {
        return Poll::Ready(());
    }
    g.flusher_sleeping = Some(waker.clone());
    Poll::Pending
}

/// One poll of the flusher's send, under the lock: `Pending` while the socket is full (the
/// flusher is woken when it has room).
pub(crate) fn flusher_send<T, S: TokioSeal<T>>(
    g: &mut Shared<T, S>,
    cx: &mut Context<'_>,
) -> Poll<Result<(), ()>>
where
    T: AsyncWrite + Unpin,
{
    let now = now();
    // A look owed to a Nagle socket (clocked batches): what it held too long leaves.
    let looked = g.step(cx, |d, w| d.look_at_kernel(w, now, false));
    match looked.and_then(|()| g.pump(cx, true, now, false)) {
        Ok(Drive::Idle) => Poll::Ready(Ok(())),
        Ok(Drive::Blocked) => Poll::Pending,
        Err(e) => {
            g.driver.defer(e);
            g.flusher_running = false;
            Poll::Ready(Err(()))
        }
    }
}

/// Sleeps until `wake` (a linger deadline, which exists only under a linger policy: the
/// constructors allow one only on runtimes with a timer).
#[cfg(not(loom))]
async fn sleep_until(wake: Instant) {
    ::tokio::time::sleep_until(::tokio::time::Instant::from_std(wake)).await;
}

/// Under loom there is no timer: the deadline never comes, only an early wake ends the sleep.
#[cfg(loom)]
async fn sleep_until(_: Instant) {
    std::future::pending::<()>().await;
}

pub(crate) async fn flusher<T, S>(weak: Weaked<T, S>)
where
    T: AsyncWrite + Unpin + 'static,
    S: TokioSeal<T> + 'static,
{
    loop {
        let step = {
            let Some(arc) = weak.upgrade() else { return };
            let mut g = lock(&arc);
            flusher_next(&mut g, now())
        };
        match step {
            FlusherStep::Done => return,
            FlusherStep::Send => {}
            // The sleep ends early if a call makes bytes due (they found the socket full:
            // the send below waits for room instead).
            FlusherStep::SleepUntil(wake) => {
                let sleep = std::pin::pin!(sleep_until(wake));
                let mut sleep = sleep;
                std::future::poll_fn(|cx| {
                    if sleep.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(());
                    }
                    let Some(arc) = weak.upgrade() else {
                        return Poll::Ready(());
                    };
                    let mut g = lock(&arc);
                    flusher_sleep(&mut g, cx.waker())
                })
                .await;
                if let Some(arc) = weak.upgrade() {
                    let mut g = lock(&arc);
                    g.flusher_sleeping = None;
                    g.flusher_until = None;
                }
            }
        }
        let result = std::future::poll_fn(|cx| {
            let Some(arc) = weak.upgrade() else {
                return Poll::Ready(Ok(()));
            };
            let mut g = lock(&arc);
            flusher_send(&mut g, cx)
        })
        .await;
        if result.is_err() {
            return;
        }
    }
}

/// On release of a handle: the last one sends what the socket takes at once; if bytes
/// remain, a background task finishes the send (at most [`DRAIN_LIMIT`]) and then drops the
/// socket.
pub(crate) fn flush_on_drop<T, S>(arc: &Arced<T, S>)
where
    T: AsyncWrite + Unpin + 'static,
    S: TokioSeal<T> + 'static,
{
    let mut g = lock(arc);
    g.handles -= 1;
    if g.handles > 0 {
        return;
    }
    let mut cx = Context::from_waker(Waker::noop());
    if g.step(&mut cx, |d, w| d.close_quietly(w)) != Drive::Blocked {
        return;
    }
    let (has_timer, spawner) = (g.has_timer, g.spawner);
    drop(g);
    // Without a runtime to finish it, what the socket took is all that leaves.
    let _ = (spawner.drain)(Arc::clone(arc), has_timer);
}

/// Finishes the send of a dropped stream's queue (at most [`DRAIN_LIMIT`] with a timer).
async fn drain<T, S>(owned: Arced<T, S>, has_timer: bool)
where
    T: AsyncWrite + Unpin + 'static,
    S: TokioSeal<T> + 'static,
{
    let drain = std::future::poll_fn(|cx| match lock(&owned).pump(cx, true, now(), false) {
        Ok(Drive::Blocked) => Poll::Pending,
        Ok(Drive::Idle) | Err(_) => Poll::Ready(()),
    });
    #[cfg(not(loom))]
    if has_timer {
        let _ = ::tokio::time::timeout(DRAIN_LIMIT, drain).await;
        return;
    }
    let _ = has_timer;
    drain.await;
}
