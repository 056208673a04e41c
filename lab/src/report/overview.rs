//! The report's overview: every case in one table, nagless's p50, p99 and data segments per
//! exchange against the best other strategy's (the measures the Pareto verdict judges), the
//! verdict in a few words, and one chart of the ratios.

use std::fmt::Write as _;

use super::{esc, fmt_num, fmt_us, labels, title};
use crate::{Row, Strategy, Table};

/// nagless's median of one measure against the best (lowest) other strategy's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Against {
    pub(crate) ours: f64,
    pub(crate) best: f64,
    pub(crate) by: Strategy,
}

impl Against {
    /// nagless ÷ the best other; `None` where the best other is 0 and nagless is not.
    pub(crate) fn ratio(&self) -> Option<f64> {
        if self.best > 0.0 {
            Some(self.ours / self.best)
        } else if self.ours <= 0.0 {
            Some(1.0)
        } else {
            None
        }
    }
}

/// The three measures of the verdict: name, unit formatter, pick.
type Measure = (&'static str, fn(f64) -> String, fn(&Row) -> f64);
pub(crate) const MEASURES: [Measure; 3] = [
    ("p50", fmt_us, |r| r.p50_us.median),
    ("p99", fmt_us, |r| r.p99_us.median),
    ("data segments per exchange", fmt_num, |r| {
        r.segs_per_exchange.median
    }),
];

/// One case in the overview: its section's number and the three comparisons (none where
/// nagless or every other strategy had no successful run).
pub(crate) struct Line<'a> {
    pub(crate) n: usize,
    pub(crate) table: &'a Table,
    pub(crate) against: [Option<Against>; 3],
}

/// One line per table; `n` counts from 1 in table order (the sections' ids, `case-N`).
pub(crate) fn lines(tables: &[Table]) -> Vec<Line<'_>> {
    tables
        .iter()
        .enumerate()
        .map(|(i, t)| Line {
            n: i + 1,
            table: t,
            against: MEASURES.map(|(_, _, pick)| against(t, pick)),
        })
        .collect()
}

fn against(t: &Table, pick: fn(&Row) -> f64) -> Option<Against> {
    let done = || t.rows.iter().filter(|r| r.runs > 0);
    let ours = done().find(|r| r.strategy == Strategy::Nagless)?;
    let best = done()
        .filter(|r| r.strategy != Strategy::Nagless)
        .min_by(|a, b| pick(a).total_cmp(&pick(b)))?;
    Some(Against {
        ours: pick(ours),
        best: pick(best),
        by: best.strategy,
    })
}

/// The verdict in a few words, and its class (`ok`, `near` or `bad`).
pub(crate) fn verdict_words(t: &Table) -> (String, &'static str) {
    let Some(v) = &t.verdict else {
        return ("nagless not run".into(), "bad");
    };
    if v.on_corner {
        return ("on the corner".into(), "ok");
    }
    if !v.corner_reachable && v.fewest_of_the_fast {
        return (
            "no strategy on the corner; nagless as fast as the best, fewest segments of those"
                .into(),
            "near",
        );
    }
    let misses: Vec<&str> = [
        (v.p50_ok, "p50 too slow"),
        (v.p99_ok, "p99 too slow"),
        (v.segments_ok, "too many segments"),
    ]
    .iter()
    .filter(|(ok, _)| !ok)
    .map(|(_, m)| *m)
    .collect();
    let mut s = format!("not on the corner: {}", misses.join(", "));
    if !v.corner_reachable {
        s.push_str(" (no strategy is)");
    }
    (s, "bad")
}

