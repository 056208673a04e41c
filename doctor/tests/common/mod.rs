//! What the doctor's capture tests share: tcpdump started and stopped by PID, and the check
//! for system tools.
#![allow(dead_code, clippy::disallowed_methods)] // each test file uses part; tests measure real time

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A tcpdump started by this test, stopped by its PID.
pub struct Tcpdump {
    child: Child,
    file: PathBuf,
}

impl Tcpdump {
    pub fn start(name: &str, port: u16, extra: &[&str]) -> Tcpdump {
        Tcpdump::start_in(None, name, &format!("tcp port {port}"), extra)
    }

    /// Starts tcpdump in network namespace `netns` (or here) with filter `filter`.
    pub fn start_in(netns: Option<&str>, name: &str, filter: &str, extra: &[&str]) -> Tcpdump {
        let file =
            std::env::temp_dir().join(format!("nagless-doctor-{}-{name}.pcap", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let mut cmd = match netns {
            // `ip netns exec` execs tcpdump: the PID is tcpdump's.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "tcpdump"]);
                c
            }
            None => Command::new("tcpdump"),
        };
        let mut child = cmd
            .args(extra)
            .args(["-s", "128", "-U", "--immediate-mode", "-Z", "root", "-w"])
            .arg(&file)
            .arg(filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (Debian package tcpdump; scripts/test installs it)");
        // Wait for "listening on ..." so no packet is missed.
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let start = Instant::now();
        while !line.contains("listening on") {
            line.clear();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                panic!("tcpdump did not start (are we root?)");
            }
            assert!(start.elapsed() < Duration::from_secs(10));
        }
        thread::spawn(move || {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
        });
        Tcpdump { child, file }
    }

    /// Stops the capture and returns the file's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        thread::sleep(Duration::from_millis(200));
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let bytes = std::fs::read(&self.file).unwrap();
        let _ = std::fs::remove_file(&self.file);
        bytes
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the system tool `name` is installed. `./scripts/test` (and so CI) installs it; a
/// plain `cargo test` on a machine without it skips the test with a note, except under CI
/// (`CI` set), where a missing tool is a failure, never a silent skip.
pub fn have_tool(name: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()));
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is missing (Debian package {name}; ./scripts/test installs it)"
        );
        eprintln!("skipped: {name} is not installed (./scripts/test installs it)");
    }
    found
}
