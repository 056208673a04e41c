//! The core against a scripted fake socket and a virtual clock: no sleeps, no real I/O.

#![allow(clippy::disallowed_methods)] // tests measure real time

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

use nagless::{drive, Coalescer, Drive, FlushPolicy, FlushReason, Transport, Urgency};
use proptest::prelude::*;

/// One scripted answer of the fake socket.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Take at most this many bytes.
    Accept(usize),
    WouldBlock,
    Interrupted,
    Fail,
}

/// A socket that answers from a script, then accepts everything.
#[derive(Default)]
struct FakeSocket {
    script: VecDeque<Step>,
    out: Vec<u8>,
    /// One entry per successful call: (bytes taken, MSG_MORE flag, slices given).
    calls: Vec<(usize, bool, usize)>,
    attempts: usize,
}

impl FakeSocket {
    fn scripted(steps: &[Step]) -> Self {
        Self {
            script: steps.iter().copied().collect(),
            ..Self::default()
        }
    }
}

impl Transport for FakeSocket {
    fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        self.attempts += 1;
        assert!(self.attempts < 100_000, "drive loop does not terminate");
        let offered: usize = bufs.iter().map(|b| b.len()).sum();
        let limit = match self.script.pop_front() {
            None => usize::MAX,
            Some(Step::Accept(n)) => n,
            Some(Step::WouldBlock) => return Err(io::ErrorKind::WouldBlock.into()),
            Some(Step::Interrupted) => return Err(io::ErrorKind::Interrupted.into()),
            Some(Step::Fail) => return Err(io::Error::from_raw_os_error(libc_epipe())),
        };
        let mut left = limit.min(offered);
        let took = left;
        for b in bufs {
            let n = b.len().min(left);
            self.out.extend_from_slice(&b[..n]);
            left -= n;
        }
        self.calls.push((took, more, bufs.len()));
        Ok(took)
    }
}

fn libc_epipe() -> i32 {
    32
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn default_policy_holds_small_writes_until_before_read_then_sends_one_syscall() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::default());
    let mut s = FakeSocket::default();
    c.write(&[1; 100], Urgency::Normal, t0);
    c.write(&[2; 100], Urgency::Normal, t0);
    assert_eq!(drive(&mut c, &mut s, t0).unwrap(), Drive::Idle);
    assert!(s.out.is_empty(), "nothing leaves before a flush point");
    c.before_read();
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(s.out.len(), 200);
    assert_eq!(s.calls.len(), 1, "one syscall per flush");
    assert_eq!(c.stats().flushes_for(FlushReason::BeforeRead), 1);
}

#[test]
fn before_read_can_be_disabled() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::explicit_only());
    let mut s = FakeSocket::default();
    c.write(b"abc", Urgency::Normal, t0);
    c.before_read();
    drive(&mut c, &mut s, t0 + ms(1000)).unwrap();
    assert!(s.out.is_empty());
    c.flush();
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(s.out, b"abc");
}

#[test]
fn threshold_sends_whole_segments_and_keeps_the_tail() {
    let t0 = Instant::now();
    let policy = FlushPolicy::default().threshold(Some(4000)).linger(None);
    let mut c = Coalescer::new(policy);
    c.set_segment_size(1000);
    let mut s = FakeSocket::default();
    for n in 1..=55 {
        c.write(&[7; 100], Urgency::Normal, t0);
        drive(&mut c, &mut s, t0).unwrap();
        if n == 10 {
            // The burst's first full segment leaves at once...
            assert_eq!(s.out.len(), 1000);
        }
        if n == 49 {
            // ...the rest waits for the threshold...
            assert_eq!((s.out.len(), c.pending()), (1000, 3900));
        }
    }
    // ...4000 pending trigger 4000 out; 500 remain below the threshold.
    assert_eq!(s.out.len(), 5000);
    assert_eq!(c.pending(), 500);
    c.before_read();
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(s.out.len(), 5500);
}

