//! Per-flow analysis, streaming: segments go in one at a time ([`Analyzer::push`]), a flow is
//! judged and summarised when it closes or goes idle, so memory follows the number of live
//! flows, not the size of the capture.
//!
//! Times are measured where the capture was taken, which may be either end of the path or
//! anywhere between. Each direction's side of the round trip is learned from the handshake
//! and the fastest ACKs (SYN to SYN-ACK times the server's side, SYN-ACK to ACK the client's):
//! - an ACK's delay is its time after the data it acknowledges, minus the acker's side;
//! - a held write must leave within the sender's side of the round trip after the ACK.
//!
//! The stall rule itself is [`crate::rule`]. Retransmissions (Karn: their ACKs time
//! nothing), SACK, zero windows and keep-alives are tracked so that their waits are named for
//! what they are, never blamed on Nagle.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use crate::packet::{flags, Segment};
use crate::rule::{self, AckTimer, HoldEvidence, DELAYED_ACK_MIN_US};

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
    /// Seconds since the first frame of the capture (Wireshark's default time column).
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
    /// Offset of the held segment's first byte in the sender's byte stream (0 = first byte
    /// after the SYN, or after the first segment seen when the capture began mid-flow).
    pub held_offset: u64,
    /// Time the write waited because the ACK was delayed (the ACK's delay beyond the
    /// receiver's side of the round trip), µs.
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
    /// Delay beyond the acker's side of the round trip, µs.
    pub delay_us: u64,
}

/// Per-direction counters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Side {
    /// Address and port.
    pub addr: String,
    /// Data segments sent (retransmissions included).
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
    /// Data segments sent again.
    pub retransmissions: u64,
    /// Of those, sent after a retransmission timeout (no duplicate ACK or SACK before them).
    pub retransmission_timeouts: u64,
    /// Times this side advertised a zero window and so stopped its peer.
    pub zero_window_waits: u64,
    /// Keep-alive probes sent.
    pub keepalives: u64,
}

/// Where along the path the capture was taken, judged from the two sides of the round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapturePoint {
    /// Round trip under 1 ms: the same host or a LAN; the end does not matter.
    Local,
    /// At or near the client.
    ClientEnd,
    /// At or near the server.
    ServerEnd,
    /// Somewhere between.
    Between,
    /// Not enough ACKs to tell.
    Unknown,
}

impl CapturePoint {
    /// For people.
    pub fn describe(self) -> &'static str {
        match self {
            CapturePoint::Local => "on the same host or LAN",
            CapturePoint::ClientEnd => "captured at the client's end",
            CapturePoint::ServerEnd => "captured at the server's end",
            CapturePoint::Between => "captured between the ends",
            CapturePoint::Unknown => "capture point unknown",
        }
    }
}

/// What the doctor found in one flow.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowReport {
    /// 1-based index in capture order (for `--flow`).
    pub index: usize,
    /// Client (SYN sender; without a handshake, the side with the higher port) and server.
    pub sides: [Side; 2],
    /// Frames in the flow.
    pub packets: u64,
    /// Changes of the data direction (request/response turns).
    pub exchanges: u64,
    /// The flow's first frame.
    pub start: At,
    /// First to last frame, s.
    pub duration_s: f64,
    /// The handshake was captured (without it, the first exchanges may be judged on less
    /// evidence).
    pub handshake: bool,
    /// Round trip between client and server as seen from the capture, ms (`None` if unknown).
    pub rtt_ms: Option<f64>,
    /// Where the capture was taken.
    pub capture_point: CapturePoint,
    /// Stalls found.
    pub stall_count: u64,
    /// The worst stalls (at most 32), worst first.
    pub stalls: Vec<Stall>,
    /// Sum of the stalls, s.
    pub stalled_s: f64,
    /// Stalled time as a share of the flow's duration.
    pub stalled_share: f64,
    /// The longest stall, ms.
    pub worst_stall_ms: f64,
    /// The receiver's delayed-ACK timer, judged from the stalls (`None` without stalls).
    pub ack_timer: Option<AckTimer>,
    /// Delayed ACKs found (with or without a stall).
    pub delayed_ack_count: u64,
    /// The first delayed ACKs (at most 32).
    pub delayed_acks: Vec<DelayedAck>,
    /// Verdict and advice for people.
    pub verdict: Vec<String>,
    /// Segments (µs since the capture's first frame, side, payload, pure ACK), for the
    /// timeline; kept only when asked for, and at most [`TIMELINE_MAX`].
    #[serde(skip)]
    pub timeline: Vec<(u64, usize, u32, bool)>,
}

/// Details kept per flow; counts cover everything.
const KEPT: usize = 32;
/// Candidates held before they are judged with the round trips known so far.
const PENDING_MAX: usize = 4096;
/// Unacknowledged segments tracked per direction (12 MB of full segments in flight; beyond
/// that, or in a capture of one direction only, the oldest are dropped: memory stays bounded).
const UNACKED_MAX: usize = 8_192;
/// Timeline points kept per flow.
pub const TIMELINE_MAX: usize = 200_000;
/// A closed flow is judged once no packet of it came for this long (capture time).
const CLOSED_LINGER_US: u64 = 10_000_000;
/// A flow with no packet for this long is judged (and a later packet starts a new one).
const IDLE_US: u64 = 600_000_000;
/// Retransmissions this long after the original with no duplicate ACK first are timeouts.
const RTO_MIN_US: u64 = 150_000;

