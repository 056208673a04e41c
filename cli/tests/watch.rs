//! `nagless watch` on real programs: Python's `http.server` (which sends each response as a
//! header write then a body write) under wrk stalls on every request; watch flags it within
//! 2 s and reports, stall by stall (same socket, at about the same time), at least 80 % of
//! the stalls `nagless doctor` finds in a capture taken at the same time (eBPF: 95 % on
//! loopback, 90 % across a 20 ms path), and hardly any it does not. The same server under `nagless run`, and a bulk transfer, are not flagged. Needs
//! wrk and tcpdump (`./scripts/test` installs them) and root for tcpdump: skipped with a note
//! outside CI, a failure under CI.
#![allow(clippy::disallowed_methods)] // tests measure real time

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nagless_test_support::stall_match::{self, Matching, Window};
use nagless_test_support::{
    exclusive, free_port, have_tool, http_server_args, root_or_skip, skip, start_tcpdump,
    wait_for_port, watch_ebpf_or_skip, Started,
};

const NAGLESS: &str = env!("CARGO_BIN_EXE_nagless");

/// `python3 -m http.server` serving `dir` on `port`, optionally under `nagless run`.
fn http_server(dir: &Path, port: u16, shimmed: bool) -> Started {
    http_server_under(dir, port, shimmed.then_some(&[][..]))
}

/// `python3 -m http.server` serving `dir` on `port`, under `nagless run RUN_ARGS` if given.
fn http_server_under(dir: &Path, port: u16, run_args: Option<&[&str]>) -> Started {
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
fn watch(port: u16, secs: f64) -> Child {
    watch_by("sampling", Some(port), secs)
}

/// Starts `nagless watch --json --backend BACKEND` (on `port` if given) for `secs`.
fn watch_by(backend: &str, port: Option<u16>, secs: f64) -> Child {
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
fn wait_ready(w: &mut Child) -> String {
    wait_for(w, "")
}

/// Reads `w`'s stderr up to a line containing `needle` (or its end); returns what it read.
/// The rest is drained by a thread.
fn wait_for(w: &mut Child, needle: &str) -> String {
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
fn json_lines(w: Child) -> (Vec<serde_json::Value>, Option<i32>) {
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
fn against_doctor(lines: &[serde_json::Value], cap: &Path, window: Window, what: &str) -> Matching {
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

fn stalls_of(rows: &serde_json::Value, pid: u32) -> u64 {
    rows.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["pid"] == pid)
        .map(|r| r["stalls"].as_u64().unwrap())
        .sum()
}

fn wrk(port: u16, path: &str, secs: u32) {
    let o = Command::new("wrk")
        .args(["-t1", "-c2", &format!("-d{secs}s")])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

fn www(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nagless-watch-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f.txt"), vec![b'x'; 2000]).unwrap();
    dir
}

/// Stops tcpdump as a user would (SIGINT: it writes what it holds), then for good.
fn stop(dump: Started) {
    let _ = Command::new("kill")
        .args(["-INT", &dump.0.id().to_string()])
        .status();
    std::thread::sleep(Duration::from_millis(300));
    drop(dump);
}

/// The watch of a stalling http.server (`pid`; load from `started_at` s into the watch):
/// exit 1, flagged within 2 s of the load's start, its row names it and says it serves.
/// Returns the summary, the server's row and when it was first flagged.
fn flagged(
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
fn tcpdump(port: u16, file: &Path) -> Started {
    let mut args: Vec<OsString> = ["-i", "lo", "-s", "128", "-U", "--immediate-mode", "-w"]
        .map(OsString::from)
        .to_vec();
    args.push(file.into());
    args.push(format!("tcp port {port}").into());
    let (child, _) = start_tcpdump(&args).unwrap_or_else(|e| panic!("tcpdump did not start: {e}"));
    child
}

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
    let sink = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0;
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break n,
                Ok(k) => n += k,
            }
        }
    });
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
    let sink = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0;
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break n,
                Ok(k) => n += k,
            }
        }
    });
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
    let own = nagless_watch::netns::netns_of("self").unwrap();
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

