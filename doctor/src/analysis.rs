//! Per-flow analysis: delayed ACKs, Nagle holds, and the stalls they make together.
//!
//! Rules, applied to each direction of each TCP flow in capture order:
//! - **Delayed ACK**: a pure ACK that arrives 30 ms or more (beyond the fastest ACK seen for
//!   that sender, which stands for the round trip from the capture point) after the data it
//!   acknowledges.
//! - **Nagle hold** (a stall): a sub-MSS data segment that leaves right after a pure ACK that
//!   covered all of its sender's outstanding data, the sender having been silent for 30 ms or
//!   more (again beyond the round trip) since its previous data segment, and the peer having
//!   sent no data meanwhile. That is the write-write-read and tiny-tail signature: the bytes
//!   were written, Nagle held them for the ACK, and the ACK was delayed.
//!
//! Bulk transfers (no silence), long round trips (subtracted) and think time (the peer's
//! reply data, not a pure ACK, comes first) raise no alarm.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use crate::packet::{flags, Segment};

/// Delays at or beyond this count as delayed ACK / stall, µs.
pub const STALL_US: u64 = 30_000;

/// The shape of a held write, where the evidence allows naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// The client sent a request as two or more writes.
    RequestSplit,
    /// The server sent a response as a header and then a body.
    HeaderThenBody,
    /// A tiny frame (16 bytes or less) trailed a larger one.
    TinyTrailingFrame,
    /// A small write followed another small write; no finer name fits.
    SmallWrites,
}

impl Pattern {
    fn describe(self) -> &'static str {
        match self {
            Pattern::RequestSplit => "sends each request as two or more writes",
            Pattern::HeaderThenBody => "sends each response as a header write then a body write",
            Pattern::TinyTrailingFrame => "sends a tiny trailing frame after each message",
            Pattern::SmallWrites => "sends small writes back to back",
        }
    }
}

/// A frame in the capture, for people to find in Wireshark.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct At {
    /// Frame number (1-based).
    pub frame: u64,
    /// Seconds since the first frame of the capture.
    pub time_s: f64,
}

/// One stall: a write held by Nagle until a delayed ACK released it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stall {
    /// The side whose write was held: its address.
    pub sender: String,
    /// The sender's previous data segment (the one Nagle waited to see acknowledged).
    pub previous: At,
    /// The delayed pure ACK that released the write.
    pub ack: At,
    /// The held segment.
    pub held: At,
    /// Payload bytes of the held segment.
    pub held_len: u32,
    /// Time the write waited, beyond the round trip, µs.
    pub stalled_us: u64,
    /// The named pattern.
    pub pattern: Pattern,
}

/// A pure ACK sent 30 ms or more after the data it acknowledges.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DelayedAck {
    /// The side that delayed: its address.
    pub acker: String,
    /// The ACK.
    pub ack: At,
    /// The data segment it acknowledged last.
    pub data: At,
    /// Delay beyond the round trip, µs.
    pub delay_us: u64,
}

/// Per-direction counters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Side {
    /// Address and port.
    pub addr: String,
    /// Data segments sent.
    pub data_segments: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Mean payload per data segment.
    pub mean_payload: f64,
    /// Pure ACKs sent.
    pub pure_acks: u64,
    /// Delayed ACKs sent.
    pub delayed_acks: u64,
    /// Stalls of this side's writes.
    pub stalls: u64,
}

/// What the doctor found in one flow.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowReport {
    /// 1-based index in capture order (for `--flow`).
    pub index: usize,
    /// Client (SYN sender, or first sender) and server.
    pub sides: [Side; 2],
    /// Frames in the flow.
    pub packets: u64,
    /// Changes of the data direction (request/response turns).
    pub exchanges: u64,
    /// First to last frame, s.
    pub duration_s: f64,
    /// Stalls found.
    pub stalls: Vec<Stall>,
    /// Sum of the stalls, s.
    pub stalled_s: f64,
    /// Stalled time as a share of the flow's duration.
    pub stalled_share: f64,
    /// Delayed ACKs found (with or without a stall).
    pub delayed_acks: Vec<DelayedAck>,
    /// Verdict and advice for people.
    pub verdict: Vec<String>,
    /// Every segment (µs since the capture's first frame, side, payload, pure ACK), for the
    /// timeline.
    #[serde(skip)]
    pub timeline: Vec<(u64, usize, u32, bool)>,
}

