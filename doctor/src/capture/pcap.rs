//! The classic pcap format: a 24-byte file header (magic, version, snap length, link type),
//! then per packet a 16-byte record header (seconds, fraction, captured and original length)
//! and the captured bytes. Either byte order; microsecond or nanosecond fractions.

use std::io::Read;

use super::buffer::ReadBuffer;
use super::{int32, CaptureError, CaptureReader, Fraction, LinkType, PacketAt, MAX_RECORD};
use crate::bytes::Order;

/// What the file header says.
#[derive(Debug, Clone, Copy)]
pub(super) struct FileHeader {
    /// The byte order of its fields.
    pub(super) order: Order,
    /// What the timestamps' fractions count.
    fraction: Fraction,
    /// Link-layer type of every packet.
    linktype: LinkType,
}

/// The byte order and timestamp unit a pcap magic number gives.
pub(super) fn byte_order(magic: [u8; 4]) -> Option<(Order, Fraction)> {
    match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] => Some((Order::Little, Fraction::Micros)),
        [0xa1, 0xb2, 0xc3, 0xd4] => Some((Order::Big, Fraction::Micros)),
        [0x4d, 0x3c, 0xb2, 0xa1] => Some((Order::Little, Fraction::Nanos)),
        [0xa1, 0xb2, 0x3c, 0x4d] => Some((Order::Big, Fraction::Nanos)),
        _ => None,
    }
}

/// A packet's record header.
struct RecordHeader {
    sec: u64,
    frac: u64,
    caplen: usize,
    orig_len: u32,
}

impl FileHeader {
    /// Reads the file header at the start of `input` (its magic already checked).
    pub(super) fn read<R: Read>(input: &mut ReadBuffer<R>) -> Result<FileHeader, CaptureError> {
        let h = input.take(24, "pcap file header", 0)?;
        let (order, fraction) = byte_order([h[0], h[1], h[2], h[3]])
            .ok_or_else(|| CaptureError::UnknownFormat(h.iter().take(8).copied().collect()))?;
        Ok(FileHeader {
            order,
            fraction,
            // libpcap's LT_LINKTYPE: the bits above say whether frames end in a frame check
            // sequence, and how long (the IP header's length bounds what is read).
            linktype: LinkType::of(int32(&h[20..24], order) & 0x03ff_ffff),
        })
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads one pcap record (its header and bytes).
    pub(super) fn pcap_record(&mut self, file: FileHeader) -> Result<PacketAt, CaptureError> {
        let at = self.input.offset();
        let what = "pcap record header";
        let h = self.input.peek(16, what, self.record)?;
        let order = file.order;
        let r = RecordHeader {
            sec: u64::from(int32(&h[0..4], order)),
            frac: u64::from(int32(&h[4..8], order)),
            caplen: int32(&h[8..12], order) as usize,
            orig_len: int32(&h[12..16], order),
        };
        if r.caplen > MAX_RECORD {
            return Err(self.malformed(
                what,
                at,
                format!("captured length {} is implausible", r.caplen),
            ));
        }
        self.input
            .peek(16 + r.caplen, "pcap packet data", self.record)?;
        self.input.consume(16);
        self.frame += 1;
        let data = self.input.consume(r.caplen);
        let frac_ns = match file.fraction {
            Fraction::Nanos => r.frac,
            Fraction::Micros => r.frac * 1000,
        };
        Ok(PacketAt {
            frame: self.frame,
            ts_ns: r.sec * 1_000_000_000 + frac_ns,
            linktype: file.linktype,
            orig_len: r.orig_len,
            data,
        })
    }
}