#[test]
fn a_backend_that_cannot_start_says_why() {
    // Asked for by name, eBPF that cannot load is an error naming what is missing; `auto`
    // falls back to sampling and says why.
    if !root_or_skip("running the watcher as another user") || !have_tool("setpriv") {
        return;
    }
    let as_nobody = |backend: &str| {
        Command::new("setpriv")
            .args([
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                NAGLESS,
            ])
            .args(["watch", "--duration", "200ms", "--backend", backend])
            .output()
            .unwrap()
    };
    let o = as_nobody("ebpf");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("CAP_BPF"), "{err}");
    let o = as_nobody("auto");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("backend sampling, because eBPF is unavailable") && err.contains("CAP_BPF"),
        "{err}"
    );
    assert!(o.status.code().is_some_and(|c| c < 2), "{o:?}");
    let o = Command::new(NAGLESS)
        .args(["watch", "--backend", "kernel"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn without_root_it_says_what_it_cannot_see() {
    if !root_or_skip("tcpdump") || !have_tool("setpriv") {
        return;
    }
    let o = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            NAGLESS,
        ])
        .args(["watch", "--duration", "300ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not root") && err.contains("CAP_SYS_PTRACE"),
        "{err}"
    );
    assert!(o.status.code().is_some_and(|c| c < 2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("samples of up to"));
}

#[test]
fn help_lists_watch_beside_the_other_commands() {
    let o = Command::new(NAGLESS).arg("--help").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    for c in ["lab", "run", "doctor", "watch"] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(c)),
            "{c}: {out}"
        );
    }
}

