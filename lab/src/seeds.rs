//! `nagless lab --seeds`: each source case with the figures its text reports beside ours.
//!
//! The source texts (`../shared/seeds/`) measured other machines, kernels and paths; the
//! comparison is of shape (who stalls, by what factor), not of absolute numbers.

use crate::harness::Path;
use crate::scenario::{Case, Credit};
use crate::{Row, Scale, Strategy, Table};

/// Source 000's peer: a host whose delayed-ACK timer is 200 ms (the text's UPDATE left
/// 207 ms after SYN; Linux's timer would have held it about 40 ms).
pub(crate) const BIRD_PEER_ACK_DELAY_US: u64 = 200_000;

/// Source 000's path: its UPDATE left 7.478 ms after SYN with NODELAY, two round trips
/// (the handshake, then OPEN and KEEPALIVE each way) of about 3.7 ms.
pub(crate) const BIRD_RTT_US: u64 = 3_700;

/// Source 004's application time per request: with TCP_CORK nothing stalled and wrk's mean
/// latency was 352 µs, the time the server took to answer.
pub(crate) const PUMA_WORK_US: u64 = 350;

/// Source 000's BGP session as BIRD sent it: 255 routes with the same attributes, packed
/// into one UPDATE, then End-of-RIB.
fn bird(sessions: usize) -> Case {
    Case::BgpBurst {
        routes: 255,
        per_update: 255,
        sessions,
    }
}

