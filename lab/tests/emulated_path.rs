//! The lab across an emulated 20 ms path (two network namespaces, `nagless-netpath`), as
//! root: the write-write-read stall grows with the path (Nagle waits for the delayed ACK on
//! top of the round trip) while nagless pays the round trip alone, in one segment per request.
//! Skips with a note where this user may not make namespaces (fails instead under `CI`).

use std::time::Duration;

use nagless_lab::{Case, Link, Path, Setup, Strategy};
use nagless_netpath::{EmulatedPath, PathError};
use nagless_test_support::skip;

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn write_write_read_across_20_ms_costs_the_round_trip_under_nagless_only() {
        let link = Link {
            rtt_us: 20_000,
            rate_bps: Some(100_000_000),
            mtu: 1500,
            loss_ppm: 0,
            queue_bytes: None,
            seed: 1,
            peer_ack_delay_us: None,
        };
        let net = match EmulatedPath::new(&link.spec()) {
            Ok(n) => n,
            Err(PathError::NotPermitted(e)) => {
                skip(&e.to_string());
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let case = Case::Custom {
            client: "w100,w100,r100".into(),
            server: "r200,w100".into(),
            rounds: 6,
        };
        let run = |strategy| {
            let setup = Setup {
                path: Path {
                    mss: None,
                    link: Some(link),
                },
                pin: None,
                net: Some(&net),
                exe: None,
            };
            case.run(strategy, setup, Duration::from_secs(5)).unwrap()
        };
        let nagle = run(Strategy::Nagle);
        let ours = run(Strategy::Nagless);
        let median = |v: &[u64]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v[v.len() / 2]
        };
        let (n, o) = (median(&nagle.latencies_us), median(&ours.latencies_us));
        eprintln!("20 ms path: nagle {n} us, nagless {o} us per round");
        // Nagle: the round trip plus a delayed ACK (>= 40 ms more); nagless: one round trip,
        // never less (the path holds each packet), more only by a busy machine's delays, which
        // stay well below the 40 ms a stall would add.
        assert!(n >= 50_000, "nagle {n} us");
        assert!((18_000..45_000).contains(&o), "nagless {o} us");
        let rounds = ours.latencies_us.len() as u64;
        assert_eq!(
            ours.client.data_segs, rounds,
            "one data segment per request"
        );
    }
}
