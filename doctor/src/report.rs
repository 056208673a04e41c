//! What the doctor prints: a summary for people, JSON (schema in `docs/doctor-json.md`), and
//! an SVG timeline of one flow (segments and ACKs on a time axis, stalls shaded).

use std::fmt::Write as _;

use crate::analysis::{Direction, FlowReport};
use crate::Diagnosis;

/// Version of the JSON schema (2: streaming, summary by service, vantage-aware stalls).
pub(crate) const JSON_SCHEMA_VERSION: u32 = 2;

/// Worst stalls listed per flow in the summary.
const WORST: usize = 5;

/// A readable report: totals, a table per service port, then each kept flow.
pub fn text(d: &Diagnosis) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} frames, {} TCP segments, {} flow(s); {} with Nagle/delayed-ACK stalls: {} stall(s), {:.3} s lost",
        d.frames,
        d.tcp_segments,
        d.flows_total,
        d.flows_with_stalls,
        d.stalls_total,
        d.stalled_s_total,
    );
    if d.flows_ack_clocked > 0 {
        let _ = writeln!(
            out,
            "{} flow(s) ACK-clocked: small writes queued behind Nagle until the peer's ACK of the last segment came (no timer: not a stall)",
            d.flows_ack_clocked
        );
    }
    if d.flows_sender_held > 0 {
        let _ = writeln!(
            out,
            "{} flow(s) whose sender held its own writes ~200 ms: a cork left on (TCP_CORK or MSG_MORE), not Nagle",
            d.flows_sender_held
        );
    }
    // (A cut or damaged capture is warned about on stderr, by the command, once.)
    if !d.unsupported_linktypes.is_empty() {
        let _ = writeln!(
            out,
            "note: frames of link type(s) {:?} were skipped (supported: Ethernet, Linux cooked v1/v2, raw IP, BSD loopback)",
            d.unsupported_linktypes
        );
    }
    // The `clocked` column only where a flow was ACK-clocked.
    let clocked = d.flows_ack_clocked > 0;
    if !d.services.is_empty() {
        let _ = write!(
            out,
            "\n{:>6} {:>8} {:>8} {:>8} {:>10} {:>9} {:>8} {:>6} {:>6}",
            "port", "flows", "stalled", "stalls", "lost s", "worst ms", "delACKs", "RTOs", "0-win"
        );
        let _ = writeln!(out, "{}", if clocked { "  clocked" } else { "" });
        for s in &d.services {
            let _ = write!(
                out,
                "{:>6} {:>8} {:>8} {:>8} {:>10.3} {:>9.1} {:>8} {:>6} {:>6}",
                s.port,
                s.flows,
                s.flows_with_stalls,
                s.stalls,
                s.stalled_s,
                s.worst_stall_ms,
                s.delayed_acks,
                s.retransmission_timeouts,
                s.zero_window_waits
            );
            if clocked {
                let _ = write!(out, " {:>8}", s.flows_ack_clocked);
            }
            out.push('\n');
        }
    }
    if (d.flows.len() as u64) < d.flows_total {
        let listed: u64 = d.flows.iter().map(|f| f.stall_count).sum();
        let _ = writeln!(
            out,
            "\nthe {} flow(s) with the most stalled time; {} more flow(s), with {} more stall(s), not listed (--top N for more):",
            d.flows.len(),
            d.flows_total - d.flows.len() as u64,
            d.stalls_total.saturating_sub(listed)
        );
    }
    for f in &d.flows {
        flow_text(&mut out, f, d.order);
    }
    out
}

