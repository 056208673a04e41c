//! What the workspace's integration tests share: finding the system tools they drive,
//! skipping (or, under CI, failing) when a tool or root is missing, child processes stopped
//! by their PID, tcpdump started and stopped, free loopback ports, a lock that runs a test
//! binary's timing-sensitive tests one at a time, the check that a committed BPF object is
//! built from its source ([`bpf_object`]), a page as headless Chromium lays it out
//! ([`browser`]), and the write-write-read exchange of the capture tests ([`exchanges`]).
//!
//! **Skip or fail.** `./scripts/test` (and so CI) installs every tool the tests drive and
//! runs them as root. A plain `cargo test` on a machine without a tool, or without root,
//! skips the test that needs it with a note on stderr; with `CI` set in the environment
//! the same test fails instead, so a missing tool is never a silent skip there.
//!
//! Dev-only (`publish = false`): used as a `[dev-dependencies]` entry by the crates whose
//! tests need it. Public is what those tests (and `stall-match`) use (`unreachable_pub`
//! holds the rest).
#![warn(unreachable_pub)]

pub mod bpf_object;
pub mod browser;
pub mod exchanges;
pub mod stall_match;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A test cannot run here, for `why`: a note outside CI; under `CI` a failure, never a
/// silent skip.
pub fn skip(why: &str) {
    assert!(std::env::var_os("CI").is_none(), "under CI: {why}");
    eprintln!("skipped: {why}");
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
    have_tool_of(name, name)
}

/// [`have_tool`] for a tool whose Debian package has another name (`redis-benchmark` of
/// `redis-tools`), which the note names.
pub fn have_tool_of(name: &str, package: &str) -> bool {
    let found = tool_path(name).is_some();
    if !found {
        skip(&format!(
            "{name} is not installed (Debian package {package}; ./scripts/test installs it)"
        ));
    }
    found
}

/// A statically linked program `name` (one with no ELF interpreter, such as busybox-static's
/// busybox), from the Debian package `package`: its path, or `None` when it is missing or
/// dynamically linked (skipped with a note outside CI, a failure under `CI`).
pub fn static_tool(name: &str, package: &str) -> Option<PathBuf> {
    let path = tool_path(name).filter(|p| is_static_elf(p));
    if path.is_none() {
        skip(&format!(
            "no statically linked {name} (Debian package {package}; ./scripts/test installs it)"
        ));
    }
    path
}

/// Whether `path` is a 64-bit little-endian ELF executable without a program interpreter
/// (`PT_INTERP`): statically linked.
fn is_static_elf(path: &std::path::Path) -> bool {
    let Ok(b) = std::fs::read(path) else {
        return false;
    };
    let u16_at = |o: usize| b.get(o..o + 2).map(|x| u16::from_le_bytes([x[0], x[1]]));
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|x| u32::from_le_bytes(x.try_into().unwrap()))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|x| u64::from_le_bytes(x.try_into().unwrap()))
    };
    if !b.starts_with(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    const PT_INTERP: u32 = 3;
    (0..usize::from(phnum)).all(|i| {
        let at = phoff as usize + i * usize::from(phentsize);
        u32_at(at).is_some_and(|t| t != PT_INTERP)
    })
}

/// Whether this process runs as root (effective user ID 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether this process runs as root (capturing with tcpdump, making network namespaces).
/// Outside CI a test that needs it skips with a note naming `what`; under `CI` it must run.
pub fn root_or_skip(what: &str) -> bool {
    let root = is_root();
    if !root {
        skip(&format!("needs root ({what}); CI runs the tests as root"));
    }
    root
}