/// The cases `--seeds` runs on loopback: each source's headline case.
pub fn cases(scale: Scale) -> Vec<(Case, Path)> {
    let lo = Path::LOOPBACK;
    let eth = Path::mss(1448);
    let quick = scale == Scale::Quick;
    let mut v = vec![(bird(if quick { 5 } else { 20 }), lo)];
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
    // The text moved a whole tarball: a few late ACKs per connection are amortised over
    // 32 MiB, as they were over its file, even on --quick (at depth 10 that is ~0.1 s).
    for depth in [1, 2, 10] {
        v.push((
            Case::PipelinedRead {
                total: 32 * 1024 * 1024,
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
    for work_us in [0, PUMA_WORK_US] {
        v.push((Case::HttpWrk { conns: 10, work_us }, lo));
    }
    v
}

/// A path like the source texts describe, on the emulated link: a LAN (0.5 ms, 100 Mbit/s;
/// seeds 003 and 004 measured between machines) and a 30 ms wide-area path (seed 000 notes
/// that the BGP delay grows with distance).
pub(crate) fn link(rtt_us: u64) -> crate::harness::Link {
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

/// The cases `--seeds` runs on emulated paths (root only), beside the loopback ones: BIRD's
/// session in its text's conditions (a 3.7 ms path to a peer with a 200 ms timer), against a
/// Linux peer on the same path and on a 30 ms one, and the K-way split on a LAN.
pub fn path_cases(scale: Scale) -> Vec<(Case, Path)> {
    let on = |link| Path {
        mss: None,
        link: Some(link),
    };
    let quick = scale == Scale::Quick;
    let bgp = bird(if quick { 3 } else { 10 });
    vec![
        (
            bgp.clone(),
            on(crate::harness::Link {
                peer_ack_delay_us: Some(BIRD_PEER_ACK_DELAY_US),
                ..link(BIRD_RTT_US)
            }),
        ),
        (bgp.clone(), on(link(BIRD_RTT_US))),
        (bgp, on(link(30_000))),
        (
            Case::SplitWrite {
                k: 1000,
                rounds: 10,
            },
            on(link(500)),
        ),
    ]
}

/// One source case's figure beside the lab's, for the same quantity in the text's
/// conditions.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Verdict {
    /// The source (`000` .. `004`).
    pub(crate) seed: &'static str,
    /// The quantity compared.
    pub(crate) quantity: &'static str,
    /// The text's figure.
    pub(crate) theirs: f64,
    /// The lab's figure, from the table named by `table`.
    pub(crate) ours: f64,
    /// `ours / theirs`.
    pub(crate) ratio: f64,
    /// Whether the lab's figure is within 3x of the text's either way.
    pub(crate) within_3x: bool,
    /// The table the figure comes from (scenario, parameters, path).
    pub(crate) table: String,
    /// The text's own fix.
    pub(crate) their_fix: Strategy,
    /// nagless beside that fix in the same table: faster (p50 or throughput, by more than
    /// 5 %) or fewer data segments per exchange (by more than 0.05), or level with it on
    /// both.
    pub(crate) nagless_holds_against_fix: bool,
    /// nagless and the fix, as a reader compares them.
    pub(crate) versus_fix: String,
}

fn table_name(t: &Table) -> String {
    format!("{} {} [{}]", t.scenario, t.params, t.path.label())
}

/// nagless against `fix` in `t`: time (p50, or throughput where the case is open-ended)
/// and data segments per exchange.
fn against_fix(t: &Table, fix: Strategy, by_throughput: bool) -> Option<(bool, String)> {
    let (x, f) = (row(t, Strategy::Nagless)?, row(t, fix)?);
    // Faster by more than 5 %; fewer by more than 0.05 segments per exchange.
    let faster = if by_throughput {
        x.throughput.median > 1.05 * f.throughput.median
    } else {
        x.p50_us.median * 1.05 < f.p50_us.median
    };
    let fewer = x.segs_per_exchange.median < f.segs_per_exchange.median - 0.05;
    let as_few = x.segs_per_exchange.median <= f.segs_per_exchange.median + 0.05;
    let as_fast = if by_throughput {
        x.throughput.median >= 0.95 * f.throughput.median
    } else {
        x.p50_us.median <= 1.05 * f.p50_us.median
    };
    let time = if by_throughput {
        format!(
            "{:.0} against {:.0} {}",
            x.throughput.median, f.throughput.median, t.unit
        )
    } else {
        format!(
            "p50 {} against {}",
            ms(x.p50_us.median),
            ms(f.p50_us.median)
        )
    };
    Some((
        faster || fewer || (as_fast && as_few),
        format!(
            "nagless {time}, {:.2} against {:.2} data segments per exchange ({})",
            x.segs_per_exchange.median,
            f.segs_per_exchange.median,
            match (faster, fewer) {
                (true, true) => "faster and fewer",
                (true, false) => "faster",
                (false, true) => "fewer segments",
                (false, false) if as_fast && as_few => "level",
                (false, false) => "not better",
            }
        ),
    ))
}

#[allow(clippy::too_many_arguments)]
fn verdict(
    seed: &'static str,
    quantity: &'static str,
    theirs: f64,
    ours: f64,
    t: &Table,
    their_fix: Strategy,
    by_throughput: bool,
) -> Option<Verdict> {
    let (nagless_holds_against_fix, versus_fix) = against_fix(t, their_fix, by_throughput)?;
    let ratio = ours / theirs;
    Some(Verdict {
        seed,
        quantity,
        theirs,
        ours,
        ratio,
        within_3x: (1.0 / 3.0..=3.0).contains(&ratio),
        table: table_name(t),
        their_fix,
        nagless_holds_against_fix,
        versus_fix,
    })
}

fn is_bird(c: &Case) -> bool {
    matches!(
        c,
        Case::BgpBurst {
            per_update: 255,
            ..
        }
    )
}

/// The text's conditions for source 000: the peer with a 200 ms timer.
fn bird_conditions(t: &Table) -> bool {
    is_bird(&t.case)
        && t.path
            .link
            .is_some_and(|l| l.peer_ack_delay_us == Some(BIRD_PEER_ACK_DELAY_US))
}

/// Each source's verdict, computed from the tables of a `--seeds` run (a source whose
/// tables are missing, such as 000's emulated path without root, has none).
pub(crate) fn verdicts(tables: &[Table]) -> Vec<Verdict> {
    let mut v = Vec::new();
    let p50 = |t: &Table, s| row(t, s).map(|r| r.p50_us.median);
    let tput = |t: &Table, s| row(t, s).map(|r| r.throughput.median);
    // 000: SYN to UPDATE, without NODELAY over with it: 0.206955 s / 0.007478 s.
    if let Some(t) = tables.iter().find(|t| bird_conditions(t)) {
        if let (Some(n), Some(d)) = (p50(t, Strategy::Nagle), p50(t, Strategy::Nodelay)) {
            v.extend(verdict(
                "000",
                "SYN to UPDATE, without NODELAY / with NODELAY",
                0.206955 / 0.007478,
                n / d.max(1.0),
                t,
                Strategy::Nodelay,
                false,
            ));
        }
    }
    // 001: time per message through the misaligned window, "delays of 40 ms on each message".
    let fw = |w| framed_window(tables, w);
    if let Some(t) = fw(4096) {
        if let Some(n) = tput(t, Strategy::Nagle) {
            v.extend(verdict(
                "001",
                "ms per 4098 B message through a 4096 B window, without NODELAY",
                40.0,
                1000.0 / n.max(1e-9),
                t,
                Strategy::Nodelay,
                true,
            ));
        }
    }
    // 002: "increasing the number of overlapping requests to something large (10) achieves
    // almost the same performance as with TCP_NODELAY. With TCP_NODELAY, overlapping requests
    // does not make a noticeable difference": depth 10 without NODELAY over depth 10 with it,
    // ~1 (the same depth on both sides: a busy machine slows both alike).
    if let Some(d10) = pipelined_read(tables, 10) {
        if let (Some(n10), Some(d)) = (tput(d10, Strategy::Nagle), tput(d10, Strategy::Nodelay)) {
            v.extend(verdict(
                "002",
                "MB/s of 10 overlapping requests, without NODELAY / with NODELAY",
                1.0,
                n10 / d.max(1e-9),
                d10,
                Strategy::Nodelay,
                true,
            ));
        }
    }
    // 003: NODELAY's wire bytes over the default's at K = 1000, "about 15 times", measured
    // between two VMs (the LAN path when there is one).
    let split = |lan: bool| {
        tables.iter().find(|t| {
            matches!(t.case, Case::SplitWrite { k: 1000, .. }) && t.path.link.is_some() == lan
        })
    };
    if let Some(t) = split(true).or_else(|| split(false)) {
        let wb = |s| row(t, s).map(|r| r.wire_bytes_per_exchange.median);
        if let (Some(n), Some(d)) = (wb(Strategy::Nagle), wb(Strategy::Nodelay)) {
            v.extend(verdict(
                "003",
                "wire bytes at K = 1000, NODELAY / default",
                15.0,
                d / n.max(1.0),
                t,
                Strategy::Msgmore,
                false,
            ));
        }
    }
    // 004: requests/s with TCP_CORK over without: 12,245 / 1,405.
    let puma = tables.iter().find(|t| {
        matches!(t.case, Case::HttpWrk { work_us, .. } if work_us == PUMA_WORK_US)
            && t.path.link.is_none()
    });
    if let Some(t) = puma {
        if let (Some(n), Some(c)) = (tput(t, Strategy::Nagle), tput(t, Strategy::Cork)) {
            v.extend(verdict(
                "004",
                "requests/s with TCP_CORK / without",
                12_245.0 / 1_405.0,
                c / n.max(1e-9),
                t,
                Strategy::Cork,
                true,
            ));
        }
    }
    v
}

fn find(tables: &[Table], f: impl Fn(&Case) -> bool) -> Option<&Table> {
    tables.iter().find(|t| f(&t.case) && t.path.link.is_none())
}

/// The loopback framed-window table with this receiver window.
fn framed_window(tables: &[Table], w: usize) -> Option<&Table> {
    find(
        tables,
        move |c| matches!(c, Case::FramedWindow { window, .. } if *window == w),
    )
}

/// The loopback pipelined-read table with this many requests in flight.
fn pipelined_read(tables: &[Table], d: usize) -> Option<&Table> {
    find(
        tables,
        move |c| matches!(c, Case::PipelinedRead { depth, .. } if *depth == d),
    )
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

/// Lines of the seeds report: for each source what its text reports, what we measured
/// (every table of the case), and the verdict in the text's conditions.
pub fn report(tables: &[Table]) -> String {
    let verdicts = verdicts(tables);
    let mut out = String::from("\n== Source cases: their figures beside ours\n");
    let mut line = |src: &str, theirs: &str, ours: Vec<String>, seed: &str, missing: &str| {
        out.push_str(&format!("\n{src}\n  text: {theirs}\n"));
        for o in ours {
            out.push_str(&format!("  lab:  {o}\n"));
        }
        match verdicts.iter().find(|v| v.seed == seed) {
            Some(v) => out.push_str(&format!(
                "  verdict: {}: text {:.3}, lab {:.3} ({:.2}x of the text: {}) [{}]\n  against the text's fix ({}): {}\n",
                v.quantity,
                v.theirs,
                v.ours,
                v.ratio,
                if v.within_3x { "within 3x" } else { "NOT within 3x" },
                v.table,
                v.their_fix.name(),
                v.versus_fix,
            )),
            None => out.push_str(&format!("  verdict: none: {missing}\n")),
        }
    };
    let mut bgp = Vec::new();
    for t in find_all(tables, is_bird) {
        let g = |s| row(t, s).map(|r| (r.p50_us.median, r.segs_per_exchange.median));
        if let (Some(n), Some(d), Some(x)) = (
            g(Strategy::Nagle),
            g(Strategy::Nodelay),
            g(Strategy::Nagless),
        ) {
            bgp.push(format!(
                "[{}] SYN to UPDATE: nagle {}, nodelay {} ({:.0}x), nagless {}; data segments per session: nagle {:.1}, nodelay {:.1}, nagless {:.1}",
                t.path.label(), ms(n.0), ms(d.0), n.0 / d.0.max(1.0), ms(x.0), n.1, d.1, x.1
            ));
        }
    }
    line(
        "000 BIRD BGP, 255 routes in one UPDATE (bgp-burst per-update=255)",
        "UPDATE left 0.206955 s after SYN without NODELAY, 0.007478 s with it (~28x); NODELAY adds packets. \
         Its 200 ms is a peer whose delayed-ACK timer is 200 ms (Windows-like), not Linux's 40 ms: the \
         peer's KEEPALIVE left before BIRD's arrived, so BIRD's UPDATE waited for the peer's timer",
        bgp,
        "000",
        "the text's conditions (a 3.7 ms path to a peer with a 200 ms timer) need the emulated path: run as root",
    );
    let fw = |w| framed_window(tables, w);
    let mut beep = Vec::new();
    if let (Some(tiny), Some(aligned)) = (fw(4096), fw(4098)) {
        let tp = |t: &Table, s| row(t, s).map(|r| r.throughput.median);
        if let (Some(a), Some(n), Some(x)) = (
            tp(aligned, Strategy::Nagle),
            tp(tiny, Strategy::Nagle),
            tp(tiny, Strategy::Nagless),
        ) {
            beep.push(format!(
                "nagle: aligned window {a:.0} msg/s, tiny-tail window {n:.0} msg/s ({:.0}x collapse); nagless on the tiny-tail window {x:.0} msg/s ({:.2}x of aligned)",
                a / n.max(1e-9), x / a.max(1e-9)
            ));
        }
    }
    line(
        "001 BEEP tiny fragment (framed-window, 4098 B messages, loopback)",
        "8192 operations in ~2 s with a window >= the message; ~10 in the same time with a 4096 B window; delays of 40 ms on each message",
        beep,
        "001",
        "the framed-window tables did not run",
    );
    let pr = |d| pipelined_read(tables, d);
    let mut sftp = Vec::new();
    if let (Some(d1), Some(d2), Some(d10)) = (pr(1), pr(2), pr(10)) {
        let tp = |t: &Table, s| row(t, s).map(|r| r.throughput.median).unwrap_or(0.0);
        sftp.push(format!(
            "MB/s at depth 1/2/10: nagle {:.1}/{:.1}/{:.1}, nodelay {:.0}/{:.0}/{:.0}, nagless {:.0}/{:.0}/{:.0}",
            tp(d1, Strategy::Nagle), tp(d2, Strategy::Nagle), tp(d10, Strategy::Nagle),
            tp(d1, Strategy::Nodelay), tp(d2, Strategy::Nodelay), tp(d10, Strategy::Nodelay),
            tp(d1, Strategy::Nagless), tp(d2, Strategy::Nagless), tp(d10, Strategy::Nagless),
        ));
    }
    line(
        "002 OpenSSH sftp (pipelined-read, 8 KiB requests, loopback)",
        "one request at a time is slow; NODELAY or one overlapping request fixes it; on loopback 10 overlapping requests achieve almost the same as NODELAY",
        sftp,
        "002",
        "the pipelined-read tables did not run",
    );
    let mut split = Vec::new();
    for t in find_all(tables, |c| matches!(c, Case::SplitWrite { k: 1000, .. })) {
        let g = |s| row(t, s).map(|r| (r.p50_us.median, r.wire_bytes_per_exchange.median));
        if let (Some(n), Some(d), Some(c), Some(m), Some(x)) = (
            g(Strategy::Nagle),
            g(Strategy::Nodelay),
            g(Strategy::Cork),
            g(Strategy::Msgmore),
            g(Strategy::Nagless),
        ) {
            split.push(format!(
                "[{}] round trip / wire bytes: nagle {} / {:.0}, nodelay {} / {:.0} ({:.1}x nagle's bytes), cork {} / {:.0}, msgmore {} / {:.0}, nagless {} / {:.0}",
                t.path.label(), ms(n.0), n.1, ms(d.0), d.1, d.1 / n.1.max(1.0), ms(c.0), c.1, ms(m.0), m.1, ms(x.0), x.1
            ));
        }
    }
    line(
        "003 K-way split write (split-write K=1000)",
        "NODELAY is fast but puts ~15x the default's bytes on the wire; CORK is slow; NODELAY+MSG_MORE wins on time and bytes",
        split,
        "003",
        "the split-write table did not run",
    );
    let mut puma = Vec::new();
    for t in find_all(tables, |c| matches!(c, Case::HttpWrk { .. })) {
        let tp = |s| row(t, s).map(|r| (r.throughput.median, r.stalls.median));
        if let (Some(n), Some(c), Some(x)) = (
            tp(Strategy::Nagle),
            tp(Strategy::Cork),
            tp(Strategy::Nagless),
        ) {
            puma.push(format!(
                "[{} {}] nagle {:.0} req/s, cork {:.0} req/s ({:.1}x), nagless {:.0} req/s",
                t.params,
                t.path.label(),
                n.0,
                c.0,
                c.0 / n.0.max(1e-9),
                x.0,
            ));
        }
    }
    line(
        "004 Puma on JRuby, small keep-alive HTTP (http-wrk: Debian's wrk, 1 thread, 10 connections)",
        "wrk, 10 connections: 1,405 requests/s without TCP_CORK, 12,245 with it (~8.7x); mean latency 6.91 ms without (max 48 ms: \
         about one request in six stalled), 352 us with it. What moves the ratio is the server's time per request \
         against the 40 ms stall: with none, cork's gain is bounded by the client alone",
        puma,
        "004",
        "the http-wrk tables did not run (is wrk installed?)",
    );
    out
}

#[cfg(test)]
mod tests;
