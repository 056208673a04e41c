//! From a captured frame to the TCP facts the analysis needs: link layer (Ethernet with
//! VLAN tags, Linux cooked v1 and v2, raw IP, BSD loopback/null), IPv4 or IPv6, TCP header.
//!
//! Checked views over untrusted bytes that never panic. The payload length comes from the IP
//! header, not from the captured bytes, so headers-only captures (short snap length) work.
//! Anything that is not TCP, or is an IP fragment, reads as `None` (a fragment of a TCP
//! packet is told apart: `is_tcp_fragment`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bytes::{be16, be32};
use crate::capture::LinkType;

/// TCP flags we look at.
pub(crate) mod flags {
    /// FIN.
    pub(crate) const FIN: u8 = 0x01;
    /// SYN.
    pub(crate) const SYN: u8 = 0x02;
    /// RST.
    pub(crate) const RST: u8 = 0x04;
    /// ACK.
    pub(crate) const ACK: u8 = 0x10;
}

/// One TCP segment as seen on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Source address and port.
    pub src: (IpAddr, u16),
    /// Destination address and port.
    pub dst: (IpAddr, u16),
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (valid when the ACK flag is set).
    pub ack: u32,
    /// The flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10).
    pub flags: u8,
    /// Payload bytes, from the IP length.
    pub len: u32,
    /// MSS option value, if the segment carries one (SYN).
    pub mss: Option<u16>,
    /// Window field, unscaled.
    pub window: u16,
    /// Window scale option (SYN).
    pub wscale: Option<u8>,
    /// Bytes of TCP options (header length beyond 20): a full segment carries MSS minus these.
    pub opt_len: u8,
    /// The segment carries SACK blocks (the receiver is missing data).
    pub sack: bool,
    /// Its first SACK block (left and right edge): below the ACK number, a D-SACK (RFC 2883),
    /// saying bytes sent again had come already.
    pub sack_first: Option<(u32, u32)>,
    /// Timestamps option: (TSval, TSecr).
    pub ts: Option<(u32, u32)>,
    /// IPv4 TTL or IPv6 hop limit: a packet seen with the value its sender's system starts
    /// from (64, 128 or 255) crossed no router before the capture point.
    pub ttl: u8,
    /// IPv4 identification (none for IPv6): Linux numbers a connection's packets one by one
    /// (a segmentation-offload packet takes one number per segment), so a number skipped
    /// says a packet of the connection was lost before the capture point.
    pub ip_id: Option<u16>,
    /// The payload's first bytes, as far as they were captured.
    pub head: Head,
}

/// A payload's first bytes, as far as they were captured: enough to tell a TLS record's
/// header (content type and version).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Head {
    bytes: [u8; 3],
    len: u8,
}

impl Head {
    /// TLS content type of a handshake record.
    pub const TLS_HANDSHAKE: u8 = 0x16;
    /// TLS content type of an application-data record (every TLS 1.3 record after the
    /// ServerHello).
    pub const TLS_APPLICATION_DATA: u8 = 0x17;

    /// The first bytes of `payload`.
    pub fn of(payload: &[u8]) -> Head {
        let mut bytes = [0u8; 3];
        let len = payload.len().min(3);
        bytes[..len].copy_from_slice(&payload[..len]);
        Head {
            bytes,
            len: len as u8,
        }
    }

    /// Whether the payload starts with a TLS record header of content type `kind` (version
    /// 3.1-3.4, as every TLS 1.x record says).
    pub fn is_tls_record(self, kind: u8) -> bool {
        self.len == 3 && self.bytes[0] == kind && self.bytes[1] == 3 && self.bytes[2] <= 4
    }
}

/// Decodes a frame of link type `linktype` that was `wire_len` bytes long on the wire.
pub(crate) fn decode(linktype: LinkType, frame: &[u8], wire_len: u32) -> Option<Segment> {
    let ip = ip_of(linktype, frame)?;
    // The IP packet's length on the wire: the frame's, less the link header.
    let link_header = frame.len() - ip.len();
    let ip_wire_len = usize::try_from(wire_len)
        .unwrap_or(usize::MAX)
        .saturating_sub(link_header);
    decode_ip(ip, ip_wire_len)
}

/// Whether a frame [`decode`] read no segment from is a fragment of an IP packet that carries
/// TCP (the doctor does not reassemble them: their bytes are missing from its flows).
pub(crate) fn is_tcp_fragment(linktype: LinkType, frame: &[u8]) -> bool {
    let Some(ip) = ip_of(linktype, frame) else {
        return false;
    };
    match ip.first().map(|b| b >> 4) {
        Some(4) => ip.get(9) == Some(&6) && be16(ip, 6).is_some_and(|f| f & 0x3fff != 0),
        // A fragment header (44) right after the fixed header, of a TCP packet.
        Some(6) => ip.get(6) == Some(&44) && ip.get(40) == Some(&6),
        _ => false,
    }
}