/// Which flows to analyse and what to keep.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Flows reported in full, most stalled first (0: all of them).
    pub top: usize,
    /// Only flows matching every filter.
    pub filters: Vec<Filter>,
    /// Only the flow with this index.
    pub flow: Option<usize>,
    /// Keep each reported flow's segments for a timeline.
    pub timeline: bool,
}

/// A host and/or port a flow must have on either side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Filter {
    /// Address.
    pub host: Option<IpAddr>,
    /// Port.
    pub port: Option<u16>,
}

impl std::str::FromStr for Filter {
    type Err = String;

    /// `10.0.0.1`, `:8000`, `8000`, `10.0.0.1:8000`, `::1`, `[::1]:8000`.
    fn from_str(s: &str) -> Result<Filter, String> {
        let bad = || format!("'{s}' is not a host, :port or host:port");
        if let Ok(a) = s.parse::<std::net::SocketAddr>() {
            return Ok(Filter {
                host: Some(a.ip()),
                port: Some(a.port()),
            });
        }
        if let Ok(h) = s.trim_matches(['[', ']']).parse::<IpAddr>() {
            return Ok(Filter {
                host: Some(h),
                port: None,
            });
        }
        let port = s.strip_prefix(':').unwrap_or(s);
        port.parse::<u16>()
            .map(|p| Filter {
                host: None,
                port: Some(p),
            })
            .map_err(|_| bad())
    }
}

impl Filter {
    fn matches(&self, a: Endpoint) -> bool {
        self.host.is_none_or(|h| h == a.0) && self.port.is_none_or(|p| p == a.1)
    }
}

/// Counters of one service (server port).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Service {
    /// Server port.
    pub port: u16,
    /// Flows.
    pub flows: u64,
    /// Flows with stalls.
    pub flows_with_stalls: u64,
    /// Stalls.
    pub stalls: u64,
    /// Time lost to stalls, s.
    pub stalled_s: f64,
    /// Longest stall, ms.
    pub worst_stall_ms: f64,
    /// Delayed ACKs.
    pub delayed_acks: u64,
    /// Retransmission timeouts.
    pub retransmission_timeouts: u64,
    /// Zero-window waits.
    pub zero_window_waits: u64,
}

/// The analysis of a whole capture.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Flows analysed (after filters).
    pub flows_total: u64,
    /// Flows with stalls.
    pub flows_with_stalls: u64,
    /// Stalls in all flows.
    pub stalls_total: u64,
    /// Time lost to stalls in all flows, s.
    pub stalled_s_total: f64,
    /// Per server port, most stalled time first.
    pub services: Vec<Service>,
    /// The flows kept ([`Options::top`]), most stalled time first.
    pub flows: Vec<FlowReport>,
}

#[derive(Clone, Copy)]
struct Unacked {
    end: u32,
    us: u64,
    frame: u64,
    retransmitted: bool,
}

/// A pure ACK from the peer that covered everything we had sent.
#[derive(Clone, Copy)]
struct Release {
    us: u64,
    frame: u64,
    /// From the newest data it acknowledged to it.
    raw_delay_us: u64,
    zero_window: bool,
    loss_recovery: bool,
}

#[derive(Default)]
struct Dir {
    /// First sequence number of the byte stream (ISN + 1, or the first seen).
    base_seq: Option<u32>,
    /// Highest sequence end sent with data.
    nxt: Option<u32>,
    unacked: VecDeque<Unacked>,
    /// Last data segment: (µs, frame, payload, first of its turn?).
    last: Option<(u64, u64, u32, bool)>,
    release: Option<Release>,
    /// Fastest data-to-ACK time for our data: the peer's side of the round trip.
    base_us: Option<u64>,
    mss: Option<u32>,
    /// Largest payload seen (stands for the MSS when no SYN was captured).
    max_len: u32,
    /// Highest ACK number we sent, and duplicate ACKs we sent for it.
    last_ack: Option<u32>,
    dupacks: u32,
    /// We sent SACK blocks since our last advancing ACK.
    sacked: bool,
    /// We advertise a zero window.
    zero_window: bool,
}

fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

