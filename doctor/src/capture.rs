//! Capture files: pcap (either byte order, µs or ns timestamps) and pcapng (section header,
//! interface description, enhanced and simple packet blocks; `if_tsresol`).
//!
//! A checked reader over untrusted bytes: every length is checked before it is used, a
//! damaged or truncated file gives a [`CaptureError`] naming the record and byte offset, and
//! no input makes it panic (fuzzed: `fuzz/`, and a property test over random bytes).

use std::fmt;

/// A packet as captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// 1-based frame number, as Wireshark counts.
    pub frame: u64,
    /// Capture time, ns since the Unix epoch (0 for pcapng simple packet blocks).
    pub ts_ns: u64,
    /// Link-layer type (LINKTYPE_*).
    pub linktype: u32,
    /// The captured bytes (may be shorter than the packet: snap length).
    pub data: &'a [u8],
    /// The packet's length on the wire.
    pub orig_len: u32,
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
        offset: usize,
        /// Record (frame or block) number, 1-based.
        record: u64,
        /// Bytes needed.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// A header or block field makes no sense.
    #[error("malformed {what} at byte offset {offset} (record {record}): {why}")]
    Malformed {
        /// What was being read.
        what: &'static str,
        /// Byte offset where it starts.
        offset: usize,
        /// Record (frame or block) number, 1-based.
        record: u64,
        /// What is wrong.
        why: String,
    },
}

/// Reads every packet of a pcap or pcapng capture held in memory.
pub fn read(bytes: &[u8]) -> Result<Vec<Record<'_>>, CaptureError> {
    match bytes.get(..4) {
        Some([0xd4, 0xc3, 0xb2, 0xa1])
        | Some([0xa1, 0xb2, 0xc3, 0xd4])
        | Some([0x4d, 0x3c, 0xb2, 0xa1])
        | Some([0xa1, 0xb2, 0x3c, 0x4d]) => read_pcap(bytes),
        Some([0x0a, 0x0d, 0x0d, 0x0a]) => read_pcapng(bytes),
        _ => Err(CaptureError::UnknownFormat(
            bytes.iter().take(8).copied().collect(),
        )),
    }
}

/// A bounded cursor that reads integers in one byte order.
struct Cursor<'a> {
    bytes: &'a [u8],
    little: bool,
}

impl<'a> Cursor<'a> {
    fn slice(
        &self,
        offset: usize,
        len: usize,
        what: &'static str,
        record: u64,
    ) -> Result<&'a [u8], CaptureError> {
        offset
            .checked_add(len)
            .and_then(|end| self.bytes.get(offset..end))
            .ok_or(CaptureError::Truncated {
                what,
                offset,
                record,
                need: len,
                have: self.bytes.len().saturating_sub(offset),
            })
    }

    fn u16(&self, at: usize, what: &'static str, record: u64) -> Result<u16, CaptureError> {
        let s = self.slice(at, 2, what, record)?;
        let a = [s[0], s[1]];
        Ok(if self.little {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        })
    }

    fn u32(&self, at: usize, what: &'static str, record: u64) -> Result<u32, CaptureError> {
        let s = self.slice(at, 4, what, record)?;
        let a = [s[0], s[1], s[2], s[3]];
        Ok(if self.little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        })
    }
}

fn read_pcap(bytes: &[u8]) -> Result<Vec<Record<'_>>, CaptureError> {
    let (little, nanos) = match bytes[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] => (true, false),
        [0xa1, 0xb2, 0xc3, 0xd4] => (false, false),
        [0x4d, 0x3c, 0xb2, 0xa1] => (true, true),
        _ => (false, true),
    };
    let c = Cursor { bytes, little };
    c.slice(0, 24, "pcap file header", 0)?;
    let linktype = c.u32(20, "pcap file header", 0)? & 0x0fff_ffff;
    let mut out = Vec::new();
    let mut off = 24;
    let mut frame = 0u64;
    while off < bytes.len() {
        frame += 1;
        let what = "pcap record header";
        c.slice(off, 16, what, frame)?;
        let sec = c.u32(off, what, frame)? as u64;
        let frac = c.u32(off + 4, what, frame)? as u64;
        let caplen = c.u32(off + 8, what, frame)? as usize;
        let orig_len = c.u32(off + 12, what, frame)?;
        if caplen > 256 * 1024 * 1024 {
            return Err(CaptureError::Malformed {
                what,
                offset: off,
                record: frame,
                why: format!("captured length {caplen} is implausible"),
            });
        }
        let data = c.slice(off + 16, caplen, "pcap packet data", frame)?;
        let ts_ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        out.push(Record {
            frame,
            ts_ns,
            linktype,
            data,
            orig_len,
        });
        off += 16 + caplen;
    }
    Ok(out)
}