/// The IP packet in a frame of link type `linktype` (`None`: no IP, or a link type not read).
fn ip_of(linktype: LinkType, frame: &[u8]) -> Option<&[u8]> {
    Some(match linktype {
        LinkType::Ethernet => {
            let mut et = be16(frame, 12)?;
            let mut at = 14;
            while et == 0x8100 || et == 0x88a8 {
                et = be16(frame, at + 2)?;
                at += 4;
            }
            frame.get(at..).filter(|_| et == 0x0800 || et == 0x86dd)?
        }
        LinkType::LinuxSll => {
            let et = be16(frame, 14)?;
            frame.get(16..).filter(|_| et == 0x0800 || et == 0x86dd)?
        }
        LinkType::LinuxSll2 => {
            let et = be16(frame, 0)?;
            frame.get(20..).filter(|_| et == 0x0800 || et == 0x86dd)?
        }
        LinkType::Null | LinkType::Loop => frame.get(4..)?,
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => frame,
        LinkType::Other(_) => return None,
    })
}

/// Decodes an IP packet `wire_len` bytes long on the wire. An IP length of 0 is read as
/// segmentation offload (TSO/GSO: a sender-side capture sees the large segment before the
/// NIC cuts it, its length field left 0, as Wireshark reports it): the length is the
/// packet's on the wire.
fn decode_ip(ip: &[u8], wire_len: usize) -> Option<Segment> {
    match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = match usize::from(be16(ip, 2)?) {
                0 => wire_len,
                n => n,
            };
            let frag = be16(ip, 6)?;
            if *ip.get(9)? != 6 || frag & 0x3fff != 0 || ihl < 20 || total < ihl {
                return None;
            }
            let src = Ipv4Addr::from(be32(ip, 12)?);
            let dst = Ipv4Addr::from(be32(ip, 16)?);
            let id = be16(ip, 4)?;
            tcp(
                ip.get(ihl..)?,
                total - ihl,
                src.into(),
                dst.into(),
                *ip.get(8)?,
            )
            .map(|s| Segment {
                ip_id: Some(id),
                ..s
            })
        }
        6 => {
            let payload = match usize::from(be16(ip, 4)?) {
                0 => wire_len.checked_sub(40)?,
                n => n,
            };
            let mut next = *ip.get(6)?;
            let hop_limit = *ip.get(7)?;
            let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            let mut at = 40;
            // Hop-by-hop, routing and destination options headers.
            while matches!(next, 0 | 43 | 60) {
                let len = (usize::from(*ip.get(at + 1)?) + 1) * 8;
                next = *ip.get(at)?;
                at += len;
            }
            if next != 6 {
                return None;
            }
            let tcp_len = (40 + payload).checked_sub(at)?;
            tcp(
                ip.get(at..)?,
                tcp_len,
                Ipv6Addr::from(src).into(),
                Ipv6Addr::from(dst).into(),
                hop_limit,
            )
        }
        _ => None,
    }
}

