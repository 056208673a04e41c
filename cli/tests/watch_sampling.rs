//! `nagless watch --backend sampling` on real programs: Python's `http.server` (which sends
//! each response as a header write then a body write) under wrk stalls on every request;
//! watch flags it within 2 s and reports, stall by stall (same socket, at about the same
//! time), at least 80 % of the stalls `nagless doctor` finds in a capture taken at the same
//! time, and hardly any it does not. The same server under `nagless run`, and a bulk transfer,
//! are not flagged. Needs wrk and tcpdump (`./scripts/test` installs them) and root for
//! tcpdump: skipped with a note outside CI, a failure under CI.
#![allow(clippy::disallowed_methods)] // tests measure real time

mod watch_support;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use nagless_test_support::stall_match::Window;
use nagless_test_support::{exclusive, free_port, have_tool, root_or_skip};
use watch_support::{
    against_doctor, drain, flagged, http_server, json_lines, stalls_of, stop, tcpdump, watch, wrk,
    www,
};

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn http_server_under_wrk_is_flagged_and_counted_like_the_doctor_counts() {
        let _one = exclusive();
        if !have_tool("wrk") || !have_tool("tcpdump") || !root_or_skip("tcpdump") {
            return;
        }
        let dir = www("stalls");
        let port = free_port();
        let server = http_server(&dir, port, false);
        let pid = server.0.id();
        let cap = dir.join("cap.pcap");
        let dump = tcpdump(port, &cap);
        let w = watch(port, 6.0);
        std::thread::sleep(Duration::from_millis(700));
        let t_wrk = Instant::now();
        wrk(port, "/f.txt", 3);
        let wrk_secs = t_wrk.elapsed().as_secs_f64();
        let (lines, code) = json_lines(w);
        std::thread::sleep(Duration::from_millis(300));
        stop(dump);
        let started_at = 0.7; // wrk began 0.7 s after the watch
        let (summary, row, t_first) = flagged(&lines, code, pid, started_at);
        let watched = stalls_of(&summary["rows"], pid);
        assert!(row["advice"].as_str().unwrap().contains("nagless run"));
        // Its writes waited for wrk's delayed ACKs, and wrk runs on this host: named.
        assert_eq!(row["acked_by"]["comm"], "wrk", "{row}");
        // (Sampling's time is the sample that saw the ACK: late, by more on a busy machine.)
        let m = against_doctor(&lines, &cap, Window::LATE, "sampling");
        eprintln!("wrk for {wrk_secs:.1} s: first flagged {t_first:.2} s into the watch");
        // Sampling sees a hold from its samples (2 ms apart, late on a busy machine): at least
        // 80 % of the doctor's stalls, and almost nothing the doctor did not see.
        assert!(
            m.recall() >= 0.8 && m.precision() >= 0.9,
            "watch {m}; summary rows {watched}: {summary}"
        );
        drop(server);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_same_server_under_nagless_run_and_a_bulk_transfer_are_not_flagged() {
        let _one = exclusive();
        if !have_tool("wrk") {
            return;
        }
        let dir = www("fixed");
        let port = free_port();
        let server = http_server(&dir, port, true);
        let w = watch(port, 3.5);
        std::thread::sleep(Duration::from_millis(300));
        wrk(port, "/f.txt", 2);
        let (lines, code) = json_lines(w);
        let summary = lines.last().unwrap();
        let stalls: u64 = summary["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["stalls"].as_u64().unwrap())
            .sum();
        assert_eq!(stalls, 0, "{summary}");
        assert_eq!(code, Some(0));
        // It did watch the server's connections.
        let pid = server.0.id();
        let conns: u64 = summary["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["serves"] == true)
            .map(|r| r["connections"].as_u64().unwrap())
            .sum();
        assert!(
            conns >= 2,
            "the server's connections were seen (pid {pid}): {summary}"
        );
        drop(server);
        let _ = std::fs::remove_dir_all(dir);

        // Bulk: 256 MB in one write, read as fast as it comes.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let w = watch(port, 2.5);
        std::thread::sleep(Duration::from_millis(300));
        let sink = drain(l);
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let data = vec![7u8; 256 << 20];
        c.write_all(&data).unwrap();
        drop(c);
        assert_eq!(sink.join().unwrap(), 256 << 20);
        let (lines, code) = json_lines(w);
        let summary = lines.last().unwrap();
        assert_eq!(code, Some(0), "{summary}");
        let conns: u64 = summary["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["connections"].as_u64().unwrap())
            .sum();
        assert!(conns >= 2, "both ends of the transfer were seen: {summary}");
    }

    /// Short connections that stall once, as a TLS 1.3 server's first answer does (issue 54):
    /// each lives about 45 ms, and its answer waits 40 ms behind the tickets for the client's
    /// delayed ACK. A listing every 100 ms once found a few in a hundred (the listing was read up
    /// to a scan interval late, and a hold was timed from the sample that first saw it, and lost
    /// when the socket closed before the next). Now: each listing is read as it is made, a hold
    /// first seen under way is dated from when its data left, the kernel's word on each freed
    /// socket ends the hold it was in, and listings run four times as often while short
    /// connections hold. Needs root (the kernel tells of freed sockets only to `CAP_NET_ADMIN`).
    /// (`scripts/bench-watch-short` measures the ratio to eBPF: 0.94-1.00, docs/watch.md.)
    #[test]
    fn short_connections_that_stall_once_are_counted() {
        use std::io::Read;
        let _one = exclusive();
        if !root_or_skip("joining sock_diag's destroy groups") {
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for c in listener.incoming() {
                let Ok(mut c) = c else { break };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 200];
                    let _ = c.read_exact(&mut buf[..100]);
                    let _ = c.write_all(&[b'h'; 600]);
                    let _ = c.read_exact(&mut buf[..200]);
                    let _ = c.write_all(&[b't'; 200]); // the tickets
                    let _ = c.write_all(&[b'a'; 100]); // the answer, held behind them
                    while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
                });
            }
        });
        let w = watch(port, 7.0);
        std::thread::sleep(Duration::from_millis(700));
        let (mut made, mut slow) = (0u64, 0u64);
        let start = Instant::now();
        while made < 40 && start.elapsed() < Duration::from_secs(5) {
            let t0 = Instant::now();
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.set_nodelay(true).unwrap();
            let mut buf = [0u8; 600];
            c.write_all(&[b'c'; 100]).unwrap();
            c.read_exact(&mut buf).unwrap();
            let t1 = Instant::now();
            c.write_all(&[b'f'; 200]).unwrap();
            c.read_exact(&mut buf[..300]).unwrap();
            slow += u64::from(t1.elapsed() >= Duration::from_millis(30));
            made += 1;
            drop(c);
            std::thread::sleep(Duration::from_millis(100).saturating_sub(t0.elapsed()));
        }
        let (lines, code) = json_lines(w);
        let summary = lines.iter().rev().find(|l| l["type"] == "summary").unwrap();
        let seen = stalls_of(&summary["rows"], std::process::id());
        eprintln!("{made} connections, {slow} stalled; sampling counted {seen}");
        assert!(slow * 2 >= made, "the workload stalls: {slow} of {made}");
        assert_eq!(code, Some(1), "stalls found: exit 1: {summary}");
        // Many of them: the build before counted none; an idle machine here counts all 40, one
        // busy with the rest of the suite 14 or more (a listing late behind the load misses
        // the holds that end meanwhile); the goal's ratio is the benchmark's.
        assert!(seen * 4 >= slow, "{seen} of {slow}: {summary}");
        assert!(seen <= made, "{seen} of {made} connections");
    }

    /// The acceptor's stall, live (`watch_support::waits::a_listener_that_accepts_too_slowly`).
    #[test]
    fn a_listener_that_accepts_too_slowly_is_named() {
        let _one = exclusive();
        watch_support::waits::a_listener_that_accepts_too_slowly("sampling");
    }

    /// Issue 51's honest negative, live (`watch_support::waits::a_reader_that_stops`).
    #[test]
    fn a_reader_that_stops_reading_is_named_by_the_kernels_account() {
        let _one = exclusive();
        watch_support::waits::a_reader_that_stops("sampling");
    }

    /// Issue 51's think time on a pooled connection
    /// (`watch_support::waits::a_pooled_connection_s_server_that_thinks`).
    #[test]
    fn a_pooled_connection_s_server_that_thinks_is_named() {
        let _one = exclusive();
        watch_support::waits::a_pooled_connection_s_server_that_thinks("sampling");
    }

    /// Issue 51's think time, live (`watch_support::waits::a_server_that_thinks`).
    #[test]
    fn a_server_that_thinks_is_named_on_its_process_and_port() {
        let _one = exclusive();
        watch_support::waits::a_server_that_thinks("sampling");
    }

    /// Issue 51's path causes under sampling (`watch_support::waits::a_small_buffer_on_a_lossy_path`).
    #[test]
    fn a_small_buffer_on_a_lossy_path_is_named_by_the_kernels_account() {
        let _one = exclusive();
        if !root_or_skip("an emulated path") {
            return;
        }
        watch_support::waits::a_small_buffer_on_a_lossy_path("sampling");
    }
}