#[test]
fn a_bursts_first_full_segment_leaves_at_once_and_then_waits_for_the_burst_to_end() {
    // BGP's UPDATEs at MSS 1448 (the lab's bgp-burst): 45 bytes each, written one by one.
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::default());
    c.set_segment_size(1448);
    let mut s = FakeSocket::default();
    for burst in 0..2 {
        let before = s.out.len();
        for n in 1..=255 {
            c.write(&[burst; 45], Urgency::Normal, t0);
            drive(&mut c, &mut s, t0).unwrap();
            let sent = s.out.len() - before;
            // The 33rd fills a segment: it leaves; nothing else before the burst ends.
            assert_eq!(sent, if n < 33 { 0 } else { 1448 }, "update {n}");
        }
        assert_eq!(s.calls.len(), 2 * burst as usize + 1, "one send so far");
        c.before_read(); // the program turns to read: the burst ends, all of it leaves
        drive(&mut c, &mut s, t0).unwrap();
        assert_eq!(s.out.len() - before, 255 * 45);
        assert_eq!(
            c.stats().flushes_for(FlushReason::Threshold),
            u64::from(burst) + 1
        );
    }
    // A write of a segment or more (a whole message, its writer flushes it) is not split
    // early: it waits for its flush point whole.
    let mut c = Coalescer::new(FlushPolicy::default());
    c.set_segment_size(1448);
    let mut s = FakeSocket::default();
    c.write(&[1; 10], Urgency::Normal, t0);
    c.write(&[1; 4104], Urgency::Normal, t0);
    drive(&mut c, &mut s, t0).unwrap();
    assert!(s.out.is_empty(), "nothing before the flush");
    c.flush();
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(
        (s.out.len(), s.calls.len()),
        (4114, 1),
        "one send, as before"
    );
    // Not below a segment, nor where the threshold point is off.
    let mut c = Coalescer::new(FlushPolicy::default().threshold(None));
    c.set_segment_size(1448);
    let mut s = FakeSocket::default();
    c.write(&[0; 3000], Urgency::Normal, t0);
    drive(&mut c, &mut s, t0).unwrap();
    assert!(s.out.is_empty());
}

#[test]
fn threshold_is_never_below_one_segment() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::default().threshold(Some(10)).linger(None));
    c.set_segment_size(1448);
    let mut s = FakeSocket::default();
    c.write(&[0; 1447], Urgency::Normal, t0);
    drive(&mut c, &mut s, t0).unwrap();
    assert!(s.out.is_empty());
    c.write(&[0; 10], Urgency::Normal, t0);
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(s.out.len(), 1448);
    assert_eq!(c.pending(), 9);
}

#[test]
fn linger_is_a_hard_deadline_from_the_first_unflushed_byte() {
    let t0 = Instant::now();
    let linger = Duration::from_micros(500);
    let mut c = Coalescer::new(FlushPolicy::default().linger(Some(linger)));
    let mut s = FakeSocket::default();
    assert_eq!(c.poll_timeout(), None);
    c.write(b"a", Urgency::Normal, t0);
    assert_eq!(c.poll_timeout(), Some(t0 + linger));
    // Later writes do not push the deadline back.
    c.write(b"b", Urgency::Normal, t0 + Duration::from_micros(300));
    assert_eq!(c.poll_timeout(), Some(t0 + linger));
    drive(&mut c, &mut s, t0 + Duration::from_micros(499)).unwrap();
    assert!(s.out.is_empty());
    drive(&mut c, &mut s, t0 + linger).unwrap();
    assert_eq!(s.out, b"ab");
    assert_eq!(c.stats().flushes_for(FlushReason::Linger), 1);
    assert_eq!(c.poll_timeout(), None);
    // A new burst starts a new deadline.
    let t1 = t0 + ms(5);
    c.write(b"c", Urgency::Normal, t1);
    assert_eq!(c.poll_timeout(), Some(t1 + linger));
}

#[test]
fn send_now_flushes_everything_before_it() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::default());
    let mut s = FakeSocket::default();
    c.write(b"update1", Urgency::Normal, t0);
    c.write(b"update2", Urgency::Normal, t0);
    c.write(b"eor", Urgency::SendNow, t0);
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(s.out, b"update1update2eor");
    assert_eq!(s.calls.len(), 1);
    assert_eq!(c.stats().flushes_for(FlushReason::Urgent), 1);
}

#[test]
fn more_follows_holds_even_under_the_immediate_policy() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::immediate());
    let mut s = FakeSocket::default();
    c.write(b"hdr", Urgency::MoreFollows, t0);
    drive(&mut c, &mut s, t0).unwrap();
    assert!(s.out.is_empty());
    c.write(b"body", Urgency::Normal, t0);
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(s.out, b"hdrbody");
    assert_eq!(s.calls.len(), 1);
}

