//! The lab's scenarios, one per source case plus `custom`. Each states its traffic once
//! through [`Conn`]; the strategy decides how it reaches the socket.
//!
//! | scenario | source | exchange timed | throughput unit |
//! |---|---|---|---|
//! | `split-write` | 003 | one round trip of 1024 B each way, sent as K writes | round trips/s |
//! | `bgp-burst` | 000 | connect (SYN) to the first UPDATE leaving (OPENs both ways, KEEPALIVEs, then 255 routes and End-of-RIB; module `bgp`) | sessions/s |
//! | `framed-window` | 001 | one 4098 B message through a 4096 B window (module `sources`) | messages/s |
//! | `pipelined-read` | 002 | one 8 KiB read request, header and data as two writes (module `sources`) | MB/s |
//! | `http-keepalive` | 004 | one request, response as header then 100 B body (module `sources`) | requests/s |
//! | `multiplexed` | issue 42 | one 40 B request of W writer threads sharing a connection, D in flight, to its answer (module `multiplexed`) | requests/s |
//! | `http-wrk` (`--seeds`) | 004 | one request as Debian's wrk times it, against a server spending CPU per request (module `wrk`) | requests/s |
//! | `sse-stream`, `tls-first-request`, `nodelay-server`, `relay-hop` | issue 54 | the glue cases: one program under test among fixed peers (module `glue`) | see `glue` | |
//! | `custom` | — | one round of the user's patterns | rounds/s |

use std::io;

use std::time::{Duration, Instant};

use crate::harness::{session, ClientReport, RunResult, Session, Setup};
use crate::pattern::{Pattern, Step};
pub use crate::sources::Credit;
use crate::sources::{framed_window, http_session, pipelined_read};
use crate::strategy::{Burst, Conn, Strategy};

/// A scenario with its parameters: one table in the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "scenario", rename_all = "kebab-case")]
pub enum Case {
    /// 1024 bytes as `k` writes, answered the same way, `rounds` times.
    SplitWrite {
        /// Writes per 1024-byte message.
        k: usize,
        /// Round trips per run.
        rounds: usize,
    },
    /// `sessions` connections, each announcing `routes` routes.
    BgpBurst {
        /// Routes announced per session.
        routes: usize,
        /// Routes per UPDATE message: 1 sends one UPDATE per route; BIRD packs routes that
        /// share their attributes into one UPDATE (up to 4096 bytes), as source 000's 255
        /// routes were.
        per_update: usize,
        /// Sessions per run.
        sessions: usize,
    },
    /// `total` bytes as `message`-byte messages through a `window`-byte receiver window.
    FramedWindow {
        /// Bytes to send (the run may stop earlier at its time limit).
        total: usize,
        /// Message size.
        message: usize,
        /// Receiver window.
        window: usize,
        /// When the receiver grants credit back.
        credit: Credit,
    },
    /// Reads `total` bytes in `block`-byte requests with `depth` outstanding.
    PipelinedRead {
        /// Bytes to read (the run may stop earlier at its time limit).
        total: usize,
        /// Request size.
        block: usize,
        /// Requests in flight.
        depth: usize,
    },
    /// `conns` keep-alive connections for the run's time limit.
    HttpKeepalive {
        /// Concurrent connections.
        conns: usize,
    },
    /// Source 004's benchmark: Debian's `wrk` (one thread, its own `TCP_NODELAY`) keeps
    /// `conns` keep-alive connections busy against a server that spends `work_us` of CPU on
    /// each request before it writes the response as header then body; the strategy is the
    /// server's.
    HttpWrk {
        /// Concurrent connections.
        conns: usize,
        /// CPU time the server spends per request, µs.
        work_us: u64,
    },
    /// `writers` client threads share one connection, each request one 40-byte write under
    /// a lock, at most `depth` in flight, one reader thread receiving the answers (written
    /// one per request): the ACK-clocked connection of issue 42 (module `multiplexed`).
    Multiplexed {
        /// Writer threads.
        writers: usize,
        /// Requests in flight at most.
        depth: usize,
        /// Requests per run (the run may stop earlier at its time limit).
        requests: usize,
    },
    /// A server streams `streams` completions, each `tokens` server-sent events written
    /// `gap_us` apart (ai-dynamo/dynamo #14643; module `glue`).
    SseStream {
        /// Events per stream.
        tokens: usize,
        /// Time between two events, µs.
        gap_us: u64,
        /// Streams per run (the run may stop earlier at its time limit).
        streams: usize,
    },
    /// `connections` new TLS 1.3 connections, one request each (alphaonedev/ai-memory-mcp
    /// #1581).
    TlsFirstRequest {
        /// Connections per run (the run may stop earlier at its time limit).
        connections: usize,
    },
    /// A server that sets `TCP_NODELAY`, its client writing each request in two writes with
    /// Nagle on (zoxy-io/zoxy #96).
    NodelayServer {
        /// Requests per run (the run may stop earlier at its time limit).
        rounds: usize,
    },
    /// Requests through a relay whose upstream hop lacks `TCP_NODELAY`
    /// (kvcache-ai/AgentENV #109, istio #30333).
    RelayHop {
        /// Requests per run (the run may stop earlier at its time limit).
        rounds: usize,
    },
    /// The user's own patterns, `rounds` times.
    Custom {
        /// Client pattern.
        client: String,
        /// Server pattern.
        server: String,
        /// Rounds per run.
        rounds: usize,
    },
}

