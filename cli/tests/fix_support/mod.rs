//! What `nagless fix`'s test files share: cgroups, a network namespace and unmodified
//! programs the tests start and remove, the command itself, and probes that read a socket's
//! options as the kernel holds them.
#![allow(dead_code)] // each test file uses its own part

pub mod agent;
pub mod pod;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn nagless() -> &'static str {
    env!("CARGO_BIN_EXE_nagless")
}

/// `sh -c` that moves itself into the cgroup `$0`, then execs `$@`.
const INTO_CGROUP: &str = r#"echo $$ > "$0/cgroup.procs" && exec "$@""#;

/// A cgroup (v2) made for one test, removed (with what runs in it) when dropped.
pub struct Cgroup {
    pub dir: PathBuf,
    children: Vec<Child>,
}

impl Cgroup {
    pub fn new(name: &str) -> Cgroup {
        Cgroup::named(&format!("nagless-test-{name}-{}", std::process::id()))
    }

    /// A cgroup of exactly this name, under the cgroup v2 mount.
    pub fn named(name: &str) -> Cgroup {
        let root = nagless_fix::target::cgroup2_root().expect("cgroup v2");
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        Cgroup {
            dir,
            children: Vec::new(),
        }
    }

    /// A command that moves itself into the cgroup, then execs the program and arguments
    /// added to it: `cg.command().args(["python3", ...])`.
    pub fn command(&self) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(INTO_CGROUP).arg(&self.dir);
        c
    }

    /// Runs `program_and_args` inside the cgroup, at most 10 s; it must succeed. Its output,
    /// trimmed.
    pub fn run(&self, program_and_args: &[&str]) -> String {
        let out = Command::new("timeout")
            .args(["10", "sh", "-c", INTO_CGROUP])
            .arg(&self.dir)
            .args(program_and_args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Starts `cmd` inside the cgroup (it moves itself in, then execs).
    pub fn spawn(&mut self, program: &str, args: &[&str], cwd: &Path) -> u32 {
        let child = self
            .command()
            .arg(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.push(child);
        pid
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // What they started (a server's per-connection children) is in the cgroup too.
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A directory holding `index.html` ("hello\n"), for python3's HTTP server.
pub fn www() -> PathBuf {
    let d = std::env::temp_dir().join(format!("nagless-fix-www-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("index.html"), "hello\n").unwrap();
    d
}

/// The median of five GETs on one keep-alive connection, ms (after two not counted: a
/// connection's first exchanges get quick ACKs).
pub fn gets(s: &mut TcpStream) -> f64 {
    let mut ms: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            s.write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.ends_with(b"hello\n") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "the server closed");
                got.extend_from_slice(&buf[..n]);
            }
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let mut ms = ms.split_off(2);
    ms.sort_by(f64::total_cmp);
    ms[2]
}

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Starts `nagless fix ARGS` and waits for its first line (the fix is in place then).
pub fn start_fix(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(nagless())
        .arg("fix")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    // Read on a thread of its own: the first line comes back (at most 20 s), the rest is
    // drained so that the child never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let _ = tx.send(line);
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    });
    let line = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(l) => l,
        Err(_) => {
            let _ = child.kill();
            panic!("nagless fix printed nothing in 20 s");
        }
    };
    assert!(line.starts_with("nagless fix: "), "{line:?}");
    (child, line)
}

/// Waits (at most 20 s) for a `nagless fix` to end by itself; its exit must be clean.
pub fn finish_fix(mut child: Child) {
    let st = nagless_test_support::wait_at_most(&mut child, Duration::from_secs(20))
        .expect("nagless fix did not end");
    assert!(st.success(), "nagless fix: {st}");
}

pub fn fix(args: &[&str]) -> Output {
    Command::new(nagless())
        .arg("fix")
        .args(args)
        .output()
        .unwrap()
}

/// TCP_NODELAY of every established TCP connection of the processes in `cg`, read through a copy of
/// each descriptor (`pidfd_getfd`): the kernel's own state, whatever nagless says. One value
/// per socket, however many descriptors share it.
pub fn nodelay_in(cg: &Cgroup) -> Vec<i32> {
    let procs = std::fs::read_to_string(cg.dir.join("cgroup.procs")).unwrap();
    let mut found = std::collections::BTreeMap::new();
    for pid in procs.split_whitespace() {
        let pid: i32 = pid.parse().unwrap();
        // SAFETY: pidfd_open(pid, 0) returns a new descriptor owned here, or -1.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        if pidfd < 0 {
            continue; // exited meanwhile
        }
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten();
        for e in fds.flatten() {
            let Ok(link) = std::fs::read_link(e.path()) else {
                continue;
            };
            let link = link.to_string_lossy().into_owned();
            let Some(fd) = e.file_name().to_str().and_then(|f| f.parse::<i32>().ok()) else {
                continue;
            };
            if !link.starts_with("socket:[") || found.contains_key(&link) {
                continue;
            }
            // SAFETY: pidfd_getfd(pidfd, fd, 0) returns a new descriptor owned here, or -1.
            let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) } as i32;
            if copy < 0 {
                continue;
            }
            let get = |level: i32, name: i32| -> Option<i32> {
                let mut v: libc::c_int = 0;
                let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                // SAFETY: `v` is a c_int of the length passed; `copy` is open until closed below.
                let r =
                    unsafe { libc::getsockopt(copy, level, name, (&raw mut v).cast(), &mut len) };
                (r == 0).then_some(v)
            };
            let listening = get(libc::SOL_SOCKET, libc::SO_ACCEPTCONN);
            let nodelay = get(libc::IPPROTO_TCP, libc::TCP_NODELAY);
            // Established only: a connection its peer closed (a server's child still
            // finishing with `wait_for_port`'s probe, on a busy machine) is no connection.
            let mut info = [0u8; 8];
            let mut len = info.len() as libc::socklen_t;
            // SAFETY: `info` is writable for `len` bytes; TCP_INFO writes at most that.
            let r = unsafe {
                libc::getsockopt(
                    copy,
                    libc::IPPROTO_TCP,
                    libc::TCP_INFO,
                    info.as_mut_ptr().cast(),
                    &mut len,
                )
            };
            let established = r == 0 && info[0] == 1;
            // SAFETY: `copy` is a descriptor this function opened and closes once.
            unsafe { libc::close(copy) };
            if let (Some(0), Some(n), true) = (listening, nodelay, established) {
                found.insert(link, n.min(1));
            }
        }
        // SAFETY: `pidfd` is a descriptor this function opened and closes once.
        unsafe { libc::close(pidfd) };
    }
    found.into_values().collect()
}

