//! The shim inside programs that do what real daemons do and that a careful shim must
//! survive: writes from signal handlers, every way to exec, a connection inherited as stdin
//! and stdout, bad pointers, set-user-ID programs, a hostile cache directory. Each case is a
//! small C program of `tests/c/` (or a real one from Debian) run natively and under the shim;
//! loopback only, every program started here stopped here.

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
    let mut cmd = Command::new(c_program("hostile"));
    cmd.args(args).envs(env.iter().copied());
    if under_shim {
        cmd.env("LD_PRELOAD", shim()).env("NAGLESS_MODE", "nagless");
    }
    let out = cmd.output().expect("run hostile");
    assert!(
        out.status.success(),
        "hostile {args:?} (shim: {under_shim}): {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
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
    let shimmed = hostile(&["badptr"], true, &[]);
    assert!(native.contains("writev_bad_vector=-1/EFAULT"), "{native}");
    assert_eq!(shimmed, native);
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

/// An inetd-style service under the shim: its inherited connection (stdin and stdout, one
/// socket) is held and released at its read of stdin, so each answer leaves as one segment
/// (natively and with only TCP_NODELAY: two) and as fast as with TCP_NODELAY (natively each
/// exchange waits for a delayed ACK). Margins: "as fast" is within 3 ms or 3x of the
/// NODELAY-only preload (median exchange), where natively an exchange takes tens of
/// milliseconds and a burst left to the 100 ms linger bound would take 100.
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
        shim_t <= nodelay_t * 3 + Duration::from_millis(3),
        "slower than NODELAY alone: {shim_t:?} vs {nodelay_t:?}"
    );
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
    let out = Command::new(env!("CARGO_BIN_EXE_nagless"))
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