fn seq_le(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

/// A write that followed an ACK; judged once the round trips are known well.
struct Candidate {
    /// Sending direction.
    d: usize,
    previous: At,
    ack: At,
    held: At,
    held_len: u32,
    held_offset: u64,
    options: u32,
    raw_ack_delay_us: u64,
    release_gap_us: u64,
    zero_window: bool,
    loss_recovery: bool,
    prev_len: u32,
    prev_first_of_turn: bool,
}

struct DelayedCandidate {
    acker: usize,
    ack: At,
    data: At,
    raw_us: u64,
}

struct Flow {
    index: usize,
    key: (Endpoint, Endpoint),
    dirs: [Dir; 2],
    sides: [Side; 2],
    packets: u64,
    exchanges: u64,
    last_sender: Option<usize>,
    start: At,
    first_us: u64,
    last_us: u64,
    syn: bool,
    synack: bool,
    fin: [bool; 2],
    rst: bool,
    pending: Vec<Candidate>,
    pending_delayed: Vec<DelayedCandidate>,
    stalls: Vec<Stall>,
    stall_count: u64,
    /// Per sending side: time lost and worst stall, µs.
    side_lost_us: [(u64, u64); 2],
    timers: [u64; 2],
    patterns: [HashMap<Pattern, u64>; 2],
    delayed: Vec<DelayedAck>,
    delayed_count: u64,
    timeline: Option<Vec<(u64, usize, u32, bool)>>,
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
    fn new(index: usize, key: (Endpoint, Endpoint), us: u64, frame: u64, timeline: bool) -> Flow {
        Flow {
            index,
            key,
            dirs: [Dir::default(), Dir::default()],
            sides: [
                Side {
                    addr: ep(key.0),
                    ..Side::default()
                },
                Side {
                    addr: ep(key.1),
                    ..Side::default()
                },
            ],
            packets: 0,
            exchanges: 0,
            last_sender: None,
            start: at(frame, us),
            first_us: us,
            last_us: us,
            syn: false,
            synack: false,
            fin: [false; 2],
            rst: false,
            pending: Vec::new(),
            pending_delayed: Vec::new(),
            stalls: Vec::new(),
            stall_count: 0,
            side_lost_us: [(0, 0); 2],
            timers: [0; 2],
            patterns: [HashMap::new(), HashMap::new()],
            delayed: Vec::new(),
            delayed_count: 0,
            timeline: timeline.then(Vec::new),
        }
    }

    fn closed(&self) -> bool {
        self.rst || self.fin == [true, true]
    }

    fn on_segment(&mut self, d: usize, s: &Segment, us: u64, frame: u64) {
        let o = 1 - d;
        let us = us.max(self.last_us);
        self.packets += 1;
        self.last_us = us;
        let control = s.flags & (flags::SYN | flags::FIN | flags::RST) != 0;
        let pure = s.len == 0 && !control;
        if let Some(t) = &mut self.timeline {
            if t.len() < TIMELINE_MAX {
                t.push((us, d, s.len, pure));
            }
        }
        if s.flags & flags::RST != 0 {
            self.rst = true;
            return;
        }
        if let Some(m) = s.mss {
            self.dirs[d].mss = Some(u32::from(m));
        }
        if s.flags & flags::SYN != 0 {
            if s.flags & flags::ACK != 0 {
                self.synack = true;
            } else {
                self.syn = true;
            }
            self.dirs[d].base_seq = Some(s.seq.wrapping_add(1));
        }
        if !control {
            self.on_window(d, s.window == 0);
        }
        // A keep-alive probe (or, into a zero window, a window probe): one byte before the
        // next, nothing outstanding.
        let dir = &self.dirs[d];
        if s.len <= 1
            && !control
            && dir.unacked.is_empty()
            && dir.nxt == Some(s.seq.wrapping_add(1))
        {
            if !self.dirs[o].zero_window {
                self.sides[d].keepalives += 1;
            }
            return;
        }
        if s.flags & flags::ACK != 0 {
            self.on_ack(d, s, us, frame, pure);
        }
        if pure {
            self.sides[d].pure_acks += 1;
        }
        if s.flags & (flags::SYN | flags::FIN) != 0 && s.len == 0 {
            // SYN and FIN take a sequence number: their ACKs time the round trip too.
            let end = s.seq.wrapping_add(1);
            let dir = &mut self.dirs[d];
            if dir.nxt.is_none_or(|n| seq_lt(n, end)) {
                dir.nxt = Some(end);
                dir.unacked.push_back(Unacked {
                    end,
                    us,
                    frame,
                    retransmitted: false,
                });
            } else {
                // A SYN or FIN sent again: its ACK times nothing.
                for u in dir.unacked.iter_mut() {
                    u.retransmitted = true;
                }
            }
        }
        if s.flags & flags::FIN != 0 {
            self.fin[d] = true;
        }
        if s.len > 0 {
            self.on_data(d, s, us, frame);
            // The peer's next segment answers our data: it is no Nagle release.
            self.dirs[o].release = None;
        }
    }

    fn on_window(&mut self, d: usize, zero: bool) {
        let dir = &mut self.dirs[d];
        if zero && !dir.zero_window {
            self.sides[d].zero_window_waits += 1;
        }
        dir.zero_window = zero;
    }

    fn on_ack(&mut self, d: usize, s: &Segment, us: u64, frame: u64, pure: bool) {
        let o = 1 - d;
        let ack = s.ack;
        // Duplicate ACKs and SACK: the acker is missing data.
        let advanced = self.dirs[d].last_ack.is_none_or(|l| seq_lt(l, ack));
        if advanced {
            self.dirs[d].last_ack = Some(ack);
            self.dirs[d].dupacks = 0;
            self.dirs[d].sacked = false;
        } else if pure && !self.dirs[o].unacked.is_empty() {
            self.dirs[d].dupacks += 1;
        }
        if s.sack {
            self.dirs[d].sacked = true;
        }
        let mut newest = None;
        let mut retransmitted = false;
        while let Some(&u) = self.dirs[o].unacked.front() {
            if !seq_le(u.end, ack) {
                break;
            }
            newest = Some(u);
            retransmitted |= u.retransmitted;
            self.dirs[o].unacked.pop_front();
        }
        let Some(u) = newest else { return };
        let raw = us.saturating_sub(u.us);
        if !retransmitted {
            let base = self.dirs[o].base_us.map_or(raw, |b| b.min(raw));
            self.dirs[o].base_us = Some(base);
            if pure && raw.saturating_sub(base) >= DELAYED_ACK_MIN_US {
                self.pending_delayed.push(DelayedCandidate {
                    acker: d,
                    ack: at(frame, us),
                    data: at(u.frame, u.us),
                    raw_us: raw,
                });
            }
        }
        if pure && self.dirs[o].unacked.is_empty() {
            self.dirs[o].release = Some(Release {
                us,
                frame,
                raw_delay_us: raw,
                zero_window: s.window == 0,
                loss_recovery: retransmitted || s.sack || self.dirs[d].sacked,
            });
        }
        if self.pending.len() + self.pending_delayed.len() >= PENDING_MAX {
            self.settle();
        }
    }

    fn on_data(&mut self, d: usize, s: &Segment, us: u64, frame: u64) {
        let end = s.seq.wrapping_add(s.len);
        let dir = &mut self.dirs[d];
        let base_seq = *dir.base_seq.get_or_insert(s.seq);
        dir.max_len = dir.max_len.max(s.len);
        let retransmit = dir.nxt.is_some_and(|n| seq_lt(s.seq, n));
        if retransmit {
            self.sides[d].retransmissions += 1;
            let sent = dir
                .unacked
                .iter()
                .find(|u| seq_lt(s.seq, u.end))
                .map(|u| u.us);
            let peer = &self.dirs[1 - d];
            let rto = sent.is_some_and(|t| {
                peer.dupacks < 2 && !peer.sacked && us.saturating_sub(t) >= RTO_MIN_US
            });
            if rto {
                self.sides[d].retransmission_timeouts += 1;
            }
            let dir = &mut self.dirs[d];
            for u in dir.unacked.iter_mut() {
                if seq_lt(s.seq, u.end) && seq_le(u.end, end) {
                    u.retransmitted = true;
                    u.us = us;
                }
            }
        }
        let dir = &mut self.dirs[d];
        let new_end = dir.nxt.is_none_or(|n| seq_lt(n, end));
        if new_end {
            dir.nxt = Some(end);
            if dir.unacked.len() >= UNACKED_MAX {
                dir.unacked.pop_front();
            }
            dir.unacked.push_back(Unacked {
                end,
                us,
                frame,
                retransmitted: retransmit,
            });
        }
        let side = &mut self.sides[d];
        side.data_segments += 1;
        side.bytes += u64::from(s.len);
        let new_turn = self.last_sender != Some(d);
        if new_turn {
            self.exchanges += 1;
        }
        self.last_sender = Some(d);
        let dir = &self.dirs[d];
        if let (false, Some(prev), Some(rel)) = (retransmit, dir.last, dir.release) {
            let (prev_us, prev_frame, prev_len, prev_first_of_turn) = prev;
            let peer_side = dir.base_us.unwrap_or(0);
            let own_side = self.dirs[1 - d].base_us.unwrap_or(0);
            let gap = us.saturating_sub(rel.us);
            // Keep what could still be a stall once the round trips are known better (they
            // only shrink, so the ACK delay only grows and the slack only shrinks).
            if rel.us >= prev_us
                && !new_turn
                && rel.raw_delay_us.saturating_sub(peer_side) >= DELAYED_ACK_MIN_US
                && gap <= rule::release_slack_us(own_side)
            {
                self.pending.push(Candidate {
                    d,
                    previous: at(prev_frame, prev_us),
                    ack: at(rel.frame, rel.us),
                    held: at(frame, us),
                    held_len: s.len,
                    held_offset: u64::from(s.seq.wrapping_sub(base_seq)),
                    options: u32::from(s.opt_len),
                    raw_ack_delay_us: rel.raw_delay_us,
                    release_gap_us: gap,
                    zero_window: rel.zero_window,
                    loss_recovery: rel.loss_recovery,
                    prev_len,
                    prev_first_of_turn,
                });
            }
        }
        let dir = &mut self.dirs[d];
        dir.last = Some((us, frame, s.len, new_turn));
        dir.release = None;
    }

    /// The sender's MSS, and whether it was announced (else it is the largest payload seen,
    /// which already has the options taken off).
    fn mss(&self, d: usize) -> (u32, bool) {
        // The MSS the receiver announced bounds what the sender sends.
        match self.dirs[1 - d].mss.or(self.dirs[d].mss) {
            Some(m) => (m, true),
            None => (self.dirs[d].max_len.max(536), false),
        }
    }

    /// Judges the pending candidates with the round trips known now.
    fn settle(&mut self) {
        let base = [
            self.dirs[0].base_us.unwrap_or(0),
            self.dirs[1].base_us.unwrap_or(0),
        ];
        for c in std::mem::take(&mut self.pending_delayed) {
            let delay = c.raw_us.saturating_sub(base[1 - c.acker]);
            if delay < DELAYED_ACK_MIN_US {
                continue;
            }
            self.delayed_count += 1;
            self.sides[c.acker].delayed_acks += 1;
            if self.delayed.len() < KEPT {
                self.delayed.push(DelayedAck {
                    acker: self.sides[c.acker].addr.clone(),
                    ack: c.ack,
                    data: c.data,
                    delay_us: delay,
                });
            }
        }
        for c in std::mem::take(&mut self.pending) {
            let d = c.d;
            let (mss, announced) = self.mss(d);
            let evidence = HoldEvidence {
                held_len: c.held_len,
                options: if announced { c.options } else { 0 },
                mss,
                ack_delay_us: c.raw_ack_delay_us.saturating_sub(base[d]),
                release_gap_us: c.release_gap_us,
                sender_side_rtt_us: base[1 - d],
                zero_window: c.zero_window,
                loss_recovery: c.loss_recovery,
            };
            if rule::judge(&evidence).is_err() {
                continue;
            }
            // The previous write opened its turn: this one is the second part of a message.
            let pattern = if c.held_len <= 16 && c.prev_len >= 4 * c.held_len {
                Pattern::TinyTrailingFrame
            } else if c.prev_first_of_turn && d == 0 {
                Pattern::RequestSplit
            } else if c.prev_first_of_turn {
                Pattern::HeaderThenBody
            } else {
                Pattern::SmallWrites
            };
            let stalled = evidence.ack_delay_us;
            self.stall_count += 1;
            let side = &mut self.side_lost_us[d];
            *side = (side.0 + stalled, side.1.max(stalled));
            self.sides[d].stalls += 1;
            *self.patterns[d].entry(pattern).or_default() += 1;
            if let Some(t) = AckTimer::on_path(stalled, base[0] + base[1]) {
                self.timers[t as usize] += 1;
            }
            self.stalls.push(Stall {
                sender: self.sides[d].addr.clone(),
                previous: c.previous,
                ack: c.ack,
                held: c.held,
                held_len: c.held_len,
                held_offset: c.held_offset,
                stalled_us: stalled,
                pattern,
            });
            if self.stalls.len() >= 2 * KEPT {
                self.keep_worst();
            }
        }
    }

    fn keep_worst(&mut self) {
        self.stalls.sort_by(|a, b| {
            b.stalled_us
                .cmp(&a.stalled_us)
                .then(a.held.frame.cmp(&b.held.frame))
        });
        self.stalls.truncate(KEPT);
    }

    fn report(mut self) -> FlowReport {
        self.settle();
        self.keep_worst();
        let mut sides = std::mem::take(&mut self.sides);
        for s in &mut sides {
            s.mean_payload = if s.data_segments > 0 {
                s.bytes as f64 / s.data_segments as f64
            } else {
                0.0
            };
        }
        let duration_s = self.last_us.saturating_sub(self.first_us) as f64 / 1e6;
        let [(lost0, worst0), (lost1, worst1)] = self.side_lost_us;
        let stalled_s = (lost0 + lost1) as f64 / 1e6;
        // base[0]: the server's side of the round trip; base[1]: the client's.
        let (rtt_ms, capture_point) = match (self.dirs[0].base_us, self.dirs[1].base_us) {
            (Some(server_side), Some(client_side)) => {
                let rtt = server_side + client_side;
                let point = if rtt < 1_000 {
                    CapturePoint::Local
                } else if client_side * 10 <= rtt {
                    CapturePoint::ClientEnd
                } else if server_side * 10 <= rtt {
                    CapturePoint::ServerEnd
                } else {
                    CapturePoint::Between
                };
                (Some(rtt as f64 / 1000.0), point)
            }
            _ => (None, CapturePoint::Unknown),
        };
        let ack_timer = AckTimer::most_seen(self.timers);
        let verdict = self.verdict(&sides, ack_timer);
        FlowReport {
            index: self.index,
            sides,
            packets: self.packets,
            exchanges: self.exchanges,
            start: self.start,
            duration_s,
            handshake: self.syn && self.synack,
            rtt_ms,
            capture_point,
            stall_count: self.stall_count,
            stalls: self.stalls,
            stalled_share: if duration_s > 0.0 {
                (stalled_s / duration_s).min(1.0)
            } else {
                0.0
            },
            stalled_s,
            worst_stall_ms: worst0.max(worst1) as f64 / 1000.0,
            ack_timer,
            delayed_ack_count: self.delayed_count,
            delayed_acks: self.delayed,
            verdict,
            timeline: self.timeline.unwrap_or_default(),
        }
    }

    fn verdict(&self, sides: &[Side; 2], timer: Option<AckTimer>) -> Vec<String> {
        let mut out = Vec::new();
        for (i, side) in sides.iter().enumerate() {
            if side.stalls == 0 {
                continue;
            }
            let (pattern, _) = self.patterns[i]
                .iter()
                .max_by_key(|(p, n)| (**n, **p as u8))
                .map(|(p, n)| (*p, *n))
                .unwrap_or((Pattern::SmallWrites, 0));
            let peer = &sides[1 - i].addr;
            let timer = timer.unwrap_or(AckTimer::Linux40ms);
            out.push(format!(
                "{} {} and {peer} delays its ACKs ({}): {} stall(s), {:.1} ms lost, worst {:.1} ms",
                side.addr,
                pattern.describe(),
                timer.describe(),
                side.stalls,
                self.side_lost_us[i].0 as f64 / 1000.0,
                self.side_lost_us[i].1 as f64 / 1000.0,
            ));
            out.push(format!(
                "fix at the sender ({}): {}",
                side.addr,
                rule::SENDER_FIX
            ));
            out.push(format!(
                "or at the receiver ({peer}): {}",
                timer.receiver_fix()
            ));
        }
        if out.is_empty() {
            let mut seen = Vec::new();
            let count = |n: u64, what: &str| (n > 0).then(|| format!("{n} {what}"));
            let s = |f: fn(&Side) -> u64| sides.iter().map(f).sum::<u64>();
            seen.extend(count(
                s(|x| x.retransmission_timeouts),
                "retransmission timeout(s)",
            ));
            seen.extend(count(
                s(|x| x.retransmissions) - s(|x| x.retransmission_timeouts),
                "fast retransmission(s)",
            ));
            seen.extend(count(s(|x| x.zero_window_waits), "zero-window wait(s)"));
            seen.extend(count(s(|x| x.keepalives), "keep-alive probe(s)"));
            seen.extend(count(
                self.delayed_count,
                "delayed ACK(s) that no write waited for",
            ));
            if seen.is_empty() {
                out.push("no Nagle stall".to_string());
            } else {
                out.push(format!("no Nagle stall; {}", seen.join(", ")));
            }
        }
        out
    }
}

/// A flow's 4-tuple in one order for both directions, packed for fast hashing.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct FlowKey {
    lo: u128,
    hi: u128,
    ports: u32,
}

