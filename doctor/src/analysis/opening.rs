//! How a connection opened, as far as the capture saw it ([`Opening`]): the client's SYNs
//! (copies of one, sent again while unanswered: its connect's retries; a copy sooner than a
//! retransmission timeout can come is the capture's duplicate, not counted), whether anything
//! came from the server, and whether its first word was a reset acknowledging the SYN (a
//! refusal; a reset later, with the SYN-ACK missed by the capture, is not). The budget gives
//! the retries to the client's loss recovery; the verdict names them ([`verdict::Opened`]).

use super::budget::Budget;
use super::direction::Direction;
use super::sequence;
use super::verdict;
use crate::packet::{flags, Segment};

/// How the connection opened.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Opening {
    /// The client's SYNs, and its last (µs, frame).
    syns: u32,
    last_syn: (u64, u64),
    /// Anything but a reset came from the server.
    heard: bool,
    refused: bool,
}

impl Opening {
    /// The flow's next segment `s`, from `d`, at `us` (frame `frame`).
    pub(super) fn on_segment(&mut self, d: Direction, s: &Segment, us: u64, frame: u64) {
        let reset = s.flags & flags::RST != 0;
        if d == Direction::Server {
            self.refused |= reset && !self.heard && self.syns > 0 && s.flags & flags::ACK != 0;
            self.heard |= !reset;
        } else if s.flags & (flags::SYN | flags::ACK) == flags::SYN && !self.heard {
            let copy = self.syns > 0 && us < self.last_syn.0 + sequence::RTO_MIN_US;
            if !copy {
                self.syns = self.syns.saturating_add(1);
                self.last_syn = (us, frame);
            }
        }
    }

    /// A budget from the flow's `first` frame (µs, frame): the client's SYNs sent again, if
    /// it sent them again, are its connect's loss recovery.
    pub(super) fn budget(self, (first_us, first_frame): (u64, u64)) -> Box<Budget> {
        let mut b = Box::new(Budget::new(first_us, first_frame));
        if self.syns > 1 {
            b.handshake_retried(self.last_syn.0, self.last_syn.1);
        }
        b
    }

    /// What the verdict says of it, for a flow whose first frame came at `first_us` and
    /// whose server sent a SYN-ACK or not (`synack`).
    pub(super) fn opened(self, first_us: u64, synack: bool) -> verdict::Opened {
        verdict::Opened {
            syns: self.syns,
            retried_ms: self.last_syn.0.saturating_sub(first_us) as f64 / 1000.0,
            answered: synack || self.heard,
            refused: self.refused,
        }
    }
}
