//! One definition of a Nagle/delayed-ACK stall, shared by `nagless doctor` (evidence: the
//! packets of a capture) and `nagless watch` (evidence: the kernel's per-socket state).
//!
//! A **stall** is a small write (less than a full segment) that the sender's TCP held back
//! because earlier data was unacknowledged (Nagle), where the ACK that released it was
//! **delayed** by the receiver's delayed-ACK timer (it came [`DELAYED_ACK_MIN_US`] or more
//! after the data it acknowledged reached the receiver), and the write left as soon as that ACK
//! reached the sender. Each part rules out a look-alike: a full segment is never held by
//! Nagle; a prompt ACK means the wait was the path's round trip, not a timer; a write that
//! leaves well after the ACK arrived was written late (think time, pacing); an ACK that opened
//! a zero window, or acknowledged retransmitted data, released flow control or loss recovery.
//!
//! The evidence is judged within the bounds the path allows ([`release_window_us`]): a held
//! write cannot reach the capture point sooner than the sender's side of the round trip after
//! the ACK that released it, and not much later than that; both bounds widen by the spread
//! measured on that side of the path. A sender seen with two small segments in flight at once
//! does not run Nagle's algorithm on that connection, so nothing of it is a Nagle stall.
//!
//! Nagle costs a busy shared connection time without any stall: its writes wait for the
//! peer's prompt ACKs, one round trip after another. [`judge_clock`] names such an
//! **ACK-clocked** connection from its ACK-released holds ([`ClockEvidence`]), with its cost.
//! And a sender can hold its own writes without Nagle: a cork left on, which the kernel
//! releases after 200 ms ([`is_cork_ceiling`]).
//!
//! Public is what the doctor and the watcher use; the rule's other thresholds are its own
//! (`unreachable_pub` holds it).
#![warn(unreachable_pub)]

mod ack_clock;
mod cork;
pub use ack_clock::{
    clock_window_us, is_clocked_release, judge_clock, AckClocked, ClockEvidence, NotClocked,
    CLOCKED_FIX,
};
pub use cork::{
    is_cork_ceiling, is_cork_ceiling_on_path, CORK_CEILING_US, CORK_EARLY_US, CORK_FIX,
};

/// An ACK sent this long or longer after the data it acknowledges (the path's round trip
/// taken off) is a delayed ACK. Linux's delayed-ACK timer is 40 ms at its shortest
/// (`TCP_ATO_MIN`), other stacks' are 100-200 ms; 30 ms leaves room for timestamp jitter.
pub const DELAYED_ACK_MIN_US: u64 = 30_000;

/// No delayed-ACK timer runs longer than this (RFC 1122: "MUST be less than 0.5 seconds");
/// an ACK later than that beyond the round trip waited for something else (data the capture
/// does not hold, an idle sender), and releases no stall.
pub(crate) const DELAYED_ACK_MAX_US: u64 = 500_000;

/// Delays from this up come from a 100-200 ms timer (Windows, macOS), below it from a 40 ms
/// one (Linux, FreeBSD since 2020); except on long paths, where Linux's timer grows toward
/// the smoothed RTT (see [`AckTimer::on_path`]).
pub(crate) const CLASSIC_TIMER_MIN_US: u64 = 90_000;

/// The longest delay Linux's 40 ms timer shows on a short path (timer ticks and the
/// scheduler add a few milliseconds: 44-48 ms are common at HZ=250).
pub(crate) const LINUX_TIMER_MAX_US: u64 = 50_000;

/// The TTL (IPv4) or hop limit (IPv6) a host's system starts its packets with, from one seen
/// on the wire: the smallest of the usual initial values at or above it (64: Linux, macOS,
/// the BSDs; 128: Windows; 255: network equipment, Solaris). A packet seen with that value
/// itself crossed no router before the capture point.
pub fn initial_ttl(seen: u8) -> u8 {
    match seen {
        0..=64 => 64,
        65..=128 => 128,
        _ => 255,
    }
}

/// Whether an ACK `delay_us` late (beyond the acker's side of the round trip) was held by a
/// delayed-ACK timer.
pub fn is_delayed_ack(delay_us: u64) -> bool {
    (DELAYED_ACK_MIN_US..=DELAYED_ACK_MAX_US).contains(&delay_us)
}

