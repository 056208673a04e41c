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
//!
//! # Rooms
//!
//! A segment goes through them in this order:
//!
//! | module | job |
//! |---|---|
//! | `options` | which flows to analyse ([`Options`], [`Filter`]) |
//! | `analyzer` | the [`Analyzer`]: which flow a segment belongs to, when a flow ends, totals per service, the flows kept |
//! | `table` | the flow table: live flows by 4-tuple, with a fast hasher |
//! | `flow` | one flow: dispatches each segment to the rooms below, then builds its [`FlowReport`] |
//! | `direction` | which way a segment goes ([`Direction`], with its peer) |
//! | `sequence` | per direction: sequence numbers, what is unacknowledged, retransmissions, duplicate ACKs, SACK, windows, the round trip |
//! | `candidates` | writes that followed an ACK and slow pure ACKs: what might be a stall, held until the round trips are known well |
//! | `relay` | what reached each host lately: a stall on a relay's hop names the flow it relays ([`Pattern::RelayHop`]) |
//! | `clock` | per direction: small segments that left as the ACK of the last one came, carrying writes merged meanwhile: the evidence [`judge_clock`](crate::rule::judge_clock) judges |
//! | `answer` | how long the answering side took to answer, its side of the round trip taken off: named without a stall |
//! | `hold` | per direction: a small segment that left about 200 ms after its answer began, the peer waiting: a cork left on (not Nagle) |
//! | `waits` | per direction: retransmission timeouts and zero windows, their frames kept as evidence (not Nagle) |
//! | `copies` | per direction: packets the capture saw twice (a mirror port, two interfaces), read once |
//! | `ip_ids` | per direction: packets lost before the capture point, from the IPv4 numbers skipped (their retransmission's wait is loss recovery, not the sender's time) |
//! | `budget` | where the flow's time went: each span between data segments labelled with a cause, later evidence relabelling what it covers ([`Budget`]) |
//! | `ledger` | the budget's runs of labelled time, end to end, folded into totals per cause and per exchange as they age |
//! | `judge` | the candidates judged by [`crate::rule`]: stalls, their patterns, delayed ACKs, the capture point |
//! | `verdict` | the verdict and advice for people (the budget's too: its largest wait, each cause's fix, the findings Wireshark marks) |
//! | `output` | what the analysis returns ([`Outcome`], [`FlowReport`] and their parts; serialized as `docs/doctor-json.md` says) |

mod analyzer;
mod answer;
mod budget;
mod candidates;
mod clock;
mod copies;
mod direction;
mod endpoint;
mod flow;
mod hold;
mod ip_ids;
mod judge;
mod ledger;
mod opening;
mod options;
mod output;
mod relay;
mod sequence;
mod table;
mod verdict;
mod waits;

#[cfg(test)]
pub(crate) use analyzer::{analyse, analyse_all};
pub use analyzer::{Analyzer, MAX_LIVE_FLOWS};
pub use direction::Direction;
pub use options::{Filter, Options, StallOrder};
pub use output::{
    AckClocked, At, Budget, CapturePoint, Cause, ClockedSegment, DelayedAck, ExchangeBudget,
    Finding, FindingFrame, FlowReport, HeldTail, Outcome, Pattern, SenderHold, Service, Side,
    Spent, Stall, TimelinePoint,
};

#[cfg(test)]
mod tests;
