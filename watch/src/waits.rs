//! The whole wait, live (issue 51): what the kernel keeps of each socket's time and losses in
//! its `tcp_info` ([`Waits`]): the time it was busy sending, the part of it the peer's
//! receive window held it back (a reader that reads slowly, or not at all) and the part its
//! own send buffer did (it ran out of data to send while its buffer was full of data in flight:
//! a buffer too small for the path's round trip and rate), the segments it
//! sent again, the retransmission timeouts it took and the zero-window probes it sent (these
//! back off too, and are not counted as timeouts), and how far its backoff went. Where the doctor splits a capture's
//! time into causes, the watch adds these up per group beside its stalls: when a group does
//! not stall, they say what its time was instead.
//!
//! The kernel counts from the socket's start; the watch counts what happened while it
//! watched: a socket's first reading is its baseline, unless it was made after the watch
//! began (`Reading::since`).

use nagless::TcpInfo;

/// A group's (or a socket's) waits, as the kernel counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Waits {
    /// Time busy sending: data in flight or waiting to be sent, µs.
    pub busy_us: u64,
    /// Of that, time the peer's receive window held it back, µs.
    pub rwnd_limited_us: u64,
    /// Of that, time it had nothing more to send because its send buffer, full of data in
    /// flight, was too small for the path (the kernel's sndbuf-limited time), µs.
    pub sndbuf_limited_us: u64,
    /// Segments sent again (after a loss, a timeout or a probe).
    pub retransmits: u64,
    /// Retransmission timeouts (zero-window probes are not).
    pub timeouts: u64,
    /// Zero-window probes: the peer's window stayed closed, and the sender asked again
    /// (counted as the timeouts are, by the rises of the kernel's count in a row).
    pub probes: u64,
    /// The kernel's backoff (`icsk_backoff`), the most of any reading: how many times a
    /// connection's retransmission timeouts (or zero-window probes) in a row doubled the wait
    /// before the next (4: 16 times its timeout, up to the kernel's 120 s). Not a count: a
    /// state. In one refresh, the state the group's connections were last seen in (0 once
    /// ACKs came); over a watch's refreshes, the most of them.
    pub backoff: u8,
    /// Whose turn it was (the `turns` module under sampling, the sockets' reads and writes
    /// under eBPF): the time its programs' turns took, from the peer's data (its last read,
    /// under eBPF; its arrival, under sampling) to their first write after it (their last
    /// before a look, under sampling): a server answering a request; a client between an
    /// answer and its next request. Turns ended only, µs.
    pub own_turn_us: u64,
    /// Its programs' turns ended (sampling: those its looks saw, the last between two).
    pub own_turns: u64,
    /// The time they waited for the peer's turns, from a write to the peer's data after it
    /// (a client waiting for an answer, the round trip included; a server waiting for the
    /// next request). Turns ended only, µs.
    pub peer_turn_us: u64,
    /// The peer's turns ended.
    pub peer_turns: u64,
    /// The age of the oldest turn its programs held open at a reading (a server with a
    /// request it has not answered yet), µs: a state, as `backoff` is (the most of the
    /// readings summed).
    pub own_open_us: u64,
    /// The age of the oldest turn of the peer's open at a reading (a client waiting for an
    /// answer), µs: a state.
    pub peer_open_us: u64,
    /// The largest of its connections' least round trips (the kernel's windowed minimum) as
    /// last read, µs: the path's own delay, with no queue nor delayed ACK in it (0: none
    /// measured). A state.
    pub min_rtt_us: u64,
}

