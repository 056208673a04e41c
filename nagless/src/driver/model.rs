//! The driver's streams against the pure core's model: the same seeded operations (writes
//! of various sizes and urgencies, vectored writes, flushes, reads with and without input
//! waiting, time passing, a socket that takes part of a send, a peer that goes away) through
//! a stream and through a bare [`Coalescer`] driven by hand as the protocol says (queue at
//! most the room, send what is due after every event, a read that would wait makes
//! everything due, a send error after a write is returned by the next write or flush, the
//! linger deadline honoured when it passes); after every operation both must have returned
//! the same, sent the same bytes in the same calls, and hold the same pending bytes and core
//! counters.
//!
//! The std stream runs over a `SOCK_SEQPACKET` socket pair (each send is one packet, so the
//! calls show) under a manual clock; the tokio stream (whole, or split into halves) over an
//! in-memory socket that records each call, on a paused tokio clock that moves by whole
//! milliseconds (tokio's timers fire on millisecond ticks, so the flusher acts exactly when
//! the model's deadline has passed).

use std::io::{self, IoSlice, Read, Write};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::coalescer::{drive, Coalescer, Drive, Stats, Transport};
use crate::io_glue::queue_vectored;
use crate::policy::{FlushPolicy, FlushReason, Urgency};

/// One step of a scenario.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
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
    /// Time passes: this many microseconds (std) or milliseconds (tokio).
    Advance(u64),
    /// std: an event loop's wake at the deadline (`poll_deadline`).
    PollDeadline,
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
        1 => (1usize..5000).prop_map(Op::Short),
        1 => (0u8..4).prop_map(|_| Op::PeerCloses),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..40)
}

/// The policies: the default and its variations, each flush point alone and combined, small
/// thresholds and high-water marks (so that they are reached). Not the clocked one: the
/// kernel's ACK clock is no part of the core (the driver's `tests` script it).
fn policies() -> Vec<FlushPolicy> {
    vec![
        FlushPolicy::default(),
        FlushPolicy::explicit_only(),
        FlushPolicy::immediate(),
        FlushPolicy::default()
            .linger(Duration::from_micros(1500))
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
    ]
}

/// What one operation did.
#[derive(Debug, PartialEq)]
struct Step {
    result: String,
    /// The sends the socket saw, one entry per call.
    sent: Vec<Vec<u8>>,
    pending: usize,
    /// The core's counters (writes, flushes by reason, bytes): the syscall counters are the
    /// stream's own.
    counters: Vec<u64>,
}

fn counters(s: &Stats) -> Vec<u64> {
    let mut c = vec![s.writes, s.bytes_written, s.flushes, s.bytes_sent];
    c.extend(FlushReason::ALL.map(|r| s.flushes_for(r)));
    c
}

fn show<T: std::fmt::Debug>(r: io::Result<T>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({:?})", e.kind()),
    }
}

/// The bytes of the `k`th write: each byte says which write and where in it.
fn data(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (k * 31 + j * 7) as u8).collect()
}

/// The peer's input of the `k`th operation.
fn input(k: usize, n: usize) -> Vec<u8> {
    (0..n).map(|j| (k * 13 + j) as u8 | 0x80).collect()
}

/// The slices of the `k`th operation's vectored write.
fn parts(k: usize, lens: &[usize]) -> Vec<Vec<u8>> {
    lens.iter()
        .enumerate()
        .map(|(i, n)| data(k + i, *n))
        .collect()
}

/// Where the stream and the model first differ, with the scenario.
fn compare(what: &str, ops: &[Op], stream: &[Step], model: &[Step]) -> Result<(), TestCaseError> {
    for (i, (s, m)) in stream.iter().zip(model).enumerate() {
        if s != m {
            let op = ops.get(i).map_or("(drop)".into(), |op| format!("{op:?}"));
            return Err(TestCaseError::fail(format!(
                "{what}: step {i} ({op}) differs\nstream: {s:?}\nmodel:  {m:?}\nops: {ops:?}"
            )));
        }
    }
    prop_assert_eq!(stream.len(), model.len());
    Ok(())
}

/// The model's socket: records each send; takes at most `short` bytes once; fails once the
/// peer is gone.
#[derive(Default)]
struct ModelSocket {
    calls: Vec<Vec<u8>>,
    short: Option<usize>,
    closed: bool,
}

impl Transport for ModelSocket {
    fn send(&mut self, bufs: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
        if self.closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let limit = self.short.take().unwrap_or(usize::MAX);
        let call: Vec<u8> = bufs
            .iter()
            .flat_map(|b| b.iter().copied())
            .take(limit)
            .collect();
        let n = call.len();
        self.calls.push(call);
        Ok(n)
    }
}

