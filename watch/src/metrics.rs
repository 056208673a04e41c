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
//! | `nagless_connections` | gauge | connections of the group seen in the last refresh |
//! | `nagless_watch_cpu_seconds_total` | counter | the watcher's own CPU time (user + system) |
//! | `nagless_watch_sockets` | gauge | TCP sockets the last sample listed |
//!
//! The per-group metrics carry the labels `process` (the command name, `/proc/PID/comm`;
//! empty when the owner could not be read), `port` (the served local port when `role` is
//! `serves`, the remote port when it is `connects`: never an ephemeral port, which would make a
//! series per connection), `role` and `container` (empty on the host). The pid is left out on
//! purpose: it changes with every restart, and a label that changes makes new series.
//!
//! A group's series appear, at zero, as soon as one of its connections is seen, so that a
//! query over a service that does not stall returns 0, not nothing.
//!
//! [`crate::serve::Exporter`] serves the page over HTTP.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::{Row, StallEvent};

/// The labels of a group's series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Labels {
    /// Command name (`/proc/PID/comm`), empty if unknown.
    pub process: String,
    /// The served local port (`role="serves"`) or the remote port (`role="connects"`).
    pub port: u16,
    /// `serves` or `connects`.
    pub role: &'static str,
    /// Container id (its first 12 hex digits), empty on the host.
    pub container: String,
}

impl Labels {
    fn new(port: u16, serves: bool, comm: Option<&str>, container: Option<&str>) -> Labels {
        Labels {
            process: comm.unwrap_or_default().to_owned(),
            port,
            role: if serves { "serves" } else { "connects" },
            // The short id, as `docker ps` and `crictl ps` show it.
            container: container
                .map(|c| c.chars().take(12).collect())
                .unwrap_or_default(),
        }
    }

    /// The labels of a row of the table.
    pub fn of_row(r: &Row) -> Labels {
        Labels::new(r.port, r.serves, r.comm.as_deref(), r.container.as_deref())
    }

    /// The labels of the group a stall belongs to.
    pub fn of_stall(e: &StallEvent) -> Labels {
        Labels::new(
            e.key.port,
            e.key.serves,
            e.comm.as_deref(),
            e.container.as_deref(),
        )
    }
}

/// Upper bounds of the stall-duration buckets, in seconds: stalls are 30 ms or more (the rule),
/// Linux's delayed-ACK timer is 40 ms at least, Windows' and others' 200 ms.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5, 1.0, 2.5,
];

#[derive(Clone)]
struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(DURATION_BUCKETS)
    }
}

type FloatCounter = Counter<f64, AtomicU64>;

/// The watch's metrics: fed by the watch loop, read by the [`Exporter`](crate::serve::Exporter).
pub struct Metrics {
    registry: Arc<Registry>,
    stalls: Family<Labels, Counter>,
    stall_seconds: Family<Labels, FloatCounter>,
    durations: Family<Labels, Histogram, Buckets>,
    connections: Family<Labels, Gauge>,
    cpu: FloatCounter,
    cpu_seen: Duration,
    sockets: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let stalls = Family::<Labels, Counter>::default();
        r.register(
            "nagless_stalls",
            "Nagle/delayed-ACK stalls seen (a write held behind unacknowledged data until a delayed ACK released it)",
            stalls.clone(),
        );
        let stall_seconds = Family::<Labels, FloatCounter>::default();
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
        let connections = Family::<Labels, Gauge>::default();
        r.register(
            "nagless_connections",
            "Connections of the group seen in the last refresh",
            connections.clone(),
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
            "TCP sockets the last sample listed",
            sockets.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            stalls,
            stall_seconds,
            durations,
            connections,
            cpu,
            cpu_seen: Duration::ZERO,
            sockets,
        }
    }

    /// Counts a stall.
    pub fn stall(&self, e: &StallEvent) {
        let l = Labels::of_stall(e);
        let secs = e.stall.lost_us as f64 / 1e6;
        self.stalls.get_or_create(&l).inc();
        self.stall_seconds.get_or_create(&l).inc_by(secs);
        self.durations.get_or_create(&l).observe(secs);
    }

    /// The groups seen in the last window (see [`Watcher::take_window`](crate::Watcher::take_window)):
    /// sets their connection counts, and makes their stall series exist (at 0 if new).
    pub fn window(&self, rows: &[Row]) {
        self.connections.clear();
        for r in rows {
            let l = Labels::of_row(r);
            self.connections.get_or_create(&l).set(r.connections as i64);
            drop(self.stalls.get_or_create(&l));
            drop(self.stall_seconds.get_or_create(&l));
            drop(self.durations.get_or_create(&l));
        }
    }

    /// The watcher's CPU time so far and the sockets its last sample listed.
    pub fn watcher(&mut self, cpu: Duration, sockets: usize) {
        if cpu > self.cpu_seen {
            self.cpu.inc_by((cpu - self.cpu_seen).as_secs_f64());
            self.cpu_seen = cpu;
        }
        self.sockets.set(sockets as i64);
    }

    /// The metrics in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        encode_registry(&self.registry)
    }
}

