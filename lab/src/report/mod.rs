//! Lab output: terminal tables, JSON (schema in `docs/lab-json.md`), CSV and a
//! self-contained HTML page with SVG charts ([`html`]; its parts in the submodules: the run's
//! description, the overview, the charts and their label placement, the page).

use std::fmt::Write as _;

use crate::Table;

mod charts;
mod info;
mod labels;
mod overview;
mod page;

pub use info::RunInfo;
pub use page::html;

/// Version of the JSON schema; bumped on any incompatible change.
pub(crate) const JSON_SCHEMA_VERSION: u32 = 1;

pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} us")
    }
}

pub(crate) fn fmt_num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Title line of a table.
pub fn title(t: &Table) -> String {
    format!("{} {} [{}]", t.scenario, t.params, t.path.label())
}

/// Renders the tables for a terminal: strategies as rows, `*` marks the best latency and the
/// fewest segments, then the Pareto line.
pub fn text(tables: &[Table]) -> String {
    let mut out = String::new();
    for t in tables {
        let _ = writeln!(out, "\n== {}", title(t));
        let _ = writeln!(
            out,
            "{:<9} {:>10} {:>10} {:>10} {:>7} {:>11} {:>9} {:>10} {:>9} {:>8}",
            "strategy",
            "p50",
            "p99",
            "max",
            "stalls",
            t.unit,
            "segs/ex",
            "wire B/ex",
            "sys/ex",
            "cpu/ex"
        );
        for r in &t.rows {
            if r.runs == 0 {
                let _ = writeln!(out, "{:<9} (no successful run)", r.strategy.name());
                continue;
            }
            let best = if t.best_latency == Some(r.strategy) {
                "*"
            } else {
                " "
            };
            let few = if t.fewest_segments == Some(r.strategy) {
                "*"
            } else {
                " "
            };
            let _ = writeln!(
                out,
                "{:<9} {:>9}{} {:>10} {:>10} {:>7} {:>11} {:>8}{} {:>10} {:>9} {:>8}",
                r.strategy.name(),
                fmt_us(r.p50_us.median),
                best,
                fmt_us(r.p99_us.median),
                fmt_us(r.max_us.median),
                fmt_num(r.stalls.median),
                fmt_num(r.throughput.median),
                fmt_num(r.segs_per_exchange.median),
                few,
                fmt_num(r.wire_bytes_per_exchange.median),
                fmt_num(r.syscalls_per_exchange.median),
                fmt_us(r.cpu_us_per_exchange.median),
            );
        }
        if let Some(line) = client_segments_line(t) {
            let _ = writeln!(out, "{line}");
        }
        if let Some(v) = &t.verdict {
            let _ = writeln!(out, "{}", v.summary);
        }
        for e in &t.errors {
            let _ = writeln!(out, "error: {e}");
        }
    }
    out
}

/// For a case whose requests come from one side only (`multiplexed`): the client's own data
/// segments per request, strategy by strategy (the table's segments count both sides).
pub(crate) fn client_segments_line(t: &Table) -> Option<String> {
    if !matches!(t.case, crate::Case::Multiplexed { .. }) {
        return None;
    }
    let cells: Vec<String> = t
        .rows
        .iter()
        .filter(|r| r.runs > 0)
        .map(|r| {
            format!(
                "{} {}",
                r.strategy.name(),
                fmt_num(r.client_segs_per_exchange.median)
            )
        })
        .collect();
    Some(format!(
        "client data segments per request: {}",
        cells.join(", ")
    ))
}

/// A case run on emulated paths of two or more RTTs (all else equal): one table with RTT
/// down the side.
pub(crate) struct Sweep<'a> {
    /// `scenario params [link without RTT]`.
    pub(crate) title: String,
    /// The tables, by increasing RTT.
    pub(crate) tables: Vec<&'a Table>,
}

/// The sweeps among `tables`.
pub(crate) fn sweeps(tables: &[Table]) -> Vec<Sweep<'_>> {
    let mut out: Vec<(String, Vec<&Table>)> = Vec::new();
    for t in tables {
        let Some(mut link) = t.path.link else {
            continue;
        };
        link.rtt_us = 0;
        let rest = link.label().trim_start_matches("rtt0ms").to_string();
        let key = format!("{} {}{}", t.scenario, t.params, rest);
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(t),
            None => out.push((key, vec![t])),
        }
    }
    out.into_iter()
        .filter(|(_, v)| v.len() >= 2)
        .map(|(title, mut tables)| {
            tables.sort_by_key(|t| t.path.link.map_or(0, |l| l.rtt_us));
            Sweep { title, tables }
        })
        .collect()
}

