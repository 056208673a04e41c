//! # nagless-lab
//!
//! Reproduces each source case on real loopback sockets, strategy by strategy, and measures
//! latency per exchange against data segments per exchange (the two axes nagless must win
//! together). A [`Plan`] lists cases, paths and strategies; [`run_plan`] runs them with
//! repetitions and returns one [`Table`] per case and path, ready for [`report`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod bgp;
pub mod harness;
pub mod pattern;
pub mod report;
pub mod scenario;
pub mod seeds;
pub mod strategy;
mod sys;
mod wrk;

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

pub use harness::{Link, Path, RunResult, Setup, SideCost};
pub use scenario::{Case, Credit};
pub use strategy::Strategy;

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Cases with the paths to run each on.
    pub cases: Vec<(Case, Path)>,
    /// Strategies to compare (rows of each table).
    pub strategies: Vec<Strategy>,
    /// Runs per case and strategy; medians are reported.
    pub repeats: usize,
    /// Time limit of one open-ended run on loopback (and anywhere when `limit_fixed`).
    pub limit: Duration,
    /// True when the limit was asked for: then it holds on emulated paths too, where by
    /// default an open-ended run lasts [`PATH_ROUND_TRIPS`] round trips (at least
    /// [`PATH_LIMIT_MIN`], at most `limit`) so that an RTT sweep stays short.
    pub limit_fixed: bool,
    /// Pin both ends of every connection to this CPU (`None`: let the scheduler place them).
    pub pin: Option<usize>,
}

/// Round trips an open-ended run lasts on an emulated path by default.
pub const PATH_ROUND_TRIPS: u32 = 20;
/// The shortest open-ended run on an emulated path by default.
pub const PATH_LIMIT_MIN: Duration = Duration::from_millis(300);

/// The CPU the lab pins to by default: the last one, away from CPU 0's interrupt work.
pub fn default_pin() -> Option<usize> {
    std::thread::available_parallelism()
        .ok()
        .map(|n| n.get() - 1)
}

/// Scale of the default plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Every default case in well under a minute.
    Quick,
    /// The defaults of the source texts.
    Full,
}

const ETHERNET_MSS: u32 = 1448;

impl Plan {
    /// The default cases of `scenario` (all scenarios but `custom` when `None`).
    pub fn default_cases(scenario: Option<&str>, scale: Scale) -> Vec<(Case, Path)> {
        let quick = scale == Scale::Quick;
        let lo = Path::LOOPBACK;
        let eth = Path::mss(ETHERNET_MSS);
        let mut out = Vec::new();
        let want = |name: &str| scenario.is_none_or(|s| s == name);
        if want("split-write") {
            for path in [lo, eth] {
                for k in [1, 10, 100, 1000] {
                    out.push((Case::SplitWrite { k, rounds: 10 }, path));
                }
            }
        }
        if want("bgp-burst") {
            let sessions = if quick { 5 } else { 20 };
            for path in [lo, eth] {
                out.push((
                    Case::BgpBurst {
                        routes: 255,
                        per_update: 1,
                        sessions,
                    },
                    path,
                ));
            }
        }
        if want("framed-window") {
            let total = 30 * 1024 * 1024;
            for path in [lo, eth] {
                for (message, window) in [(4098, 4096), (4098, 4098)] {
                    for credit in [Credit::HalfWindow, Credit::EachFrame] {
                        out.push((
                            Case::FramedWindow {
                                total,
                                message,
                                window,
                                credit,
                            },
                            path,
                        ));
                    }
                }
            }
        }
        if want("pipelined-read") {
            let total = if quick { 4 } else { 32 } * 1024 * 1024;
            for depth in [1, 2, 10] {
                out.push((
                    Case::PipelinedRead {
                        total,
                        block: 8192,
                        depth,
                    },
                    lo,
                ));
            }
        }
        if want("http-keepalive") {
            for conns in [1, 10] {
                out.push((Case::HttpKeepalive { conns }, lo));
            }
        }
        out
    }

    /// The default plan: every scenario's defaults, every strategy.
    pub fn defaults(scale: Scale) -> Plan {
        Plan {
            cases: Self::default_cases(None, scale),
            strategies: Strategy::ALL.to_vec(),
            repeats: if scale == Scale::Quick { 1 } else { 3 },
            limit: if scale == Scale::Quick {
                Duration::from_millis(300)
            } else {
                Duration::from_millis(1500)
            },
            limit_fixed: false,
            pin: default_pin(),
        }
    }

    /// The time limit of one open-ended run on `path`: see [`limit_fixed`](Self::limit_fixed).
    pub fn limit_on(&self, path: &Path) -> Duration {
        match path.link {
            Some(link) if !self.limit_fixed => (Duration::from_micros(link.rtt_us)
                * PATH_ROUND_TRIPS)
                .max(PATH_LIMIT_MIN)
                .min(self.limit),
            _ => self.limit,
        }
    }

    /// Number of runs the plan makes.
    pub fn run_count(&self) -> usize {
        self.cases.len() * self.strategies.len() * self.repeats
    }
}

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