impl FlowKey {
    fn of(s: &Segment) -> FlowKey {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(v) => u128::from(v.to_bits()),
            IpAddr::V6(v) => v.to_bits() ^ (1 << 127),
        };
        let (a, b) = ((bits(s.src.0), s.src.1), (bits(s.dst.0), s.dst.1));
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        FlowKey {
            lo: lo.0,
            hi: hi.0,
            ports: u32::from(lo.1) << 16 | u32::from(hi.1),
        }
    }
}

/// A multiply-rotate hash for [`FlowKey`], seeded at random per analysis (SipHash, the
/// default, took a quarter of the doctor's time).
#[derive(Clone, Copy)]
struct KeyHashing(u64);

impl KeyHashing {
    fn new() -> KeyHashing {
        use std::hash::BuildHasher as _;
        KeyHashing(std::collections::hash_map::RandomState::new().hash_one(0u8) | 1)
    }
}

impl std::hash::BuildHasher for KeyHashing {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(self.0)
    }
}

struct KeyHasher(u64);

impl KeyHasher {
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(26) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut a = [0u8; 8];
            a[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(a));
        }
    }
    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }
    fn write_u128(&mut self, x: u128) {
        self.add(x as u64);
        self.add((x >> 64) as u64);
    }
    fn finish(&self) -> u64 {
        self.0 ^ self.0 >> 29
    }
}