/// Which delayed-ACK timer the delays show: named by what was measured, not by a guess at the
/// receiver's operating system (two systems share each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AckTimer {
    /// About 40 ms (at most about the RTT on long paths): Linux (`TCP_ATO_MIN`), FreeBSD since
    /// 2020 (`net.inet.tcp.delacktime`).
    Linux40ms,
    /// About 100 to 200 ms: Windows (200 ms), macOS (100 ms).
    Classic200ms,
}

impl AckTimer {
    /// The class of a delayed ACK that came `delay_us` late; `None` if it was not delayed
    /// (or later than any timer).
    pub(crate) fn of(delay_us: u64) -> Option<AckTimer> {
        if !is_delayed_ack(delay_us) {
            None
        } else if delay_us < CLASSIC_TIMER_MIN_US {
            Some(AckTimer::Linux40ms)
        } else {
            Some(AckTimer::Classic200ms)
        }
    }

    /// The class of a delayed ACK `delay_us` late on a path of round trip `rtt_us`: Linux's
    /// timer is at most about max(40 ms, RTT), so a delay within that (and 20 ms of jitter) is
    /// Linux's even when it is 90 ms or more.
    pub fn on_path(delay_us: u64, rtt_us: u64) -> Option<AckTimer> {
        match AckTimer::of(delay_us)? {
            AckTimer::Classic200ms if delay_us <= 40_000u64.max(rtt_us) + 20_000 => {
                Some(AckTimer::Linux40ms)
            }
            t => Some(t),
        }
    }

    /// The class seen most often, from counts indexed by `AckTimer as usize` (`None` when
    /// nothing was counted); a tie goes to Linux.
    pub fn most_seen(counts: [u64; 2]) -> Option<AckTimer> {
        if counts == [0, 0] {
            None
        } else if counts[AckTimer::Classic200ms as usize] > counts[AckTimer::Linux40ms as usize] {
            Some(AckTimer::Classic200ms)
        } else {
            Some(AckTimer::Linux40ms)
        }
    }

    /// The class of a delayed ACK `delay_us` late on a path of round trip `rtt_us`, from an
    /// acker whose packets reach the capture with IP TTL `ttl` (if seen): an acker whose
    /// system starts its packets at TTL 128 is Windows, whose timer is not Linux's whatever the
    /// delay (it fires anywhere up to 200 ms after the data: 56 ms, 131 ms and 199 ms are all
    /// seen), so its delays are Windows' class; otherwise [`AckTimer::on_path`].
    pub fn of_acker(delay_us: u64, rtt_us: u64, ttl: Option<u8>) -> Option<AckTimer> {
        let timer = AckTimer::on_path(delay_us, rtt_us)?;
        if ttl.is_some_and(|t| initial_ttl(t) == 128) {
            Some(AckTimer::Classic200ms)
        } else {
            Some(timer)
        }
    }

    /// For people: the timer, as [`AckTimer::describe`] says it where the delays measured
    /// (`typical_us`, on a path of round trip `rtt_us`) fit it; where they do not, the delay
    /// itself and what it is not: a Windows acker's (TTL `ttl`) 56 ms is "a delayed-ACK timer
    /// of ~56 ms (not Linux's 40 ms: ...)", not Linux's timer.
    pub fn describe_measured(self, typical_us: u64, rtt_us: u64, ttl: Option<u8>) -> String {
        let ms = typical_us.div_ceil(1_000);
        let windows = ttl.is_some_and(|t| initial_ttl(t) == 128);
        match self {
            AckTimer::Classic200ms if windows && typical_us < CLASSIC_TIMER_MIN_US => format!(
                "a delayed-ACK timer of ~{ms} ms (not Linux's 40 ms: the acker's TTL says Windows, whose timer fires up to 200 ms after the data)"
            ),
            AckTimer::Linux40ms
                if typical_us > LINUX_TIMER_MAX_US && typical_us > rtt_us + 20_000 =>
            {
                format!("a delayed-ACK timer of ~{ms} ms (longer than Linux's 40 ms)")
            }
            t => t.describe().to_string(),
        }
    }