/// A new connection made from inside `cg` to 127.0.0.1:`port` by an unmodified python3:
/// its TCP_NODELAY as the program itself sees it (1 set, 0 not).
pub fn nodelay_of_a_new_connection(cg: &Cgroup, port: u16) -> String {
    const PROBE: &str = "import socket, sys\n\
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)\n\
import time; time.sleep(0.05)\n\
print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))\n";
    cg.run(&["python3", "-c", PROBE, &port.to_string()])
}

/// Two listeners that accept and hold whatever connects, until the test ends.
pub fn two_listeners() -> [u16; 2] {
    [0, 1].map(|_| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in l.incoming().take(16).flatten() {
                held.push(s);
            }
        });
        port
    })
}

/// An unmodified python3 in `cg` holding one connection to 127.0.0.1:`port`; each line it
/// reads, it answers with that socket's TCP_NODELAY (after setting it first to the line's
/// 0 or 1, if that is what it reads: the program's own choice).
pub struct Holder {
    pub child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Holder {
    pub fn start(cg: &Cgroup, port: u16) -> Holder {
        const HOLD: &str = "import socket, sys\n\
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)\n\
print('ready', flush=True)\n\
for line in sys.stdin:\n    if line.strip() in ('0', '1'):\n        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(line))\n    print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), flush=True)\n";
        let mut child = cg
            .command()
            .args(["python3", "-c", HOLD, &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Holder { child, out }
    }

    pub fn nodelay(&mut self) -> String {
        self.ask(b"?\n")
    }

    /// The program sets TCP_NODELAY to `v` itself; what it reads back.
    pub fn set_nodelay(&mut self, v: bool) -> String {
        self.ask(if v { b"1\n" } else { b"0\n" })
    }

    fn ask(&mut self, line: &[u8]) -> String {
        self.child.stdin.as_mut().unwrap().write_all(line).unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A network namespace made for one test (as a container has its own), removed when dropped.
pub struct Netns(pub String);

impl Netns {
    pub fn new(name: &str) -> Netns {
        let ns = format!("nagless-fix-{name}-{}", std::process::id());
        let ok = |args: &[&str]| {
            let st = Command::new("ip").args(args).status().unwrap();
            assert!(st.success(), "ip {args:?}");
        };
        ok(&["netns", "add", &ns]);
        let n = Netns(ns);
        ok(&["-n", &n.0, "link", "set", "lo", "up"]);
        n
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
