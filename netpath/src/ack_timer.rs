//! A host whose delayed-ACK timer is longer than Linux's: the path holds the pure ACKs one
//! end sends, so that end behaves like a Windows (200 ms) or macOS (100 ms) receiver although
//! its kernel is this machine's Linux. Pure and deterministic (times are passed in), so it is
//! unit-tested without a clock or a namespace.
//!
//! The model is the rule those receivers follow (RFC 1122 4.2.3.2, RFC 9293 3.8.6.3): an ACK
//! is sent at once when at least two full segments are unacknowledged, and otherwise when the
//! delayed-ACK timer, started by the first unacknowledged segment, fires; data sent the other
//! way carries the ACK and cancels the timer. Linux's own receiver acknowledges sooner (a
//! quick ACK, or its 40 ms timer), so the path sees each of its pure ACKs and decides:
//!
//! - a packet with data, SYN, FIN or RST passes, and cancels any ACK held for its flow (it
//!   carries a later cumulative acknowledgement, as the host's own data would);
//! - a pure ACK passes when what it newly acknowledges (by its acknowledgement number) is
//!   two full segments (2 x MSS) or more, or nothing (a window update, a duplicate ACK);
//! - otherwise it is held until `delay` after the first data segment it acknowledges reached
//!   the host; a later pure ACK of the same flow replaces it and keeps that release time.
//!
//! Segments are matched to acknowledgements by sequence number, so data still on its way to
//! the host is never taken as acknowledged by a packet the host sent before it arrived.
//!
//! Invariant: a held ACK is released no later than `delay` after the first unacknowledged
//! segment reached the host, and never before Linux sent it.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

/// A TCP flow seen from the host whose ACKs are held: (host address, host port, other
/// address, other port).
pub(crate) type Flow = (Ipv4Addr, u16, Ipv4Addr, u16);

/// The fields of a TCP/IPv4 packet the model needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Source address and port.
    pub(crate) src: (Ipv4Addr, u16),
    /// Destination address and port.
    pub(crate) dst: (Ipv4Addr, u16),
    /// Payload bytes.
    pub(crate) payload: usize,
    /// SYN, FIN or RST set.
    pub(crate) control: bool,
    /// Sequence number.
    pub(crate) seq: u32,
    /// Acknowledgement number (`None` without the ACK flag).
    pub(crate) ack: Option<u32>,
}

impl Segment {
    /// Reads an IPv4 packet as a TUN device gives it (no link header); `None` for anything
    /// that is not a well-formed, unfragmented TCP/IPv4 packet. Never panics.
    pub(crate) fn parse(pkt: &[u8]) -> Option<Segment> {
        let ihl = usize::from(*pkt.first()? & 0x0f) * 4;
        if pkt[0] >> 4 != 4 || ihl < 20 || pkt.len() < ihl + 20 || pkt[9] != 6 {
            return None;
        }
        // Fields of the header, in network order (the lengths are checked above and below).
        let field = |b: &[u8], at: usize| -> [u8; 4] {
            b.get(at..)
                .and_then(<[u8]>::first_chunk)
                .copied()
                .unwrap_or_default()
        };
        let half = |b: &[u8], at: usize| -> u16 {
            b.get(at..)
                .and_then(<[u8]>::first_chunk)
                .map_or(0, |a| u16::from_be_bytes(*a))
        };
        let total = usize::from(half(pkt, 2));
        let tcp = pkt.get(ihl..total.min(pkt.len()))?;
        let doff = usize::from(tcp.get(12)? >> 4) * 4;
        if doff < 20 || tcp.len() < doff {
            return None;
        }
        let word = |at: usize| u32::from_be_bytes(field(tcp, at));
        Some(Segment {
            seq: word(4),
            // ACK 0x10.
            ack: (tcp[13] & 0x10 != 0).then(|| word(8)),
            src: (Ipv4Addr::from(field(pkt, 12)), half(tcp, 0)),
            dst: (Ipv4Addr::from(field(pkt, 16)), half(tcp, 2)),
            payload: tcp.len() - doff,
            // FIN 0x01, SYN 0x02, RST 0x04.
            control: tcp[13] & 0x07 != 0,
        })
    }

