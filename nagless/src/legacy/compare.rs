//! The old streams against the driver's: the same seeded operations (writes of various sizes
//! and urgencies, vectored writes, flushes, reads with and without input waiting, time
//! passing, a socket that fills up, takes part of a send or fails, a peer that goes away)
//! through both, under a fake clock; after every operation both must have returned the same,
//! sent the same bytes in the same calls, and hold the same pending bytes and counters.
//!
//! The std streams run over a `SOCK_SEQPACKET` socket pair (each send is one packet, so the
//! calls show); the tokio streams over an in-memory socket that records each call, on a
//! paused tokio clock. The TLS streams seal with [`FakeTls`], whose records are
//! deterministic.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::coalescer::Stats;
use crate::policy::{FlushPolicy, Urgency};
#[cfg(feature = "tls")]
use crate::tls::fake::FakeTls;
#[cfg(feature = "tls")]
use crate::tls::WireStats;
#[cfg(not(feature = "tls"))]
type WireStats = ();

/// One step of a scenario.
#[derive(Debug, Clone)]
enum Op {
    /// The application writes this many bytes.
    Write(usize, Urgency),
    /// One vectored write of these slices.
    Vectored(Vec<usize>),
    Flush,
    /// std: `flush_now`; tokio: `shutdown`.
    FlushNow,
    /// The peer sends this many bytes (0: none), then the stream reads once.
    Read(usize),
    /// This many microseconds pass.
    Advance(u64),
    /// std: an event loop's wake at the deadline (`poll_deadline`).
    PollDeadline,
    /// tokio: the socket takes nothing until `Unblock`.
    Full,
    Unblock,
    /// tokio: the next send fails.
    Fail,
    /// tokio: the next send takes at most this many bytes.
    Short(usize),
    /// The peer closes its end.
    PeerCloses,
}

fn urgency() -> impl Strategy<Value = Urgency> {
    prop_oneof![
        6 => Just(Urgency::Normal),
        1 => Just(Urgency::SendNow),
        1 => Just(Urgency::MoreFollows),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let len = prop_oneof![4 => 1usize..64, 3 => 64usize..2000, 1 => 2000usize..40_000];
    prop_oneof![
        12 => (len, urgency()).prop_map(|(n, u)| Op::Write(n, u)),
        2 => proptest::collection::vec(1usize..3000, 1..4).prop_map(Op::Vectored),
        3 => Just(Op::Flush),
        1 => Just(Op::FlushNow),
        5 => prop_oneof![2 => Just(0usize), 1 => 1usize..200].prop_map(Op::Read),
        4 => prop_oneof![0u64..100, 100u64..1000, 1000u64..5000].prop_map(Op::Advance),
        1 => Just(Op::PollDeadline),
        1 => Just(Op::Full),
        2 => Just(Op::Unblock),
        1 => (0u8..8).prop_map(|_| Op::Fail),
        1 => (1usize..5000).prop_map(Op::Short),
        1 => (0u8..4).prop_map(|_| Op::PeerCloses),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..40)
}

/// The policies compared: the default and its variations, each flush point alone and
/// combined, small thresholds and high-water marks (so that they are reached).
fn policies() -> Vec<FlushPolicy> {
    vec![
        FlushPolicy::default(),
        FlushPolicy::explicit_only(),
        FlushPolicy::immediate(),
        FlushPolicy::default()
            .linger(Duration::from_micros(200))
            .threshold(Some(3000))
            .high_water(20_000),
        FlushPolicy::explicit_only()
            .linger(Duration::from_micros(300))
            .high_water(50_000),
        FlushPolicy::default()
            .before_read(false)
            .explicit_flush(false),
        FlushPolicy::default().msg_more(false).threshold(None),
        FlushPolicy::explicit_only().high_water(9_000),
        FlushPolicy::clocked(),
    ]
}

/// What one operation did.
#[derive(Debug, PartialEq)]
struct Step {
    result: String,
    /// The sends the socket saw, one entry per call.
    sent: Vec<Vec<u8>>,
    pending: usize,
    stats: Stats,
    wire: Option<WireStats>,
}

fn show<T: std::fmt::Debug>(r: io::Result<T>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({:?})", e.kind()),
    }
}

