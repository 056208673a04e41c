//! The glue cases (issue 54): stalls users met in 2025-2026 between programs, where one
//! program is the end under test (a server, or a relay) and its peers are fixed as the
//! reports describe them. A row's strategy is that program's; `run` is the program as
//! shipped, started under `nagless run` in a process of its own ([`end`]).
//!
//! | scenario | source | end under test | exchange timed | unit |
//! |---|---|---|---|---|
//! | `sse-stream` | ai-dynamo/dynamo #14643 | a server streaming one SSE event per token (module `sse`) | one token, written to read | tok/s |
//! | `tls-first-request` | alphaonedev/ai-memory-mcp #1581 | a rustls TLS 1.3 server sending its 2 session tickets (module `tls`) | a new connection to its first answer | conn/s |
//! | `nodelay-server` | zoxy-io/zoxy #96 | a server that sets `TCP_NODELAY`; its client writes each request in two writes, Nagle on (module `split`) | request to answer | req/s |
//! | `relay-hop` | kvcache-ai/AgentENV #109, istio #30333 | a relay whose upstream hop lacks `TCP_NODELAY` (module `relay`) | request to answer through the relay | req/s |
//!
//! They run on loopback only: `run`'s process and the relay's third party live beside the
//! lab, not in an emulated path's namespaces.

pub(crate) mod end;
mod relay;
mod split;
mod sse;
mod tls;

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::harness::{ClientReport, SideCost, IO_TIMEOUT};
use crate::scenario::Case;
use crate::strategy::{Conn, Strategy};
use crate::sys;

pub use end::serve_end;

/// One run's result: what the client saw, each side's costs, and how long the exchanges
/// took (from the first connect to the last answer).
type Outcome = ((ClientReport, SideCost, SideCost), Duration);

/// The end under test as its program ships: the strategy `run` wraps, and the options
/// `nagless run` is given.
pub(crate) fn as_shipped(case: &Case) -> (Strategy, &'static [&'static str]) {
    match case {
        // The proxy set TCP_NODELAY itself; the stall is its client's, held for this
        // server's delayed ACK: the receiver's fix.
        Case::NodelayServer { .. } => (Strategy::Nodelay, &["--ack-delay-max", "0"]),
        _ => (Strategy::Nagle, &[]),
    }
}

/// Runs a glue case once with `strategy` on its end under test; `exe` is the `nagless`
/// executable (`run` only).
pub(crate) fn run(
    case: &Case,
    strategy: Strategy,
    pin: Option<usize>,
    exe: Option<&std::path::Path>,
    limit: Duration,
) -> io::Result<Outcome> {
    let ctx = end::Ctx { pin, exe };
    match case {
        Case::SseStream {
            tokens, streams, ..
        } => sse::run(*tokens, *streams, strategy, ctx, case, limit),
        Case::TlsFirstRequest { connections } => tls::run(*connections, strategy, ctx, case, limit),
        Case::NodelayServer { rounds } => split::run(*rounds, strategy, ctx, case, limit),
        Case::RelayHop { rounds } => relay::run(*rounds, strategy, ctx, case, limit),
        _ => Err(io::Error::other("not a glue case")),
    }
}

/// Serves one accepted connection as `spec`'s end with `strategy`; what its sockets cost.
pub(crate) fn serve(spec: &end::Spec, strategy: Strategy, tcp: TcpStream) -> io::Result<SideCost> {
    match (&spec.case, spec.role) {
        (Case::SseStream { tokens, gap_us, .. }, end::Role::Tested) => {
            sse::serve(*tokens, *gap_us, strategy, tcp)
        }
        (Case::TlsFirstRequest { .. }, end::Role::Tested) => {
            let id = spec
                .tls
                .as_ref()
                .ok_or_else(|| io::Error::other("no TLS identity"))?;
            tls::serve(id, strategy, tcp)
        }
        (Case::NodelayServer { .. }, end::Role::Tested) => split::serve(strategy, tcp),
        (Case::RelayHop { .. }, end::Role::Tested) => {
            let up = spec
                .upstream
                .ok_or_else(|| io::Error::other("a relay needs its upstream"))?;
            relay::serve(up, strategy, tcp)
        }
        (Case::RelayHop { .. }, end::Role::Upstream) => relay::serve_upstream(tcp),
        _ => Err(io::Error::other("no such end")),
    }
}

/// A client's connection, with the IO timeout every lab socket has.
fn connect(addr: SocketAddr, strategy: Strategy) -> io::Result<Conn> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(IO_TIMEOUT))?;
    Conn::new(tcp, strategy)
}

/// What a socket cost, from `TCP_INFO`, `syscalls` and the thread's CPU time since `cpu0`.
fn cost_of(tcp: &TcpStream, syscalls: u64, cpu0: u64) -> io::Result<SideCost> {
    let info = nagless::TcpInfo::of(tcp)?;
    Ok(SideCost {
        data_segs: info.data_segs_out.unwrap_or(0) as u64,
        segs: info.segs_out.unwrap_or(0) as u64,
        bytes: info.bytes_sent.unwrap_or(0),
        syscalls,
        cpu_us: sys::thread_cpu_us().saturating_sub(cpu0),
    })
}

/// The sum of two costs.
fn sum(mut a: SideCost, b: &SideCost) -> SideCost {
    a.add(b);
    a
}
