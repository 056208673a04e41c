//! A sender's own hold, not Nagle's: a cork left on. A program that sends a message's last
//! piece with `MSG_MORE`, or sets `TCP_CORK` and does not clear it, leaves that piece in its
//! kernel; with nothing in flight no ACK comes to push it, and it leaves when the kernel ends
//! the cork: its probe timer, whose floor is the retransmission timeout's ([`CORK_CEILING_US`],
//! longer when the path's timeout is). HAProxy #3447 was this, with `TCP_NODELAY` on.
//!
//! The doctor sees it on the wire (a small segment about 200 ms after its sender's answer
//! began, with all it had sent acknowledged and the peer waiting); the watcher sees it in the
//! kernel (a corked send's bytes, released with no ACK). Both judge its length here
//! ([`is_cork_ceiling`]).

/// The kernel's ceiling on a cork, µs: its probe timer's floor (`TCP_RTO_MIN`).
pub const CORK_CEILING_US: u64 = 200_000;

/// How much sooner than the ceiling a release may be seen: the timer fires on a tick of the
/// kernel's clock, and a capture point may see the two segments at different delays.
pub const CORK_EARLY_US: u64 = 10_000;

/// How to stop a sender holding its own writes.
pub const CORK_FIX: &str = "release the cork after each message: clear TCP_CORK once the message is written, or send its last piece without MSG_MORE";

/// Whether bytes a sender kept back with nothing in flight, for `held_us`, were held until
/// the kernel's ceiling on a cork (and not written out by the program sooner).
pub fn is_cork_ceiling(held_us: u64) -> bool {
    held_us + CORK_EARLY_US >= CORK_CEILING_US
}

/// Whether a hold seen on the wire, `held_us` on a path of round trip `rtt_us`, can have been
/// the kernel's ceiling: the probe timer waits the retransmission timeout, which Linux keeps at
/// least `TCP_RTO_MIN` (200 ms, the floor of its variance term) above its smoothed round trip,
/// so a shorter hold was written out by the program itself (a browser's next request after
/// its own think time). Three quarters of the round trip are asked for, not all of it: a
/// capture's estimate of it may exceed the sender's. (A host that lowers `rto_min` on its
/// routes has a ceiling nearer 200 ms on a long path: its holds there are left unnamed.)
pub fn is_cork_ceiling_on_path(held_us: u64, rtt_us: u64) -> bool {
    is_cork_ceiling(held_us.saturating_sub(rtt_us * 3 / 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_is_the_ceilings_from_a_tick_before_it() {
        assert!(is_cork_ceiling(200_000) && is_cork_ceiling(190_000));
        assert!(
            is_cork_ceiling(1_200_000),
            "a longer timeout on a longer path"
        );
        assert!(!is_cork_ceiling(189_999) && !is_cork_ceiling(15_000));
    }

    #[test]
    fn on_a_long_path_the_ceiling_is_the_round_trip_more() {
        // 100 ms of round trip: the timeout is 300 ms or more.
        assert!(is_cork_ceiling_on_path(300_000, 100_000));
        assert!(
            is_cork_ceiling_on_path(270_000, 100_000),
            "the estimate's margin"
        );
        assert!(!is_cork_ceiling_on_path(252_000, 100_000));
        // On a short path, as without one.
        assert!(is_cork_ceiling_on_path(200_000, 200));
        assert!(!is_cork_ceiling_on_path(185_000, 200));
    }
}
