//! A fast mode of every scenario on loopback, asserting robust facts: the stall a strategy
//! shows is >= 30 ms (delayed ACK is 40 ms on Linux: a busy machine only lengthens it), "no
//! stall" means the median exchange took well under that and at most a few (a busy
//! machine's, where a stall holds most) took that long, and segment counts come from the
//! kernel's TCP_INFO.

use std::time::Duration;

use nagless_lab::{Case, Credit, Path, RunResult, Setup, Strategy};

const LO: Path = Path::LOOPBACK;
const ETH: Path = Path::mss(1448);
const STALL_US: u64 = 30_000;

fn run(case: &Case, strategy: Strategy, path: Path) -> RunResult {
    let setup = Setup {
        path,
        pin: nagless_lab::default_pin(),
        net: None,
        exe: None,
    };
    case.run(strategy, setup, Duration::from_millis(300))
        .unwrap_or_else(|e| panic!("{case:?} {strategy:?} {path:?}: {e}"))
}

fn stalls(r: &RunResult) -> usize {
    r.latencies_us.iter().filter(|&&l| l >= STALL_US).count()
}

/// No stall: the median exchange under half a stall, and at most one in five (at least one)
/// as long as one, which a scheduling delay on a loaded machine may cause; a strategy that
/// stalls holds most exchanges that long.
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
fn multiplexed_answers_every_request_and_nagless_sends_no_more_than_a_segment_each() {
    let requests = 2000;
    let case = Case::Multiplexed {
        writers: 4,
        depth: 64,
        requests,
    };
    for s in Strategy::ALL {
        let r = run(&case, s, LO);
        assert_eq!(
            r.latencies_us.len(),
            requests,
            "{s:?}: every request answered"
        );
        assert!(r.client.data_segs > 0, "{s:?}");
    }
    let ours = run(&case, Strategy::Nagless, LO);
    // Never more than one segment per request (TCP_NODELAY's count), nor a byte left behind.
    assert!(
        ours.client.data_segs <= requests as u64,
        "{} client segments for {requests} requests",
        ours.client.data_segs
    );
    assert_eq!(ours.client.bytes, (requests * 40) as u64);
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn split_write_nagle_stalls_where_nagless_does_not() {
        let case = Case::SplitWrite { k: 10, rounds: 6 };
        let nagle = run(&case, Strategy::Nagle, LO);
        assert!(stalls(&nagle) >= 3, "nagle: {:?}", nagle.latencies_us);
        for path in [LO, ETH] {
            let ours = run(&case, Strategy::Nagless, path);
            assert_eq!(ours.latencies_us.len(), 6);
            assert_no_stall(&ours, &format!("nagless {path:?}"));
            // Each 1024-byte burst is one segment on loopback; on MSS 1448 too. (One extra is
            // tolerated: a thread descheduled past the 500 µs linger bound mid-burst sends early.)
            assert!(
                (6..=7).contains(&ours.client.data_segs),
                "{}",
                ours.client.data_segs
            );
            assert!(
                (6..=7).contains(&ours.server.data_segs),
                "{}",
                ours.server.data_segs
            );
        }
    }

    #[test]
    fn bgp_burst_with_nagless_fills_segments() {
        let case = Case::BgpBurst {
            routes: 255,
            per_update: 1,
            sessions: 1,
        };
        let burst_bytes: usize = 255 * 45 + 23;
        for path in [LO, ETH] {
            let r = run(&case, Strategy::Nagless, path);
            assert_eq!(r.latencies_us.len(), 1);
            // One exchange: the burst's 255 UPDATEs in ~12 KB. A stall would hold it 40 ms or
            // (on MSS 1448, once per held segment) much more; a busy machine's delay is far less.
            assert!(
                r.latencies_us[0] < STALL_US,
                "{path:?}: {:?}",
                r.latencies_us
            );
            let mss = path.mss.unwrap_or(32_741) as usize; // loopback MSS is at least this
                                                           // OPEN and KEEPALIVE are one segment each; the burst at most ceil(bytes/MSS) + 1.
            let bound = 2 + burst_bytes.div_ceil(mss) + 1;
            assert!(
                r.client.data_segs as usize <= bound,
                "{path:?}: {} data segments > {bound}",
                r.client.data_segs
            );
        }
        let nodelay = run(&case, Strategy::Nodelay, ETH);
        let ours = run(&case, Strategy::Nagless, ETH);
        assert!(nodelay.client.data_segs > ours.client.data_segs);
    }

    #[test]
    fn framed_window_tiny_tail_collapses_under_nagle_and_not_under_nagless() {
        let tiny = Case::FramedWindow {
            total: 4098 * 50,
            message: 4098,
            window: 4096,
            credit: Credit::HalfWindow,
        };
        let nagle = run(&tiny, Strategy::Nagle, LO);
        assert!(stalls(&nagle) >= 3, "nagle: {:?}", nagle.latencies_us);
        let ours = run(&tiny, Strategy::Nagless, LO);
        assert_no_stall(&ours, "nagless");
        assert_eq!(ours.latencies_us.len(), 50, "every message arrives");
        // The text's fix, aligned framing, removes the stall even under Nagle.
        let aligned = Case::FramedWindow {
            total: 4098 * 50,
            message: 4098,
            window: 4098,
            credit: Credit::HalfWindow,
        };
        assert_no_stall(&run(&aligned, Strategy::Nagle, LO), "aligned nagle");
    }

    #[test]
    fn pipelined_read_depth_one_stalls_only_under_nagle() {
        let case = Case::PipelinedRead {
            total: 8192 * 20,
            block: 8192,
            depth: 1,
        };
        let nagle = run(&case, Strategy::Nagle, LO);
        assert!(stalls(&nagle) >= 3, "nagle: {:?}", nagle.latencies_us);
        let ours = run(&case, Strategy::Nagless, LO);
        assert_eq!(ours.latencies_us.len(), 20);
        assert_no_stall(&ours, "nagless");
        // Header and data leave together: one segment per response on loopback.
        assert!(
            (20..=21).contains(&ours.server.data_segs),
            "{}",
            ours.server.data_segs
        );
    }

    #[test]
    fn http_keepalive_header_then_body() {
        let case = Case::HttpKeepalive { conns: 2 };
        let nagle = run(&case, Strategy::Nagle, LO);
        assert!(
            stalls(&nagle) * 2 >= nagle.latencies_us.len(),
            "most nagle requests stall"
        );
        let ours = run(&case, Strategy::Nagless, LO);
        // Nagle's requests are held to the 40 ms timer: a few per connection in the run's
        // 300 ms, whatever the machine; without the stall many times as many.
        assert!(ours.latencies_us.len() > 10 * nagle.latencies_us.len());
        assert_no_stall(&ours, "nagless");
        // One data segment per response.
        let responses = ours.latencies_us.len() as u64;
        assert!(
            ours.server.data_segs <= responses + 2,
            "{} segs for {responses}",
            ours.server.data_segs
        );
    }

    #[test]
    fn custom_pattern_runs_every_strategy() {
        let case = Case::Custom {
            client: "w100,w100,r100".into(),
            server: "r200,w100".into(),
            rounds: 5,
        };
        for s in Strategy::ALL {
            let r = run(&case, s, LO);
            assert_eq!(r.latencies_us.len(), 5, "{s:?}");
        }
        let ours = run(&case, Strategy::Nagless, LO);
        assert_no_stall(&ours, "nagless");
        assert!(
            (5..=6).contains(&ours.client.data_segs),
            "{}",
            ours.client.data_segs
        );
    }

    #[test]
    fn multiplexed_with_one_in_flight_nagless_sends_each_request_at_once() {
        // Every request is written with nothing unacknowledged: it must leave at once, never held
        // for an ACK that nothing in flight would bring (the kernel's 200 ms probe would send it).
        let case = Case::Multiplexed {
            writers: 4,
            depth: 1,
            requests: 100,
        };
        let ours = run(&case, Strategy::Nagless, LO);
        assert_eq!(ours.latencies_us.len(), 100);
        assert_eq!(stalls(&ours), 0, "{:?}", ours.latencies_us);
    }
}
