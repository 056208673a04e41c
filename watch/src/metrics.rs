//! The watch as Prometheus metrics, for `nagless watch --serve ADDR`: a fleet's Prometheus
//! scrapes every host's `/metrics` and PromQL ranks the stalling services across all of them.
//!
//! Names follow Prometheus's conventions (base units, `_total` on counters), in the
//! OpenMetrics text format:
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `nagless_stalls_total` | counter | Nagle/delayed-ACK stalls that ended |
//! | `nagless_stall_seconds_total` | counter | time the stalled writes lost (the ACKs' lateness) |
//! | `nagless_stall_duration_seconds` | histogram | each stall's lost time |
//! | `nagless_stalling_connections` | gauge | connections of the group that stalled in the last refresh |
//! | `nagless_ack_clocked_seconds_total` | counter | time the group's writes waited behind the peer's prompt ACKs, in refreshes where it was ACK-clocked |
//! | `nagless_sender_holds_total`, `nagless_sender_hold_seconds_total` | counter | writes the group's senders held themselves (a cork the kernel's 200 ms ceiling released; eBPF only), and their time (`corks`) |
//! | `nagless_accept_queue_full_seconds_total`, `nagless_accept_queue_drops_total` | counter | time the group's listener had a full accept queue, and the handshake packets it dropped (`accept`): connects that waited 1 s, then 3 s |
//! | `nagless_tcp_busy_seconds_total`, `nagless_tcp_rwnd_limited_seconds_total`, `nagless_tcp_sndbuf_limited_seconds_total`, `nagless_tcp_retransmits_total`, `nagless_tcp_timeouts_total`, `nagless_tcp_zero_window_probes_total` | counter | what the kernel counted of the group's time and losses (`waits`): where the time went when it was not a stall |
//! | `nagless_own_turn_seconds_total`, `nagless_own_turns_total` | counter | the time the group's programs took their turns (from a last read of the peer's data to the first write after it: a server answering), and those turns |
//! | `nagless_peer_turn_seconds_total`, `nagless_peer_turns_total` | counter | the time they waited for their peers' turns (from a last write to the first read of data after it: a client waiting for an answer, the round trip included), and those turns |
//! | `nagless_turn_open_seconds` | gauge | the oldest request the group's connections held unanswered at their last reading (a serving group's own turn, a connecting group's wait) |
//! | `nagless_tcp_min_rtt_seconds` | gauge | the largest least round trip of the group's connections read in its last refresh that read any |
//! | `nagless_tcp_backoff` | gauge | the kernel's backoff of the most backed-off of the group's connections read in its last refresh that read any: each timeout (or zero-window probe) in a row doubled the wait |
//! | `nagless_watch_stalls_total` | counter | stalls on the whole host (one series, from the start) |
//! | `nagless_watch_cpu_seconds_total` | counter | the watcher's own CPU time (user + system) |
//! | `nagless_watch_sockets` | gauge | TCP sockets in use on the host (the kernel's count) |
//! | `nagless_watch_series_groups` | gauge | groups that have series of their own now |
//! | `nagless_watch_groups_overflowed_total` | counter | refreshes and stalls of groups beyond the cap |
//! | `nagless_watch_groups_forgotten_total` | counter | groups whose series were removed, unseen |
//! | `nagless_watch_events_lost_total` | counter | eBPF reports of long holds lost to a full ring buffer |
//! | `nagless_watch_late_samples_total` | counter | samples (or drains) that started late |
//! | `nagless_watch_namespaces_not_entered` | gauge | network namespaces (containers) the watcher could not enter |
//! | `nagless_watch_processes_unattributed` | gauge | processes whose sockets could not be attributed (not root) |
//! | `nagless_fixes` | gauge | `nagless fix`es in force on the host (running or pinned) |
//! | `nagless_fix_info` | gauge | always 1, one per fix in force; labels `by`, `on`, `action`, `ports` |
//! | `nagless_policy_rule_info`, `nagless_policy_rule_connections`, `nagless_policy_rule_workloads`, `nagless_policy_rule_changes_total`, `nagless_policy_rule_reverts_total`, `nagless_policy_rule_stall_rate` | | the rules the policy's node agent keeps (`policy`) |
//! | `nagless_build_info` | gauge | always 1; labels `version`, `backend` |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, ... | | the watcher's own, as every exporter publishes them |
//!
//! Each means the same under both backends. The per-group metrics carry the labels `process`
//! (the program as the table names it, without its arguments: `python3 app.py`; the command
//! name when the command line cannot be read; empty when the owner is not known), `unit`
//! (the systemd unit, outside containers), `port` (the served local port when `role` is
//! `serves`, the remote port when it is `connects`; `ephemeral` for a port the host may hand
//! out to clients, which would make new series with every restart or connection: see
//! `role.rs`), `role`, `container` (empty on the host) and, on a Kubernetes node,
//! `k8s_namespace`, `k8s_pod` and `k8s_container` ([`crate::kube`]). Each is a function of
//! the process and port, so none makes series beyond the group's. The pid is left out on
//! purpose: it changes with every restart, and a label that changes makes new series.
//!
//! Durations are kept in whole microseconds and published in seconds, so that
//! they print as they add up (`0.386224`), not as a float sum drifts.
//!
//! `nagless_ack_clocked_seconds_total` counts, for each refresh in which a group was
//! ACK-clocked ([`nagless_stall_rule::judge_clock`] over that refresh), the time its small
//! writes waited behind the peer's prompt ACKs (summed over its connections): not stalls,
//! the other cost of Nagle on a busy shared connection. It is 0 for every group that never
//! was, like the stall series.
//!
//! `nagless_watch_stalls_total` and the watcher's own series exist from the first scrape.
//! A group's series appear, at zero, as soon as one of its connections is seen (sampling
//! lists every connection), so that a query over a service that does not stall returns 0,
//! not nothing; the eBPF backend hears only of long holds and of the short holds prompt ACKs
//! released, so there a group appears with its first of either, and `rate()` over the whole host reads `nagless_watch_stalls_total`. The series are bounded
//! ([`Limits`]): a group neither refreshed nor stalling for `forget_after` loses its series,
//! and beyond `max_series` groups the rest share one series with `role="overflow"`.
//!
//! [`crate::serve::Exporter`] serves the page over HTTP.
//!
//! Beside the families and their bounds here: `labels` makes a group's `Labels`, `process`
//! the watcher's own `process_*` gauges, `waits` the kernel's account of each group's time,
//! `corks` the writes a group's senders held themselves, `blind` what the watch could not
//! see, `text_format` the page for clients that do not ask for OpenMetrics
//! (`text_format()`), and `tests` the families' tests.

