//! The kernel's account of each group's time and losses ([`crate::waits::Waits`]) as
//! counters beside the stall series: what a group's time was when it was not a stall.
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `nagless_tcp_busy_seconds_total` | counter | time the group's connections were busy sending (data in flight or waiting to be sent) |
//! | `nagless_tcp_rwnd_limited_seconds_total` | counter | of that, time the peers' receive windows held them back |
//! | `nagless_tcp_sndbuf_limited_seconds_total` | counter | of that, time they had nothing to send because their send buffers were too small for the path |
//! | `nagless_tcp_retransmits_total` | counter | segments sent again |
//! | `nagless_tcp_timeouts_total` | counter | retransmission timeouts |
//! | `nagless_tcp_zero_window_probes_total` | counter | zero-window probes (the peers' windows stayed closed) |
//! | `nagless_own_turn_seconds_total` | counter | time the group's programs took their turns: from a last read of the peer's data to the first write after it (a server answering a request; a client between an answer and its next request) |
//! | `nagless_own_turns_total` | counter | those turns ended (their mean: the rate of the first over this one's) |
//! | `nagless_peer_turn_seconds_total` | counter | time the group's connections waited for their peers' turns: from a last write to the first read of data after it (a client waiting for an answer, the round trip included; a server waiting for the next request) |
//! | `nagless_peer_turns_total` | counter | those turns ended |
//! | `nagless_turn_open_seconds` | gauge | the oldest request the group's connections held unanswered at their last reading: a serving group's own turn (a request it has not answered yet), a connecting group's wait (a request not answered yet) |
//! | `nagless_tcp_min_rtt_seconds` | gauge | the largest of the group's connections' least round trips (the kernel's windowed minimum) read in its last refresh that read any: the path's own delay |
//! | `nagless_tcp_backoff` | gauge | the kernel's backoff (`icsk_backoff`) of the most backed-off of the group's connections read in its last refresh that read any: how many times its timeouts (or zero-window probes) in a row doubled the wait (4: 16 times the retransmission timeout); 0 once ACKs come |
//!
//! The counters are summed over the group's connections, so a busy time can pass the wall
//! time; the backoff, the open turn and the round trip are the largest connection's. The turns come from
//! the sockets' reads and writes under eBPF (every turn), and from `tcp_info`'s times since
//! data last arrived and left under sampling (the last turn between two looks:
//! `crate::turns`). The sampling
//! backend reads them from `tcp_info`, the eBPF backend from the same fields through its
//! `waits` iterator (`crate::ebpf`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::labels::Labels;
use super::micros::MicrosCounter;
use crate::waits::Waits;

