//! The tokio adapter's owner lane (normal writes a handle keeps without the shared lock)
//! changes nothing but the cost: against the bare core driven by hand, the stream sends the
//! same bytes in the same calls after every step, and reports the same pending bytes and
//! counters. On loopback: a write half's bytes still leave when its read half waits, and
//! when it is dropped.
#![cfg(feature = "tokio")]
// The reference core takes the time as input; no policy here has a deadline.
#![allow(clippy::disallowed_methods)]

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use nagless::tokio_adapter::{NaglessStream, ReadHalf, WriteHalf};
use nagless::{drive, Coalescer, FlushPolicy, Transport, Urgency};
use proptest::prelude::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// What reached the "socket": the bytes, and per call the bytes taken and slices given.
#[derive(Default, Debug)]
struct Wire {
    out: Vec<u8>,
    calls: Vec<(usize, usize)>,
}

/// An in-memory socket that takes every byte at once and never has input.
#[derive(Clone, Default, Debug)]
struct Recorder(Arc<Mutex<Wire>>);

impl AsyncWrite for Recorder {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut w = self.0.lock().unwrap();
        w.out.extend_from_slice(buf);
        w.calls.push((buf.len(), 1));
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut w = self.0.lock().unwrap();
        let n = bufs.iter().map(|b| b.len()).sum();
        for b in bufs {
            w.out.extend_from_slice(b);
        }
        w.calls.push((n, bufs.len()));
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

impl AsyncRead for Recorder {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

/// The reference: the core and a socket that takes everything, driven as the adapter's
/// full path drives them.
struct Reference {
    core: Coalescer,
    wire: Wire,
}

impl Transport for Wire {
    fn send(&mut self, bufs: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
        let n = bufs.iter().map(|b| b.len()).sum();
        for b in bufs {
            self.out.extend_from_slice(b);
        }
        self.calls.push((n, bufs.len()));
        Ok(n)
    }
}

impl Reference {
    fn drive(&mut self) {
        drive(&mut self.core, &mut self.wire, Instant::now()).unwrap();
    }

    /// One write, cut at the high-water mark: of one buffer with `Some(urgency)`, else of
    /// `parts` as one message (a vectored write: its nonempty parts, all but the last queued
    /// as `MoreFollows`).
    fn write(&mut self, parts: &[Vec<u8>], single: Option<Urgency>) -> usize {
        let len: usize = parts.iter().map(Vec::len).sum();
        if self.core.room() == 0 && len > 0 {
            self.drive();
        }
        let now = Instant::now();
        let mut left = len.min(self.core.room());
        let take = left;
        let mut nonempty = parts.iter().filter(|p| !p.is_empty()).peekable();
        if let Some(urgency) = single {
            self.core.write(&parts[0][..left], urgency, now);
        } else {
            while let Some(p) = nonempty.next() {
                let n = p.len().min(left);
                left -= n;
                let last = left == 0 || nonempty.peek().is_none();
                let u = if last {
                    Urgency::Normal
                } else {
                    Urgency::MoreFollows
                };
                self.core.write(&p[..n], u, now);
                if last {
                    break;
                }
            }
        }
        self.drive();
        take
    }
}

#[derive(Debug, Clone)]
enum Op {
    Write(usize, u8),
    Vectored(Vec<usize>),
    Flush,
    /// A read that finds no input (it waits): the stream's, or the read half's when split.
    Read,
    /// Split the stream, or put its halves back together.
    Split,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..700, 0u8..4).prop_map(|(n, u)| Op::Write(n, u)),
        1 => proptest::collection::vec(0usize..400, 0..4).prop_map(Op::Vectored),
        1 => Just(Op::Flush),
        1 => Just(Op::Read),
        1 => Just(Op::Split),
    ]
}

/// Policies without a linger deadline (the lane's domain; with one it stays closed), with
/// and without before-read, threshold, hint-only flushes, and a low high-water mark.
fn policy() -> impl Strategy<Value = FlushPolicy> {
    (
        any::<bool>(),
        proptest::option::of(1usize..6000),
        1usize..12_000,
        any::<bool>(),
    )
        .prop_map(|(br, th, hw, explicit)| {
            FlushPolicy::explicit_only()
                .before_read(br)
                .threshold(th)
                .high_water(hw)
                .explicit_flush(explicit)
        })
}

enum Handles {
    Whole(NaglessStream<Recorder>),
    Split(ReadHalf<Recorder>, WriteHalf<Recorder>),
    Gone,
}

fn urgency(u: u8) -> Urgency {
    match u {
        1 => Urgency::SendNow,
        2 => Urgency::MoreFollows,
        _ => Urgency::Normal,
    }
}

