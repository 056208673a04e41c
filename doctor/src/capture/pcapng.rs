//! pcapng: a file of blocks, each `type, length, body, length` in the byte order of its
//! section (set by the section header block's magic). The blocks read: section header (byte
//! order; resets the interfaces), interface description (link type, `if_tsresol`), enhanced,
//! obsolete and simple packet blocks; others are skipped whole.

use std::io::Read;

use super::{int16, int32, CaptureError, CaptureReader, Format, LinkType, PacketAt, MAX_RECORD};
use crate::bytes::Order;

pub(super) const IDB: u32 = 1;
const OPB: u32 = 2;
const SPB: u32 = 3;
pub(super) const EPB: u32 = 6;

/// Interfaces a pcapng section may describe.
const MAX_INTERFACES: usize = 65_536;

/// An interface of the current section: an interface description block.
#[derive(Debug, Clone, Copy)]
pub(super) struct Interface {
    linktype: LinkType,
    /// Timestamp units per second.
    units_per_sec: u64,
}

/// An enhanced (or obsolete) packet block's fixed fields.
struct EnhancedPacket {
    interface: usize,
    /// Timestamp in the interface's units.
    ts: u64,
    caplen: usize,
    orig_len: u32,
}

/// Where a block is and what it is, for error messages.
struct BlockAt {
    /// Byte offset of the block.
    offset: u64,
    /// Block number, 1-based.
    number: u64,
    body_len: usize,
}

impl BlockAt {
    fn short(&self, what: &'static str, need: usize) -> CaptureError {
        CaptureError::Truncated {
            what,
            offset: self.offset + 8,
            record: self.number,
            need,
            have: self.body_len,
        }
    }

    fn malformed(&self, what: &'static str, offset: u64, why: String) -> CaptureError {
        CaptureError::Malformed {
            what,
            offset,
            record: self.number,
            why,
        }
    }
}

/// Timestamp units per second of an `if_tsresol` code (10^-n, or 2^-n with the high bit).
fn tsresol(code: u8) -> Option<u64> {
    let exp = u32::from(code & 0x7f);
    if code & 0x80 == 0 {
        10u64.checked_pow(exp)
    } else {
        2u64.checked_pow(exp)
    }
}

impl Interface {
    /// Reads an interface description block's body.
    fn parse(body: &[u8], order: Order, at: &BlockAt) -> Result<Interface, CaptureError> {
        if body.len() < 8 {
            return Err(at.short("interface description", 8));
        }
        let linktype = LinkType::of(u32::from(int16(&body[0..2], order)));
        let mut units_per_sec = 1_000_000;
        // Options: code, length, value padded to 4.
        let mut o = 8;
        while o + 4 <= body.len() {
            let code = int16(&body[o..], order);
            let olen = usize::from(int16(&body[o + 2..], order));
            if code == 0 {
                break;
            }
            let Some(value) = body.get(o + 4..o + 4 + olen) else {
                return Err(at.short("interface option", o + 4 + olen));
            };
            if code == 9 && olen >= 1 {
                units_per_sec = tsresol(value[0]).ok_or_else(|| {
                    at.malformed(
                        "if_tsresol option",
                        at.offset + 8 + o as u64,
                        format!("resolution code {:#x} out of range", value[0]),
                    )
                })?;
            }
            o += 4 + olen.div_ceil(4) * 4;
        }
        Ok(Interface {
            linktype,
            units_per_sec,
        })
    }
}

