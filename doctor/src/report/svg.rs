//! The doctor's SVG of one flow: its timeline, and where the time of its exchanges went.

use std::fmt::Write as _;

use crate::analysis::{Cause, Direction, FlowReport};

/// An SVG of `f`: its timeline (client segments above the axis, server segments below, data
/// as bars (height by payload), pure ACKs as ticks, stalls shaded from the previous write to
/// the held one), then where the time of each exchange kept went (`waterfall`).
pub fn svg(f: &FlowReport) -> String {
    const H: f64 = 280.0;
    const LEFT: f64 = 60.0;
    const MID: f64 = 130.0;
    let end_us = f.timeline.last().map_or(1, |t| t.us).max(1) as f64;
    let start_us = f.timeline.first().map_or(0, |t| t.us) as f64;
    let span = (end_us - start_us).max(1.0);
    let x = |us: f64| LEFT + (us - start_us) / span * (W - LEFT - 20.0);
    let mut out = String::new();
    let (budget, bottom) = waterfall(f, H + 10.0);
    let total_h = bottom.max(H);
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{total_h}" viewBox="0 0 {W} {total_h}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(
        out,
        r##"<rect width="{W}" height="{total_h}" fill="white"/>"##
    );
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="16" font-size="13">flow {}: {} stalls, {:.1} ms stalled ({:.0}%)</text>"##,
        f.index,
        f.stall_count,
        f.stalled_s * 1000.0,
        f.stalled_share * 100.0
    );
    // Each stall shaded from the write Nagle waited on to the held one, outlined, and kept a
    // pixel short of its neighbour so that two back to back read as two; their numbers (in
    // capture order) name them in the hover text and above the band.
    let mut order: Vec<&crate::analysis::Stall> = f.stalls.iter().collect();
    order.sort_by_key(|st| st.held.frame);
    for (i, st) in order.iter().enumerate() {
        let x0 = x(st.previous.time_s * 1e6);
        let x1 = x(st.held.time_s * 1e6);
        let _ = writeln!(
            out,
            r##"<rect x="{x0:.1}" y="30" width="{:.1}" height="200" fill="#f4a6a6" opacity="0.5" stroke="#c33" stroke-width="0.5"><title>stall {} ({}): {:.1} ms, frames {}-{}</title></rect>"##,
            (x1 - x0 - 1.0).max(1.0),
            i + 1,
            st.direction,
            st.stalled_us as f64 / 1000.0,
            st.previous.frame,
            st.held.frame
        );
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="40" font-size="9" fill="#c33">{}</text>"##,
            x0 + 1.0,
            i + 1
        );
    }
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{MID}" x2="{}" y2="{MID}" stroke="#444"/>"##,
        W - 20.0
    );
    let _ = writeln!(
        out,
        r##"<text x="4" y="{}">{}</text>"##,
        MID - 60.0,
        esc("client")
    );
    let _ = writeln!(
        out,
        r##"<text x="4" y="{}">{}</text>"##,
        MID + 70.0,
        esc("server")
    );
    let _ = writeln!(
        out,
        r##"<text x="4" y="{}" font-size="9">{}</text><text x="4" y="{}" font-size="9">{}</text>"##,
        MID - 46.0,
        esc(&f.sides[0].addr),
        MID + 84.0,
        esc(&f.sides[1].addr)
    );
    for p in &f.timeline {
        let px = x(p.us as f64);
        let client = p.sender == Direction::Client;
        let sign = if client { -1.0 } else { 1.0 };
        let (h, color) = if p.len > 0 {
            (
                12.0 + (p.len as f64).log2() * 5.0,
                if client { "#1f77b4" } else { "#2ca02c" },
            )
        } else if p.pure_ack {
            (8.0, "#999")
        } else {
            (20.0, "#000")
        };
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{MID}" x2="{px:.1}" y2="{:.1}" stroke="{color}" stroke-width="1.5"/>"##,
            MID + sign * h
        );
    }
    for i in 0..=5 {
        let us = start_us + span * i as f64 / 5.0;
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="250" text-anchor="middle">{:.1} ms</text>"##,
            x(us),
            (us - start_us) / 1000.0
        );
    }
    // The legend: what each mark is.
    let legend = [
        ("#1f77b4", "client data (height: size)"),
        ("#2ca02c", "server data"),
        ("#999", "pure ACK"),
        ("#000", "SYN, FIN or RST"),
        (
            "#f4a6a6",
            "stall: from the write Nagle waited on to the held one (hover for frames)",
        ),
    ];
    let mut lx = LEFT;
    for (color, what) in legend {
        let _ = writeln!(
            out,
            r##"<rect x="{lx:.1}" y="{}" width="10" height="8" fill="{color}"/><text x="{:.1}" y="{}" font-size="9">{}</text>"##,
            H - 4.0 - 8.0,
            lx + 13.0,
            H - 4.0,
            esc(what)
        );
        lx += 13.0 + 5.2 * what.len() as f64 + 14.0;
    }
    out += &budget;
    out += "</svg>\n";
    out
}