fn flow_text(out: &mut String, f: &FlowReport, order: crate::analysis::StallOrder) {
    let [c, s] = &f.sides;
    let _ = writeln!(
        out,
        "\nflow {}: {} -> {} (from frame {} at {:.6} s)",
        f.index, c.addr, s.addr, f.start.frame, f.start.time_s
    );
    let rtt = match f.rtt_ms {
        Some(r) => format!("RTT {r:.1} ms, {}", f.capture_point.describe()),
        None => "RTT unknown".to_string(),
    };
    let _ = writeln!(
        out,
        "  {} packets, {} exchanges over {:.3} s ({rtt}); stalls: {}, stalled {:.3} s ({:.0}% of the flow)",
        f.packets,
        f.exchanges,
        f.duration_s,
        f.stall_count,
        f.stalled_s,
        f.stalled_share * 100.0
    );
    for side in &f.sides {
        let _ = writeln!(
            out,
            "  {:<24} {} data segments, mean payload {:.0} B, {} pure ACKs ({} delayed), {} retransmitted",
            side.addr,
            side.data_segments,
            side.mean_payload,
            side.pure_acks,
            side.delayed_acks,
            side.retransmissions
        );
    }
    // The longest WORST, listed in the order asked for.
    let mut shown: Vec<crate::analysis::Stall> = f.stalls.clone();
    crate::analysis::StallOrder::Delay.sort(&mut shown);
    shown.truncate(WORST);
    order.sort(&mut shown);
    for st in &shown {
        let _ = writeln!(
            out,
            "  stall {:.1} ms, {}: {} held {} B (frame {} at {:.6} s) until the ACK in frame {} at {:.6} s; previous write frame {} at {:.6} s",
            st.stalled_us as f64 / 1000.0,
            st.direction,
            st.sender,
            st.held_len,
            st.held.frame,
            st.held.time_s,
            st.ack.frame,
            st.ack.time_s,
            st.previous.frame,
            st.previous.time_s,
        );
    }
    let shown = f.stalls.len().min(WORST) as u64;
    if f.stall_count > shown {
        let _ = writeln!(
            out,
            "  ... and {} more stall(s) in this flow (--json --every-stall lists each)",
            f.stall_count - shown
        );
    }
    for c in &f.ack_clocked {
        if let Some(first) = c.first.first() {
            let _ = writeln!(
                out,
                "  clocked, {}: {} sent frame {} at {:.6} s {} µs after the ACK in frame {} at {:.6} s (the first of {})",
                c.direction,
                c.sender,
                first.segment.frame,
                first.segment.time_s,
                ((first.segment.time_s - first.ack.time_s) * 1e6).round(),
                first.ack.frame,
                first.ack.time_s,
                c.clocked
            );
        }
    }
    budget_text(out, f);
    for v in &f.verdict {
        let _ = writeln!(out, "  => {v}");
    }
}

/// Causes in a line of the budget: the largest, each 1% of the time or more; the rest
/// summed up.
const CAUSES_SHOWN: usize = 6;
const CAUSE_SHARE_SHOWN: f64 = 0.01;

/// Where the flow's time went, and its slowest exchange's.
fn budget_text(out: &mut String, f: &FlowReport) {
    let line = |causes: &[crate::analysis::Spent]| {
        let shown = causes
            .iter()
            .take(CAUSES_SHOWN)
            .take_while(|s| s.share >= CAUSE_SHARE_SHOWN)
            .count()
            .max(1);
        let mut parts: Vec<String> = causes[..shown]
            .iter()
            .map(|s| {
                let side = s.side.map(|x| format!(" ({x})")).unwrap_or_default();
                format!(
                    "{}{side} {:.1} ms ({:.0}%)",
                    s.cause.describe(),
                    s.ms,
                    s.share * 100.0
                )
            })
            .collect();
        if causes.len() > shown {
            let rest: f64 = causes[shown..].iter().map(|s| s.ms).sum();
            parts.push(format!("other {rest:.1} ms"));
        }
        parts.join(", ")
    };
    let b = &f.budget;
    if b.causes.is_empty() {
        return;
    }
    let _ = writeln!(out, "  time: {}", line(&b.causes));
    if f.exchanges > 1 {
        if let Some(e) = b
            .exchanges
            .iter()
            .filter(|e| e.index > 0)
            .max_by(|a, b| a.total_ms.total_cmp(&b.total_ms))
        {
            let _ = writeln!(
                out,
                "  slowest exchange, #{} (frame {}): {:.1} ms: {}",
                e.index,
                e.start.frame,
                e.total_ms,
                line(&e.causes)
            );
        }
    }
}

/// The JSON document: the [`Diagnosis`] with the schema version and the tool's name.
pub fn json(d: &Diagnosis) -> serde_json::Value {
    let mut doc = serde_json::to_value(d).unwrap_or_default();
    doc["schema"] = JSON_SCHEMA_VERSION.into();
    doc["tool"] = format!("nagless-doctor {}", env!("CARGO_PKG_VERSION")).into();
    doc
}

/// An SVG timeline of `f`: client segments above the axis, server segments below, data as
/// bars (height by payload), pure ACKs as ticks, stalls shaded from the previous write to the
/// held one.
pub fn svg(f: &FlowReport) -> String {
    const W: f64 = 1000.0;
    const H: f64 = 280.0;
    const LEFT: f64 = 60.0;
    const MID: f64 = 130.0;
    let end_us = f.timeline.last().map_or(1, |t| t.us).max(1) as f64;
    let start_us = f.timeline.first().map_or(0, |t| t.us) as f64;
    let span = (end_us - start_us).max(1.0);
    let x = |us: f64| LEFT + (us - start_us) / span * (W - LEFT - 20.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(out, r##"<rect width="{W}" height="{H}" fill="white"/>"##);
    let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;");
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
    out += "</svg>\n";
    out
}