    /// The flow, seen from the sender of this segment.
    fn senders_view(&self) -> Flow {
        (self.src.0, self.src.1, self.dst.0, self.dst.1)
    }

    /// The flow, seen from the receiver of this segment.
    fn receivers_view(&self) -> Flow {
        (self.dst.0, self.dst.1, self.src.0, self.src.1)
    }
}

/// What becomes of a packet the host sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// It goes on now; any ACK held for its flow is dropped (this packet supersedes it).
    Pass,
    /// A pure ACK to hold until this time (replacing one already held for the flow).
    Hold(Duration),
}

/// One flow's state at the host.
#[derive(Debug, Default)]
struct FlowState {
    /// Segments sent to the host and not yet acknowledged by a packet it sent: (end of the
    /// segment's sequence range, when it reaches the host, payload bytes, FIN), in order.
    waiting: std::collections::VecDeque<(u32, Duration, usize, bool)>,
    /// What the ACK the path holds for this flow acknowledges, until a packet of the flow
    /// leaves: (when the first of it reached the host, payload bytes).
    held: Option<(Duration, usize)>,
}

/// Segments waiting per flow at most (older ones count as acknowledged).
const MAX_WAITING: usize = 256;

/// `a` at or before `b` in sequence space.
fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < 1 << 31
}

/// The timer of one host, over all its flows.
#[derive(Debug)]
pub(crate) struct AckTimer {
    delay: Duration,
    mss: usize,
    flows: HashMap<Flow, FlowState>,
}

/// Flows remembered at most; beyond, the table starts again (a held ACK then passes early).
const MAX_FLOWS: usize = 4096;

impl AckTimer {
    /// A host that delays its ACKs up to `delay`, with segments of `mss` payload bytes.
    pub(crate) fn new(delay: Duration, mss: usize) -> AckTimer {
        AckTimer {
            delay,
            mss: mss.max(1),
            flows: HashMap::new(),
        }
    }

    /// A segment will reach the host at `at`.
    pub(crate) fn reaches_host(&mut self, seg: &Segment, at: Duration) {
        if seg.payload == 0 && !seg.control {
            return;
        }
        if self.flows.len() >= MAX_FLOWS {
            self.flows.clear();
        }
        let w = &mut self.flows.entry(seg.receivers_view()).or_default().waiting;
        if w.len() >= MAX_WAITING {
            w.pop_front();
        }
        // SYN and FIN take a sequence number each; an acknowledgement of a FIN (or SYN)
        // leaves at once.
        let len = seg.payload as u32 + u32::from(seg.control);
        w.push_back((seg.seq.wrapping_add(len), at, seg.payload, seg.control));
    }

    /// The host sent `seg`, seen by the path at `now`.
    pub(crate) fn host_sent(&mut self, seg: &Segment, now: Duration) -> Decision {
        let pure_ack = seg.payload == 0 && !seg.control;
        let Some(ack) = seg.ack else {
            return Decision::Pass;
        };
        let flow = seg.senders_view();
        let Some(f) = self.flows.get_mut(&flow) else {
            return Decision::Pass;
        };
        // What this packet newly acknowledges, with what the held ACK acknowledged.
        let (mut since, mut bytes) = f.held.map_or((None, 0), |(s, b)| (Some(s), b));
        let mut control = false;
        while let Some(&(end, at, len, ctl)) = f.waiting.front() {
            if !seq_le(end, ack) {
                break;
            }
            since = Some(since.map_or(at, |s: Duration| s.min(at)));
            bytes += len;
            control |= ctl;
            f.waiting.pop_front();
        }
        match since {
            Some(since) if pure_ack && !control && bytes < 2 * self.mss => {
                f.held = Some((since, bytes));
                Decision::Hold((since + self.delay).max(now))
            }
            _ => {
                f.held = None;
                if seg.control {
                    // The host closes or resets: nothing of this flow waits any more.
                    self.flows.remove(&flow);
                }
                Decision::Pass
            }
        }
    }