mod accept;
mod blind;
mod corks;
mod labels;
mod micros;
mod policy;
mod process;
mod text_format;
mod waits;

pub(crate) use labels::{Labels, Owner};
pub(crate) use text_format::text_format;

use accept::AcceptFamilies;
use blind::BlindGauges;
pub use blind::BlindSpots;
use corks::CorkFamilies;
use micros::{MicrosCounter, MicrosHistogram};
use policy::PolicyFamilies;
pub use policy::PolicyRule;
use process::ProcessGauges;
use waits::WaitFamilies;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::own_process::OwnProcess;
use crate::role::EphemeralPorts;
use crate::{Row, StallEvent};

/// How many series the metrics may hold, and for how long one nobody sees is kept.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A group neither refreshed nor stalling for this long loses its series (a counter that
    /// comes back starts again at 0, which `rate()` reads as a reset).
    pub forget_after: Duration,
    /// Groups with series of their own at most; the stalls and connections of groups beyond
    /// are added to one `role="overflow"` series and counted in
    /// `nagless_watch_groups_overflowed_total`.
    pub max_series: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            forget_after: Duration::from_secs(600),
            max_series: 1000,
        }
    }
}

/// Upper bounds of the stall-duration buckets, in µs. A stall loses 30 ms or more (the rule's
/// [`DELAYED_ACK_MIN_US`](nagless_stall_rule::DELAYED_ACK_MIN_US)), so the first bucket lies
/// above it; then one bucket ends just past each common delayed-ACK timer, so that each
/// timer's stalls fill a bucket of their own: Linux's 40 ms, a 50-60 ms timer (seen on
/// Windows hosts), macOS's 100 ms, Windows' and the BSDs' 200 ms, and longer.
pub(crate) const DURATION_BUCKETS_US: [u64; 11] = [
    35_000, 45_000, 65_000, 80_000, 110_000, 150_000, 210_000, 300_000, 500_000, 1_000_000,
    2_500_000,
];

#[derive(Clone)]
struct Buckets;