    /// For people: the timer the delays show, and which stacks use one like it.
    pub fn describe(self) -> &'static str {
        match self {
            AckTimer::Linux40ms => {
                "a 40 ms delayed-ACK timer, as Linux and FreeBSD (since 2020) have"
            }
            AckTimer::Classic200ms => {
                "a 100-200 ms delayed-ACK timer, as Windows (200 ms) and macOS (100 ms) have"
            }
        }
    }

    /// How to make a receiver with this timer ACK at once, for each host that has one: on
    /// Linux nagless's own receiver fixes first (the running program, then at its next
    /// start), then the kernel's knobs.
    pub fn receiver_fix(self) -> &'static str {
        match self {
            AckTimer::Linux40ms => {
                "on Linux `sudo nagless fix --pid PID --ack-delay-max 8ms` (the running receiver, no restart) or `nagless run --ack-delay-max 0 -- CMD` (at its next start), or set TCP_QUICKACK after each read, or `ip route change <route> quickack 1`; on FreeBSD `sysctl net.inet.tcp.delayed_ack=0`"
            }
            AckTimer::Classic200ms => {
                "on Windows set TcpAckFrequency=1 for the interface (registry); on macOS `sysctl net.inet.tcp.delayed_ack=0`"
            }
        }
    }
}

/// How to stop the sender's small writes from waiting.
pub const SENDER_FIX: &str = "coalesce each message into one write (writev/sendmsg), or run the program under `nagless run`; TCP_NODELAY also removes the stall but sends more packets";

/// No full segment is smaller than this (the MSS every IPv4 host must accept, RFC 9293).
pub const MIN_FULL_SEGMENT: u32 = 536;

/// What is known of a sender's segment sizes, to tell a full segment from a small one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentSizes {
    /// The MSS each side's SYN announced (either may be missing from a capture).
    pub announced: [Option<u32>; 2],
    /// The largest payload the sender sent, and how many segments carried that many bytes.
    pub largest: u32,
    /// Segments that carried `largest` bytes.
    pub largest_count: u32,
}

impl SegmentSizes {
    /// The full segment, and whether it counts TCP options (a segment is small when its
    /// payload, plus its options if they count, is less; see [`SegmentSizes::is_small`]):
    /// the smaller of the two SYNs' MSS; or, where the sender sent two or more segments of
    /// one size at three quarters of that or more and below it less the timestamp option (a
    /// path with a smaller MTU: a tunnel, a VPN, PPPoE), that payload; with no SYN, the
    /// largest payload (at least `MIN_FULL_SEGMENT`).
    pub fn full_segment(&self) -> (u32, bool) {
        let announced = match self.announced {
            [Some(a), Some(b)] => a.min(b),
            [Some(m), None] | [None, Some(m)] => m,
            [None, None] => return (self.largest.max(MIN_FULL_SEGMENT), false),
        };
        let v = self.largest;
        if self.largest_count >= 2 && v * 4 >= announced * 3 && v + 12 < announced {
            (v, false)
        } else {
            (announced, true)
        }
    }

    /// Whether a segment with `payload` bytes and `options` bytes of TCP options is smaller
    /// than a full segment.
    pub fn is_small(&self, payload: u32, options: u32) -> bool {
        let (full, counts_options) = self.full_segment();
        is_small(payload, if counts_options { options } else { 0 }, full)
    }
}

/// Whether a write that left after a release was written before it (so Nagle held it): a
/// write that did not open its turn was; one that did (the peer sent data last) was if the
/// newest peer data it could be answering (`heard_us`: the newest its ACK field covers)
/// came `WRITTEN_BEFORE_RELEASE_US` or more before the release, or if it answers none.
/// Key exchanges are found so (both sides send their first message at once; the second
/// waits on the ACK of the first), and an answer to data sent after a late ACK is told apart.
pub fn written_before_release(opened_turn: bool, heard_us: Option<u64>, release_us: u64) -> bool {
    !opened_turn || heard_us.is_none_or(|h| h + WRITTEN_BEFORE_RELEASE_US <= release_us)
}

/// How much sooner than the release the peer's data must have come for a write that opened
/// its turn to have been written before the release (scheduling and path jitter).
pub(crate) const WRITTEN_BEFORE_RELEASE_US: u64 = 2_000;

