//! `sse-stream` (ai-dynamo/dynamo #14643): an HTTP server streams a completion as
//! server-sent events, one small event per token, each written and flushed as it is made,
//! `gap_us` apart. With Nagle on, each event waits behind the last one until the client's
//! ACK of it, delayed up to 40 ms; `TCP_NODELAY` fixed it there (4.76x throughput). The
//! client (fixed) is a kernel-default reader on a keep-alive connection. Each event carries
//! the `CLOCK_MONOTONIC` time it was written, so a token's latency is measured across
//! processes (the server under `run` is one).

use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::end::{Ctx, End, Role, Spec};
use super::{connect, Outcome};
use crate::harness::{side_cost, ClientReport, SideCost};
use crate::scenario::Case;
use crate::strategy::{Burst, Conn, Strategy};
use crate::sys;

const REQUEST: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nContent-Length: 0\r\n\r\n";
const HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\n";
/// `data: {"i":000001,"t":00000000000000000000}` and a blank line.
const EVENT: usize = 45;

fn event(i: usize, t_ns: u64) -> Vec<u8> {
    let e = format!(
        "data: {{\"i\":{:06},\"t\":{:020}}}\n\n",
        i % 1_000_000,
        t_ns
    );
    debug_assert_eq!(e.len(), EVENT);
    e.into_bytes()
}

/// The time an event was written, ns.
fn written_at(e: &[u8]) -> Option<u64> {
    std::str::from_utf8(e.get(22..42)?).ok()?.parse().ok()
}

pub(super) fn run(
    tokens: usize,
    streams: usize,
    strategy: Strategy,
    ctx: Ctx<'_>,
    case: &Case,
    limit: Duration,
) -> io::Result<Outcome> {
    let spec = Spec {
        case: case.clone(),
        role: Role::Tested,
        upstream: None,
        tls: None,
        pin: ctx.pin,
    };
    let server = End::start(spec, strategy, ctx)?;
    if let Some(cpu) = ctx.pin {
        sys::pin_to_cpu(cpu);
    }
    let cpu0 = sys::thread_cpu_us();
    let mut conn = connect(server.addr(), Strategy::Nagle)?;
    let mut report = ClientReport::default();
    let mut head = vec![0u8; HEAD.len()];
    let mut ev = [0u8; EVENT];
    let start = Instant::now();
    for _ in 0..streams.max(1) {
        conn.send(REQUEST, Burst::Last)?;
        conn.recv_exact(&mut head)?;
        for _ in 0..tokens {
            conn.recv_exact(&mut ev)?;
            let sent = written_at(&ev).ok_or_else(|| io::Error::other("bad event"))?;
            report
                .latencies_us
                .push(sys::monotonic_ns().saturating_sub(sent) / 1000);
            report.work += 1.0;
        }
        if start.elapsed() > limit {
            break;
        }
    }
    let took = start.elapsed();
    let client = side_cost(&conn, cpu0)?;
    drop(conn);
    Ok(((report, client, server.finish(1)?), took))
}

/// The server: for each request, the head, then `tokens` events `gap_us` apart, each
/// flushed.
pub(super) fn serve(
    tokens: usize,
    gap_us: u64,
    strategy: Strategy,
    tcp: TcpStream,
) -> io::Result<SideCost> {
    let cpu0 = sys::thread_cpu_us();
    let mut conn = Conn::new(tcp, strategy)?;
    let mut req = vec![0u8; REQUEST.len()];
    loop {
        match conn.recv_exact(&mut req) {
            Ok(()) => {}
            Err(e) if crate::harness::peer_ended(&e) => break,
            Err(e) => return Err(e),
        }
        conn.send(HEAD, Burst::Last)?;
        conn.flush()?;
        for i in 0..tokens {
            std::thread::sleep(Duration::from_micros(gap_us));
            conn.send(&event(i, sys::monotonic_ns()), Burst::Last)?;
            conn.flush()?;
        }
    }
    let _ = conn.finish();
    side_cost(&conn, cpu0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_carries_the_time_it_was_written() {
        let e = event(7, 123_456_789);
        assert_eq!(e.len(), EVENT);
        assert_eq!(written_at(&e), Some(123_456_789));
        assert!(e.starts_with(b"data: ") && e.ends_with(b"\n\n"));
    }
}