/// Width of the drawing, px.
const W: f64 = 1000.0;
/// Where the bars of the waterfall begin (their labels to the left), px.
const BARS_LEFT: f64 = 130.0;
/// A bar's height and the distance between bars, px.
const BAR_H: f64 = 11.0;
const ROW_H: f64 = 16.0;
/// Pixels a character of the legend's 9 px text takes, at most (an estimate, checked in a
/// browser by `doctor/tests/svg_browser.rs`).
const LEGEND_CHAR: f64 = 5.6;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;")
}

/// Each cause's colour.
fn color(c: Cause) -> &'static str {
    match c {
        Cause::NagleStall => "#d62728",
        Cause::AckClocked => "#ff7f0e",
        Cause::SenderHold => "#e377c2",
        Cause::RoundTrip => "#7f7f7f",
        Cause::Transfer => "#17becf",
        Cause::LossRecovery => "#8c564b",
        Cause::ZeroWindow => "#9467bd",
        Cause::ReceiveWindow => "#bcbd22",
        Cause::CongestionWindow => "#dbdb8d",
        Cause::DelayedAck => "#ff9896",
        Cause::Think => "#1f77b4",
        Cause::Idle => "#c7c7c7",
        Cause::Unknown => "#e8e8e8",
    }
}

/// Where the time of each exchange kept went, from `top` (px): a bar per exchange, its
/// causes in turn (most time first), all bars to one scale (the slowest exchange's), its
/// number and time to its left; a legend of the causes drawn. Returns the SVG and where it
/// ends (px).
fn waterfall(f: &FlowReport, top: f64) -> (String, f64) {
    let mut out = String::new();
    let ex = &f.budget.exchanges;
    if ex.is_empty() {
        return (out, 0.0);
    }
    let _ = writeln!(
        out,
        r##"<text x="4" y="{:.1}" font-size="13">where the time went, per exchange (the first 8, and the 8 slowest; hover for each cause)</text>"##,
        top + 14.0
    );
    let scale = ex.iter().map(|e| e.total_ms).fold(0.0, f64::max).max(1e-3);
    let width = W - BARS_LEFT - 20.0;
    let mut used: Vec<Cause> = Vec::new();
    let mut y = top + 24.0;
    for e in ex {
        let name = if e.index == 0 {
            "setup".to_string()
        } else {
            format!("#{}", e.index)
        };
        let _ = writeln!(
            out,
            r##"<text class="exchange" x="4" y="{:.1}" font-size="10">{} {:.1} ms</text>"##,
            y + BAR_H - 2.0,
            esc(&name),
            e.total_ms
        );
        let mut x = BARS_LEFT;
        for s in &e.causes {
            let w = s.ms / scale * width;
            let side = s.side.map(|x| format!(" ({x})")).unwrap_or_default();
            let _ = writeln!(
                out,
                r##"<rect class="cause" data-cause="{}" x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{BAR_H}" fill="{}" stroke="#fff" stroke-width="0.3"><title>{} {}{side}: {:.1} ms ({:.0}% of the exchange)</title></rect>"##,
                s.cause.name(),
                color(s.cause),
                esc(&name),
                s.cause.describe(),
                s.ms,
                s.share * 100.0
            );
            x += w;
            if !used.contains(&s.cause) {
                used.push(s.cause);
            }
        }
        y += ROW_H;
    }
    // The legend, wrapped at the drawing's width.
    used.sort();
    let (mut lx, mut ly) = (BARS_LEFT, y + 8.0);
    for c in used {
        let what = c.describe();
        let w = 13.0 + LEGEND_CHAR * what.len() as f64 + 14.0;
        if lx + w > W - 10.0 {
            lx = BARS_LEFT;
            ly += 14.0;
        }
        let _ = writeln!(
            out,
            r##"<rect class="legend" x="{lx:.1}" y="{:.1}" width="10" height="8" fill="{}" stroke="#999" stroke-width="0.3"/><text class="legend" x="{:.1}" y="{ly:.1}" font-size="9">{}</text>"##,
            ly - 8.0,
            color(c),
            lx + 13.0,
            esc(what)
        );
        lx += w;
    }
    (out, ly + 8.0)
}