/// Whether a segment carrying `payload` bytes with `options` bytes of TCP options is smaller
/// than a full segment: Nagle only holds such segments. A full segment carries the MSS minus
/// its options (1448 bytes with timestamps under an MSS of 1460).
pub(crate) fn is_small(payload: u32, options: u32, mss: u32) -> bool {
    payload.saturating_add(options) < mss
}

/// When, after the releasing ACK passed the capture point, a held write can pass it:
/// `(earliest, latest)` µs. The ACK must travel to the sender and the write back, the sender's
/// side of the round trip (0 at the sender's end, the whole RTT at the receiver's end, its
/// fastest seen); `spread_us` is how much that side's measured round trips vary (path jitter,
/// scheduling). The write cannot come sooner than that round trip allows, less the spread and
/// a millisecond; nor later than the round trip plus a quarter, twice the spread, and 2 ms.
pub fn release_window_us(sender_side_rtt_us: u64, spread_us: u64) -> (u64, u64) {
    let rtt = sender_side_rtt_us;
    let earliest = rtt.saturating_sub(1_000 + rtt / 8 + 2 * spread_us);
    let latest = 2_000 + rtt + (rtt / 4).max(2 * spread_us);
    (earliest, latest)
}

/// What was seen of one small write that left after an ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldEvidence {
    /// Payload bytes of the write, and bytes of TCP options on its segment.
    pub held_len: u32,
    /// TCP option bytes on the held segment.
    pub options: u32,
    /// Maximum segment size of the sender.
    pub mss: u32,
    /// How late the ACK that released it came, beyond the receiver's side of the round trip.
    pub ack_delay_us: u64,
    /// Time from that ACK to the write, as seen where the evidence was taken.
    pub release_gap_us: u64,
    /// The sender's side of the round trip, as seen where the evidence was taken.
    pub sender_side_rtt_us: u64,
    /// How much the round trips measured on the sender's side vary (0 where not measured).
    pub sender_side_spread_us: u64,
    /// `sender_side_rtt_us` is a true round trip (the handshake measured it, or the evidence
    /// was taken at the sender): only then does it bound how soon the write can come. A
    /// fastest ACK seen mid-connection may itself have been delayed, or ridden on data.
    pub sender_side_rtt_known: bool,
    /// The sender was seen with two small segments in flight at once on this connection: it
    /// does not run Nagle's algorithm (TCP_NODELAY), so nothing it sends is held for an ACK.
    pub nagle_off: bool,
    /// The ACK advertised a zero window (it was a window update, not a Nagle release).
    pub zero_window: bool,
    /// The ACK acknowledged retransmitted data, or carried SACK blocks (loss recovery).
    pub loss_recovery: bool,
}

/// Why a write that followed an ACK is not a stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotStall {
    /// A full segment: Nagle does not hold those.
    FullSegment,
    /// The ACK came within the round trip: no delayed-ACK timer was involved.
    PromptAck,
    /// The ACK came later than any delayed-ACK timer runs: it waited for something else.
    LateAck,
    /// The write left well after the ACK arrived: it was written late.
    WrittenLater,
    /// The write was seen sooner after the ACK than the round trip allows: the ACK cannot
    /// have released it (it was on its way already).
    TooSoon,
    /// The sender does not run Nagle's algorithm on this connection.
    NagleOff,
    /// The ACK opened a zero window.
    ZeroWindow,
    /// The ACK was part of loss recovery.
    LossRecovery,
}