const SHB: u32 = 0x0a0d_0d0a;
const IDB: u32 = 1;
const SPB: u32 = 3;
const EPB: u32 = 6;
const OPB: u32 = 2;

/// An interface of the current pcapng section.
#[derive(Clone, Copy)]
struct Interface {
    linktype: u32,
    /// Timestamp units per second.
    units_per_sec: u64,
}

fn tsresol(code: u8) -> Option<u64> {
    let exp = u32::from(code & 0x7f);
    if code & 0x80 == 0 {
        10u64.checked_pow(exp)
    } else {
        2u64.checked_pow(exp)
    }
}

fn read_pcapng(bytes: &[u8]) -> Result<Vec<Record<'_>>, CaptureError> {
    let mut c = Cursor {
        bytes,
        little: true,
    };
    let mut interfaces: Vec<Interface> = Vec::new();
    let mut out = Vec::new();
    let mut off = 0usize;
    let mut block = 0u64;
    let mut frame = 0u64;
    while off < bytes.len() {
        block += 1;
        let what = "pcapng block header";
        let head = c.slice(off, 8, what, block)?;
        if head[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
            // A section header sets the byte order of everything up to the next one.
            let magic = c.slice(off + 8, 4, "section header", block)?;
            c.little = match magic {
                [0x4d, 0x3c, 0x2b, 0x1a] => true,
                [0x1a, 0x2b, 0x3c, 0x4d] => false,
                _ => {
                    return Err(CaptureError::Malformed {
                        what: "section header",
                        offset: off,
                        record: block,
                        why: format!("byte-order magic {magic:02x?}"),
                    })
                }
            };
            interfaces.clear();
        }
        let kind = c.u32(off, what, block)?;
        let len = c.u32(off + 4, what, block)? as usize;
        if len < 12 || len % 4 != 0 {
            return Err(CaptureError::Malformed {
                what,
                offset: off,
                record: block,
                why: format!("block length {len} (must be a multiple of 4, at least 12)"),
            });
        }
        let body = c.slice(off + 8, len - 12, "pcapng block body", block)?;
        let trailer = c.u32(off + len - 4, "pcapng block trailer", block)? as usize;
        if trailer != len {
            return Err(CaptureError::Malformed {
                what: "pcapng block trailer",
                offset: off + len - 4,
                record: block,
                why: format!("trailing length {trailer} differs from leading length {len}"),
            });
        }
        let b = Cursor {
            bytes: body,
            little: c.little,
        };
        match kind {
            SHB => {}
            IDB => {
                let linktype = b.u16(0, "interface description", block)? as u32;
                let mut units_per_sec = 1_000_000;
                // Options: code, length, value padded to 4.
                let mut o = 8;
                while o + 4 <= body.len() {
                    let code = b.u16(o, "interface option", block)?;
                    let olen = b.u16(o + 2, "interface option", block)? as usize;
                    if code == 0 {
                        break;
                    }
                    let value = b.slice(o + 4, olen, "interface option", block)?;
                    if code == 9 && olen >= 1 {
                        units_per_sec = tsresol(value[0]).ok_or(CaptureError::Malformed {
                            what: "if_tsresol option",
                            offset: off + 8 + o,
                            record: block,
                            why: format!("resolution code {:#x} out of range", value[0]),
                        })?;
                    }
                    o += 4 + olen.div_ceil(4) * 4;
                }
                interfaces.push(Interface {
                    linktype,
                    units_per_sec,
                });
            }
            EPB | OPB => {
                frame += 1;
                let what = "enhanced packet block";
                let iface = if kind == EPB {
                    b.u32(0, what, block)? as usize
                } else {
                    b.u16(0, what, block)? as usize
                };
                let Some(i) = interfaces.get(iface).copied() else {
                    return Err(CaptureError::Malformed {
                        what,
                        offset: off,
                        record: block,
                        why: format!("interface {iface} was never described"),
                    });
                };
                let ts = (b.u32(4, what, block)? as u64) << 32 | b.u32(8, what, block)? as u64;
                let caplen = b.u32(12, what, block)? as usize;
                let orig_len = b.u32(16, what, block)?;
                let data = b.slice(20, caplen, "packet data", block)?;
                let ts_ns = (ts as u128 * 1_000_000_000 / i.units_per_sec.max(1) as u128) as u64;
                out.push(Record {
                    frame,
                    ts_ns,
                    linktype: i.linktype,
                    data,
                    orig_len,
                });
            }
            SPB => {
                frame += 1;
                let i = interfaces.first().copied().ok_or(CaptureError::Malformed {
                    what: "simple packet block",
                    offset: off,
                    record: block,
                    why: "no interface described before it".into(),
                })?;
                let orig_len = b.u32(0, "simple packet block", block)?;
                let data = &body[4.min(body.len())..];
                let data = &data[..data.len().min(orig_len as usize)];
                out.push(Record {
                    frame,
                    ts_ns: 0,
                    linktype: i.linktype,
                    data,
                    orig_len,
                });
            }
            _ => {} // statistics, name resolution, custom blocks: nothing we need
        }
        off += len;
    }
    Ok(out)
}

