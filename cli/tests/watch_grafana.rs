//! `deploy/grafana/nagless.json`, the Grafana dashboard: it loads, each panel's queries are
//! valid PromQL, and each returns series from Debian's real Prometheus scraping a live
//! `nagless watch --serve` while one server stalls under load, a `nagless fix` is in force
//! on another, a listener's accept queue fills and the policy's node agent keeps a rule (the dashboard's variables given as Grafana would: every host, a 1 m rate
//! window).
#![allow(clippy::disallowed_methods)] // tests wait for real time

mod watch_fleet_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use nagless_test_support::{
    exclusive_on_host, fixed_port, free_port, have_tool, root_or_skip, wait_for_port, Started,
};
use watch_fleet_support::{
    deploy, http_server, promql, start_prometheus, wait_scraped, wrk, TempDir, NAGLESS,
};

/// Every query of the dashboard: (panel title, expression).
fn queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(deploy().join("grafana/nagless.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(d["uid"], "nagless-stalls");
    let mut v = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap();
            v.push((p["title"].as_str().unwrap().to_owned(), expr.to_owned()));
        }
    }
    assert!(v.len() >= 10, "{v:?}");
    v
}

#[test]
fn the_dashboard_loads_and_names_only_exported_metrics() {
    // Each metric a query reads is one the watcher exports: on its page (HELP lines), or, for
    // a family with no series yet (`nagless_fix_info` with no fix in force), in the metrics
    // table of docs/watch.md.
    let page =
        nagless_watch_page() + &std::fs::read_to_string(deploy().join("../docs/watch.md")).unwrap();
    for (title, expr) in queries() {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let family = ["_bucket", "_total"]
                .iter()
                .fold(word, |w, s| w.strip_suffix(s).unwrap_or(w));
            if word.starts_with("nagless_") || word.starts_with("process_") {
                assert!(
                    page.contains(&format!("# HELP {family} "))
                        || page.contains(&format!("# HELP {word} "))
                        || page.contains(&format!("| `{word}` |"))
                        || page.contains(&format!("| `{family}` |")),
                    "{title}: {word} is not on the watcher's page"
                );
            }
        }
    }
}

/// The page of a watcher that runs for a moment (no root needed: sampling of its own
/// sockets).
fn nagless_watch_page() -> String {
    let port = free_port();
    let w = Started(
        Command::new(NAGLESS)
            .args([
                "watch",
                "--backend",
                "sampling",
                "--refresh",
                "250ms",
                "--serve",
            ])
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port);
    std::thread::sleep(Duration::from_millis(600));
    let page = watch_fleet_support::http_get(port, "/metrics").unwrap().1;
    drop(w);
    page
}

/// A listener with a backlog of 1 that accepts nothing for 1.5 s while five clients connect:
/// its queue fills, and the kernel drops connection attempts (the acceptor panel's series).
fn fill_an_accept_queue() {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    s.listen(1).unwrap();
    let l: std::net::TcpListener = s.into();
    let addr = l.local_addr().unwrap();
    let clients: Vec<_> = (0..5)
        .map(|_| {
            std::thread::spawn(move || {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map(drop)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..5 {
        l.accept().unwrap();
    }
    for c in clients {
        c.join().unwrap().unwrap();
    }
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn every_panel_returns_series_from_a_real_prometheus() {
        let _one = exclusive_on_host("fixes");
        if !have_tool("prometheus") || !have_tool("wrk") || !root_or_skip("nagless fix (BPF)") {
            return;
        }
        let tmp = TempDir::new("grafana");
        let dir = &tmp.0;
        std::fs::create_dir_all(dir.join("www")).unwrap();
        std::fs::write(dir.join("www/f.txt"), vec![b'x'; 2000]).unwrap();
        let (stalling, other) = (fixed_port(), fixed_port());
        let s1 = http_server(&dir.join("www"), stalling, false);
        let s2 = http_server(&dir.join("www"), other, false);
        // A fix in force on the other server before the watcher starts (it lists fixes every
        // 10 s, the first time at its first refresh).
        let mut fix = Started(
            Command::new(NAGLESS)
                .args([
                    "fix",
                    "--pid",
                    &s2.0.id().to_string(),
                    "--nodelay",
                    "--duration",
                    "2m",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        // The policy's node agent, with a rule on trial (its stall rate before it acts is
        // published 5 s after it starts), on Prometheus's connections: the stalling server's are
        // left to stall.
        let policy = dir.join("policy.toml");
        std::fs::write(
            &policy,
            "[[rule]]\nname = \"scrapes\"\nprogram = \"prometheus\"\nnodelay = true\nrevert_after = \"10s\"\n",
        )
        .unwrap();
        let mut agent = Started(
            Command::new(NAGLESS)
                .args(["fix", "--policy"])
                .arg(&policy)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(Duration::from_secs(2));
        assert!(fix.0.try_wait().unwrap().is_none(), "nagless fix stopped");
        assert!(
            agent.0.try_wait().unwrap().is_none(),
            "nagless fix --policy stopped"
        );
        let (metrics_port, prom_port) = (free_port(), free_port());
        let prometheus = start_prometheus(dir, metrics_port, prom_port);
        let watch = Started(
            Command::new(NAGLESS)
                .args(["watch", "--refresh", "250ms", "--serve"])
                .arg(format!("127.0.0.1:{metrics_port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_for_port(metrics_port);
        wait_scraped(prom_port);
        let filled = std::thread::spawn(fill_an_accept_queue);
        wrk(stalling, 4).join().unwrap();
        filled.join().unwrap();
        std::thread::sleep(Duration::from_millis(2500));
        // The agent's rule has its rate before it acts by now (5 s after it started).
        let mut empty = Vec::new();
        for (title, expr) in queries() {
            let q = expr
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*");
            let got = promql(prom_port, &q);
            if got.is_empty() {
                empty.push(format!("{title}: {q}"));
            }
        }
        // Stopped cleanly, so that it leaves no journal for the next agent.
        // SAFETY: kill(2) on the pid of a child this test started and has not waited for.
        unsafe { libc::kill(agent.0.id() as i32, libc::SIGTERM) };
        let _ = nagless_test_support::wait_at_most(&mut agent.0, Duration::from_secs(20));
        drop((watch, prometheus, fix, agent, s1, s2));
        assert!(
            empty.is_empty(),
            "panels with no series:\n{}",
            empty.join("\n")
        );
    }
}
