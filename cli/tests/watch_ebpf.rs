//! `nagless watch --backend ebpf` on real programs: a stalling Python `http.server` under wrk
//! is flagged and counted, stall by stall, like `nagless doctor` counts it in a capture (95 %
//! on loopback, 90 % across a 20 ms path to a server in another namespace); its twin under
//! `nagless run --mode nodelay` and a bulk transfer are not flagged. Needs root, eBPF, wrk and
//! tcpdump: skipped with a note outside CI, a failure under CI.
#![allow(clippy::disallowed_methods)] // tests measure real time

mod watch_support;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nagless_test_support::stall_match::Window;
use nagless_test_support::{exclusive, free_port, have_tool, skip, watch_ebpf_or_skip, Started};
use watch_support::{
    against_doctor, drain, flagged, http_server, http_server_under, json_lines, stalls_of, stop,
    tcpdump, wait_for, wait_ready, watch_by, wrk, www, NAGLESS,
};

fn ebpf_or_skip() -> bool {
    watch_ebpf_or_skip(NAGLESS)
}

/// Rows of `port` served (the server's side), their stalls summed.
fn served_stalls(rows: &serde_json::Value, port: u16) -> u64 {
    rows.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["port"] == port && r["serves"] == true)
        .map(|r| r["stalls"].as_u64().unwrap())
        .sum()
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn ebpf_backend_counts_the_stalling_server_like_the_doctor_counts() {
        let _one = exclusive();
        if !have_tool("wrk") || !have_tool("tcpdump") || !ebpf_or_skip() {
            return;
        }
        let dir = www("ebpf-stalls");
        let port = free_port();
        let server = http_server(&dir, port, false);
        let pid = server.0.id();
        let cap = dir.join("cap.pcap");
        let dump = tcpdump(port, &cap);
        let mut w = watch_by("ebpf", Some(port), 5.0);
        let t0 = Instant::now();
        let ready = wait_ready(&mut w);
        assert!(ready.contains("backend ebpf"), "{ready}");
        let started_at = t0.elapsed().as_secs_f64();
        wrk(port, "/f.txt", 3);
        let (lines, code) = json_lines(w);
        std::thread::sleep(Duration::from_millis(300));
        stop(dump);
        let (summary, row, _) = flagged(&lines, code, pid, started_at);
        assert_eq!(summary["backend"], "ebpf", "{summary}");
        let watched = stalls_of(&summary["rows"], pid);
        assert_eq!(row["ack_timer"], "linux40ms", "{row}");
        // Its writes waited for wrk's delayed ACKs, and wrk runs on this host: named.
        assert_eq!(row["acked_by"]["comm"], "wrk", "{row}");
        // Events, not samples: the same stalls as the doctor's, stall by stall (the capture and
        // the watch start and stop at slightly different moments).
        let m = against_doctor(&lines, &cap, Window::EITHER_WAY, "eBPF");
        assert!(
            m.recall() >= 0.95 && m.precision() >= 0.95,
            "eBPF watch {m}; summary rows {watched}: {summary}"
        );
        drop(server);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn ebpf_backend_flags_the_server_but_not_its_nodelay_twin_nor_a_bulk_transfer() {
        let _one = exclusive();
        if !have_tool("wrk") || !ebpf_or_skip() {
            return;
        }
        let dir = www("ebpf-nodelay");
        let (stalling, nodelay) = (free_port(), free_port());
        let s1 = http_server(&dir, stalling, false);
        let s2 = http_server_under(&dir, nodelay, Some(&["--mode", "nodelay"]));
        let mut w = watch_by("ebpf", None, 4.0);
        wait_ready(&mut w);
        let a = std::thread::spawn(move || wrk(stalling, "/f.txt", 2));
        wrk(nodelay, "/f.txt", 2);
        a.join().unwrap();
        // Bulk: 64 MB in one write, read as fast as it comes.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let bulk = l.local_addr().unwrap().port();
        let sink = drain(l);
        let mut c = TcpStream::connect(("127.0.0.1", bulk)).unwrap();
        c.write_all(&vec![7u8; 64 << 20]).unwrap();
        drop(c);
        assert_eq!(sink.join().unwrap(), 64 << 20);
        let (lines, _) = json_lines(w);
        let summary = lines.last().unwrap();
        assert_eq!(summary["backend"], "ebpf", "{summary}");
        let rows = &summary["rows"];
        assert!(
            served_stalls(rows, stalling) >= 10,
            "the stalling server is flagged: {summary}"
        );
        assert_eq!(
            served_stalls(rows, nodelay),
            0,
            "the NODELAY server is not: {summary}"
        );
        let bulk_stalls: u64 = rows
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["port"] == bulk)
            .map(|r| r["stalls"].as_u64().unwrap())
            .sum();
        assert_eq!(bulk_stalls, 0, "the bulk transfer is not: {summary}");
        drop((s1, s2));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn ebpf_backend_counts_a_server_in_another_namespace_across_a_20ms_path() {
        let _one = exclusive();
        // The server runs in a network namespace of its own (as in a container) behind an
        // emulated 20 ms path; the watcher runs outside it and still sees every stall.
        if !have_tool("wrk") || !have_tool("tcpdump") || !ebpf_or_skip() {
            return;
        }
        let spec = nagless_netpath::PathSpec {
            rtt: Duration::from_millis(20),
            ..nagless_netpath::PathSpec::default()
        };
        let p = match nagless_netpath::EmulatedPath::new(&spec) {
            Ok(p) => p,
            Err(e) => {
                skip(&format!("cannot make an emulated path: {e}"));
                return;
            }
        };
        let (cns, sns) = p.namespaces();
        let server = p.server_addr();
        let port = 8000;
        let dir = www("ebpf-path");
        // Under a 1448-byte MSS a 2000-byte body is a full segment and a tail, which the client
        // ACKs at once (two segments); a body under one MSS stalls.
        std::fs::write(dir.join("s.txt"), [b'x'; 500]).unwrap();
        let in_ns = |ns: &str| {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]);
            c
        };
        let srv = in_ns(sns)
            .args([
                "python3",
                "-m",
                "http.server",
                "--protocol",
                "HTTP/1.1",
                "--bind",
            ])
            .arg(server.to_string())
            .arg(port.to_string())
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let srv = Started(srv);
        let t = Instant::now();
        while p
            .run_in_client(|| TcpStream::connect((server, port)))
            .unwrap()
            .is_err()
        {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "http.server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // tcpdump at the server's end (`ip netns exec` execs it: its PID is tcpdump's).
        let cap = dir.join("path.pcap");
        let mut dump = in_ns(sns)
            .args([
                "tcpdump",
                "-i",
                "any",
                "-s",
                "128",
                "-U",
                "--immediate-mode",
                "-w",
            ])
            .arg(&cap)
            .arg(format!("tcp port {port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let listening = wait_for(&mut dump, "listening on");
        assert!(listening.contains("listening on"), "tcpdump: {listening}");
        let dump = Started(dump);
        let mut w = watch_by("ebpf", Some(port), 7.0);
        wait_ready(&mut w);
        let o = in_ns(cns)
            .args(["wrk", "-t1", "-c2", "-d4s"])
            .arg(format!("http://{server}:{port}/s.txt"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let (lines, _) = json_lines(w);
        stop(dump);
        let summary = lines.last().unwrap();
        // By the server's pid; its row serves its port, judged from the listeners of the
        // server's own namespace, which it names.
        let watched = stalls_of(&summary["rows"], srv.0.id());
        let own = nagless_host::Proc::host()
            .net_ns(nagless_host::Pid::Own)
            .unwrap();
        assert!(
            summary["rows"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["pid"] == srv.0.id()
                    && r["serves"] == true
                    && r["port"] == port
                    && r["netns"].as_u64().is_some_and(|n| n != own && n != 0)),
            "the server's row serves :{port} in its own namespace: {summary}"
        );
        let m = against_doctor(
            &lines,
            &cap,
            Window::EITHER_WAY,
            "20 ms path: eBPF, the doctor at the server's end",
        );
        // (About 90 stalls: one or two the doctor does not call stalls are 2 %; the benchmark's
        // 5,600 across this path are the finer measure.)
        assert!(
            m.recall() >= 0.9 && m.precision() >= 0.9,
            "eBPF watch {m}; summary rows {watched}: {summary}"
        );
        drop(srv);
        drop(p);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Issue 51's honest negative under eBPF: the `waits` iterator gives the reader's sender the
    /// time its window held it back, on its process and port, as sampling's `tcp_info` does.
    #[test]
    fn a_reader_that_stops_reading_is_named_by_the_kernels_account() {
        let _one = exclusive();
        if !ebpf_or_skip() {
            return;
        }
        watch_support::waits::a_reader_that_stops("ebpf");
    }

    /// Issue 51's waits under eBPF for connections closed between two walks
    /// (`watch_support::waits::short_connections_held_back`).
    #[test]
    fn connections_closed_between_walks_keep_their_counts() {
        let _one = exclusive();
        if !ebpf_or_skip() {
            return;
        }
        watch_support::waits::short_connections_held_back("ebpf");
    }

    /// The acceptor's stall, live (`watch_support::waits::a_listener_that_accepts_too_slowly`).
    #[test]
    fn a_listener_that_accepts_too_slowly_is_named() {
        let _one = exclusive();
        if !ebpf_or_skip() {
            return;
        }
        watch_support::waits::a_listener_that_accepts_too_slowly("ebpf");
    }

    /// Issue 51's path causes under eBPF (`watch_support::waits::a_small_buffer_on_a_lossy_path`).
    #[test]
    fn a_small_buffer_on_a_lossy_path_is_named_by_the_kernels_account() {
        let _one = exclusive();
        if !ebpf_or_skip() {
            return;
        }
        watch_support::waits::a_small_buffer_on_a_lossy_path("ebpf");
    }

    /// Issue 51's sender's own hold, live (HAProxy #3447): a server that answers each request with
    /// a head, then, 15 ms later (once the client, which ACKs at once, has ACKed the head:
    /// nothing in flight), its last 100 bytes with `MSG_MORE` and nothing after. The kernel holds
    /// that piece until its 200 ms ceiling. The server's row, on its process and port, names five holds of 190 ms or
    /// more, and no stall (exit 0). The same server sending its last piece plainly holds nothing.
    #[test]
    fn a_senders_own_cork_is_named_on_its_process_and_port() {
        use std::io::Read;
        let _one = exclusive();
        if !ebpf_or_skip() {
            return;
        }
        const ROUNDS: usize = 5;
        for msg_more in [true, false] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let mut w = watch_by("ebpf", Some(port), 2.5);
            wait_ready(&mut w);
            let srv = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                s.set_nodelay(true).unwrap();
                let mut q = [0u8; 10];
                for _ in 0..ROUNDS {
                    s.read_exact(&mut q).unwrap();
                    s.write_all(&[b'h'; 50]).unwrap();
                    std::thread::sleep(Duration::from_millis(15));
                    // Nothing in flight: a client slow to run on a loaded machine ACKs the
                    // head late, and a piece sent before that ACK is released by it, not by
                    // the ceiling (a hold the watcher rightly counts as waiting for an ACK).
                    let acked = Instant::now() + Duration::from_secs(10);
                    while unacknowledged(&s) > 0 {
                        assert!(Instant::now() < acked, "the head was never acknowledged");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let flags = if msg_more { libc::MSG_MORE } else { 0 };
                    let n = socket2::SockRef::from(&s)
                        .send_with_flags(&[b'b'; 100], flags)
                        .unwrap();
                    assert_eq!(n, 100);
                }
                // Open until the client has read it all: a close would push the last piece.
                // The listener too, until the watch has ended: without it, a hold reported
                // after the watcher next lists listeners is a client's (both ports ephemeral).
                (s, l)
            });
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.set_nodelay(true).unwrap();
            let (mut head, mut body) = ([0u8; 50], [0u8; 100]);
            let started = Instant::now();
            for _ in 0..ROUNDS {
                c.write_all(&[b'q'; 10]).unwrap();
                c.read_exact(&mut head).unwrap();
                // ACK the head at once: nothing but the kernel's ceiling pushes a corked piece.
                socket2::SockRef::from(&c).set_tcp_quickack(true).unwrap();
                c.read_exact(&mut body).unwrap();
            }
            let took = started.elapsed();
            let open = srv.join().unwrap();
            let (lines, code) = json_lines(w);
            drop(open);
            let summary = lines.iter().rev().find(|l| l["type"] == "summary").unwrap();
            assert_eq!(code, Some(0), "no stall: {summary}");
            let served: Vec<&serde_json::Value> = summary["rows"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["port"] == port && r["serves"] == true)
                .collect();
            let holds: u64 = served
                .iter()
                .map(|r| r["sender_holds"].as_u64().unwrap())
                .sum();
            let held_ms: f64 = served
                .iter()
                .map(|r| r["sender_hold_ms"].as_f64().unwrap())
                .sum();
            eprintln!(
                "MSG_MORE {msg_more}: {ROUNDS} answers in {took:?}, {holds} held, {held_ms:.1} ms"
            );
            if msg_more {
                let row = served
                    .first()
                    .unwrap_or_else(|| panic!("no row: {summary}"));
                assert_eq!(row["pid"], std::process::id(), "{row}");
                assert_eq!(holds, ROUNDS as u64, "{summary}");
                assert!(held_ms >= 190.0 * ROUNDS as f64, "{summary}");
                assert_eq!(row["kind"], "sender-hold", "{row}");
                assert_eq!(row["stalls"], 0, "{row}");
            } else {
                assert_eq!(holds, 0, "{summary}");
                assert!(
                    took < Duration::from_millis(150 * ROUNDS as u64),
                    "{took:?}"
                );
            }
        }
    }

    /// Bytes `s` has written that its peer has not acknowledged (`SIOCOUTQ`).
    fn unacknowledged(s: &TcpStream) -> libc::c_int {
        use std::os::fd::AsRawFd;
        let mut n: libc::c_int = 0;
        // SAFETY: `TIOCOUTQ` writes one `c_int` through the pointer, which outlives the call;
        // the descriptor is `s`'s, open for the call.
        let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
        assert_eq!(r, 0, "SIOCOUTQ: {}", std::io::Error::last_os_error());
        n
    }

    /// Issue 51's think time on a pooled connection
    /// (`watch_support::waits::a_pooled_connection_s_server_that_thinks`).
    #[test]
    fn a_pooled_connection_s_server_that_thinks_is_named() {
        let _one = exclusive();
        if !ebpf_or_skip() {
            return;
        }
        watch_support::waits::a_pooled_connection_s_server_that_thinks("ebpf");
    }

    /// Issue 51's think time, live (`watch_support::waits::a_server_that_thinks`).
    #[test]
    fn a_server_that_thinks_is_named_on_its_process_and_port() {
        let _one = exclusive();
        if !ebpf_or_skip() {
            return;
        }
        watch_support::waits::a_server_that_thinks("ebpf");
    }
}