impl MetricConstructor<MicrosHistogram> for Buckets {
    fn new_metric(&self) -> MicrosHistogram {
        MicrosHistogram::new(&DURATION_BUCKETS_US)
    }
}

type FloatCounter = Counter<f64, AtomicU64>;

type FloatGauge = Gauge<f64, AtomicU64>;

/// The watch's metrics: fed by the watch loop, read by the [`Exporter`](crate::serve::Exporter).
///
/// Invariant: a label set is in `seen` exactly when it may have series in the per-group
/// families, and `seen` never holds more than `limits.max_series` entries besides the overflow
/// series.
pub struct Metrics {
    registry: Arc<Registry>,
    stalls: Family<Labels, Counter>,
    stall_seconds: Family<Labels, MicrosCounter>,
    durations: Family<Labels, MicrosHistogram, Buckets>,
    stalling: Family<Labels, Gauge>,
    ack_clocked: Family<Labels, MicrosCounter>,
    corks: CorkFamilies,
    accepts: AcceptFamilies,
    waits: WaitFamilies,
    host_stalls: Counter,
    cpu: FloatCounter,
    cpu_seen: Duration,
    sockets: Gauge,
    process: ProcessGauges,
    series: Gauge,
    overflowed: Counter,
    forgotten: Counter,
    blind: BlindGauges,
    fixes: Gauge,
    fix_info: Family<FixLabels, Gauge>,
    policy: PolicyFamilies,
    limits: Limits,
    ephemeral: EphemeralPorts,
    /// When each group with series was last refreshed or stalled.
    seen: HashMap<Labels, Instant>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl Metrics {
    /// Empty metrics, bounded by `limits`.
    pub fn new(limits: Limits) -> Metrics {
        let mut r = Registry::default();
        let stalls = Family::<Labels, Counter>::default();
        r.register(
            "nagless_stalls",
            "Nagle/delayed-ACK stalls seen (a write held behind unacknowledged data until a delayed ACK released it)",
            stalls.clone(),
        );
        let stall_seconds = Family::<Labels, MicrosCounter>::default();
        r.register_with_unit(
            "nagless_stall",
            "Time lost to stalls: how late the releasing ACKs came beyond the round trip",
            Unit::Seconds,
            stall_seconds.clone(),
        );
        let durations = Family::new_with_constructor(Buckets);
        r.register_with_unit(
            "nagless_stall_duration",
            "Each stall's lost time",
            Unit::Seconds,
            durations.clone(),
        );
        let stalling = Family::<Labels, Gauge>::default();
        r.register(
            "nagless_stalling_connections",
            "Connections of the group that stalled in the last refresh window",
            stalling.clone(),
        );
        let ack_clocked = Family::<Labels, MicrosCounter>::default();
        r.register_with_unit(
            "nagless_ack_clocked",
            "Time the group's small writes waited behind the peer's prompt ACKs, in refreshes where it was ACK-clocked (a busy connection whose writes Nagle sends one ACK at a time; not stalls)",
            Unit::Seconds,
            ack_clocked.clone(),
        );
        let corks = CorkFamilies::register(&mut r);
        let accepts = AcceptFamilies::register(&mut r);
        let waits = WaitFamilies::register(&mut r);
        let host_stalls = Counter::default();
        r.register(
            "nagless_watch_stalls",
            "Stalls the watcher saw on the whole host, every group's (present from the start)",
            host_stalls.clone(),
        );
        let cpu = FloatCounter::default();
        r.register_with_unit(
            "nagless_watch_cpu",
            "CPU time the watcher itself used (user + system)",
            Unit::Seconds,
            cpu.clone(),
        );
        let sockets = Gauge::default();
        r.register(
            "nagless_watch_sockets",
            "TCP sockets on the host (every network namespace watched): the established ones the last listing found (sampling), or the kernel's count of those in use, listeners included (eBPF)",
            sockets.clone(),
        );
        let series = Gauge::default();
        r.register(
            "nagless_watch_series_groups",
            "Groups (process, port, role, container) that have series now, besides the overflow series",
            series.clone(),
        );
        let overflowed = Counter::default();
        r.register(
            "nagless_watch_groups_overflowed",
            "Refreshes and stalls of groups beyond --max-series, added to the role=\"overflow\" series instead of their own",
            overflowed.clone(),
        );
        let forgotten = Counter::default();
        r.register(
            "nagless_watch_groups_forgotten",
            "Groups whose series were removed after --forget-after without a refresh or a stall",
            forgotten.clone(),
        );
        let process = ProcessGauges::register(&mut r, &cpu);
        let blind = BlindGauges::register(&mut r);
        let fixes = Gauge::default();
        r.register(
            "nagless_fixes",
            "nagless fix programs in force on the host, running or pinned (the watcher must be root to see them)",
            fixes.clone(),
        );
        let fix_info = Family::<FixLabels, Gauge>::default();
        r.register(
            "nagless_fix_info",
            "One series per nagless fix in force (always 1): who holds it, on what, what it sets, on which ports",
            fix_info.clone(),
        );
        let policy = PolicyFamilies::register(&mut r);
        Metrics {
            registry: Arc::new(r),
            stalls,
            stall_seconds,
            durations,
            stalling,
            ack_clocked,
            corks,
            accepts,
            waits,
            host_stalls,
            cpu,
            cpu_seen: Duration::ZERO,
            sockets,
            process,
            series,
            overflowed,
            forgotten,
            blind,
            fixes,
            fix_info,
            policy,
            limits,
            ephemeral: EphemeralPorts::of_host(),
            seen: HashMap::new(),
        }
    }

    /// Uses `ports` as the ephemeral ports instead of the host's (tests).
    #[cfg(test)]
    fn set_ephemeral_ports(&mut self, ports: EphemeralPorts) {
        self.ephemeral = ports;
    }

    /// The labels the updates of group (`port`, `serves`, `comm`, `container`) go to at
    /// `now`: its own, or the overflow series' when the cap is reached.
    fn admit(&mut self, (port, serves): (u16, bool), owner: &Owner<'_>, now: Instant) -> Labels {
        let l = Labels::new(port, serves, owner, &self.ephemeral);
        if let Some(t) = self.seen.get_mut(&l) {
            *t = now;
            return l;
        }
        if self.seen.len() >= self.limits.max_series {
            self.overflowed.inc();
            return Labels::overflow();
        }
        self.seen.insert(l.clone(), now);
        self.series.set(self.seen.len() as i64);
        l
    }

    /// Counts a stall.
    pub fn stall(&mut self, e: &StallEvent) {
        let l = self.admit(
            (e.key.port, e.key.serves),
            &Owner {
                service: e.service.as_deref(),
                comm: e.comm.as_deref(),
                unit: e.unit.as_deref(),
                container: e.container.as_deref(),
                pod: e.pod.as_ref(),
            },
            Instant::now(),
        );
        self.host_stalls.inc();
        self.stalls.get_or_create(&l).inc();
        self.stall_seconds.get_or_create(&l).inc_by(e.stall.lost_us);
        self.durations.get_or_create(&l).observe(e.stall.lost_us);
    }

    /// The groups seen in the last window (see [`Source::take_window`](crate::backend::Source::take_window)):
    /// sets their connection counts, makes their stall series exist (at 0 if new), and forgets
    /// the groups unseen for [`Limits::forget_after`].
    pub fn window(&mut self, rows: &[Row]) {
        self.window_at(rows, Instant::now());
    }

    fn window_at(&mut self, rows: &[Row], now: Instant) {
        // Forgotten first, so that their room goes to this window's new groups.
        let forget = self.limits.forget_after;
        let stale: Vec<Labels> = self
            .seen
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(**t) >= forget)
            .map(|(l, _)| l.clone())
            .collect();
        for l in stale {
            self.seen.remove(&l);
            self.stalls.remove(&l);
            self.stall_seconds.remove(&l);
            self.durations.remove(&l);
            self.stalling.remove(&l);
            self.ack_clocked.remove(&l);
            self.corks.remove(&l);
            self.accepts.remove(&l);
            self.waits.remove(&l);
            self.forgotten.inc();
        }
        // Every group keeps its series: at 0 when none of its connections stalled this
        // window (under eBPF a group has rows only in windows it stalls in).
        for l in self.seen.keys() {
            self.stalling.get_or_create(l).set(0);
        }
        if self.overflowed.get() > 0 {
            self.stalling.get_or_create(&Labels::overflow()).set(0);
        }
        // Each group's backoff and round trip, from this refresh's readings of its
        // connections.
        let mut states: HashMap<Labels, crate::waits::Waits> = HashMap::new();
        for r in rows {
            let unit = r.unit();
            let l = self.admit(
                (r.port, r.serves),
                &Owner {
                    service: r.service.as_deref(),
                    comm: r.comm.as_deref(),
                    unit: unit.as_deref(),
                    container: r.container.as_deref(),
                    pod: r.pod.as_ref(),
                },
                now,
            );
            // Several groups can share labels (two pids of one command, or the overflow).
            self.stalling
                .get_or_create(&l)
                .inc_by(r.stalling_connections as i64);
            drop(self.stalls.get_or_create(&l));
            drop(self.stall_seconds.get_or_create(&l));
            drop(self.durations.get_or_create(&l));
            let clocked = self.ack_clocked.get_or_create(&l);
            if r.ack_clocked.is_some() {
                clocked.inc_by((r.ack_held_ms * 1000.0).round() as u64);
            }
            self.corks.add(
                &l,
                r.sender_holds,
                (r.sender_hold_ms * 1000.0).round() as u64,
            );
            self.accepts.add(&l, &r.accept_queue);
            self.waits.add(&l, &r.waits);
            if !r.waits.is_empty() {
                // (The open turn a group's role waits on: a server's own, a client's peer's.)
                let open = if r.serves {
                    r.waits.own_open_us
                } else {
                    r.waits.peer_open_us
                };
                let b = states.entry(l).or_default();
                b.backoff = b.backoff.max(r.waits.backoff);
                b.min_rtt_us = b.min_rtt_us.max(r.waits.min_rtt_us);
                b.own_open_us = b.own_open_us.max(open);
            }
        }
        for (l, w) in states {
            self.waits.set_state(&l, &w);
        }
        self.series.set(self.seen.len() as i64);
    }