impl Waits {
    pub(crate) fn add(&mut self, o: &Waits) {
        self.busy_us += o.busy_us;
        self.rwnd_limited_us += o.rwnd_limited_us;
        self.sndbuf_limited_us += o.sndbuf_limited_us;
        self.retransmits += o.retransmits;
        self.timeouts += o.timeouts;
        self.probes += o.probes;
        self.backoff = self.backoff.max(o.backoff);
        self.own_turn_us += o.own_turn_us;
        self.own_turns += o.own_turns;
        self.peer_turn_us += o.peer_turn_us;
        self.peer_turns += o.peer_turns;
        self.own_open_us = self.own_open_us.max(o.own_open_us);
        self.peer_open_us = self.peer_open_us.max(o.peer_open_us);
        self.min_rtt_us = self.min_rtt_us.max(o.min_rtt_us);
    }

    /// The mean of its program's turns ended, µs (`None` without one).
    pub fn own_turn_mean_us(&self) -> Option<u64> {
        (self.own_turns > 0).then(|| self.own_turn_us / self.own_turns)
    }

    /// The mean of its peer's turns ended, µs (`None` without one).
    pub fn peer_turn_mean_us(&self) -> Option<u64> {
        (self.peer_turns > 0).then(|| self.peer_turn_us / self.peer_turns)
    }

    /// Nothing counted.
    pub fn is_empty(&self) -> bool {
        *self == Waits::default()
    }
}

/// One socket's counters as last read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    busy_us: u64,
    rwnd_limited_us: u64,
    sndbuf_limited_us: u64,
    retransmits: u64,
    timeouts: u8,
    probes: u8,
    backoff: u8,
    turns: Turned,
    min_rtt_us: u64,
}

/// A socket's turns: the time (µs) and count of each side's turns ended (counters: as the
/// socket's storage kept them under eBPF, or what a look added under sampling), and the age
/// of the turn open, if any (states).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Turned {
    pub(crate) own_us: u64,
    pub(crate) own: u64,
    pub(crate) peer_us: u64,
    pub(crate) peer: u64,
    pub(crate) own_open_us: u64,
    pub(crate) peer_open_us: u64,
}

impl Reading {
    /// Counters read elsewhere (the eBPF backend's iterator, `ebpf/waits.rs`): busy, receive
    /// window limited and send buffer limited µs, segments sent again, and timeouts,
    /// zero-window probes in a row and the backoff (`icsk_backoff`); the turns and the
    /// least round trip (µs).
    pub(crate) fn new(
        [busy_us, rwnd_limited_us, sndbuf_limited_us]: [u64; 3],
        retransmits: u64,
        [timeouts, probes, backoff]: [u8; 3],
        turns: Turned,
        min_rtt_us: u64,
    ) -> Reading {
        Reading {
            busy_us,
            rwnd_limited_us,
            sndbuf_limited_us,
            retransmits,
            timeouts,
            probes,
            backoff,
            turns,
            min_rtt_us,
        }
    }

    /// The counters of `info` (none before Linux 4.10, whose `tcp_info` lacks the times).
    pub(crate) fn of(info: &TcpInfo) -> Option<Reading> {
        Some(Reading {
            busy_us: info.busy_time_us?,
            rwnd_limited_us: info.rwnd_limited_us?,
            sndbuf_limited_us: info.sndbuf_limited_us?,
            retransmits: u64::from(info.total_retrans),
            timeouts: info.timeouts,
            probes: info.probes,
            backoff: info.backoff,
            turns: Turned::default(),
            // (`~0`: no round trip measured yet.)
            min_rtt_us: u64::from(info.min_rtt_us.filter(|&v| v != u32::MAX).unwrap_or(0)),
        })
    }

    /// The same, without turns (a backend that cannot follow them: what its storage holds
    /// is then half an account).
    pub(crate) fn without_turns(self) -> Reading {
        Reading {
            turns: Turned::default(),
            ..self
        }
    }

    /// Its busy time, µs.
    pub(crate) fn busy_us(&self) -> u64 {
        self.busy_us
    }

