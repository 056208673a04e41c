//! The watcher's own `process_*` metrics, as every Prometheus client library publishes them.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::{FloatCounter, FloatGauge};
use crate::own_process::OwnProcess;

/// The `process_*` metrics every Prometheus client library publishes (node_exporter's among
/// them), so that the usual dashboards and alerts work on the watcher too.
pub(super) struct ProcessGauges {
    rss: Gauge,
    virt: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    start: FloatGauge,
}

impl ProcessGauges {
    /// Registers them; `cpu` (the watcher's CPU counter) is published under the standard
    /// name too.
    pub(super) fn register(r: &mut Registry, cpu: &FloatCounter) -> ProcessGauges {
        let g = ProcessGauges {
            rss: Gauge::default(),
            virt: Gauge::default(),
            open_fds: Gauge::default(),
            max_fds: Gauge::default(),
            start: FloatGauge::default(),
        };
        r.register_with_unit(
            "process_cpu",
            "Total user and system CPU time spent in seconds",
            Unit::Seconds,
            cpu.clone(),
        );
        r.register_with_unit(
            "process_resident_memory",
            "Resident memory size in bytes",
            Unit::Bytes,
            g.rss.clone(),
        );
        r.register_with_unit(
            "process_virtual_memory",
            "Virtual memory size in bytes",
            Unit::Bytes,
            g.virt.clone(),
        );
        r.register(
            "process_open_fds",
            "Number of open file descriptors",
            g.open_fds.clone(),
        );
        r.register(
            "process_max_fds",
            "Maximum number of open file descriptors",
            g.max_fds.clone(),
        );
        r.register_with_unit(
            "process_start_time",
            "Start time of the process since unix epoch in seconds",
            Unit::Seconds,
            g.start.clone(),
        );
        g
    }

    pub(super) fn set(&self, p: &OwnProcess) {
        self.rss.set(p.rss_bytes as i64);
        self.virt.set(p.virtual_bytes as i64);
        self.open_fds.set(p.open_fds as i64);
        self.max_fds.set(p.max_fds.map_or(-1, |m| m as i64));
        self.start.set(p.start_time_unix_s);
    }
}