#[test]
fn high_water_makes_everything_due() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::explicit_only().high_water(1000));
    let mut s = FakeSocket::default();
    c.write(&[1; 999], Urgency::Normal, t0);
    drive(&mut c, &mut s, t0).unwrap();
    assert!(s.out.is_empty());
    assert!(!c.over_high_water());
    c.write(&[1; 1], Urgency::Normal, t0);
    assert!(c.over_high_water());
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(s.out.len(), 1000);
    assert_eq!(c.stats().flushes_for(FlushReason::HighWater), 1);
}

#[test]
fn short_writes_eintr_and_would_block_lose_nothing() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::default());
    let mut s = FakeSocket::scripted(&[
        Step::Accept(3),
        Step::Interrupted,
        Step::Accept(1),
        Step::WouldBlock,
    ]);
    c.write(b"hello world", Urgency::Normal, t0);
    c.flush();
    assert_eq!(drive(&mut c, &mut s, t0).unwrap(), Drive::Blocked);
    assert_eq!(s.out, b"hell");
    assert_eq!(c.pending(), 7);
    assert_eq!(c.must_send(), 7, "due bytes stay due after WouldBlock");
    assert_eq!(c.stats().would_block, 1);
    assert_eq!(c.stats().syscalls, 4);
    assert_eq!(drive(&mut c, &mut s, t0).unwrap(), Drive::Idle);
    assert_eq!(s.out, b"hello world");
}

#[test]
fn errors_surface_and_keep_the_bytes_queued() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::default());
    let mut s = FakeSocket::scripted(&[Step::Accept(2), Step::Fail]);
    c.write(b"abcdef", Urgency::SendNow, t0);
    let err = drive(&mut c, &mut s, t0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(32), "errno passes through intact");
    assert_eq!(c.pending(), 4, "the caller learns how many bytes remain");
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(s.out, b"abcdef");
}

#[test]
fn msg_more_on_all_but_the_last_syscall_of_a_flush() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::explicit_only());
    let mut s = FakeSocket::default();
    // 100 owned chunks: more than one syscall's worth of slices.
    for i in 0..100u8 {
        c.write_owned(vec![i; 5000], Urgency::Normal, t0);
    }
    c.flush();
    drive(&mut c, &mut s, t0).unwrap();
    assert_eq!(s.out.len(), 500_000);
    assert!(s.calls.len() >= 2);
    let (last, rest) = s.calls.split_last().unwrap();
    assert!(rest.iter().all(|&(_, more, _)| more), "{rest:?}");
    assert!(!last.1, "the last syscall of a flush releases the tail");
    assert_eq!(c.stats().flushes, 1);
}

#[test]
fn msg_more_can_be_turned_off() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::explicit_only().msg_more(false));
    let mut s = FakeSocket::default();
    for i in 0..100u8 {
        c.write_owned(vec![i; 5000], Urgency::Normal, t0);
    }
    c.flush();
    drive(&mut c, &mut s, t0).unwrap();
    assert!(s.calls.iter().all(|&(_, more, _)| !more));
}

#[test]
fn zero_byte_accept_is_an_error_not_a_livelock() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::default());
    let mut s = FakeSocket::scripted(&[Step::Accept(0)]);
    c.write(b"x", Urgency::SendNow, t0);
    let err = drive(&mut c, &mut s, t0).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WriteZero);
    assert_eq!(c.pending(), 1);
}

/// An operation on the core, for property tests.
#[derive(Debug, Clone)]
enum Op {
    Write(Vec<u8>, u8),
    WriteOwned(usize, u8),
    Flush,
    BeforeRead,
    Advance(u64),
    Drive(Vec<Step>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..3000).prop_map(|n| Step::Accept(n.max(1))),
        2 => Just(Step::WouldBlock),
        1 => Just(Step::Interrupted),
        1 => Just(Step::Fail),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (proptest::collection::vec(any::<u8>(), 0..300), 0u8..3).prop_map(|(v, u)| Op::Write(v, u)),
        1 => (0usize..20_000, 0u8..3).prop_map(|(n, u)| Op::WriteOwned(n, u)),
        1 => Just(Op::Flush),
        1 => Just(Op::BeforeRead),
        2 => (0u64..2000).prop_map(Op::Advance),
        3 => proptest::collection::vec(step(), 0..6).prop_map(Op::Drive),
    ]
}