/// The streaming analysis of one capture.
pub struct Analyzer {
    opts: Options,
    /// Live flows by (lower endpoint, higher endpoint).
    live: HashMap<FlowKey, Flow, KeyHashing>,
    next_index: usize,
    pushed: u64,
    now_us: u64,
    outcome: Outcome,
    services: HashMap<u16, Service>,
    /// The flows kept so far (cut to the best [`Options::top`] when twice that many).
    kept: Vec<FlowReport>,
}

impl Analyzer {
    /// A new analysis.
    pub fn new(opts: Options) -> Analyzer {
        Analyzer {
            opts,
            live: HashMap::with_hasher(KeyHashing::new()),
            next_index: 0,
            pushed: 0,
            now_us: 0,
            outcome: Outcome::default(),
            services: HashMap::new(),
            kept: Vec::new(),
        }
    }

    /// One segment: `us` since the capture's first frame.
    pub fn push(&mut self, frame: u64, us: u64, s: &Segment) {
        self.pushed += 1;
        self.now_us = self.now_us.max(us);
        if self.pushed % 65_536 == 0 {
            self.sweep();
        }
        let key = FlowKey::of(s);
        let is_syn = s.flags & (flags::SYN | flags::ACK) == flags::SYN;
        if let Some(f) = self.live.get_mut(&key) {
            // A new connection on a reused 4-tuple, or an old one seen again after long.
            let client_dir = usize::from(f.key.0 != s.src);
            let new_syn = is_syn
                && (f.closed()
                    || f.dirs[client_dir].base_seq != Some(s.seq.wrapping_add(1))
                    || f.sides[client_dir].data_segments > 0);
            let stale = us.saturating_sub(f.last_us) > IDLE_US;
            if !new_syn && !stale {
                let side = usize::from(f.key.0 != s.src);
                f.on_segment(side, s, us, frame);
                return;
            }
            if let Some(f) = self.live.remove(&key) {
                self.finish_flow(f);
            }
        }
        let flow = match self.live.get_mut(&key) {
            Some(f) => f,
            None => {
                // A SYN-ACK first means its destination is the client; without a handshake,
                // the side with the higher port is.
                let (client, server) = if is_syn {
                    (s.src, s.dst)
                } else if s.flags & (flags::SYN | flags::ACK) == flags::SYN | flags::ACK {
                    (s.dst, s.src)
                } else if s.src.1 > s.dst.1 {
                    (s.src, s.dst)
                } else {
                    (s.dst, s.src)
                };
                if !self
                    .opts
                    .filters
                    .iter()
                    .all(|f| f.matches(client) || f.matches(server))
                {
                    return;
                }
                self.next_index += 1;
                let f = Flow::new(
                    self.next_index,
                    (client, server),
                    us,
                    frame,
                    self.opts.timeline,
                );
                self.live.entry(key).or_insert(f)
            }
        };
        let side = usize::from(flow.key.0 != s.src);
        flow.on_segment(side, s, us, frame);
    }