/// The families.
#[derive(Debug, Clone, Default)]
pub(super) struct WaitFamilies {
    busy: Family<Labels, MicrosCounter>,
    rwnd_limited: Family<Labels, MicrosCounter>,
    sndbuf_limited: Family<Labels, MicrosCounter>,
    retransmits: Family<Labels, Counter>,
    timeouts: Family<Labels, Counter>,
    probes: Family<Labels, Counter>,
    backoff: Family<Labels, Gauge>,
    own_turn: Family<Labels, MicrosCounter>,
    own_turns: Family<Labels, Counter>,
    peer_turn: Family<Labels, MicrosCounter>,
    peer_turns: Family<Labels, Counter>,
    open: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    min_rtt: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl WaitFamilies {
    pub(super) fn register(r: &mut Registry) -> WaitFamilies {
        let f = WaitFamilies::default();
        r.register_with_unit(
            "nagless_tcp_busy",
            "Time the group's connections were busy sending (data in flight or waiting to be sent), summed, as tcp_info counts it",
            Unit::Seconds,
            f.busy.clone(),
        );
        r.register_with_unit(
            "nagless_tcp_rwnd_limited",
            "Of the busy time, time the peers' receive windows held the group's connections back (a reader that reads slowly, or not at all)",
            Unit::Seconds,
            f.rwnd_limited.clone(),
        );
        r.register_with_unit(
            "nagless_tcp_sndbuf_limited",
            "Of the busy time, time the group's connections had nothing to send because their send buffers were too small for the path",
            Unit::Seconds,
            f.sndbuf_limited.clone(),
        );
        r.register(
            "nagless_tcp_retransmits",
            "Segments the group's connections sent again",
            f.retransmits.clone(),
        );
        r.register(
            "nagless_tcp_timeouts",
            "Retransmission timeouts the group's connections took",
            f.timeouts.clone(),
        );
        r.register(
            "nagless_tcp_zero_window_probes",
            "Zero-window probes the group's connections sent (their peers' windows stayed closed)",
            f.probes.clone(),
        );
        r.register(
            "nagless_tcp_backoff",
            "The kernel's backoff of the most backed-off of the group's connections read in its last refresh that read any: how many times its retransmission timeouts (or zero-window probes) in a row doubled the wait before the next (4: 16 times the retransmission timeout); 0 once ACKs come",
            f.backoff.clone(),
        );
        r.register_with_unit(
            "nagless_own_turn",
            "Time the group's programs took their turns: from a last read of the peer's data to the first write after it (a server answering a request; a client between an answer and its next request), summed",
            Unit::Seconds,
            f.own_turn.clone(),
        );
        r.register(
            "nagless_own_turns",
            "Turns of the group's programs ended (a server's answers): the mean turn is the rate of nagless_own_turn_seconds_total over this one's",
            f.own_turns.clone(),
        );
        r.register_with_unit(
            "nagless_peer_turn",
            "Time the group's connections waited for their peers' turns: from a last write to the first read of data after it (a client waiting for an answer, the round trip included; a server waiting for the next request), summed",
            Unit::Seconds,
            f.peer_turn.clone(),
        );
        r.register(
            "nagless_peer_turns",
            "Turns of the group's peers ended (a client's answers received)",
            f.peer_turns.clone(),
        );
        r.register_with_unit(
            "nagless_turn_open",
            "The oldest request the group's connections held unanswered at their last reading: a serving group's own turn (a request it has not answered yet), a connecting group's wait",
            Unit::Seconds,
            f.open.clone(),
        );
        r.register_with_unit(
            "nagless_tcp_min_rtt",
            "The largest of the group's connections' least round trips (the kernel's windowed minimum) read in its last refresh that read any: the path's own delay",
            Unit::Seconds,
            f.min_rtt.clone(),
        );
        f
    }

    /// Group `l`'s backoff, oldest open turn (in `own_open_us`: the turn its role waits on)
    /// and round trip as its connections were last read (a refresh whose rows read none
    /// leaves them as they were: under eBPF the walks can be further apart than a refresh).
    pub(super) fn set_state(&self, l: &Labels, w: &Waits) {
        self.backoff.get_or_create(l).set(i64::from(w.backoff));
        self.open.get_or_create(l).set(w.own_open_us as f64 / 1e6);
        self.min_rtt.get_or_create(l).set(w.min_rtt_us as f64 / 1e6);
    }

    /// Adds a refresh's waits to group `l`'s series (made at 0 if new).
    pub(super) fn add(&self, l: &Labels, w: &Waits) {
        self.busy.get_or_create(l).inc_by(w.busy_us);
        self.rwnd_limited.get_or_create(l).inc_by(w.rwnd_limited_us);
        self.sndbuf_limited
            .get_or_create(l)
            .inc_by(w.sndbuf_limited_us);
        self.retransmits.get_or_create(l).inc_by(w.retransmits);
        self.timeouts.get_or_create(l).inc_by(w.timeouts);
        self.probes.get_or_create(l).inc_by(w.probes);
        drop(self.backoff.get_or_create(l));
        self.own_turn.get_or_create(l).inc_by(w.own_turn_us);
        self.own_turns.get_or_create(l).inc_by(w.own_turns);
        self.peer_turn.get_or_create(l).inc_by(w.peer_turn_us);
        self.peer_turns.get_or_create(l).inc_by(w.peer_turns);
        drop(self.open.get_or_create(l));
        drop(self.min_rtt.get_or_create(l));
    }

    /// Removes group `l`'s series.
    pub(super) fn remove(&self, l: &Labels) {
        self.busy.remove(l);
        self.rwnd_limited.remove(l);
        self.sndbuf_limited.remove(l);
        self.retransmits.remove(l);
        self.timeouts.remove(l);
        self.probes.remove(l);
        self.backoff.remove(l);
        self.own_turn.remove(l);
        self.own_turns.remove(l);
        self.peer_turn.remove(l);
        self.peer_turns.remove(l);
        self.open.remove(l);
        self.min_rtt.remove(l);
    }
}
