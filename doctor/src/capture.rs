//! Capture files: pcap (either byte order, µs or ns timestamps) and pcapng (section header,
//! interface description, enhanced and simple packet blocks; `if_tsresol`).
//!
//! A streaming, checked reader over untrusted bytes: [`CaptureReader`] reads from any
//! [`Read`] (a file, stdin, a decompressor) through one buffer that holds a single record at a
//! time, so memory does not grow with the capture. Every length is checked before it is used;
//! a damaged or truncated file gives a [`CaptureError`] naming the record and byte offset, after
//! the records before it were read; no input makes it panic (fuzzed: `fuzz/`, and property
//! tests over random and structured bytes).

use std::fmt;
use std::io::{self, Read};

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
    Pcap { linktype: u32, nanos: bool },
    Pcapng { interfaces: Vec<Interface> },
}

/// A streaming capture reader: [`next_record`](Self::next_record) returns one packet at a
/// time, borrowed from the reader's buffer.
pub struct CaptureReader<R> {
    src: R,
    buf: Vec<u8>,
    /// Valid bytes are `buf[start..end]`; `buf[start]` is at capture offset `offset`.
    start: usize,
    end: usize,
    offset: u64,
    eof: bool,
    little: bool,
    format: Format,
    /// Packets read so far.
    frame: u64,
    /// Records (pcap packets, pcapng blocks) read so far.
    record: u64,
}

/// Largest record we accept: tcpdump's snap length is at most 256 KiB; this leaves room for
/// big pcapng blocks and bounds the memory a damaged length field can ask for.
const MAX_RECORD: usize = 16 * 1024 * 1024;

fn int32(b: &[u8], little: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if little {
        u32::from_le_bytes(a)
    } else {
        u32::from_be_bytes(a)
    }
}