#[derive(Default)]
struct Dir {
    /// Highest sequence end sent with data.
    nxt: Option<u32>,
    /// Unacknowledged data segments: (sequence end, µs, frame).
    unacked: VecDeque<(u32, u64, u64)>,
    /// Last data segment: (µs, frame, payload, sent after the peer's latest data?).
    last: Option<(u64, u64, u32, bool)>,
    /// A pure ACK from the peer that covered everything we had sent: (µs, frame, delay).
    release: Option<(u64, u64, u64)>,
    /// Fastest data-to-ACK time seen for our data: the round trip from the capture point.
    base_us: Option<u64>,
    mss: Option<u32>,
}

fn seq_le(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

struct Flow {
    index: usize,
    /// Time of the capture's first frame: frame times are reported relative to it.
    origin_us: u64,
    dirs: [Dir; 2],
    sides: [Side; 2],
    packets: u64,
    exchanges: u64,
    last_sender: Option<usize>,
    first_us: u64,
    last_us: u64,
    stalls: Vec<Stall>,
    delayed: Vec<DelayedAck>,
    timeline: Vec<(u64, usize, u32, bool)>,
}

/// An address and port.
type Endpoint = (IpAddr, u16);

fn ep(a: Endpoint) -> String {
    match a.0 {
        IpAddr::V4(v) => format!("{v}:{}", a.1),
        IpAddr::V6(v) => format!("[{v}]:{}", a.1),
    }
}

fn at(frame: u64, us: u64) -> At {
    At {
        frame,
        time_s: us as f64 / 1e6,
    }
}

impl Flow {
    fn on_segment(&mut self, d: usize, s: &Segment, us: u64, frame: u64) {
        let o = 1 - d;
        self.packets += 1;
        self.last_us = us;
        let pure = s.len == 0 && s.flags & (flags::SYN | flags::FIN | flags::RST) == 0;
        self.timeline.push((us - self.origin_us, d, s.len, pure));
        if let Some(m) = s.mss {
            self.dirs[d].mss = Some(u32::from(m));
        }
        if s.flags & flags::ACK != 0 {
            self.on_ack(d, s.ack, us, frame, pure);
        }
        if pure {
            self.sides[d].pure_acks += 1;
        }
        if s.flags & (flags::SYN | flags::FIN) != 0 && s.len == 0 {
            // SYN and FIN take a sequence number: their ACKs time the round trip too.
            self.dirs[d]
                .unacked
                .push_back((s.seq.wrapping_add(1), us, frame));
        }
        if s.len > 0 {
            self.on_data(d, s, us, frame);
            // The peer's next segment answers our data: it is no Nagle release.
            self.dirs[o].release = None;
        }
    }

    fn on_ack(&mut self, d: usize, ack: u32, us: u64, frame: u64, pure: bool) {
        let o = 1 - d;
        let mut newest = None;
        while let Some(&(end, t, f)) = self.dirs[o].unacked.front() {
            if !seq_le(end, ack) {
                break;
            }
            newest = Some((t, f));
            self.dirs[o].unacked.pop_front();
        }
        let Some((t, f)) = newest else { return };
        let raw = us.saturating_sub(t);
        let base = self.dirs[o].base_us.map_or(raw, |b| b.min(raw));
        self.dirs[o].base_us = Some(base);
        let delay = raw - base;
        if pure && delay >= STALL_US {
            self.sides[d].delayed_acks += 1;
            self.delayed.push(DelayedAck {
                acker: self.sides[d].addr.clone(),
                ack: at(frame, us - self.origin_us),
                data: at(f, t - self.origin_us),
                delay_us: delay,
            });
        }
        if pure && self.dirs[o].unacked.is_empty() {
            self.dirs[o].release = Some((us, frame, delay));
        }
    }

    fn on_data(&mut self, d: usize, s: &Segment, us: u64, frame: u64) {
        let end = s.seq.wrapping_add(s.len);
        let dir = &mut self.dirs[d];
        let retransmit = dir.nxt.is_some_and(|n| seq_le(end, n));
        if !retransmit {
            dir.nxt = Some(end);
            dir.unacked.push_back((end, us, frame));
        }
        let side = &mut self.sides[d];
        side.data_segments += 1;
        side.bytes += u64::from(s.len);
        let new_turn = self.last_sender != Some(d);
        if new_turn {
            self.exchanges += 1;
        }
        self.last_sender = Some(d);
        let mss = self.dirs[1 - d].mss.or(self.dirs[d].mss).unwrap_or(1460);
        let dir = &self.dirs[d];
        if let (false, Some(prev), Some(rel)) = (retransmit, dir.last, dir.release) {
            let (prev_us, prev_frame, prev_len, prev_same_turn) = prev;
            let (rel_us, rel_frame, _) = rel;
            let base = dir.base_us.unwrap_or(0);
            let slack = 2_000u64.max(2 * base);
            let waited = us.saturating_sub(prev_us).saturating_sub(base);
            if rel_us >= prev_us
                && us.saturating_sub(rel_us) <= slack
                && waited >= STALL_US
                && s.len < mss
                && !new_turn
            {
                let pattern = if s.len <= 16 && prev_len >= 4 * s.len {
                    Pattern::TinyTrailingFrame
                } else if prev_same_turn && d == 0 {
                    Pattern::RequestSplit
                } else if prev_same_turn {
                    Pattern::HeaderThenBody
                } else {
                    Pattern::SmallWrites
                };
                self.sides[d].stalls += 1;
                self.stalls.push(Stall {
                    sender: self.sides[d].addr.clone(),
                    previous: at(prev_frame, prev_us - self.origin_us),
                    ack: at(rel_frame, rel_us - self.origin_us),
                    held: at(frame, us - self.origin_us),
                    held_len: s.len,
                    stalled_us: waited,
                    pattern,
                });
            }
        }
        let dir = &mut self.dirs[d];
        dir.last = Some((us, frame, s.len, new_turn));
        dir.release = None;
    }

    fn report(self) -> FlowReport {
        let mut sides = self.sides;
        for s in &mut sides {
            s.mean_payload = if s.data_segments > 0 {
                s.bytes as f64 / s.data_segments as f64
            } else {
                0.0
            };
        }
        let duration_s = self.last_us.saturating_sub(self.first_us) as f64 / 1e6;
        let stalled_s = self.stalls.iter().map(|s| s.stalled_us).sum::<u64>() as f64 / 1e6;
        let verdict = verdict(&sides, &self.stalls, &self.delayed);
        FlowReport {
            index: self.index,
            sides,
            packets: self.packets,
            exchanges: self.exchanges,
            duration_s,
            stalled_share: if duration_s > 0.0 {
                (stalled_s / duration_s).min(1.0)
            } else {
                0.0
            },
            stalled_s,
            stalls: self.stalls,
            delayed_acks: self.delayed,
            verdict,
            timeline: self.timeline,
        }
    }
}

fn verdict(sides: &[Side; 2], stalls: &[Stall], delayed: &[DelayedAck]) -> Vec<String> {
    if stalls.is_empty() {
        let mut v = vec!["no stall found".to_string()];
        if !delayed.is_empty() {
            v.push(format!(
                "{} delayed ACK(s) seen, but no write waited for them",
                delayed.len()
            ));
        }
        return v;
    }
    let mut out = Vec::new();
    for (i, side) in sides.iter().enumerate() {
        let mine: Vec<&Stall> = stalls.iter().filter(|s| s.sender == side.addr).collect();
        if mine.is_empty() {
            continue;
        }
        let mut counts: HashMap<Pattern, usize> = HashMap::new();
        for s in &mine {
            *counts.entry(s.pattern).or_default() += 1;
        }
        let (pattern, _) = counts
            .into_iter()
            .max_by_key(|(p, n)| (*n, *p as u8))
            .unwrap_or((Pattern::SmallWrites, 0));
        let total: u64 = mine.iter().map(|s| s.stalled_us).sum();
        let peer = &sides[1 - i].addr;
        out.push(format!(
            "{} {} and {peer} delays its ACKs: {} stall(s), {:.1} ms lost. Coalesce the writes (one writev/sendmsg per message), or run it under `nagless run`; setting TCP_NODELAY also removes the stall but sends more packets",
            side.addr,
            pattern.describe(),
            mine.len(),
            total as f64 / 1000.0,
        ));
    }
    out
}

/// Groups segments into flows and analyses each. `segments` are (frame, ns, segment) in
/// capture order.
///
/// Two passes: the first finds each direction's fastest data-to-ACK time over the whole
/// flow (the round trip from the capture point), the second judges every ACK and write
/// against it, so that even the first exchange of a flow is judged right.
pub fn analyse(segments: &[(u64, u64, Segment)]) -> Vec<FlowReport> {
    let first = pass(segments, &[]);
    let seeds: Vec<[Option<u64>; 2]> = first.iter().map(|f| f.base).collect();
    pass(segments, &seeds)
        .into_iter()
        .map(|f| f.flow.report())
        .collect()
}

struct Passed {
    flow: Flow,
    base: [Option<u64>; 2],
}

fn pass(segments: &[(u64, u64, Segment)], seeds: &[[Option<u64>; 2]]) -> Vec<Passed> {
    let origin_us = segments.first().map_or(0, |s| s.1 / 1000);
    let mut flows: Vec<Flow> = Vec::new();
    let mut by_key: HashMap<(Endpoint, Endpoint), usize> = HashMap::new();
    for (frame, ns, s) in segments {
        let us = (ns / 1000).max(origin_us);
        let fwd = (s.src, s.dst);
        let (idx, d) = if let Some(&i) = by_key.get(&fwd) {
            (i, 0)
        } else if let Some(&i) = by_key.get(&(s.dst, s.src)) {
            (i, 1)
        } else {
            // A SYN-ACK first means its destination is the client.
            let (client, server) = if s.flags & (flags::SYN | flags::ACK) == flags::SYN | flags::ACK
            {
                (s.dst, s.src)
            } else {
                (s.src, s.dst)
            };
            let i = flows.len();
            by_key.insert((client, server), i);
            let seed = seeds.get(i).copied().unwrap_or([None, None]);
            flows.push(Flow {
                index: i + 1,
                origin_us,
                dirs: [
                    Dir {
                        base_us: seed[0],
                        ..Dir::default()
                    },
                    Dir {
                        base_us: seed[1],
                        ..Dir::default()
                    },
                ],
                sides: [
                    Side {
                        addr: ep(client),
                        ..Side::default()
                    },
                    Side {
                        addr: ep(server),
                        ..Side::default()
                    },
                ],
                packets: 0,
                exchanges: 0,
                last_sender: None,
                first_us: us,
                last_us: us,
                stalls: Vec::new(),
                delayed: Vec::new(),
                timeline: Vec::new(),
            });
            (i, if (client, server) == fwd { 0 } else { 1 })
        };
        let us = us.max(flows[idx].first_us);
        flows[idx].on_segment(d, s, us, *frame);
    }
    flows
        .into_iter()
        .map(|f| Passed {
            base: [f.dirs[0].base_us, f.dirs[1].base_us],
            flow: f,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const C: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::LOCALHOST), 40000);
    const S: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::LOCALHOST), 8000);

    /// Builds a conversation: each step is (ms, from client?, payload, ack-only?).
    struct Conv {
        segs: Vec<(u64, u64, Segment)>,
        seq: [u32; 2],
    }

    impl Conv {
        fn new() -> Conv {
            Conv::with_rtt(0.01)
        }

        /// A handshake seen from the client, with `rtt` ms to the server.
        fn with_rtt(rtt: f64) -> Conv {
            let mut c = Conv {
                segs: Vec::new(),
                seq: [1000, 5000],
            };
            c.push(0.0, 0, 0, flags::SYN, Some(1448));
            c.seq[0] += 1;
            c.push(rtt, 1, 0, flags::SYN | flags::ACK, Some(1448));
            c.seq[1] += 1;
            c.push(rtt + 0.01, 0, 0, flags::ACK, None);
            c
        }

        fn push(&mut self, ms: f64, side: usize, len: u32, fl: u8, mss: Option<u16>) {
            let (src, dst) = if side == 0 { (C, S) } else { (S, C) };
            let seg = Segment {
                src,
                dst,
                seq: self.seq[side],
                ack: self.seq[1 - side],
                flags: fl,
                len,
                mss,
            };
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
    }

    #[test]
    fn write_write_read_under_nagle_is_a_request_split_stall() {
        let mut c = Conv::new();
        let mut t = 1.0;
        for _ in 0..5 {
            c.data(t, 0, 100) // request part 1
                .ack(t + 40.0, 1) // delayed ACK
                .data(t + 40.05, 0, 100) // part 2, released
                .data(t + 40.2, 1, 100); // reply
            t += 50.0;
        }
        let r = &analyse(&c.segs)[0];
        assert_eq!(r.stalls.len(), 5, "{r:#?}");
        assert!(r.stalls.iter().all(|s| s.pattern == Pattern::RequestSplit));
        assert!(r
            .stalls
            .iter()
            .all(|s| (39_000..41_000).contains(&s.stalled_us)));
        assert_eq!(r.sides[1].delayed_acks, 5);
        assert!(r.verdict[0].contains("127.0.0.1:40000 sends each request as two or more writes"));
        assert!(r.verdict[0].contains("127.0.0.1:8000 delays its ACKs"));
    }

    #[test]
    fn header_then_body_and_tiny_tail_are_named() {
        let mut c = Conv::new();
        c.data(1.0, 0, 80)
            .data(1.1, 1, 150)
            .ack(41.0, 0)
            .data(41.05, 1, 100);
        c.data(50.0, 0, 80)
            .data(50.1, 1, 4000)
            .ack(90.0, 0)
            .data(90.05, 1, 2);
        let r = &analyse(&c.segs)[0];
        let p: Vec<Pattern> = r.stalls.iter().map(|s| s.pattern).collect();
        assert_eq!(
            p,
            [Pattern::HeaderThenBody, Pattern::TinyTrailingFrame],
            "{r:#?}"
        );
    }

    #[test]
    fn think_time_bulk_and_long_rtt_raise_no_alarm() {
        // Slow server: request, delayed ACK, reply 100 ms later, next request.
        let mut c = Conv::new();
        let mut t = 1.0;
        for _ in 0..5 {
            c.data(t, 0, 100)
                .ack(t + 40.0, 1)
                .data(t + 100.0, 1, 100)
                .data(t + 100.1, 0, 100);
            t += 200.0;
        }
        let r = &analyse(&c.segs)[0];
        assert!(r.stalls.is_empty(), "{r:#?}");
        assert_eq!(r.verdict[0], "no stall found");
        // Bulk: full segments back to back, ACK every second one.
        let mut c = Conv::new();
        for i in 0..200 {
            c.data(1.0 + i as f64 * 0.01, 0, 1448);
            if i % 2 == 1 {
                c.ack(1.0 + i as f64 * 0.01 + 0.005, 1);
            }
        }
        assert!(analyse(&c.segs)[0].stalls.is_empty());
        // 80 ms round trip seen from the client: ACKs come 80 ms after data.
        let mut c = Conv::with_rtt(80.0);
        let mut t = 100.0;
        for _ in 0..5 {
            c.data(t, 0, 100)
                .ack(t + 80.0, 1)
                .data(t + 80.05, 0, 100)
                .data(t + 160.0, 1, 100);
            t += 200.0;
        }
        let r = &analyse(&c.segs)[0];
        assert!(r.stalls.is_empty() && r.delayed_acks.is_empty(), "{r:#?}");
    }
}