fn policy() -> impl Strategy<Value = FlushPolicy> {
    (
        any::<bool>(),
        proptest::option::of(1usize..10_000),
        proptest::option::of(0u64..1500),
        1usize..50_000,
        any::<bool>(),
        1usize..3000,
    )
        .prop_map(|(br, th, linger, hw, more, _)| {
            FlushPolicy::default()
                .before_read(br)
                .threshold(th)
                .linger(linger.map(Duration::from_micros))
                .high_water(hw)
                .msg_more(more)
        })
}

fn urgency(u: u8) -> Urgency {
    match u {
        0 => Urgency::Normal,
        1 => Urgency::SendNow,
        _ => Urgency::MoreFollows,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the policy and however the socket misbehaves, bytes out equal bytes in, in
    /// order, none lost or duplicated; and a due byte never waits while the socket accepts.
    #[test]
    fn bytes_out_equal_bytes_in(policy in policy(), seg in 1usize..3000, ops in proptest::collection::vec(op(), 0..60)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut c = Coalescer::new(policy);
        c.set_segment_size(seg);
        let mut sock = FakeSocket::default();
        let mut input = Vec::new();
        let mut counter = 0u8;
        for op in ops {
            match op {
                Op::Write(v, u) => { input.extend_from_slice(&v); c.write(&v, urgency(u), now); }
                Op::WriteOwned(n, u) => {
                    let v: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_add(counter)).collect();
                    counter = counter.wrapping_add(1);
                    input.extend_from_slice(&v);
                    c.write_owned(v, urgency(u), now);
                }
                Op::Flush => c.flush(),
                Op::BeforeRead => c.before_read(),
                Op::Advance(us) => now += Duration::from_micros(us),
                Op::Drive(script) => {
                    sock.script = script.into_iter().collect();
                    let _ = drive(&mut c, &mut sock, now);
                    sock.script.clear();
                }
            }
            prop_assert_eq!(sock.out.len() + c.pending(), input.len());
            prop_assert_eq!(&sock.out[..], &input[..sock.out.len()]);
            prop_assert!(c.must_send() <= c.pending());
        }
        c.close();
        prop_assert_eq!(drive(&mut c, &mut sock, now).unwrap(), Drive::Idle);
        prop_assert_eq!(c.pending(), 0);
        prop_assert_eq!(sock.out, input);
    }

    /// The fast path changes nothing but its speed: a twin that takes every write the full
    /// way sends the same bytes in the same calls at the same moments, and a write the fast
    /// path accepts made nothing due.
    #[test]
    fn the_fast_path_sends_what_the_full_path_sends(policy in policy(), seg in 1usize..3000, ops in proptest::collection::vec(op(), 0..80)) {
        let t0 = Instant::now();
        let mut now = t0;
        let (mut fast, mut full) = (Coalescer::new(policy.clone()), Coalescer::new(policy));
        fast.set_segment_size(seg);
        full.set_segment_size(seg);
        let (mut fast_sock, mut full_sock) = (FakeSocket::default(), FakeSocket::default());
        for op in ops {
            match op {
                Op::Write(v, u) => {
                    let in_time = fast.poll_timeout().is_none_or(|d| now < d);
                    let joined = urgency(u) == Urgency::Normal && in_time && fast.write_if_nothing_due(&v);
                    if joined {
                        full.write(&v, Urgency::Normal, now);
                        prop_assert_eq!(full.poll_transmit(now), None, "a fast write made bytes due");
                    } else {
                        fast.write(&v, urgency(u), now);
                        full.write(&v, urgency(u), now);
                    }
                }
                Op::WriteOwned(n, u) => {
                    let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
                    fast.write_owned(v.clone(), urgency(u), now);
                    full.write_owned(v, urgency(u), now);
                }
                Op::Flush => { fast.flush(); full.flush(); }
                Op::BeforeRead => { fast.before_read(); full.before_read(); }
                Op::Advance(us) => now += Duration::from_micros(us),
                Op::Drive(script) => {
                    fast_sock.script = script.iter().copied().collect();
                    full_sock.script = script.into_iter().collect();
                    let a = drive(&mut fast, &mut fast_sock, now).map_err(|e| e.kind());
                    let b = drive(&mut full, &mut full_sock, now).map_err(|e| e.kind());
                    prop_assert_eq!(a, b);
                    fast_sock.script.clear();
                    full_sock.script.clear();
                }
            }
            prop_assert_eq!(&fast_sock.out, &full_sock.out);
            prop_assert_eq!(&fast_sock.calls, &full_sock.calls);
            prop_assert_eq!(fast.pending_bytes(), full.pending_bytes());
            prop_assert_eq!(fast.must_send(), full.must_send());
            prop_assert_eq!(fast.poll_timeout(), full.poll_timeout());
        }
    }

    /// With a socket that takes everything, no byte is ever older than the linger deadline
    /// after a drive at any later time.
    #[test]
    fn linger_bounds_every_byte(linger_us in 1u64..1000, gaps in proptest::collection::vec(0u64..400, 1..50)) {
        let t0 = Instant::now();
        let linger = Duration::from_micros(linger_us);
        let mut c = Coalescer::new(FlushPolicy::default().before_read(false).threshold(None).linger(Some(linger)));
        let mut sock = FakeSocket::default();
        let mut now = t0;
        let mut oldest: Option<Instant> = None;
        for g in gaps {
            now += Duration::from_micros(g);
            drive(&mut c, &mut sock, now).unwrap();
            if c.pending() == 0 { oldest = None; }
            if let Some(o) = oldest { prop_assert!(now < o + linger, "a byte outlived its deadline"); }
            c.write(b"x", Urgency::Normal, now);
            oldest.get_or_insert(now);
            prop_assert!(c.poll_timeout().unwrap() <= oldest.unwrap() + linger);
        }
    }
}

