//! The ACK-clocked connection: Nagle never waits for a delayed-ACK timer, yet the sender's
//! small writes leave only when an ACK comes in, so its departures are clocked by the peer.
//! On a connection several threads or tasks share, with many requests in flight (a Redis,
//! gRPC or database client), each request queues behind the one before it for a round trip
//! or more: no stall, and no RTT histogram shows it (redis-rs #2195: with Nagle on, unsent
//! data in 88.8 % of `ss -ti` samples, 99.9986 % of data segments sent right after an inbound
//! packet; Nagle off raised throughput 39-68 %).
//!
//! One rule for `nagless doctor` (evidence: a capture's segments) and `nagless watch` (the
//! kernel's holds), over one connection or a group of them in a window of time: enough
//! writes held behind unacknowledged data and sent by an ACK sooner than a stall
//! ([`DELAYED_ACK_MIN_US`](crate::DELAYED_ACK_MIN_US)), making up most of the data segments
//! where those are counted, while writes were queued behind the clock for a real share of
//! the time. Each threshold rules out a look-alike: a few clocked segments happen on every
//! interactive connection (the first write of a turn goes at once, the next waits one round
//! trip); a bulk transfer's full segments are clocked by the congestion window, not by Nagle
//! (the evidence counts only small segments); and a connection whose writes queue for a
//! sliver of the time loses nothing worth naming.

/// At least this many clocked writes in the window: below it, the ordinary round trip of an
/// interactive connection.
pub const MIN_CLOCKED: u64 = 50;

/// Where data segments are counted, at least this share of them left clocked by an ACK.
pub const MIN_SHARE: f64 = 0.5;

/// Writes were queued behind the clock at least this share of the window's time.
pub const MIN_QUEUED_FRACTION: f64 = 0.05;

/// What a window of one connection (or of a group) shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockEvidence {
    /// Small writes (segments smaller than the MSS) that waited behind unacknowledged data
    /// and left as an ACK arrived, sooner than a stall.
    pub clocked: u64,
    /// Small data segments the sender sent in the window, if counted (a capture counts
    /// them; the watch's eBPF backend sees only held writes).
    pub segments: Option<u64>,
    /// Time writes spent queued behind the clock, summed over the clocked writes, µs.
    pub queued_us: u64,
    /// The window's length, µs.
    pub window_us: u64,
}

/// An ACK-clocked connection's cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clocked {
    /// Share of the small data segments that left clocked, if counted.
    pub share: Option<f64>,
    /// Writes queued behind the clock, seconds per second (0.6: 600 ms of queueing every
    /// second, summed over the writes; over 1 when several queue at once).
    pub queued_per_s: f64,
    /// Mean time a clocked write queued, µs.
    pub mean_queued_us: u64,
}

/// Why a window is not ACK-clocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotClocked {
    /// Fewer than [`MIN_CLOCKED`] clocked writes.
    Few,
    /// Most small segments left without waiting for an ACK.
    Unclocked,
    /// Writes queued behind the clock less than [`MIN_QUEUED_FRACTION`] of the time.
    Brief,
}

/// Whether the window `e` shows an ACK-clocked connection, and its cost.
pub fn judge(e: &ClockEvidence) -> Result<Clocked, NotClocked> {
    if e.clocked < MIN_CLOCKED {
        return Err(NotClocked::Few);
    }
    let share = e
        .segments
        .map(|n| e.clocked.min(n) as f64 / n.max(1) as f64);
    if share.is_some_and(|s| s < MIN_SHARE) {
        return Err(NotClocked::Unclocked);
    }
    let queued_per_s = e.queued_us as f64 / e.window_us.max(1) as f64;
    if queued_per_s < MIN_QUEUED_FRACTION {
        return Err(NotClocked::Brief);
    }
    Ok(Clocked {
        share,
        queued_per_s,
        mean_queued_us: e.queued_us / e.clocked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(clocked: u64, segments: Option<u64>, queued_ms: u64) -> ClockEvidence {
        ClockEvidence {
            clocked,
            segments,
            queued_us: queued_ms * 1000,
            window_us: 1_000_000,
        }
    }

    #[test]
    fn a_busy_shared_connection_is_clocked_and_costed() {
        // 9,000 of 10,000 small segments sent by an ACK, writes queued 600 ms per second.
        let c = judge(&window(9000, Some(10_000), 600)).unwrap();
        assert_eq!(c.share, Some(0.9));
        assert!((c.queued_per_s - 0.6).abs() < 1e-9);
        assert_eq!(c.mean_queued_us, 66);
        // The watch's eBPF backend counts no segments: the rest decides.
        assert!(judge(&window(9000, None, 600)).is_ok());
    }

    #[test]
    fn look_alikes_are_not_clocked() {
        // An interactive connection: a round trip's wait now and then.
        assert_eq!(judge(&window(10, Some(20), 200)), Err(NotClocked::Few));
        // Under TCP_NODELAY most segments leave at once; a few still follow an ACK.
        assert_eq!(
            judge(&window(400, Some(10_000), 100)),
            Err(NotClocked::Unclocked)
        );
        // Clocked, but the queueing is a sliver of the time.
        assert_eq!(judge(&window(60, Some(80), 10)), Err(NotClocked::Brief));
        assert_eq!(judge(&ClockEvidence::default()), Err(NotClocked::Few));
    }
}