fn int16(b: &[u8], little: bool) -> u16 {
    if little {
        u16::from_le_bytes([b[0], b[1]])
    } else {
        u16::from_be_bytes([b[0], b[1]])
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header (pcap) or checks the first block's type (pcapng).
    pub fn new(src: R) -> Result<CaptureReader<R>, CaptureError> {
        let mut r = CaptureReader {
            src,
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
            offset: 0,
            eof: false,
            little: true,
            format: Format::Pcapng {
                interfaces: Vec::new(),
            },
            frame: 0,
            record: 0,
        };
        r.fill(4)?;
        let magic = r.avail().get(..4).map(|m| [m[0], m[1], m[2], m[3]]);
        let (little, nanos) = match magic {
            Some([0xd4, 0xc3, 0xb2, 0xa1]) => (true, false),
            Some([0xa1, 0xb2, 0xc3, 0xd4]) => (false, false),
            Some([0x4d, 0x3c, 0xb2, 0xa1]) => (true, true),
            Some([0xa1, 0xb2, 0x3c, 0x4d]) => (false, true),
            Some([0x0a, 0x0d, 0x0d, 0x0a]) => return Ok(r),
            _ => {
                return Err(CaptureError::UnknownFormat(
                    r.avail().iter().take(8).copied().collect(),
                ))
            }
        };
        r.little = little;
        let h = r.take(24, "pcap file header")?;
        let linktype = int32(&h[20..24], little) & 0x0fff_ffff;
        r.format = Format::Pcap { linktype, nanos };
        Ok(r)
    }

    /// Bytes read from the (decompressed) input so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn avail(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Makes at least `need` bytes available unless the input ends first. The buffer grows
    /// only as far as bytes actually come, so a damaged length field cannot make it huge.
    fn fill(&mut self, need: usize) -> Result<(), CaptureError> {
        if self.end - self.start >= need || self.eof {
            return Ok(());
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.end < need {
            if self.end == self.buf.len() {
                let grown = (self.buf.len() * 2).min(need.next_power_of_two());
                self.buf.resize(grown.max(self.end + 1), 0);
            }
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(CaptureError::Io {
                        offset: self.offset + self.end as u64,
                        why: e.to_string(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Whether the input has no byte left.
    fn at_end(&mut self) -> Result<bool, CaptureError> {
        self.fill(1)?;
        Ok(self.start == self.end)
    }

    /// Checks that `len` bytes are available at the cursor and returns them without consuming.
    fn peek(&mut self, len: usize, what: &'static str) -> Result<&[u8], CaptureError> {
        self.fill(len)?;
        let have = self.end - self.start;
        if have < len {
            return Err(CaptureError::Truncated {
                what,
                offset: self.offset,
                record: self.record,
                need: len,
                have,
            });
        }
        Ok(&self.buf[self.start..self.start + len])
    }

    /// Consumes `len` bytes and returns them.
    fn take(&mut self, len: usize, what: &'static str) -> Result<&[u8], CaptureError> {
        self.peek(len, what)?;
        let s = self.start;
        self.start += len;
        self.offset += len as u64;
        Ok(&self.buf[s..s + len])
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
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, CaptureError> {
        loop {
            if self.at_end()? {
                return Ok(None);
            }
            self.record += 1;
            let little = self.little;
            match &self.format {
                Format::Pcap { linktype, nanos } => {
                    let (linktype, nanos) = (*linktype, *nanos);
                    let at = self.offset;
                    let what = "pcap record header";
                    let h = self.peek(16, what)?;
                    let sec = u64::from(int32(&h[0..4], little));
                    let frac = u64::from(int32(&h[4..8], little));
                    let caplen = int32(&h[8..12], little) as usize;
                    let orig_len = int32(&h[12..16], little);
                    if caplen > MAX_RECORD {
                        return Err(self.malformed(
                            what,
                            at,
                            format!("captured length {caplen} is implausible"),
                        ));
                    }
                    self.peek(16 + caplen, "pcap packet data")?;
                    self.take(16, what)?;
                    self.frame += 1;
                    let frame = self.frame;
                    let data = self.take(caplen, "pcap packet data")?;
                    let ts_ns = sec * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
                    return Ok(Some(Record {
                        frame,
                        ts_ns,
                        linktype,
                        data,
                        orig_len,
                    }));
                }
                Format::Pcapng { .. } => {
                    if let Some(found) = self.pcapng_block()? {
                        let (frame, ts_ns, linktype, orig_len, from, len) = found;
                        return Ok(Some(Record {
                            frame,
                            ts_ns,
                            linktype,
                            data: &self.buf[from..from + len],
                            orig_len,
                        }));
                    }
                }
            }
        }
    }

    /// Reads one pcapng block; a packet block gives (frame, ns, linktype, orig_len, data
    /// start in `buf`, data length).
    #[allow(clippy::type_complexity)]
    fn pcapng_block(&mut self) -> Result<Option<(u64, u64, u32, u32, usize, usize)>, CaptureError> {
        let at = self.offset;
        let block = self.record;
        let what = "pcapng block header";
        let head = self.peek(8, what)?;
        if head[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
            // A section header sets the byte order of everything up to the next one.
            let magic = self.peek(12, "section header")?[8..12].to_vec();
            self.little = match magic[..] {
                [0x4d, 0x3c, 0x2b, 0x1a] => true,
                [0x1a, 0x2b, 0x3c, 0x4d] => false,
                _ => {
                    return Err(self.malformed(
                        "section header",
                        at,
                        format!("byte-order magic {magic:02x?}"),
                    ))
                }
            };
            if let Format::Pcapng { interfaces } = &mut self.format {
                interfaces.clear();
            }
        }
        let little = self.little;
        let head = self.peek(8, what)?;
        let kind = int32(&head[0..4], little);
        let len = int32(&head[4..8], little) as usize;
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
            return Err(self.malformed(what, at, format!("block length {len}: {wrong}")));
        }
        let whole = self.peek(len, "pcapng block body")?;
        let trailer = int32(&whole[len - 4..], little) as usize;
        if trailer != len {
            return Err(self.malformed(
                "pcapng block trailer",
                at + len as u64 - 4,
                format!("trailing length {trailer} differs from leading length {len}"),
            ));
        }
        let body_start = self.start + 8;
        let body_len = len - 12;
        self.start += len;
        self.offset += len as u64;
        let body = &self.buf[body_start..body_start + body_len];
        let short = |what: &'static str, need: usize| CaptureError::Truncated {
            what,
            offset: at + 8,
            record: block,
            need,
            have: body_len,
        };
        let Format::Pcapng { interfaces } = &mut self.format else {
            return Ok(None);
        };
        match kind {
            IDB => {
                if body.len() < 8 {
                    return Err(short("interface description", 8));
                }
                let linktype = u32::from(int16(&body[0..2], little));
                let mut units_per_sec = 1_000_000;
                // Options: code, length, value padded to 4.
                let mut o = 8;
                while o + 4 <= body.len() {
                    let code = int16(&body[o..], little);
                    let olen = usize::from(int16(&body[o + 2..], little));
                    if code == 0 {
                        break;
                    }
                    let Some(value) = body.get(o + 4..o + 4 + olen) else {
                        return Err(short("interface option", o + 4 + olen));
                    };
                    if code == 9 && olen >= 1 {
                        units_per_sec = tsresol(value[0]).ok_or(CaptureError::Malformed {
                            what: "if_tsresol option",
                            offset: at + 8 + o as u64,
                            record: block,
                            why: format!("resolution code {:#x} out of range", value[0]),
                        })?;
                    }
                    o += 4 + olen.div_ceil(4) * 4;
                }
                // Each costs a few bytes, but a hostile file can hold tens of millions of
                // them in kilobytes (compressed); no real capture has more than a few dozen.
                if interfaces.len() >= MAX_INTERFACES {
                    return Err(CaptureError::Malformed {
                        what: "interface description",
                        offset: at,
                        record: block,
                        why: format!(
                            "more than {MAX_INTERFACES} interfaces in one section: not a capture"
                        ),
                    });
                }
                interfaces.push(Interface {
                    linktype,
                    units_per_sec,
                });
                Ok(None)
            }
            EPB | OPB => {
                let what = "enhanced packet block";
                if body.len() < 20 {
                    return Err(short(what, 20));
                }
                let iface = if kind == EPB {
                    int32(&body[0..4], little) as usize
                } else {
                    usize::from(int16(&body[0..2], little))
                };
                let Some(i) = interfaces.get(iface).copied() else {
                    return Err(CaptureError::Malformed {
                        what,
                        offset: at,
                        record: block,
                        why: format!("interface {iface} was never described"),
                    });
                };
                let ts = u64::from(int32(&body[4..8], little)) << 32
                    | u64::from(int32(&body[8..12], little));
                let caplen = int32(&body[12..16], little) as usize;
                let orig_len = int32(&body[16..20], little);
                if body.len() - 20 < caplen {
                    return Err(short("packet data", 20 + caplen));
                }
                let ts_ns =
                    (u128::from(ts) * 1_000_000_000 / u128::from(i.units_per_sec.max(1))) as u64;
                self.frame += 1;
                Ok(Some((
                    self.frame,
                    ts_ns,
                    i.linktype,
                    orig_len,
                    body_start + 20,
                    caplen,
                )))
            }
            SPB => {
                let Some(i) = interfaces.first().copied() else {
                    return Err(CaptureError::Malformed {
                        what: "simple packet block",
                        offset: at,
                        record: block,
                        why: "no interface described before it".into(),
                    });
                };
                if body.len() < 4 {
                    return Err(short("simple packet block", 4));
                }
                let orig_len = int32(&body[0..4], little);
                let caplen = (body.len() - 4).min(orig_len as usize);
                self.frame += 1;
                Ok(Some((
                    self.frame,
                    0,
                    i.linktype,
                    orig_len,
                    body_start + 4,
                    caplen,
                )))
            }
            _ => Ok(None), // section header, statistics, name resolution, custom blocks
        }
    }
}

const IDB: u32 = 1;
const SPB: u32 = 3;
const EPB: u32 = 6;
const OPB: u32 = 2;

/// Interfaces a pcapng section may describe.
pub const MAX_INTERFACES: usize = 65_536;

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

impl fmt::Display for Record<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame {} ({} bytes)", self.frame, self.data.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record of an in-memory capture, owned.
    /// (ns, linktype, data, orig_len).
    type Owned = (u64, u32, Vec<u8>, u32);

    fn read(bytes: &[u8]) -> Result<Vec<Owned>, CaptureError> {
        let mut r = CaptureReader::new(bytes)?;
        let mut out = Vec::new();
        while let Some(rec) = r.next_record()? {
            out.push((rec.ts_ns, rec.linktype, rec.data.to_vec(), rec.orig_len));
        }
        Ok(out)
    }

    /// A pcapng section header, then a block of type 1 whose length field is `len`.
    fn block_of_length(len: u32) -> Vec<u8> {
        let mut v = vec![
            0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0,
        ];
        v.extend_from_slice(&[0xff; 8]);
        v.extend_from_slice(&28u32.to_le_bytes());
        v.extend_from_slice(&1u32.to_le_bytes());
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(&[0; 64]);
        v
    }

    #[test]
    fn a_bad_block_length_says_which_rule_it_breaks() {
        for (len, says) in [
            (8, "block length 8: less than the 12 bytes"),
            (22, "block length 22: not a multiple of 4"),
            (32 << 20, "block length 33554432: more than the 16 MiB"),
        ] {
            let err = read(&block_of_length(len)).unwrap_err().to_string();
            assert!(err.contains(says), "{len}: {err}");
        }
    }

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
        assert_eq!(r[0].0, 1_500_000_000);
        assert_eq!(r[0].2, b"abc");
        assert_eq!(r[0].1, 1);
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
        assert_eq!(r[0].0, 2_000_000_005);
        assert_eq!(r[0].1, 101);
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
        let mut file = block(0x0a0d_0d0a, &shb);
        file.extend(block(IDB, &idb));
        file.extend(block(EPB, &epb));
        let r = read(&file).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, 3_000_000_007);
        assert_eq!(r[0].1, 113);
        assert_eq!(r[0].2, b"xyz");
        assert_eq!(r[0].3, 60);
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
