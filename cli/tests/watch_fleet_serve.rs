//! Where `nagless watch --serve` listens and who may scrape it: an address in use or a port
//! it has no right to bind exits 2 and says why (as do filters that cannot match and bad
//! arguments; a filter that matches nothing says so), the shipped deploy/web-config.yml is
//! refused until filled in, and with a web configuration file Debian's Prometheus scrapes
//! over TLS with the right password and gets nothing without it.
#![allow(clippy::disallowed_methods)] // tests measure real time

mod watch_fleet_support;

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nagless_test_support::{exclusive, free_port, have_tool, root_or_skip, wait_for_port, Started};
use watch_fleet_support::{
    deploy, http_get, promql, sigterm, start_prometheus_with, TempDir, NAGLESS,
};

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

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

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
                j += &format!(
                    "    basic_auth:\n      username: prometheus\n      password: '{p}'\n"
                );
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
}