    /// Judges flows that closed or went idle a while ago (in capture time).
    fn sweep(&mut self) {
        let now = self.now_us;
        let done: Vec<_> = self
            .live
            .iter()
            .filter(|(_, f)| {
                let quiet = now.saturating_sub(f.last_us);
                (f.closed() && quiet >= CLOSED_LINGER_US) || quiet >= IDLE_US
            })
            .map(|(k, _)| *k)
            .collect();
        for k in done {
            if let Some(f) = self.live.remove(&k) {
                self.finish_flow(f);
            }
        }
    }

    fn finish_flow(&mut self, f: Flow) {
        if self.opts.flow.is_some_and(|n| n != f.index) {
            return;
        }
        let port = f.key.1 .1;
        let r = f.report();
        let o = &mut self.outcome;
        o.flows_total += 1;
        o.stalls_total += r.stall_count;
        o.stalled_s_total += r.stalled_s;
        let svc = self.services.entry(port).or_default();
        svc.port = port;
        svc.flows += 1;
        if r.stall_count > 0 {
            o.flows_with_stalls += 1;
            svc.flows_with_stalls += 1;
        }
        svc.stalls += r.stall_count;
        svc.stalled_s += r.stalled_s;
        svc.worst_stall_ms = svc.worst_stall_ms.max(r.worst_stall_ms);
        svc.delayed_acks += r.delayed_ack_count;
        for s in &r.sides {
            svc.retransmission_timeouts += s.retransmission_timeouts;
            svc.zero_window_waits += s.zero_window_waits;
        }
        self.kept.push(r);
        if self.opts.top > 0 && self.kept.len() >= 2 * self.opts.top {
            self.keep_top();
        }
    }

