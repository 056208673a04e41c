//! What the analysis returns: the [`Outcome`] of a capture, a [`FlowReport`] per flow and
//! their parts. All but the timeline are serialized into the doctor's JSON, field for field
//! as `docs/doctor-json.md` describes them (schema [`crate::report::JSON_SCHEMA_VERSION`]).

use super::direction::Direction;
use crate::rule::AckTimer;

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
    /// The sender streams small messages one by one: a second (or later) stall in one turn
    /// of its, the peer sending nothing between (server-sent events, a token stream, a feed).
    EventStream,
    /// A TLS 1.3 server's first answer, held behind the session tickets it sent as the
    /// handshake ended (the server's second turn, TLS application-data records, after a
    /// handshake record).
    TlsFirstAnswer,
    /// A relay's hop: the sender wrote onto this connection, piece by piece, what reached it
    /// on another connection of the capture ([`Stall::relayed_from`]).
    RelayHop,
}

/// A frame in the capture, for people to find in Wireshark.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct At {
    /// Frame number (1-based).
    pub frame: u64,
    /// Seconds since the first frame of the capture (Wireshark's default time column).
    pub time_s: f64,
}

impl At {
    /// Frame `frame`, `us` after the capture's first frame.
    pub(super) fn new(frame: u64, us: u64) -> At {
        At {
            frame,
            time_s: us as f64 / 1e6,
        }
    }
}

/// One stall: a write held by Nagle until a delayed ACK released it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stall {
    /// The side whose write was held: its address.
    pub sender: String,
    /// Which way the held write went: `client->server` or `server->client` (the client sent
    /// the SYN; without a handshake, it is the side with the higher port).
    pub direction: &'static str,
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
    /// The flow (its number in the report) whose data the sender relayed into this one, when
    /// the capture holds both hops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relayed_from: Option<usize>,
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

/// A clocked segment and the ACK that released it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ClockedSegment {
    /// The small data segment that left as the ACK arrived.
    pub segment: At,
    /// The peer's segment that acknowledged all the sender had sent, and so released it.
    pub ack: At,
}

/// A sending direction whose small writes were ACK-clocked ([`judge_clock`](crate::rule::judge_clock)): they
/// queued behind Nagle until the peer's ACK of the last segment came, with no timer involved.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AckClocked {
    /// The sender: its address.
    pub sender: String,
    /// Which way its segments went: `client->server` or `server->client`.
    pub direction: &'static str,
    /// Small data segments that left as an ACK arrived, carrying writes merged while the
    /// previous one was in flight.
    pub clocked: u64,
    /// Small data segments the sender sent (while Nagle was not seen off).
    pub segments: u64,
    /// `clocked / segments`.
    pub share: f64,
    /// Time writes queued behind the clock, summed (an estimate: half of each clocked
    /// segment's time since the sender's previous data segment), s.
    pub queued_s: f64,
    /// `queued_s` per second of the sender's first to last data segment.
    pub queued_per_s: f64,
    /// Mean queued time per clocked segment, µs.
    pub mean_queued_us: u64,
    /// The sender's first to last data segment, s.
    pub window_s: f64,
    /// The first clocked segments (at most 32) and their releasing ACKs.
    pub first: Vec<ClockedSegment>,
}

/// A frame a [`Finding`] marks, and its part in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FindingFrame {
    /// Frame number (1-based).
    pub frame: u64,
    /// Its part: for `ack-clocked`, `clocked` (a segment that left as an ACK arrived) or
    /// `release` (that ACK).
    pub role: &'static str,
}

/// A verdict other than a stall, in the shape the Wireshark plugin marks as data
/// (`deploy/wireshark/nagless.lua`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    /// What was found: `ack-clocked`, `sender-hold`, `retransmission-timeout`, `zero-window`.
    pub kind: &'static str,
    /// The frames to mark (bounded: at most 64).
    pub frames: Vec<FindingFrame>,
    /// Its typical cost per event, ms (for `ack-clocked`: the mean time writes queued).
    pub delay_ms: f64,
    /// `client->server` or `server->client`.
    pub direction: &'static str,
    /// One line for people.
    pub summary: String,
}

/// A sender's own hold that is not Nagle's: a cork left on, released by the kernel's ceiling
/// on it (module `hold`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SenderHold {
    /// The side that held: its address.
    pub sender: String,
    /// `client->server` or `server->client`.
    pub direction: &'static str,
    /// Small segments that left about 200 ms after the sender's answer began, with nothing in
    /// flight and the peer waiting.
    pub count: u64,
    /// Their time after the segment before them, summed, ms: what the peer waited.
    pub held_ms: f64,
    /// The first 8.
    pub first: Vec<HeldTail>,
}