/// Scenario names accepted on the command line.
pub const SCENARIOS: [&str; 11] = [
    "split-write",
    "bgp-burst",
    "framed-window",
    "pipelined-read",
    "http-keepalive",
    "multiplexed",
    "sse-stream",
    "tls-first-request",
    "nodelay-server",
    "relay-hop",
    "custom",
];

impl Case {
    /// The scenario's name.
    pub fn scenario(&self) -> &'static str {
        match self {
            Case::SplitWrite { .. } => "split-write",
            Case::BgpBurst { .. } => "bgp-burst",
            Case::FramedWindow { .. } => "framed-window",
            Case::PipelinedRead { .. } => "pipelined-read",
            Case::HttpKeepalive { .. } => "http-keepalive",
            Case::HttpWrk { .. } => "http-wrk",
            Case::Multiplexed { .. } => "multiplexed",
            Case::SseStream { .. } => "sse-stream",
            Case::TlsFirstRequest { .. } => "tls-first-request",
            Case::NodelayServer { .. } => "nodelay-server",
            Case::RelayHop { .. } => "relay-hop",
            Case::Custom { .. } => "custom",
        }
    }

    /// A glue case: one program under test among fixed peers, on loopback, with a `run`
    /// row (module `glue`).
    pub fn is_glue(&self) -> bool {
        matches!(
            self,
            Case::SseStream { .. }
                | Case::TlsFirstRequest { .. }
                | Case::NodelayServer { .. }
                | Case::RelayHop { .. }
        )
    }

    /// Whether `strategy` has a row in this case: `run` only in the glue cases.
    pub fn has_row(&self, strategy: Strategy) -> bool {
        strategy != Strategy::Run || self.is_glue()
    }

    /// The parameters, for table titles.
    pub fn params(&self) -> String {
        match self {
            Case::SplitWrite { k, rounds } => format!("K={k} rounds={rounds}"),
            Case::BgpBurst {
                routes,
                per_update: 1,
                sessions,
            } => format!("routes={routes} sessions={sessions}"),
            Case::BgpBurst {
                routes,
                per_update,
                sessions,
            } => format!("routes={routes} per-update={per_update} sessions={sessions}"),
            Case::FramedWindow {
                message,
                window,
                credit,
                ..
            } => {
                let kind = if message > window {
                    "tiny-tail"
                } else {
                    "aligned"
                };
                let credit = match credit {
                    Credit::EachFrame => "each-frame",
                    Credit::HalfWindow => "half-window",
                };
                format!("message={message} window={window} ({kind}) credit={credit}")
            }
            Case::PipelinedRead { block, depth, .. } => format!("block={block} depth={depth}"),
            Case::HttpKeepalive { conns } => format!("C={conns}"),
            Case::HttpWrk { conns, work_us } => format!("C={conns} work={work_us}us"),
            Case::Multiplexed {
                writers,
                depth,
                requests,
            } => format!("W={writers} D={depth} requests={requests}"),
            Case::SseStream {
                tokens,
                gap_us,
                streams,
            } => format!("tokens={tokens} gap={gap_us}us streams={streams}"),
            Case::TlsFirstRequest { connections } => format!("connections={connections}"),
            Case::NodelayServer { rounds } | Case::RelayHop { rounds } => {
                format!("rounds={rounds}")
            }
            Case::Custom {
                client,
                server,
                rounds,
            } => format!("client={client} server={server} rounds={rounds}"),
        }
    }

    /// The unit of the throughput column.
    pub fn unit(&self) -> &'static str {
        match self {
            Case::SplitWrite { .. } => "rt/s",
            Case::BgpBurst { .. } => "sess/s",
            Case::FramedWindow { .. } => "msg/s",
            Case::PipelinedRead { .. } => "MB/s",
            Case::HttpKeepalive { .. }
            | Case::HttpWrk { .. }
            | Case::Multiplexed { .. }
            | Case::NodelayServer { .. }
            | Case::RelayHop { .. } => "req/s",
            Case::SseStream { .. } => "tok/s",
            Case::TlsFirstRequest { .. } => "conn/s",
            Case::Custom { .. } => "rounds/s",
        }
    }

    /// Runs the case once with `strategy` in `setup`, stopping at `limit` where the scenario
    /// is open-ended.
    pub fn run(
        &self,
        strategy: Strategy,
        setup: Setup<'_>,
        limit: Duration,
    ) -> io::Result<RunResult> {
        let start = Instant::now();
        let mut result = RunResult::default();
        let mut exchanges_took = None;
        match self {
            Case::SplitWrite { k, rounds } => {
                let (c, s) = split_write_patterns(*k);
                let r = patterns(&c, &s, *rounds, strategy, setup, limit)?;
                result.absorb(r.0, r.1, r.2);
            }
            Case::Custom {
                client,
                server,
                rounds,
            } => {
                let c = Pattern::parse(client).map_err(io::Error::other)?;
                let s = Pattern::parse(server).map_err(io::Error::other)?;
                let r = patterns(&c, &s, *rounds, strategy, setup, limit)?;
                result.absorb(r.0, r.1, r.2);
            }
            Case::BgpBurst {
                routes,
                per_update,
                sessions,
            } => {
                for _ in 0..*sessions {
                    let r = crate::bgp::session(*routes, *per_update, strategy, setup)?;
                    result.absorb(r.0, r.1, r.2);
                    if start.elapsed() > limit {
                        break;
                    }
                }
            }
            Case::FramedWindow {
                total,
                message,
                window,
                credit,
            } => {
                let r = framed_window(*total, *message, *window, *credit, strategy, setup, limit)?;
                result.absorb(r.0, r.1, r.2);
            }
            Case::PipelinedRead {
                total,
                block,
                depth,
            } => {
                let r = pipelined_read(*total, *block, *depth, strategy, setup, limit)?;
                result.absorb(r.0, r.1, r.2);
            }
            Case::HttpKeepalive { conns } => {
                let runs: Vec<_> = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..*conns)
                        .map(|_| scope.spawn(move || http_session(strategy, setup, limit)))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("panic"))))
                        .collect()
                });
                for r in runs {
                    let r = r?;
                    result.absorb(r.0, r.1, r.2);
                }
            }
            Case::Multiplexed {
                writers,
                depth,
                requests,
            } => {
                let r =
                    crate::multiplexed::run(*writers, *depth, *requests, strategy, setup, limit)?;
                result.absorb(r.0, r.1, r.2);
            }
            Case::SseStream { .. }
            | Case::TlsFirstRequest { .. }
            | Case::NodelayServer { .. }
            | Case::RelayHop { .. } => {
                if setup.net.is_some() {
                    return Err(io::Error::other(
                        "the glue cases run on loopback only (their programs live beside the lab)",
                    ));
                }
                let (r, busy) = crate::glue::run(self, strategy, setup.pin, setup.exe, limit)?;
                result.absorb(r.0, r.1, r.2);
                // (Its exchanges' time: a `run` row's wall time also holds the start of a
                // process.)
                exchanges_took = Some(busy);
            }
            Case::HttpWrk { conns, work_us } => {
                let r = crate::wrk::run(
                    *conns,
                    Duration::from_micros(*work_us),
                    strategy,
                    setup,
                    limit,
                )?;
                result.absorb(r.0, r.1, r.2);
            }
        }
        result.elapsed = exchanges_took.unwrap_or_else(|| start.elapsed());
        Ok(result)
    }
}

