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
use std::process::{Child, ChildStdin, Command, Stdio};
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

/// A serving end. Dropped without [`finish`](End::finish) (a run that failed early), it
/// stops: its thread leaves its `accept`, its child is killed and reaped.
pub(crate) struct End {
    addr: SocketAddr,
    kind: Kind,
}

enum Kind {
    Thread {
        costs: Option<mpsc::Receiver<io::Result<SideCost>>>,
    },
    Child {
        child: Child,
        stdin: Option<ChildStdin>,
        /// The child's lines, read by a thread of their own (so that every wait is bounded).
        lines: mpsc::Receiver<String>,
        /// Its standard error, in a file (a pipe nobody reads could fill and stop it).
        stderr: std::path::PathBuf,
    },
    Done,
}

/// How long a child may take to start and to report a connection.
const CHILD_WAIT: std::time::Duration = IO_TIMEOUT;

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
            // Ends when the run drops its receiver (a send fails): the run then connects once
            // more to wake it from `accept`.
            while let Ok((tcp, _)) = listener.accept() {
                let cost = tcp
                    .set_read_timeout(Some(IO_TIMEOUT))
                    .and_then(|()| super::serve(&spec, strategy, tcp));
                if tx.send(cost).is_err() {
                    break;
                }
            }
        });
        Ok(End {
            addr,
            kind: Kind::Thread { costs: Some(costs) },
        })
    }

    fn child(spec: &Spec, ctx: Ctx<'_>) -> io::Result<End> {
        static CHILDREN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let exe = ctx.exe.ok_or_else(|| {
            io::Error::other("`run` needs the nagless executable (run it from `nagless lab`)")
        })?;
        let (_, options) = super::as_shipped(&spec.case);
        let json = serde_json::to_string(spec).map_err(io::Error::other)?;
        let n = CHILDREN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr =
            std::env::temp_dir().join(format!("nagless-lab-end-{}-{n}.err", std::process::id()));
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
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(l) = line else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut end = End {
            addr: (Ipv4Addr::LOCALHOST, 0).into(),
            kind: Kind::Child {
                child,
                stdin,
                lines,
                stderr,
            },
        };
        let line = end.next_line()?;
        match line.strip_prefix("port ").map(|p| p.trim().parse::<u16>()) {
            Some(Ok(port)) => {
                end.addr = (Ipv4Addr::LOCALHOST, port).into();
                Ok(end)
            }
            _ => Err(end.failed(&format!("`nagless run` did not start the end: {line}"))),
        }
    }

    /// The child's next line, within [`CHILD_WAIT`].
    fn next_line(&mut self) -> io::Result<String> {
        let Kind::Child { lines, .. } = &self.kind else {
            return Err(io::Error::other("not a child"));
        };
        match lines.recv_timeout(CHILD_WAIT) {
            Ok(l) => Ok(l),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                Err(self.failed("the end under `run` said nothing in time"))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(self.failed("the end under `run` stopped"))
            }
        }
    }

    /// Stops a child that failed: the error, with what it said on its standard error.
    fn failed(&mut self, what: &str) -> io::Error {
        let said = match &self.kind {
            Kind::Child { stderr, .. } => std::fs::read_to_string(stderr).unwrap_or_default(),
            _ => String::new(),
        };
        self.stop();
        let said = said.trim().replace('\n', "; ");
        io::Error::other(if said.is_empty() {
            what.to_string()
        } else {
            format!("{what}: {said}")
        })
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for the costs of the `connections` it was given (each closed by its client),
    /// and stops it: their sum.
    pub(crate) fn finish(mut self, connections: usize) -> io::Result<SideCost> {
        let mut total = SideCost::default();
        for _ in 0..connections {
            let cost = match &self.kind {
                Kind::Thread { costs: Some(c) } => match c.recv_timeout(IO_TIMEOUT) {
                    Ok(cost) => cost,
                    Err(_) => Err(io::Error::other("the end reported nothing in time")),
                },
                Kind::Child { .. } => {
                    let line = self.next_line()?;
                    match line.strip_prefix("cost ") {
                        Some(json) => serde_json::from_str::<SideCost>(json).map_err(|e| {
                            self.failed(&format!("the end's report is not one ({e})"))
                        }),
                        None => Err(self.failed(&format!("the end said: {line}"))),
                    }
                }
                _ => Err(io::Error::other("the end has stopped")),
            };
            match cost {
                Ok(c) => total.add(&c),
                Err(e) => {
                    self.stop();
                    return Err(e);
                }
            }
        }
        if let Kind::Child { child, stdin, .. } = &mut self.kind {
            // Its standard input closing ends it (within the wait, or it is killed).
            drop(stdin.take());
            let deadline = std::time::Instant::now() + CHILD_WAIT;
            let status = loop {
                match child.try_wait()? {
                    Some(status) => break Some(status),
                    None if std::time::Instant::now() >= deadline => break None,
                    None => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            };
            match status {
                Some(s) if s.success() => {}
                Some(s) => return Err(self.failed(&format!("the end under `run` ended {s}"))),
                None => return Err(self.failed("the end under `run` did not end")),
            }
        }
        self.stop();
        Ok(total)
    }

    /// Stops it (once): wakes its thread from `accept`, or kills and reaps its child.
    fn stop(&mut self) {
        match std::mem::replace(&mut self.kind, Kind::Done) {
            Kind::Thread { costs } => {
                drop(costs);
                let _ = std::net::TcpStream::connect(self.addr);
            }
            Kind::Child {
                mut child, stderr, ..
            } => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_file(stderr);
            }
            Kind::Done => {}
        }
    }
}

impl Drop for End {
    fn drop(&mut self) {
        self.stop();
    }
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