/// One held tail: the segment before it, and it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HeldTail {
    /// The sender's segment that opened its answer.
    pub previous: At,
    /// The held segment.
    pub held: At,
    /// How long after `previous` it left, ms.
    pub after_ms: f64,
}

/// A cause the time of a connection went to, in its [`Budget`] (issue 51).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// A write held by Nagle until a delayed ACK released it (the stall rule's [`Stall`]).
    NagleStall,
    /// Small writes queued behind the ACK of the sender's last segment ([`AckClocked`]).
    AckClocked,
    /// A sender's own hold, not Nagle's: a cork or `MSG_MORE` tail released by the kernel's
    /// 200 ms ceiling ([`SenderHold`]).
    SenderHold,
    /// The path's round trip: a question's way to the answerer and the answer's back, a
    /// handshake, a close.
    RoundTrip,
    /// Data crossing at the path's rate: a turn's segments one after another.
    Transfer,
    /// Loss recovery: retransmission timeouts (with their backoff), tail-loss probes, fast
    /// retransmissions.
    LossRecovery,
    /// A receiver advertised a zero window: its application stopped reading.
    ZeroWindow,
    /// A sender waited for an ACK to send more, the receiver's window full.
    ReceiveWindow,
    /// A sender waited for an ACK to send more, its own congestion window full (slow start,
    /// or a restart after idle).
    CongestionWindow,
    /// A receiver delayed its ACK while the sender waited for it, with no write held by
    /// Nagle.
    DelayedAck,
    /// A program's own time: an answer's, or a pause within a turn ("it is not the
    /// network").
    Think,
    /// The side that asks sent nothing: between an answer and its next question, or before
    /// it closed. No one waited.
    Idle,
    /// Time the capture does not explain (a round trip never measured, a capture that ended
    /// mid-turn): never forced into a class.
    Unknown,
}

impl Cause {
    /// Every cause, in the order of their numbers (`Cause as usize`).
    pub const ALL: [Cause; 13] = [
        Cause::NagleStall,
        Cause::AckClocked,
        Cause::SenderHold,
        Cause::RoundTrip,
        Cause::Transfer,
        Cause::LossRecovery,
        Cause::ZeroWindow,
        Cause::ReceiveWindow,
        Cause::CongestionWindow,
        Cause::DelayedAck,
        Cause::Think,
        Cause::Idle,
        Cause::Unknown,
    ];

    /// Its name in the JSON (`nagle-stall`).
    pub fn name(self) -> &'static str {
        match self {
            Cause::NagleStall => "nagle-stall",
            Cause::AckClocked => "ack-clocked",
            Cause::SenderHold => "sender-hold",
            Cause::RoundTrip => "round-trip",
            Cause::Transfer => "transfer",
            Cause::LossRecovery => "loss-recovery",
            Cause::ZeroWindow => "zero-window",
            Cause::ReceiveWindow => "receive-window",
            Cause::CongestionWindow => "congestion-window",
            Cause::DelayedAck => "delayed-ack",
            Cause::Think => "think",
            Cause::Idle => "idle",
            Cause::Unknown => "unknown",
        }
    }

    /// Its name for people.
    pub fn describe(self) -> &'static str {
        match self {
            Cause::NagleStall => "Nagle stall",
            Cause::AckClocked => "ACK-clocked writes",
            Cause::SenderHold => "sender's own hold",
            Cause::RoundTrip => "round trip",
            Cause::Transfer => "transfer",
            Cause::LossRecovery => "loss recovery",
            Cause::ZeroWindow => "zero window",
            Cause::ReceiveWindow => "receive window",
            Cause::CongestionWindow => "congestion window",
            Cause::DelayedAck => "delayed ACK",
            Cause::Think => "think time",
            Cause::Idle => "idle",
            Cause::Unknown => "unknown",
        }
    }
}

/// Time a [`Budget`] gives one cause (and one side, where it belongs to one).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Spent {
    /// The cause.
    pub cause: Cause,
    /// The side it belongs to, `client` or `server` (the sender for a hold, a window or a
    /// loss; the receiver for a zero window or a delayed ACK; the program for think time);
    /// absent for the path's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub side: Option<&'static str>,
    /// The time, ms.
    pub ms: f64,
    /// Its share of the whole.
    pub share: f64,
    /// The frames bounding its longest stretch.
    pub longest: [At; 2],
    /// What to do about it, where something can be done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<&'static str>,
}

/// Where a connection's time went: its first to last frame split into causes that add up to
/// the whole (module `budget`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Budget {
    /// The whole: the flow's first to last frame, ms.
    pub total_ms: f64,
    /// The causes, most time first.
    pub causes: Vec<Spent>,
    /// Exchanges: the first ones and the slowest (each from the asking side's question to
    /// its next), in capture order; exchange 0 is the time before the first question (the
    /// handshake).
    pub exchanges: Vec<ExchangeBudget>,
}

