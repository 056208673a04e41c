//! `nodelay-server` (zoxy-io/zoxy #96): a proxy set `TCP_NODELAY` on its sockets, yet its
//! clients still waited 40 ms: each client (kernel default, Nagle on) writes a request as a
//! header then a body, and the body waits for the proxy's ACK of the header, which the
//! proxy's kernel delays. The stall is the client's, the fix the receiver's: an ACK sent at
//! once (`TCP_QUICKACK` after each read, `nagless run --ack-delay-max 0`), since the
//! clients are not the proxy's to change. The server answers each request in one write.

use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::end::{Ctx, End, Role, Spec};
use super::{connect, Outcome};
use crate::harness::{side_cost, ClientReport, SideCost};
use crate::scenario::Case;
use crate::strategy::{Burst, Conn, Strategy};
use crate::sys;

const HEADER: &[u8] = b"POST /api/v1/items HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n";
const BODY: [u8; 64] = [b'b'; 64];
const ANSWER: &[u8] =
    b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok";

pub(super) fn run(
    rounds: usize,
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
    let mut answer = vec![0u8; ANSWER.len()];
    let start = Instant::now();
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        conn.send(HEADER, Burst::More)?;
        conn.send(&BODY, Burst::Last)?;
        conn.recv_exact(&mut answer)?;
        report.latencies_us.push(t.elapsed().as_micros() as u64);
        report.work += 1.0;
        if start.elapsed() > limit {
            break;
        }
    }
    let took = start.elapsed();
    let client = side_cost(&conn, cpu0)?;
    drop(conn);
    Ok(((report, client, server.finish(1)?), took))
}

/// The server: reads each request whole, answers it in one write.
pub(super) fn serve(strategy: Strategy, tcp: TcpStream) -> io::Result<SideCost> {
    let cpu0 = sys::thread_cpu_us();
    let mut conn = Conn::new(tcp, strategy)?;
    let mut req = vec![0u8; HEADER.len() + BODY.len()];
    loop {
        match conn.recv_exact(&mut req) {
            Ok(()) => {}
            Err(e) if crate::harness::peer_ended(&e) => break,
            Err(e) => return Err(e),
        }
        conn.send(ANSWER, Burst::Last)?;
    }
    let _ = conn.finish();
    side_cost(&conn, cpu0)
}