    /// The watcher's own figures (its CPU time, memory, descriptors) and the TCP sockets its
    /// last listing found.
    pub fn watcher(&mut self, own: Option<OwnProcess>, sockets: usize) {
        if let Some(p) = own {
            if p.cpu > self.cpu_seen {
                self.cpu.inc_by((p.cpu - self.cpu_seen).as_secs_f64());
                self.cpu_seen = p.cpu;
            }
            self.process.set(&p);
        }
        self.sockets.set(sockets as i64);
    }

    /// The fixes in force now, replacing the last list.
    pub fn fixes(&mut self, fixes: &[FixLabels]) {
        self.fix_info.clear();
        for f in fixes {
            self.fix_info.get_or_create(f).set(1);
        }
        self.fixes.set(fixes.len() as i64);
    }

    /// The rules of the policy the node agent keeps, as its last status says (none: no
    /// agent runs).
    pub fn policy(&mut self, rules: &[PolicyRule]) {
        self.policy.set(rules);
    }

    /// What the watcher could not see so far (each count since it started).
    pub fn blind_spots(&mut self, b: BlindSpots) {
        self.blind.set(b);
    }

    /// The metrics in the OpenMetrics text format.
    #[cfg(test)]
    pub(crate) fn encode(&self) -> String {
        encode_registry(&self.registry)
    }
}

