//! A deterministic stand-in for a rustls connection (tests only): its "records" are the
//! plaintext behind a 3-byte header, its handshake a greeting out and a few bytes in, so that
//! what a TLS stream sends can be compared byte for byte between runs.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};

use super::engine::sealed::Sealed;
use super::TlsConnection;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct FakeTls {
    /// Bytes of the peer's input the handshake still needs (0: complete).
    handshake_left: usize,
    /// "Ciphertext" not yet written to the socket.
    out: Vec<u8>,
    /// Most bytes `out` holds before sealing refuses plaintext (rustls's buffer limit).
    limit: usize,
    /// The peer's plaintext, "decrypted".
    plain: VecDeque<u8>,
    /// The peer closed the stream.
    eof: bool,
}

/// Plaintext per record, as rustls's.
const RECORD: usize = 16 * 1024;

impl FakeTls {
    /// A client that greets first and whose handshake completes after `handshake` bytes of
    /// input (then it sends its "finished"); at most `limit` bytes of records wait in it.
    pub(crate) fn new(handshake: usize, limit: usize) -> Self {
        FakeTls {
            handshake_left: handshake,
            out: if handshake > 0 {
                b"HELLO".to_vec()
            } else {
                Vec::new()
            },
            limit,
            plain: VecDeque::new(),
            eof: false,
        }
    }
}

impl Sealed for FakeTls {}

impl TlsConnection for FakeTls {
    fn wants_write(&self) -> bool {
        !self.out.is_empty()
    }
    fn wants_read(&self) -> bool {
        true
    }
    fn is_handshaking(&self) -> bool {
        self.handshake_left > 0
    }
    fn write_tls(&mut self, wr: &mut dyn Write) -> io::Result<usize> {
        let n = wr.write_vectored(&[IoSlice::new(&self.out)])?;
        self.out.drain(..n);
        Ok(n)
    }
    fn read_tls(&mut self, rd: &mut dyn Read) -> io::Result<usize> {
        let mut buf = [0u8; 8192];
        let n = rd.read(&mut buf)?;
        if n == 0 {
            self.eof = true;
        }
        for &b in &buf[..n] {
            if self.handshake_left > 0 {
                self.handshake_left -= 1;
                if self.handshake_left == 0 {
                    self.out.extend_from_slice(b"FIN");
                }
            } else {
                self.plain.push_back(b);
            }
        }
        Ok(n)
    }
    fn process_new_packets(&mut self) -> Result<(), rustls::Error> {
        Ok(())
    }
    fn write_plain(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let room = self.limit.saturating_sub(self.out.len());
        let data: Vec<u8> = bufs
            .iter()
            .flat_map(|b| b.iter().copied())
            .take(room)
            .collect();
        for record in data.chunks(RECORD) {
            self.out.push(b'R');
            self.out
                .extend_from_slice(&(record.len() as u16).to_be_bytes());
            self.out.extend_from_slice(record);
        }
        Ok(data.len())
    }
    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.plain.is_empty() {
            return Err(if self.eof {
                io::ErrorKind::UnexpectedEof
            } else {
                io::ErrorKind::WouldBlock
            }
            .into());
        }
        let n = buf.len().min(self.plain.len());
        for (dst, src) in buf.iter_mut().zip(self.plain.drain(..n)) {
            *dst = src;
        }
        Ok(n)
    }
    fn send_close_notify(&mut self) {
        self.out.extend_from_slice(b"BYE");
    }
    fn refresh_traffic_keys(&mut self) -> Result<(), rustls::Error> {
        self.out.extend_from_slice(b"KU");
        Ok(())
    }
}
