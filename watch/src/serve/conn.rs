//! A connection bounded by its deadline: plain or TLS, each read and write of it given only
//! the time left, and its request's head read within it.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rustls::{ServerConnection, StreamOwned};

use super::MAX_HEAD;

/// A socket each of whose reads and writes is given only the time left before `deadline`,
/// and fails with `TimedOut` once it has passed: TLS's handshake and record reads, which make
/// several reads of their own, are bounded as a whole.
pub(super) struct Deadlined {
    pub(super) sock: TcpStream,
    pub(super) deadline: Instant,
}

impl Deadlined {
    fn left(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(io::ErrorKind::TimedOut.into())
        } else {
            Ok(left)
        }
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.set_read_timeout(Some(self.left()?))?;
        self.sock.read(buf)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.set_write_timeout(Some(self.left()?))?;
        self.sock.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// A connection: plain, or TLS over the socket.
pub(super) trait Conn: Read + Write {
    fn deadlined(&mut self) -> &mut Deadlined;
}

impl Conn for Deadlined {
    fn deadlined(&mut self) -> &mut Deadlined {
        self
    }
}

impl Conn for StreamOwned<ServerConnection, Deadlined> {
    fn deadlined(&mut self) -> &mut Deadlined {
        &mut self.sock
    }
}

/// Reads the request's head (up to its blank line, at most [`MAX_HEAD`]).
pub(super) fn read_head(s: &mut impl Conn) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(head)
}
