//! From one socket's TCP_INFO samples to stalls: pure, so it is tested with made-up samples
//! and no clock.
//!
//! A socket **holds** a write when it has bytes written but not sent (`notsent_bytes > 0`)
//! while earlier data is unacknowledged (`unacked > 0`) and the congestion window has room
//! (`unacked < snd_cwnd`): what Nagle does to a small write (or cork, or a full window, which
//! the rule tells apart). The hold ends when the peer's ACK arrives (`bytes_acked` moves).
//! Its length, less the path's round trip (`min_rtt`: the smoothed RTT counts the delayed
//! ACKs themselves), is how late that ACK came; [`rule::judge`] (the same
//! rule the doctor applies to packets) decides whether it was a Nagle/delayed-ACK stall: a
//! write smaller than the MSS, an ACK 30 ms or more late, no zero window, no loss recovery.
//!
//! A hold an ACK released promptly (within the round trip, a small write: the rule rejects
//! it only as a prompt ACK, [`rule::is_clocked_release`]) is a [`Release::Clocked`]: the
//! evidence of an ACK-clocked connection, added up per socket. Sampling sees such holds only
//! where the socket was holding at a sample: each counts from the first sample that saw it to
//! the one that saw its release, so the time held is known to within an interval per hold
//! (busy clocked sockets hold at most samples, and the chained holds add up to about the
//! time spent holding).
//!
//! Sampling sees a hold only if it lasts longer than the interval; at the default 2 ms every
//! 40 ms stall is seen about 20 times, and its length is known to within an interval.

use nagless::TcpInfo;
use nagless_stall_rule::{self as rule, AckTimer, HoldEvidence};

/// A stall found on one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// Bytes that were held.
    pub held: u32,
    /// How late the releasing ACK came beyond the RTT: the time the write lost, µs.
    pub lost_us: u64,
    /// When the hold ended (sample time, µs).
    pub(crate) at_us: u64,
    /// The receiver's timer class, judged from the delay.
    pub timer: Option<AckTimer>,
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    first_us: u64,
    /// The last sample that saw it still holding.
    seen_us: u64,
    bytes_acked: u64,
    bytes_sent: Option<u64>,
    held: u32,
    mss: u32,
    rtt_us: u64,
    zero_window: bool,
    loss_recovery: bool,
}

/// How a hold an ACK released ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// A stall.
    Stall(Stall),
    /// A prompt ACK released it (see [`rule::is_clocked_release`]): a clocked write.
    Clocked {
        /// How long it was held, µs.
        hold_us: u64,
    },
}

/// Follows one socket from sample to sample.
#[derive(Debug, Default, Clone)]
pub(crate) struct HoldTracker {
    hold: Option<Hold>,
    /// The last sample that saw nothing in flight (µs): data in flight later left after it.
    clear_us: Option<u64>,
}

/// Established (or half-closed by the peer, still sending). A hold is timed from when the
/// data in flight left, which the releasing ACK acknowledges: the kernel's
/// `tcpi_last_data_sent` (nothing leaves during a hold), no earlier than the last sample that
/// saw nothing in flight, and no later than this one. So a hold first seen under way (a
/// short connection a listing found mid-hold) counts whole; the kernel counts in ticks of its
/// clock (4 ms at HZ=250).
fn holding(at_us: u64, i: &TcpInfo, clear_us: Option<u64>) -> Option<Hold> {
    let notsent = i.notsent_bytes?;
    let bytes_acked = i.bytes_acked?;
    (i.state.can_send() && notsent > 0 && i.unacked > 0 && i.unacked < i.snd_cwnd).then(|| {
        let sent_us = at_us.saturating_sub(u64::from(i.last_data_sent_ms) * 1000);
        Hold {
            first_us: sent_us.max(clear_us.unwrap_or(0)).min(at_us),
            seen_us: at_us,
            bytes_acked,
            bytes_sent: i.bytes_sent,
            held: notsent,
            mss: i.snd_mss,
            // The smoothed RTT counts the delayed ACKs themselves; the windowed minimum is
            // the path's own round trip.
            rtt_us: u64::from(i.min_rtt_us.unwrap_or(i.rtt_us)),
            zero_window: i.snd_wnd == Some(0),
            loss_recovery: !i.ca_state.is_open(),
        }
    })
}

impl HoldTracker {
    /// Whether a hold is being followed.
    pub(crate) fn holding(&self) -> bool {
        self.hold.is_some()
    }