fn show_poll<T: std::fmt::Debug>(p: Poll<io::Result<T>>) -> String {
    match p {
        Poll::Ready(r) => show(r),
        Poll::Pending => "Pending".into(),
    }
}

/// The bytes of the `k`th write: each byte says which write and where in it.
fn data(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (k * 31 + j * 7) as u8).collect()
}

/// Where two runs first differ, with the scenario.
fn compare(what: &str, ops: &[Op], old: &[Step], new: &[Step]) -> Result<(), TestCaseError> {
    for (i, (o, n)) in old.iter().zip(new).enumerate() {
        if o != n {
            let op = ops.get(i).map_or("(drop)".into(), |op| format!("{op:?}"));
            return Err(TestCaseError::fail(format!(
                "{what}: step {i} ({op}) differs\nold: {o:?}\nnew: {n:?}\nops: {ops:?}"
            )));
        }
    }
    prop_assert_eq!(old.len(), new.len());
    Ok(())
}

/// A manual clock for the std runs.
struct ManualClock(std::rc::Rc<std::cell::Cell<Instant>>);

impl ManualClock {
    fn install(start: Instant) -> Self {
        let t = std::rc::Rc::new(std::cell::Cell::new(start));
        let read = t.clone();
        crate::clock::fake::set(Some(Box::new(move || read.get())));
        ManualClock(t)
    }
    fn advance(&self, us: u64) {
        self.0.set(self.0.get() + Duration::from_micros(us));
    }
}

impl Drop for ManualClock {
    fn drop(&mut self) {
        crate::clock::fake::set(None);
    }
}

mod std_runs {
    //! The std streams over a non-blocking `SOCK_SEQPACKET` pair.
    use super::*;
    use socket2::{Domain, Socket, Type};

