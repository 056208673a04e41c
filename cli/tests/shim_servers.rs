//! The preloaded shim on real servers from Debian, unmodified: nginx with forked workers and
//! `tcp_nodelay off` (the linger bound held in every worker), and the matrix of nginx,
//! redis, memcached and node's http module, each natively, under `--mode nodelay` and under
//! the default mode, with their own load tools. Loopback only; every server started here is
//! stopped here.
#![allow(clippy::disallowed_methods)] // tests measure real time

use nagless_test_support as common;

mod shim_support;
use shim_support::servers::{wrk_run, SegmentCount, ServerGroup, TempDir};
use shim_support::{stats_lines, with_shim};

// `exclusive()`, held by each test while it runs: these tests time real programs and count
// their segments, and must not share the two CPUs with each other when `cargo test` runs
// them in parallel (`./scripts/test` runs those that time or count alone: docs/testing.md).
use common::{exclusive, free_port, have_tool, tool_path, wait_for_port, Started};
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// What one load run saw.
struct Load {
    responses: u64,
    per_sec: f64,
}

/// One server of the matrix: its command line on a port, its load tool, and a check that
/// bytes come back intact through it.
struct RealServer {
    name: &'static str,
    tools: &'static [&'static str],
    command: fn(u16, &Path) -> Command,
    load: fn(u16) -> Load,
    check_bytes: fn(u16),
    /// The server sets TCP_NODELAY itself: the shim must leave its sockets to it.
    chooses_nodelay: bool,
    /// Requests its load tool keeps in flight (connections × pipeline depth).
    in_flight: u32,
}

/// The most responses/s a server stalled on every response (each waiting for a delayed ACK,
/// at least 40 ms) can give with `in_flight` requests in flight: 25 per request slot a
/// second, half as much again for quick ACKs. No load makes a stalled server faster.
fn stalled_cap(in_flight: u32) -> f64 {
    f64::from(in_flight) * 25.0 * 1.5
}

fn run_tool(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn redis_load(port: u16, pipeline: u32) -> Load {
    // A few tenths of a second whatever the pipelining (-P16 answers 16 times as fast).
    let n = 20_000 * u64::from(pipeline);
    let csv = run_tool(Command::new("redis-benchmark").args([
        "-p",
        &port.to_string(),
        "-c",
        "10",
        "-n",
        &n.to_string(),
        "-P",
        &pipeline.to_string(),
        "-t",
        "get",
        "-q",
        "--csv",
    ]));
    let last = csv.lines().last().unwrap_or_default().replace('"', "");
    let per_sec = last
        .split(',')
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("redis-benchmark: {csv}"));
    Load {
        responses: n,
        per_sec,
    }
}