/// The protocol, on the bare core: see the module docs.
struct Model {
    core: Coalescer,
    sock: ModelSocket,
    deferred: Option<io::ErrorKind>,
    /// The peer closed its end: no more input.
    eof: bool,
    now: Instant,
}

impl Model {
    fn new(policy: FlushPolicy, now: Instant) -> Self {
        Model {
            core: Coalescer::new(policy),
            sock: ModelSocket::default(),
            deferred: None,
            eof: false,
            now,
        }
    }

    fn drive(&mut self) -> io::Result<Drive> {
        drive(&mut self.core, &mut self.sock, self.now)
    }

    /// Sends what is due; an error waits for the next write or flush (the first one wins).
    fn drive_deferring(&mut self) {
        if let Err(e) = self.drive() {
            self.deferred.get_or_insert(e.kind());
        }
    }

    fn take_deferred(&mut self) -> io::Result<()> {
        self.deferred.take().map_or(Ok(()), |k| Err(k.into()))
    }

    /// A write of `len` bytes, queued by `queue` (at most the room below the high-water mark).
    fn write(
        &mut self,
        len: usize,
        queue: impl FnOnce(&mut Coalescer, usize, Instant),
    ) -> io::Result<usize> {
        self.take_deferred()?;
        if self.core.room() == 0 && len > 0 {
            self.drive()?;
        }
        let take = len.min(self.core.room());
        queue(&mut self.core, take, self.now);
        self.drive_deferring();
        Ok(take)
    }

    fn flush(&mut self, all: bool) -> io::Result<()> {
        self.take_deferred()?;
        if all {
            self.core.flush_all();
        } else {
            self.core.flush();
        }
        self.drive().map(drop)
    }

    /// A read: input waiting is read without flushing (the deadline still holds); else
    /// everything pending is due first (and the read would wait, or finds the end).
    fn read(&mut self, input: Option<Vec<u8>>) -> io::Result<Vec<u8>> {
        match input {
            Some(bytes) => {
                if self.deadline_passed() {
                    self.drive_deferring();
                }
                Ok(bytes)
            }
            None => {
                self.core.before_read();
                self.drive_deferring();
                if self.eof {
                    Ok(Vec::new())
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                }
            }
        }
    }

    fn deadline_passed(&self) -> bool {
        self.core.poll_timeout().is_some_and(|t| t <= self.now)
    }

    fn step(&mut self, result: String) -> Step {
        Step {
            result,
            sent: std::mem::take(&mut self.sock.calls),
            pending: self.core.pending(),
            counters: counters(self.core.stats()),
        }
    }

    /// Dropping the stream: everything is due and sent as far as the socket takes it. (The
    /// counters are the ones before, as a dropped stream's cannot be read after.)
    fn close(&mut self) -> Step {
        let before = counters(self.core.stats());
        self.core.close();
        let _ = self.drive();
        Step {
            counters: before,
            pending: 0,
            ..self.step("drop".into())
        }
    }
}

mod std_stream {
    //! The std stream over a non-blocking `SOCK_SEQPACKET` pair.
    use super::*;
    use socket2::{Domain, Socket, Type};