/// The overview table: a row per case linking to its section.
pub(crate) fn table_html(lines: &[Line<'_>]) -> String {
    let mut out = String::from(
        "<table class=\"overview\"><tr><th>#</th><th>case</th><th>verdict</th>\
<th>p50: nagless ÷ best other</th><th>p99: nagless ÷ best other</th>\
<th>segments/exchange: nagless ÷ fewest other</th></tr>\n",
    );
    for l in lines {
        let (words, class) = verdict_words(l.table);
        let failed = if l.table.errors.is_empty() {
            String::new()
        } else {
            format!("; {} runs failed", l.table.errors.len())
        };
        let _ = write!(
            out,
            "<tr><td>{n}</td><td><a href=\"#case-{n}\">{}</a></td><td class=\"{class}\">{}{}</td>",
            esc(&title(l.table)),
            esc(&words),
            esc(&failed),
            n = l.n,
        );
        for (a, (_, fmt, _)) in l.against.iter().zip(MEASURES) {
            match a {
                Some(a) => {
                    let ratio = a.ratio().map_or("-".into(), |r| format!("{r:.2}"));
                    let _ = write!(
                        out,
                        "<td>{ratio} <small>({} vs {} {})</small></td>",
                        fmt(a.ours),
                        a.by.name(),
                        fmt(a.best)
                    );
                }
                None => out.push_str("<td>-</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

const MEASURE_COLORS: [&str; 3] = ["#1f77b4", "#9467bd", "#2ca02c"];
const WIDTH: f64 = 1000.0;
const ROW_H: f64 = 26.0;
const TOP: f64 = 56.0;
const LABEL_CHAR_W: f64 = 6.2;

/// Ratios drawn as bars from 1 on a log axis, three per case (p50, p99, segments); each case
/// labelled with its title, linked to its section.
pub(crate) fn chart_svg(lines: &[Line<'_>]) -> String {
    let ratios: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.against.iter().flatten().filter_map(Against::ratio))
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    let lo = ratios.iter().cloned().fold(0.8, f64::min) / 1.15;
    let hi = ratios.iter().cloned().fold(1.25, f64::max) * 1.15;
    let label_w = lines
        .iter()
        .map(|l| title(l.table).chars().count() as f64 * LABEL_CHAR_W + 30.0)
        .fold(120.0, f64::max)
        .min(WIDTH * 0.55);
    let (x0, x1) = (label_w + 10.0, WIDTH - 20.0);
    let x = |r: f64| x0 + (r.ln() - lo.ln()) / (hi.ln() - lo.ln()) * (x1 - x0);
    let bottom = TOP + ROW_H * lines.len() as f64;
    let height = bottom + 50.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\">\
<rect width=\"{WIDTH}\" height=\"{height}\" fill=\"white\"/>\
<text x=\"{}\" y=\"18\" font-size=\"13\" text-anchor=\"middle\">nagless ÷ the best other strategy, per case (log scale; left of 1: nagless ahead)</text>\n",
        WIDTH / 2.0
    );
    let mut lx = x0;
    for ((name, _, _), c) in MEASURES.iter().zip(MEASURE_COLORS) {
        let _ = write!(
            s,
            "<rect x=\"{lx:.1}\" y=\"30\" width=\"14\" height=\"8\" fill=\"{c}\"/>\
<text x=\"{:.1}\" y=\"38\" font-size=\"11\">{}</text>",
            lx + 18.0,
            esc(name)
        );
        lx += 18.0 + name.len() as f64 * LABEL_CHAR_W + 24.0;
    }
    s.push('\n');
    for tick in labels::log_ticks(lo, hi, x1 - x0, 40.0).0 {
        let tx = x(tick);
        let _ = write!(
            s,
            "<line x1=\"{tx:.1}\" x2=\"{tx:.1}\" y1=\"{TOP}\" y2=\"{bottom}\" stroke=\"{}\"/>\
<text x=\"{tx:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{tick}</text>",
            if tick == 1.0 { "#333" } else { "#ddd" },
            bottom + 14.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">nagless's median ÷ the best other strategy's median</text>",
        (x0 + x1) / 2.0,
        bottom + 34.0
    );
    for (i, l) in lines.iter().enumerate() {
        let top = TOP + ROW_H * i as f64;
        let (_, class) = verdict_words(l.table);
        let _ = write!(
            s,
            "<a href=\"#case-{}\"><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\" fill=\"{}\">{}</text></a>",
            l.n,
            label_w,
            top + ROW_H / 2.0 + 4.0,
            if class == "bad" { "#c00" } else { "#222" },
            esc(&title(l.table))
        );
        for (k, ((a, (name, fmt, _)), c)) in l
            .against
            .iter()
            .zip(MEASURES)
            .zip(MEASURE_COLORS)
            .enumerate()
        {
            let Some((a, r)) = a.and_then(|a| a.ratio().map(|r| (a, r))) else {
                continue;
            };
            let (xa, xb) = (x(1.0), x(r.clamp(lo, hi)));
            let _ = write!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"6\" fill=\"{c}\"><title>{}: nagless {} vs {} {} ({r:.2})</title></rect>",
                xa.min(xb),
                top + 4.0 + 7.0 * k as f64,
                (xb - xa).abs().max(1.0),
                esc(name),
                fmt(a.ours),
                a.by.name(),
                fmt(a.best),
            );
        }
        s.push('\n');
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_against_zero_is_none_unless_both_are_zero() {
        let a = |ours, best| Against {
            ours,
            best,
            by: Strategy::Cork,
        };
        assert_eq!(a(3.0, 2.0).ratio(), Some(1.5));
        assert_eq!(a(0.0, 0.0).ratio(), Some(1.0));
        assert_eq!(a(1.0, 0.0).ratio(), None);
    }
}
