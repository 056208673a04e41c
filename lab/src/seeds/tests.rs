//! The verdicts follow the tables they are computed from.

use super::*;
use crate::{Row, Spread};

fn spread(v: f64) -> Spread {
    Spread {
        median: v,
        min: v,
        max: v,
    }
}

/// A row whose p50 (µs), throughput and data segments per exchange are given.
fn row_of(strategy: Strategy, p50_us: f64, throughput: f64, segs: f64) -> Row {
    let z = spread(0.0);
    Row {
        strategy,
        runs: 1,
        exchanges: 1,
        p50_us: spread(p50_us),
        p99_us: spread(p50_us),
        max_us: spread(p50_us),
        stalls: z,
        elapsed_s: z,
        throughput: spread(throughput),
        segs_per_exchange: spread(segs),
        client_segs_per_exchange: z,
        client_data_segs: z,
        server_data_segs: z,
        client_bytes: z,
        server_bytes: z,
        wire_bytes_per_exchange: z,
        syscalls_per_exchange: z,
        cpu_us_per_exchange: z,
        cdf: Vec::new(),
    }
}

fn table(case: Case, path: Path, rows: Vec<Row>) -> Table {
    Table {
        scenario: case.scenario().into(),
        params: case.params(),
        unit: case.unit().into(),
        case,
        path,
        rows,
        best_latency: None,
        fewest_segments: None,
        verdict: None,
        errors: Vec::new(),
    }
}

fn bird_table(nagle_us: f64) -> Table {
    let path = Path {
        mss: None,
        link: Some(crate::harness::Link {
            peer_ack_delay_us: Some(BIRD_PEER_ACK_DELAY_US),
            ..link(BIRD_RTT_US)
        }),
    };
    table(
        bird(1),
        path,
        vec![
            row_of(Strategy::Nagle, nagle_us, 0.0, 6.0),
            row_of(Strategy::Nodelay, 7_500.0, 0.0, 7.0),
            row_of(Strategy::Nagless, 7_600.0, 0.0, 4.0),
        ],
    )
}

#[test]
fn verdicts_are_computed_from_the_tables() {
    let v = verdicts(&[bird_table(210_000.0)]);
    assert_eq!(v.len(), 1);
    let b = &v[0];
    assert_eq!(b.seed, "000");
    assert!((b.ours - 28.0).abs() < 1e-9, "{b:?}");
    assert!(b.within_3x);
    // Fewer segments than NODELAY, though slower: nagless beats the text's fix.
    assert!(b.nagless_holds_against_fix, "{b:?}");
    assert!(b.versus_fix.contains("fewer segments"), "{b:?}");
    // The same table with a Linux-like 44 ms stall is no longer the text's figure.
    let v = verdicts(&[bird_table(44_000.0)]);
    assert!(!v[0].within_3x, "{:?}", v[0]);
    assert!(report(&[bird_table(44_000.0)]).contains("NOT within 3x"));
}

#[test]
fn a_case_that_did_not_run_has_no_verdict_and_says_why() {
    // The text's conditions for 000 need the emulated path: loopback alone is no verdict.
    let lo = table(
        bird(1),
        Path::LOOPBACK,
        vec![
            row_of(Strategy::Nagle, 44_000.0, 0.0, 6.0),
            row_of(Strategy::Nodelay, 80.0, 0.0, 7.0),
            row_of(Strategy::Nagless, 70.0, 0.0, 4.0),
        ],
    );
    assert!(verdicts(std::slice::from_ref(&lo)).is_empty());
    let r = report(&[lo]);
    assert!(r.contains("need the emulated path: run as root"), "{r}");
    assert!(r.contains("is wrk installed?"), "{r}");
}

#[test]
fn puma_is_judged_by_requests_per_second_with_cork_over_without() {
    let t = table(
        Case::HttpWrk {
            conns: 10,
            work_us: PUMA_WORK_US,
        },
        Path::LOOPBACK,
        vec![
            row_of(Strategy::Nagle, 40_000.0, 240.0, 3.0),
            row_of(Strategy::Cork, 400.0, 2_400.0, 2.0),
            row_of(Strategy::Nagless, 380.0, 2_500.0, 2.0),
        ],
    );
    let v = verdicts(&[t]);
    assert_eq!(v[0].seed, "004");
    assert!((v[0].ours - 10.0).abs() < 1e-9);
    assert!(
        v[0].within_3x && v[0].nagless_holds_against_fix,
        "{:?}",
        v[0]
    );
}
