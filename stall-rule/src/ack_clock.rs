//! The ACK-clocked connection: Nagle's other cost, where no delayed-ACK timer runs and yet the
//! writes wait.
//!
//! On a busy connection that several threads or tasks share (a Redis, gRPC or database client
//! with many requests in flight), each small write finds earlier data unacknowledged, so
//! Nagle holds it; the peer answers promptly, and its ACK releases the write. No single hold
//! is long enough to be a [stall](crate::judge) (they last about a round trip), but the
//! departures are **clocked** by the peer: a write leaves only when a packet comes in, and
//! the requests queue behind the clock. redis-rs measured it (#2195, #2196): `notsent > 0` in
//! 88.8 % of `ss -ti` samples with Nagle on against 15.4 % off, 99.9986 % of data segments
//! left right after an inbound packet, and turning Nagle off raised throughput 39-68 %.
//!
//! The evidence ([`ClockEvidence`]) is backend-neutral: how many small writes a prompt ACK
//! released (each one a hold that [`judge`](crate::judge) rejected as
//! [`PromptAck`](crate::NotStall::PromptAck) and that left within the release window of its
//! ACK: [`is_clocked_release`]), how long they waited in all, over what time and on how many
//! connections, and, where known, how many data segments were sent. [`judge_clock`] says
//! whether that is an ACK-clocked connection and what it costs: the share of the time its
//! writes waited behind the peer's ACKs, and the same as milliseconds per second.

use crate::{judge, release_window_us, HoldEvidence, NotStall};

/// Fewest ACK-released holds for a verdict. A Nagle connection that is not clocked still
/// sees a few such holds (the receiver's quick-ACK mode at the start of a connection, the
/// second write of an occasional pair): tens of them are chance, a clocked connection makes
/// thousands a second (23,600 in 1.6 s for `scripts/py/multiplexed.py`'s client on loopback).
pub(crate) const CLOCKED_RELEASES_MIN: u64 = 50;

/// Least share of the observed time the writes must have waited behind ACKs, per connection.
/// With Nagle off no write waits for an ACK (0 %); a clocked connection waits most of the
/// time (redis-rs: `notsent > 0` in 88.8 % of samples; 60-90 % measured here). A tenth is far
/// from both, and a few prompt-ACK holds on an otherwise idle connection never reach it.
pub(crate) const CLOCKED_SHARE_MIN: f64 = 0.10;

/// Where the data segments are counted: least share of them that must have left on an ACK's
/// release. A clocked sender sends nearly every segment so (redis-rs: 99.9986 %); a sender
/// most of whose segments left on their own is not clocked, whatever else waited.
pub(crate) const CLOCKED_SEGMENTS_MIN: f64 = 0.5;

/// Shortest span a verdict over a long watch is judged over, µs (see [`clock_window_us`]).
pub(crate) const CLOCK_SPAN_MIN_US: u64 = 1_000_000;

/// The time to judge holds seen from first to last over `span_us`, within a watch of
/// `watched_us`: the span, so that a connection clocked for 2 s of a 10-minute watch is
/// judged over its 2 s, but at least `CLOCK_SPAN_MIN_US` (a burst of holds in a few
/// milliseconds is judged as if spread over a second) and at most the watch.
pub fn clock_window_us(span_us: u64, watched_us: u64) -> u64 {
    watched_us.min(span_us.max(CLOCK_SPAN_MIN_US))
}

/// How to stop a clocked connection's writes from waiting.
pub const CLOCKED_FIX: &str = "set TCP_NODELAY on the connection (in its code, or live with `nagless fix --nodelay`, or at its next start with `nagless run --mode nodelay`): each write then leaves at once instead of waiting for the peer's ACK";

/// What was seen of a connection's (or a group of connections') ACK-released holds over
/// some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClockEvidence {
    /// Small writes held behind unacknowledged data that a prompt ACK released (see
    /// [`is_clocked_release`]): not stalls.
    pub releases: u64,
    /// The time those writes waited, summed, µs.
    pub held_us: u64,
    /// How long the connections were watched, µs (a window, or the span of the holds).
    pub window_us: u64,
    /// Connections the holds came from (at least 1 when there are holds).
    pub connections: u64,
    /// Data segments the connections sent meanwhile, if known.
    pub data_segments: Option<u64>,
}

impl ClockEvidence {
    /// The connections' time in all: each was watched for the window.
    pub(crate) fn observed_us(&self) -> u64 {
        self.window_us.max(1) * self.connections.max(1)
    }
}

/// An ACK-clocked connection's cost.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct AckClocked {
    /// Writes released by a prompt ACK.
    pub releases: u64,
    /// Share of each connection's time its writes waited behind the peer's ACKs (0 to 1).
    pub share: f64,
    /// The time the writes waited, per second of the window (all connections summed), ms.
    pub held_ms_per_s: f64,
}

/// Why a connection is not ACK-clocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotClocked {
    /// Fewer ACK-released holds than `CLOCKED_RELEASES_MIN`.
    TooFew,
    /// The writes waited less than `CLOCKED_SHARE_MIN` of the time.
    RarelyWaiting,
    /// Less than `CLOCKED_SEGMENTS_MIN` of the data segments left on an ACK.
    SegmentsUnclocked,
}