/// Sends `request` on a fresh connection and reads until `done` says the answer is whole.
fn exchange(port: u16, request: &[u8], done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !done(&got) {
        let n = s.read(&mut buf).expect("the server's answer");
        assert!(n > 0, "EOF after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

fn value(len: usize) -> String {
    (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect()
}

fn redis_command(port: u16, _: &Path) -> Command {
    let mut c = Command::new("redis-server");
    c.args([
        "--port",
        &port.to_string(),
        "--save",
        "",
        "--appendonly",
        "no",
    ]);
    c
}

const SERVERS: &[RealServer] = &[
    RealServer {
        name: "nginx, 2 workers (wrk -c10, 100 B file by sendfile)",
        tools: &["nginx", "wrk"],
        command: |port, dir| {
            std::fs::write(dir.join("f.txt"), [b'x'; 100]).unwrap();
            let conf = dir.join(format!("nginx-{port}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "worker_processes 2;\ndaemon off;\npid {d}/nginx-{port}.pid;\n\
                     error_log {d}/error-{port}.log;\nevents {{ worker_connections 256; }}\n\
                     http {{ access_log off; sendfile on; tcp_nodelay on;\n\
                     keepalive_requests 1000000;\n\
                     server {{ listen 127.0.0.1:{port}; root {d}; }} }}\n",
                    d = dir.display()
                ),
            )
            .unwrap();
            let mut c = Command::new(tool_path("nginx").expect("nginx"));
            c.arg("-c").arg(conf);
            c
        },
        load: |port| {
            let (per_sec, _, errors, responses) =
                wrk_run(&format!("http://127.0.0.1:{port}/f.txt"), 10);
            assert_eq!(errors, 0, "wrk saw errors");
            Load { responses, per_sec }
        },
        check_bytes: |port| {
            let got = exchange(
                port,
                b"GET /f.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                |g| g.ends_with(&[b'x'; 100]),
            );
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert!(text.contains("Content-Length: 100\r\n"), "{text}");
        },
        // Its workers report in its error log, not on the stderr we read.
        chooses_nodelay: false,
        in_flight: 10,
    },
    RealServer {
        name: "redis (redis-benchmark GET -c10)",
        tools: &["redis-server", "redis-benchmark"],
        command: redis_command,
        load: |port| redis_load(port, 1),
        check_bytes: |port| {
            // A 3,000-byte value set and read back, pipelined in one write.
            let v = value(3000);
            let req = format!(
                "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n{v}\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
                v.len()
            );
            let want = format!("+OK\r\n${}\r\n{v}\r\n", v.len());
            let got = exchange(port, req.as_bytes(), |g| g.len() >= want.len());
            assert_eq!(String::from_utf8_lossy(&got), want);
        },
        chooses_nodelay: true,
        in_flight: 10,
    },
    RealServer {
        name: "redis (redis-benchmark GET -c10 -P16)",
        tools: &["redis-server", "redis-benchmark"],
        command: redis_command,
        load: |port| redis_load(port, 16),
        check_bytes: |_| {},
        chooses_nodelay: true,
        in_flight: 16 * 10,
    },
    RealServer {
        name: "memcached (memcaslap -c10, every value verified)",
        tools: &["memcached", "memcaslap"],
        command: |port, _| {
            let mut c = Command::new("memcached");
            c.args(["-u", "root", "-l", "127.0.0.1", "-p", &port.to_string()]);
            c.args(["-U", "0", "-t", "2"]);
            c
        },
        load: |port| {
            let out = run_tool(Command::new("memcaslap").args([
                "-s",
                &format!("127.0.0.1:{port}"),
                "-t",
                "1s",
                "-T",
                "1",
                "-c",
                "10",
                "-X",
                "100",
                "--verify=1.0",
            ]));
            let num = |key: &str| -> u64 {
                out.lines()
                    .find_map(|l| l.trim().strip_prefix(key))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or_else(|| panic!("no {key} in memcaslap's output: {out}"))
            };
            assert_eq!(num("verify_failed:"), 0, "memcaslap found corrupted values");
            let ops = num("cmd_get:") + num("cmd_set:");
            let tps = out
                .lines()
                .find_map(|l| l.split("TPS: ").nth(1))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no TPS in memcaslap's output: {out}"));
            Load {
                responses: ops,
                per_sec: tps,
            }
        },
        check_bytes: |port| {
            let v = value(3000);
            let req = format!("set k 0 0 {}\r\n{v}\r\nget k\r\n", v.len());
            let want = format!("STORED\r\nVALUE k 0 {}\r\n{v}\r\nEND\r\n", v.len());
            let got = exchange(port, req.as_bytes(), |g| g.ends_with(b"END\r\n"));
            assert_eq!(String::from_utf8_lossy(&got), want);
        },
        chooses_nodelay: true,
        in_flight: 10,
    },
    RealServer {
        name: "node http (wrk -c10, header + 2 writes)",
        tools: &["node", "wrk"],
        command: |port, dir| {
            let js = dir.join("server.js");
            std::fs::write(
                &js,
                "require('http').createServer((q, s) => { s.writeHead(200, \
                 {'content-type': 'text/plain'}); s.write('x'.repeat(50)); \
                 s.end('y'.repeat(50)); }).listen(+process.argv[2], '127.0.0.1'); \
                 process.on('SIGTERM', () => process.exit(0));",
            )
            .unwrap();
            let mut c = Command::new("node");
            c.arg(js).arg(port.to_string());
            c
        },
        load: |port| {
            let (per_sec, _, errors, responses) = wrk_run(&format!("http://127.0.0.1:{port}/"), 10);
            assert_eq!(errors, 0, "wrk saw errors");
            Load { responses, per_sec }
        },
        check_bytes: |port| {
            let got = exchange(
                port,
                b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                |g| g.ends_with(b"0\r\n\r\n"),
            );
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            let body = format!("{}{}", "x".repeat(50), "y".repeat(50));
            let joined: String = text.split("\r\n").filter(|l| l.len() == 50).collect();
            assert_eq!(joined, body, "{text}");
        },
        chooses_nodelay: true,
        in_flight: 10,
    },
];

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn nginx_prefork_workers_under_the_shim_keep_the_linger_bound() {
        let _one = exclusive();
        if !have_tool("nginx") || !have_tool("wrk") {
            return;
        }
        // nginx with two worker processes (forked by the master) and TCP_NODELAY off, so that
        // the shim holds the workers' bursts: every worker must release them (on epoll_wait, or
        // by its own flusher), or responses would wait for the kernel's 200 ms cork timer.
        let dir = std::env::temp_dir().join(format!("nagless-nginx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f.txt"), [b'x'; 100]).unwrap();
        let port = free_port();
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "worker_processes 2;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{ worker_connections 256; }}\n\
                 http {{ access_log off; sendfile on; tcp_nodelay off; tcp_nopush off;\n\
                 keepalive_requests 1000000;\n\
                 server {{ listen 127.0.0.1:{port}; root {d}; }} }}\n",
                d = dir.display()
            ),
        )
        .unwrap();
        let mut cmd = Command::new(tool_path("nginx").unwrap());
        cmd.arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        with_shim(&mut cmd, "nagless");
        let mut server = Started(cmd.spawn().unwrap());
        wait_for_port(port);
        let (rps, max_ms, errors, _) = wrk_run(&format!("http://127.0.0.1:{port}/f.txt"), 4);
        // SIGQUIT, nginx's graceful stop, to the master we started: the workers exit normally
        // and print their counters (nginx points their stderr at its error log).
        let _ = Command::new("kill")
            .args(["-QUIT", &server.0.id().to_string()])
            .status();
        let _ = common::wait_at_most(&mut server.0, Duration::from_secs(10));
        drop(server);
        let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("nginx, 2 workers, under the shim: {rps:.0} req/s, max latency {max_ms:.2} ms");
        assert_eq!(errors, 0, "wrk saw errors");
        // A burst left to the kernel's cork timer waits 200 ms: four connections stalled so
        // would give at most 20 responses/s, and the slowest response would take 200 ms or
        // more. A busy machine only delays the others by scheduling, far less than that.
        assert!(rps > 100.0, "{rps} req/s");
        assert!(
            max_ms < 200.0,
            "a response waited {max_ms} ms: a worker's burst was not released"
        );
        // The workers (not only the master) managed sockets and held bursts.
        let stats = stats_lines(&log);
        for l in log.lines().filter(|l| l.starts_with("nagless stats:")) {
            eprintln!("{l}");
        }
        let busy = stats.iter().filter(|s| s["bursts"] > 0).count();
        assert!(busy >= 1, "no worker held a burst: {log}");
        for s in &stats {
            // One segment per burst: nginx writes each response with one writev.
            assert!(s["data"] <= s["bursts"] + s["released"] + 2, "{s:?}");
        }
    }

    /// Real servers from Debian, unmodified, natively, under `--mode nodelay` and under the
    /// default mode: every answer intact, the shim leaving alone the sockets of servers that
    /// chose TCP_NODELAY themselves, no more data segments per response than natively under the
    /// default mode (`--mode nodelay` may send more: Nagle natively joins a response's parts
    /// whenever the first is still unacknowledged, which a loaded machine makes more often), and
    /// no stall (a rate more than twice what a server stalled on every response could give; the
    /// rate against the native one is scripts/bench-servers's figure, ≥ 0.97 ×).
    #[test]
    fn real_servers_under_the_shim_lose_nothing_and_send_no_more_segments() {
        let _one = exclusive();
        let tools: Vec<&str> = SERVERS
            .iter()
            .flat_map(|s| s.tools.iter().copied())
            .chain(["tcpdump"])
            .collect();
        if !tools.iter().all(|t| have_tool(t)) {
            return;
        }
        let dir =
            TempDir(std::env::temp_dir().join(format!("nagless-servers-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).unwrap();
        let dir = &dir.0;
        for server in SERVERS {
            let mut native = None;
            for mode in ["native", "nodelay", "nagless"] {
                let port = free_port();
                let mut cmd = (server.command)(port, dir);
                cmd.stdout(Stdio::null()).stderr(Stdio::piped());
                if mode != "native" {
                    with_shim(&mut cmd, mode);
                }
                let mut server_proc = ServerGroup::spawn(&mut cmd);
                let stderr = server_proc.child.stderr.take().unwrap();
                let log = std::thread::spawn(move || {
                    let mut s = String::new();
                    let _ = BufReader::new(stderr).read_to_string(&mut s);
                    s
                });
                wait_for_port(port);
                (server.check_bytes)(port);
                let Some(capture) = SegmentCount::start(port) else {
                    return;
                };
                let load = (server.load)(port);
                let segments = capture.stop();
                (server.check_bytes)(port);
                // SIGTERM: the servers exit normally, so the shim prints its counters.
                server_proc.stop();
                drop(server_proc);
                let err = log.join().unwrap();
                let per_response = segments as f64 / load.responses.max(1) as f64;
                eprintln!(
                    "{} | {mode} | {:.0}/s | {per_response:.3} data segments per response",
                    server.name, load.per_sec
                );
                assert!(load.responses > 0, "{}: no responses", server.name);
                match native {
                    None => native = Some((load.per_sec, per_response)),
                    Some((rate, segs)) => {
                        assert!(
                            mode == "nodelay" || per_response <= segs * 1.1 + 0.05,
                            "{} {mode}: {per_response:.3} segments per response, {segs:.3} natively",
                            server.name
                        );
                        // The shim adds no stall: a rate well above any stalled server's.
                        // How it compares with the native rate is a benchmark
                        // (scripts/bench-servers), which a loaded machine blurs.
                        let cap = stalled_cap(server.in_flight);
                        assert!(
                            load.per_sec > 2.0 * cap,
                            "{} {mode}: {:.0}/s ({rate:.0}/s natively), where a server stalled \
                             on every response gives at most {cap:.0}/s",
                            server.name,
                            load.per_sec
                        );
                    }
                }
                if mode == "nagless" && server.chooses_nodelay {
                    let stats = stats_lines(&err);
                    let left = stats.iter().map(|s| s["left"]).sum::<u64>();
                    let held = stats.iter().map(|s| s["bursts"]).sum::<u64>();
                    assert!(
                        left >= 1 && held == 0,
                        "{}: the shim should leave the server's sockets to it: {err}",
                        server.name
                    );
                }
            }
        }
    }
}
