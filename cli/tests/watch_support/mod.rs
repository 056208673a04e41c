//! What `nagless watch`'s test files share: starting Python's `http.server` (optionally
//! under `nagless run`), the watcher (`--json --stalls`) and tcpdump, reading the watcher's
//! JSON lines and stderr, loading a server with wrk, and judging a watch: flagged in time,
//! and stall by stall against what `nagless doctor` finds in a capture. The waits both
//! backends must name are in `waits`.
#![allow(dead_code)] // each test file uses its own part

pub mod waits;

use std::ffi::OsString;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nagless_test_support::stall_match::{self, Matching, Window};
use nagless_test_support::{http_server_args, start_tcpdump, Started};

pub const NAGLESS: &str = env!("CARGO_BIN_EXE_nagless");

/// `python3 -m http.server` serving `dir` on `port`, optionally under `nagless run`.
pub fn http_server(dir: &Path, port: u16, shimmed: bool) -> Started {
    http_server_under(dir, port, shimmed.then_some(&[][..]))
}

/// `python3 -m http.server` serving `dir` on `port`, under `nagless run RUN_ARGS` if given.
pub fn http_server_under(dir: &Path, port: u16, run_args: Option<&[&str]>) -> Started {
    let mut cmd = match run_args {
        Some(a) => {
            let mut c = Command::new(NAGLESS);
            c.arg("run").args(a).args(["--", "python3"]);
            c
        }
        None => Command::new("python3"),
    };
    let child = http_server_args(&mut cmd, port)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "http.server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Started(child)
}

/// Starts `nagless watch --json --backend sampling` on `port` for `secs`.
pub fn watch(port: u16, secs: f64) -> Child {
    watch_by("sampling", Some(port), secs)
}

/// Starts `nagless watch --json --backend BACKEND` (on `port` if given) for `secs`.
pub fn watch_by(backend: &str, port: Option<u16>, secs: f64) -> Child {
    Command::new(NAGLESS)
        .args([
            "watch",
            "--json",
            "--stalls",
            "--refresh",
            "250ms",
            "--backend",
            backend,
        ])
        .args(port.map(|p| format!("--port={p}")))
        .arg("--duration")
        .arg(format!("{}ms", (secs * 1000.0) as u64))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the watch has started its backend (its first line on stderr names it, after
/// loading the BPF programs, which takes a while in a debug build); returns that line.
pub fn wait_ready(w: &mut Child) -> String {
    wait_for(w, "")
}

/// Reads `w`'s stderr up to a line containing `needle` (or its end); returns what it read.
/// The rest is drained by a thread.
pub fn wait_for(w: &mut Child, needle: &str) -> String {
    use std::io::BufRead;
    let mut err = std::io::BufReader::new(w.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.push_str(&line);
        if line.contains(needle) {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    seen
}

/// The watch's JSON lines.
pub fn json_lines(w: Child) -> (Vec<serde_json::Value>, Option<i32>) {
    let o = w.wait_with_output().unwrap();
    let v = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    (v, o.status.code())
}

/// The watch's stalls (`--stalls` lines) paired with those `nagless doctor --every-stall`
/// finds in the capture `cap` (same socket, the watch's time within `window` of the
/// doctor's); prints what `what` watched.
pub fn against_doctor(
    lines: &[serde_json::Value],
    cap: &Path,
    window: Window,
    what: &str,
) -> Matching {
    let o = Command::new(NAGLESS)
        .args(["doctor", "--json", "--every-stall", "--top", "0"])
        .arg(cap)
        .output()
        .unwrap();
    let doctor = stall_match::doctor_stalls(&String::from_utf8_lossy(&o.stdout))
        .unwrap_or_else(|| panic!("nagless doctor --json: {o:?}"));
    let watched: Vec<_> = lines.iter().filter_map(stall_match::watch_stall).collect();
    let m = stall_match::pair(&watched, &doctor, window);
    eprintln!("{what} against the doctor, stall by stall: {m}");
    assert!(m.doctor >= 20, "the server stalled only {} times", m.doctor);
    m
}

pub fn stalls_of(rows: &serde_json::Value, pid: u32) -> u64 {
    rows.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["pid"] == pid)
        .map(|r| r["stalls"].as_u64().unwrap())
        .sum()
}

pub fn wrk(port: u16, path: &str, secs: u32) {
    let o = Command::new("wrk")
        .args(["-t1", "-c2", &format!("-d{secs}s")])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

pub fn www(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nagless-watch-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f.txt"), vec![b'x'; 2000]).unwrap();
    dir
}

/// Stops tcpdump as a user would (SIGINT: it writes what it holds), then for good.
pub fn stop(dump: Started) {
    let _ = Command::new("kill")
        .args(["-INT", &dump.0.id().to_string()])
        .status();
    std::thread::sleep(Duration::from_millis(300));
    drop(dump);
}

/// The watch of a stalling http.server (`pid`; load from `started_at` s into the watch):
/// exit 1, flagged within 2 s of the load's start, its row names it and says it serves.
/// Returns the summary, the server's row and when it was first flagged.
pub fn flagged(
    lines: &[serde_json::Value],
    code: Option<i32>,
    pid: u32,
    started_at: f64,
) -> (serde_json::Value, serde_json::Value, f64) {
    assert_eq!(code, Some(1), "stalls seen: exit 1");
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary");
    let first = lines
        .iter()
        .find(|l| l["type"] == "window" && stalls_of(&l["rows"], pid) > 0)
        .expect("a window with the server's stalls");
    let t_first = first["t_s"].as_f64().unwrap();
    assert!(
        t_first <= started_at + 2.0 + 0.3,
        "first flagged at {t_first} s, load from {started_at} s"
    );
    let row = summary["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == pid)
        .unwrap_or_else(|| panic!("no row of the server: {summary}"));
    assert!(
        row["cmd"].as_str().unwrap().contains("http.server"),
        "{row}"
    );
    assert!(row["serves"].as_bool().unwrap(), "{row}");
    (summary.clone(), row.clone(), t_first)
}

/// tcpdump on lo for `port`, started by this test and stopped by its PID.
pub fn tcpdump(port: u16, file: &Path) -> Started {
    let mut args: Vec<OsString> = ["-i", "lo", "-s", "128", "-U", "--immediate-mode", "-w"]
        .map(OsString::from)
        .to_vec();
    args.push(file.into());
    args.push(format!("tcp port {port}").into());
    let (child, _) = start_tcpdump(&args).unwrap_or_else(|e| panic!("tcpdump did not start: {e}"));
    child
}

/// Accepts one connection on `l` and reads it to its end as fast as it comes; the thread
/// returns the bytes read.
pub fn drain(l: TcpListener) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0;
        loop {
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) | Err(_) => break n,
                Ok(k) => n += k,
            }
        }
    })
}
