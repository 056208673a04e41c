//! What seals the driver's bytes under both TLS streams ([`Tls`]): a rustls connection fed
//! plaintext batches and drained into the wire, TLS's own messages first; the connection
//! types it takes ([`TlsConnection`]).

use std::io::{self, IoSlice, Read, Write};
use std::time::Instant;

use super::{WireStats, MAX_RECORD_PLAINTEXT};
use crate::coalescer::{Coalescer, Drive, MAX_IOV};
use crate::driver::{Seal, SealOver, Wire};
use crate::policy::FlushPolicy;

/// The driver's [`Seal`] for the std and the tokio TLS streams: the rustls connection and the
/// rules that join it to the plaintext queue (the driver's core). It does no I/O of its own;
/// every call is given the wire.
pub(crate) struct Tls<C> {
    pub(crate) conn: C,
    pub(crate) wire: WireStats,
    /// close_notify was queued: no more plaintext is accepted.
    pub(crate) closed: bool,
}

/// A wire as rustls's `Read + Write`; with `hold`, every send asks the kernel to hold it.
struct WireIo<'w, W: ?Sized> {
    wire: &'w mut W,
    hold: bool,
}

impl<W: Wire + ?Sized> Write for WireIo<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.wire.send(&[IoSlice::new(buf)], self.hold)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.wire.send(bufs, self.hold)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Read + ?Sized> Read for WireIo<'_, W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.wire.read(buf)
    }
}

/// The outcome of reading from the transport.
pub(crate) enum Input {
    /// Bytes were read and processed.
    Read,
    /// The peer closed the TCP stream.
    Eof,
}

mod sealed {
    pub trait Sealed {}
}

/// A rustls connection the TLS layer can drive: `rustls::ServerConnection`,
/// `rustls::ClientConnection` and the `rustls::Connection` enum of both. Sealed:
/// implemented here only.
///
/// ```no_run
/// # fn demo(config: std::sync::Arc<rustls::ClientConfig>) -> std::io::Result<()> {
/// use nagless::tls::TlsStream;
///
/// let name = rustls::pki_types::ServerName::try_from("example.test").unwrap();
/// let conn = rustls::ClientConnection::new(config, name).map_err(std::io::Error::other)?;
/// let tcp = std::net::TcpStream::connect("127.0.0.1:8443")?;
/// let tls = TlsStream::new(conn, tcp)?; // a ClientConnection is a TlsConnection
/// # drop(tls); Ok(()) }
/// ```
pub trait TlsConnection: sealed::Sealed {
    #[doc(hidden)]
    fn wants_write(&self) -> bool;
    #[doc(hidden)]
    fn wants_read(&self) -> bool;
    #[doc(hidden)]
    fn is_handshaking(&self) -> bool;
    #[doc(hidden)]
    fn write_tls(&mut self, wr: &mut dyn Write) -> io::Result<usize>;
    #[doc(hidden)]
    fn read_tls(&mut self, rd: &mut dyn Read) -> io::Result<usize>;
    #[doc(hidden)]
    fn process_new_packets(&mut self) -> Result<(), rustls::Error>;
    #[doc(hidden)]
    fn write_plain(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    #[doc(hidden)]
    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    #[doc(hidden)]
    fn send_close_notify(&mut self);
    #[doc(hidden)]
    fn refresh_traffic_keys(&mut self) -> Result<(), rustls::Error>;
}

/// `ServerConnection` and `ClientConnection` dereference to a `ConnectionCommon`.
macro_rules! impl_tls_connection {
    ($ty:ty) => {
        impl sealed::Sealed for $ty {}

        impl TlsConnection for $ty {
            fn wants_write(&self) -> bool {
                (**self).wants_write()
            }
            fn wants_read(&self) -> bool {
                (**self).wants_read()
            }
            fn is_handshaking(&self) -> bool {
                (**self).is_handshaking()
            }
            fn write_tls(&mut self, wr: &mut dyn Write) -> io::Result<usize> {
                (**self).write_tls(wr)
            }
            fn read_tls(&mut self, rd: &mut dyn Read) -> io::Result<usize> {
                (**self).read_tls(rd)
            }
            fn process_new_packets(&mut self) -> Result<(), rustls::Error> {
                (**self).process_new_packets().map(drop)
            }
            fn write_plain(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                (**self).writer().write_vectored(bufs)
            }
            fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                (**self).reader().read(buf)
            }
            fn send_close_notify(&mut self) {
                (**self).send_close_notify()
            }
            fn refresh_traffic_keys(&mut self) -> Result<(), rustls::Error> {
                (**self).refresh_traffic_keys()
            }
        }
    };
}

impl_tls_connection!(rustls::ServerConnection);
impl_tls_connection!(rustls::ClientConnection);

impl sealed::Sealed for rustls::Connection {}

