//! The results: one [`Table`] per case and path, one [`Row`] per strategy, each measure a
//! [`Spread`] over the repetitions, and the summing up of a strategy's runs into its row.

use hdrhistogram::Histogram;

use crate::harness::{Path, RunResult};
use crate::scenario::Case;
use crate::strategy::Strategy;

/// Median and spread of one measure over the repetitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Spread {
    /// Median over runs.
    pub median: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
}

impl Spread {
    /// Median, min and max of `values` (zeros if empty).
    pub fn of(values: &[f64]) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Spread {
            median,
            min: v[0],
            max: v[v.len() - 1],
        }
    }
}

/// One strategy's line in a table: medians over runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// The strategy.
    pub strategy: Strategy,
    /// Runs that completed.
    pub runs: usize,
    /// Exchanges timed, over all runs.
    pub exchanges: u64,
    /// Median latency per exchange, µs.
    pub p50_us: Spread,
    /// 99th percentile latency, µs.
    pub p99_us: Spread,
    /// Worst exchange, µs.
    pub max_us: Spread,
    /// Exchanges of 30 ms or more, per run.
    pub stalls: Spread,
    /// Wall time per run, s.
    pub elapsed_s: Spread,
    /// Work per second, in the table's unit.
    pub throughput: Spread,
    /// Data segments per exchange, both sides (TCP_INFO).
    pub segs_per_exchange: Spread,
    /// Data segments per exchange, client side (TCP_INFO).
    pub client_segs_per_exchange: Spread,
    /// Data segments per run, client side.
    pub client_data_segs: Spread,
    /// Data segments per run, server side.
    pub server_data_segs: Spread,
    /// Payload bytes sent per run, client side (TCP_INFO).
    pub client_bytes: Spread,
    /// Payload bytes sent per run, server side (TCP_INFO).
    pub server_bytes: Spread,
    /// Wire bytes (payload + 66 B of headers per segment, ACKs included) per exchange.
    pub wire_bytes_per_exchange: Spread,
    /// Syscalls per exchange, both sides.
    pub syscalls_per_exchange: Spread,
    /// CPU time per exchange, both sides, µs.
    pub cpu_us_per_exchange: Spread,
    /// Latency CDF over all runs: (latency µs, fraction of exchanges at or below it).
    pub cdf: Vec<(u64, f64)>,
}

/// One case on one path: a table of strategies.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Table {
    /// Scenario name.
    pub scenario: String,
    /// The case and its parameters.
    pub case: Case,
    /// Parameters as text.
    pub params: String,
    /// The path.
    pub path: Path,
    /// Unit of the throughput column.
    pub unit: String,
    /// One row per strategy.
    pub rows: Vec<Row>,
    /// Strategy with the lowest median p50.
    pub best_latency: Option<Strategy>,
    /// Strategy with the fewest data segments per exchange.
    pub fewest_segments: Option<Strategy>,
    /// Where nagless stands (absent if nagless was not run).
    pub verdict: Option<Verdict>,
    /// Runs that failed, with their errors.
    pub errors: Vec<String>,
}

/// Summary of one run.
struct RunSummary {
    p50: f64,
    p99: f64,
    max: f64,
    stalls: f64,
    elapsed: f64,
    throughput: f64,
    segs_per_ex: f64,
    client_segs_per_ex: f64,
    client_segs: f64,
    server_segs: f64,
    client_bytes: f64,
    server_bytes: f64,
    wire_per_ex: f64,
    sys_per_ex: f64,
    cpu_per_ex: f64,
}

fn histogram(lat: &[u64]) -> Histogram<u64> {
    // 1 µs .. 1 hour at 3 significant digits: bounds that cannot fail.
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"));
    for &v in lat {
        h.saturating_record(v.max(1));
    }
    h
}

