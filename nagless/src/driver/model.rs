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

mod std_stream;

#[cfg(feature = "tokio")]
mod tokio_stream;

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

/// A read that would wait ends a burst even when nothing of it is pending (proptest's case):
/// the high-water mark sent everything after the burst's early first segment, the program
/// reads, and its next small writes fill a segment, which leaves at once (the std stream,
/// asking the socket only while output was pending, held it until its linger).
#[test]
fn a_read_ends_a_burst_that_left_whole() {
    let ops = [
        Op::Write(234, Urgency::Normal),
        Op::Write(1214, Urgency::Normal),
        Op::Write(20_000, Urgency::Normal),
        Op::Read(0),
        Op::Write(775, Urgency::Normal),
        Op::Write(673, Urgency::Normal),
    ];
    let (stream, model) = std_stream::run(policies()[3].clone(), &ops);
    assert_eq!(
        model[ops.len() - 1].sent.len(),
        1,
        "the core sends the segment"
    );
    compare("std", &ops, &stream, &model).unwrap();
}

/// The check that ends such a burst costs a read that would wait one `recv` per burst, and
/// nothing where no read ends a burst (before-read off).
#[test]
fn a_read_asks_once_for_a_burst_and_never_without_before_read() {
    for (before_read, checks) in [(true, 1), (false, 0)] {
        let (ours, _peer) = std_stream::pair();
        let policy = FlushPolicy::default()
            .threshold(Some(3000))
            .high_water(20_000)
            .before_read(before_read);
        let mut s = crate::stream::NaglessStream::with_policy(ours, policy).unwrap();
        // A burst's first full segment leaves at once: nothing is pending after it.
        s.write_all(&[1; 775]).unwrap();
        s.write_all(&[1; 673]).unwrap();
        assert_eq!(s.stats().bytes_sent, 1448);
        let mut buf = [0u8; 64];
        for _ in 0..10 {
            let r = s.read(&mut buf);
            assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        }
        assert_eq!(s.stats().input_checks, checks, "before-read {before_read}");
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
