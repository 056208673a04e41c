//! `nagless watch` for a fleet: a real Prometheus (Debian's `prometheus`, which
//! `./scripts/test` installs) scrapes `nagless watch --serve` on loopback every second while
//! Python's `http.server` stalls under wrk, and the same server under TCP_NODELAY does not;
//! PromQL over Prometheus's HTTP API must give the first a stall rate and the second 0.
//! The shipped deploy/ files are checked too: the alerting rules with `promtool check rules`,
//! the manifests by a YAML parse.
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nagless_test_support::{
    ephemeral_range, exclusive, fixed_port, free_port, have_tool, http_server_args, root_or_skip,
    tool_path, wait_for_port, watch_ebpf_or_skip, Started,
};

const NAGLESS: &str = env!("CARGO_BIN_EXE_nagless");

/// A directory made by the test, removed when dropped (a failing test too).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("nagless-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// A plain HTTP/1.1 GET on loopback: (status code, body), or `None` if nobody answers.
fn http_get(port: u16, target: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n")?.1.to_owned();
    Some((code, body))
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant PromQL query: label set -> value, for each series of the vector.
fn promql(port: u16, q: &str) -> Vec<(serde_json::Value, f64)> {
    let (code, body) = http_get(port, &format!("/api/v1/query?query={}", percent_encode(q)))
        .expect("Prometheus answers");
    assert_eq!(code, 200, "{q}: {body}");
    // A chunked body: the JSON is the part between the first '{' and the last '}'.
    let json = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["status"], "success", "{q}: {v}");
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let val = r["value"][1].as_str().unwrap().parse().unwrap();
            (r["metric"].clone(), val)
        })
        .collect()
}