fn summarize(r: &RunResult) -> RunSummary {
    let h = histogram(&r.latencies_us);
    let ex = (r.latencies_us.len() as f64).max(1.0);
    let both = {
        let mut b = r.client;
        b.add(&r.server);
        b
    };
    RunSummary {
        p50: h.value_at_quantile(0.5) as f64,
        p99: h.value_at_quantile(0.99) as f64,
        max: h.max() as f64,
        stalls: r.latencies_us.iter().filter(|&&l| l >= 30_000).count() as f64,
        elapsed: r.elapsed.as_secs_f64(),
        throughput: r.work / r.elapsed.as_secs_f64().max(1e-9),
        segs_per_ex: both.data_segs as f64 / ex,
        client_segs_per_ex: r.client.data_segs as f64 / ex,
        client_segs: r.client.data_segs as f64,
        server_segs: r.server.data_segs as f64,
        client_bytes: r.client.bytes as f64,
        server_bytes: r.server.bytes as f64,
        wire_per_ex: both.wire_bytes() as f64 / ex,
        sys_per_ex: both.syscalls as f64 / ex,
        cpu_per_ex: both.cpu_us as f64 / ex,
    }
}

fn cdf(runs: &[RunResult]) -> Vec<(u64, f64)> {
    let all: Vec<u64> = runs
        .iter()
        .flat_map(|r| r.latencies_us.iter().copied())
        .collect();
    if all.is_empty() {
        return Vec::new();
    }
    let h = histogram(&all);
    let mut pts: Vec<(u64, f64)> = (0..=100)
        .map(|i| {
            let q = i as f64 / 100.0;
            (h.value_at_quantile(q), q)
        })
        .collect();
    // Equal latencies collapse into one point carrying the highest fraction, so each line
    // ends at 1.0.
    pts.dedup_by(|later, kept| {
        if later.0 == kept.0 {
            kept.1 = later.1;
            true
        } else {
            false
        }
    });
    pts
}

pub(crate) fn row(strategy: Strategy, runs: &[RunResult]) -> Row {
    let s: Vec<RunSummary> = runs.iter().map(summarize).collect();
    let spread = |f: fn(&RunSummary) -> f64| Spread::of(&s.iter().map(f).collect::<Vec<_>>());
    Row {
        strategy,
        runs: runs.len(),
        exchanges: runs.iter().map(|r| r.latencies_us.len() as u64).sum(),
        p50_us: spread(|x| x.p50),
        p99_us: spread(|x| x.p99),
        max_us: spread(|x| x.max),
        stalls: spread(|x| x.stalls),
        elapsed_s: spread(|x| x.elapsed),
        throughput: spread(|x| x.throughput),
        segs_per_exchange: spread(|x| x.segs_per_ex),
        client_segs_per_exchange: spread(|x| x.client_segs_per_ex),
        client_data_segs: spread(|x| x.client_segs),
        server_data_segs: spread(|x| x.server_segs),
        client_bytes: spread(|x| x.client_bytes),
        server_bytes: spread(|x| x.server_bytes),
        wire_bytes_per_exchange: spread(|x| x.wire_per_ex),
        syscalls_per_exchange: spread(|x| x.sys_per_ex),
        cpu_us_per_exchange: spread(|x| x.cpu_per_ex),
        cdf: cdf(runs),
    }
}

/// Is nagless on the Pareto corner of its table?
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    /// nagless's median p50 and p99 are each within 1.1 x the best (+20 µs).
    pub latency_ok: bool,
    /// nagless's median p50 is within 1.1 x the best (+20 µs).
    pub p50_ok: bool,
    /// nagless's median p99 is within 1.1 x the best (+20 µs).
    pub p99_ok: bool,
    /// nagless's data segments per exchange are within 1.05 x the fewest.
    pub segments_ok: bool,
    /// Both.
    pub on_corner: bool,
    /// Some strategy (nagless or another) is on the corner: false where the fewest segments
    /// come only with a latency beyond the bound (e.g. by waiting for an ACK, as Nagle does).
    pub corner_reachable: bool,
    /// nagless is as fast as the best and sends the fewest segments of the strategies that are:
    /// where the corner is out of everyone's reach, the best a strategy can do.
    pub fewest_of_the_fast: bool,
    /// One line for people.
    pub summary: String,
}