impl fmt::Display for Record<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame {} ({} bytes)", self.frame, self.data.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn pcap(records: &[(u64, &[u8])], linktype: u32) -> Vec<u8> {
        let mut v = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&65535u32.to_le_bytes());
        v.extend_from_slice(&linktype.to_le_bytes());
        for (us, d) in records {
            v.extend_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
            v.extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
            v.extend_from_slice(&(d.len() as u32).to_le_bytes());
            v.extend_from_slice(&(d.len() as u32).to_le_bytes());
            v.extend_from_slice(d);
        }
        v
    }

    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut body = body.to_vec();
        while body.len() % 4 != 0 {
            body.push(0);
        }
        let len = (body.len() + 12) as u32;
        let mut v = kind.to_le_bytes().to_vec();
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(&body);
        v.extend_from_slice(&len.to_le_bytes());
        v
    }

    #[test]
    fn pcap_both_byte_orders_and_nanoseconds() {
        let le = pcap(&[(1_500_000, b"abc")], 1);
        let r = read(&le).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].ts_ns, 1_500_000_000);
        assert_eq!(r[0].data, b"abc");
        assert_eq!(r[0].linktype, 1);
        // Big-endian, nanosecond magic.
        let mut be = vec![0xa1, 0xb2, 0x3c, 0x4d, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        be.extend_from_slice(&65535u32.to_be_bytes());
        be.extend_from_slice(&101u32.to_be_bytes());
        be.extend_from_slice(&2u32.to_be_bytes());
        be.extend_from_slice(&5u32.to_be_bytes());
        be.extend_from_slice(&1u32.to_be_bytes());
        be.extend_from_slice(&1u32.to_be_bytes());
        be.push(0x45);
        let r = read(&be).unwrap();
        assert_eq!(r[0].ts_ns, 2_000_000_005);
        assert_eq!(r[0].linktype, 101);
    }

    #[test]
    fn pcapng_with_tsresol_and_errors_name_the_offset() {
        let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&(-1i64).to_le_bytes());
        let mut idb = vec![113, 0, 0, 0];
        idb.extend_from_slice(&0u32.to_le_bytes());
        idb.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0]); // if_tsresol = 10^-9
        idb.extend_from_slice(&[0, 0, 0, 0]);
        let mut epb = 0u32.to_le_bytes().to_vec();
        let ts: u64 = 3_000_000_007;
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ts as u32).to_le_bytes());
        epb.extend_from_slice(&3u32.to_le_bytes());
        epb.extend_from_slice(&60u32.to_le_bytes());
        epb.extend_from_slice(b"xyz");
        let mut file = block(SHB, &shb);
        file.extend(block(IDB, &idb));
        file.extend(block(EPB, &epb));
        let r = read(&file).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].ts_ns, 3_000_000_007);
        assert_eq!(r[0].linktype, 113);
        assert_eq!(r[0].data, b"xyz");
        assert_eq!(r[0].orig_len, 60);
        let cut = &file[..file.len() - 6];
        let e = read(cut).unwrap_err().to_string();
        assert!(e.contains("offset") && e.contains("record 3"), "{e}");
    }

    #[test]
    fn truncated_pcap_names_the_frame() {
        let mut f = pcap(&[(0, b"abcdef"), (1, b"ghijkl")], 1);
        f.truncate(f.len() - 2);
        let e = read(&f).unwrap_err();
        assert!(
            matches!(e, CaptureError::Truncated { record: 2, .. }),
            "{e}"
        );
        assert!(read(b"hello world").is_err());
    }
}