    /// Sorts the kept flows, most stalled time first (then capture order), and keeps the top.
    fn keep_top(&mut self) {
        self.kept.sort_by(|a, b| {
            b.stalled_s
                .total_cmp(&a.stalled_s)
                .then(a.index.cmp(&b.index))
        });
        if self.opts.top > 0 {
            self.kept.truncate(self.opts.top);
        }
    }

    /// Judges every flow still open and returns the whole analysis.
    pub fn finish(mut self) -> Outcome {
        let mut rest: Vec<Flow> = self.live.drain().map(|(_, f)| f).collect();
        rest.sort_by_key(|f| f.index);
        for f in rest {
            self.finish_flow(f);
        }
        self.keep_top();
        self.outcome.flows = std::mem::take(&mut self.kept);
        let mut services: Vec<Service> = self.services.into_values().collect();
        services.sort_by(|a, b| {
            b.stalled_s
                .total_cmp(&a.stalled_s)
                .then(b.flows.cmp(&a.flows))
                .then(a.port.cmp(&b.port))
        });
        self.outcome.services = services;
        self.outcome
    }
}

/// Analyses segments held in memory: (frame, ns since the Unix epoch, segment), in capture
/// order; times are reported from the first segment's.
pub fn analyse(segments: &[(u64, u64, Segment)]) -> Vec<FlowReport> {
    let origin = segments.first().map_or(0, |s| s.1);
    let mut a = Analyzer::new(Options::default());
    for (frame, ns, s) in segments {
        a.push(*frame, ns.saturating_sub(origin) / 1000, s);
    }
    let mut flows = a.finish().flows;
    flows.sort_by_key(|f| f.index);
    flows
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const C: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::LOCALHOST), 40000);
    const S: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::LOCALHOST), 8000);

    /// Builds a conversation as seen from one point of the path.
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
            Conv::seen_from(rtt, 0.01)
        }

        /// A handshake seen at a point `client_side` ms (round trip) from the client and
        /// `server_side` ms from the server.
        fn seen_from(server_side: f64, client_side: f64) -> Conv {
            let mut c = Conv {
                segs: Vec::new(),
                seq: [1000, 5000],
            };
            c.push(0.0, 0, 0, flags::SYN, Some(1460));
            c.seq[0] += 1;
            c.push(server_side, 1, 0, flags::SYN | flags::ACK, Some(1460));
            c.seq[1] += 1;
            c.push(server_side + client_side, 0, 0, flags::ACK, None);
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
                window: 1000,
                wscale: None,
                opt_len: 12,
                sack: false,
                ts: None,
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

        fn last_mut(&mut self) -> &mut Segment {
            &mut self.segs.last_mut().unwrap().2
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
        assert_eq!(r.stall_count, 5, "{r:#?}");
        assert!(r.stalls.iter().all(|s| s.pattern == Pattern::RequestSplit));
        assert!(r
            .stalls
            .iter()
            .all(|s| (39_000..41_000).contains(&s.stalled_us)));
        assert_eq!(r.sides[1].delayed_acks, 5);
        assert_eq!(r.ack_timer, Some(AckTimer::Linux40ms));
        assert!(r.verdict[0].contains("127.0.0.1:40000 sends each request as two or more writes"));
        assert!(r.verdict[0].contains("127.0.0.1:8000 delays its ACKs"));
        assert!(r.verdict[2].contains("TCP_QUICKACK"), "{:?}", r.verdict);
        let mut offsets: Vec<u64> = r.stalls.iter().map(|s| s.held_offset).collect();
        offsets.sort();
        assert_eq!(offsets, [100, 300, 500, 700, 900]);
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
        let mut p: Vec<Pattern> = r.stalls.iter().map(|s| s.pattern).collect();
        p.sort_by_key(|p| *p as u8);
        assert_eq!(
            p,
            [Pattern::HeaderThenBody, Pattern::TinyTrailingFrame],
            "{r:#?}"
        );
    }

    /// The same write-write-read stall seen at either end of a 50 ms path, and in the middle.
    #[test]
    fn stalls_are_found_from_either_end_of_a_long_path() {
        for (server_side, client_side, point) in [
            (50.0, 0.02, CapturePoint::ClientEnd),
            (0.02, 50.0, CapturePoint::ServerEnd),
            (25.0, 25.0, CapturePoint::Between),
        ] {
            let mut c = Conv::seen_from(server_side, client_side);
            let mut t = 100.0;
            for _ in 0..6 {
                // The client's part 1 reaches the capture at t; the server gets it
                // server_side/2 later, holds its ACK 40 ms; the ACK reaches the capture
                // server_side/2 after that, the client client_side/2 later, and part 2
                // passes the capture client_side/2 after that.
                let ack = t + server_side + 40.0;
                let part2 = ack + client_side + 0.05;
                c.data(t, 0, 100).ack(ack, 1).data(part2, 0, 100);
                c.data(part2 + server_side + 0.1, 1, 100);
                t += 300.0;
            }
            let r = &analyse(&c.segs)[0];
            assert_eq!(r.stall_count, 6, "{point:?}: {r:#?}");
            assert_eq!(r.capture_point, point);
            assert!(r
                .stalls
                .iter()
                .all(|s| (39_000..42_000).contains(&s.stalled_us)));
        }
    }

    /// At the sender's end of a 50 ms path, small writes paced 30 ms to 2 RTT after a prompt
    /// ACK are no stall; nor is a 200 ms ACK when the write came long after it.
    #[test]
    fn paced_writes_on_a_long_path_raise_no_alarm() {
        let mut c = Conv::with_rtt(50.0);
        let mut t = 100.0;
        for gap in [30.0, 45.0, 60.0, 90.0] {
            c.data(t, 0, 100)
                .ack(t + 50.0, 1)
                .data(t + 50.0 + gap, 0, 100);
            c.ack(t + 100.0 + gap, 1);
            t += 400.0;
        }
        let r = &analyse(&c.segs)[0];
        assert_eq!(r.stall_count, 0, "{r:#?}");
        assert_eq!(r.verdict, ["no Nagle stall"]);
    }

    #[test]
    fn windows_and_bsd_timers_are_told_from_linux() {
        let mut c = Conv::new();
        let mut t = 1.0;
        for _ in 0..3 {
            c.data(t, 0, 100)
                .ack(t + 200.0, 1)
                .data(t + 200.05, 0, 100)
                .data(t + 200.2, 1, 100);
            t += 300.0;
        }
        let r = &analyse(&c.segs)[0];
        assert_eq!(r.stall_count, 3);
        assert_eq!(r.ack_timer, Some(AckTimer::Classic200ms));
        assert!(r.verdict[2].contains("TcpAckFrequency"), "{:?}", r.verdict);
    }

    #[test]
    fn think_time_bulk_zero_window_and_retransmission_raise_no_alarm() {
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
        assert_eq!(r.stall_count, 0, "{r:#?}");
        assert!(
            r.verdict[0].starts_with("no Nagle stall"),
            "{:?}",
            r.verdict
        );
        // Bulk: full segments back to back, ACK every second one.
        let mut c = Conv::new();
        for i in 0..200 {
            c.data(1.0 + i as f64 * 0.01, 0, 1448);
            if i % 2 == 1 {
                c.ack(1.0 + i as f64 * 0.01 + 0.005, 1);
            }
        }
        assert_eq!(analyse(&c.segs)[0].stall_count, 0);
        // A zero window: the server's ACK closes the window, a late update opens it, the
        // client's small write follows the update at once.
        let mut c = Conv::new();
        c.data(1.0, 0, 100).ack(41.0, 1);
        c.last_mut().window = 0;
        c.data(41.05, 0, 100);
        let r = &analyse(&c.segs)[0];
        assert_eq!(r.stall_count, 0, "{r:#?}");
        assert_eq!(r.sides[1].zero_window_waits, 1);
        // A retransmission timeout: part 1 is lost, sent again 200 ms later, ACKed at once,
        // then part 2 leaves.
        let mut c = Conv::new();
        c.data(1.0, 0, 100);
        c.seq[0] -= 100;
        c.data(201.0, 0, 100).ack(201.1, 1).data(201.15, 0, 100);
        let r = &analyse(&c.segs)[0];
        assert_eq!(r.stall_count, 0, "{r:#?}");
        assert_eq!(r.sides[0].retransmission_timeouts, 1);
        assert!(
            r.verdict[0].contains("1 retransmission timeout"),
            "{:?}",
            r.verdict
        );
    }

    #[test]
    fn a_reused_four_tuple_is_two_flows() {
        let mut c = Conv::new();
        c.data(1.0, 0, 100).ack(41.0, 1).data(41.05, 0, 100);
        c.push(50.0, 0, 0, flags::FIN | flags::ACK, None);
        c.push(50.1, 1, 0, flags::FIN | flags::ACK, None);
        c.seq = [90_000, 70_000];
        c.push(60.0, 0, 0, flags::SYN, Some(1460));
        c.seq[0] += 1;
        c.push(60.01, 1, 0, flags::SYN | flags::ACK, Some(1460));
        c.seq[1] += 1;
        c.data(61.0, 0, 100).data(61.1, 1, 100);
        let r = analyse(&c.segs);
        assert_eq!(r.len(), 2, "{r:#?}");
        assert_eq!(r[0].stall_count, 1);
        assert_eq!(r[1].stall_count, 0);
        assert!(r[1].handshake);
    }

    #[test]
    fn filters_parse() {
        let f: Filter = "10.0.0.1:80".parse().unwrap();
        assert_eq!(f.port, Some(80));
        let f: Filter = ":8000".parse().unwrap();
        assert_eq!((f.host, f.port), (None, Some(8000)));
        let f: Filter = "::1".parse().unwrap();
        assert!(f.host.is_some() && f.port.is_none());
        let f: Filter = "[::1]:9".parse().unwrap();
        assert_eq!(f.port, Some(9));
        assert!("nonsense".parse::<Filter>().is_err());
    }
}