    pub(super) fn pair() -> (Socket, Socket) {
        let (a, b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    /// The packets waiting at the peer.
    pub(super) fn drain(peer: &Option<Socket>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let Some(p) = peer else { return out };
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match (&*p).read(&mut buf) {
                // The stream's end closed (no stream sends an empty packet).
                Ok(0) => return out,
                Ok(n) => out.push(buf[..n].to_vec()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return out,
                Err(e) => panic!("peer read: {e}"),
            }
        }
    }

    /// The peer's input of the `k`th operation.
    pub(super) fn input(k: usize, n: usize) -> Vec<u8> {
        (0..n).map(|j| (k * 13 + j) as u8 | 0x80).collect()
    }

    /// Runs `ops` through a std stream type (plain or TLS): `$make` builds it from the socket
    /// and the policy, `$wire` reads its wire counters.
    macro_rules! run_std {
        ($make:expr, $wire:expr, $start:expr, $ops:expr) => {{
            let clock = ManualClock::install($start);
            let (ours, peer) = pair();
            let mut peer = Some(peer);
            let mut s = $make(ours);
            let mut steps = Vec::new();
            for (k, op) in $ops.iter().enumerate() {
                let result = match op {
                    Op::Write(len, u) => show(s.write_with(&data(k, *len), *u)),
                    Op::Vectored(lens) => {
                        let parts: Vec<Vec<u8>> = lens
                            .iter()
                            .enumerate()
                            .map(|(i, n)| data(k + i, *n))
                            .collect();
                        let slices: Vec<IoSlice<'_>> =
                            parts.iter().map(|p| IoSlice::new(p)).collect();
                        show(s.write_vectored(&slices))
                    }
                    Op::Flush => show(s.flush()),
                    Op::FlushNow => show(s.flush_now()),
                    Op::Read(n) => {
                        if let (Some(p), true) = (&peer, *n > 0) {
                            let _ = p.send(&input(k, *n));
                        }
                        let mut buf = vec![0u8; 1 << 16];
                        show(s.read(&mut buf).map(|n| buf[..n].to_vec()))
                    }
                    Op::Advance(us) => {
                        clock.advance(*us);
                        String::new()
                    }
                    Op::PollDeadline => show(s.poll_deadline()),
                    Op::PeerCloses => {
                        peer = None;
                        String::new()
                    }
                    Op::Full | Op::Unblock | Op::Fail | Op::Short(_) => String::new(),
                };
                steps.push(Step {
                    result,
                    sent: drain(&peer),
                    pending: s.pending(),
                    stats: s.stats().clone(),
                    wire: $wire(&s),
                });
            }
            let stats = s.stats().clone();
            let wire = $wire(&s);
            drop(s);
            steps.push(Step {
                result: "drop".into(),
                sent: drain(&peer),
                pending: 0,
                stats,
                wire,
            });
            drop(clock);
            steps
        }};
    }

    pub(super) fn plain_old(policy: FlushPolicy, start: Instant, ops: &[Op]) -> Vec<Step> {
        run_std!(
            |s| crate::legacy::stream::NaglessStream::with_policy(s, policy.clone()).unwrap(),
            |_: &crate::legacy::stream::NaglessStream<Socket>| None,
            start,
            ops
        )
    }

    pub(super) fn plain_new(policy: FlushPolicy, start: Instant, ops: &[Op]) -> Vec<Step> {
        run_std!(
            |s| crate::stream::NaglessStream::with_policy(s, policy.clone()).unwrap(),
            |_: &crate::stream::NaglessStream<Socket>| None,
            start,
            ops
        )
    }

    #[cfg(feature = "tls")]
    pub(super) fn tls_old(policy: FlushPolicy, start: Instant, ops: &[Op]) -> Vec<Step> {
        type S = crate::legacy::tls::TlsStream<FakeTls, Socket>;
        run_std!(
            |s| S::with_policy(FakeTls::new(4, 1 << 16), s, policy.clone()).unwrap(),
            |s: &S| Some(s.wire_stats().clone()),
            start,
            ops
        )
    }

    #[cfg(feature = "tls")]
    pub(super) fn tls_new(policy: FlushPolicy, start: Instant, ops: &[Op]) -> Vec<Step> {
        type S = crate::tls::TlsStream<FakeTls, Socket>;
        run_std!(
            |s| S::with_policy(FakeTls::new(4, 1 << 16), s, policy.clone()).unwrap(),
            |s: &S| Some(s.wire_stats().clone()),
            start,
            ops
        )
    }
}

#[cfg(feature = "tokio")]
mod tokio_runs {
    //! The tokio streams over an in-memory socket, on a paused tokio clock.
    use super::*;
    use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    #[derive(Default)]
    struct State {
        sent: Vec<Vec<u8>>,
        input: VecDeque<u8>,
        eof: bool,
        full: bool,
        fail_next: bool,
        short_next: Option<usize>,
        write_waker: Option<Waker>,
    }

    /// See the module docs.
    #[derive(Clone, Default)]
    pub(super) struct Sock(Arc<Mutex<State>>);

    impl Sock {
        fn state(&self) -> std::sync::MutexGuard<'_, State> {
            self.0.lock().unwrap()
        }
        fn take_sent(&self) -> Vec<Vec<u8>> {
            std::mem::take(&mut self.state().sent)
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
            let mut s = self.state();
            if std::mem::take(&mut s.fail_next) {
                return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
            }
            if s.full {
                s.write_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let limit = s.short_next.take().unwrap_or(usize::MAX);
            let call: Vec<u8> = bufs
                .iter()
                .flat_map(|b| b.iter().copied())
                .take(limit)
                .collect();
            let n = call.len();
            s.sent.push(call);
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
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let mut s = self.state();
            if s.input.is_empty() {
                return if s.eof {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                };
            }
            let n = buf.remaining().min(s.input.len());
            let bytes: Vec<u8> = s.input.drain(..n).collect();
            buf.put_slice(&bytes);
            Poll::Ready(Ok(()))
        }
    }

    /// Polls once with the calling task's context.
    async fn once<R>(mut f: impl FnMut(&mut Context<'_>) -> R) -> R {
        std::future::poll_fn(|cx| Poll::Ready(f(cx))).await
    }

    /// Lets every task that is ready run (the flusher, the drain).
    async fn settle() {
        for _ in 0..16 {
            ::tokio::task::yield_now().await;
        }
    }

    fn runtime() -> ::tokio::runtime::Runtime {
        ::tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// Runs `ops` through a tokio stream type: `$make` builds it from the socket and the
    /// policy; `$writer` and `$reader` give the handle that writes and the one that reads
    /// (the same, or a split stream's halves); `$wire` reads its wire counters.
    macro_rules! run_tokio {
        ($make:expr, $pending:expr, $stats:expr, $wire:expr, $ops:expr) => {{
            runtime().block_on(async {
                crate::clock::fake::set(Some(Box::new(|| {
                    ::tokio::time::Instant::now().into_std()
                })));
                let sock = Sock::default();
                let (mut rd, mut wr) = $make(sock.clone());
                let mut steps = Vec::new();
                for (k, op) in $ops.iter().enumerate() {
                    let result = match op {
                        Op::Write(len, u) => {
                            let d = data(k, *len);
                            show_poll(once(|cx| wr.poll_write_with(cx, &d, *u)).await)
                        }
                        Op::Vectored(lens) => {
                            let parts: Vec<Vec<u8>> = lens
                                .iter()
                                .enumerate()
                                .map(|(i, n)| data(k + i, *n))
                                .collect();
                            let slices: Vec<IoSlice<'_>> =
                                parts.iter().map(|p| IoSlice::new(p)).collect();
                            show_poll(
                                once(|cx| Pin::new(&mut wr).poll_write_vectored(cx, &slices)).await,
                            )
                        }
                        Op::Flush => show_poll(once(|cx| Pin::new(&mut wr).poll_flush(cx)).await),
                        Op::FlushNow => {
                            show_poll(once(|cx| Pin::new(&mut wr).poll_shutdown(cx)).await)
                        }
                        Op::Read(n) => {
                            sock.state().input.extend(super::std_runs::input(k, *n));
                            let mut buf = vec![0u8; 1 << 16];
                            let mut rb = ReadBuf::new(&mut buf);
                            let p = once(|cx| Pin::new(&mut rd).poll_read(cx, &mut rb)).await;
                            let got = rb.filled().to_vec();
                            show_poll(p.map(|r| r.map(|()| got)))
                        }
                        Op::Advance(us) => {
                            ::tokio::time::advance(Duration::from_micros(*us)).await;
                            String::new()
                        }
                        Op::PollDeadline => String::new(),
                        Op::Full => {
                            sock.state().full = true;
                            String::new()
                        }
                        Op::Unblock => {
                            let w = {
                                let mut s = sock.state();
                                s.full = false;
                                s.write_waker.take()
                            };
                            if let Some(w) = w {
                                w.wake();
                            }
                            String::new()
                        }
                        Op::Fail => {
                            sock.state().fail_next = true;
                            String::new()
                        }
                        Op::Short(n) => {
                            sock.state().short_next = Some(*n);
                            String::new()
                        }
                        Op::PeerCloses => {
                            sock.state().eof = true;
                            String::new()
                        }
                    };
                    settle().await;
                    steps.push(Step {
                        result,
                        sent: sock.take_sent(),
                        pending: $pending(&wr),
                        stats: $stats(&wr),
                        wire: $wire(&wr),
                    });
                }
                let (stats, wire) = ($stats(&wr), $wire(&wr));
                drop(rd);
                drop(wr);
                // The drain (if any) finishes once the socket takes bytes again.
                sock.state().full = false;
                let w = sock.state().write_waker.take();
                if let Some(w) = w {
                    w.wake();
                }
                settle().await;
                steps.push(Step {
                    result: "drop".into(),
                    sent: sock.take_sent(),
                    pending: 0,
                    stats,
                    wire,
                });
                crate::clock::fake::set(None);
                steps
            })
        }};
    }

    /// The unsplit stream (`split` false: the same handle reads and writes) or its halves.
    macro_rules! plain {
        ($module:path, $name:ident) => {
            pub(super) fn $name(policy: FlushPolicy, split: bool, ops: &[Op]) -> Vec<Step> {
                use $module as m;
                /// The handles: one stream twice, or the halves.
                enum Rd {
                    Whole,
                    Half(m::ReadHalf<Sock>),
                }
                struct Both {
                    rd: Rd,
                    stream: Option<m::NaglessStream<Sock>>,
                    wr: Option<m::WriteHalf<Sock>>,
                }
                // The writer and the reader as one type each, for the macro.
                struct W<'a>(&'a std::cell::RefCell<Both>);
                struct R<'a>(&'a std::cell::RefCell<Both>);
                impl W<'_> {
                    fn poll_write_with(
                        &mut self,
                        cx: &mut Context<'_>,
                        b: &[u8],
                        u: Urgency,
                    ) -> Poll<io::Result<usize>> {
                        let mut g = self.0.borrow_mut();
                        let g = &mut *g;
                        match (&mut g.stream, &mut g.wr) {
                            (Some(s), _) => s.poll_write_with(cx, b, u),
                            (_, Some(w)) => w.poll_write_with(cx, b, u),
                            _ => unreachable!(),
                        }
                    }
                    fn pending(&self) -> usize {
                        let g = self.0.borrow();
                        match (&g.stream, &g.wr) {
                            (Some(s), _) => s.pending(),
                            (_, Some(w)) => w.pending(),
                            _ => 0,
                        }
                    }
                    fn stats(&self) -> Stats {
                        let g = self.0.borrow();
                        match (&g.stream, &g.wr) {
                            (Some(s), _) => s.stats(),
                            (_, Some(w)) => w.stats(),
                            _ => Stats::default(),
                        }
                    }
                }
                impl AsyncWrite for W<'_> {
                    fn poll_write(
                        self: Pin<&mut Self>,
                        cx: &mut Context<'_>,
                        b: &[u8],
                    ) -> Poll<io::Result<usize>> {
                        self.get_mut().poll_write_with(cx, b, Urgency::Normal)
                    }
                    fn poll_write_vectored(
                        self: Pin<&mut Self>,
                        cx: &mut Context<'_>,
                        b: &[IoSlice<'_>],
                    ) -> Poll<io::Result<usize>> {
                        let mut g = self.0.borrow_mut();
                        let g = &mut *g;
                        match (&mut g.stream, &mut g.wr) {
                            (Some(s), _) => Pin::new(s).poll_write_vectored(cx, b),
                            (_, Some(w)) => Pin::new(w).poll_write_vectored(cx, b),
                            _ => unreachable!(),
                        }
                    }
                    fn poll_flush(
                        self: Pin<&mut Self>,
                        cx: &mut Context<'_>,
                    ) -> Poll<io::Result<()>> {
                        let mut g = self.0.borrow_mut();
                        let g = &mut *g;
                        match (&mut g.stream, &mut g.wr) {
                            (Some(s), _) => Pin::new(s).poll_flush(cx),
                            (_, Some(w)) => Pin::new(w).poll_flush(cx),
                            _ => unreachable!(),
                        }
                    }
                    fn poll_shutdown(
                        self: Pin<&mut Self>,
                        cx: &mut Context<'_>,
                    ) -> Poll<io::Result<()>> {
                        let mut g = self.0.borrow_mut();
                        let g = &mut *g;
                        match (&mut g.stream, &mut g.wr) {
                            (Some(s), _) => Pin::new(s).poll_shutdown(cx),
                            (_, Some(w)) => Pin::new(w).poll_shutdown(cx),
                            _ => unreachable!(),
                        }
                    }
                }
                impl AsyncRead for R<'_> {
                    fn poll_read(
                        self: Pin<&mut Self>,
                        cx: &mut Context<'_>,
                        b: &mut ReadBuf<'_>,
                    ) -> Poll<io::Result<()>> {
                        let mut g = self.0.borrow_mut();
                        let g = &mut *g;
                        match (&mut g.rd, &mut g.stream) {
                            (Rd::Half(r), _) => Pin::new(r).poll_read(cx, b),
                            (Rd::Whole, Some(s)) => Pin::new(s).poll_read(cx, b),
                            _ => unreachable!(),
                        }
                    }
                }
                let both = std::cell::RefCell::new(Both {
                    rd: Rd::Whole,
                    stream: None,
                    wr: None,
                });
                let both = &both;
                run_tokio!(
                    |sock: Sock| {
                        let s = m::NaglessStream::from_io(sock, policy.clone()).unwrap();
                        let mut g = both.borrow_mut();
                        if split {
                            let (r, w) = s.into_split();
                            g.rd = Rd::Half(r);
                            g.wr = Some(w);
                        } else {
                            g.stream = Some(s);
                        }
                        drop(g);
                        (R(both), W(both))
                    },
                    |w: &W<'_>| w.pending(),
                    |w: &W<'_>| w.stats(),
                    |_: &W<'_>| None,
                    ops
                )
            }
        };
    }