/// `python3 -m http.server` on `port`, under `nagless run --mode nodelay` if `nodelay`.
/// Debian's Prometheus on `prom_port`, its data in `dir`, scraping the watcher on
/// `metrics_port` every second.
fn start_prometheus(dir: &Path, metrics_port: u16, prom_port: u16) -> Started {
    start_prometheus_with(
        dir,
        &format!(
            "  - job_name: nagless\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
        prom_port,
    )
}

/// Debian's Prometheus on `prom_port`, its data in `dir`, scraping every second what the
/// `scrape_configs` entries in `jobs` say.
fn start_prometheus_with(dir: &Path, jobs: &str, prom_port: u16) -> Started {
    std::fs::write(
        dir.join("prometheus.yml"),
        format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{jobs}"),
    )
    .unwrap();
    Started(
        Command::new(tool_path("prometheus").unwrap())
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus"),
    )
}

/// Waits (60 s at most) until Prometheus on `prom_port` is ready and has scraped the watcher
/// once: it hands its targets to its scrapers some seconds after it is ready.
fn wait_scraped(prom_port: u16) {
    let start = Instant::now();
    while http_get(prom_port, "/-/ready").is_none_or(|(c, _)| c != 200) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Prometheus not ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    while !promql(prom_port, r#"up{job="nagless"}"#)
        .iter()
        .any(|(_, v)| *v == 1.0)
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Prometheus never scraped the watcher"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn http_server(dir: &Path, port: u16, nodelay: bool) -> Started {
    let mut cmd = if nodelay {
        let mut c = Command::new(NAGLESS);
        c.args(["run", "--mode", "nodelay", "--", "python3"]);
        c
    } else {
        Command::new("python3")
    };
    let child = http_server_args(&mut cmd, port)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let s = Started(child);
    wait_for_port(port);
    s
}

fn wrk(port: u16, secs: u32) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let o = Command::new("wrk")
            .args(["-t1", "-c2", &format!("-d{secs}s")])
            .arg(format!("http://127.0.0.1:{port}/f.txt"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    })
}

/// `nagless watch --refresh 250ms ARGS --serve ADDR`, quiet, until dropped.
fn serving_watcher(args: &[&str], addr: &str) -> Started {
    Started(
        Command::new(NAGLESS)
            .args(["watch", "--refresh", "250ms"])
            .args(args)
            .args(["--serve", addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn sigterm(child: &std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

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
    assert!(
        named.iter().any(|(m, _)| m["process"] == "python3"),
        "the stalling server's series name its process: {named:?}"
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

#[test]
fn serve_on_an_address_in_use_says_so_and_exits_2() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let o = Command::new(NAGLESS)
        .args(["watch", "--serve", &addr.to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&addr.to_string()) && err.contains("in use"),
        "{err}"
    );
    let o = Command::new(NAGLESS)
        .args(["watch", "--serve", "localhost"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_alerting_rules_pass_promtool_check_and_its_unit_tests() {
    if !have_tool("promtool") {
        return;
    }
    // Valid rules, and alerts that fire on a stalling service and a silent watcher only.
    for (cmd, file) in [
        ("check", "nagless-alerts.yml"),
        ("test", "nagless-alerts.test.yml"),
    ] {
        let o = Command::new(tool_path("promtool").unwrap())
            .args([cmd, "rules"])
            .arg(deploy().join("prometheus").join(file))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "promtool {cmd} rules {file}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn the_daemonset_asks_for_exactly_the_privileges_it_needs() {
    use yaml_rust2::YamlLoader;
    let text = std::fs::read_to_string(deploy().join("kubernetes/nagless-watch.yaml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).expect("valid YAML");
    let ds = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .expect("a DaemonSet");
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["hostPID"].as_bool(), Some(true), "sees every process");
    assert!(
        spec["hostNetwork"].as_bool() != Some(true),
        "enters each pod's namespace itself: no hostNetwork"
    );
    let c = &spec["containers"][0];
    let sc = &c["securityContext"];
    assert_ne!(sc["privileged"].as_bool(), Some(true), "never privileged");
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    let drop: Vec<_> = sc["capabilities"]["drop"].as_vec().unwrap().to_vec();
    assert_eq!(drop.len(), 1);
    assert_eq!(drop[0].as_str(), Some("ALL"));
    let mut add: Vec<&str> = sc["capabilities"]["add"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    add.sort();
    assert_eq!(
        add,
        [
            "BPF",
            "DAC_READ_SEARCH",
            "PERFMON",
            "SYS_ADMIN",
            "SYS_PTRACE"
        ]
    );
    let args: Vec<&str> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--serve"), "{args:?}");
    // Safe by default: the pod network reaches it, so TLS and a password, from a Secret.
    let web = args
        .iter()
        .position(|a| *a == "--web-config")
        .map(|i| args[i + 1]);
    assert_eq!(web, Some("/etc/nagless/web.yml"), "{args:?}");
    assert_eq!(
        c["volumeMounts"][0]["mountPath"].as_str(),
        Some("/etc/nagless")
    );
    assert_eq!(
        spec["volumes"][0]["secret"]["secretName"].as_str(),
        Some("nagless-watch-web")
    );
    // The systemd unit runs the same command, on loopback only.
    let unit = std::fs::read_to_string(deploy().join("systemd/nagless-watch.service")).unwrap();
    assert!(
        unit.lines()
            .any(|l| l.starts_with("ExecStart=") && l.contains("watch --serve 127.0.0.1:")),
        "{unit}"
    );
}

/// deploy/web-config.yml, the example both deploy files point to: refused as shipped (its
/// password hash is a placeholder, so it cannot be deployed by mistake), and served once a
/// certificate and a real hash are in place.
#[test]
fn the_shipped_web_config_is_refused_until_filled_in() {
    let tmp = TempDir::new("webcfg");
    let dir = &tmp.0;
    let shipped = std::fs::read_to_string(deploy().join("web-config.yml")).unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), cert.key_pair.serialize_pem()).unwrap();
    std::fs::write(dir.join("web.yml"), &shipped).unwrap();
    let run = |port: &str| {
        // (On one unused port: a stall elsewhere on the host would make it exit 1.)
        Command::new(NAGLESS)
            .args([
                "watch",
                "--duration",
                "1s",
                "--port",
                &free_port().to_string(),
            ])
            .arg("--serve")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--web-config")
            .arg(dir.join("web.yml"))
            .output()
            .unwrap()
    };
    let out = run("0");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("prometheus: not a bcrypt hash"), "{said}");
    let hash = bcrypt::hash("a password", 4).unwrap();
    std::fs::write(
        dir.join("web.yml"),
        shipped.replace("REPLACE-WITH-A-BCRYPT-HASH", &hash),
    )
    .unwrap();
    let out = run(&free_port().to_string());
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("https://"), "{said}");
}

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

#[test]
fn a_server_in_another_network_namespace_is_watched_named_and_outlives_its_namespace() {
    if !root_or_skip("ip netns add") || !have_tool("wrk") || !have_tool("ip") {
        return;
    }
    server_in_a_namespace("sampling");
}

#[test]
fn ebpf_names_the_namespace_container_and_role_of_a_server_in_another_namespace() {
    if !root_or_skip("ip netns add")
        || !have_tool("wrk")
        || !have_tool("ip")
        || !watch_ebpf_or_skip(NAGLESS)
    {
        return;
    }
    server_in_a_namespace("ebpf");
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

#[test]
fn a_filter_that_matches_nothing_says_so_and_bad_filters_exit_2() {
    let port = free_port(); // nothing listens or connects there
    let o = Command::new(NAGLESS)
        .args(["watch", "--duration", "300ms", "--port"])
        .arg(port.to_string())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        out.contains(&format!(
            "nothing matched: no connection with port {port} was seen"
        )),
        "{out}"
    );
    let o = Command::new(NAGLESS)
        .args(["watch", "--json", "--duration", "300ms", "--port"])
        .arg(port.to_string())
        .output()
        .unwrap();
    let last = String::from_utf8_lossy(&o.stdout);
    let summary: serde_json::Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    assert_eq!(summary["matched"], false, "{summary}");
    // No such process; a scan interval shorter than the interval; not a duration; stall
    // lines without JSON.
    for args in [
        &["--pid", "4000000000"][..],
        &["--interval", "5ms", "--scan-interval", "2ms"],
        &["--scan-interval", "soon"],
        &["--serve", "127.0.0.1:99999"],
        &["--stalls"],
    ] {
        let o = Command::new(NAGLESS)
            .arg("watch")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(!o.stderr.is_empty(), "{args:?}: says why");
    }
}

#[test]
fn without_the_right_to_listen_serve_says_so_and_exits_2() {
    if !root_or_skip("setpriv to nobody") || !have_tool("setpriv") {
        return;
    }
    let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse::<u16>().ok())
        .unwrap_or(1024);
    if start <= 1 {
        eprintln!("skipped: every port is unprivileged here (ip_unprivileged_port_start {start})");
        return;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(NAGLESS)
        .args(["watch", "--serve", "127.0.0.1:1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("127.0.0.1:1") && err.contains("ermission denied"),
        "{err}"
    );
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
    let series = promql(prom_port, r#"nagless_connections{job="nagless"}"#);
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

/// TLS and basic authentication by exporter-toolkit's web configuration file (issue 29,
/// point 2): Debian's Prometheus scrapes over TLS with the right password, and gets nothing
/// with a wrong one or over plain HTTP; a bad file is refused at start with exit 2.
#[test]
fn prometheus_scrapes_over_tls_with_a_password_and_not_without() {
    let _one = exclusive();
    if !have_tool("prometheus") {
        return;
    }
    let tmp = TempDir::new("tls");
    let dir = &tmp.0;
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(dir.join("watch.crt"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("watch.key"), cert.key_pair.serialize_pem()).unwrap();
    // Cost 4, bcrypt's lowest, keeps the test quick; deploy files say 10 or more.
    let hash = bcrypt::hash("right horse", 4).unwrap();
    std::fs::write(
        dir.join("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: watch.crt\n  key_file: watch.key\nbasic_auth_users:\n  prometheus: {hash}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("bad.yml"),
        "basic_auth_users:\n  prometheus: plain\n",
    )
    .unwrap();
    let out = Command::new(NAGLESS)
        .args([
            "watch",
            "--duration",
            "1s",
            "--serve",
            "127.0.0.1:0",
            "--web-config",
        ])
        .arg(dir.join("bad.yml"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("bad.yml") && said.contains("not a bcrypt hash"),
        "{said}"
    );

    let (metrics_port, prom_port) = (free_port(), free_port());
    let job = |name: &str, scheme: &str, password: Option<&str>| {
        let mut j = format!(
            "  - job_name: {name}\n    scheme: {scheme}\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        );
        if scheme == "https" {
            j += &format!(
                "    tls_config:\n      ca_file: {}\n      server_name: localhost\n",
                dir.join("watch.crt").display()
            );
        }
        if let Some(p) = password {
            j += &format!("    basic_auth:\n      username: prometheus\n      password: '{p}'\n");
        }
        j
    };
    let jobs = job("right", "https", Some("right horse"))
        + &job("wrong", "https", Some("wrong horse"))
        + &job("plain", "http", Some("right horse"));
    let _prometheus = start_prometheus_with(dir, &jobs, prom_port);
    let watch = Command::new(NAGLESS)
        .args(["watch", "--refresh", "250ms", "--serve"])
        .arg(format!("127.0.0.1:{metrics_port}"))
        .arg("--web-config")
        .arg(dir.join("web.yml"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut watch = Started(watch);
    wait_for_port(metrics_port);
    let start = Instant::now();
    let up = |job: &str| promql(prom_port, &format!(r#"up{{job="{job}"}}"#));
    // Until each job has been scraped at least once (60 s at most).
    while !["right", "wrong", "plain"].iter().all(|j| {
        http_get(prom_port, "/-/ready").is_some_and(|(c, _)| c == 200) && !up(j).is_empty()
    }) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Prometheus never scraped the three jobs"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_secs(2));
    let right = up("right");
    let wrong = up("wrong");
    let plain = up("plain");
    let info = promql(prom_port, r#"nagless_build_info{job="right"}"#);
    sigterm(&watch.0);
    let mut stderr = String::new();
    let _ = watch.0.stderr.take().unwrap().read_to_string(&mut stderr);
    assert_eq!(right.first().map(|(_, v)| *v), Some(1.0), "{right:?}");
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(wrong.first().map(|(_, v)| *v), Some(0.0), "{wrong:?}");
    assert_eq!(plain.first().map(|(_, v)| *v), Some(0.0), "{plain:?}");
    assert!(
        stderr.contains("https://127.0.0.1:") && stderr.contains("basic authentication"),
        "{stderr}"
    );
}
