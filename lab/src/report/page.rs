//! The HTML report: one self-contained page that opens with the run (command, kernel,
//! machine, date), a table of contents and the overview, then a section per sweep and per
//! case (the numbers, the verdict, a latency-vs-segments scatter and latency CDFs).

use std::fmt::Write as _;

use super::charts::{cdf_svg, scatter_svg, sweep_svg};
use super::overview;
use super::{corner_summary, esc, fmt_num, fmt_us, one_sweep_text, sweeps, title, RunInfo};
use crate::Table;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1040px;color:#222}\
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}\
td:first-child,th:first-child{text-align:left}.best{font-weight:bold;color:#0a6}\
table.overview :is(td,th):nth-child(2),table.overview :is(td,th):nth-child(3){text-align:left}\
figure{margin:0}pre{overflow-x:auto}.charts{display:flex;flex-wrap:wrap;gap:8px}.ok{color:#0a6}.near{color:#a60}.bad{color:#c00}\
code{background:#f4f4f4;padding:1px 4px}dl.run{display:grid;grid-template-columns:max-content auto;gap:2px 12px;font-size:14px}\
dl.run dt{font-weight:bold}dl.run dd{margin:0}nav ol{columns:2;font-size:13px}\
section{border-top:2px solid #eee;margin-top:1.5em}";

/// One self-contained HTML page: the run described by `info`, a table of contents, the
/// overview, then per sweep and per table the numbers and charts. Sections are `overview`,
/// `sweep-N` and `case-N` (N from 1, in table order).
pub fn html(tables: &[Table], info: &RunInfo) -> Result<String, String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>nagless lab report</title><style>{STYLE}</style></head><body>\n<h1>nagless lab report</h1>"
    );
    out.push_str(&run_html(info));
    let sweeps = sweeps(tables);
    out.push_str(&toc_html(tables, &sweeps));
    let lines = overview::lines(tables);
    let headline = corner_summary(tables);
    let _ = writeln!(
        out,
        "<section id=\"overview\"><h2>Overview</h2><p>{}. Latency is per exchange (median over runs of each run's percentile); \
segments are data segments per exchange counted by the kernel (TCP_INFO, both sides); wire bytes add 66 B of headers per segment, ACKs included. \
The verdict: nagless is on the Pareto corner when its p50 and its p99 are each within 1.1 × the best + 20 µs and its segments within 1.05 × the fewest.</p>",
        esc(headline.lines().next().unwrap_or_default())
    );
    out.push_str(&overview::table_html(&lines));
    let _ = writeln!(
        out,
        "<figure class=\"chart\" id=\"overview-chart\">{}</figure></section>",
        overview::chart_svg(&lines)
    );
    for (i, sw) in sweeps.iter().enumerate() {
        let _ = writeln!(
            out,
            "<section id=\"sweep-{}\"><h2>sweep: {}</h2>",
            i + 1,
            esc(&sw.title)
        );
        let _ = writeln!(out, "<pre>{}</pre>", esc(&one_sweep_text(sw)));
        let _ = writeln!(
            out,
            "<div class=\"charts\"><figure class=\"chart\" id=\"sweep-{}-rtt\">{}</figure></div></section>",
            i + 1,
            sweep_svg(sw)?
        );
    }
    for (i, t) in tables.iter().enumerate() {
        out.push_str(&case_html(i + 1, t)?);
    }
    out.push_str("</body></html>\n");
    Ok(out)
}

/// The run: kernel, machine, date, command and the plan's settings.
fn run_html(info: &RunInfo) -> String {
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "unknown".to_string()
        } else {
            esc(s)
        }
    };
    let machine = match (info.cpus, info.cpu_model.as_str()) {
        (0, m) => or_unknown(m),
        (n, "") => format!("{n} CPUs"),
        (n, m) => format!("{n} CPUs, {}", esc(m)),
    };
    let pin = info
        .pin
        .map_or("none (the scheduler places both ends)".into(), |c| {
            format!("both ends on CPU {c}")
        });
    let limit = if info.limit_fixed {
        format!("{} ms (asked for)", info.limit_ms)
    } else {
        format!(
            "{} ms (on an emulated path 20 round trips, 300 ms to that)",
            info.limit_ms
        )
    };
    let mut s = String::from("<dl class=\"run\">");
    for (k, v) in [
        ("kernel", or_unknown(&info.kernel)),
        ("machine", machine),
        ("date", or_unknown(&info.date)),
        ("command", format!("<code>{}</code>", esc(&info.command))),
        ("runs", format!("{} per case and strategy", info.repeats)),
        ("run limit", limit),
        ("pinning", pin),
    ] {
        let _ = write!(s, "<dt>{k}</dt><dd>{v}</dd>");
    }
    s.push_str("</dl>\n");
    s
}

/// The table of contents: the overview, each sweep, each case.
fn toc_html(tables: &[Table], sweeps: &[super::Sweep<'_>]) -> String {
    let mut s = String::from(
        "<nav id=\"contents\"><h2>Contents</h2><ol><li><a href=\"#overview\">Overview</a></li>",
    );
    for (i, sw) in sweeps.iter().enumerate() {
        let _ = write!(
            s,
            "<li><a href=\"#sweep-{}\">sweep: {}</a></li>",
            i + 1,
            esc(&sw.title)
        );
    }
    for (i, t) in tables.iter().enumerate() {
        let _ = write!(
            s,
            "<li><a href=\"#case-{}\">{}</a></li>",
            i + 1,
            esc(&title(t))
        );
    }
    s.push_str("</ol></nav>\n");
    s
}

/// One case's section: the table, the verdict, failed runs and the charts.
fn case_html(n: usize, t: &Table) -> Result<String, String> {
    let mut out = String::new();
    let _ = writeln!(out, "<section id=\"case-{n}\"><h2>{}</h2>", esc(&title(t)));
    out.push_str(
        "<table><tr><th>strategy</th><th>p50</th><th>p99</th><th>max</th><th>stalls ≥30 ms</th>",
    );
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
    if let Some(line) = super::client_segments_line(t) {
        let _ = writeln!(out, "<p>{}</p>", esc(&line));
    }
    if let Some(v) = &t.verdict {
        let (_, class) = overview::verdict_words(t);
        let _ = writeln!(out, "<p class=\"{class}\">{}</p>", esc(&v.summary));
    }
    for e in &t.errors {
        let _ = writeln!(out, "<p class=\"bad\">run failed: {}</p>", esc(e));
    }
    let _ = writeln!(
        out,
        "<div class=\"charts\"><figure class=\"chart\" id=\"case-{n}-scatter\">{}</figure>\
<figure class=\"chart\" id=\"case-{n}-cdf\">{}</figure></div></section>",
        scatter_svg(t)?,
        cdf_svg(t)?
    );
    Ok(out)
}