/// The verdict on one write.
pub fn judge(e: &HoldEvidence) -> Result<(), NotStall> {
    let (earliest, latest) = release_window_us(e.sender_side_rtt_us, e.sender_side_spread_us);
    let earliest = if e.sender_side_rtt_known { earliest } else { 0 };
    if !is_small(e.held_len, e.options, e.mss) {
        Err(NotStall::FullSegment)
    } else if e.nagle_off {
        Err(NotStall::NagleOff)
    } else if e.zero_window {
        Err(NotStall::ZeroWindow)
    } else if e.loss_recovery {
        Err(NotStall::LossRecovery)
    } else if e.ack_delay_us < DELAYED_ACK_MIN_US {
        Err(NotStall::PromptAck)
    } else if e.ack_delay_us > DELAYED_ACK_MAX_US {
        Err(NotStall::LateAck)
    } else if e.release_gap_us > latest {
        Err(NotStall::WrittenLater)
    } else if e.release_gap_us < earliest {
        Err(NotStall::TooSoon)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> HoldEvidence {
        HoldEvidence {
            held_len: 100,
            options: 12,
            mss: 1460,
            ack_delay_us: 40_000,
            release_gap_us: 100,
            sender_side_rtt_us: 0,
            sender_side_spread_us: 0,
            sender_side_rtt_known: true,
            nagle_off: false,
            zero_window: false,
            loss_recovery: false,
        }
    }

    #[test]
    fn each_condition_rules_out_its_look_alike() {
        assert_eq!(judge(&held()), Ok(()));
        let full = HoldEvidence {
            held_len: 1448,
            ..held()
        };
        assert_eq!(judge(&full), Err(NotStall::FullSegment));
        let prompt = HoldEvidence {
            ack_delay_us: 5_000,
            ..held()
        };
        assert_eq!(judge(&prompt), Err(NotStall::PromptAck));
        let lost = HoldEvidence {
            ack_delay_us: 51_000_000,
            ..held()
        };
        assert_eq!(judge(&lost), Err(NotStall::LateAck));
        let late = HoldEvidence {
            release_gap_us: 30_000,
            ..held()
        };
        assert_eq!(judge(&late), Err(NotStall::WrittenLater));
        // Seen at the receiver's end of a 50 ms path, the write comes one RTT after the ACK.
        let far = HoldEvidence {
            release_gap_us: 50_400,
            sender_side_rtt_us: 50_000,
            ..held()
        };
        assert_eq!(judge(&far), Ok(()));
        // At the receiver's end of a 99 ms path, a write seen 68 ms after the ACK left before
        // the ACK could reach its sender.
        let early = HoldEvidence {
            release_gap_us: 68_000,
            sender_side_rtt_us: 99_000,
            ..held()
        };
        assert_eq!(judge(&early), Err(NotStall::TooSoon));
        // Unless that round trip is only the fastest ACK seen mid-connection, which may have
        // been delayed itself.
        let unsure = HoldEvidence {
            sender_side_rtt_known: false,
            ..early
        };
        assert_eq!(judge(&unsure), Ok(()));
        // On a jittery 2-4 ms path, a write 5.5 ms after the ACK is still its release...
        let jittery = HoldEvidence {
            release_gap_us: 5_500,
            sender_side_rtt_us: 2_000,
            sender_side_spread_us: 1_000,
            ..held()
        };
        assert_eq!(judge(&jittery), Ok(()));
        // ...where on a steady one it is a late write.
        let steady = HoldEvidence {
            sender_side_spread_us: 0,
            ..jittery
        };
        assert_eq!(judge(&steady), Err(NotStall::WrittenLater));
        let nodelay = HoldEvidence {
            nagle_off: true,
            ..held()
        };
        assert_eq!(judge(&nodelay), Err(NotStall::NagleOff));
        let zw = HoldEvidence {
            zero_window: true,
            ..held()
        };
        assert_eq!(judge(&zw), Err(NotStall::ZeroWindow));
        let lr = HoldEvidence {
            loss_recovery: true,
            ..held()
        };
        assert_eq!(judge(&lr), Err(NotStall::LossRecovery));
    }

    #[test]
    fn full_segments_come_from_both_syns_and_the_path() {
        let sizes = |a, b, largest, largest_count| SegmentSizes {
            announced: [a, b],
            largest,
            largest_count,
        };
        // The sender's own SYN said 1380: 1368 bytes and 12 of options is full.
        assert!(!sizes(Some(1460), Some(1380), 1368, 1).is_small(1368, 12));
        assert!(sizes(Some(1460), Some(1380), 1368, 1).is_small(1367, 12));
        // A 1300-byte payload sent again and again under a 1460 MSS: the path's full segment.
        assert_eq!(
            sizes(Some(1460), Some(1460), 1300, 5).full_segment(),
            (1300, false)
        );
        // Once is not a pattern; 600 bytes is a message, not a path.
        assert_eq!(
            sizes(Some(1460), Some(1460), 1300, 1).full_segment(),
            (1460, true)
        );
        assert_eq!(
            sizes(Some(1460), Some(1460), 600, 9).full_segment(),
            (1460, true)
        );
        // Full 1448-byte segments with timestamps: the MSS, options counted, as before.
        assert_eq!(
            sizes(Some(1460), Some(1460), 1448, 9).full_segment(),
            (1460, true)
        );
        // No SYN: the largest payload, at least 536.
        assert_eq!(sizes(None, None, 100, 1).full_segment(), (536, false));
        assert_eq!(sizes(None, None, 1448, 1).full_segment(), (1448, false));
    }

    #[test]
    fn a_write_that_opened_its_turn_was_written_before_the_release_only_if_its_cause_was() {
        assert!(written_before_release(false, Some(10_000), 10_000));
        assert!(written_before_release(true, None, 10_000));
        assert!(written_before_release(true, Some(1_000), 58_000));
        assert!(!written_before_release(true, Some(57_000), 58_000));
        assert!(!written_before_release(true, Some(59_000), 58_000));
    }

    #[test]
    fn the_release_window_widens_with_the_round_trip_and_its_spread() {
        assert_eq!(release_window_us(0, 0), (0, 2_000));
        let (lo, hi) = release_window_us(40_000, 0);
        assert!(lo > 30_000 && lo < 40_000 && hi > 50_000 && hi < 55_000);
        let (lo2, hi2) = release_window_us(40_000, 8_000);
        assert!(lo2 < lo && hi2 > hi);
    }

    #[test]
    fn timers_are_told_apart() {
        assert_eq!(AckTimer::of(10_000), None);
        assert_eq!(AckTimer::of(600_000), None);
        assert_eq!(AckTimer::of(44_000), Some(AckTimer::Linux40ms));
        assert_eq!(AckTimer::of(200_000), Some(AckTimer::Classic200ms));
        assert_eq!(AckTimer::of(100_000), Some(AckTimer::Classic200ms));
        // On a 120 ms path, Linux's timer reaches about the RTT.
        assert_eq!(
            AckTimer::on_path(110_000, 120_000),
            Some(AckTimer::Linux40ms)
        );
        assert_eq!(
            AckTimer::on_path(200_000, 10_000),
            Some(AckTimer::Classic200ms)
        );
        assert!(is_small(1447, 12, 1460) && !is_small(1448, 12, 1460));
        // A Windows acker (TTL 128, or 127 one router away) has Windows' timer, even at 56 ms,
        // and is named by what was measured, not as Linux's.
        assert_eq!(
            AckTimer::of_acker(56_000, 1_000, Some(127)),
            Some(AckTimer::Classic200ms)
        );
        assert_eq!(
            AckTimer::of_acker(56_000, 1_000, Some(64)),
            Some(AckTimer::Linux40ms)
        );
        assert_eq!(AckTimer::of_acker(10_000, 1_000, Some(128)), None);
        let named = AckTimer::Classic200ms.describe_measured(56_000, 1_000, Some(128));
        assert!(named.starts_with("a delayed-ACK timer of ~56 ms (not Linux's 40 ms"));
        assert_eq!(
            AckTimer::Classic200ms.describe_measured(198_000, 1_000, Some(128)),
            AckTimer::Classic200ms.describe()
        );
        assert_eq!(
            AckTimer::Linux40ms.describe_measured(44_000, 1_000, None),
            AckTimer::Linux40ms.describe()
        );
        assert!(AckTimer::Linux40ms
            .describe_measured(70_000, 1_000, None)
            .contains("~70 ms (longer than Linux's 40 ms)"));
        // On a 60 ms path Linux's timer reaches about the RTT: 70 ms is Linux's.
        assert_eq!(
            AckTimer::Linux40ms.describe_measured(70_000, 60_000, None),
            AckTimer::Linux40ms.describe()
        );
        assert_eq!(
            [
                initial_ttl(1),
                initial_ttl(64),
                initial_ttl(65),
                initial_ttl(128)
            ],
            [64, 64, 128, 128]
        );
        assert_eq!(initial_ttl(200), 255);
        assert_eq!(AckTimer::most_seen([0, 0]), None);
        assert_eq!(AckTimer::most_seen([2, 2]), Some(AckTimer::Linux40ms));
        assert_eq!(AckTimer::most_seen([1, 3]), Some(AckTimer::Classic200ms));
    }
}
