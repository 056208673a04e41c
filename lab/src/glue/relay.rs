//! `relay-hop` (kvcache-ai/AgentENV #109, istio #30333): a client and a server that both set
//! `TCP_NODELAY` talk through a relay that copies each direction as it arrives (read, write,
//! flush, as `io::copy` does) and sets `TCP_NODELAY` only on its client's side. The client
//! writes each request as a header then a body: two segments, so the relay's upstream hop
//! gets two writes, and the second waits for the server's delayed ACK of the first. A row's
//! strategy is the relay's upstream socket's (`run`: the relay as shipped, under
//! `nagless run`); the server answers as a header then a body, which the relay's
//! `TCP_NODELAY` side passes on at once.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::end::{Ctx, End, Role, Spec};
use super::{connect, cost_of, sum, Outcome};
use crate::harness::{peer_ended, side_cost, ClientReport, SideCost, IO_TIMEOUT};
use crate::scenario::Case;
use crate::strategy::{Burst, Conn, Strategy};
use crate::sys;

const HEADER: &[u8] = b"POST /v1/sandbox/exec HTTP/1.1\r\nHost: sandbox\r\nContent-Type: application/json\r\nContent-Length: 48\r\n\r\n";
const BODY: [u8; 48] = [b'b'; 48];
/// How long after its header the client's body is written (made, as an HTTP client streams
/// a body it serializes after the header has gone); on one CPU the relay would otherwise
/// often read both at once.
const BODY_AFTER: Duration = Duration::from_micros(200);
const ANSWER_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 32\r\n\r\n";
const ANSWER_BODY: [u8; 32] = [b'a'; 32];

pub(super) fn run(
    rounds: usize,
    strategy: Strategy,
    ctx: Ctx<'_>,
    case: &Case,
    limit: Duration,
) -> io::Result<Outcome> {
    let spec = |role, upstream| Spec {
        case: case.clone(),
        role,
        upstream,
        tls: None,
        pin: ctx.pin,
    };
    let server = End::start(spec(Role::Upstream, None), Strategy::Nodelay, ctx)?;
    let relay = End::start(spec(Role::Tested, Some(server.addr())), strategy, ctx)?;
    if let Some(cpu) = ctx.pin {
        sys::pin_to_cpu(cpu);
    }
    let cpu0 = sys::thread_cpu_us();
    let mut conn = connect(relay.addr(), Strategy::Nodelay)?;
    let mut report = ClientReport::default();
    let mut answer = vec![0u8; ANSWER_HEAD.len() + ANSWER_BODY.len()];
    let start = Instant::now();
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        conn.send(HEADER, Burst::More)?;
        // The body follows once it is serialized: the relay reads the header alone.
        std::thread::sleep(BODY_AFTER);
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
    // The relay ends when the client has gone and its upstream has closed behind it.
    let relay_cost = relay.finish(1)?;
    let server_cost = server.finish(1)?;
    Ok(((report, client, sum(relay_cost, &server_cost)), took))
}

/// The upstream server (`TCP_NODELAY`): reads each request whole, answers as a header then a
/// body.
pub(super) fn serve_upstream(tcp: TcpStream) -> io::Result<SideCost> {
    let cpu0 = sys::thread_cpu_us();
    let mut conn = Conn::new(tcp, Strategy::Nodelay)?;
    let mut req = vec![0u8; HEADER.len() + BODY.len()];
    loop {
        match conn.recv_exact(&mut req) {
            Ok(()) => {}
            Err(e) if peer_ended(&e) => break,
            Err(e) => return Err(e),
        }
        conn.send(ANSWER_HEAD, Burst::More)?;
        conn.send(&ANSWER_BODY, Burst::Last)?;
    }
    side_cost(&conn, cpu0)
}

/// The relay: its client's side with `TCP_NODELAY`, its upstream side with `strategy`; each
/// direction copied in its own thread, chunk by chunk as it arrives. Ends when the client
/// closes (the upstream is then closed too).
pub(super) fn serve(up: SocketAddr, strategy: Strategy, down: TcpStream) -> io::Result<SideCost> {
    let cpu0 = sys::thread_cpu_us();
    down.set_nodelay(true)?;
    let upstream = TcpStream::connect(up)?;
    upstream.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut to_server = Conn::new(upstream.try_clone()?, strategy)?;
    let mut to_client = Conn::new(down.try_clone()?, Strategy::Nodelay)?;
    let (mut from_client, mut from_server) = (down, upstream);
    let back = std::thread::spawn(move || -> io::Result<u64> {
        let cpu0 = sys::thread_cpu_us();
        let n = copy(&mut from_server, &mut to_client);
        let _ = to_client.finish();
        let _ = to_client.tcp().shutdown(std::net::Shutdown::Write);
        n?;
        Ok(sys::thread_cpu_us().saturating_sub(cpu0))
    });
    let forward = copy(&mut from_client, &mut to_server);
    let _ = to_server.finish();
    // The client is gone: closing upstream ends the server, whose close ends `back`.
    let _ = to_server.tcp().shutdown(std::net::Shutdown::Write);
    let back_cpu = back
        .join()
        .map_err(|_| io::Error::other("relay thread panicked"))?;
    forward?;
    let back_cpu = back_cpu?;
    let up_cost = side_cost(&to_server, cpu0)?;
    let mut down_cost = cost_of(&from_client, 0, sys::thread_cpu_us())?;
    down_cost.cpu_us = back_cpu;
    Ok(sum(up_cost, &down_cost))
}

/// Copies `from` into `to` until `from` ends, each chunk sent and flushed as it arrives.
fn copy(from: &mut TcpStream, to: &mut Conn) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match io::Read::read(from, &mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if peer_ended(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        to.send(&buf[..n], Burst::Last)?;
        to.flush()?;
    }
}
