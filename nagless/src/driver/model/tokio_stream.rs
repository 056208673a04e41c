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
