//! What the doctor prints: a summary for people, JSON (schema in `docs/doctor-json.md`), and
//! an SVG of one flow (`svg`: segments and ACKs on a time axis, stalls shaded, and where the
//! time of its exchanges went).

use std::fmt::Write as _;

use crate::analysis::{Cause, FlowReport};
use crate::Diagnosis;

mod svg;

pub use svg::svg;

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
    if d.capture_copies > 0 {
        let _ = writeln!(
            out,
            "note: {} frame(s) are copies of a packet before them (the same IPv4 number, or over IPv6 the same timestamps, and header: captured twice, on a mirror port or two interfaces), each read once",
            d.capture_copies
        );
    }
    if d.tcp_fragments > 0 {
        let _ = writeln!(
            out,
            "note: {} frame(s) are fragments of IP packets carrying TCP, which the doctor does not reassemble: their bytes are missing from the flows",
            d.tcp_fragments
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
    let rtt = match (f.rtt_ms, f.far_rtt_ms) {
        (Some(r), Some(far)) => format!(
            "RTT {far:.1} ms to the far end by the handshake, {r:.1} ms to a NAT or proxy that acknowledges for it"
        ),
        (Some(r), None) => format!("RTT {r:.1} ms, {}", f.capture_point.describe()),
        (None, _) => "RTT unknown".to_string(),
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

/// Causes in a line of the budget: the largest, each 1% of the time or more, and the largest
/// but idle time (which the verdict weighs with idle left out); the rest summed up.
const CAUSES_SHOWN: usize = 6;
const CAUSE_SHARE_SHOWN: f64 = 0.01;

/// Where the flow's time went, and its slowest exchange's.
fn budget_text(out: &mut String, f: &FlowReport) {
    let line = |causes: &[crate::analysis::Spent]| {
        let mut shown: Vec<&crate::analysis::Spent> = causes
            .iter()
            .take(CAUSES_SHOWN)
            .take_while(|s| s.share >= CAUSE_SHARE_SHOWN)
            .collect();
        if let Some(s) = causes.iter().find(|s| s.cause != Cause::Idle) {
            if !shown.iter().any(|x| std::ptr::eq(*x, s)) {
                shown.push(s);
            }
        }
        if shown.is_empty() {
            shown.extend(causes.first());
        }
        let mut parts: Vec<String> = shown
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
        if causes.len() > shown.len() {
            let rest: f64 =
                causes.iter().map(|s| s.ms).sum::<f64>() - shown.iter().map(|s| s.ms).sum::<f64>();
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

#[cfg(test)]
mod tests {
    use crate::packet::{flags, Segment};
    use std::net::{IpAddr, Ipv4Addr};

    /// A flow idle for minutes between two questions the server takes 30 ms to answer: its
    /// think time is under 1 % of the whole, but it is what the verdict names (idle left
    /// out), so the time line shows it too.
    #[test]
    fn the_time_line_shows_the_cause_the_verdict_names_however_small() {
        let (c, s) = (
            (IpAddr::V4(Ipv4Addr::LOCALHOST), 40000),
            (IpAddr::V4(Ipv4Addr::LOCALHOST), 8000),
        );
        let mut frames = Vec::new();
        let mut seq = [1000u32, 5000];
        let mut push = |ms: f64, from: usize, len: u32, fl: u8| {
            let (src, dst) = if from == 0 { (c, s) } else { (s, c) };
            let seg = Segment {
                src,
                dst,
                seq: seq[from],
                ack: seq[1 - from],
                flags: fl,
                len,
                mss: (fl & flags::SYN != 0).then_some(1460),
                window: 1000,
                wscale: None,
                opt_len: 0,
                sack: false,
                sack_first: None,
                ts: None,
                ttl: 64,
                ip_id: None,
                head: Default::default(),
            };
            seq[from] = seq[from].wrapping_add(len.max(u32::from(fl & flags::SYN != 0)));
            frames.push((frames.len() as u64 + 1, (ms * 1000.0) as u64, seg));
        };
        push(0.0, 0, 0, flags::SYN);
        push(0.1, 1, 0, flags::SYN | flags::ACK);
        push(0.2, 0, 0, flags::ACK);
        for start in [1.0, 300_000.0, 600_000.0] {
            push(start, 0, 100, flags::ACK);
            push(start + 30.0, 1, 100, flags::ACK);
            push(start + 30.1, 0, 0, flags::ACK);
        }
        let mut a = crate::analysis::Analyzer::new(Default::default());
        for (frame, us, seg) in &frames {
            a.push(*frame, *us, seg);
        }
        let d = crate::Diagnosis {
            order: Default::default(),
            frames: frames.len() as u64,
            tcp_segments: frames.len() as u64,
            tcp_fragments: 0,
            bytes: 0,
            start_unix_s: None,
            unsupported_linktypes: Vec::new(),
            damage: None,
            outcome: a.finish(),
        };
        let text = super::text(&d);
        let line = text.lines().find(|l| l.contains("time: ")).unwrap();
        assert!(line.contains("think time (server)"), "{text}");
        let verdict = text.lines().find(|l| l.contains("=> ")).unwrap();
        assert!(verdict.contains("think time"), "{text}");
    }
}