pub(crate) fn rtt_of(t: &Table) -> f64 {
    t.path.link.map_or(0.0, |l| l.rtt_us as f64)
}

/// The sweeps as text: per RTT, each strategy's p50 / p99, and nagless's segments.
pub fn sweep_text(tables: &[Table]) -> String {
    sweeps(tables).iter().map(one_sweep_text).collect()
}

pub(crate) fn one_sweep_text(sw: &Sweep<'_>) -> String {
    let mut out = String::new();
    {
        let _ = writeln!(out, "\n== sweep: {} (p50 / p99 per exchange)", sw.title);
        let strategies: Vec<_> = sw.tables[0].rows.iter().map(|r| r.strategy).collect();
        let _ = write!(out, "{:>9}", "RTT");
        for s in &strategies {
            let _ = write!(out, " {:>21}", s.name());
        }
        let _ = writeln!(out, " {:>16}", "nagless segs/ex");
        for t in &sw.tables {
            let _ = write!(out, "{:>9}", fmt_us(rtt_of(t)));
            for s in &strategies {
                match t.rows.iter().find(|r| r.strategy == *s && r.runs > 0) {
                    Some(r) => {
                        let cell =
                            format!("{} / {}", fmt_us(r.p50_us.median), fmt_us(r.p99_us.median));
                        let _ = write!(out, " {cell:>21}");
                    }
                    None => {
                        let _ = write!(out, " {:>21}", "-");
                    }
                }
            }
            let segs = t
                .rows
                .iter()
                .find(|r| r.strategy == crate::Strategy::Nagless && r.runs > 0)
                .map_or("-".to_string(), |r| fmt_num(r.segs_per_exchange.median));
            let _ = writeln!(out, " {segs:>16}");
        }
    }
    out
}

/// One line per table for the end of a run: how many tables have nagless on the corner.
pub fn corner_summary(tables: &[Table]) -> String {
    let judged: Vec<_> = tables
        .iter()
        .filter_map(|t| t.verdict.as_ref().map(|v| (t, v)))
        .collect();
    let on = judged.iter().filter(|(_, v)| v.on_corner).count();
    let mut s = format!(
        "nagless on the Pareto corner in {on} of {} tables",
        judged.len()
    );
    let out_of_reach = judged
        .iter()
        .filter(|(_, v)| !v.corner_reachable && v.fewest_of_the_fast)
        .count();
    if out_of_reach > 0 {
        let _ = write!(
            s,
            "; in {out_of_reach} more no strategy is on it and nagless is as fast as the best with the fewest segments of those that are"
        );
    }
    for (t, v) in judged.iter().filter(|(_, v)| !v.on_corner) {
        let _ = write!(s, "\n  not on corner: {} ({})", title(t), v.summary);
    }
    s
}

/// The JSON document: `{ "schema": 1, "tool": ..., "tables": [...] }`.
pub fn json(tables: &[Table], meta: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "schema": JSON_SCHEMA_VERSION,
        "tool": format!("nagless-lab {}", env!("CARGO_PKG_VERSION")),
        "meta": meta,
        "tables": tables,
    })
}

/// CSV: one line per table and strategy, medians only.
pub fn csv(tables: &[Table]) -> String {
    let mut out = String::from(
        "scenario,params,path,strategy,runs,exchanges,p50_us,p99_us,max_us,stalls,throughput,unit,segs_per_exchange,client_data_segs,server_data_segs,wire_bytes_per_exchange,syscalls_per_exchange,cpu_us_per_exchange\n",
    );
    for t in tables {
        for r in &t.rows {
            let _ = writeln!(
                out,
                "{},\"{}\",{},{},{},{},{:.1},{:.1},{:.1},{:.1},{:.3},{},{:.3},{:.0},{:.0},{:.1},{:.2},{:.1}",
                t.scenario,
                t.params.replace('"', "'"),
                t.path.label(),
                r.strategy.name(),
                r.runs,
                r.exchanges,
                r.p50_us.median,
                r.p99_us.median,
                r.max_us.median,
                r.stalls.median,
                r.throughput.median,
                t.unit,
                r.segs_per_exchange.median,
                r.client_data_segs.median,
                r.server_data_segs.median,
                r.wire_bytes_per_exchange.median,
                r.syscalls_per_exchange.median,
                r.cpu_us_per_exchange.median,
            );
        }
    }
    out
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
