//! `nagless watch --serve` scraped by a real Prometheus (Debian's `prometheus`, which
//! `./scripts/test` installs) on loopback every second: while Python's `http.server` stalls
//! under wrk and the same server under TCP_NODELAY does not, PromQL over Prometheus's HTTP API
//! gives the first a stall rate and the second 0 (sampling and eBPF backends); every scrape
//! succeeds through 200 idle and slow clients; the page passes `promtool check metrics` and
//! follows the Accept header; and series stay bounded, with no ephemeral port as a label.
#![allow(clippy::disallowed_methods)] // tests measure real time

mod watch_fleet_support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use nagless_test_support::{
    ephemeral_range, exclusive, fixed_port, free_port, have_tool, tool_path, wait_for_port,
    watch_ebpf_or_skip, Started,
};
use watch_fleet_support::{
    http_get, http_server, percent_encode, promql, serving_watcher, sigterm, start_prometheus,
    wait_scraped, wrk, TempDir, NAGLESS,
};

/// A real Prometheus scrapes `nagless watch --backend BACKEND --serve` while a server stalls
/// under wrk and its twin under NODELAY does not.
fn prometheus_scrapes(backend: &str) {
    let tmp = TempDir::new("fleet");
    let dir = &tmp.0;
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/f.txt"), vec![b'x'; 2000]).unwrap();
    let (metrics_port, prom_port) = (free_port(), free_port());
    let prometheus = start_prometheus(dir, metrics_port, prom_port);
    let watch = Started(
        Command::new(NAGLESS)
            .args([
                "watch",
                "--backend",
                backend,
                "--refresh",
                "250ms",
                "--serve",
            ])
            .arg(format!("127.0.0.1:{metrics_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_port(metrics_port);
    // From the first scrape on, so that the load is seen from its start.
    wait_scraped(prom_port);
    // Ports a service would be configured on: ports the host may hand out to clients are
    // labelled `ephemeral`.
    let (stalling, nodelay) = (fixed_port(), fixed_port());
    let s1 = http_server(&dir.join("www"), stalling, false);
    let s2 = http_server(&dir.join("www"), nodelay, true);
    // One after the other: the NODELAY server answers thousands of requests a second, and
    // would take the CPU the watcher needs to see the other's 40 ms stalls.
    wrk(stalling, 4).join().unwrap();
    wrk(nodelay, 2).join().unwrap();
    // Two more scrapes after the load.
    std::thread::sleep(Duration::from_millis(2500));
    // By port: a connection's first stalls may come before its owner is known (process="").
    let rate = promql(
        prom_port,
        r#"sum by (port) (rate(nagless_stalls_total{role="serves"}[1m]))"#,
    );
    let of = |port: u16| {
        rate.iter()
            .find(|(m, _)| m["port"].as_str() == Some(port.to_string().as_str()))
            .map(|(_, v)| *v)
    };
    eprintln!("stall rates by port: {rate:?}");
    let r = of(stalling).unwrap_or_else(|| panic!("no series for {stalling}: {rate:?}"));
    if r <= 0.0 {
        let targets = http_get(prom_port, "/api/v1/targets").map(|(_, b)| b);
        let metrics = http_get(metrics_port, "/metrics").map(|(_, b)| b);
        let series = http_get(
            prom_port,
            &format!(
                "/api/v1/query?query={}",
                percent_encode(&format!("nagless_stalls_total{{port=\"{stalling}\"}}[1m]"))
            ),
        );
        panic!("stalling server: rate {r}: {rate:?}\ntargets: {targets:?}\nseries: {series:?}\nmetrics: {metrics:?}");
    }
    // Sampling sees every connection, so the NODELAY server's series exist at 0; eBPF hears
    // only of held writes, so it has none or 0.
    let r0 = match backend {
        "sampling" => of(nodelay).unwrap_or_else(|| panic!("no series for {nodelay}: {rate:?}")),
        _ => of(nodelay).unwrap_or(0.0),
    };
    assert_eq!(r0, 0.0, "the server under NODELAY: {rate:?}");
    let named = promql(
        prom_port,
        &format!("nagless_stalls_total{{port=\"{stalling}\",role=\"serves\"}} > 0"),
    );
    // Named as the table names it (the module it runs), without its arguments (the port),
    // which would make a series of every run.
    assert!(
        named
            .iter()
            .any(|(m, _)| m["process"] == "python3 -m http.server"),
        "the stalling server's series name its program: {named:?}"
    );
    // The host's stalls: one series, whatever the groups.
    let host = promql(prom_port, "nagless_watch_stalls_total");
    assert!(
        host.len() == 1 && host[0].1 > 0.0,
        "the host's stall counter: {host:?}"
    );
    let stalling_conns = promql(
        prom_port,
        &format!("max_over_time(nagless_stalling_connections{{port=\"{stalling}\"}}[1m])"),
    );
    assert!(
        stalling_conns.iter().any(|(_, v)| *v >= 1.0),
        "{backend}: connections that stalled: {stalling_conns:?}"
    );
    // Stalls last a delayed-ACK timer (40 ms on loopback): the histogram's median says so.
    let q = format!(
        "histogram_quantile(0.5, sum by (le) (rate(nagless_stall_duration_seconds_bucket{{port=\"{stalling}\"}}[1m])))"
    );
    let median = promql(prom_port, &q)[0].1;
    assert!((0.025..=0.3).contains(&median), "median stall {median} s");
    let lost = promql(
        prom_port,
        &format!("sum(increase(nagless_stall_seconds_total{{port=\"{stalling}\"}}[1m]))"),
    )[0]
    .1;
    assert!(lost > 0.0, "time lost {lost}");
    let cpu = promql(prom_port, "nagless_watch_cpu_seconds_total");
    assert!(cpu.first().is_some_and(|(_, v)| *v > 0.0), "{cpu:?}");
    // The watcher's own process, under the names every exporter uses.
    let rss = promql(prom_port, "process_resident_memory_bytes");
    assert!(rss.first().is_some_and(|(_, v)| *v > 1e6), "{rss:?}");
    // The host's TCP sockets over the last minute, under either backend (eBPF counts them
    // from the kernel's own figure: there are the listeners and the load's connections).
    let sockets = promql(prom_port, "max_over_time(nagless_watch_sockets[1m])");
    assert!(
        sockets.first().is_some_and(|(_, v)| *v >= 2.0),
        "{backend}: {sockets:?}"
    );
    // SIGTERM: a clean exit 0.
    let mut watch = watch;
    let w = &mut watch.0;
    sigterm(w);
    let status =
        nagless_test_support::wait_at_most(w, Duration::from_secs(10)).expect("watch did not stop");
    assert_eq!(status.code(), Some(0));
    drop((s1, s2, prometheus));
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn prometheus_scrapes_a_stall_rate_for_the_stalling_server_and_0_under_nodelay() {
        let _one = exclusive();
        if !have_tool("prometheus") || !have_tool("wrk") {
            return;
        }
        prometheus_scrapes("sampling");
    }

    #[test]
    fn prometheus_scrapes_the_ebpf_backends_stalls_too() {
        let _one = exclusive();
        if !have_tool("prometheus") || !have_tool("wrk") || !watch_ebpf_or_skip(NAGLESS) {
            return;
        }
        prometheus_scrapes("ebpf");
    }

    /// Debian's Prometheus scrapes `nagless watch --serve` every second while 200 idle clients
    /// and four that send a byte every 300 ms hold connections to it (what blinded the exporter
    /// when it served one connection at a time): every scrape of a 10 s window succeeds, and the
    /// watcher's memory stays bounded.
    #[test]
    fn prometheus_scrapes_through_200_idle_and_slow_clients() {
        let _one = exclusive();
        if !have_tool("prometheus") {
            return;
        }
        let tmp = TempDir::new("slowclients");
        let dir = &tmp.0;
        let (metrics_port, prom_port) = (free_port(), free_port());
        let _prometheus = start_prometheus(dir, metrics_port, prom_port);
        let watch = serving_watcher(&[], &format!("127.0.0.1:{metrics_port}"));
        wait_for_port(metrics_port);
        wait_scraped(prom_port);
        let idle: Vec<TcpStream> = (0..200)
            .map(|_| TcpStream::connect(("127.0.0.1", metrics_port)).unwrap())
            .collect();
        let drips: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let Ok(mut s) = TcpStream::connect(("127.0.0.1", metrics_port)) else {
                        return;
                    };
                    // 12 s of a byte every 300 ms (bounded).
                    for _ in 0..40 {
                        if s.write_all(b"G").is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(300));
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(11));
        let status = std::fs::read_to_string(format!("/proc/{}/status", watch.0.id())).unwrap();
        let rss_kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        // The last 10 s: every scrape up, and about ten of them.
        let scrapes = promql(prom_port, r#"count_over_time(up{job="nagless"}[10s])"#);
        let worst = promql(prom_port, r#"min_over_time(up{job="nagless"}[10s])"#);
        for d in drips {
            d.join().unwrap();
        }
        drop(idle);
        eprintln!("scrapes {scrapes:?}, worst {worst:?}, watcher RSS {rss_kb} kB");
        assert!(
            scrapes.first().is_some_and(|(_, n)| *n >= 7.0),
            "too few scrapes in 10 s: {scrapes:?}"
        );
        assert_eq!(
            worst.first().map(|(_, v)| *v),
            Some(1.0),
            "a scrape failed while idle and slow clients held connections"
        );
        assert!(rss_kb < 200_000, "the watcher grew to {rss_kb} kB");
    }

    /// The page by the book: `nagless watch --serve :PORT` (every address, as exporters accept)
    /// answers a client that asks for no format in Prometheus's text format, which Debian's
    /// `promtool check metrics` accepts without a complaint (it named three families without HELP
    /// when the page was OpenMetrics for everyone), with `nagless_build_info`; Prometheus's own
    /// Accept header gets OpenMetrics.
    #[test]
    fn the_page_passes_promtool_and_follows_the_accept_header() {
        let _one = exclusive();
        if !have_tool("promtool") {
            return;
        }
        let port = free_port();
        let _watch = serving_watcher(&[], &format!(":{port}"));
        wait_for_port(port);
        let (code, page) = http_get(port, "/metrics").expect("an answer");
        assert_eq!(code, 200, "{page}");
        assert!(page.contains("nagless_build_info{version=\""), "{page}");
        let mut check = Command::new(tool_path("promtool").unwrap())
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        check
            .stdin
            .take()
            .unwrap()
            .write_all(page.as_bytes())
            .unwrap();
        let out = check.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
        assert!(
            out.status.success() && said.trim().is_empty(),
            "promtool: {said}\n{page}"
        );
        // Prometheus's Accept: OpenMetrics, ending with # EOF.
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n\r\n"
        )
        .unwrap();
        let mut om = String::new();
        s.read_to_string(&mut om).unwrap();
        assert!(om.contains("application/openmetrics-text"), "{om}");
        assert!(om.trim_end().ends_with("# EOF"), "{om}");
    }

    /// Series are bounded (issue 29, point 3): with `--max-series 4 --forget-after 2s`, twenty
    /// loopback groups (ten fixed ports, each connected to by this test, whose listeners close once
    /// they have accepted: the accepted sockets still serve their port) and a connection between
    /// two ephemeral ports (a listener on port 0, closed after accepting) give Prometheus at most four groups of
    /// series plus the overflow series, an overflow count, and no ephemeral port as a label; once
    /// they are closed their series go.
    #[test]
    fn prometheus_sees_bounded_series_and_no_ephemeral_port() {
        let _one = exclusive();
        if !have_tool("prometheus") {
            return;
        }
        let tmp = TempDir::new("cardinality");
        let (metrics_port, prom_port) = (free_port(), free_port());
        let _prometheus = start_prometheus(&tmp.0, metrics_port, prom_port);
        let watcher = |cap: &str, port: u16| {
            let args = [
                "--backend",
                "sampling",
                "--forget-after",
                "2s",
                "--max-series",
                cap,
            ];
            serving_watcher(&args, &format!("127.0.0.1:{port}"))
        };
        let _watch = watcher("4", metrics_port);
        // And one whose cap leaves every group its own series, read directly.
        let roomy_port = free_port();
        let _roomy = watcher("1000", roomy_port);
        wait_for_port(metrics_port);
        wait_for_port(roomy_port);
        wait_scraped(prom_port);
        let (lo, hi) = ephemeral_range();
        // Ten listeners on ports below the ephemeral range, each with a connection.
        let ports: Vec<u16> = (0..10).map(|_| fixed_port()).collect();
        let mut held = Vec::new();
        for &p in &ports {
            let l = TcpListener::bind(("127.0.0.1", p)).unwrap();
            let c = TcpStream::connect(("127.0.0.1", p)).unwrap();
            held.push((c, l.accept().unwrap().0));
        }
        let zero = TcpListener::bind("127.0.0.1:0").unwrap();
        let zero_port = zero.local_addr().unwrap().port();
        let c = TcpStream::connect(("127.0.0.1", zero_port)).unwrap();
        held.push((c, zero.accept().unwrap().0));
        drop(zero);
        std::thread::sleep(Duration::from_secs(2));
        let series = promql(prom_port, r#"nagless_stalling_connections{job="nagless"}"#);
        let overflowed = promql(
            prom_port,
            r#"nagless_watch_groups_overflowed_total{job="nagless"}"#,
        );
        let (_, page) = http_get(metrics_port, "/metrics").unwrap();
        let (_, roomy) = http_get(roomy_port, "/metrics").unwrap();
        drop(held);
        // The cap is full (more than four groups are open all along); which four hold it moves
        // as groups are forgotten, and a group holding one may have no connection this refresh.
        assert!(
            page.contains("nagless_watch_series_groups 4\n"),
            "not 4 groups with series of their own: {page}"
        );
        assert!(
            (1..=5).contains(&series.len()),
            "more than 4 groups and the overflow: {series:?}"
        );
        assert!(
            series.iter().any(|(l, _)| l["role"] == "overflow"),
            "no overflow series: {series:?}"
        );
        assert!(
            overflowed.first().is_some_and(|(_, v)| *v > 0.0),
            "{overflowed:?}"
        );
        for (l, _) in &series {
            let port = l["port"].as_str().unwrap_or_default();
            if let Ok(p) = port.parse::<u16>() {
                assert!(
                    !(lo..=hi).contains(&p),
                    "ephemeral port {p} as a label: {l}"
                );
            }
        }
        assert!(
            !page.contains(&format!("port=\"{zero_port}\"")),
            "port 0's server by its port: {page}"
        );
        // With room: every fixed port is served (the accepted sockets outlive their listener),
        // the pair of ephemeral ports is `ephemeral`, and no client port is a label.
        for p in &ports {
            assert!(
                roomy.contains(&format!("port=\"{p}\",role=\"serves\"")),
                "no series serving {p}: {roomy}"
            );
        }
        assert!(roomy.contains(r#"port="ephemeral""#), "{roomy}");
        assert!(
            !roomy
                .lines()
                .any(|l| !l.starts_with('#') && l.contains(r#"role="overflow""#)),
            "{roomy}"
        );
        assert!(!roomy.contains(&format!("port=\"{zero_port}\"")), "{roomy}");
        // Closed: their groups are forgotten after 2 s.
        std::thread::sleep(Duration::from_secs(4));
        let (_, roomy) = http_get(roomy_port, "/metrics").unwrap();
        for p in &ports {
            assert!(
                !roomy.contains(&format!("port=\"{p}\"")),
                "port {p} still has series after it closed: {roomy}"
            );
        }
        let forgotten = roomy
            .lines()
            .find_map(|l| l.strip_prefix("nagless_watch_groups_forgotten_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(forgotten >= 10.0, "{forgotten} groups forgotten: {roomy}");
    }
}