    /// The ACK held for `seg`'s flow (a packet the host sent) left at its timer.
    pub(crate) fn released(&mut self, seg: &Segment) {
        if let Some(f) = self.flows.get_mut(&seg.senders_view()) {
            f.held = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 0, 0, 2), 179);
    const OTHER: (Ipv4Addr, u16) = (Ipv4Addr::new(10, 0, 0, 1), 40000);

    /// One flow: the other end's next sequence number (close to the wrap).
    struct Conv {
        next: u32,
        port: u16,
    }

    impl Conv {
        fn new() -> Conv {
            Conv {
                next: u32::MAX - 100,
                port: OTHER.1,
            }
        }

        /// A segment of `len` bytes to the host.
        fn send(&mut self, len: usize) -> Segment {
            let seq = self.next;
            self.next = self.next.wrapping_add(len as u32);
            Segment {
                src: (OTHER.0, self.port),
                dst: HOST,
                payload: len,
                control: false,
                seq,
                ack: Some(0),
            }
        }

        /// A packet from the host acknowledging everything sent so far (less `behind`).
        fn reply(&self, payload: usize, control: bool, behind: u32) -> Segment {
            Segment {
                src: HOST,
                dst: (OTHER.0, self.port),
                payload,
                control,
                seq: 0,
                ack: Some(self.next.wrapping_sub(behind)),
            }
        }

