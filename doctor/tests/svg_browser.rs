//! The doctor's SVG as a browser shows it (issue 51: the budget as a picture): the SVG of an
//! ACK-clocked flow with a stall (six causes drawn), captured at the client's end of a 10 ms path (its many
//! exchanges kept: the first 8 and the 8 slowest), inline in a page Debian's headless Chromium
//! lays out. Checked: no page error; each exchange's bar of causes lies inside the drawing,
//! its pieces side by side (none over another) and as long as its time on the drawing's one
//! scale; the labels and the legend cover nothing of each other's; the legend names every
//! cause drawn, once.

use nagless_doctor::analysis::Options;
use serde_json::Value;

/// Per cause rect: its box, cause and row; per text: its box and words.
const CHECK: &str = "<script>(function(){\
var box=function(e){var b=e.getBoundingClientRect();return{x:b.x,y:b.y,w:b.width,h:b.height}};\
var all=function(sel){return Array.prototype.slice.call(document.querySelectorAll(sel))};\
var out={errors:window.pageErrors,svg:box(document.querySelector('svg')),\
causes:all('rect.cause').map(function(r){var b=box(r);b.cause=r.getAttribute('data-cause');return b}),\
texts:all('text.exchange, text.legend').map(function(t){var b=box(t);b.s=t.textContent;return b}),\
legend:all('text.legend').map(function(t){return t.textContent})};\
var pre=document.createElement('pre');pre.id='report-check';pre.textContent=JSON.stringify(out);\
document.body.appendChild(pre);})();</script>";

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} of {v}"))
}

/// Area `a` and `b` share, px².
fn overlap(a: &Value, b: &Value) -> f64 {
    let w = (f(a, "x") + f(a, "w")).min(f(b, "x") + f(b, "w")) - f(a, "x").max(f(b, "x"));
    let h = (f(a, "y") + f(a, "h")).min(f(b, "y") + f(b, "h")) - f(a, "y").max(f(b, "y"));
    w.max(0.0) * h.max(0.0)
}

#[test]
fn each_exchanges_budget_is_drawn_to_scale_in_chromium() {
    let Some(chromium) = nagless_test_support::tool_path("chromium") else {
        nagless_test_support::skip(
            "chromium is not installed (Debian package chromium; ./scripts/test installs it)",
        );
        return;
    };
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clocked/path10ms-client-end.pcap.gz"
    );
    let bytes = std::fs::read(path).unwrap();
    let opts = Options {
        timeline: true,
        ..Options::default()
    };
    let (reader, _) = nagless_doctor::input::decompressed(&bytes[..]).unwrap();
    let d = nagless_doctor::diagnose_reader(reader, opts, |_| {}).unwrap();
    let flow = d.flows.iter().find(|f| f.stall_count > 0).unwrap();
    let exchanges = &flow.budget.exchanges;
    assert_eq!(exchanges.len(), 16, "the first 8 and the 8 slowest");
    let svg = nagless_doctor::report::svg(flow);
    let page =
        format!("<!DOCTYPE html><html><head></head><body style=\"margin:0\">{svg}</body></html>");
    let check = nagless_test_support::browser::check_page(&chromium, &page, CHECK);
    assert_eq!(check["errors"], serde_json::json!([]), "page errors");

    let drawing = &check["svg"];
    let right = f(drawing, "x") + f(drawing, "w");
    let bottom = f(drawing, "y") + f(drawing, "h");
    let causes = check["causes"].as_array().unwrap();
    // Rows by their top.
    let mut rows: Vec<(f64, Vec<&Value>)> = Vec::new();
    for c in causes {
        assert!(f(c, "x") + f(c, "w") <= right + 0.5, "outside: {c}");
        assert!(f(c, "y") + f(c, "h") <= bottom + 0.5, "outside: {c}");
        match rows.iter_mut().find(|r| (r.0 - f(c, "y")).abs() < 0.5) {
            Some(r) => r.1.push(c),
            None => rows.push((f(c, "y"), vec![c])),
        }
    }
    assert_eq!(rows.len(), exchanges.len(), "a bar per exchange");
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    // One scale: each bar's length over its time is the same for all.
    let mut px_per_ms = Vec::new();
    for ((_, pieces), e) in rows.iter().zip(exchanges) {
        for (i, a) in pieces.iter().enumerate() {
            for b in &pieces[i + 1..] {
                assert!(overlap(a, b) < 0.5, "pieces over each other: {a} {b}");
            }
        }
        let len: f64 = pieces.iter().map(|p| f(p, "w")).sum();
        px_per_ms.push(len / e.total_ms);
    }
    let (lo, hi) = px_per_ms
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), v| (l.min(*v), h.max(*v)));
    assert!(hi - lo <= hi * 0.02, "one scale: {px_per_ms:?}");
    // Labels and legend cover nothing of each other's.
    let texts = check["texts"].as_array().unwrap();
    for (i, a) in texts.iter().enumerate() {
        assert!(f(a, "x") + f(a, "w") <= right + 0.5, "text outside: {a}");
        for b in &texts[i + 1..] {
            assert!(overlap(a, b) < 1.0, "texts over each other: {a} {b}");
        }
    }
    // The legend names each cause drawn, once.
    let mut drawn: Vec<&str> = causes
        .iter()
        .map(|c| c["cause"].as_str().unwrap())
        .collect();
    drawn.sort_unstable();
    drawn.dedup();
    let legend: Vec<&str> = check["legend"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(legend.len(), drawn.len(), "{legend:?} for {drawn:?}");
    // (The client's ACK-clocked time is the flow's, out of its round trips: no exchange's.)
    assert!(
        drawn.len() >= 5 && drawn.contains(&"nagle-stall"),
        "{drawn:?}"
    );
}