/// Whether `nagless watch --backend ebpf` loads here (root, kernel BTF, BTF tracepoints),
/// asked of the `nagless` binary at `nagless`; if not, skipped with the watcher's own reason
/// outside CI, a failure under CI (which runs as root).
pub fn watch_ebpf_or_skip(nagless: &str) -> bool {
    if !root_or_skip("loading BPF programs") {
        return false;
    }
    let o = Command::new(nagless)
        .args(["watch", "--backend", "ebpf", "--duration", "100ms"])
        .output()
        .expect("run nagless watch");
    let loads = o.status.code() != Some(2);
    if !loads {
        skip(&format!(
            "the eBPF backend cannot load here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    loads
}

/// Held by a test while it runs, through [`exclusive`].
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Takes this test binary's one-at-a-time lock: tests that time real exchanges, count
/// segments or need most of a shared limit hold it so that `cargo test`, which runs a
/// binary's tests in parallel, does not make them share the two CPUs (or the limit). A test
/// that panicked while holding it does not poison it for the rest.
pub fn exclusive() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A lock over the whole host for `what`, held until dropped: for tests whose resource is the
/// host's, not their binary's, when test binaries run together (`scripts/test`). `"fixes"`:
/// the fixes in force (a fix of a process in the root cgroup covers every cgroup under it, so
/// another binary's fix of one is refused). A file lock in the temporary directory, opened to
/// read when it is there (whoever made it: a sticky directory refuses to create over another
/// user's file); elsewhere than Unix, nothing.
pub fn host_wide(what: &str) -> HostWide {
    let path = std::env::temp_dir().join(format!("nagless-tests-{what}.lock"));
    let file = std::fs::File::open(&path)
        .or_else(|_| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
        })
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this function owns; it blocks until granted, and the
        // lock goes with the file when the guard drops.
        while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::Interrupted,
                "flock {}: {e}",
                path.display()
            );
        }
    }
    HostWide { _file: file }
}

/// Held by [`host_wide`]: the lock goes with its file.
pub struct HostWide {
    _file: std::fs::File,
}

/// [`exclusive`], then [`host_wide`]`(what)` (always in that order).
pub fn exclusive_on_host(what: &str) -> (MutexGuard<'static, ()>, HostWide) {
    let one = exclusive();
    (one, host_wide(what))
}

/// Directories [`scratch_dir`] made, removed at exit.
static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A directory of this test process's own for `tag` (`$TMPDIR/nagless-TAG-PID`), made on the
/// first call; every one is removed, with what it holds, when the process exits (the test
/// harness ends through `exit`, which runs the `atexit` handler registered here), so a run
/// leaves nothing behind; `NAGLESS_KEEP_SCRATCH` set keeps them (a failure's programs and
/// files, to look at). (Elsewhere than Unix they stay.)
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nagless-{tag}-{}", std::process::id()));
    let mut made = SCRATCH.lock().unwrap_or_else(PoisonError::into_inner);
    if !made.contains(&dir) {
        std::fs::create_dir_all(&dir).unwrap();
        #[cfg(unix)]
        if made.is_empty() && std::env::var_os("NAGLESS_KEEP_SCRATCH").is_none() {
            extern "C" fn remove_scratch() {
                let made = SCRATCH.lock().unwrap_or_else(PoisonError::into_inner);
                for d in made.iter() {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
            // SAFETY: registers a handler that takes no arguments and returns; it runs at
            // `exit`, after the tests, on the exiting thread.
            unsafe { libc::atexit(remove_scratch) };
        }
        made.push(dir.clone());
    }
    dir
}

/// A free port on 127.0.0.1 (bound, read and released; the server binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local address of a bound listener")
        .port()
}

/// The host's ephemeral port range (`net.ipv4.ip_local_port_range`), Linux's default where it
/// cannot be read.
pub fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut w = s.split_whitespace().map(str::parse::<u16>);
            Some((w.next()?.ok()?, w.next()?.ok()?))
        })
        .unwrap_or((32768, 60999))
}

/// A free loopback port below the host's ephemeral range ([`ephemeral_range`]):
/// one that names a service the way a configured port does, where [`free_port`]'s is one the
/// kernel could hand to any client. Tried from a place that depends on the process id and
/// moves on with each call, so that calls and tests in several processes seldom collide.
pub fn fixed_port() -> u16 {
    static CALLS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (lo, _) = ephemeral_range();
    let base = 10_000.min(lo / 2);
    let span = lo - base;
    let start = (std::process::id() as u16)
        .wrapping_mul(7919)
        .wrapping_add(call.wrapping_mul(101))
        % span;
    (0..span)
        .map(|i| base + (start + i) % span)
        .find(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok())
        .expect("a free port below the ephemeral range")
}