    plain!(crate::legacy::tokio_adapter, plain_old);
    plain!(crate::tokio_adapter, plain_new);

    /// The TLS runs: the stream is made inside the runtime, then read and written in place.
    #[cfg(feature = "tls")]
    fn run_tokio_tls<S>(
        policy: FlushPolicy,
        ops: &[Op],
        make: impl FnOnce(Sock, FlushPolicy) -> S,
    ) -> Vec<Step>
    where
        S: TlsLike,
    {
        let stream = std::cell::RefCell::new(None::<S>);
        let stream = &stream;
        struct H<'a, S>(&'a std::cell::RefCell<Option<S>>);
        impl<S: TlsLike> H<'_, S> {
            fn poll_write_with(
                &mut self,
                cx: &mut Context<'_>,
                b: &[u8],
                u: Urgency,
            ) -> Poll<io::Result<usize>> {
                self.0.borrow().as_ref().unwrap().write_with(cx, b, u)
            }
        }
        impl<S: TlsLike> AsyncWrite for H<'_, S> {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                b: &[u8],
            ) -> Poll<io::Result<usize>> {
                Pin::new(self.0.borrow_mut().as_mut().unwrap()).poll_write(cx, b)
            }
            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                b: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                Pin::new(self.0.borrow_mut().as_mut().unwrap()).poll_write_vectored(cx, b)
            }
            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(self.0.borrow_mut().as_mut().unwrap()).poll_flush(cx)
            }
            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(self.0.borrow_mut().as_mut().unwrap()).poll_shutdown(cx)
            }
        }
        impl<S: TlsLike> AsyncRead for H<'_, S> {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                b: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                Pin::new(self.0.borrow_mut().as_mut().unwrap()).poll_read(cx, b)
            }
        }
        let mut make = Some(make);
        let steps = run_tokio!(
            |sock: Sock| {
                *stream.borrow_mut() = Some((make.take().unwrap())(sock, policy.clone()));
                (H(stream), H(stream))
            },
            |h: &H<'_, S>| h.0.borrow().as_ref().map_or(0, |s| s.pending_bytes()),
            |h: &H<'_, S>| h
                .0
                .borrow()
                .as_ref()
                .map_or(Stats::default(), |s| s.counters()),
            |h: &H<'_, S>| h.0.borrow().as_ref().map(|s| s.wire()),
            ops
        );
        steps
    }

    /// What the comparison asks of both tokio TLS streams.
    #[cfg(feature = "tls")]
    trait TlsLike: AsyncRead + AsyncWrite + Unpin {
        fn write_with(&self, cx: &mut Context<'_>, b: &[u8], u: Urgency)
            -> Poll<io::Result<usize>>;
        fn pending_bytes(&self) -> usize;
        fn counters(&self) -> Stats;
        fn wire(&self) -> WireStats;
    }

    #[cfg(feature = "tls")]
    macro_rules! tls_like {
        ($ty:ty) => {
            impl TlsLike for $ty {
                fn write_with(
                    &self,
                    cx: &mut Context<'_>,
                    b: &[u8],
                    u: Urgency,
                ) -> Poll<io::Result<usize>> {
                    self.poll_write_with(cx, b, u)
                }
                fn pending_bytes(&self) -> usize {
                    self.pending()
                }
                fn counters(&self) -> Stats {
                    self.stats()
                }
                fn wire(&self) -> WireStats {
                    self.wire_stats()
                }
            }
        };
    }

    #[cfg(feature = "tls")]
    tls_like!(crate::legacy::tokio_tls::TlsStream<Sock, FakeTls>);
    #[cfg(feature = "tls")]
    tls_like!(crate::tokio_tls::TlsStream<Sock, FakeTls>);

    #[cfg(feature = "tls")]
    pub(super) fn tls_old(policy: FlushPolicy, ops: &[Op]) -> Vec<Step> {
        run_tokio_tls(policy, ops, |sock, policy| {
            crate::legacy::tokio_tls::TlsStream::from_io(FakeTls::new(4, 1 << 16), sock, policy)
                .unwrap()
        })
    }

    #[cfg(feature = "tls")]
    pub(super) fn tls_new(policy: FlushPolicy, ops: &[Op]) -> Vec<Step> {
        run_tokio_tls(policy, ops, |sock, policy| {
            crate::tokio_tls::TlsStream::from_io(FakeTls::new(4, 1 << 16), sock, policy).unwrap()
        })
    }
}