/// The verdict on a connection's (or group's) ACK-released holds.
pub fn judge_clock(e: &ClockEvidence) -> Result<AckClocked, NotClocked> {
    if e.releases < CLOCKED_RELEASES_MIN {
        return Err(NotClocked::TooFew);
    }
    let share = e.held_us as f64 / e.observed_us() as f64;
    if share < CLOCKED_SHARE_MIN {
        return Err(NotClocked::RarelyWaiting);
    }
    if let Some(segs) = e.data_segments {
        if (e.releases as f64) < CLOCKED_SEGMENTS_MIN * segs as f64 {
            return Err(NotClocked::SegmentsUnclocked);
        }
    }
    Ok(AckClocked {
        releases: e.releases,
        share: share.min(1.0),
        held_ms_per_s: e.held_us as f64 / e.window_us.max(1) as f64 * 1000.0,
    })
}

/// Whether a held write was released by a prompt ACK, as a clocked connection's writes are:
/// the stall rule rejects it only because the ACK came within the round trip
/// ([`NotStall::PromptAck`]: so it was small, and no zero window or loss recovery released
/// it), and it left within the release window of the last segment that arrived (so that
/// segment's ACK let it go, not a timer or pacing).
pub fn is_clocked_release(e: &HoldEvidence) -> bool {
    let (_, latest) = release_window_us(e.sender_side_rtt_us, e.sender_side_spread_us);
    judge(e) == Err(NotStall::PromptAck) && e.release_gap_us <= latest
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of 1 s on one connection.
    fn seen(releases: u64, held_us: u64) -> ClockEvidence {
        ClockEvidence {
            releases,
            held_us,
            window_us: 1_000_000,
            connections: 1,
            data_segments: None,
        }
    }

    #[test]
    fn a_busy_shared_connection_waiting_on_acks_is_clocked_and_costed() {
        // 14,000 holds of about 44 µs: 610 ms of every second.
        let c = judge_clock(&seen(14_000, 610_000)).unwrap();
        assert!((c.share - 0.61).abs() < 1e-9, "{c:?}");
        assert!((c.held_ms_per_s - 610.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.releases, 14_000);
        // Two connections each waiting 40 % of a 2 s window: 40 % each, 800 ms/s in all.
        let two = ClockEvidence {
            window_us: 2_000_000,
            connections: 2,
            ..seen(1_000, 1_600_000)
        };
        let c = judge_clock(&two).unwrap();
        assert!((c.share - 0.4).abs() < 1e-9 && (c.held_ms_per_s - 800.0).abs() < 1e-9);
    }

    #[test]
    fn each_threshold_rules_out_its_look_alike() {
        // A few prompt ACKs at a connection's start.
        assert_eq!(judge_clock(&seen(12, 500_000)), Err(NotClocked::TooFew));
        assert_eq!(judge_clock(&seen(49, 500_000)), Err(NotClocked::TooFew));
        // Request/response traffic whose second write waits one short round trip now and
        // then: many holds, little waiting.
        assert_eq!(
            judge_clock(&seen(2_000, 60_000)),
            Err(NotClocked::RarelyWaiting)
        );
        assert!(judge_clock(&seen(50, 100_000)).is_ok());
        // A short burst within a long watch is judged over a second, a long one over its span.
        assert_eq!(clock_window_us(5_000, 600_000_000), 1_000_000);
        assert_eq!(clock_window_us(2_000_000, 600_000_000), 2_000_000);
        assert_eq!(clock_window_us(5_000, 250_000), 250_000);
        // Where segments are counted: most left on their own.
        let mostly_free = ClockEvidence {
            data_segments: Some(10_000),
            ..seen(2_000, 500_000)
        };
        assert_eq!(
            judge_clock(&mostly_free),
            Err(NotClocked::SegmentsUnclocked)
        );
        let clocked = ClockEvidence {
            data_segments: Some(2_100),
            ..mostly_free
        };
        assert!(judge_clock(&clocked).is_ok());
        // Nothing at all, and no window: no verdict, no division by zero.
        assert_eq!(
            judge_clock(&ClockEvidence::default()),
            Err(NotClocked::TooFew)
        );
    }

    #[test]
    fn the_share_never_exceeds_the_whole_time() {
        // Sampling counts each hold to within an interval: it may add up past the window.
        let c = judge_clock(&seen(400, 1_300_000)).unwrap();
        assert_eq!(c.share, 1.0);
    }

    fn held(ack_delay_us: u64, release_gap_us: u64) -> HoldEvidence {
        HoldEvidence {
            held_len: 40,
            options: 0,
            mss: 65483,
            ack_delay_us,
            release_gap_us,
            sender_side_rtt_us: 0,
            sender_side_spread_us: 0,
            sender_side_rtt_known: true,
            nagle_off: false,
            zero_window: false,
            loss_recovery: false,
        }
    }

    #[test]
    fn a_clocked_release_is_a_prompt_ack_that_let_the_write_go() {
        assert!(is_clocked_release(&held(30, 5)));
        // A stall is not a clocked release, nor a full segment, nor one a window update or
        // loss recovery released, nor one that left long after the last segment came.
        assert!(!is_clocked_release(&held(40_000, 5)));
        assert!(!is_clocked_release(&HoldEvidence {
            held_len: 65483,
            ..held(30, 5)
        }));
        assert!(!is_clocked_release(&HoldEvidence {
            zero_window: true,
            ..held(30, 5)
        }));
        assert!(!is_clocked_release(&HoldEvidence {
            loss_recovery: true,
            ..held(30, 5)
        }));
        assert!(!is_clocked_release(&HoldEvidence {
            nagle_off: true,
            ..held(30, 5)
        }));
        assert!(!is_clocked_release(&held(30, 5_000)));
    }
}