    /// What was counted between `before` (`None`: the socket was made after the watch began,
    /// so all it counted is new) and this reading. The kernel counts timeouts in a row, back
    /// to 0 at an ACK: a rise counts as timeouts, and a fall and a rise between two readings
    /// only as far as it shows.
    pub(crate) fn since(&self, before: Option<&Reading>) -> Waits {
        let b = before.copied().unwrap_or_default();
        Waits {
            busy_us: self.busy_us.saturating_sub(b.busy_us),
            rwnd_limited_us: self.rwnd_limited_us.saturating_sub(b.rwnd_limited_us),
            sndbuf_limited_us: self.sndbuf_limited_us.saturating_sub(b.sndbuf_limited_us),
            retransmits: self.retransmits.saturating_sub(b.retransmits),
            timeouts: u64::from(self.timeouts.saturating_sub(b.timeouts)),
            probes: u64::from(self.probes.saturating_sub(b.probes)),
            backoff: self.backoff,
            own_turn_us: self.turns.own_us.saturating_sub(b.turns.own_us),
            own_turns: self.turns.own.saturating_sub(b.turns.own),
            peer_turn_us: self.turns.peer_us.saturating_sub(b.turns.peer_us),
            peer_turns: self.turns.peer.saturating_sub(b.turns.peer),
            own_open_us: self.turns.own_open_us,
            peer_open_us: self.turns.peer_open_us,
            min_rtt_us: self.min_rtt_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(busy_us: u64, rwnd: u64, retrans: u32, timeouts: u8) -> Reading {
        let mut info = TcpInfo::default();
        info.busy_time_us = Some(busy_us);
        info.rwnd_limited_us = Some(rwnd);
        info.sndbuf_limited_us = Some(0);
        info.total_retrans = retrans;
        info.timeouts = timeouts;
        info.backoff = timeouts;
        Reading::of(&info).unwrap()
    }

    #[test]
    fn only_what_was_counted_while_watching_counts() {
        let first = reading(5_000_000, 1_000_000, 3, 0);
        let next = reading(5_400_000, 1_300_000, 5, 2);
        let w = next.since(Some(&first));
        assert_eq!(
            w,
            Waits {
                busy_us: 400_000,
                rwnd_limited_us: 300_000,
                sndbuf_limited_us: 0,
                retransmits: 2,
                timeouts: 2,
                probes: 0,
                backoff: 2,
                ..Waits::default()
            }
        );
        // A socket made after the watch began: all of it.
        assert_eq!(first.since(None).busy_us, 5_000_000);
        // The count fell back (an ACK came): no timeout.
        assert_eq!(reading(5_500_000, 0, 5, 0).since(Some(&next)).timeouts, 0);
        // A closed window: the probes in a row rise as the timeouts do.
        let mut info = TcpInfo::default();
        info.busy_time_us = Some(6_000_000);
        info.rwnd_limited_us = Some(1_000_000);
        info.sndbuf_limited_us = Some(0);
        info.probes = 3;
        // (Zero-window probes back off too, and a backoff that rises is no timeout: the
        // kernel's count of timeouts is.)
        info.backoff = 3;
        let probing = Reading::of(&info).unwrap();
        assert_eq!(probing.since(Some(&next)).probes, 3);
        assert_eq!(probing.since(Some(&next)).timeouts, 0);
        assert_eq!(probing.since(Some(&next)).backoff, 3);
        // An ACK came: the backoff is over, what was counted stays.
        let acked = reading(5_600_000, 1_300_000, 5, 0).since(Some(&next));
        assert_eq!((acked.backoff, acked.retransmits), (0, 0));
        let mut sum = w;
        sum.add(&w);
        sum.add(&acked);
        assert_eq!(sum.busy_us, 1_000_000);
        // A group's backoff is its most backed-off connection's.
        assert_eq!(sum.backoff, 2);
        assert!(!sum.is_empty() && Waits::default().is_empty());
    }

    #[test]
    fn a_kernel_before_the_times_gives_no_reading() {
        assert_eq!(Reading::of(&TcpInfo::default()), None);
    }
}
