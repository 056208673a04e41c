//! The end under test of a glue case, serving connections: in a thread of the lab, or (for
//! `run`) as a process of its own started by `nagless run -- nagless lab-end SPEC`, so that
//! the shim is measured as users run it, around a program that knows nothing of it.
//!
//! Either way the end listens on 127.0.0.1, serves each connection it accepts to its end,
//! and reports what each cost. A child speaks on its standard output, one line each:
//! `port N` once it listens, then `cost {json}` per connection served; it exits when its
//! standard input closes.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;

use crate::harness::{SideCost, IO_TIMEOUT};
use crate::scenario::Case;
use crate::strategy::Strategy;
use crate::sys;

/// Which of a case's programs an end is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Role {
    /// The program under test (the row's strategy).
    Tested,
    /// The server behind a relay (fixed: `TCP_NODELAY`).
    Upstream,
}

/// A TLS server's certificate and key, DER.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Identity {
    pub(crate) cert: Vec<u8>,
    pub(crate) key: Vec<u8>,
}

/// What an end needs to serve: the case, its role, and what the case gives it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Spec {
    pub(crate) case: Case,
    pub(crate) role: Role,
    /// A relay's upstream server.
    pub(crate) upstream: Option<SocketAddr>,
    /// A TLS server's identity.
    pub(crate) tls: Option<Identity>,
    /// The CPU to pin the serving thread to.
    pub(crate) pin: Option<usize>,
}

/// How a run starts its ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub(crate) pin: Option<usize>,
    /// The `nagless` executable, for `run`.
    pub(crate) exe: Option<&'a std::path::Path>,
}

/// A serving end.
pub(crate) enum End {
    Thread {
        addr: SocketAddr,
        costs: mpsc::Receiver<io::Result<SideCost>>,
    },
    Child {
        addr: SocketAddr,
        child: Child,
        stdin: Option<ChildStdin>,
        stdout: BufReader<ChildStdout>,
    },
}

impl End {
    /// Starts `spec`'s end with `strategy`: `run` as a child under `nagless run`, any other
    /// in a thread.
    pub(crate) fn start(spec: Spec, strategy: Strategy, ctx: Ctx<'_>) -> io::Result<End> {
        if strategy == Strategy::Run {
            return Self::child(&spec, ctx);
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let (tx, costs) = mpsc::channel();
        std::thread::spawn(move || {
            if let Some(cpu) = spec.pin {
                sys::pin_to_cpu(cpu);
            }
            // Ends when the run drops its receiver (a send fails) after its last connection.
            while let Ok((tcp, _)) = listener.accept() {
                let cost = tcp
                    .set_read_timeout(Some(IO_TIMEOUT))
                    .and_then(|()| super::serve(&spec, strategy, tcp));
                if tx.send(cost).is_err() {
                    break;
                }
            }
        });
        Ok(End::Thread { addr, costs })
    }

    fn child(spec: &Spec, ctx: Ctx<'_>) -> io::Result<End> {
        let exe = ctx.exe.ok_or_else(|| {
            io::Error::other("`run` needs the nagless executable (run it from `nagless lab`)")
        })?;
        let (_, options) = super::as_shipped(&spec.case);
        let json = serde_json::to_string(spec).map_err(io::Error::other)?;
        let mut child = Command::new(exe)
            .arg("run")
            .args(options)
            .arg("--")
            .arg(exe)
            .arg("lab-end")
            .arg(json)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // (`nagless run` says what it does; shown only when the end fails.)
            .stderr(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let port = match read_line(&mut stdout)?.strip_prefix("port ") {
            Some(p) => p.trim().parse::<u16>().map_err(io::Error::other)?,
            None => {
                return Err(io::Error::other(format!(
                    "`nagless run` did not start the end: {}",
                    stopped(child)
                )))
            }
        };
        Ok(End::Child {
            addr: (Ipv4Addr::LOCALHOST, port).into(),
            child,
            stdin,
            stdout,
        })
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        match self {
            End::Thread { addr, .. } | End::Child { addr, .. } => *addr,
        }
    }

    /// Waits for the costs of the `connections` it was given (each closed by its client),
    /// and stops it: their sum.
    pub(crate) fn finish(self, connections: usize) -> io::Result<SideCost> {
        let mut total = SideCost::default();
        match self {
            End::Thread { costs, addr } => {
                let mut result = Ok(());
                for _ in 0..connections {
                    match costs.recv_timeout(IO_TIMEOUT) {
                        Ok(Ok(cost)) => total.add(&cost),
                        Ok(Err(e)) => result = Err(e),
                        Err(_) => result = Err(io::Error::other("the end reported nothing")),
                    }
                    if result.is_err() {
                        break;
                    }
                }
                // Wakes the thread from its accept: it serves an empty connection, finds
                // nobody to report to, and ends.
                drop(costs);
                let _ = std::net::TcpStream::connect(addr);
                result?;
            }
            End::Child {
                mut child,
                stdin,
                mut stdout,
                ..
            } => {
                let mut result = Ok(());
                for _ in 0..connections {
                    let line = match read_line(&mut stdout) {
                        Ok(line) => line,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    };
                    match line.strip_prefix("cost ") {
                        Some(json) => match serde_json::from_str::<SideCost>(json) {
                            Ok(c) => total.add(&c),
                            Err(e) => result = Err(io::Error::other(e)),
                        },
                        None => result = Err(io::Error::other(format!("the end said: {line}"))),
                    }
                    if result.is_err() {
                        break;
                    }
                }
                drop(stdin);
                if result.is_err() {
                    let _ = child.kill();
                }
                let status = child.wait()?;
                result?;
                if !status.success() {
                    return Err(io::Error::other(format!(
                        "the end under `run` ended {status}"
                    )));
                }
            }
        }
        Ok(total)
    }
}

/// Stops a child that failed; what it said on its standard error.
fn stopped(mut child: Child) -> String {
    let _ = child.kill();
    let _ = child.wait();
    let mut said = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = io::Read::read_to_string(&mut e, &mut said);
    }
    said.trim().replace('\n', "; ")
}

/// One line of a child's output; an error at its end.
fn read_line(r: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::other("the end under `run` stopped"));
    }
    Ok(line.trim_end().to_string())
}

/// `nagless lab-end SPEC`: serves a glue case's end as its program ships (see the module
/// doc), until standard input closes.
pub fn serve_end(spec: &str) -> io::Result<()> {
    let spec: Spec = serde_json::from_str(spec).map_err(io::Error::other)?;
    let (strategy, _) = super::as_shipped(&spec.case);
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    println!("port {}", listener.local_addr()?.port());
    io::stdout().flush()?;
    std::thread::spawn(move || {
        if let Some(cpu) = spec.pin {
            sys::pin_to_cpu(cpu);
        }
        while let Ok((tcp, _)) = listener.accept() {
            let line = match tcp
                .set_read_timeout(Some(IO_TIMEOUT))
                .and_then(|()| super::serve(&spec, strategy, tcp))
                .and_then(|c| serde_json::to_string(&c).map_err(io::Error::other))
            {
                Ok(json) => format!("cost {json}"),
                Err(e) => format!("error {e}"),
            };
            let mut out = io::stdout().lock();
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                break;
            }
        }
    });
    // Standard input closing is the run's end (its last connection was reported).
    let mut sink = Vec::new();
    let _ = io::Read::read_to_end(&mut io::stdin(), &mut sink);
    Ok(())
}
