//! Lab output: terminal tables, JSON (schema in `docs/lab-json.md`), CSV and a
//! self-contained HTML page with SVG charts.

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::{Row, Table};

/// Version of the JSON schema; bumped on any incompatible change.
pub const JSON_SCHEMA_VERSION: u32 = 1;

pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} us")
    }
}

fn fmt_num(x: f64) -> String {
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
        if let Some(v) = &t.verdict {
            let _ = writeln!(out, "{}", v.summary);
        }
        for e in &t.errors {
            let _ = writeln!(out, "error: {e}");
        }
    }
    out
}

/// A case run on emulated paths of two or more RTTs (all else equal): one table with RTT
/// down the side.
pub struct Sweep<'a> {
    /// `scenario params [link without RTT]`.
    pub title: String,
    /// The tables, by increasing RTT.
    pub tables: Vec<&'a Table>,
}

/// The sweeps among `tables`.
pub fn sweeps(tables: &[Table]) -> Vec<Sweep<'_>> {
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

fn rtt_of(t: &Table) -> f64 {
    t.path.link.map_or(0.0, |l| l.rtt_us as f64)
}

/// The sweeps as text: per RTT, each strategy's p50 / p99, and nagless's segments.
pub fn sweep_text(tables: &[Table]) -> String {
    sweeps(tables).iter().map(one_sweep_text).collect()
}

fn one_sweep_text(sw: &Sweep<'_>) -> String {
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

/// p50 (solid) and p99 (thin) against RTT per strategy, log-log.
fn sweep_svg(sw: &Sweep<'_>) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let xs: Vec<f64> = sw.tables.iter().map(|t| rtt_of(t).max(1.0)).collect();
        let all = sw
            .tables
            .iter()
            .flat_map(|t| t.rows.iter().filter(|r| r.runs > 0));
        let (mut lo, mut hi) = (f64::INFINITY, 1.0f64);
        for r in all {
            lo = lo.min(r.p50_us.median.max(1.0));
            hi = hi.max(r.p99_us.median);
        }
        let xlo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        let xhi = xs.iter().cloned().fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "latency against round-trip time (p50 thick, p99 thin)",
                ("sans-serif", 15),
            )
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(
                ((xlo / 1.3)..(xhi * 1.3)).log_scale(),
                ((lo / 1.5)..(hi * 1.5)).log_scale(),
            )
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("round-trip time of the path")
            .y_desc("latency per exchange")
            .x_label_formatter(&|v| fmt_us(*v))
            .y_label_formatter(&|v| fmt_us(*v))
            .draw()
            .map_err(|e| e.to_string())?;
        for r0 in sw.tables[0].rows.iter() {
            let c = color(r0);
            let series = |pick: fn(&Row) -> f64| -> Vec<(f64, f64)> {
                sw.tables
                    .iter()
                    .filter_map(|t| {
                        t.rows
                            .iter()
                            .find(|r| r.strategy == r0.strategy && r.runs > 0)
                            .map(|r| (rtt_of(t).max(1.0), pick(r).max(1.0)))
                    })
                    .collect()
            };
            chart
                .draw_series(LineSeries::new(
                    series(|r| r.p50_us.median),
                    c.stroke_width(3),
                ))
                .map_err(|e| e.to_string())?
                .label(r0.strategy.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 15, y)], c.stroke_width(3))
                });
            chart
                .draw_series(LineSeries::new(
                    series(|r| r.p99_us.median),
                    c.stroke_width(1),
                ))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
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

const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(44, 160, 44),
];

fn color(r: &Row) -> RGBColor {
    COLORS[crate::Strategy::ALL
        .iter()
        .position(|s| *s == r.strategy)
        .unwrap_or(0)]
}

