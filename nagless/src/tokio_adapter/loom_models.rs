//! Loom models of the tokio adapter's concurrency: the writing handle and its lane, the read
//! half, the linger flusher and the drain, each on a thread of its own, over a socket whose
//! send side is full until another thread opens it, under every interleaving (up to the
//! preemption bound) of the shared state's lock, the fan-out's waiter list and the socket's
//! lock (all loom mutexes under `cfg(loom)`, see `sync.rs`).
//!
//! Run with `RUSTFLAGS="--cfg loom -C debug-assertions" cargo test -p nagless --features
//! tokio --release --lib loom`, as `scripts/test` does with its own target directory.
//! `LOOM_MAX_PREEMPTIONS` bounds the search (2 unless set). `--nocapture` prints how many
//! interleavings each model ran. Under loom the flusher's sleep towards a deadline never
//! ends by itself: only being woken ends it, so a wake-up the code forgets is a deadlock,
//! which loom reports, as it does a task left waiting for a socket that has room.
//!
//! What every model asserts, after its threads are done (the socket checks it when the last
//! thread lets it go, the background tasks' included): every byte written reached the socket
//! exactly once, in order.

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use loom::sync::Mutex;
use loom::thread;

use super::shared::SocketAccess;
use super::tasks::loom_spawner;
use super::{lock, shared, NaglessStream};
use crate::coalescer::Coalescer;
use crate::driver::{Driver, Plain};
use crate::policy::{FlushPolicy, Urgency};

struct SockState {
    writable: bool,
    /// The waker of the last send that found the socket full (the stream's fan-out).
    waker: Option<Waker>,
    sent: Vec<u8>,
    /// What must have been sent when the socket goes away.
    expect: Vec<u8>,
}

impl Drop for SockState {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert_eq!(self.sent, self.expect, "the bytes the socket took");
        }
    }
}

/// A socket whose send side is full until [`open`](Self::open); it never has input.
#[derive(Clone)]
struct Sock(Arc<Mutex<SockState>>);

impl Sock {
    /// A socket that must have taken `expect` when it goes away.
    fn new(writable: bool, expect: &[u8]) -> Self {
        Sock(Arc::new(Mutex::new(SockState {
            writable,
            waker: None,
            sent: Vec::new(),
            expect: expect.to_vec(),
        })))
    }

