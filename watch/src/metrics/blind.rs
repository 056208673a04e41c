//! What a watch could not see ([`BlindSpots`]), as metrics of their own, present at zero from
//! the first scrape: reports lost, late samples, namespaces not entered, processes not
//! attributed, sockets unseen.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// What a watch could not see, counted since it started: each a metric of its own, present
/// at zero from the first scrape (an alert on it needs the series to exist).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlindSpots {
    /// eBPF reports of long holds lost to a full ring buffer.
    pub events_lost: u64,
    /// Samples (or drains of the kernel's reports) that started late: the one before overran
    /// its interval.
    pub late_samples: u64,
    /// Network namespaces (containers) not entered.
    pub namespaces_not_entered: usize,
    /// Processes whose sockets could not be attributed (sampling without root).
    pub processes_unattributed: usize,
    /// TCP sockets that came and went between two listings unseen (sampling).
    pub sockets_unseen: u64,
}

/// The families of [`BlindSpots`], and the counts the counters last reached.
pub(super) struct BlindGauges {
    events_lost: Counter,
    late_samples: Counter,
    namespaces: Gauge,
    unattributed: Gauge,
    unseen: Counter,
    last: BlindSpots,
}

impl BlindGauges {
    pub(super) fn register(r: &mut Registry) -> BlindGauges {
        let g = BlindGauges {
            events_lost: Counter::default(),
            late_samples: Counter::default(),
            namespaces: Gauge::default(),
            unattributed: Gauge::default(),
            unseen: Counter::default(),
            last: BlindSpots::default(),
        };
        r.register(
            "nagless_watch_events_lost",
            "eBPF reports of long holds lost to a full ring buffer: stalls the watch did not see",
            g.events_lost.clone(),
        );
        r.register(
            "nagless_watch_late_samples",
            "Samples (or drains of the kernel's reports) that started late because the one before overran its interval",
            g.late_samples.clone(),
        );
        r.register(
            "nagless_watch_namespaces_not_entered",
            "Network namespaces (containers) the watcher could not enter: their connections are not watched",
            g.namespaces.clone(),
        );
        r.register(
            "nagless_watch_processes_unattributed",
            "Processes whose sockets could not be attributed to them (the watcher is not root)",
            g.unattributed.clone(),
        );
        r.register(
            "nagless_watch_sockets_unseen",
            "TCP sockets that came and went between two listings of the sampling backend, never looked at: stalls in them are not counted (the eBPF backend sees them)",
            g.unseen.clone(),
        );
        g
    }

    pub(super) fn set(&mut self, b: BlindSpots) {
        self.events_lost
            .inc_by(b.events_lost.saturating_sub(self.last.events_lost));
        self.late_samples
            .inc_by(b.late_samples.saturating_sub(self.last.late_samples));
        self.namespaces.set(b.namespaces_not_entered as i64);
        self.unattributed.set(b.processes_unattributed as i64);
        self.unseen
            .inc_by(b.sockets_unseen.saturating_sub(self.last.sockets_unseen));
        self.last = BlindSpots {
            events_lost: b.events_lost.max(self.last.events_lost),
            late_samples: b.late_samples.max(self.last.late_samples),
            sockets_unseen: b.sockets_unseen.max(self.last.sockets_unseen),
            ..b
        };
    }
}
