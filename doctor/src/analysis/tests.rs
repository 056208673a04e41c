//! The analysis end to end, on conversations built segment by segment as seen from one point
//! of the path.

use std::net::{IpAddr, Ipv4Addr};

use super::{analyse, CapturePoint, Pattern};
use crate::packet::{flags, Segment};
use crate::rule::AckTimer;

const C: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::LOCALHOST), 40000);
const S: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::LOCALHOST), 8000);

/// Builds a conversation as seen from one point of the path.
struct Conv {
    segs: Vec<(u64, u64, Segment)>,
    seq: [u32; 2],
    /// Client and server.
    ends: [(IpAddr, u16); 2],
    /// Each side's next IP identification (Linux numbers a connection's packets one by one).
    ids: [u16; 2],
}

impl Conv {
    fn new() -> Conv {
        Conv::with_rtt(0.01)
    }

    /// A handshake seen from the client, with `rtt` ms to the server.
    fn with_rtt(rtt: f64) -> Conv {
        Conv::seen_from(rtt, 0.01)
    }

    /// A handshake seen at a point `client_side` ms (round trip) from the client and
    /// `server_side` ms from the server.
    fn seen_from(server_side: f64, client_side: f64) -> Conv {
        Conv::handshake(server_side, client_side, [1460, 1460])
    }

    /// A handshake as [`Conv::seen_from`], with the MSS each side's SYN announces.
    fn handshake(server_side: f64, client_side: f64, mss: [u16; 2]) -> Conv {
        let mut c = Conv {
            segs: Vec::new(),
            seq: [1000, 5000],
            ends: [C, S],
            ids: [100, 30_000],
        };
        c.push(0.0, 0, 0, flags::SYN, Some(mss[0]));
        c.seq[0] += 1;
        c.push(server_side, 1, 0, flags::SYN | flags::ACK, Some(mss[1]));
        c.seq[1] += 1;
        c.push(server_side + client_side, 0, 0, flags::ACK, None);
        c
    }

    fn push(&mut self, ms: f64, side: usize, len: u32, fl: u8, mss: Option<u16>) {
        let (src, dst) = (self.ends[side], self.ends[1 - side]);
        let seg = Segment {
            src,
            dst,
            seq: self.seq[side],
            ack: self.seq[1 - side],
            flags: fl,
            len,
            mss,
            window: 1000,
            wscale: None,
            opt_len: 12,
            sack: false,
            sack_first: None,
            ts: None,
            ttl: 64,
            ip_id: Some(self.ids[side]),
            head: Default::default(),
        };
        self.ids[side] = self.ids[side].wrapping_add(1);
        self.seq[side] = self.seq[side].wrapping_add(len);
        let frame = self.segs.len() as u64 + 1;
        self.segs.push((frame, (ms * 1e6) as u64, seg));
    }

    fn data(&mut self, ms: f64, side: usize, len: u32) -> &mut Self {
        self.push(ms, side, len, flags::ACK, None);
        self
    }

    fn ack(&mut self, ms: f64, side: usize) -> &mut Self {
        self.push(ms, side, 0, flags::ACK, None);
        self
    }

    fn last_mut(&mut self) -> &mut Segment {
        &mut self.segs.last_mut().unwrap().2
    }
}

/// A segment of no flow in particular, for unit tests that set the fields they look at.
pub(crate) fn segment_for_tests() -> Segment {
    Segment {
        src: C,
        dst: S,
        seq: 1,
        ack: 1,
        flags: flags::ACK,
        len: 100,
        mss: None,
        window: 1000,
        wscale: None,
        opt_len: 0,
        sack: false,
        sack_first: None,
        ts: None,
        ttl: 64,
        ip_id: None,
        head: Default::default(),
    }
}

mod budget;
mod glue;
mod mid_connection;
mod stalls;
mod waits;
