//! What the command's tests share: finding the system tools they drive.
#![allow(dead_code)] // each test file uses part

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;

/// A child process this test started, stopped (by its PID) when dropped.
pub struct Started(pub Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts tcpdump with `args` and waits until it captures ("listening on"). The rest of its
/// stderr is read by a thread and comes through the receiver once tcpdump exits (its closing
/// counts). `Err` with what it printed if it never captured (it is stopped then).
pub fn start_tcpdump<S: AsRef<OsStr>>(args: &[S]) -> Result<(Started, Receiver<String>), String> {
    let mut child = Command::new(tool_path("tcpdump").ok_or("tcpdump is not installed")?)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut err = BufReader::new(child.stderr.take().expect("piped stderr"));
    let child = Started(child);
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            return Err(seen);
        }
        seen.push_str(&line);
        if line.contains("listening on") {
            break;
        }
    }
    let (tx, rest) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    Ok((child, rest))
}

/// Where the system tool `name` is: on PATH, or in /usr/sbin (nginx) for users without it.
pub fn tool_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Whether the system tool `name` is installed. `./scripts/test` (and so CI) installs it; a
/// plain `cargo test` on a machine without it skips the test with a note, except under CI
/// (`CI` set), where a missing tool is a failure, never a silent skip.
pub fn have_tool(name: &str) -> bool {
    let found = tool_path(name).is_some();
    if !found {
        skip(&format!(
            "{name} is not installed (Debian package {name}; ./scripts/test installs it)"
        ));
    }
    found
}

/// A test cannot run here, for `why`: a note outside CI; under `CI` a failure, never a
/// silent skip.
pub fn skip(why: &str) {
    assert!(std::env::var_os("CI").is_none(), "under CI: {why}");
    eprintln!("skipped: {why}");
}

/// Whether this process runs as root (capturing with tcpdump, making network namespaces).
/// Outside CI a test that needs it skips with a note naming `what`; under `CI` it must run.
pub fn root_or_skip(what: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        skip(&format!("needs root ({what}); CI runs the tests as root"));
    }
    root
}

/// Adds the arguments that make `python3` serve its working directory over HTTP/1.1 on
/// 127.0.0.1:`port` (`python3 -m http.server`: headers and body as two writes).
pub fn http_server_args(cmd: &mut std::process::Command, port: u16) -> &mut std::process::Command {
    cmd.args([
        "-m",
        "http.server",
        "--protocol",
        "HTTP/1.1",
        "--bind",
        "127.0.0.1",
    ])
    .arg(port.to_string())
}