fn encode_registry(r: &Registry) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut s, r);
    s
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

/// The OpenMetrics page `om` in Prometheus's text format 0.0.4, for clients that do not ask for
/// OpenMetrics (`curl`, `promtool check metrics`, older scrapers): no `# UNIT` lines and no
/// `# EOF`; a counter's family takes its samples' name (`_total`); OpenMetrics's `info` and
/// `unknown` types become `gauge` and `untyped`.
pub fn text_format(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let lines: Vec<&str> = om.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line == "# EOF" || line.starts_with("# UNIT ") {
            i += 1;
            continue;
        }
        // A family: its HELP line, then its TYPE line.
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let ty = lines
                .get(i + 1)
                .and_then(|l| l.strip_prefix("# TYPE "))
                .and_then(|t| t.split_once(' '))
                .filter(|(n, _)| *n == name)
                .map(|(_, t)| t);
            let (name, ty) = match ty {
                Some("counter") => (format!("{name}_total"), "counter"),
                Some("info") => (format!("{name}_info"), "gauge"),
                Some("unknown") => (name.to_owned(), "untyped"),
                Some(t) => (name.to_owned(), t),
                None => (name.to_owned(), ""),
            };
            out.push_str(&format!("# HELP {name} {help}\n"));
            if !ty.is_empty() {
                out.push_str(&format!("# TYPE {name} {ty}\n"));
                i += 1;
            }
            i += 1;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::Stall;
    use crate::GroupKey;

    fn event(port: u16, lost_us: u64) -> StallEvent {
        StallEvent {
            key: GroupKey {
                pid: Some(7),
                uid: 0,
                port,
                serves: true,
                netns: 1,
            },
            comm: Some("python3".into()),
            container: None,
            local: ([127, 0, 0, 1], port).into(),
            remote: ([127, 0, 0, 1], 40000).into(),
            at: std::time::UNIX_EPOCH,
            stall: Stall {
                held: 100,
                lost_us,
                at_us: 0,
                timer: None,
            },
        }
    }

    #[test]
    fn stalls_are_counted_in_seconds_with_conventional_names() {
        let m = Metrics::new();
        m.window(&[Row {
            port: 9,
            serves: false,
            comm: Some("curl".into()),
            connections: 3,
            ..Row::default()
        }]);
        m.stall(&event(8000, 40_000));
        m.stall(&event(8000, 200_000));
        let mut in_container = event(8080, 50_000);
        in_container.container = Some("0123456789abcdef".repeat(4));
        m.stall(&in_container);
        let text = m.encode();
        let l = r#"{process="python3",port="8000",role="serves",container=""}"#;
        for want in [
            format!("nagless_stalls_total{l} 2"),
            format!("nagless_stall_seconds_total{l} 0.24"),
            format!("nagless_stall_duration_seconds_count{l} 2"),
            r#"nagless_stall_duration_seconds_bucket{le="0.05",process="python3",port="8000",role="serves",container=""} 1"#.into(),
            r#"nagless_stalls_total{process="curl",port="9",role="connects",container=""} 0"#.into(),
            r#"nagless_connections{process="curl",port="9",role="connects",container=""} 3"#.into(),
            "# TYPE nagless_watch_cpu_seconds counter".into(),
            r#"nagless_stalls_total{process="python3",port="8080",role="serves",container="0123456789ab"} 1"#.into(),
            "# EOF".into(),
        ] {
            assert!(text.contains(&want), "no {want} in\n{text}");
        }
    }
}