fn row(strategy: Strategy, runs: &[RunResult]) -> Row {
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

/// Judges nagless against the best p50, the best p99 and the fewest segments of `rows`:
/// on the Pareto corner when its p50 and its p99 are each within 1.1 x the best + 20 µs, and
/// its data segments per exchange within 1.05 x the fewest. (p99 too: where Nagle stalls in
/// only some exchanges, a p50 alone would reward it.)
pub fn verdict(rows: &[Row]) -> Option<Verdict> {
    let ours = rows
        .iter()
        .find(|r| r.strategy == Strategy::Nagless && r.runs > 0)?;
    let done: Vec<&Row> = rows.iter().filter(|r| r.runs > 0).collect();
    let best = |f: fn(&Row) -> f64| done.iter().map(|r| f(r)).fold(f64::INFINITY, f64::min);
    let best_p50 = best(|r| r.p50_us.median);
    let best_p99 = best(|r| r.p99_us.median);
    let fewest = best(|r| r.segs_per_exchange.median);
    let p50_fast = |r: &Row| r.p50_us.median <= best_p50 * 1.1 + 20.0;
    let p99_fast = |r: &Row| r.p99_us.median <= best_p99 * 1.1 + 20.0;
    let fast = |r: &Row| p50_fast(r) && p99_fast(r);
    let few = |r: &Row, fewest: f64| r.segs_per_exchange.median <= fewest * 1.05 + 1e-9;
    let (p50_ok, p99_ok) = (p50_fast(ours), p99_fast(ours));
    let latency_ok = p50_ok && p99_ok;
    let segments_ok = few(ours, fewest);
    let on_corner = latency_ok && segments_ok;
    let corner_reachable = done.iter().any(|r| fast(r) && few(r, fewest));
    let fewest_fast = done
        .iter()
        .filter(|r| fast(r))
        .map(|r| r.segs_per_exchange.median)
        .fold(f64::INFINITY, f64::min);
    let fewest_of_the_fast = latency_ok && few(ours, fewest_fast);
    let ok = |b: bool, bad: &'static str| if b { "ok" } else { bad };
    let mut summary = format!(
        "nagless {}: p50 {:.0} us vs best {:.0} us ({}), p99 {:.0} us vs best {:.0} us ({}), segments/exchange {:.2} vs fewest {:.2} ({})",
        if on_corner { "is on the Pareto corner" } else { "is NOT on the Pareto corner" },
        ours.p50_us.median,
        best_p50,
        ok(p50_ok, "too slow"),
        ours.p99_us.median,
        best_p99,
        ok(p99_ok, "too slow"),
        ours.segs_per_exchange.median,
        fewest,
        ok(segments_ok, "too many"),
    );
    if !corner_reachable {
        let ratios = |r: &Row| {
            (
                r.p50_us.median / best_p50.max(1.0),
                r.p99_us.median / best_p99.max(1.0),
            )
        };
        let thrifty = done.iter().filter(|r| few(r, fewest)).min_by(|a, b| {
            let (a50, a99) = ratios(a);
            let (b50, b99) = ratios(b);
            a50.max(a99).total_cmp(&b50.max(b99))
        });
        if let Some(t) = thrifty {
            let (r50, r99) = ratios(t);
            let _ = write!(
                summary,
                "; no strategy is on the corner here: the fewest segments ({} {:.2}) come with a p50 of {:.0} us and a p99 of {:.0} us ({r50:.2} x and {r99:.2} x the best)",
                t.strategy.name(),
                t.segs_per_exchange.median,
                t.p50_us.median,
                t.p99_us.median,
            );
        }
        if fewest_of_the_fast {
            let _ = write!(
                summary,
                "; of the strategies as fast as the best, nagless sends the fewest segments ({fewest_fast:.2})"
            );
        }
    }
    Some(Verdict {
        latency_ok,
        p50_ok,
        p99_ok,
        segments_ok,
        on_corner,
        corner_reachable,
        fewest_of_the_fast,
        summary,
    })
}

/// Progress callback: (runs done, runs total, what is running).
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize, &str);

/// The emulated paths a plan needs, made before it runs (one per distinct link, shared by
/// every case and strategy on it). Fails as [`nagless_netpath::EmulatedPath::new`] does,
/// e.g. without root.
pub fn make_paths(
    plan: &Plan,
) -> Result<Vec<(Link, nagless_netpath::EmulatedPath)>, nagless_netpath::PathError> {
    let mut nets: Vec<(Link, nagless_netpath::EmulatedPath)> = Vec::new();
    for (_, path) in &plan.cases {
        if let Some(link) = path.link {
            if !nets.iter().any(|(l, _)| *l == link) {
                nets.push((link, nagless_netpath::EmulatedPath::new(&link.spec())?));
            }
        }
    }
    Ok(nets)
}