    fn pair() -> (Socket, Socket) {
        let (a, b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    /// The packets waiting at the peer.
    fn drain(peer: &Option<Socket>) -> Vec<Vec<u8>> {
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

    /// The manual clock the stream reads.
    struct Clock(std::rc::Rc<std::cell::Cell<Instant>>);

    impl Drop for Clock {
        fn drop(&mut self) {
            crate::clock::fake::set(None);
        }
    }

    pub(super) fn run(policy: FlushPolicy, ops: &[Op]) -> (Vec<Step>, Vec<Step>) {
        let start = crate::clock::now();
        let t = std::rc::Rc::new(std::cell::Cell::new(start));
        let read = t.clone();
        crate::clock::fake::set(Some(Box::new(move || read.get())));
        let clock = Clock(t);
        let (ours, peer) = pair();
        let mut peer = Some(peer);
        let mut s = crate::stream::NaglessStream::with_policy(ours, policy.clone()).unwrap();
        let mut m = Model::new(policy, start);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for (k, op) in ops.iter().enumerate() {
            let (r, mr) = match op {
                Op::Write(len, u) => {
                    let d = data(k, *len);
                    let mr = m.write(*len, |c, n, now| c.write(&d[..n], *u, now));
                    (show(s.write_with(&d, *u)), show(mr))
                }
                Op::Vectored(lens) => {
                    let p = parts(k, lens);
                    let slices: Vec<IoSlice<'_>> = p.iter().map(|p| IoSlice::new(p)).collect();
                    let total = lens.iter().sum();
                    let mr = m.write(total, |c, n, now| queue_vectored(c, &slices, n, now));
                    (show(s.write_vectored(&slices)), show(mr))
                }
                Op::Flush => (show(s.flush()), show(m.flush(false))),
                Op::FlushNow => (show(s.flush_now()), show(m.flush(true))),
                Op::Read(n) => {
                    let waiting = match &peer {
                        Some(p) if *n > 0 => {
                            p.send(&input(k, *n)).unwrap();
                            Some(input(k, *n))
                        }
                        _ => None,
                    };
                    let mut buf = vec![0u8; 1 << 16];
                    let r = s.read(&mut buf).map(|n| buf[..n].to_vec());
                    (show(r), show(m.read(waiting)))
                }
                Op::Advance(us) => {
                    clock.0.set(clock.0.get() + Duration::from_micros(*us));
                    m.now = clock.0.get();
                    (String::new(), String::new())
                }
                Op::PollDeadline => {
                    let mr = m.take_deferred().and_then(|()| m.drive().map(drop));
                    (show(s.poll_deadline()), show(mr))
                }
                Op::Short(_) => (String::new(), String::new()),
                Op::PeerCloses => {
                    peer = None;
                    m.sock.closed = true;
                    m.eof = true;
                    (String::new(), String::new())
                }
            };
            got.push(Step {
                result: r,
                sent: drain(&peer),
                pending: s.pending(),
                counters: counters(s.stats()),
            });
            want.push(m.step(mr));
        }
        let counters = counters(s.stats());
        drop(s);
        got.push(Step {
            result: "drop".into(),
            sent: drain(&peer),
            pending: 0,
            counters,
        });
        want.push(m.close());
        drop(clock);
        (got, want)
    }
}

#[cfg(feature = "tokio")]
mod tokio_stream {
    //! The tokio stream, whole or split, over an in-memory socket on a paused clock.
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    use super::*;
    use crate::tokio_adapter::{NaglessStream, ReadHalf, WriteHalf};

    #[derive(Default)]
    struct State {
        sent: Vec<Vec<u8>>,
        input: VecDeque<u8>,
        eof: bool,
        short: Option<usize>,
    }

    /// See the module docs.
    #[derive(Clone, Default)]
    struct Sock(Arc<Mutex<State>>);

    impl Sock {
        fn state(&self) -> std::sync::MutexGuard<'_, State> {
            self.0.lock().unwrap()
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
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut s = self.state();
            let limit = s.short.take().unwrap_or(usize::MAX);
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

    enum Handles {
        Whole(NaglessStream<Sock>),
        Split(ReadHalf<Sock>, WriteHalf<Sock>),
    }

    impl Handles {
        fn writer(&mut self) -> Pin<&mut (dyn AsyncWrite + Unpin)> {
            match self {
                Handles::Whole(s) => Pin::new(s),
                Handles::Split(_, w) => Pin::new(w),
            }
        }
        fn reader(&mut self) -> Pin<&mut (dyn AsyncRead + Unpin)> {
            match self {
                Handles::Whole(s) => Pin::new(s),
                Handles::Split(r, _) => Pin::new(r),
            }
        }
        fn write_with(
            &mut self,
            cx: &mut Context<'_>,
            b: &[u8],
            u: Urgency,
        ) -> Poll<io::Result<usize>> {
            match self {
                Handles::Whole(s) => s.poll_write_with(cx, b, u),
                Handles::Split(_, w) => w.poll_write_with(cx, b, u),
            }
        }
        fn pending(&self) -> usize {
            match self {
                Handles::Whole(s) => s.pending(),
                Handles::Split(_, w) => w.pending(),
            }
        }
        fn stats(&self) -> Stats {
            match self {
                Handles::Whole(s) => s.stats(),
                Handles::Split(_, w) => w.stats(),
            }
        }
    }

    /// Polls once; a pending write or flush would wait, which the model never does.
    fn ready<T>(p: Poll<io::Result<T>>) -> io::Result<T> {
        match p {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Lets every task that is ready run (the flusher).
    async fn settle() {
        for _ in 0..16 {
            ::tokio::task::yield_now().await;
        }
    }

    pub(super) fn run(policy: FlushPolicy, split: bool, ops: &[Op]) -> (Vec<Step>, Vec<Step>) {
        let rt = ::tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            crate::clock::fake::set(Some(Box::new(|| ::tokio::time::Instant::now().into_std())));
            let sock = Sock::default();
            let s = NaglessStream::from_io(sock.clone(), policy.clone()).unwrap();
            let mut h = if split {
                let (r, w) = s.into_split();
                Handles::Split(r, w)
            } else {
                Handles::Whole(s)
            };
            let mut m = Model::new(policy, crate::clock::now());
            let (mut got, mut want) = (Vec::new(), Vec::new());
            let cx = &mut Context::from_waker(std::task::Waker::noop());
            for (k, op) in ops.iter().enumerate() {
                let (r, mr) = match op {
                    Op::Write(len, u) => {
                        let d = data(k, *len);
                        let mr = m.write(*len, |c, n, now| c.write(&d[..n], *u, now));
                        (show(ready(h.write_with(cx, &d, *u))), show(mr))
                    }
                    Op::Vectored(lens) => {
                        let p = parts(k, lens);
                        let slices: Vec<IoSlice<'_>> = p.iter().map(|p| IoSlice::new(p)).collect();
                        let total = lens.iter().sum();
                        let mr = m.write(total, |c, n, now| queue_vectored(c, &slices, n, now));
                        let r = ready(h.writer().poll_write_vectored(cx, &slices));
                        (show(r), show(mr))
                    }
                    Op::Flush => (show(ready(h.writer().poll_flush(cx))), show(m.flush(false))),
                    Op::FlushNow => {
                        let r = ready(h.writer().poll_shutdown(cx));
                        let mr = m.take_deferred().and_then(|()| {
                            m.core.close();
                            m.drive().map(drop)
                        });
                        (show(r), show(mr))
                    }
                    Op::Read(n) => {
                        let waiting = (*n > 0 && !m.eof).then(|| input(k, *n));
                        if let Some(bytes) = &waiting {
                            sock.state().input.extend(bytes);
                        }
                        let mut buf = vec![0u8; 1 << 16];
                        let mut rb = ReadBuf::new(&mut buf);
                        let r = ready(h.reader().poll_read(cx, &mut rb));
                        let r = r.map(|()| rb.filled().to_vec());
                        // Input waiting is read without a send: the flusher keeps the
                        // deadline (the model's `Advance`).
                        let mr = match waiting {
                            Some(bytes) => Ok(bytes),
                            None => m.read(None),
                        };
                        (show(r), show(mr))
                    }
                    Op::Advance(ms) => {
                        let d = Duration::from_millis(*ms / 1000);
                        ::tokio::time::advance(d).await;
                        m.now += d;
                        // The flusher, at the deadline.
                        if m.deadline_passed() {
                            m.drive_deferring();
                        }
                        (String::new(), String::new())
                    }
                    Op::Short(n) => {
                        sock.state().short = Some(*n);
                        m.sock.short = Some(*n);
                        (String::new(), String::new())
                    }
                    Op::PeerCloses => {
                        // The in-memory socket still takes bytes: the peer only stopped
                        // sending.
                        sock.state().eof = true;
                        m.eof = true;
                        (String::new(), String::new())
                    }
                    Op::PollDeadline => (String::new(), String::new()),
                };
                settle().await;
                got.push(Step {
                    result: r,
                    sent: std::mem::take(&mut sock.state().sent),
                    pending: h.pending(),
                    counters: counters(&h.stats()),
                });
                want.push(m.step(mr));
            }
            let counters = counters(&h.stats());
            drop(h);
            settle().await;
            got.push(Step {
                result: "drop".into(),
                sent: std::mem::take(&mut sock.state().sent),
                pending: 0,
                counters,
            });
            want.push(m.close());
            crate::clock::fake::set(None);
            (got, want)
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_std_stream_follows_the_core(policy in 0..policies().len(), ops in ops()) {
        // The high-water mark below what one `SOCK_SEQPACKET` send may carry.
        let policy = policies()[policy].clone();
        let hw = policy.high_water_bytes().min(50_000);
        let (stream, model) = std_stream::run(policy.high_water(hw), &ops);
        compare("std", &ops, &stream, &model)?;
    }
}

#[cfg(feature = "tokio")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_tokio_stream_follows_the_core(
        policy in 0..policies().len(),
        split in any::<bool>(),
        ops in ops(),
    ) {
        let (stream, model) = tokio_stream::run(policies()[policy].clone(), split, &ops);
        compare("tokio", &ops, &stream, &model)?;
    }
}

/// The comparison sees differences: a stream that sends the same bytes in other calls than
/// the model fails it.
#[test]
fn the_comparison_sees_a_difference() {
    let ops = [
        Op::Write(10, Urgency::Normal),
        Op::Write(10, Urgency::Normal),
        Op::Flush,
    ];
    let (coalesced, _) = std_stream::run(FlushPolicy::default(), &ops);
    let (one_by_one, _) = std_stream::run(FlushPolicy::immediate(), &ops);
    assert!(compare("self-test", &ops, &coalesced, &one_by_one).is_err());
}