        fn ack(&self) -> Segment {
            self.reply(0, false, 0)
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_lone_small_segment_is_acknowledged_at_the_timer() {
        let (mut t, mut c) = (AckTimer::new(ms(200), 1448), Conv::new());
        t.reaches_host(&c.send(19), ms(10));
        // Linux's own delayed ACK at 40 ms is held to 200 ms after the data arrived.
        assert_eq!(t.host_sent(&c.ack(), ms(50)), Decision::Hold(ms(210)));
        // A later pure ACK (a window update) while it is held takes its place and its time.
        assert_eq!(t.host_sent(&c.ack(), ms(60)), Decision::Hold(ms(210)));
        // Once it left, nothing waits: the next window update passes.
        t.released(&c.ack());
        assert_eq!(t.host_sent(&c.ack(), ms(250)), Decision::Pass);
    }

    #[test]
    fn two_full_segments_are_acknowledged_at_once() {
        let (mut t, mut c) = (AckTimer::new(ms(200), 1448), Conv::new());
        t.reaches_host(&c.send(1448), ms(1));
        t.reaches_host(&c.send(1448), ms(2));
        assert_eq!(t.host_sent(&c.ack(), ms(2)), Decision::Pass);
        t.reaches_host(&c.send(1448), ms(3));
        assert_eq!(t.host_sent(&c.ack(), ms(3)), Decision::Hold(ms(203)));
    }

    #[test]
    fn data_from_the_host_carries_the_ack() {
        let (mut t, mut c) = (AckTimer::new(ms(100), 1448), Conv::new());
        t.reaches_host(&c.send(100), ms(0));
        assert_eq!(t.host_sent(&c.reply(50, false, 0), ms(5)), Decision::Pass);
        // The data acknowledged everything: the next pure ACK has nothing to wait for.
        assert_eq!(t.host_sent(&c.ack(), ms(6)), Decision::Pass);
        t.reaches_host(&c.send(1), ms(7));
        assert_eq!(t.host_sent(&c.reply(0, true, 0), ms(8)), Decision::Pass);
    }

    #[test]
    fn a_packet_sent_before_data_arrived_does_not_acknowledge_it() {
        let (mut t, mut c) = (AckTimer::new(ms(200), 1448), Conv::new());
        // BGP: the peer's KEEPALIVE leaves while BIRD's is still on its way to it.
        t.reaches_host(&c.send(19), ms(10));
        assert_eq!(t.host_sent(&c.reply(19, false, 19), ms(9)), Decision::Pass);
        // The ACK of BIRD's KEEPALIVE is still the peer's timer's.
        assert_eq!(t.host_sent(&c.ack(), ms(50)), Decision::Hold(ms(210)));
    }

    #[test]
    fn the_timer_runs_from_the_first_waiting_segment() {
        let (mut t, mut c) = (AckTimer::new(ms(200), 1448), Conv::new());
        t.reaches_host(&c.send(10), ms(100));
        t.reaches_host(&c.send(10), ms(150));
        assert_eq!(t.host_sent(&c.ack(), ms(160)), Decision::Hold(ms(300)));
        // An ACK Linux sends after the timer would have fired is not held longer.
        t.reaches_host(&c.send(10), ms(400));
        assert_eq!(t.host_sent(&c.ack(), ms(700)), Decision::Hold(ms(700)));
    }

    #[test]
    fn a_held_ack_counts_towards_two_full_segments() {
        // Linux acknowledges each segment of a first flight; a Windows host would acknowledge
        // the second at once.
        let (mut t, mut c) = (AckTimer::new(ms(200), 1448), Conv::new());
        t.reaches_host(&c.send(1448), ms(1));
        assert_eq!(t.host_sent(&c.ack(), ms(1)), Decision::Hold(ms(201)));
        t.reaches_host(&c.send(1448), ms(2));
        assert_eq!(t.host_sent(&c.ack(), ms(2)), Decision::Pass);
        // After the held ACK left at its timer, counting starts again.
        t.reaches_host(&c.send(100), ms(3));
        assert_eq!(t.host_sent(&c.ack(), ms(3)), Decision::Hold(ms(203)));
        t.released(&c.ack());
        t.reaches_host(&c.send(100), ms(300));
        assert_eq!(t.host_sent(&c.ack(), ms(300)), Decision::Hold(ms(500)));
    }

    #[test]
    fn a_fin_is_acknowledged_at_once() {
        let (mut t, mut c) = (AckTimer::new(ms(200), 1448), Conv::new());
        let mut fin = c.send(10);
        fin.control = true;
        c.next = c.next.wrapping_add(1);
        t.reaches_host(&fin, ms(1));
        assert_eq!(t.host_sent(&c.ack(), ms(2)), Decision::Pass);
    }

    #[test]
    fn flows_are_apart() {
        let mut t = AckTimer::new(ms(200), 1448);
        let (mut c, mut d) = (Conv::new(), Conv::new());
        d.port += 1;
        t.reaches_host(&c.send(10), ms(0));
        d.send(0);
        assert_eq!(t.host_sent(&d.ack(), ms(40)), Decision::Pass);
        assert_eq!(t.host_sent(&c.ack(), ms(40)), Decision::Hold(ms(200)));
    }

    #[test]
    fn parse_reads_tcp_over_ipv4_and_refuses_the_rest() {
        // IPv4, IHL 5, total 40 + 3, TCP, 10.0.0.1 -> 10.0.0.2, ports 40000 -> 179, doff 5,
        // flags ACK|PSH, 3 bytes of payload.
        let mut p = vec![
            0x45, 0, 0, 43, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        p.extend_from_slice(&40000u16.to_be_bytes());
        p.extend_from_slice(&179u16.to_be_bytes());
        p.extend_from_slice(&[0; 8]);
        p.extend_from_slice(&[0x50, 0x18, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(b"abc");
        let s = Segment::parse(&p).unwrap();
        assert_eq!(s.src, (Ipv4Addr::new(10, 0, 0, 1), 40000));
        assert_eq!(s.dst, (Ipv4Addr::new(10, 0, 0, 2), 179));
        assert_eq!((s.payload, s.control, s.ack), (3, false, Some(0)));
        let mut syn = p.clone();
        syn[33] = 0x02;
        assert!(Segment::parse(&syn).unwrap().control);
        let mut udp = p.clone();
        udp[9] = 17;
        assert_eq!(Segment::parse(&udp), None);
        for cut in 0..40 {
            assert_eq!(Segment::parse(&p[..cut]), None, "cut at {cut}");
        }
        assert_eq!(Segment::parse(&[0x60; 60]), None);
    }
}
