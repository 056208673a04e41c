//! The HTML report as a browser shows it: a page made from a small fixed set of results is
//! loaded in Debian's headless Chromium, which records any page error and, once the page is
//! laid out, what each chart's text says and where it lands. The test then checks: no errors,
//! every contents link resolves, every chart names what it plots, scatter labels cover no dot
//! and no other label (strategies on one spot share one label), and legends cover no curve.

use std::time::Instant;

use nagless_lab::report::{self, RunInfo};
use nagless_lab::{verdict, Case, Link, Path, Row, Spread, Strategy, Table};
use serde_json::Value;

/// A row whose medians are the given figures (one run).
fn row(strategy: Strategy, p50: f64, p99: f64, segs: f64) -> Row {
    let one = |v: f64| Spread::of(&[v]);
    Row {
        strategy,
        runs: 1,
        exchanges: 100,
        p50_us: one(p50),
        p99_us: one(p99),
        max_us: one(p99 * 1.5),
        stalls: one(if p99 >= 30_000.0 { 4.0 } else { 0.0 }),
        elapsed_s: one(0.3),
        throughput: one(1e6 / p50),
        segs_per_exchange: one(segs),
        client_segs_per_exchange: one(segs / 2.0),
        client_data_segs: one(segs * 50.0),
        server_data_segs: one(segs * 50.0),
        client_bytes: one(102_400.0),
        server_bytes: one(102_400.0),
        wire_bytes_per_exchange: one(2048.0 + 66.0 * segs),
        syscalls_per_exchange: one(4.0),
        cpu_us_per_exchange: one(20.0),
        cdf: vec![
            ((p50 * 0.8) as u64, 0.1),
            (p50 as u64, 0.5),
            (p99 as u64, 0.99),
            ((p99 * 1.2) as u64, 1.0),
        ],
    }
}

fn table(case: Case, path: Path, rows: Vec<Row>) -> Table {
    let pick = |f: fn(&Row) -> f64| {
        rows.iter()
            .min_by(|a, b| f(a).total_cmp(&f(b)))
            .map(|r| r.strategy)
    };
    Table {
        scenario: case.scenario().to_string(),
        params: case.params(),
        unit: case.unit().to_string(),
        case,
        path,
        best_latency: pick(|r| r.p50_us.median),
        fewest_segments: pick(|r| r.segs_per_exchange.median),
        verdict: verdict(&rows),
        rows,
        errors: Vec::new(),
    }
}

/// Four cases: a tight cluster with two strategies on one spot, a spread-out case, and one
/// case on two emulated paths (a sweep).
fn tables() -> Vec<Table> {
    use Strategy::*;
    let link = |rtt_us| Link {
        rtt_us,
        rate_bps: Some(100_000_000),
        mtu: 1500,
        loss_ppm: 0,
        queue_bytes: None,
        seed: 1,
        peer_ack_delay_us: None,
    };
    let split = |k| Case::SplitWrite { k, rounds: 10 };
    vec![
        table(
            split(1),
            Path::LOOPBACK,
            vec![
                row(Nagle, 13.0, 61.0, 2.0),
                row(Nodelay, 14.0, 53.0, 2.0),
                row(Cork, 15.0, 38.0, 2.0),
                row(Msgmore, 15.0, 31.0, 2.0),
                row(Quickack, 18.0, 34.0, 2.0),
                row(Nagless, 16.0, 67.0, 2.0),
            ],
        ),
        table(
            split(100),
            Path::mss(1448),
            vec![
                row(Nagle, 88_000.0, 88_100.0, 10.4),
                row(Nodelay, 351.0, 4_800.0, 67.1),
                row(Cork, 165.0, 223.0, 2.0),
                row(Msgmore, 171.0, 215.0, 2.0),
                row(Quickack, 189.0, 406.0, 7.7),
                row(Nagless, 29.0, 82.0, 2.0),
            ],
        ),
        table(
            Case::HttpKeepalive { conns: 10 },
            Path {
                mss: None,
                link: Some(link(2_000)),
            },
            vec![
                row(Nagle, 44_000.0, 48_100.0, 3.0),
                row(Cork, 2_185.0, 2_301.0, 2.0),
                row(Nagless, 2_177.0, 2_340.0, 2.0),
            ],
        ),
        table(
            Case::Multiplexed {
                writers: 4,
                depth: 64,
                requests: 20_000,
            },
            Path::LOOPBACK,
            vec![
                row(Nagle, 136.0, 224.0, 0.21),
                row(Nodelay, 230.0, 499.0, 1.01),
                row(Nagless, 81.0, 138.0, 0.07),
            ],
        ),
        table(
            Case::HttpKeepalive { conns: 10 },
            Path {
                mss: None,
                link: Some(link(20_000)),
            },
            vec![
                row(Nagle, 60_000.0, 64_000.0, 3.0),
                row(Cork, 20_185.0, 20_301.0, 2.0),
                row(Nagless, 20_177.0, 20_340.0, 2.0),
            ],
        ),
    ]
}