/// Waits until something accepts connections on 127.0.0.1:`port`; panics after 10 s.
pub fn wait_for_port(port: u16) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "server never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process this test started, stopped (by its PID) when dropped.
pub struct Started(pub Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `child` to exit, at most `limit`: its status, or `None` if it still runs (it is
/// left running: the caller decides).
pub fn wait_at_most(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if t.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends SIGINT to the child by its PID (tcpdump then writes out its last packets and prints
/// its counts; Python exits normally) and waits for it to exit, at most 10 s: then it is
/// killed. Whether it exited by itself.
pub fn interrupt(child: &mut Child) -> bool {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    if wait_at_most(child, Duration::from_secs(10)).is_some() {
        return true;
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Lets SIGINT stop `cmd`'s child whatever this process inherited: a shell's background job
/// starts with SIGINT ignored, children inherit that, and a program such as Python then never
/// installs its handler (a test waiting for it to exit would wait forever). Elsewhere than
/// Unix, `cmd` unchanged.
pub fn sigint_default(cmd: &mut Command) -> &mut Command {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        // SAFETY: the closure runs in the child between fork and exec and only calls
        // `signal(2)`, which is async-signal-safe; it touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            })
        }
    }
    #[cfg(not(unix))]
    cmd
}

/// Raises the calling thread's scheduling priority as far as it may (nice -20, root only;
/// elsewhere, or without the privilege, nothing), for it and the threads it starts from now
/// on: a test whose network is emulated by threads of its own (an emulated path's forwarder)
/// starts them after this, so that a loaded machine delays the packets no more than it would
/// delay a kernel's. True if it was raised.
pub fn favour_this_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority takes plain integers; 0 names the calling thread (Linux sets
        // a thread's nice value, which threads it creates later inherit).
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Starts tcpdump with `args` and waits until it captures ("listening on"). The rest of its
/// stderr is read by a thread and comes through the receiver once tcpdump exits (its closing
/// counts). `Err` with what it printed if it never captured (it is stopped then).
pub fn start_tcpdump<S: AsRef<OsStr>>(args: &[S]) -> Result<(Started, Receiver<String>), String> {
    let tcpdump = tool_path("tcpdump").ok_or("tcpdump is not installed")?;
    start_capture(Command::new(tcpdump).args(args))
}

/// Starts `cmd` (tcpdump, or a command that execs it, such as `ip netns exec NS tcpdump`,
/// so that the PID is tcpdump's) and waits until it captures, as [`start_tcpdump`] does.
pub(crate) fn start_capture(cmd: &mut Command) -> Result<(Started, Receiver<String>), String> {
    let mut child = cmd
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

/// A tcpdump started by this test writing a capture file, stopped by its PID.
pub struct Tcpdump {
    tcpdump: Started,
    file: PathBuf,
}

impl Tcpdump {
    /// Captures `tcp port PORT` here into a temporary file named after `name`.
    pub fn start(name: &str, port: u16, extra: &[&str]) -> Tcpdump {
        Tcpdump::start_in(None, name, &format!("tcp port {port}"), extra)
    }

    /// Starts tcpdump in network namespace `netns` (or here) with filter `filter` and the
    /// arguments `extra`, headers only (128 bytes a packet), each packet written at once; it
    /// captures when this returns. Panics if it cannot start.
    pub fn start_in(netns: Option<&str>, name: &str, filter: &str, extra: &[&str]) -> Tcpdump {
        let file =
            std::env::temp_dir().join(format!("nagless-doctor-{}-{name}.pcap", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let tcpdump = tool_path("tcpdump")
            .expect("tcpdump (Debian package tcpdump; scripts/test installs it)");
        let mut cmd = match netns {
            // `ip netns exec` execs tcpdump: the PID is tcpdump's.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(tcpdump);
                c
            }
            None => Command::new(tcpdump),
        };
        cmd.args(extra)
            .args(["-s", "128", "-U", "--immediate-mode", "-Z", "root", "-w"])
            .arg(&file)
            .arg(filter);
        let (tcpdump, _rest) = start_capture(&mut cmd)
            .unwrap_or_else(|said| panic!("tcpdump did not start (are we root?): {said}"));
        Tcpdump { tcpdump, file }
    }

    /// Stops the capture and returns the file's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        std::thread::sleep(Duration::from_millis(200));
        interrupt(&mut self.tcpdump.0);
        let bytes = std::fs::read(&self.file).expect("the capture file");
        let _ = std::fs::remove_file(&self.file);
        bytes
    }
}

/// Adds the arguments that make `python3` serve its working directory over HTTP/1.1 on
/// 127.0.0.1:`port` (`python3 -m http.server`: headers and body as two writes).
pub fn http_server_args(cmd: &mut Command, port: u16) -> &mut Command {
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

#[cfg(test)]
mod tests {
    #[test]
    fn fixed_ports_are_free_distinct_and_below_the_ephemeral_range() {
        let (lo, _) = super::ephemeral_range();
        let (a, b) = (super::fixed_port(), super::fixed_port());
        assert_ne!(a, b);
        for p in [a, b] {
            assert!(p < lo, "{p} not below {lo}");
            std::net::TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
    }
}