/// The enum of both sides, for code that holds either.
impl TlsConnection for rustls::Connection {
    fn wants_write(&self) -> bool {
        (**self).wants_write()
    }
    fn wants_read(&self) -> bool {
        (**self).wants_read()
    }
    fn is_handshaking(&self) -> bool {
        (**self).is_handshaking()
    }
    fn write_tls(&mut self, wr: &mut dyn Write) -> io::Result<usize> {
        rustls::Connection::write_tls(self, wr)
    }
    fn read_tls(&mut self, rd: &mut dyn Read) -> io::Result<usize> {
        rustls::Connection::read_tls(self, rd)
    }
    fn process_new_packets(&mut self) -> Result<(), rustls::Error> {
        rustls::Connection::process_new_packets(self).map(drop)
    }
    fn write_plain(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.writer().write_vectored(bufs)
    }
    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reader().read(buf)
    }
    fn send_close_notify(&mut self) {
        (**self).send_close_notify()
    }
    fn refresh_traffic_keys(&mut self) -> Result<(), rustls::Error> {
        rustls::Connection::refresh_traffic_keys(self)
    }
}

pub(crate) fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// The plaintext queue for `policy`: threshold flushes seal whole records only.
pub(crate) fn plaintext_core(policy: FlushPolicy) -> Coalescer {
    let mut core = Coalescer::new(policy);
    core.set_segment_size(MAX_RECORD_PLAINTEXT);
    core
}

impl<C: TlsConnection> Tls<C> {
    pub(crate) fn new(conn: C) -> Self {
        Tls {
            conn,
            wire: WireStats::default(),
            closed: false,
        }
    }

    /// Hands the ciphertext rustls holds to `wire`: one gathered send per `write_tls` call (up
    /// to 64 records). `Blocked` when `wire` would block; the rest stays in rustls.
    pub(crate) fn send_tls<W: Wire + ?Sized>(&mut self, wire: &mut W) -> io::Result<Drive> {
        self.send_tls_holding(wire, false)
    }

    fn send_tls_holding<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        hold: bool,
    ) -> io::Result<Drive> {
        let mut io = WireIo { wire, hold };
        while self.conn.wants_write() {
            self.wire.sends += 1;
            match self.conn.write_tls(&mut io) {
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

    /// Reads one batch of ciphertext from `wire`, processes it and sends at once whatever
    /// rustls must answer (handshake, alerts, key update). `WouldBlock` from `wire` is
    /// returned as is.
    pub(crate) fn read_input<W: Wire + Read + ?Sized>(
        &mut self,
        wire: &mut W,
    ) -> io::Result<Input> {
        self.wire.reads += 1;
        let n = loop {
            match self.conn.read_tls(&mut WireIo {
                wire: &mut *wire,
                hold: false,
            }) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        let processed = self.conn.process_new_packets();
        // Answers (or the alert for an error) leave now; a full socket keeps them queued in
        // rustls for the next send.
        // A send error here does not hide the input: rustls keeps the bytes and the next
        // send meets the error again.
        let _ = self.send_tls(wire);
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
    pub(crate) fn queue_close_notify(&mut self, core: &Coalescer) {
        debug_assert_eq!(core.pending(), 0);
        self.closed = true;
        self.conn.send_close_notify();
    }
}

impl<C: TlsConnection> Seal for Tls<C> {
    const SOCKET_SEGMENT: bool = false;
    const QUIET_WRITES: bool = false;

    fn backlog(&self) -> bool {
        self.conn.wants_write()
    }

    fn handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// close_notify, after every plaintext byte was sealed.
    fn end(&mut self, core: &Coalescer) {
        if !self.closed && core.pending() == 0 {
            self.queue_close_notify(core);
        }
    }

    /// Fails once close_notify was queued.
    fn check_open(&self) -> io::Result<()> {
        if self.closed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "nagless tls: write after close_notify",
            ));
        }
        Ok(())
    }
}

impl<C: TlsConnection, W: Wire + Read + ?Sized> SealOver<W> for Tls<C> {
    /// Seals what the policy made due, as few `write_vectored` calls into rustls as its
    /// buffer allows, and sends the records. With `handshake`, a handshake in progress is
    /// completed first (reading from `wire`); without, due plaintext waits for it.
    fn send_due(
        &mut self,
        core: &mut Coalescer,
        wire: &mut W,
        now: Instant,
        handshake: bool,
        hold: bool,
    ) -> io::Result<Drive> {
        loop {
            if self.conn.is_handshaking() {
                if self.send_tls(wire)? == Drive::Blocked {
                    return Ok(Drive::Blocked);
                }
                let due = core.poll_transmit(now).is_some();
                if !(handshake && due && self.conn.wants_read()) {
                    return Ok(Drive::Idle);
                }
                match self.read_input(wire)? {
                    Input::Read => continue,
                    Input::Eof => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "peer closed during the TLS handshake",
                        ))
                    }
                }
            }
            let Some(tx) = core.poll_transmit(now) else {
                return self.send_tls_holding(wire, hold);
            };
            let took = {
                let mut slices = [IoSlice::new(&[]); MAX_IOV];
                let n = core.io_slices(&mut slices, tx.len);
                self.conn.write_plain(&slices[..n])?
            };
            if took > 0 {
                self.wire.seals += 1;
                core.on_sent(took);
                continue;
            }
            // rustls's buffer is full: send it, then seal more.
            if !self.conn.wants_write() {
                return Err(io::Error::other(
                    "nagless tls: rustls took no plaintext with an empty buffer",
                ));
            }
            if self.send_tls_holding(wire, hold)? == Drive::Blocked {
                core.on_would_block();
                return Ok(Drive::Blocked);
            }
        }
    }
}
