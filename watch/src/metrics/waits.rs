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
//! | `nagless_tcp_backoff` | gauge | the kernel's backoff (`icsk_backoff`) of the most backed-off of the group's connections read in its last refresh that read any: how many times its timeouts (or zero-window probes) in a row doubled the wait (4: 16 times the retransmission timeout); 0 once ACKs come |
//!
//! The counters are summed over the group's connections, so a busy time can pass the wall
//! time; the backoff is the most backed-off connection's. The sampling
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
        f
    }

    /// Group `l`'s backoff as its connections were last read (a refresh whose rows read
    /// none leaves it as it was: under eBPF the walks can be further apart than a refresh).
    pub(super) fn set_backoff(&self, l: &Labels, backoff: u8) {
        self.backoff.get_or_create(l).set(i64::from(backoff));
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
    }
}