/// One exchange's budget.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExchangeBudget {
    /// 0 before the first question, then 1, 2, ... as [`FlowReport::exchanges`] counts them.
    pub index: u64,
    /// Its first frame.
    pub start: At,
    /// Its time, ms.
    pub total_ms: f64,
    /// Its causes, most time first.
    pub causes: Vec<Spent>,
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
    /// Time this side's retransmission timeouts waited, ms: each from the segment's last
    /// sending to its retransmission (backoff included); absent when 0.
    #[serde(skip_serializing_if = "is_zero_ms")]
    pub retransmission_timeout_ms: f64,
    /// Time this side advertised a zero window, ms (its application read nothing; to the
    /// flow's last frame if the window never opened again); absent when 0.
    #[serde(skip_serializing_if = "is_zero_ms")]
    pub zero_window_ms: f64,
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

/// What the doctor found in one flow.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowReport {
    /// 1-based index in capture order (for `--flow`).
    pub index: usize,
    /// Client (SYN sender; without a handshake, the side with the higher port) and server.
    pub sides: [Side; 2],
    /// Frames in the flow.
    pub packets: u64,
    /// Exchanges: turns of the side that sent data first (a request and its answer are one).
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
    /// The round trip to the far end by the handshake, ms, when a middlebox near the capture
    /// acknowledges one side's data for it (a splitting NAT or proxy: `rtt_ms` is then the
    /// middlebox's); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub far_rtt_ms: Option<f64>,
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
    /// The directions whose small writes were ACK-clocked; absent from the JSON when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ack_clocked: Vec<AckClocked>,
    /// The directions whose sender held its own writes (a cork left on: not Nagle); absent
    /// from the JSON when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sender_holds: Vec<SenderHold>,
    /// Verdicts other than stalls, for the Wireshark plugin (one per ACK-clocked direction,
    /// per direction that held its own writes, per direction with retransmission timeouts
    /// and per side with zero windows); absent from the JSON when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// Where the flow's time went.
    pub budget: Budget,
    /// Verdict and advice for people.
    pub verdict: Vec<String>,
    /// The flow's segments, for the timeline ([`crate::report::svg`]); kept only when asked
    /// for ([`Options::timeline`](super::Options::timeline)), and at most 200 000 of them.
    /// Not in the JSON.
    #[serde(skip)]
    pub timeline: Vec<TimelinePoint>,
}

/// One segment of a flow, for the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelinePoint {
    /// When it passed the capture point, µs since the capture's first frame.
    pub us: u64,
    /// Who sent it.
    pub sender: Direction,
    /// Payload bytes.
    pub len: u32,
    /// A pure ACK (no payload, no SYN, FIN or RST).
    pub pure_ack: bool,
}

/// Timeline points kept per flow.
pub(super) const TIMELINE_MAX: usize = 200_000;

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
    /// Flows with an ACK-clocked direction; absent from the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub flows_ack_clocked: u64,
}

/// The analysis of a whole capture (embedded in [`crate::Diagnosis`], whose JSON holds these
/// fields at its top level).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Outcome {
    /// Flows analysed (after filters; with `--flow`, the one it names).
    pub flows_total: u64,
    /// Flows that matched the filters, the one `--flow` names or not (for its error).
    #[serde(skip)]
    pub flows_matching: u64,
    /// Flows with stalls.
    pub flows_with_stalls: u64,
    /// Stalls in all flows.
    pub stalls_total: u64,
    /// Time lost to stalls in all flows, s.
    pub stalled_s_total: f64,
    /// Flows with an ACK-clocked direction (a verdict of its own, not a stall); absent from
    /// the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub flows_ack_clocked: u64,
    /// Flows whose sender held its own writes (a cork left on, not Nagle: a verdict of its
    /// own); absent from the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub flows_sender_held: u64,
    /// Frames that were copies of one of their sender's last packets (the same IPv4 number
    /// and header within 9 ms, no duplicate ACK from the peer since: a mirror port's copy,
    /// or one packet captured on two interfaces), each read once; absent from the JSON
    /// when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub capture_copies: u64,
    /// Per server port, most stalled time first.
    pub services: Vec<Service>,
    /// The flows kept ([`Options::top`](super::Options::top)), most stalled time first.
    pub flows: Vec<FlowReport>,
    /// Flows judged before they ended, because more than
    /// [`MAX_LIVE_FLOWS`](super::MAX_LIVE_FLOWS) were open at once (a later packet of one
    /// starts a new flow, without its handshake); absent from the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub flows_judged_early: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_ms(ms: &f64) -> bool {
    *ms == 0.0
}
