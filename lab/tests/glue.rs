//! The glue cases (issue 54) reproduce their reports' stall with the program as shipped and
//! lose it with the fix each report found; `run` rows are the `nagless` command's
//! (cli/tests/lab_glue.rs).

use std::time::Duration;

use nagless_lab::{Case, Path, RunResult, Setup, Strategy};

const STALL_US: u64 = 30_000;

fn run(case: &Case, strategy: Strategy) -> RunResult {
    let setup = Setup {
        path: Path::LOOPBACK,
        pin: nagless_lab::default_pin(),
        net: None,
        exe: None,
    };
    case.run(strategy, setup, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{case:?} {strategy:?}: {e}"))
}

fn stalls(r: &RunResult) -> usize {
    r.latencies_us.iter().filter(|&&l| l >= STALL_US).count()
}

/// Stalled: at least a third of the exchanges as long as a delayed ACK (each case stalls
/// in most of its exchanges; its first ones may go while the receiver still ACKs at once).
fn assert_stalls(r: &RunResult, what: &str) {
    assert!(
        stalls(r) * 3 >= r.latencies_us.len() && !r.latencies_us.is_empty(),
        "{what}: {} of {} stalled: {:?}",
        stalls(r),
        r.latencies_us.len(),
        r.latencies_us
    );
}

/// No stall: the median exchange under half a stall, and at most one in five (at least
/// one) as long as one, which a scheduling delay on a loaded machine may cause.
fn assert_no_stall(r: &RunResult, what: &str) {
    let mut lat = r.latencies_us.clone();
    lat.sort_unstable();
    assert!(!lat.is_empty(), "{what}: no exchange");
    assert!(
        lat[lat.len() / 2] < STALL_US / 2,
        "{what}: median {} us: {:?}",
        lat[lat.len() / 2],
        r.latencies_us
    );
    assert!(
        stalls(r) <= (lat.len() / 5).max(1),
        "{what}: {} stalls: {:?}",
        stalls(r),
        r.latencies_us
    );
}

#[test]
fn run_rows_need_the_nagless_executable() {
    let case = Case::NodelayServer { rounds: 1 };
    let setup = Setup {
        path: Path::LOOPBACK,
        pin: None,
        net: None,
        exe: None,
    };
    let e = case
        .run(Strategy::Run, setup, Duration::from_secs(1))
        .unwrap_err();
    assert!(e.to_string().contains("nagless executable"), "{e}");
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn sse_events_wait_for_the_readers_ack_under_nagle_only() {
        let case = Case::SseStream {
            tokens: 16,
            gap_us: 2_000,
            streams: 3,
        };
        let nagle = run(&case, Strategy::Nagle);
        assert_eq!(nagle.latencies_us.len(), 48, "every event arrives");
        // Events pile up behind a held one until the ACK comes (up to ~40 ms), each then
        // late by what is left of that wait: a stall at the worst, and a quarter late by 5 ms
        // or more (stall-free, an event takes µs).
        let late = nagle.latencies_us.iter().filter(|&&l| l >= 5_000).count();
        assert!(
            stalls(&nagle) >= 1 && late * 4 >= nagle.latencies_us.len(),
            "nagle: {:?}",
            nagle.latencies_us
        );
        for fix in [Strategy::Nodelay, Strategy::Nagless] {
            let r = run(&case, fix);
            assert_eq!(r.latencies_us.len(), 48, "{fix:?}: every event arrives");
            assert_no_stall(&r, &format!("{fix:?}"));
        }
    }

    #[test]
    fn a_tls13_first_answer_waits_behind_the_session_tickets_under_nagle_only() {
        let case = Case::TlsFirstRequest { connections: 6 };
        assert_stalls(&run(&case, Strategy::Nagle), "nagle");
        for fix in [Strategy::Nodelay, Strategy::Nagless] {
            let r = run(&case, fix);
            assert_eq!(
                r.latencies_us.len(),
                6,
                "{fix:?}: every connection answered"
            );
            assert_no_stall(&r, &format!("{fix:?}"));
        }
    }

    #[test]
    fn a_nodelay_server_is_fixed_only_by_acking_at_once() {
        let case = Case::NodelayServer { rounds: 8 };
        // The server's own TCP_NODELAY, and the library's sending, do not reach the client's
        // hold: only the receiver's ACK does.
        for shipped in [Strategy::Nagle, Strategy::Nodelay, Strategy::Nagless] {
            assert_stalls(&run(&case, shipped), &format!("{shipped:?}"));
        }
        assert_no_stall(&run(&case, Strategy::Quickack), "quickack");
    }

    #[test]
    fn a_relay_hop_without_nodelay_stalls_and_the_library_there_does_not() {
        let case = Case::RelayHop { rounds: 8 };
        assert_stalls(&run(&case, Strategy::Nagle), "nagle");
        for fix in [Strategy::Nodelay, Strategy::Nagless] {
            let r = run(&case, fix);
            assert_eq!(r.latencies_us.len(), 8);
            assert_no_stall(&r, &format!("{fix:?}"));
        }
    }
}