fn tcp(t: &[u8], tcp_len: usize, src: IpAddr, dst: IpAddr, ttl: u8) -> Option<Segment> {
    let doff = usize::from(*t.get(12)? >> 4) * 4;
    if doff < 20 || tcp_len < doff {
        return None;
    }
    let flags = *t.get(13)?;
    let (mut mss, mut wscale, mut sack, mut ts) = (None, None, false, None);
    let mut sack_first = None;
    // Options, as far as they were captured: a short snap length hides some, never breaks.
    let mut o = 20;
    while o < doff {
        let Some(kind) = t.get(o).copied() else { break };
        match kind {
            0 => break,
            1 => {
                o += 1;
                continue;
            }
            _ => {}
        }
        let Some(len) = t.get(o + 1).map(|&l| usize::from(l)) else {
            break;
        };
        match (kind, len) {
            (2, 4) if flags & flags::SYN != 0 => mss = be16(t, o + 2),
            (3, 3) if flags & flags::SYN != 0 => wscale = t.get(o + 2).map(|&w| w.min(14)),
            (5, _) => {
                sack = len >= 10;
                if sack {
                    sack_first = be32(t, o + 2).zip(be32(t, o + 6));
                }
            }
            (8, 10) => ts = be32(t, o + 2).zip(be32(t, o + 6)),
            _ => {}
        }
        o += len.max(2);
    }
    Some(Segment {
        src: (src, be16(t, 0)?),
        dst: (dst, be16(t, 2)?),
        seq: be32(t, 4)?,
        ack: be32(t, 8)?,
        flags,
        len: (tcp_len - doff) as u32,
        mss,
        window: be16(t, 14)?,
        wscale,
        opt_len: (doff - 20) as u8,
        sack,
        sack_first,
        ts,
        ttl,
        ip_id: None,
        // (What was captured of the payload, padding after it left out.)
        head: Head::of(t.get(doff..t.len().min(tcp_len)).unwrap_or_default()),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An IPv4 TCP packet 10.0.0.1 -> 10.0.0.2 (seq 7, ack 9) declaring `payload` bytes of
    /// payload, none of them captured.
    fn ipv4_tcp(sport: u16, dport: u16, fl: u8, payload: u16) -> Vec<u8> {
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip[2..4].copy_from_slice(&(40 + payload).to_be_bytes());
        ip.extend_from_slice(&sport.to_be_bytes());
        ip.extend_from_slice(&dport.to_be_bytes());
        ip.extend_from_slice(&7u32.to_be_bytes());
        ip.extend_from_slice(&9u32.to_be_bytes());
        ip.extend_from_slice(&[0x50, fl, 0xff, 0xff, 0, 0, 0, 0]);
        ip
    }

    #[test]
    fn a_fragment_of_a_tcp_packet_is_told_apart() {
        let mut first = ipv4_tcp(1234, 80, flags::ACK, 100);
        first[6] = 0x20; // more fragments, offset 0
        let mut later = ipv4_tcp(1234, 80, flags::ACK, 100);
        later[6..8].copy_from_slice(&0x00b9u16.to_be_bytes()); // the last, at offset 1480
        let whole = ipv4_tcp(1234, 80, flags::ACK, 100);
        for f in [&first, &later] {
            assert_eq!(decode(LinkType::Raw, f, 140), None);
            assert!(is_tcp_fragment(LinkType::Raw, f));
        }
        assert!(!is_tcp_fragment(LinkType::Raw, &whole));
        let mut udp = later.clone();
        udp[9] = 17;
        assert!(!is_tcp_fragment(LinkType::Raw, &udp));
        // IPv6: a fragment header (44) whose next header is TCP.
        let mut ip6 = vec![0x60, 0, 0, 0, 0, 28, 44, 64];
        ip6.extend_from_slice(&[0; 32]);
        ip6.extend_from_slice(&[6, 0, 0, 1, 0, 0, 0, 7]);
        ip6.extend_from_slice(&[0; 20]);
        assert!(is_tcp_fragment(LinkType::Raw, &ip6));
        assert!(!is_tcp_fragment(LinkType::Ethernet, &[0; 5]));
    }

    #[test]
    fn every_link_type_reaches_the_same_segment() {
        let ip = ipv4_tcp(1234, 80, flags::ACK, 100);
        let mut eth = vec![0; 12];
        eth.extend_from_slice(&[0x81, 0x00, 0, 1, 0x08, 0x00]); // one VLAN tag
        eth.extend_from_slice(&ip);
        let mut sll = vec![0; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0; 18]);
        sll2.extend_from_slice(&ip);
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&ip);
        let want = decode(LinkType::Raw, &ip, 140).unwrap();
        assert_eq!(
            want.len, 100,
            "payload length from the IP header, none captured"
        );
        assert_eq!(want.src.1, 1234);
        for (n, f) in [
            (1, eth),
            (113, sll),
            (276, sll2),
            (0, null),
            (12, ip.clone()),
        ] {
            let wire = 140 + (f.len() - ip.len()) as u32;
            assert_eq!(
                decode(LinkType::of(n), &f, wire),
                Some(want),
                "linktype {n}"
            );
        }
        assert_eq!(
            decode(LinkType::of(147), &ip, 140),
            None,
            "a link type not read"
        );
    }

    #[test]
    fn ipv6_and_non_tcp() {
        let mut ip6 = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
        ip6.extend_from_slice(&[0; 15]);
        ip6.push(1);
        ip6.extend_from_slice(&[0; 15]);
        ip6.push(1);
        ip6.extend_from_slice(&[
            0x1f, 0x90, 0x04, 0xd2, 0, 0, 0, 1, 0, 0, 0, 2, 0x50, 0x12, 0, 0, 0, 0, 0, 0,
        ]);
        let s = decode(LinkType::Raw, &ip6, 60).unwrap();
        assert_eq!(s.src.1, 8080);
        assert_eq!(s.len, 0);
        assert_eq!(s.flags, 0x12);
        let mut udp = ipv4_tcp(1, 2, 0, 0);
        udp[9] = 17;
        assert_eq!(decode(LinkType::Raw, &udp, 40), None);
        assert!(!is_tcp_fragment(LinkType::Raw, &udp));
        assert_eq!(decode(LinkType::Ethernet, &[0; 5], 5), None);
    }

    /// A sender-side capture of a segmentation-offload segment: IP length 0, the segment's
    /// length from the frame's on the wire (its payload need not be captured).
    #[test]
    fn an_offloaded_segment_counts_its_length_on_the_wire() {
        let mut ip = ipv4_tcp(1234, 80, flags::ACK, 0);
        ip[2..4].copy_from_slice(&[0, 0]);
        let mut eth = vec![0; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&ip);
        let s = decode(LinkType::Ethernet, &eth, 14 + 40 + 4096).unwrap();
        assert_eq!(s.len, 4096);
        assert_eq!(decode(LinkType::Raw, &ip, 40 + 4000).unwrap().len, 4000);

        let mut ip6 = vec![0x60, 0, 0, 0, 0, 0, 6, 64];
        ip6.extend_from_slice(&[0; 32]);
        ip6.extend_from_slice(&ip[20..]);
        assert_eq!(
            decode(LinkType::Raw, &ip6, 40 + 20 + 9000).unwrap().len,
            9000
        );
        // A frame whose wire length does not even hold the headers is not a segment.
        assert_eq!(decode(LinkType::Raw, &ip, 30), None);
    }
}
