//! `nagless watch` on containers: a server in a network namespace made by the test stalls
//! under wrk while the watcher looks from outside; its row is watched and named (namespace,
//! command line, cgroup) by the sampling and the eBPF backend, and outlives its namespace.
//! Needs root and `ip`: skipped with a note outside CI, a failure under CI.
#![allow(clippy::disallowed_methods)] // tests measure real time

mod watch_fleet_support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nagless_test_support::{
    exclusive, free_port, have_tool, have_tool_of, http_server_args, root_or_skip,
    watch_ebpf_or_skip, Started,
};
use watch_fleet_support::{TempDir, NAGLESS};

/// A network namespace made by the test, removed when dropped.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        // One name per namespace: `cargo test` runs this binary's tests in parallel.
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("nagless-watch-{}-{n}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let ok = Command::new("ip").args(["netns", "add", &name]).status();
        assert!(ok.unwrap().success(), "ip netns add {name}");
        let ns = Netns(name);
        let ok = ns
            .exec(&["ip", "link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(ok.success());
        ns
    }

    fn exec(&self, argv: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).args(argv);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A server in a network namespace of the test's stalls under wrk (in the same namespace)
/// while `nagless watch --backend BACKEND` watches from outside; the server and the namespace
/// go before the watch ends.
fn server_in_a_namespace(backend: &str) {
    let _one = exclusive();
    let tmp = TempDir::new("netns");
    let dir = &tmp.0;
    std::fs::write(dir.join("f.txt"), vec![b'x'; 2000]).unwrap();
    let ns = Netns::new();
    // A port free on the host too, so that only the namespace's server can be on it.
    let port = free_port();
    let server = Started(
        http_server_args(&mut ns.exec(&["python3"]), port)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    loop {
        let up = ns
            .exec(&["python3", "-c"])
            .arg(format!(
                "import socket; socket.create_connection(('127.0.0.1', {port}), 1)"
            ))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        if up.success() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "server in netns");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut watch = Command::new(NAGLESS)
        .args([
            "watch",
            "--backend",
            backend,
            "--json",
            "--duration",
            "4s",
            "--port",
        ])
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its first line on stderr names the backend, once started (loading the BPF programs
    // takes a while in a debug build); the rest is kept for the failure message.
    let mut err = std::io::BufReader::new(watch.stderr.take().unwrap());
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut err, &mut ready).unwrap();
    assert!(ready.contains("backend"), "watch: {ready}");
    let err = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    std::thread::sleep(Duration::from_millis(500));
    let o = ns
        .exec(&["wrk", "-t1", "-c2", "-d2s"])
        .arg(format!("http://127.0.0.1:{port}/f.txt"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    // The server exits and its namespace goes while the watch goes on: the row stays, with
    // the stalls it had, and the watch ends cleanly.
    drop(server);
    drop(ns);
    let o = watch.wait_with_output().unwrap();
    let err = err.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "stalls seen: {o:?} {err}");
    let out = String::from_utf8_lossy(&o.stdout);
    let summary: serde_json::Value =
        serde_json::from_str(out.lines().last().expect("a summary")).unwrap();
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    let own: u64 = own.to_string_lossy()[5..]
        .trim_end_matches(']')
        .parse()
        .unwrap();
    let row = summary["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["serves"] == true && r["port"] == port)
        .unwrap_or_else(|| panic!("no row for the server in the namespace: {summary}"));
    let netns = row["netns"].as_u64().unwrap();
    assert!(netns != own && netns != 0, "{row}");
    assert!(
        row["cmd"].as_str().unwrap().contains("http.server"),
        "{row}"
    );
    assert!(row["cgroup"].as_str().unwrap().starts_with('/'), "{row}");
    assert!(row["stalls"].as_u64().unwrap() > 0, "{row}");
    // (The summary's count of namespaces is the last listing's: the test's is gone by then.)
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn a_server_in_another_network_namespace_is_watched_named_and_outlives_its_namespace() {
        if !root_or_skip("ip netns add") || !have_tool("wrk") || !have_tool_of("ip", "iproute2") {
            return;
        }
        server_in_a_namespace("sampling");
    }

    #[test]
    fn ebpf_names_the_namespace_container_and_role_of_a_server_in_another_namespace() {
        if !root_or_skip("ip netns add")
            || !have_tool("wrk")
            || !have_tool_of("ip", "iproute2")
            || !watch_ebpf_or_skip(NAGLESS)
        {
            return;
        }
        server_in_a_namespace("ebpf");
    }
}