    /// One sample of the socket taken at `at_us`; returns a stall if one just ended.
    #[cfg(test)]
    pub(crate) fn observe(&mut self, at_us: u64, info: &TcpInfo) -> Option<Stall> {
        match self.observe_release(at_us, info)? {
            Release::Stall(s) => Some(s),
            Release::Clocked { .. } => None,
        }
    }

    /// The socket was freed, `info` its last `tcp_info` (the kernel's word as it freed it): a
    /// hold followed until then ended before, released by an ACK if both counters moved
    /// (the connection then closed, as short ones do within a sample). It is timed to the
    /// last sample that saw it holding, the least it lasted.
    pub(crate) fn observe_gone(&mut self, info: &TcpInfo) -> Option<Release> {
        let h = self.hold.take()?;
        let acked = info.bytes_acked.is_some_and(|b| b != h.bytes_acked);
        let sent = match (h.bytes_sent, info.bytes_sent) {
            (Some(a), Some(b)) => a != b,
            _ => false,
        };
        if !acked || !sent {
            return None;
        }
        HeldWrite {
            held: h.held,
            mss: h.mss,
            hold_us: h.seen_us.saturating_sub(h.first_us),
            rtt_us: h.rtt_us,
            release_gap_us: 0,
            zero_window: h.zero_window,
            loss_recovery: h.loss_recovery || info.total_retrans > 0,
        }
        .release(h.seen_us)
    }

    /// One sample of the socket taken at `at_us`; returns how a hold ended, if one just
    /// ended with a release by an ACK that was a stall or clocked.
    pub(crate) fn observe_release(&mut self, at_us: u64, info: &TcpInfo) -> Option<Release> {
        let now = holding(at_us, info, self.clear_us);
        if info.unacked == 0 {
            self.clear_us = Some(at_us);
        }
        let Some(h) = self.hold else {
            self.hold = now;
            return None;
        };
        let acked = info.bytes_acked.is_some_and(|b| b != h.bytes_acked);
        match now {
            // The same hold goes on (more bytes may have been written behind it).
            Some(n) if !acked => {
                self.hold = Some(Hold {
                    held: n.held.max(h.held),
                    seen_us: at_us,
                    zero_window: h.zero_window || n.zero_window,
                    loss_recovery: h.loss_recovery || n.loss_recovery,
                    ..h
                });
                return None;
            }
            _ => self.hold = now,
        }
        // Nagle sends the held bytes as the ACK arrives: both counters move. Sent without an
        // ACK (NODELAY, uncork), or ACKed but still not sent (cork, pacing): not Nagle's hold.
        let sent = match (h.bytes_sent, info.bytes_sent) {
            (Some(a), Some(b)) => a != b,
            _ => true,
        };
        if !acked || !sent {
            return None;
        }
        HeldWrite {
            held: h.held,
            mss: h.mss,
            hold_us: at_us.saturating_sub(h.first_us),
            rtt_us: h.rtt_us,
            release_gap_us: 0, // the kernel sends a held segment as the ACK arrives
            zero_window: h.zero_window,
            loss_recovery: h.loss_recovery || !info.ca_state.is_open(),
        }
        .release(at_us)
    }
}

/// A write TCP held until an ACK released it, as either backend saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldWrite {
    /// Most bytes held at once.
    pub(crate) held: u32,
    /// The sender's MSS (`tcpi_snd_mss`, `mss_cache`: options already counted out).
    pub(crate) mss: u32,
    /// From the write to its release, µs.
    pub(crate) hold_us: u64,
    /// The path's round trip, µs.
    pub(crate) rtt_us: u64,
    /// From the ACK's arrival to the release, µs (0 where it cannot be seen).
    pub(crate) release_gap_us: u64,
    /// The peer advertised a zero window meanwhile.
    pub(crate) zero_window: bool,
    /// The socket was in loss recovery meanwhile.
    pub(crate) loss_recovery: bool,
}

