//! The sessions of sources 001, 002 and 004, each a client and a server playing the case's
//! traffic through a [`Conn`](crate::strategy::Conn): a framed protocol with a receiver window, pipelined reads
//! answered as header and data, and HTTP/1.1-like keep-alive requests.

use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::harness::{session, ClientReport, Session, Setup};
use crate::strategy::{Burst, Strategy};

/// When the framed-window receiver sends a credit (SEQ) frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Credit {
    /// After every frame it consumes.
    EachFrame,
    /// Once at least half the window has been consumed since the last grant (as BEEP stacks
    /// do to avoid a SEQ per tiny frame): the setting of source 001's collapse.
    HalfWindow,
}

const FRAME_HEADER: usize = 8;

fn frame(kind: u8, len: usize, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME_HEADER + payload.len());
    f.extend_from_slice(&[kind, 0, 0, 0]);
    f.extend_from_slice(&(len as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A framed protocol with a receiver window (source 001): the sender may have at most
/// `window` payload bytes unacknowledged; the receiver grants credit back with a small SEQ
/// frame (after each frame, or once half the window is consumed). The sender reads every
/// SEQ frame that has arrived before it computes its credit. A message's latency runs from
/// the sender starting it to the receiver holding all of it, so it includes delivery.
pub(crate) fn framed_window(
    total: usize,
    message: usize,
    window: usize,
    credit_rule: Credit,
    strategy: Strategy,
    setup: Setup<'_>,
    limit: Duration,
) -> io::Result<Session> {
    let (tx, rx) = mpsc::channel::<Instant>();
    let mut starts = Vec::new();
    let mut done = session(
        setup,
        strategy,
        |conn, _| {
            let payload = vec![b'm'; message.max(window)];
            let mut credit = window;
            let mut seq = [0u8; FRAME_HEADER];
            let start = Instant::now();
            let mut sent_total = 0;
            while sent_total < total && start.elapsed() < limit {
                starts.push(Instant::now());
                let mut left = message;
                while left > 0 {
                    if credit == 0 {
                        conn.recv_exact(&mut seq)?;
                        credit += u32::from_be_bytes([seq[4], seq[5], seq[6], seq[7]]) as usize;
                        while conn.available() >= FRAME_HEADER {
                            conn.recv_exact(&mut seq)?;
                            credit += u32::from_be_bytes([seq[4], seq[5], seq[6], seq[7]]) as usize;
                        }
                        continue;
                    }
                    let n = left.min(credit);
                    credit -= n;
                    left -= n;
                    let burst = if credit == 0 {
                        Burst::Last
                    } else {
                        Burst::More
                    };
                    conn.send(&frame(b'M', n, &payload[..n]), burst)?;
                }
                sent_total += message;
            }
            Ok(ClientReport::default())
        },
        move |conn| {
            let mut header = [0u8; FRAME_HEADER];
            let mut payload = vec![0u8; message.max(window)];
            let mut consumed = 0;
            let mut in_message = 0;
            loop {
                conn.recv_exact(&mut header)?;
                let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
                if len > payload.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "frame too large",
                    ));
                }
                conn.recv_exact(&mut payload[..len])?;
                in_message += len;
                while in_message >= message {
                    in_message -= message;
                    let _ = tx.send(Instant::now());
                }
                consumed += len;
                let grant = match credit_rule {
                    Credit::EachFrame => true,
                    Credit::HalfWindow => consumed * 2 >= window,
                };
                if grant {
                    conn.send(&frame(b'S', consumed, &[]), Burst::Last)?;
                    consumed = 0;
                }
            }
        },
    )?;
    for (start, arrived) in starts.iter().zip(rx.try_iter()) {
        done.0
            .latencies_us
            .push(arrived.saturating_duration_since(*start).as_micros() as u64);
        done.0.work += 1.0;
    }
    Ok(done)
}

/// sftp-like reads (source 002): `depth` requests outstanding; the server answers each with a
/// small header and the data as separate writes.
pub(crate) fn pipelined_read(
    total: usize,
    block: usize,
    depth: usize,
    strategy: Strategy,
    setup: Setup<'_>,
    limit: Duration,
) -> io::Result<Session> {
    const REQ: usize = 16;
    const HDR: usize = 13;
    session(
        setup,
        strategy,
        |conn, _| {
            let mut report = ClientReport::default();
            let requests = total.div_ceil(block.max(1));
            let mut sent_at = std::collections::VecDeque::new();
            let mut next = 0usize;
            let mut hdr = [0u8; HDR];
            let mut data = vec![0u8; block];
            let start = Instant::now();
            let mut stop = false;
            let first = depth.max(1).min(requests);
            for i in 0..first {
                let burst = if i + 1 == first {
                    Burst::Last
                } else {
                    Burst::More
                };
                sent_at.push_back(Instant::now());
                conn.send(&[b'R'; REQ], burst)?;
                next += 1;
            }
            while let Some(t) = sent_at.pop_front() {
                conn.recv_exact(&mut hdr)?;
                conn.recv_exact(&mut data)?;
                report.latencies_us.push(t.elapsed().as_micros() as u64);
                report.work += block as f64 / 1e6;
                stop |= start.elapsed() > limit;
                if next < requests && !stop {
                    sent_at.push_back(Instant::now());
                    conn.send(&[b'R'; REQ], Burst::Last)?;
                    next += 1;
                }
            }
            Ok(report)
        },
        |conn| {
            let mut req = [0u8; REQ];
            let data = vec![b'd'; block];
            loop {
                conn.recv_exact(&mut req)?;
                conn.send(&[b'H'; HDR], Burst::More)?;
                conn.send(&data, Burst::Last)?;
            }
        },
    )
}

/// One HTTP/1.1-like keep-alive connection (source 004) for `limit`: a request in one write,
/// the response as a header write and a 100-byte body write.
pub(crate) fn http_session(
    strategy: Strategy,
    setup: Setup<'_>,
    limit: Duration,
) -> io::Result<Session> {
    const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n";
    const HEADER: &[u8] =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\nConnection: keep-alive\r\n\r\n";
    const BODY: [u8; 100] = [b'x'; 100];
    session(
        setup,
        strategy,
        |conn, _| {
            let mut report = ClientReport::default();
            let mut resp = vec![0u8; HEADER.len() + BODY.len()];
            let start = Instant::now();
            while start.elapsed() < limit {
                let t = Instant::now();
                conn.send(REQUEST, Burst::Last)?;
                conn.recv_exact(&mut resp)?;
                report.latencies_us.push(t.elapsed().as_micros() as u64);
                report.work += 1.0;
            }
            Ok(report)
        },
        |conn| {
            let mut req = vec![0u8; REQUEST.len()];
            loop {
                conn.recv_exact(&mut req)?;
                conn.send(HEADER, Burst::More)?;
                conn.send(&BODY, Burst::Last)?;
            }
        },
    )
}
