//! Capture files: pcap (either byte order, µs or ns timestamps) and pcapng (section header,
//! interface description, enhanced and simple packet blocks; `if_tsresol`).
//!
//! A streaming, checked reader over untrusted bytes: [`CaptureReader`] reads from any
//! [`Read`] (a file, stdin, a decompressor) through one buffer that holds a single record at a
//! time, so memory does not grow with the capture. Every length is checked before it is used;
//! a damaged or truncated file gives a [`CaptureError`] naming the record and byte offset, after
//! the records before it were read; no input makes it panic (fuzzed: `fuzz/`, and property
//! tests over random and structured bytes).
//!
//! Rooms, as the pcap-file crate has them: `buffer` the read buffer over the source, one
//! record at a time; `pcap` the classic format's headers; `pcapng` the blocks, each a
//! named struct.

mod buffer;
mod pcap;
mod pcapng;

use std::fmt;
use std::io::Read;
use std::ops::Range;

use crate::bytes::{u16_at, u32_at, Order};
use buffer::ReadBuffer;

/// A packet as captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    /// 1-based frame number, as Wireshark counts.
    pub(crate) frame: u64,
    /// Capture time, ns since the Unix epoch (0 for pcapng simple packet blocks).
    pub(crate) ts_ns: u64,
    /// Link-layer type.
    pub(crate) linktype: LinkType,
    /// The captured bytes (may be shorter than the packet: snap length).
    pub(crate) data: &'a [u8],
    /// The packet's length on the wire.
    pub(crate) orig_len: u32,
}

/// A link-layer type, as a pcap file header or a pcapng interface names it (LINKTYPE_*, the
/// tcpdump.org registry): the ones the doctor decodes ([`crate::packet`]), and any other by
/// its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkType {
    /// 0, BSD loopback (`DLT_NULL`): a 4-byte address family, then the IP packet.
    Null,
    /// 1, Ethernet (with any VLAN tags).
    Ethernet,
    /// 101, raw IP (IPv4 or IPv6); also 12 and 14, raw IP's numbers on some BSDs.
    Raw,
    /// 108, OpenBSD loopback: as [`Null`](LinkType::Null).
    Loop,
    /// 113, Linux cooked capture v1 (`tcpdump -i any`).
    LinuxSll,
    /// 228, raw IPv4.
    Ipv4,
    /// 229, raw IPv6.
    Ipv6,
    /// 276, Linux cooked capture v2.
    LinuxSll2,
    /// Any other: its frames are skipped, and the number reported.
    Other(u32),
}

impl LinkType {
    /// The link type a capture's LINKTYPE_* number names.
    pub(crate) fn of(number: u32) -> LinkType {
        match number {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            101 | 12 | 14 => LinkType::Raw,
            108 => LinkType::Loop,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            276 => LinkType::LinuxSll2,
            n => LinkType::Other(n),
        }
    }
}

/// What a pcap timestamp's fraction of a second counts (its magic number says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fraction {
    Micros,
    Nanos,
}

/// Why a capture cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// Not a pcap or pcapng file.
    #[error("not a pcap or pcapng file (first bytes {0:02x?})")]
    UnknownFormat(Vec<u8>),
    /// The file ends inside a header or record.
    #[error("truncated {what} at byte offset {offset} (record {record}): needs {need} bytes, {have} left")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it starts.
        offset: u64,
        /// Record (frame or block) number, 1-based.
        record: u64,
        /// Bytes needed.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// The input could not be read (an I/O error, or a damaged compressed stream).
    #[error("read error at byte offset {offset}: {why}")]
    Io {
        /// Byte offset of the capture (after decompression) where reading failed.
        offset: u64,
        /// The error.
        why: String,
    },
    /// A header or block field makes no sense.
    #[error("malformed {what} at byte offset {offset} (record {record}): {why}")]
    Malformed {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it starts.
        offset: u64,
        /// Record (frame or block) number, 1-based.
        record: u64,
        /// What is wrong.
        why: String,
    },
}

/// Which file format, and what its header says.
enum Format {
    Pcap(pcap::FileHeader),
    Pcapng { interfaces: Vec<pcapng::Interface> },
}

/// A packet found by a format's reader: where its bytes are in the read buffer.
struct PacketAt {
    frame: u64,
    ts_ns: u64,
    linktype: LinkType,
    orig_len: u32,
    data: Range<usize>,
}

/// A streaming capture reader: [`next_record`](Self::next_record) returns one packet at a
/// time, borrowed from the reader's buffer.
pub(crate) struct CaptureReader<R> {
    input: ReadBuffer<R>,
    /// Byte order of the file (pcap) or of the current section (pcapng).
    order: Order,
    format: Format,
    /// Packets read so far.
    frame: u64,
    /// Records (pcap packets, pcapng blocks) read so far.
    record: u64,
}

/// Largest record we accept: tcpdump's snap length is at most 256 KiB; this leaves room for
/// big pcapng blocks and bounds the memory a damaged length field can ask for.
const MAX_RECORD: usize = 16 * 1024 * 1024;

/// A 32-bit field in the file's byte order (the caller checked there are 4 bytes).
fn int32(b: &[u8], order: Order) -> u32 {
    u32_at(b, 0, order).unwrap_or_default()
}

/// A 16-bit field in the file's byte order (the caller checked there are 2 bytes).
fn int16(b: &[u8], order: Order) -> u16 {
    u16_at(b, 0, order).unwrap_or_default()
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header (pcap) or checks the first block's type (pcapng).
    pub(crate) fn new(src: R) -> Result<CaptureReader<R>, CaptureError> {
        let mut input = ReadBuffer::new(src);
        input.fill(4)?;
        let magic = input.avail().get(..4).map(|m| [m[0], m[1], m[2], m[3]]);
        let (order, format) = match magic {
            // (The section header's own magic sets the order, when the block is read.)
            Some([0x0a, 0x0d, 0x0d, 0x0a]) => (
                Order::Little,
                Format::Pcapng {
                    interfaces: Vec::new(),
                },
            ),
            Some(m) if pcap::byte_order(m).is_some() => {
                let h = pcap::FileHeader::read(&mut input)?;
                (h.order, Format::Pcap(h))
            }
            _ => {
                return Err(CaptureError::UnknownFormat(
                    input.avail().iter().take(8).copied().collect(),
                ))
            }
        };
        Ok(CaptureReader {
            input,
            order,
            format,
            frame: 0,
            record: 0,
        })
    }

    /// Bytes read from the (decompressed) input so far.
    pub(crate) fn offset(&self) -> u64 {
        self.input.offset()
    }

    fn malformed(&self, what: &'static str, at: u64, why: String) -> CaptureError {
        CaptureError::Malformed {
            what,
            offset: at,
            record: self.record,
            why,
        }
    }

    /// The next packet, `None` at the end of the capture. After an error the reader is done.
    pub(crate) fn next_record(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        loop {
            if self.input.at_end()? {
                return Ok(None);
            }
            self.record += 1;
            let found = match self.format {
                Format::Pcap(h) => Some(self.pcap_record(h)?),
                Format::Pcapng { .. } => self.pcapng_block()?,
            };
            if let Some(p) = found {
                return Ok(Some(Record {
                    frame: p.frame,
                    ts_ns: p.ts_ns,
                    linktype: p.linktype,
                    data: self.input.slice(p.data),
                    orig_len: p.orig_len,
                }));
            }
        }
    }
}

impl fmt::Display for Record<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame {} ({} bytes)", self.frame, self.data.len())
    }
}

#[cfg(test)]
mod tests;
