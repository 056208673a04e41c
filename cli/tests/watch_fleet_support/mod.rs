//! What the fleet tests of `nagless watch` share: a temporary directory, the repository's
//! deploy/ folder, a plain HTTP GET and PromQL queries over Prometheus's HTTP API, Debian's
//! Prometheus started on a scrape config of the test's, Python's `http.server` (optionally
//! under `nagless run --mode nodelay`) loaded by wrk, and a watcher serving its metrics.
#![allow(dead_code)] // each test file uses its own part

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nagless_test_support::{http_server_args, tool_path, wait_for_port, Started};

pub const NAGLESS: &str = env!("CARGO_BIN_EXE_nagless");

/// A directory made by the test, removed when dropped (a failing test too).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
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

pub fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// A plain HTTP/1.1 GET on loopback: (status code, body), or `None` if nobody answers.
pub fn http_get(port: u16, target: &str) -> Option<(u16, String)> {
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

pub fn percent_encode(s: &str) -> String {
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
pub fn promql(port: u16, q: &str) -> Vec<(serde_json::Value, f64)> {
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
pub fn start_prometheus(dir: &Path, metrics_port: u16, prom_port: u16) -> Started {
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
pub fn start_prometheus_with(dir: &Path, jobs: &str, prom_port: u16) -> Started {
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
pub fn wait_scraped(prom_port: u16) {
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

pub fn http_server(dir: &Path, port: u16, nodelay: bool) -> Started {
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

pub fn wrk(port: u16, secs: u32) -> std::thread::JoinHandle<()> {
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
pub fn serving_watcher(args: &[&str], addr: &str) -> Started {
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

pub fn sigterm(child: &std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}