impl HeldWrite {
    /// The verdict, with clocked releases: a stall, a write a prompt ACK released
    /// ([`rule::is_clocked_release`]), or neither (`None`). `at_us` is when it ended.
    pub(crate) fn release(&self, at_us: u64) -> Option<Release> {
        let ack_delay_us = self.hold_us.saturating_sub(self.rtt_us);
        let e = HoldEvidence {
            held_len: self.held,
            options: 0, // the MSS already counts the options out
            mss: self.mss,
            ack_delay_us,
            release_gap_us: self.release_gap_us,
            sender_side_rtt_us: 0, // seen at the sender
            sender_side_spread_us: 0,
            sender_side_rtt_known: true, // 0: seen at the sender
            nagle_off: false, // a NODELAY socket never holds a write for the tracker to see
            zero_window: self.zero_window,
            loss_recovery: self.loss_recovery,
        };
        if rule::judge(&e).is_ok() {
            Some(Release::Stall(Stall {
                held: self.held,
                lost_us: ack_delay_us,
                at_us,
                timer: AckTimer::on_path(ack_delay_us, self.rtt_us),
            }))
        } else if rule::is_clocked_release(&e) {
            Some(Release::Clocked {
                hold_us: self.hold_us,
            })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(notsent: u32, unacked: u32, acked: u64) -> TcpInfo {
        with(TcpInfo::default(), |i| {
            // Whatever was acknowledged went out with whatever was written since.
            i.bytes_sent = Some(acked + 1_000_000 * u64::from(notsent == 0));
            i.state = nagless::TcpState::Established;
            i.snd_mss = 1448;
            i.unacked = unacked;
            i.snd_cwnd = 10;
            i.rtt_us = 100;
            i.notsent_bytes = Some(notsent);
            i.bytes_acked = Some(acked);
            i.snd_wnd = Some(65535);
        })
    }

    /// `i` changed by `f` (`TcpInfo` is `#[non_exhaustive]`: no struct literal here).
    fn with(mut i: TcpInfo, f: impl FnOnce(&mut TcpInfo)) -> TcpInfo {
        f(&mut i);
        i
    }

    /// Samples every 2 ms: (µs, info).
    fn run(samples: &[(u64, TcpInfo)]) -> Vec<Stall> {
        let mut t = HoldTracker::default();
        samples
            .iter()
            .filter_map(|(us, i)| t.observe(*us, i))
            .collect()
    }

    #[test]
    fn a_small_write_held_until_a_late_ack_is_a_stall() {
        let mut s = vec![(0, info(0, 0, 1))];
        for k in 1..=21 {
            s.push((k * 2_000, info(100, 1, 1))); // held 40 ms
        }
        s.push((44_000, info(0, 1, 101))); // ACK came, the write left
        let found = run(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!((39_000..43_000).contains(&found[0].lost_us), "{found:?}");
        assert_eq!(found[0].held, 100);
        assert_eq!(found[0].timer, Some(AckTimer::Linux40ms));
    }

    #[test]
    fn writes_released_by_prompt_acks_are_clocked_not_stalls() {
        // A busy shared connection: a small write held at every sample, each released by the
        // next ACK (bytes_acked and bytes_sent move between samples).
        let mut t = HoldTracker::default();
        let mut clocked = Vec::new();
        for k in 1..=10u64 {
            let i = with(info(40, 1, 1_000 * k), |i| i.bytes_sent = Some(1_000 * k));
            if let Some(r) = t.observe_release(k * 2_000, &i) {
                clocked.push(r);
            }
        }
        assert_eq!(clocked.len(), 9, "{clocked:?}");
        assert!(clocked
            .iter()
            .all(|r| *r == Release::Clocked { hold_us: 2_000 }));
        // A full segment held (a full window's tail, cork) is not a clocked write.
        let mut t = HoldTracker::default();
        let big = |k: u64| {
            with(info(1448, 1, 10_000 * k), |i| {
                i.bytes_sent = Some(10_000 * k)
            })
        };
        assert!((1..=5)
            .filter_map(|k| t.observe_release(k * 2_000, &big(k)))
            .next()
            .is_none());
    }

    #[test]
    fn a_hold_first_seen_under_way_is_dated_from_its_data_leaving() {
        // A short connection a listing finds 30 ms into a 40 ms hold: the kernel says its
        // data in flight left 32 ms before (in ticks of 4 ms).
        let mid = |us: u64, since_ms: u32| {
            (
                us,
                with(info(100, 1, 1), |i| i.last_data_sent_ms = since_ms),
            )
        };
        let s = [
            mid(130_000, 32),
            mid(132_000, 32),
            mid(136_000, 36),
            (142_000, info(0, 1, 101)),
        ];
        let found = run(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!((41_000..45_000).contains(&found[0].lost_us), "{found:?}");
        // Without the date it would be 12 ms: a prompt ACK's, no stall.
        let undated = [(130_000, info(100, 1, 1)), (142_000, info(0, 1, 101))];
        assert!(run(&undated).is_empty());
        // Never before a sample that saw nothing in flight: the kernel's tick is coarse.
        let s = [
            (120_000, info(0, 0, 1)),
            mid(124_000, 8),
            (152_000, info(0, 1, 101)),
        ];
        let found = run(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!((31_000..33_000).contains(&found[0].lost_us), "{found:?}");
    }

    #[test]
    fn a_hold_whose_socket_was_freed_is_judged_by_its_last_word() {
        // Held from 100 ms, last seen holding at 142 ms; freed before the next sample with
        // both counters moved: released by the ACK, then closed.
        let mut t = HoldTracker::default();
        for k in 0..=21 {
            assert!(t
                .observe_release(100_000 + k * 2_000, &info(100, 1, 1))
                .is_none());
        }
        let last = with(info(0, 0, 102), |i| {
            i.state = nagless::TcpState::from_raw(7)
        });
        match t.observe_gone(&last) {
            Some(Release::Stall(s)) => {
                assert!((41_000..43_000).contains(&s.lost_us), "{s:?}");
                assert_eq!(s.at_us, 142_000);
            }
            other => panic!("{other:?}"),
        }
        // Freed with the held bytes never sent (an abort): nothing to judge.
        let mut t = HoldTracker::default();
        for k in 0..=21 {
            t.observe_release(100_000 + k * 2_000, &info(100, 1, 1));
        }
        let aborted = with(info(100, 1, 1), |i| {
            i.state = nagless::TcpState::from_raw(7)
        });
        assert!(t.observe_gone(&aborted).is_none());
        // Nothing followed: nothing to judge.
        assert!(HoldTracker::default().observe_gone(&last).is_none());
    }

    #[test]
    fn back_to_back_holds_count_once_each() {
        // Hold A from 2 ms, released between 42 and 44 ms; hold B seen from 44 ms on.
        let mut s = Vec::new();
        for k in 1..=21 {
            s.push((k * 2_000, info(100, 1, 1)));
        }
        for k in 22..=43 {
            s.push((k * 2_000, info(100, 1, 101)));
        }
        s.push((88_000, info(0, 1, 201)));
        assert_eq!(run(&s).len(), 2);
    }

    #[test]
    fn look_alikes_are_not_stalls() {
        // A prompt ACK on a 50 ms path: held one RTT.
        let mut rtt50 = info(100, 1, 1);
        rtt50.rtt_us = 50_000;
        let mut s: Vec<_> = (1..=25).map(|k| (k * 2_000, rtt50)).collect();
        s.push((
            52_000,
            with(rtt50, |i| {
                i.bytes_acked = Some(101);
                i.notsent_bytes = Some(0);
            }),
        ));
        assert!(run(&s).is_empty());
        // A full window: unacked == cwnd.
        let s: Vec<_> = (1..=30)
            .map(|k| (k * 2_000, info(100, 10, 1)))
            .chain([(62_000, info(0, 1, 9000))])
            .collect();
        assert!(run(&s).is_empty());
        // Bulk: more than an MSS waiting.
        let s: Vec<_> = (1..=30)
            .map(|k| (k * 2_000, info(60_000, 3, 1)))
            .chain([(62_000, info(0, 1, 9000))])
            .collect();
        assert!(run(&s).is_empty());
        // Sent without an ACK (NODELAY set meanwhile).
        let s: Vec<_> = (1..=30)
            .map(|k| (k * 2_000, info(100, 1, 1)))
            .chain([(62_000, info(0, 2, 1))])
            .collect();
        assert!(run(&s).is_empty());
        // ACKed but the held bytes still not sent (cork, pacing).
        let mut s: Vec<_> = (1..=30).map(|k| (k * 2_000, info(100, 1, 1))).collect();
        s.push((
            62_000,
            with(info(100, 1, 1), |i| {
                i.bytes_acked = Some(101);
                i.bytes_sent = Some(1);
            }),
        ));
        assert!(run(&s).is_empty());
        // Loss recovery.
        let mut lossy = info(100, 1, 1);
        lossy.ca_state = nagless::CaState::Loss;
        let s: Vec<_> = (1..=30)
            .map(|k| (k * 2_000, lossy))
            .chain([(62_000, info(0, 1, 101))])
            .collect();
        assert!(run(&s).is_empty());
        // Nothing unacknowledged: not Nagle (cork, or an application buffer).
        let s: Vec<_> = (1..=30)
            .map(|k| (k * 2_000, info(100, 0, 1)))
            .chain([(62_000, info(0, 1, 1))])
            .collect();
        assert!(run(&s).is_empty());
    }
}
