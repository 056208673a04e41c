//! Where nagless stands in a table: on the Pareto corner of latency and segments, or not
//! (the table's [`Verdict`], judged by [`verdict`]).

use std::fmt::Write as _;

use crate::strategy::Strategy;
use crate::table::{Row, Verdict};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Spread;

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
            client_segs_per_exchange: Spread::default(),
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
