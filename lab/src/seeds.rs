//! `nagless lab --seeds`: each source case with the figures its text reports beside ours.
//!
//! The source texts (`../shared/seeds/`) measured other machines, kernels and paths; the
//! comparison is of shape (who stalls, by what factor), not of absolute numbers.

use crate::harness::Path;
use crate::scenario::{Case, Credit};
use crate::{Row, Scale, Strategy, Table};

/// The cases `--seeds` runs: each source's headline case.
pub fn cases(scale: Scale) -> Vec<(Case, Path)> {
    let lo = Path::LOOPBACK;
    let eth = Path::mss(1448);
    let quick = scale == Scale::Quick;
    let mut v = vec![(
        Case::BgpBurst {
            routes: 255,
            sessions: if quick { 5 } else { 20 },
        },
        lo,
    )];
    for window in [4096, 4098] {
        v.push((
            Case::FramedWindow {
                total: 30 * 1024 * 1024,
                message: 4098,
                window,
                credit: Credit::HalfWindow,
            },
            lo,
        ));
    }
    for depth in [1, 2, 10] {
        v.push((
            Case::PipelinedRead {
                total: if quick { 4 } else { 32 } * 1024 * 1024,
                block: 8192,
                depth,
            },
            lo,
        ));
    }
    v.push((
        Case::SplitWrite {
            k: 1000,
            rounds: 10,
        },
        eth,
    ));
    v.push((Case::HttpKeepalive { conns: 10 }, lo));
    v
}

/// A path like the source texts describe, on the emulated link: a LAN (0.5 ms, 100 Mbit/s;
/// seeds 003 and 004 measured between machines) and a 30 ms wide-area path (seed 000 notes
/// that the BGP delay grows with distance).
pub fn link(rtt_us: u64) -> crate::harness::Link {
    crate::harness::Link {
        rtt_us,
        rate_bps: Some(100_000_000),
        mtu: 1500,
        loss_ppm: 0,
        queue_bytes: None,
        seed: 1,
        peer_ack_delay_us: None,
    }
}

/// The cases `--seeds` runs on emulated paths (root only), beside the loopback ones.
pub fn path_cases(scale: Scale) -> Vec<(Case, Path)> {
    let on = |rtt_us| Path {
        mss: None,
        link: Some(link(rtt_us)),
    };
    let quick = scale == Scale::Quick;
    let bgp = Case::BgpBurst {
        routes: 255,
        sessions: if quick { 3 } else { 10 },
    };
    vec![
        (bgp.clone(), on(500)),
        (bgp, on(30_000)),
        (
            Case::SplitWrite {
                k: 1000,
                rounds: 10,
            },
            on(500),
        ),
        (Case::HttpKeepalive { conns: 10 }, on(500)),
    ]
}

fn find(tables: &[Table], f: impl Fn(&Case) -> bool) -> Option<&Table> {
    tables.iter().find(|t| f(&t.case) && t.path.link.is_none())
}

/// Every table of a case, loopback first, then each emulated path.
fn find_all(tables: &[Table], f: impl Fn(&Case) -> bool) -> Vec<&Table> {
    tables.iter().filter(|t| f(&t.case)).collect()
}

fn row(t: &Table, s: Strategy) -> Option<&Row> {
    t.rows.iter().find(|r| r.strategy == s && r.runs > 0)
}

fn ms(us: f64) -> String {
    crate::report::fmt_us(us)
}