#[test]
fn bad_arguments_exit_2() {
    let o = Command::new(NAGLESS)
        .args(["watch", "--interval", "5s", "--refresh", "1s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(NAGLESS)
        .args(["watch", "--interval", "fast"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// A local user's process whose command line carries terminal escape sequences (a title
/// change, a screen clear, a bell) stalls while `nagless watch` (root) prints its table: the
/// watcher's output holds no control character, and shows the sequences escaped.
#[test]
fn escape_sequences_in_a_command_line_never_reach_the_terminal() {
    use std::os::unix::process::CommandExt;
    let _one = exclusive();
    if !have_tool("wrk") || !root_or_skip("the sampling backend reads every process") {
        return;
    }
    let dir = www("hostile");
    let port = free_port();
    let hostile = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m";
    // A short argv[0] and the server's code in the environment, so that the hostile argument
    // comes within the 80 characters of command line the summary shows.
    // The interpreter itself (not a wrapper script, which would exec it under its full path).
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    let python = String::from_utf8(python.stdout).unwrap().trim().to_string();
    let child = Command::new(python)
        .arg0("py")
        .args(["-c", "import os; exec(os.environ['SERVE'])"])
        .arg(hostile)
        .arg(port.to_string())
        .env(
            "SERVE",
            "import http.server as h, sys; h.test(HandlerClass=h.SimpleHTTPRequestHandler, \
             port=int(sys.argv[2]), bind='127.0.0.1', protocol='HTTP/1.1')",
        )
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let server = Started(child);
    wait_for_port(port);
    let w = Command::new(NAGLESS)
        .args(["watch", "--refresh", "250ms", "--duration", "3s"])
        .arg(format!("--port={port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    wrk(port, "/f.txt", 2);
    let out = w.wait_with_output().unwrap();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let text = [out.stdout, out.stderr].concat();
    let shown = String::from_utf8_lossy(&text);
    assert!(
        shown.contains(&port.to_string()),
        "the server was not reported: {shown}"
    );
    let controls: Vec<char> = shown
        .chars()
        .filter(|&c| c.is_control() && c != '\n' && c != '\t')
        .collect();
    assert!(
        controls.is_empty(),
        "control characters reached the output: {controls:?}\n{shown:?}"
    );
    assert!(
        shown.contains("\\x1b]0;pwned"),
        "the command line is shown escaped: {shown}"
    );
}

#[test]
fn watch_help_has_examples() {
    let o = Command::new(NAGLESS)
        .args(["watch", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    let examples = &help[help.find("EXAMPLES").expect("an EXAMPLES section")..];
    for e in [
        "nagless watch --duration 30s",
        "nagless watch --port 8080",
        "nagless watch --pid 4242",
        "nagless watch --json --stalls",
        "nagless watch --serve :9911",
        "nagless watch --backend sampling",
    ] {
        assert!(examples.contains(e), "{e}: {help}");
    }
}

/// A Python service is known by its script, not its interpreter: `nagless_probe_service.py`,
/// run by the interpreter's full path (as virtualenvs, pyenv and systemd units run it) with
/// an option before the script, serves two ports, and both stall under wrk. The table and the
/// summary name the script (its file name, no directory) on both rows, and the fix they share
/// is given once, not once per row.
#[test]
fn a_python_service_is_named_by_its_script_and_its_fix_is_given_once() {
    let _one = exclusive();
    if !have_tool("wrk") {
        return;
    }
    let dir = www("script");
    let script = dir.join("nagless_probe_service.py");
    std::fs::write(
        &script,
        "import http.server as h, sys, threading\n\
         h.SimpleHTTPRequestHandler.protocol_version = 'HTTP/1.1'\n\
         servers = [h.ThreadingHTTPServer(('127.0.0.1', int(p)), h.SimpleHTTPRequestHandler)\n\
         \x20          for p in sys.argv[1:]]\n\
         for s in servers[1:]:\n\
         \x20   threading.Thread(target=s.serve_forever, daemon=True).start()\n\
         servers[0].serve_forever()\n",
    )
    .unwrap();
    // The interpreter itself, by its full path (not pyenv's wrapper script).
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    let python = String::from_utf8(python.stdout).unwrap().trim().to_string();
    let ports = [free_port(), free_port()];
    let server = Started(
        Command::new(&python)
            .arg("-u")
            .arg(&script)
            .args(ports.map(|p| p.to_string()))
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3"),
    );
    let pid = server.0.id();
    for p in ports {
        wait_for_port(p);
    }
    let w = Command::new(NAGLESS)
        .args(["watch", "--backend", "sampling", "--refresh", "250ms"])
        .args(["--duration", "3s", "--pid", &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let loads: Vec<_> = ports
        .map(|p| std::thread::spawn(move || wrk(p, "/f.txt", 2)))
        .into_iter()
        .collect();
    for l in loads {
        l.join().unwrap();
    }
    let o = w.wait_with_output().unwrap();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "stalls seen: {out}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with(&format!("{pid} ")))
        .collect();
    for p in ports {
        let table = rows
            .iter()
            .find(|l| l.contains(&format!(" :{p} ")))
            .unwrap_or_else(|| panic!("no table row for port {p}: {out}"));
        let summary = rows
            .iter()
            .find(|l| l.contains(&format!(" :{p}: ")))
            .unwrap_or_else(|| panic!("no summary line for port {p}: {out}"));
        // The summary is not cut; the table's column may be (a unit's name takes room).
        assert!(
            summary.contains(" nagless_probe_service.py "),
            "{summary}\n{out}"
        );
        assert!(table.contains(" nagless_probe"), "{table}\n{out}");
        for l in [table, summary] {
            assert!(!l.contains('/'), "a path, not the program's name: {l}");
        }
        assert!(table.ends_with("  [1]"), "{table}\n{out}");
    }
    let fix = "coalesce each message into one write";
    assert_eq!(out.matches(fix).count(), 1, "{out}");
    assert_eq!(out.matches("fix [1]: ").count(), 1, "{out}");
    assert!(out.contains("peers ACK with"), "{out}");
}