    /// The socket has room from now on: the waiting waker is woken, as tokio's is.
    fn open(&self) {
        let waker = {
            let mut s = self.0.lock().unwrap();
            s.writable = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl AsyncWrite for Sock {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut s = self.0.lock().unwrap();
        if !s.writable {
            s.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let mut n = 0;
        for b in bufs {
            s.sent.extend_from_slice(b);
            n += b.len();
        }
        Poll::Ready(Ok(n))
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Sock {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

/// A stream over `sock` whose background tasks run on loom threads.
fn stream(sock: Sock, policy: FlushPolicy) -> NaglessStream<Sock> {
    let driver = Driver::new(Coalescer::new(policy), Plain);
    let shared = shared(sock, driver, SocketAccess::none(), loom_spawner()).unwrap();
    NaglessStream::from_shared(shared)
}

/// One poll of a write, with a waker nobody waits on; the write must not wait.
fn write(w: &mut impl WriteWith, buf: &[u8], urgency: Urgency) -> usize {
    let mut cx = Context::from_waker(Waker::noop());
    match w.write_with_once(&mut cx, buf, urgency) {
        Poll::Ready(r) => r.unwrap(),
        Poll::Pending => panic!("a write below the high-water mark waited"),
    }
}

/// The handles that write.
trait WriteWith {
    fn write_with_once(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
        urgency: Urgency,
    ) -> Poll<io::Result<usize>>;
}

impl WriteWith for NaglessStream<Sock> {
    fn write_with_once(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
        urgency: Urgency,
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, buf, urgency)
    }
}

impl WriteWith for super::WriteHalf<Sock> {
    fn write_with_once(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
        urgency: Urgency,
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, buf, urgency)
    }
}

/// Flushes, waiting (parking the loom thread) until the socket takes everything.
fn flush<W: AsyncWrite + Unpin>(w: &mut W) {
    loom::future::block_on(poll_fn(|cx| Pin::new(&mut *w).poll_flush(cx))).unwrap();
}

/// Runs `f` under every interleaving loom explores; prints how many (`--nocapture`).
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    b.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    let name = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!(
        "{name}: {} interleavings",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// The waker hand-off: a flush that finds the socket full waits (its waker registered with
/// the fan-out before the send), as does the flusher it starts; the socket opening on another
/// thread wakes them, and the bytes (held in the writer's lane until the flush) leave once.
#[test]
fn loom_a_flush_under_backpressure_is_woken_when_the_socket_opens() {
    model(|| {
        let sock = Sock::new(false, b"ab");
        let mut s = stream(sock.clone(), FlushPolicy::explicit_only());
        assert_eq!(write(&mut s, b"ab", Urgency::Normal), 2);
        let opener = thread::spawn(move || sock.open());
        flush(&mut s);
        opener.join().unwrap();
        assert_eq!(s.pending(), 0);
    });
}

/// The drain: a stream dropped with due bytes the socket cannot take hands them to a
/// background task, racing the flusher the blocked write started; the socket opening wakes
/// both, and the bytes leave once.
#[test]
fn loom_a_dropped_stream_is_drained_once_the_socket_opens() {
    model(|| {
        let sock = Sock::new(false, b"xy");
        let mut s = stream(sock.clone(), FlushPolicy::explicit_only());
        write(&mut s, b"xy", Urgency::SendNow);
        drop(s);
        thread::spawn(move || sock.open()).join().unwrap();
    });
}

/// The lane against the read half: the write half keeps normal writes in its lane (the
/// policy flushes no read half's queue) or not (it does), while the read half, on another
/// thread, turns to wait and sends what is due; the bytes arrive in the order written.
#[test]
fn loom_the_lane_and_the_read_half_keep_the_order() {
    for before_read in [false, true] {
        model(move || {
            let sock = Sock::new(true, b"abc");
            let policy = FlushPolicy::explicit_only().before_read(before_read);
            let (mut rd, mut wr) = stream(sock, policy).into_split();
            let reader = thread::spawn(move || {
                let mut buf = [0u8; 8];
                let mut rb = ReadBuf::new(&mut buf);
                let mut cx = Context::from_waker(Waker::noop());
                assert!(Pin::new(&mut rd).poll_read(&mut cx, &mut rb).is_pending());
                rd
            });
            write(&mut wr, b"a", Urgency::Normal);
            write(&mut wr, b"b", Urgency::SendNow);
            write(&mut wr, b"c", Urgency::Normal);
            let rd = reader.join().unwrap();
            flush(&mut wr);
            assert_eq!(wr.pending(), 0);
            drop((rd, wr));
        });
    }
}

/// The flusher's early wake: it sleeps towards a far linger deadline (under loom the sleep
/// never ends by itself); a write that makes bytes due and finds the socket full must wake
/// it, whether it is asleep yet or not, and it sends them once the socket opens.
#[test]
fn loom_a_sleeping_flusher_is_woken_when_bytes_become_due() {
    model(|| {
        let sock = Sock::new(false, b"ab");
        let policy = FlushPolicy::explicit_only().linger(Duration::from_secs(3600));
        let mut s = stream(sock.clone(), policy);
        let shared = s.owner.share();
        // Opens a linger window: the flusher starts and sleeps towards its deadline.
        write(&mut s, b"a", Urgency::Normal);
        // Due now, and the socket is full: the flusher is woken to wait for room.
        write(&mut s, b"b", Urgency::SendNow);
        sock.open();
        // The flusher sends, then stops: nothing is left for it. (Were it never woken, it
        // would sleep on and this wait would not end: loom reports that.)
        while lock(&shared).flusher_running {
            thread::yield_now();
        }
        assert_eq!(s.pending(), 0);
    });
}