/// Lines of the seeds report: source, what its text reports, what we measured.
pub fn report(tables: &[Table]) -> String {
    let mut out = String::from("\n== Source cases: their figures beside ours\n");
    let mut line = |src: &str, theirs: &str, ours: String| {
        out.push_str(&format!("\n{src}\n  text: {theirs}\n  lab:  {ours}\n"));
    };
    for t in find_all(tables, |c| matches!(c, Case::BgpBurst { .. })) {
        let g = |s| row(t, s).map(|r| (r.p50_us.median, r.segs_per_exchange.median));
        if let (Some(n), Some(d), Some(x)) = (
            g(Strategy::Nagle),
            g(Strategy::Nodelay),
            g(Strategy::Nagless),
        ) {
            line(
                &format!("000 BIRD BGP, 255 routes (bgp-burst, {})", t.path.label()),
                "UPDATE left 0.206955 s after SYN without NODELAY, 0.007478 s with it (~28x); NODELAY adds packets",
                format!(
                    "connect to End-of-RIB: nagle {}, nodelay {} ({:.0}x faster), nagless {} ({:.0}x); data segments per session: nagle {:.1}, nodelay {:.1}, nagless {:.1}",
                    ms(n.0), ms(d.0), n.0 / d.0.max(1.0), ms(x.0), n.0 / x.0.max(1.0), n.1, d.1, x.1
                ),
            );
        }
    }
    let fw = |w: usize| {
        find(
            tables,
            move |c| matches!(c, Case::FramedWindow { window, .. } if *window == w),
        )
    };
    if let (Some(tiny), Some(aligned)) = (fw(4096), fw(4098)) {
        let tp = |t: &Table, s| row(t, s).map(|r| r.throughput.median);
        if let (Some(a), Some(n), Some(x)) = (
            tp(aligned, Strategy::Nagle),
            tp(tiny, Strategy::Nagle),
            tp(tiny, Strategy::Nagless),
        ) {
            line(
                "001 BEEP tiny fragment (framed-window, 4098 B messages, loopback)",
                "8192 operations in ~2 s with a window >= the message; ~10 in the same time with a 4096 B window (40 ms per message)",
                format!(
                    "nagle: aligned window {a:.0} msg/s, tiny-tail window {n:.0} msg/s ({:.0}x collapse); nagless on the tiny-tail window {x:.0} msg/s (full recovery: {:.2}x of aligned)",
                    a / n.max(1e-9), x / a.max(1e-9)
                ),
            );
        }
    }
    let pr = |d: usize| {
        find(
            tables,
            move |c| matches!(c, Case::PipelinedRead { depth, .. } if *depth == d),
        )
    };
    if let (Some(d1), Some(d2), Some(d10)) = (pr(1), pr(2), pr(10)) {
        let tp = |t: &Table, s| row(t, s).map(|r| r.throughput.median).unwrap_or(0.0);
        line(
            "002 OpenSSH sftp (pipelined-read, 8 KiB requests, loopback)",
            "one request at a time is slow; NODELAY or one overlapping request fixes it; on loopback NODELAY wins unless ~10 requests overlap",
            format!(
                "MB/s at depth 1/2/10: nagle {:.1}/{:.1}/{:.1}, nodelay {:.0}/{:.0}/{:.0}, nagless {:.0}/{:.0}/{:.0}",
                tp(d1, Strategy::Nagle), tp(d2, Strategy::Nagle), tp(d10, Strategy::Nagle),
                tp(d1, Strategy::Nodelay), tp(d2, Strategy::Nodelay), tp(d10, Strategy::Nodelay),
                tp(d1, Strategy::Nagless), tp(d2, Strategy::Nagless), tp(d10, Strategy::Nagless),
            ),
        );
    }
    for t in find_all(tables, |c| matches!(c, Case::SplitWrite { k: 1000, .. })) {
        let g = |s| row(t, s).map(|r| (r.p50_us.median, r.wire_bytes_per_exchange.median));
        if let (Some(n), Some(d), Some(c), Some(m), Some(x)) = (
            g(Strategy::Nagle),
            g(Strategy::Nodelay),
            g(Strategy::Cork),
            g(Strategy::Msgmore),
            g(Strategy::Nagless),
        ) {
            line(
                &format!("003 K-way split write (split-write K=1000, {})", t.path.label()),
                "NODELAY is fast but puts ~15x the default's bytes on the wire; CORK is slow; NODELAY+MSG_MORE wins on time and bytes",
                format!(
                    "round trip / wire bytes: nagle {} / {:.0}, nodelay {} / {:.0} ({:.1}x nagle's bytes), cork {} / {:.0}, msgmore {} / {:.0}, nagless {} / {:.0}",
                    ms(n.0), n.1, ms(d.0), d.1, d.1 / n.1.max(1.0), ms(c.0), c.1, ms(m.0), m.1, ms(x.0), x.1
                ),
            );
        }
    }
    for t in find_all(tables, |c| matches!(c, Case::HttpKeepalive { .. })) {
        let tp = |s| row(t, s).map(|r| r.throughput.median);
        if let (Some(n), Some(c), Some(x)) = (
            tp(Strategy::Nagle),
            tp(Strategy::Cork),
            tp(Strategy::Nagless),
        ) {
            line(
                &format!(
                    "004 Puma on JRuby, small keep-alive HTTP (http-keepalive C=10, {})",
                    t.path.label()
                ),
                "wrk, 10 connections: 1,405 requests/s without TCP_CORK, 12,245 with it (~8.7x)",
                format!(
                    "nagle {n:.0} req/s, cork {c:.0} req/s ({:.0}x), nagless {x:.0} req/s ({:.0}x)",
                    c / n.max(1e-9),
                    x / n.max(1e-9)
                ),
            );
        }
    }
    out
}