/// Runs every case of `plan` with every strategy, `repeats` times each, on loopback or on
/// the emulated paths of `nets` ([`make_paths`]); stops early when `interrupted` says so.
pub fn run_plan(
    plan: &Plan,
    nets: &[(Link, nagless_netpath::EmulatedPath)],
    interrupted: &dyn Fn() -> bool,
    progress: Progress<'_>,
) -> Vec<Table> {
    let total = plan.run_count();
    let mut done = 0;
    let mut tables = Vec::new();
    for (case, path) in &plan.cases {
        if interrupted() {
            break;
        }
        let net = path
            .link
            .and_then(|link| nets.iter().find(|(l, _)| *l == link).map(|(_, n)| n));
        let mut rows = Vec::new();
        let mut errors = Vec::new();
        for &strategy in &plan.strategies {
            let mut runs = Vec::new();
            for rep in 0..plan.repeats {
                let what = format!(
                    "{} {} {} {} #{}",
                    case.scenario(),
                    case.params(),
                    path.label(),
                    strategy.name(),
                    rep + 1
                );
                progress(done, total, &what);
                let setup = Setup {
                    path: *path,
                    pin: plan.pin,
                    net,
                };
                if path.link.is_some() && net.is_none() {
                    errors.push(format!("{what}: no emulated path was made for it"));
                    done += 1;
                    continue;
                }
                match case.run(strategy, setup, plan.limit_on(path)) {
                    Ok(r) => runs.push(r),
                    Err(e) => errors.push(format!("{what}: {e}")),
                }
                done += 1;
            }
            rows.push(row(strategy, &runs));
        }
        progress(done, total, "");
        let best_latency = rows
            .iter()
            .filter(|r| r.runs > 0)
            .min_by(|a, b| a.p50_us.median.total_cmp(&b.p50_us.median))
            .map(|r| r.strategy);
        let fewest_segments = rows
            .iter()
            .filter(|r| r.runs > 0)
            .min_by(|a, b| {
                a.segs_per_exchange
                    .median
                    .total_cmp(&b.segs_per_exchange.median)
            })
            .map(|r| r.strategy);
        tables.push(Table {
            scenario: case.scenario().to_string(),
            params: case.params(),
            case: case.clone(),
            path: *path,
            unit: case.unit().to_string(),
            verdict: verdict(&rows),
            rows,
            best_latency,
            fewest_segments,
            errors,
        });
    }
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(strategy: Strategy, p50: f64, p99: f64, segs: f64) -> Row {
        let one = |v: f64| Spread::of(&[v]);
        Row {
            strategy,
            runs: 1,
            exchanges: 100,
            p50_us: one(p50),
            p99_us: one(p99),
            max_us: one(p99),
            stalls: Spread::default(),
            elapsed_s: Spread::default(),
            throughput: Spread::default(),
            segs_per_exchange: one(segs),
            client_data_segs: Spread::default(),
            server_data_segs: Spread::default(),
            client_bytes: Spread::default(),
            server_bytes: Spread::default(),
            wire_bytes_per_exchange: Spread::default(),
            syscalls_per_exchange: Spread::default(),
            cpu_us_per_exchange: Spread::default(),
            cdf: Vec::new(),
        }
    }

    #[test]
    fn nagless_on_the_corner_when_as_fast_and_as_thrifty_as_the_best() {
        let v = verdict(&[
            row(Strategy::Nagle, 44_000.0, 44_100.0, 2.0),
            row(Strategy::Nodelay, 10.0, 30.0, 3.0),
            row(Strategy::Nagless, 10.0, 31.0, 2.0),
        ])
        .unwrap();
        assert!(v.on_corner && v.corner_reachable && v.fewest_of_the_fast);
    }

    #[test]
    fn a_corner_out_of_everyones_reach_is_told_apart_from_a_miss() {
        // The 20 ms path's framed-window each-frame table: the fewest segments only by waiting.
        let rows = [
            row(Strategy::Nagle, 93_900.0, 94_100.0, 6.0),
            row(Strategy::Nodelay, 31_500.0, 31_900.0, 15.6),
            row(Strategy::Cork, 50_800.0, 50_900.0, 6.0),
            row(Strategy::Msgmore, 30_800.0, 31_500.0, 15.4),
            row(Strategy::Nagless, 30_800.0, 31_600.0, 14.2),
        ];
        let v = verdict(&rows).unwrap();
        assert!(!v.on_corner && !v.corner_reachable && v.fewest_of_the_fast);
        assert!(v.summary.contains("cork 6.00"), "{}", v.summary);
        // nagless as fast but with more segments than another fast strategy: a miss.
        let mut rows = rows;
        rows[4] = row(Strategy::Nagless, 30_800.0, 31_600.0, 17.0);
        let v = verdict(&rows).unwrap();
        assert!(!v.on_corner && !v.corner_reachable && !v.fewest_of_the_fast);
        // Another strategy on the corner: reachable, nagless missed it.
        rows[2] = row(Strategy::Cork, 30_900.0, 31_000.0, 6.0);
        let v = verdict(&rows).unwrap();
        assert!(v.corner_reachable && !v.on_corner);
    }
}
