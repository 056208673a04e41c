//! What the tests of real servers share: wrk's figures, data segments counted by tcpdump, a
//! server run as a process group of its own, and a directory removed at the end.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use nagless_test_support as common;
use nagless_test_support::{start_tcpdump, Started};

/// wrk for 2 s with `conns` connections: requests/s, the maximum latency in ms, error lines
/// (non-2xx/3xx responses, socket errors), requests answered.
pub fn wrk_run(url: &str, conns: u32) -> (f64, f64, u64, u64) {
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{conns}"), "-d2s", url])
        .output()
        .expect("wrk");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    // "Latency   1.00ms  2.00ms  12.34ms  90%": the third figure is the maximum.
    let max = text
        .lines()
        .find(|l| l.trim_start().starts_with("Latency"))
        .and_then(|l| l.split_whitespace().nth(3))
        .map(|v| {
            let (n, unit) = v.split_at(v.find(|c: char| c.is_alphabetic()).unwrap_or(v.len()));
            let n: f64 = n.parse().unwrap_or(f64::MAX);
            match unit {
                "us" => n / 1000.0,
                "ms" => n,
                "s" => n * 1000.0,
                _ => f64::MAX,
            }
        })
        .unwrap_or(f64::MAX);
    let errors = ["Non-2xx or 3xx responses:", "Socket errors:"]
        .iter()
        .filter(|k| text.contains(*k))
        .count() as u64;
    let requests = text
        .lines()
        .find_map(|l| {
            l.split(" requests in")
                .next()
                .filter(|_| l.contains(" requests in"))
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    (rps, max, errors, requests)
}

/// Counts the data segments (TCP payload > 0) sent from `port` on loopback while it lives.
pub struct SegmentCount {
    tcpdump: Started,
    /// tcpdump's stderr after its first line, read by a thread (it ends with the counts).
    rest: std::sync::mpsc::Receiver<String>,
}

impl SegmentCount {
    /// Starts tcpdump and waits until it captures; None (outside CI) without the right to.
    pub fn start(port: u16) -> Option<SegmentCount> {
        SegmentCount::start_matching(&format!("tcp src port {port}"))
    }

    /// The same for the data segments of the TCP packets `which` (a tcpdump filter) selects.
    pub fn start_matching(which: &str) -> Option<SegmentCount> {
        let filter =
            format!("({which}) and (ip[2:2] - ((ip[0]&0xf)<<2) - ((tcp[12]&0xf0)>>2)) > 0");
        // Immediate mode: each packet reaches tcpdump at once, not in ~256 KB blocks,
        // whose unfinished last one would be lost uncounted when it is stopped.
        let args = [
            "-i",
            "lo",
            "-s",
            "80",
            "--immediate-mode",
            "-w",
            "/dev/null",
            &filter,
        ];
        let (tcpdump, rest) = match start_tcpdump(&args) {
            Ok(started) => started,
            Err(said) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "CI must be able to capture on lo: {said}"
                );
                eprintln!("skipped: tcpdump cannot capture here ({})", said.trim());
                return None;
            }
        };
        Some(SegmentCount { tcpdump, rest })
    }

    /// Stops the capture (SIGINT, so that tcpdump prints its counts): the segments seen.
    pub fn stop(mut self) -> u64 {
        std::thread::sleep(Duration::from_millis(200));
        let _ = Command::new("kill")
            .args(["-INT", &self.tcpdump.0.id().to_string()])
            .status();
        let _ = self.tcpdump.0.wait();
        let rest = self
            .rest
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default();
        rest.lines()
            .find_map(|l| {
                l.strip_suffix(" packets captured")
                    .or_else(|| l.strip_suffix(" packet captured"))
            })
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count from tcpdump: {rest}"))
    }
}

/// A server started as the leader of a process group of its own: dropping it before it
/// exits kills the whole group (a prefork server's workers too), by the ID it was given.
pub struct ServerGroup {
    pub child: Child,
    exited: bool,
}

impl ServerGroup {
    pub fn spawn(cmd: &mut Command) -> ServerGroup {
        use std::os::unix::process::CommandExt;
        ServerGroup {
            child: cmd.process_group(0).spawn().unwrap(),
            exited: false,
        }
    }

    /// SIGTERM, then up to 10 s for a clean exit (the shim prints its counters then).
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.exited = common::wait_at_most(&mut self.child, Duration::from_secs(10)).is_some();
    }
}

impl Drop for ServerGroup {
    fn drop(&mut self) {
        if !self.exited {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .status();
            let _ = self.child.wait();
        }
    }
}

/// A directory removed when the test ends, however it ends.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
