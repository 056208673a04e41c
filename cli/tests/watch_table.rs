//! What `nagless watch` prints for a user to read, on real stalling servers under wrk: a
//! command line's terminal escape sequences never reach the terminal (shown escaped), and a
//! Python service is named by its script, with the fix its rows share given once.
#![allow(clippy::disallowed_methods)] // tests measure real time

mod watch_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use nagless_test_support::{exclusive, free_port, have_tool, root_or_skip, wait_for_port, Started};
use watch_support::{wrk, www, NAGLESS};

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

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
}
