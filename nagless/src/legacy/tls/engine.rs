//! The engine under both TLS streams: a rustls connection fed sealed plaintext batches and
//! drained into the socket, TLS's own messages first ([`Engine`]); the connection types it
//! takes ([`TlsConnection`]).

use std::io::{self, IoSlice, Read, Write};
use std::time::Instant;

use super::{WireStats, MAX_RECORD_PLAINTEXT};
use crate::coalescer::{Coalescer, Drive, MAX_IOV};
use crate::policy::FlushPolicy;

/// What the std layer and the tokio layer share: the rustls connection, the plaintext queue
/// and the rules that join them. It does no I/O of its own; every call is given the transport.
pub(crate) struct Engine<C> {
    pub(crate) conn: C,
    pub(crate) core: Coalescer,
    pub(crate) wire: WireStats,
    /// close_notify was queued: no more plaintext is accepted.
    pub(crate) closed: bool,
}

/// The outcome of reading from the transport.
pub(crate) enum Input {
    /// Bytes were read and processed.
    Read,
    /// The peer closed the TCP stream.
    Eof,
}

pub use crate::tls::TlsConnection;

pub(crate) fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl<C: TlsConnection> Engine<C> {
    pub(crate) fn new(conn: C, policy: FlushPolicy) -> Self {
        let mut core = Coalescer::new(policy);
        // Threshold flushes then seal whole records only.
        core.set_segment_size(MAX_RECORD_PLAINTEXT);
        Engine {
            conn,
            core,
            wire: WireStats::default(),
            closed: false,
        }
    }

    /// Fails once close_notify was queued.
    pub(crate) fn check_open(&self) -> io::Result<()> {
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "nagless tls: write after close_notify",
            ));
        }
        Ok(())
    }

    /// Hands the ciphertext rustls holds to `io`: one gathered send per `write_tls` call (up
    /// to 64 records). `Blocked` when `io` would block; the rest stays in rustls.
    pub(crate) fn send_tls(&mut self, io: &mut dyn Write) -> io::Result<Drive> {
        while self.conn.wants_write() {
            self.wire.sends += 1;
            match self.conn.write_tls(io) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "socket accepted no bytes",
                    ))
                }
                Ok(n) => self.wire.bytes += n as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wire.would_block += 1;
                    return Ok(Drive::Blocked);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Drive::Idle)
    }

    /// Seals what the policy made due, as few `write_vectored` calls into rustls as its
    /// buffer allows, and sends the records. With `handshake`, a handshake in progress is
    /// completed first (reading from `io`); without, due plaintext waits for it.
    pub(crate) fn pump<T: Read + Write>(
        &mut self,
        io: &mut T,
        now: Instant,
        handshake: bool,
    ) -> io::Result<Drive> {
        loop {
            if self.conn.is_handshaking() {
                if self.send_tls(io)? == Drive::Blocked {
                    return Ok(Drive::Blocked);
                }
                let due = self.core.poll_transmit(now).is_some();
                if !(handshake && due && self.conn.wants_read()) {
                    return Ok(Drive::Idle);
                }
                match self.read_input(io)? {
                    Input::Read => continue,
                    Input::Eof => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "peer closed during the TLS handshake",
                        ))
                    }
                }
            }
            let Some(tx) = self.core.poll_transmit(now) else {
                return self.send_tls(io);
            };
            let took = {
                let mut slices = [IoSlice::new(&[]); MAX_IOV];
                let n = self.core.io_slices(&mut slices, tx.len);
                self.conn.write_plain(&slices[..n])?
            };
            if took > 0 {
                self.wire.seals += 1;
                self.core.on_sent(took);
                continue;
            }
            // rustls's buffer is full: send it, then seal more.
            if !self.conn.wants_write() {
                return Err(io::Error::other(
                    "nagless tls: rustls took no plaintext with an empty buffer",
                ));
            }
            if self.send_tls(io)? == Drive::Blocked {
                self.core.on_would_block();
                return Ok(Drive::Blocked);
            }
        }
    }

    /// Reads one batch of ciphertext from `io`, processes it and sends at once whatever rustls
    /// must answer (handshake, alerts, key update). `WouldBlock` from `io` is returned as is.
    pub(crate) fn read_input<T: Read + Write>(&mut self, io: &mut T) -> io::Result<Input> {
        self.wire.reads += 1;
        let n = loop {
            match self.conn.read_tls(io) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        let processed = self.conn.process_new_packets();
        // Answers (or the alert for an error) leave now; a full socket keeps them queued in
        // rustls for the next send.
        // A send error here does not hide the input: rustls keeps the bytes and the next
        // send meets the error again.
        let _ = self.send_tls(io);
        processed.map_err(tls_error)?;
        Ok(if n == 0 { Input::Eof } else { Input::Read })
    }

    /// Plaintext rustls has already decrypted: `None` when none is buffered (more input is
    /// needed), `Some(Ok(0))` after the peer's close_notify.
    pub(crate) fn read_plain(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        match self.conn.read_plain(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            other => Some(other),
        }
    }

    /// Queues close_notify after all plaintext, which must be sealed already.
    pub(crate) fn queue_close_notify(&mut self) {
        debug_assert_eq!(self.core.pending(), 0);
        self.closed = true;
        self.conn.send_close_notify();
    }
}