#[test]
fn the_fast_write_path_queues_only_when_nothing_can_become_due() {
    use nagless::Coalescer;
    let t0 = std::time::Instant::now();
    let mut c = Coalescer::new(FlushPolicy::default().threshold(Some(4096)));
    c.set_segment_size(1000);
    // No linger window open yet: the write's arrival time matters, take the full path.
    assert!(!c.write_if_nothing_due(b"first"));
    c.write(b"first", Urgency::Normal, t0);
    assert!(c.write_if_nothing_due(&[0u8; 100]));
    assert_eq!(c.pending(), 105);
    // Reaching the threshold would make segments due: full path.
    assert!(!c.write_if_nothing_due(&[0u8; 4000]));
    assert!(c.write_if_nothing_due(b"y"));
    // Bytes already due (a flush met a full socket): full path.
    c.flush();
    assert!(!c.write_if_nothing_due(b"x"));
    assert_eq!(c.pending(), 106);
    // Under the immediate policy every write is due.
    let mut i = Coalescer::new(FlushPolicy::immediate());
    i.write(b"a", Urgency::Normal, t0);
    assert!(!i.write_if_nothing_due(b"x"));
    // Without linger, no time is ever needed: once a buffer exists, writes join it.
    let mut e = Coalescer::new(FlushPolicy::explicit_only());
    assert!(!e.write_if_nothing_due(b"x"), "the first write allocates");
    e.write(b"x", Urgency::Normal, t0);
    assert!(e.write_if_nothing_due(b"y"));
    assert_eq!(e.pending_bytes(), b"xy");
    assert_eq!(e.stats().writes, 2);
    assert_eq!(e.stats().bytes_written, 2);
    // A full buffer takes the full path (which gives it room), then joining resumes.
    let mut f = Coalescer::new(FlushPolicy::explicit_only());
    f.write(b"x", Urgency::Normal, t0);
    let mut joined = 0;
    while f.write_if_nothing_due(&[1; 100]) {
        joined += 1;
    }
    assert!(
        joined > 0 && f.pending() < 64 * 1024,
        "{joined} writes joined"
    );
    f.write(&[1; 100], Urgency::Normal, t0);
    assert!(f.write_if_nothing_due(&[1; 100]));
}

#[test]
fn a_flush_that_is_no_hint_counts_as_explicit_and_a_close_as_close() {
    let t0 = Instant::now();
    let mut c = Coalescer::new(FlushPolicy::explicit_only().explicit_flush(false));
    c.write(b"a", Urgency::Normal, t0);
    c.flush();
    assert_eq!(c.poll_transmit(t0), None, "flush is a hint");
    c.flush_all();
    let tx = c.poll_transmit(t0).unwrap();
    assert_eq!(tx.reason, FlushReason::Explicit);
    c.on_sent(tx.len);
    c.write(b"b", Urgency::Normal, t0);
    c.close();
    assert_eq!(c.poll_transmit(t0).unwrap().reason, FlushReason::Close);
}