/// Latency (p50, log scale) against data segments per exchange: one point per strategy.
fn scatter_svg(t: &Table) -> Result<String, String> {
    let rows: Vec<&Row> = t.rows.iter().filter(|r| r.runs > 0).collect();
    if rows.is_empty() {
        return Ok(String::new());
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let xmax = rows
            .iter()
            .map(|r| r.segs_per_exchange.median)
            .fold(1.0, f64::max)
            * 1.15;
        let ymin = rows
            .iter()
            .map(|r| r.p50_us.median)
            .fold(f64::INFINITY, f64::min)
            .max(1.0)
            / 2.0;
        let ymax = rows.iter().map(|r| r.p50_us.median).fold(1.0, f64::max) * 2.0;
        let mut chart = ChartBuilder::on(&root)
            .caption("p50 latency vs data segments", ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, (ymin..ymax).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("data segments per exchange")
            .y_desc("p50 latency")
            .y_label_formatter(&|v| fmt_us(*v))
            .draw()
            .map_err(|e| e.to_string())?;
        for r in &rows {
            let c = color(r);
            let p = (r.segs_per_exchange.median, r.p50_us.median.max(1.0));
            chart
                .draw_series(std::iter::once(Circle::new(p, 5, c.filled())))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(std::iter::once(Text::new(
                    r.strategy.name(),
                    (p.0, p.1 * 1.12),
                    ("sans-serif", 12).into_font().color(&c),
                )))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Latency CDFs, one line per strategy, log latency axis.
fn cdf_svg(t: &Table) -> Result<String, String> {
    let rows: Vec<&Row> = t.rows.iter().filter(|r| !r.cdf.is_empty()).collect();
    if rows.is_empty() {
        return Ok(String::new());
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let lo = rows
            .iter()
            .flat_map(|r| r.cdf.first())
            .map(|p| p.0)
            .min()
            .unwrap_or(1)
            .max(1);
        let hi = rows
            .iter()
            .flat_map(|r| r.cdf.last())
            .map(|p| p.0)
            .max()
            .unwrap_or(10)
            .max(lo * 10);
        let mut chart = ChartBuilder::on(&root)
            .caption("latency CDF", ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(45)
            .build_cartesian_2d(((lo as f64 / 1.5)..(hi as f64 * 1.5)).log_scale(), 0.0..1.0)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("latency per exchange")
            .y_desc("fraction of exchanges")
            .x_label_formatter(&|v| fmt_us(*v))
            .draw()
            .map_err(|e| e.to_string())?;
        for r in &rows {
            let c = color(r);
            chart
                .draw_series(LineSeries::new(
                    r.cdf.iter().map(|&(us, q)| (us.max(1) as f64, q)),
                    c.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?
                .label(r.strategy.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 15, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One self-contained HTML page: per table the numbers, a latency-vs-segments scatter and
/// latency CDFs.
pub fn html(tables: &[Table], command: &str) -> Result<String, String> {
    let mut out = String::new();
    out.push_str(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>nagless lab report</title>\
<style>body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1040px;color:#222}\
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}\
td:first-child,th:first-child{text-align:left}.best{font-weight:bold;color:#0a6}\
.charts{display:flex;flex-wrap:wrap;gap:8px}.ok{color:#0a6}.bad{color:#c00}code{background:#f4f4f4;padding:1px 4px}\
section{border-top:2px solid #eee;margin-top:1.5em}</style></head><body>\n",
    );
    let _ = writeln!(
        out,
        "<h1>nagless lab report</h1><p>Made by <code>{}</code>. Latency is per exchange (median over runs of each run's percentile); \
segments are data segments per exchange counted by the kernel (TCP_INFO, both sides); wire bytes add 66 B of headers per segment, ACKs included.</p>",
        esc(command)
    );
    let _ = writeln!(
        out,
        "<p>{}</p>",
        esc(&corner_summary(tables)).replace('\n', "<br>")
    );
    for sw in sweeps(tables) {
        let _ = writeln!(out, "<section><h2>sweep: {}</h2>", esc(&sw.title));
        let _ = writeln!(out, "<pre>{}</pre>", esc(&one_sweep_text(&sw)));
        let _ = writeln!(
            out,
            "<div class=\"charts\">{}</div></section>",
            sweep_svg(&sw)?
        );
    }
    for t in tables {
        let _ = writeln!(out, "<section><h2>{}</h2>", esc(&title(t)));
        out.push_str("<table><tr><th>strategy</th><th>p50</th><th>p99</th><th>max</th><th>stalls ≥30 ms</th>");
        let _ = write!(out, "<th>{}</th>", esc(&t.unit));
        out.push_str("<th>segs/exchange</th><th>wire B/exchange</th><th>syscalls/exchange</th><th>CPU/exchange</th></tr>\n");
        for r in t.rows.iter().filter(|r| r.runs > 0) {
            let b = |on: bool| if on { " class=\"best\"" } else { "" };
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td{}>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td{}>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                r.strategy.name(),
                b(t.best_latency == Some(r.strategy)),
                fmt_us(r.p50_us.median),
                fmt_us(r.p99_us.median),
                fmt_us(r.max_us.median),
                fmt_num(r.stalls.median),
                fmt_num(r.throughput.median),
                b(t.fewest_segments == Some(r.strategy)),
                fmt_num(r.segs_per_exchange.median),
                fmt_num(r.wire_bytes_per_exchange.median),
                fmt_num(r.syscalls_per_exchange.median),
                fmt_us(r.cpu_us_per_exchange.median),
            );
        }
        out.push_str("</table>\n");
        if let Some(v) = &t.verdict {
            let _ = writeln!(
                out,
                "<p class=\"{}\">{}</p>",
                if v.on_corner { "ok" } else { "bad" },
                esc(&v.summary)
            );
        }
        let _ = writeln!(
            out,
            "<div class=\"charts\">{}{}</div></section>",
            scatter_svg(t)?,
            cdf_svg(t)?
        );
    }
    out.push_str("</body></html>\n");
    Ok(out)
}
