//! The shim inside programs that do what real daemons do and that a careful shim must
//! survive: writes from signal handlers, every way to exec, a connection inherited as stdin
//! and stdout, bad pointers, set-user-ID programs, a hostile cache directory. Each case is a
//! small C program of `tests/c/` (or a real one from Debian) run natively and under the shim;
//! loopback only, every program started here stopped here.
//!
//! A little over 600 lines, kept one file: one subject (what a careful shim must survive),
//! each case a test on the few helpers above it, used by no other file.

use nagless_test_support as common;

mod shim_support;
use shim_support::{c_program, shim};

use common::{exclusive, free_port, have_tool, tool_path};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `tests/c/hostile.c` with `args`, natively or under the shim (`env` added); returns
/// its stdout, after checking it exited 0.
fn hostile(args: &[&str], under_shim: bool, env: &[(&str, &str)]) -> String {
    hostile_with_stats(args, under_shim, env).0
}

/// As [`hostile`], with the shim's `nagless stats:` line (empty natively).
fn hostile_with_stats(args: &[&str], under_shim: bool, env: &[(&str, &str)]) -> (String, String) {
    let mut cmd = Command::new(c_program("hostile"));
    cmd.args(args).envs(env.iter().copied());
    if under_shim {
        cmd.env("LD_PRELOAD", shim())
            .env("NAGLESS_MODE", "nagless")
            .env("NAGLESS_STATS", "1");
    }
    let out = cmd.output().expect("run hostile");
    assert!(
        out.status.success(),
        "hostile {args:?} (shim: {under_shim}): {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stats = stderr.lines().find(|l| l.starts_with("nagless stats:"));
    (
        String::from_utf8(out.stdout).unwrap(),
        stats.unwrap_or("").to_string(),
    )
}

/// The number before `what` in a `nagless stats:` line.
fn stat(line: &str, what: &str) -> u64 {
    let at = line
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {line:?}"));
    line[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.trim_start_matches('(').parse().ok())
        .unwrap_or_else(|| panic!("no number before {what:?} in {line:?}"))
}

/// The `died=N` of a `sigwrite`/`sigsocket` run.
fn died(out: &str) -> u32 {
    out.lines()
        .find_map(|l| l.strip_prefix("died="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no died= in {out:?}"))
}

/// A daemon whose first burst starts in a SIGALRM handler's write, while its main line is
/// inside malloc: the shim used to start its flusher thread (allocating) right there, and
/// about 5 of 100 such children died of a corrupted heap. None may die, as natively.
#[test]
fn writes_and_sockets_made_in_signal_handlers_corrupt_nothing() {
    let _one = exclusive();
    assert_eq!(died(&hostile(&["sigwrite", "100"], false, &[])), 0);
    assert_eq!(died(&hostile(&["sigwrite", "100"], true, &[])), 0);
    // The handler also creates, connects and closes its socket (adoption in a handler).
    assert_eq!(died(&hostile(&["sigsocket", "30"], true, &[])), 0);
}

/// A burst is held (TCP_CORK) when the program execs, by any of libc's ways, or starts a
/// program that inherits the socket: the new program must find no cork of ours on it (its
/// every small write would wait ~200 ms). A 100 ms linger bound, so that the flusher cannot
/// release the burst before a spawned child looks.
#[test]
fn no_cork_of_the_shims_survives_any_exec() {
    let _one = exclusive();
    for v in [
        "execl",
        "execle",
        "execlp",
        "execv",
        "execvpe",
        "fexecve",
        "execveat",
        "posix_spawn",
        "posix_spawnp",
        "system",
        "popen",
    ] {
        let native = hostile(&["exec", v], false, &[]);
        assert_eq!(native.trim(), "cork=0", "{v} natively");
        let shimmed = hostile(&["exec", v], true, &[("NAGLESS_LINGER_US", "100000")]);
        assert_eq!(
            shimmed.trim(),
            "cork=0",
            "{v}: the new program inherited our cork"
        );
    }
}

/// Bad pointers where the shim itself looks (the writev vector in a burst held by MSG_MORE,
/// select's sets and epoll_pwait2's timeout while a burst is held): every call returns what
/// it returns natively, with the same errno, and the program does not crash; the options it
/// reads are its own.
#[test]
fn bad_pointers_get_the_same_answers_as_natively() {
    let _one = exclusive();
    let native = hostile(&["badptr"], false, &[]);
    // A 100 ms bound: the flusher cannot split the shape being taught on a loaded machine.
    let (shimmed, stats) =
        hostile_with_stats(&["badptr"], true, &[("NAGLESS_LINGER_US", "100000")]);
    assert!(native.contains("writev_bad_vector=-1/EFAULT"), "{native}");
    assert_eq!(shimmed, native);
    // The shape was learned, so the writev in the next burst's middle was one the shim
    // looked at (held by MSG_MORE).
    assert!(
        stat(&stats, "sent at their burst's learned shape") >= 2,
        "{stats}"
    );
    // The same under a sandbox that kills a process calling process_vm_readv or
    // process_vm_writev (as OpenSSH's and systemd's do): the shim's looks at the program's
    // memory make no such call (an earlier form did, and died of SIGSYS here).
    let native = hostile(&["sandboxed-badptr"], false, &[]);
    let shimmed = hostile(
        &["sandboxed-badptr"],
        true,
        &[("NAGLESS_LINGER_US", "100000")],
    );
    assert_eq!(shimmed, native);
}

/// A burst on one descriptor of a socket (made by `dup`, `dup2` or `fcntl(F_DUPFD_CLOEXEC)`)
/// ends when the program reads the other: `TCP_CORK` belongs to the socket, and the program
/// waits on the one for an answer to what the other holds. The kernel's `TCP_CORK` is read
/// directly (the shim shows the program its own view); a 100 ms bound keeps the flusher out.
#[test]
fn a_read_on_a_socket_ends_the_burst_held_on_its_duplicate() {
    let native = hostile(&["duplicates"], false, &[]);
    assert!(
        native.lines().all(|l| l.ends_with("held=0 after_read=0")),
        "{native}"
    );
    let shimmed = hostile(&["duplicates"], true, &[("NAGLESS_LINGER_US", "100000")]);
    for way in ["dup", "dup2", "fcntl"] {
        assert!(
            shimmed.contains(&format!("{way}: held=1 after_read=0")),
            "{way}: the burst must be held, then end at the read:\n{shimmed}"
        );
    }
}

/// One session of an inetd-style service: `systemd-socket-activate --inetd` (from Debian)
/// accepts, forks and execs `tests/c/inetd_helper` with the connection as its stdin and
/// stdout; the helper answers each request line with a header and a body, written
/// separately. Returns the median exchange time and the data segments the helper's socket sent
/// per exchange (it reports them itself, from TCP_INFO); the median exchange time. `mode`: None natively, else the
/// shim's mode, preloaded into the launcher and passed on to the helper.
fn inetd_session(mode: Option<&str>, exchanges: u32) -> (Duration, f64) {
    // A 100 ms linger bound: an answer must leave at the helper's read of stdin, not at the
    // flusher's bound.
    let port = free_port();
    let mut cmd = Command::new(tool_path("systemd-socket-activate").unwrap());
    cmd.args(["--accept", "--inetd", "-l"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(m) = mode {
        cmd.env("LD_PRELOAD", shim()).env("NAGLESS_MODE", m).args([
            "-E",
            "LD_PRELOAD",
            "-E",
            "NAGLESS_MODE",
        ]);
    }
    cmd.arg(c_program("inetd_helper"));
    let mut launcher = common::Started(cmd.spawn().expect("systemd-socket-activate"));
    common::wait_for_port(port);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut times = Vec::new();
    for _ in 0..exchanges {
        let start = Instant::now();
        s.write_all(b"q\n").unwrap();
        let mut got = 0;
        let mut buf = [0u8; 64];
        while got < 25 {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "the helper closed early");
            got += n;
        }
        assert_eq!(got, 25, "one answer per request");
        times.push(start.elapsed());
    }
    times.sort();
    let median = times[times.len() / 2];
    drop(s);
    // The helper reports at end of input, then the launcher goes on listening: read until
    // this session's report (the port probe had a helper of its own, which served nothing),
    // then stop the launcher (by its PID, through `Started`).
    let report = format!("exchanges={exchanges} ");
    let mut err = launcher.0.stderr.take().unwrap();
    let mut text = String::new();
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + Duration::from_secs(10);
    while !text
        .lines()
        .any(|l| l.starts_with(&report) && l.contains("segs="))
        && Instant::now() < deadline
    {
        match err.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    drop(launcher);
    let line = text.lines().find(|l| l.starts_with(&report)).unwrap_or("");
    let fields: HashMap<&str, f64> = line
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
        .collect();
    assert_eq!(fields.get("exchanges"), Some(&(exchanges as f64)), "{text}");
    (median, fields["segs"] / exchanges as f64)
}

/// `nagless run` of a set-user-ID program by a user it does not belong to: the loader would
/// ignore LD_PRELOAD, so `nagless run` refuses it with a clear message and exit status 2
/// (root only: it makes the program and drops to user `nobody`).
#[test]
fn a_setuid_program_of_another_user_is_refused() {
    if !common::root_or_skip("a setuid program and another user") || !have_tool("setpriv") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("nagless-setuid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("suid-true");
    std::fs::copy("/bin/true", &prog).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // A copy user nobody can read (the cache is in root's home).
    let shim_path = dir.join("libnagless_preload.so");
    std::fs::copy(shim(), &shim_path).unwrap();
    let run = |setuid: bool| {
        let mode = if setuid { 0o4755 } else { 0o755 };
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(mode)).unwrap();
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_nagless"))
            .args(["run", "--"])
            .arg(&prog)
            .env("NAGLESS_PRELOAD", &shim_path)
            .output()
            .unwrap()
    };
    let refused = run(true);
    let plain = run(false);
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("set-user-ID"), "{err}");
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
}

/// Containers and init scripts start daemons through a command that drops privileges
/// (`setpriv`, `runuser`, `su`, `gosu`): the program then runs as a user who must still be
/// able to read the shim `LD_PRELOAD` names. Run by root, `nagless run` unpacks it where
/// every user can read it, so the shim is loaded in the program; a shim only its owner can
/// read is refused with the way out, never silently absent.
#[test]
fn a_program_started_as_another_user_still_gets_the_shim() {
    if !common::root_or_skip("another user") || !have_tool("setpriv") {
        return;
    }
    let python = "/usr/bin/python3";
    let drop = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let out = Command::new(env!("CARGO_BIN_EXE_nagless"))
        .args(["run", "--", "setpriv"])
        .args(drop)
        .args([python, "-c"])
        .arg(
            "import os; print(os.getuid(), 'libnagless_preload' in open('/proc/self/maps').read())",
        )
        .env_remove("NAGLESS_PRELOAD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("cannot be preloaded"), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "65534 True",
        "{err}"
    );
    // A copy in a directory nobody else may enter: refused, with the way out.
    let dir = std::env::temp_dir().join(format!("nagless-private-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let private = dir.join("libnagless_preload.so");
    std::fs::copy(shim(), &private).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nagless"))
        .args(["run", "--", "setpriv"])
        .args(drop)
        .arg("/bin/true")
        .env("NAGLESS_PRELOAD", &private)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot read the shim"), "{err}");
}

/// A service whose stderr is its connection (inetd's, vsftpd's sessions): `--stats` must not
/// write its line there, where the peer would read it as part of the program's stream.
#[test]
fn the_stats_line_never_goes_into_a_connection() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The service: connected, its connection as stdin, stdout and stderr, then a program that
    // writes two lines and leaves by `exit` (where the shim's report is made).
    let launcher = format!(
        "import os, socket, sys\n\
         s = socket.create_connection(('127.0.0.1', {port}))\n\
         for fd in (0, 1, 2): os.dup2(s.fileno(), fd)\n\
         s.close()\n\
         os.execvp(sys.argv[1], sys.argv[1:])\n"
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_nagless"))
        .args(["run", "--stats", "--", "python3", "-c", &launcher])
        .args([
            "python3",
            "-c",
            "import os; os.write(1, b'one\\n'); os.write(1, b'two\\n')",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = String::new();
    conn.read_to_string(&mut got).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        got, "one\ntwo\n",
        "the peer read more than the program wrote"
    );
}

/// openbsd-inetd removes `LD_PRELOAD` from its services' environment unless it is started
/// with `-E`: `nagless run -- inetd` without it is refused with the way out.
#[test]
fn inetd_without_its_environment_flag_is_refused() {
    let dir = std::env::temp_dir().join(format!("nagless-inetd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inetd = dir.join("inetd");
    std::fs::copy("/bin/true", &inetd).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nagless"))
            .args(["run", "--"])
            .arg(&inetd)
            .args(args)
            .output()
            .unwrap()
    };
    let refused = run(&["-d"]);
    let with_e = run(&["-dE"]);
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("-E"), "{err}");
    assert!(
        with_e.status.success(),
        "{}",
        String::from_utf8_lossy(&with_e.stderr)
    );
}

/// The cache fallback `/tmp/nagless-$USER` made a symlink (by another user, to a directory
/// of ours): `nagless run` refuses it rather than follow it.
#[test]
fn a_symlinked_cache_directory_is_refused() {
    let base = std::env::temp_dir().join(format!("nagless-cache-{}", std::process::id()));
    let target = base.join("real");
    std::fs::create_dir_all(&target).unwrap();
    let user = format!("symlinked{}", std::process::id());
    let link = base.join(format!("nagless-{user}"));
    std::os::unix::fs::symlink(&target, &link).unwrap();
    // Root unpacks to a system directory first: the fallback is another user's.
    let mut cmd = if common::is_root() && have_tool("setpriv") {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_nagless"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_nagless"))
    };
    let out = cmd
        .args(["run", "--print-shim"])
        .env_remove("HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("NAGLESS_PRELOAD")
        .env("USER", &user)
        .env("TMPDIR", &base)
        .output()
        .unwrap();
    let empty = std::fs::read_dir(&target).unwrap().next().is_none();
    let _ = std::fs::remove_dir_all(&base);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(empty, "nothing may be written through the link");
}

/// A daemon stopped by SIGTERM (how systemd and docker stop them) never reaches its exit
/// handlers, so `--stats` prints nothing; `--stats-file FILE` keeps the counters current in
/// `FILE.PID` without touching the program's signal handlers. Here python's http.server
/// (HTTP/1.0: a connection per request) answers five requests and is stopped by SIGTERM; its
/// file then counts them.
#[test]
fn a_daemon_stopped_by_sigterm_leaves_its_figures() {
    let _one = exclusive();
    let dir = std::env::temp_dir().join(format!("nagless-statsfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nagless"));
    cmd.args(["run", "--stats-file"])
        .arg(dir.join("stats"))
        .args(["--", "python3", "-m", "http.server", "--bind", "127.0.0.1"])
        .arg(port.to_string())
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut server = common::Started(cmd.spawn().unwrap());
    common::wait_for_port(port);
    for _ in 0..5 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        assert!(answer.starts_with(b"HTTP/1.0 200"), "{answer:?}");
    }
    // `nagless run` became the server (exec): the file is named by its PID.
    let pid = server.0.id();
    let file = dir.join(format!("stats.{pid}"));
    let read = || std::fs::read_to_string(&file).unwrap_or_default();
    let counted = |t: &str| t.contains("nagless stats:") && stat(t, "data segments") >= 5;
    // Current within about a second of the last change; allow ten.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !counted(&read()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = server.0.wait().unwrap();
    let mut err = String::new();
    server
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let text = read();
    let _ = std::fs::remove_dir_all(&dir);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(exit.signal(), Some(libc::SIGTERM), "stopped by the signal");
    assert!(
        !err.contains("nagless stats:"),
        "no exit handler ran: {err}"
    );
    // The listener, the port probe's connection and five more; each answer one burst.
    assert!(stat(&text, "sockets") >= 6, "{text:?}");
    assert!(stat(&text, "bursts") >= 5, "{text}");
    assert!(stat(&text, "data segments") >= 5, "{text}");
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    /// An inetd-style service under the shim: its inherited connection (stdin and stdout, one
    /// socket) is held and released at its read of stdin, so each answer leaves as one segment
    /// (natively and with only TCP_NODELAY: two) and without the stall (natively each exchange
    /// waits for a delayed ACK). "Without the stall": the median exchange takes less than half a
    /// stall (20 ms) and less than half the native one, where natively an exchange takes tens of
    /// milliseconds and a burst left to the 100 ms linger bound would take 100. (How close it
    /// comes to the NODELAY-only preload is a benchmark's question, which a loaded machine
    /// blurs: printed here.)
    #[test]
    fn an_inetd_style_service_is_coalesced_without_the_stall() {
        let _one = exclusive();
        if !have_tool("systemd-socket-activate") {
            return;
        }
        let (native_t, native_segs) = inetd_session(None, 20);
        let (nodelay_t, nodelay_segs) = inetd_session(Some("nodelay"), 20);
        let (shim_t, shim_segs) = inetd_session(Some("nagless"), 20);
        eprintln!(
            "native {native_t:?} {native_segs} segs/ex, nodelay {nodelay_t:?} {nodelay_segs}, shim {shim_t:?} {shim_segs}"
        );
        assert!(
            native_segs >= 1.9 && nodelay_segs >= 1.9,
            "two writes, two segments"
        );
        assert!(
            shim_segs <= 1.2,
            "the answer's two writes must leave as one segment: {shim_segs} per exchange"
        );
        assert!(
            native_t >= Duration::from_millis(30),
            "natively each exchange must stall: {native_t:?}"
        );
        assert!(
            shim_t < Duration::from_millis(20) && shim_t < native_t / 2,
            "the stall is gone: {shim_t:?} vs {native_t:?} natively"
        );
    }

    /// Byte integrity under stress (`tests/c/stress.c`): 24 streams, each written by seeded
    /// random calls and sizes (write, writev, send, sendmsg, sendfile, splice), by four threads
    /// under the program's lock, across fork, from a signal handler, non-blocking against a slow
    /// reader, continued by a program started by each exec variant, and, timed, by children the
    /// shim is not told about (vfork, clone, _Fork), by a process the socket was passed to
    /// after its sender was killed, and by a writer stopped for 300 ms just after a write; every
    /// stream must arrive exactly as written and as long as written. Five seeds, natively (the
    /// control) and under the shim, each run stopped after 60 s at most.
    ///
    /// Timed streams: the worst delay of a write, from its call to the verifier's read of its
    /// last byte, must stay below 100 ms under the shim for vfork, clone, _Fork and passed (a
    /// ~200 ms hold of the kernel's is a failure; natively 1-2 ms), and no child may have to be
    /// killed for not ending (a clone child whose flusher thread outlives it). A stopped writer's
    /// worst delay is printed only (natively ~1 ms; a burst held when it stops waits for the
    /// kernel's ~200 ms timer, which nothing of the shim's can end while it is stopped).
    #[test]
    fn no_byte_is_lost_or_reordered_under_stress() {
        let _one = exclusive();
        let (mut late, mut hung) = (Vec::new(), 0);
        for seed in 1..=5u32 {
            for under_shim in [false, true] {
                let mut cmd = Command::new(c_program("stress"));
                cmd.arg(seed.to_string())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                if under_shim {
                    cmd.env("LD_PRELOAD", shim()).env("NAGLESS_MODE", "nagless");
                }
                let mut child = common::Started(cmd.spawn().unwrap());
                let status = common::wait_at_most(&mut child.0, Duration::from_secs(60))
                    .unwrap_or_else(|| panic!("seed {seed}: still running after 60 s"));
                let mut out = String::new();
                child
                    .0
                    .stdout
                    .take()
                    .unwrap()
                    .read_to_string(&mut out)
                    .unwrap();
                assert!(
                    status.success(),
                    "seed {seed} (shim: {under_shim}): {status:?}\n{out}"
                );
                let summary = out.lines().last().unwrap_or("");
                println!("seed {seed} (shim: {under_shim}): {summary}");
                assert!(
                    summary.starts_with("streams=24 ok=24 bad=0 writer_failures=0 "),
                    "seed {seed} (shim: {under_shim}):\n{out}"
                );
                let f = shim_support::fields(summary);
                let field = |k: &str| {
                    *f.get(k)
                        .unwrap_or_else(|| panic!("seed {seed}: no {k}= in {summary}"))
                };
                let _ = field("worst_ms_stopped"); // printed above; not judged (see the doc)
                if under_shim {
                    late.extend(
                        ["vfork", "clone", "_Fork", "passed"]
                            .iter()
                            .map(|s| (seed, *s, field(&format!("worst_ms_{s}"))))
                            .filter(|&(_, _, ms)| !(0..100).contains(&ms)),
                    );
                    hung += field("hung_children");
                }
            }
        }
        assert!(
            late.is_empty(),
            "(seed, scenario, worst delay in ms; -1: bytes that never arrived): {late:?}"
        );
        assert_eq!(
            hung, 0,
            "children killed because they never ended by themselves"
        );
    }
}
