//! Strategies: how a scenario's writes and reads reach the socket.
//!
//! A scenario states its traffic once, through [`Conn::send`] (with "more of this burst
//! follows" or "last of the burst") and [`Conn::recv_exact`]; the [`Strategy`] alone decides
//! which socket options and syscalls carry it. Both ends of a connection use the same one.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::str::FromStr;

use nagless::{NaglessStream, TcpInfo};
use socket2::SockRef;

use crate::sys;

/// One way of putting a scenario's bytes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Kernel default: Nagle on, delayed ACK on.
    Nagle,
    /// `TCP_NODELAY`: every write leaves at once.
    Nodelay,
    /// `TCP_CORK` set before a burst, cleared after its last write (Nagle stays on).
    Cork,
    /// `TCP_NODELAY` plus `MSG_MORE` on all but the last write of a burst.
    Msgmore,
    /// Kernel default sender; the receiver re-arms `TCP_QUICKACK` after every read.
    Quickack,
    /// The nagless library with its default policy, used as a plain `Read + Write`.
    Nagless,
    /// The program as shipped (kernel defaults, and the options it sets itself), started
    /// under `nagless run` in a process of its own: only the glue cases, whose end under
    /// test is a program (module `glue`), and only from the `nagless` command.
    Run,
}

impl Strategy {
    /// Every strategy, in table order.
    pub const ALL: [Strategy; 7] = [
        Strategy::Nagle,
        Strategy::Nodelay,
        Strategy::Cork,
        Strategy::Msgmore,
        Strategy::Quickack,
        Strategy::Nagless,
        Strategy::Run,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Nagle => "nagle",
            Strategy::Nodelay => "nodelay",
            Strategy::Cork => "cork",
            Strategy::Msgmore => "msgmore",
            Strategy::Quickack => "quickack",
            Strategy::Nagless => "nagless",
            Strategy::Run => "run",
        }
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Strategy::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Strategy::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown strategy '{s}' (expected one of: {})",
                    names.join(", ")
                )
            })
    }
}

/// Whether a write ends its burst (after it the program waits or goes idle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Burst {
    /// More writes of this burst follow.
    More,
    /// This is the burst's last write.
    Last,
}

enum Io {
    Plain(TcpStream),
    Nagless(Box<NaglessStream<TcpStream>>),
}

/// One end of a lab connection, driven by a [`Strategy`].
pub(crate) struct Conn {
    strategy: Strategy,
    io: Io,
    corked: bool,
    syscalls: u64,
}

impl Conn {
    /// Applies `strategy`'s socket options to a connected stream.
    pub(crate) fn new(tcp: TcpStream, strategy: Strategy) -> io::Result<Conn> {
        let io = match strategy {
            // (`run` reaches a socket as the kernel default; the shim acts beneath.)
            Strategy::Nagle | Strategy::Cork | Strategy::Quickack | Strategy::Run => Io::Plain(tcp),
            Strategy::Nodelay | Strategy::Msgmore => {
                tcp.set_nodelay(true)?;
                Io::Plain(tcp)
            }
            Strategy::Nagless => Io::Nagless(Box::new(NaglessStream::new(tcp)?)),
        };
        Ok(Conn {
            strategy,
            io,
            corked: false,
            syscalls: 0,
        })
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        match &self.io {
            Io::Plain(s) => s,
            Io::Nagless(s) => s.get_ref(),
        }
    }

    /// Sends `buf` as one application write.
    pub(crate) fn send(&mut self, buf: &[u8], burst: Burst) -> io::Result<()> {
        let last = burst == Burst::Last;
        match (&mut self.io, self.strategy) {
            (Io::Nagless(s), _) => {
                s.write_all(buf)?;
                Ok(())
            }
            (Io::Plain(s), Strategy::Cork) => {
                if !self.corked {
                    SockRef::from(&*s).set_tcp_cork(true)?;
                    self.syscalls += 1;
                    self.corked = true;
                }
                self.syscalls += write_all_counted(s, buf, false)?;
                if last {
                    SockRef::from(&*s).set_tcp_cork(false)?;
                    self.syscalls += 1;
                    self.corked = false;
                }
                Ok(())
            }
            (Io::Plain(s), Strategy::Msgmore) => {
                self.syscalls += write_all_counted(s, buf, !last)?;
                Ok(())
            }
            (Io::Plain(s), _) => {
                self.syscalls += write_all_counted(s, buf, false)?;
                Ok(())
            }
        }
    }

    /// Reads exactly `buf.len()` bytes (the nagless stream flushes first).
    pub(crate) fn recv_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut got = 0;
        while got < buf.len() {
            let n = match &mut self.io {
                Io::Plain(s) => s.read(&mut buf[got..]),
                Io::Nagless(s) => s.read(&mut buf[got..]),
            };
            let n = match n {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.syscalls += 1;
            got += n;
            if self.strategy == Strategy::Quickack {
                SockRef::from(self.tcp()).set_tcp_quickack(true)?;
                self.syscalls += 1;
            }
        }
        Ok(())
    }

    /// Reads what has arrived (waiting for at least one byte); 0 at the end of the stream.
    pub(crate) fn recv_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = match &mut self.io {
                Io::Plain(s) => s.read(buf),
                Io::Nagless(s) => s.read(buf),
            };
            match n {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
                Ok(n) => {
                    self.syscalls += 1;
                    if n > 0 && self.strategy == Strategy::Quickack {
                        SockRef::from(self.tcp()).set_tcp_quickack(true)?;
                        self.syscalls += 1;
                    }
                    return Ok(n);
                }
            }
        }
    }

    /// Hands the library's queue to the socket (a relay's copy loop flushes after each
    /// chunk, as `io::copy` does); the other strategies hold nothing.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if let Io::Nagless(s) = &mut self.io {
            s.flush()?;
        }
        Ok(())
    }

    /// Bytes that can be read without waiting.
    pub(crate) fn available(&self) -> usize {
        sys::readable_bytes(self.tcp().as_fd()).unwrap_or(0)
    }

    /// Flushes anything still held (the end of a scenario).
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        if let Io::Nagless(s) = &mut self.io {
            s.flush()?;
        }
        if self.corked {
            SockRef::from(self.tcp()).set_tcp_cork(false)?;
            self.corked = false;
        }
        Ok(())
    }

    /// Syscalls made so far (reads, writes, socket options; nagless: its own send count).
    pub(crate) fn syscalls(&self) -> u64 {
        match &self.io {
            Io::Nagless(s) => self.syscalls + s.stats().syscalls,
            Io::Plain(_) => self.syscalls,
        }
    }

    /// A `TCP_INFO` snapshot.
    pub(crate) fn tcp_info(&self) -> io::Result<TcpInfo> {
        TcpInfo::of(self.tcp())
    }
}

/// Writes all of `buf` with `send` (`MSG_MORE` if `more`); returns the syscalls made.
fn write_all_counted(s: &TcpStream, mut buf: &[u8], more: bool) -> io::Result<u64> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    let mut calls = 0;
    while !buf.is_empty() {
        let n = match SockRef::from(s).send_with_flags(buf, flags) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => r?,
        };
        calls += 1;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(calls)
}