/// Run after the page is parsed: the errors, the ids, the in-page links and, per chart, the
/// box of every text, dot and line, written into `<pre id="report-check">` as JSON.
const CHECK: &str = "<script>(function(){\
var box=function(e){var b=e.getBoundingClientRect();return{x:b.x,y:b.y,w:b.width,h:b.height}};\
var all=function(root,sel){return Array.prototype.slice.call(root.querySelectorAll(sel))};\
var out={errors:window.pageErrors,ids:all(document,'[id]').map(function(e){return e.id}),\
links:all(document,'a[href^=\"#\"]').map(function(a){return a.getAttribute('href').slice(1)}),\
charts:all(document,'figure.chart').map(function(f){return{id:f.id,\
texts:all(f,'svg text').map(function(t){var b=box(t);b.s=t.textContent.trim();return b}),\
dots:all(f,'svg circle').map(box),lines:all(f,'svg polyline').map(box)}})};\
var pre=document.createElement('pre');pre.id='report-check';pre.textContent=JSON.stringify(out);\
document.body.appendChild(pre);})();</script>";

#[derive(Debug, Clone, Copy)]
struct Box2 {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

impl Box2 {
    fn of(v: &Value) -> Box2 {
        let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} of {v}"));
        Box2 {
            x: f("x"),
            y: f("y"),
            w: f("w"),
            h: f("h"),
        }
    }

    /// Area shared with `o`, in square pixels.
    fn overlap(&self, o: &Box2) -> f64 {
        let w = (self.x + self.w).min(o.x + o.w) - self.x.max(o.x);
        let h = (self.y + self.h).min(o.y + o.h) - self.y.max(o.y);
        w.max(0.0) * h.max(0.0)
    }
}

/// A text's strategies, if it is a label made only of strategy names ("cork, msgmore").
fn strategies_of(text: &str) -> Option<Vec<&str>> {
    let names: Vec<&str> = text.split(", ").collect();
    names
        .iter()
        .all(|n| Strategy::ALL.iter().any(|s| s.name() == *n))
        .then_some(names)
}