/// The std policies: the high-water mark below what one `SOCK_SEQPACKET` send may carry.
fn std_policy(p: FlushPolicy) -> FlushPolicy {
    let hw = p.high_water_bytes().min(100_000);
    p.high_water(hw)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn std_plain_old_and_new_agree(policy in 0..policies().len(), ops in ops()) {
        let policy = std_policy(policies()[policy].clone());
        let start = crate::clock::now();
        let old = std_runs::plain_old(policy.clone(), start, &ops);
        let new = std_runs::plain_new(policy, start, &ops);
        compare("std plain", &ops, &old, &new)?;
    }

    #[cfg(feature = "tls")]
    #[test]
    fn std_tls_old_and_new_agree(policy in 0..policies().len() - 1, ops in ops()) {
        // Not the clocked policy (the last): the driver clocks the TLS stream, the old one
        // sent its writes at once.
        let policy = std_policy(policies()[policy].clone());
        let start = crate::clock::now();
        let old = std_runs::tls_old(policy.clone(), start, &ops);
        let new = std_runs::tls_new(policy, start, &ops);
        compare("std tls", &ops, &old, &new)?;
    }
}

#[cfg(feature = "tokio")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn tokio_plain_old_and_new_agree(
        policy in 0..policies().len(),
        split in any::<bool>(),
        ops in ops(),
    ) {
        let policy = policies()[policy].clone();
        let old = tokio_runs::plain_old(policy.clone(), split, &ops);
        let new = tokio_runs::plain_new(policy, split, &ops);
        compare("tokio plain", &ops, &old, &new)?;
    }
}

#[cfg(all(feature = "tokio", feature = "tls"))]
proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn tokio_tls_old_and_new_agree(policy in 0..policies().len(), ops in ops()) {
        let policy = policies()[policy].clone();
        let old = tokio_runs::tls_old(policy.clone(), &ops);
        let new = tokio_runs::tls_new(policy, &ops);
        compare("tokio tls", &ops, &old, &new)?;
    }
}

/// The comparison sees differences: a stream that sends the same bytes in other calls fails
/// it (the scenario: two writes and a flush, once coalesced, once not).
#[test]
fn the_comparison_sees_a_difference() {
    let ops = [
        Op::Write(10, Urgency::Normal),
        Op::Write(10, Urgency::Normal),
        Op::Flush,
    ];
    let start = crate::clock::now();
    let coalesced = std_runs::plain_new(FlushPolicy::default(), start, &ops);
    let one_by_one = std_runs::plain_new(FlushPolicy::immediate(), start, &ops);
    assert!(compare("self-test", &ops, &coalesced, &one_by_one).is_err());
}