/// Runs `ops` on a stream under `policy` and on the bare core, comparing after every step.
fn against_the_core(policy: FlushPolicy, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rec = Recorder::default();
    let mut h = Handles::Whole(NaglessStream::from_io(rec.clone(), policy.clone()).unwrap());
    let mut r = Reference {
        core: Coalescer::new(policy),
        wire: Wire::default(),
    };
    let mut cx = Context::from_waker(Waker::noop());
    let mut fill = 0u8;
    let mut bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                fill = fill.wrapping_add(1);
                fill
            })
            .collect()
    };
    for op in ops {
        match op {
            Op::Write(n, u) => {
                let data = bytes(n);
                let got = match &mut h {
                    Handles::Whole(s) => s.poll_write_with(&mut cx, &data, urgency(u)),
                    Handles::Split(_, w) => w.poll_write_with(&mut cx, &data, urgency(u)),
                    Handles::Gone => unreachable!(),
                };
                let want = r.write(&[data], Some(urgency(u)));
                prop_assert!(
                    matches!(got, Poll::Ready(Ok(n)) if n == want),
                    "{got:?}, want {want}"
                );
            }
            Op::Vectored(lens) => {
                let parts: Vec<Vec<u8>> = lens.into_iter().map(&mut bytes).collect();
                let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
                let got = match &mut h {
                    Handles::Whole(s) => Pin::new(s).poll_write_vectored(&mut cx, &slices),
                    Handles::Split(_, w) => Pin::new(w).poll_write_vectored(&mut cx, &slices),
                    Handles::Gone => unreachable!(),
                };
                let want = r.write(&parts, None);
                prop_assert!(
                    matches!(got, Poll::Ready(Ok(n)) if n == want),
                    "{got:?}, want {want}"
                );
            }
            Op::Flush => {
                let got = match &mut h {
                    Handles::Whole(s) => Pin::new(s).poll_flush(&mut cx),
                    Handles::Split(_, w) => Pin::new(w).poll_flush(&mut cx),
                    Handles::Gone => unreachable!(),
                };
                prop_assert!(matches!(got, Poll::Ready(Ok(()))));
                r.core.flush();
                r.drive();
            }
            Op::Read => {
                let mut buf = [0u8; 16];
                let mut rb = ReadBuf::new(&mut buf);
                let got = match &mut h {
                    Handles::Whole(s) => Pin::new(s).poll_read(&mut cx, &mut rb),
                    Handles::Split(rh, _) => Pin::new(rh).poll_read(&mut cx, &mut rb),
                    Handles::Gone => unreachable!(),
                };
                prop_assert!(got.is_pending());
                r.core.before_read();
                r.drive();
            }
            Op::Split => {
                h = match std::mem::replace(&mut h, Handles::Gone) {
                    Handles::Whole(s) => {
                        let (rh, w) = s.into_split();
                        Handles::Split(rh, w)
                    }
                    Handles::Split(rh, w) => Handles::Whole(w.reunite(rh).unwrap()),
                    Handles::Gone => unreachable!(),
                };
            }
        }
        let (pending, stats) = match &h {
            Handles::Whole(s) => (s.pending(), s.stats()),
            Handles::Split(_, w) => (w.pending(), w.stats()),
            Handles::Gone => unreachable!(),
        };
        let wire = rec.0.lock().unwrap();
        prop_assert_eq!(&wire.out, &r.wire.out);
        prop_assert_eq!(&wire.calls, &r.wire.calls);
        prop_assert_eq!(pending, r.core.pending());
        prop_assert_eq!(stats.writes, r.core.stats().writes);
        prop_assert_eq!(stats.bytes_written, r.core.stats().bytes_written);
    }
    // Dropping the last handle sends everything, the lane's bytes included.
    drop(h);
    r.core.close();
    r.drive();
    prop_assert_eq!(&rec.0.lock().unwrap().out, &r.wire.out);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_lane_sends_what_the_core_alone_sends(policy in policy(), ops in proptest::collection::vec(op(), 0..120)) {
        against_the_core(policy, ops)?;
    }
}

/// A lane that held more than a chunk's worth (4 KiB) hands its bytes over as the writes
/// would have queued them: into the tail buffer, so a flush sends one slice, not two.
#[test]
fn a_full_lane_is_queued_as_its_writes_would_have_been() {
    let policy = FlushPolicy::explicit_only().high_water(12_000);
    let mut ops = vec![Op::Write(100, 0)];
    ops.extend(std::iter::repeat_n(Op::Write(650, 0), 12));
    ops.push(Op::Flush);
    against_the_core(policy, ops).unwrap();
}

/// A write half with before-read on and no linger keeps nothing from its read half: the
/// request leaves when the read half waits for the answer, with no flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_half_without_linger_leaves_when_the_read_half_waits() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tcp = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut peer, _) = listener.accept().await.unwrap();
    let echo = tokio::spawn(async move {
        let mut got = [0u8; 8];
        for _ in 0..20 {
            peer.read_exact(&mut got).await.unwrap();
            peer.write_all(&got).await.unwrap();
        }
    });
    let policy = FlushPolicy::default().linger(None);
    let (mut rh, mut wh) = NaglessStream::with_policy(tcp, policy)
        .unwrap()
        .into_split();
    for i in 0..20u8 {
        // Two writes: the second finds the lane open after the first.
        wh.write_all(&[i; 4]).await.unwrap();
        wh.write_all(&[i; 4]).await.unwrap();
        let mut back = [0u8; 8];
        tokio::time::timeout(Duration::from_secs(10), rh.read_exact(&mut back))
            .await
            .expect("the request never left: the read half did not flush the write half")
            .unwrap();
        assert_eq!(back, [i; 8]);
    }
    echo.await.unwrap();
}

/// Bytes in a dropped write half's lane reach the peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_write_half_sends_what_it_held() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tcp = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut peer, _) = listener.accept().await.unwrap();
    let (rh, mut wh) = NaglessStream::with_policy(tcp, FlushPolicy::explicit_only())
        .unwrap()
        .into_split();
    let mut sent = Vec::new();
    for i in 0..1000u32 {
        let piece = i.to_be_bytes();
        wh.write_all(&piece).await.unwrap();
        sent.extend_from_slice(&piece);
    }
    assert_eq!(wh.pending(), sent.len());
    assert_eq!(wh.stats().writes, 1000);
    drop(wh);
    drop(rh);
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), peer.read_to_end(&mut got))
        .await
        .expect("the peer never saw the end")
        .unwrap();
    assert_eq!(got, sent);
}