#[test]
fn the_report_loads_in_chromium_with_every_chart_labelled() {
    let Some(chromium) = nagless_test_support::tool_path("chromium") else {
        nagless_test_support::skip(
            "chromium is not installed (Debian package chromium; ./scripts/test installs it)",
        );
        return;
    };
    let tables = tables();
    let info = RunInfo {
        command: "nagless lab --html r.html".into(),
        repeats: 1,
        limit_ms: 300,
        limit_fixed: false,
        pin: Some(1),
        kernel: "6.1.0-test".into(),
        cpus: 2,
        cpu_model: "Test CPU".into(),
        date: "2025-11-25T21:45:00Z".into(),
    };
    let page = report::html(&tables, &info).expect("render the report");
    assert!(page.contains("6.1.0-test") && page.contains("Test CPU"));
    let started = Instant::now();
    let check = nagless_test_support::browser::check_page(&chromium, &page, CHECK);
    eprintln!("chromium took {:?}", started.elapsed());

    assert_eq!(check["errors"], serde_json::json!([]), "page errors");
    let ids: Vec<&str> = check["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let links = check["links"].as_array().unwrap();
    assert!(
        links.len() > 2 * tables.len(),
        "contents and overview link every case"
    );
    for l in links {
        assert!(
            ids.contains(&l.as_str().unwrap()),
            "link to #{l} resolves nowhere"
        );
    }
    for id in ["overview", "contents", "sweep-1", "case-1", "case-4"] {
        assert!(ids.contains(&id), "no #{id}");
    }

    let charts = check["charts"].as_array().unwrap();
    let chart = |id: &str| {
        charts
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no chart {id}"))
    };
    let texts = |c: &Value| -> Vec<(String, Box2)> {
        c["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["s"].as_str().unwrap().to_string(), Box2::of(t)))
            .collect()
    };
    let boxes = |c: &Value, k: &str| -> Vec<Box2> {
        c[k].as_array().unwrap().iter().map(Box2::of).collect()
    };

    // The overview names every case.
    let overview = texts(chart("overview-chart"));
    for t in &tables {
        let title = report::title(t);
        assert!(
            overview.iter().any(|(s, _)| *s == title),
            "overview lacks {title}"
        );
    }

    for (n, t) in tables.iter().enumerate().map(|(i, t)| (i + 1, t)) {
        let ran: Vec<&str> = t.rows.iter().map(|r| r.strategy.name()).collect();

        // Scatter: a label per spot naming each strategy once, off every dot and label.
        let scatter = chart(&format!("case-{n}-scatter"));
        let labels: Vec<(String, Box2)> = texts(scatter)
            .into_iter()
            .filter(|(s, _)| strategies_of(s).is_some())
            .collect();
        let mut named: Vec<&str> = labels
            .iter()
            .flat_map(|(s, _)| strategies_of(s).unwrap())
            .collect();
        named.sort();
        let mut want = ran.clone();
        want.sort();
        assert_eq!(named, want, "case-{n}: scatter labels {labels:?}");
        let dots = boxes(scatter, "dots");
        assert_eq!(dots.len(), ran.len(), "case-{n}: a dot per strategy");
        for (i, (s, b)) in labels.iter().enumerate() {
            assert!(b.w > 0.0 && b.h > 0.0, "case-{n}: label {s} is not drawn");
            for d in &dots {
                // A pixel of anti-aliasing aside.
                assert!(
                    b.overlap(d) <= 2.0,
                    "case-{n}: a dot covers label {s}: {b:?} {d:?}"
                );
            }
            for (s2, b2) in &labels[..i] {
                assert!(
                    b.overlap(b2) <= 2.0,
                    "case-{n}: labels {s} and {s2} overlap"
                );
            }
        }

        // CDF: the legend names every strategy and covers no curve.
        let cdf = chart(&format!("case-{n}-cdf"));
        let curves = boxes(cdf, "lines");
        for name in &ran {
            let (_, b) = texts(cdf)
                .into_iter()
                .find(|(s, _)| s == name)
                .unwrap_or_else(|| panic!("case-{n}: CDF legend lacks {name}"));
            for c in curves.iter().filter(|c| c.w > 30.0) {
                assert_eq!(b.overlap(c), 0.0, "case-{n}: legend {name} on a curve");
            }
        }
    }
    // No text of any chart (labels, ticks, legends, titles) covers another.
    for c in charts {
        let all = texts(c);
        for (i, (s, b)) in all.iter().enumerate() {
            for (s2, b2) in &all[..i] {
                assert!(
                    b.overlap(b2) <= 2.0,
                    "{}: \"{s}\" and \"{s2}\" overlap: {b:?} {b2:?}",
                    c["id"]
                );
            }
        }
    }
    // Two strategies on one spot share one label.
    assert!(
        texts(chart("case-2-scatter"))
            .iter()
            .any(|(s, _)| s == "cork, msgmore"),
        "{:?}",
        texts(chart("case-2-scatter"))
    );
    // The sweep's legend names its strategies.
    let sweep = texts(chart("sweep-1-rtt"));
    for name in ["nagle", "cork", "nagless"] {
        assert!(
            sweep.iter().any(|(s, _)| s == name),
            "sweep legend lacks {name}"
        );
    }
}