fn encode_registry(r: &Registry) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut s, r);
    s
}

/// The labels of `nagless_fix_info`: a fix in force (what `nagless fix --list` shows).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FixLabels {
    /// `nagless fix pid N` (running), or `pinned at DIR`.
    pub by: String,
    /// The cgroup, or the process and its children, it acts on.
    pub on: String,
    /// What it sets.
    pub action: String,
    /// `every port`, or the ports.
    pub ports: String,
}

/// The labels of `nagless_build_info`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    backend: &'static str,
}

impl Metrics {
    /// Publishes `nagless_build_info{version, backend} 1` (node_exporter's way of naming what
    /// runs), for the backend the watcher uses.
    pub fn build_info(&mut self, backend: &'static str) {
        let info = Family::<BuildLabels, Gauge>::default();
        info.get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            backend,
        })
        .set(1);
        match Arc::get_mut(&mut self.registry) {
            Some(r) => r.register(
                "nagless_build_info",
                "The watcher's version and backend (always 1)",
                info,
            ),
            None => debug_assert!(false, "build_info after the page was handed out"),
        }
    }

    /// What `GET /metrics` answers: the metrics encoded as they are at each call, from any
    /// thread (for [`crate::serve::Exporter`]).
    pub fn page(&self) -> impl Fn() -> String + Send + Sync + 'static {
        let r = Arc::clone(&self.registry);
        move || encode_registry(&r)
    }
}

#[cfg(test)]
mod tests;