impl EnhancedPacket {
    /// Reads an enhanced (`EPB`) or obsolete (`OPB`) packet block's fixed fields.
    fn parse(
        kind: u32,
        body: &[u8],
        order: Order,
        at: &BlockAt,
    ) -> Result<EnhancedPacket, CaptureError> {
        if body.len() < 20 {
            return Err(at.short("enhanced packet block", 20));
        }
        let p = EnhancedPacket {
            interface: if kind == EPB {
                int32(&body[0..4], order) as usize
            } else {
                usize::from(int16(&body[0..2], order))
            },
            ts: u64::from(int32(&body[4..8], order)) << 32 | u64::from(int32(&body[8..12], order)),
            caplen: int32(&body[12..16], order) as usize,
            orig_len: int32(&body[16..20], order),
        };
        if body.len() - 20 < p.caplen {
            return Err(at.short("packet data", 20 + p.caplen));
        }
        Ok(p)
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads one pcapng block; a packet block gives its packet.
    pub(super) fn pcapng_block(&mut self) -> Result<Option<PacketAt>, CaptureError> {
        let offset = self.input.offset();
        let record = self.record;
        let what = "pcapng block header";
        let head = self.input.peek(8, what, record)?;
        if head[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
            // A section header sets the byte order of everything up to the next one.
            let magic = self.input.peek(12, "section header", record)?[8..12].to_vec();
            self.order = match magic[..] {
                [0x4d, 0x3c, 0x2b, 0x1a] => Order::Little,
                [0x1a, 0x2b, 0x3c, 0x4d] => Order::Big,
                _ => {
                    return Err(self.malformed(
                        "section header",
                        offset,
                        format!("byte-order magic {magic:02x?}"),
                    ))
                }
            };
            if let Format::Pcapng { interfaces } = &mut self.format {
                interfaces.clear();
            }
        }
        let order = self.order;
        let head = self.input.peek(8, what, record)?;
        let kind = int32(&head[0..4], order);
        let len = int32(&head[4..8], order) as usize;
        let wrong = if len < 12 {
            Some("less than the 12 bytes of a block's own header and trailer")
        } else if len % 4 != 0 {
            Some("not a multiple of 4, as every pcapng block's is")
        } else if len > MAX_RECORD {
            Some("more than the 16 MiB the doctor takes for one block")
        } else {
            None
        };
        if let Some(wrong) = wrong {
            return Err(self.malformed(what, offset, format!("block length {len}: {wrong}")));
        }
        let whole = self.input.peek(len, "pcapng block body", record)?;
        let trailer = int32(&whole[len - 4..], order) as usize;
        if trailer != len {
            return Err(self.malformed(
                "pcapng block trailer",
                offset + len as u64 - 4,
                format!("trailing length {trailer} differs from leading length {len}"),
            ));
        }
        let block = self.input.consume(len);
        let body_start = block.start + 8;
        let at = BlockAt {
            offset,
            number: record,
            body_len: len - 12,
        };
        let body = &self.input.slice(body_start..body_start + at.body_len);
        let Format::Pcapng { interfaces } = &mut self.format else {
            return Ok(None);
        };
        match kind {
            IDB => {
                let i = Interface::parse(body, order, &at)?;
                // Each costs a few bytes, but a hostile file can hold tens of millions of
                // them in kilobytes (compressed); no real capture has more than a few dozen.
                if interfaces.len() >= MAX_INTERFACES {
                    return Err(at.malformed(
                        "interface description",
                        offset,
                        format!(
                            "more than {MAX_INTERFACES} interfaces in one section: not a capture"
                        ),
                    ));
                }
                interfaces.push(i);
                Ok(None)
            }
            EPB | OPB => {
                let p = EnhancedPacket::parse(kind, body, order, &at)?;
                let Some(i) = interfaces.get(p.interface).copied() else {
                    return Err(at.malformed(
                        "enhanced packet block",
                        offset,
                        format!("interface {} was never described", p.interface),
                    ));
                };
                let units = u128::from(i.units_per_sec.max(1));
                self.frame += 1;
                Ok(Some(PacketAt {
                    frame: self.frame,
                    // (Past 2^64 ns, the year 2554, the time wraps: the steps between an
                    // interface's frames, which the analysis uses, are kept.)
                    ts_ns: (u128::from(p.ts) * 1_000_000_000 / units) as u64,
                    linktype: i.linktype,
                    orig_len: p.orig_len,
                    data: body_start + 20..body_start + 20 + p.caplen,
                }))
            }
            SPB => {
                let Some(i) = interfaces.first().copied() else {
                    return Err(at.malformed(
                        "simple packet block",
                        offset,
                        "no interface described before it".into(),
                    ));
                };
                if body.len() < 4 {
                    return Err(at.short("simple packet block", 4));
                }
                let orig_len = int32(&body[0..4], order);
                let caplen = (body.len() - 4).min(orig_len as usize);
                self.frame += 1;
                Ok(Some(PacketAt {
                    frame: self.frame,
                    ts_ns: 0,
                    linktype: i.linktype,
                    orig_len,
                    data: body_start + 4..body_start + 4 + caplen,
                }))
            }
            _ => Ok(None), // section header, statistics, name resolution, custom blocks
        }
    }
}