/// 1024 bytes as K near-equal writes, answered the same way (source 003).
pub(crate) fn split_write_patterns(k: usize) -> (Pattern, Pattern) {
    let k = k.clamp(1, 1024);
    let pieces: Vec<Step> = (0..k)
        .map(|i| Step::Write(1024 / k + usize::from(i < 1024 % k)))
        .collect();
    let mut client = pieces.clone();
    client.push(Step::Read(1024));
    let mut server = vec![Step::Read(1024)];
    server.extend(pieces);
    (Pattern(client), Pattern(server))
}

fn play(conn: &mut Conn, pattern: &Pattern, buf: &mut [u8]) -> io::Result<()> {
    for (i, step) in pattern.0.iter().enumerate() {
        match *step {
            Step::Write(n) => {
                let burst = if pattern.ends_burst(i) {
                    Burst::Last
                } else {
                    Burst::More
                };
                conn.send(&buf[..n], burst)?;
            }
            Step::Read(n) => conn.recv_exact(&mut buf[..n])?,
        }
    }
    Ok(())
}

/// Runs two patterns against each other for `rounds` rounds (or until `limit`).
fn patterns(
    client: &Pattern,
    server: &Pattern,
    rounds: usize,
    strategy: Strategy,
    setup: Setup<'_>,
    limit: Duration,
) -> io::Result<Session> {
    crate::pattern::check_pair(client, server).map_err(io::Error::other)?;
    let largest = client
        .0
        .iter()
        .chain(server.0.iter())
        .map(|s| match s {
            Step::Write(n) | Step::Read(n) => *n,
        })
        .max()
        .unwrap_or(1);
    session(
        setup,
        strategy,
        |conn, _| {
            let mut buf = vec![b'c'; largest];
            let mut report = ClientReport::default();
            let start = Instant::now();
            for _ in 0..rounds {
                let t = Instant::now();
                play(conn, client, &mut buf)?;
                report.latencies_us.push(t.elapsed().as_micros() as u64);
                report.work += 1.0;
                if start.elapsed() > limit {
                    break;
                }
            }
            Ok(report)
        },
        |conn| {
            let mut buf = vec![b's'; largest];
            loop {
                play(conn, server, &mut buf)?;
            }
        },
    )
}
