//! `nagless fix` on unmodified programs from Debian, in cgroups (and a network namespace) the
//! tests create and remove: a running server fixed with no restart (its existing keep-alive
//! connection and every new one stop stalling, a neighbouring cgroup's do not, and the undo
//! puts the stall back); a client that cannot be changed, fixed from its server's side by
//! bounding the server's delayed ACK; a static and a setuid binary reached all the same (their
//! sockets read through pidfd_getfd); the selection's port and cgroup kept to, and SIGTERM
//! ending the fix; a pid sharing its cgroup fixed alone; a program in its own network
//! namespace; the pinned fix listed and removed; and the errors. Root only (BPF, cgroups,
//! pidfd_getfd); skipped otherwise (a failure under CI).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nagless_test_support::{exclusive, fixed_port, http_server_args, root_or_skip, wait_for_port};

fn nagless() -> &'static str {
    env!("CARGO_BIN_EXE_nagless")
}

/// A cgroup (v2) made for one test, removed (with what runs in it) when dropped.
struct Cgroup {
    dir: PathBuf,
    children: Vec<Child>,
}

impl Cgroup {
    fn new(name: &str) -> Cgroup {
        Cgroup::named(&format!("nagless-test-{name}-{}", std::process::id()))
    }

    /// A cgroup of exactly this name, under the cgroup v2 mount.
    fn named(name: &str) -> Cgroup {
        let root = nagless_fix::target::cgroup2_root().expect("cgroup v2");
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        Cgroup {
            dir,
            children: Vec::new(),
        }
    }

    /// Starts `cmd` inside the cgroup (it moves itself in, then execs).
    fn spawn(&mut self, program: &str, args: &[&str], cwd: &Path) -> u32 {
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
            .arg(&self.dir)
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
fn www() -> PathBuf {
    let d = std::env::temp_dir().join(format!("nagless-fix-www-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("index.html"), "hello\n").unwrap();
    d
}

/// The median of five GETs on one keep-alive connection, ms (after two not counted: a
/// connection's first exchanges get quick ACKs).
fn gets(s: &mut TcpStream) -> f64 {
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

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Starts `nagless fix ARGS` and waits for its first line (the fix is in place then).
fn start_fix(args: &[&str]) -> (Child, String) {
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
fn finish_fix(mut child: Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "nagless fix: {st}");
            return;
        }
        assert!(Instant::now() < deadline, "nagless fix did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn fix(args: &[&str]) -> Output {
    Command::new(nagless())
        .arg("fix")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_running_server_is_fixed_without_restart_and_the_fix_undone() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _x = exclusive();
    let www = www();
    let (mut cg, mut other) = (Cgroup::new("server"), Cgroup::new("neighbour"));
    let (port, port2) = (fixed_port(), fixed_port());
    for (g, p) in [(&mut cg, port), (&mut other, port2)] {
        let mut args = Command::new("python3");
        http_server_args(&mut args, p);
        let args: Vec<String> = args
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        g.spawn("python3", &args, &www);
        wait_for_port(p);
    }
    // Headers and body are two writes: each answer waits for the client's delayed ACK.
    let mut kept = connect(port);
    let before = gets(&mut kept);
    assert!(before >= 30.0, "no stall to fix: {before:.1} ms");

    let cgroup = cg.dir.to_str().unwrap().to_owned();
    let id = nagless_fix::attach::cgroup_id(&cg.dir).unwrap();
    let (child, line) = start_fix(&["--cgroup", &cgroup, "--nodelay", "--duration", "3s"]);
    assert!(line.contains("1 existing connection(s) changed"), "{line}");
    // It is seen attached (as `nagless watch` looks for it), and to that cgroup only.
    let attached = nagless_fix::attach::attached_cgroups();
    assert!(attached.contains(&id), "{attached:?}");
    let other_id = nagless_fix::attach::cgroup_id(&other.dir).unwrap();
    assert!(!attached.contains(&other_id), "{attached:?}");
    let during = gets(&mut kept);
    let fresh = gets(&mut connect(port));
    let neighbour = gets(&mut connect(port2));
    assert!(
        during < 15.0,
        "the existing connection still stalls: {during:.1} ms"
    );
    assert!(fresh < 15.0, "a new connection stalls: {fresh:.1} ms");
    assert!(
        neighbour >= 30.0,
        "the neighbouring cgroup's connection changed: {neighbour:.1} ms"
    );
    finish_fix(child);
    assert!(!nagless_fix::attach::attached_cgroups().contains(&id));
    // Undone: the kept connection has its option back, and stalls again.
    let after = gets(&mut kept);
    assert!(after >= 30.0, "not undone: {after:.1} ms");
    let _ = std::fs::remove_dir_all(&www);
}

/// The median of five request/answer rounds on one connection to redis, each request sent as
/// two writes (the second waits for redis's ACK of the first), ms; after two not counted.
fn split_pings(s: &mut TcpStream) -> f64 {
    let mut ms: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            s.write_all(b"*1\r\n$4\r\n").unwrap();
            s.write_all(b"PING\r\n").unwrap();
            let mut buf = [0u8; 7];
            s.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"+PONG\r\n");
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let mut ms = ms.split_off(2);
    ms.sort_by(f64::total_cmp);
    ms[2]
}

#[test]
fn a_client_that_cannot_change_is_fixed_from_its_servers_side() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _x = exclusive();
    let mut cg = Cgroup::new("redis");
    let port = fixed_port();
    let dir = std::env::temp_dir();
    cg.spawn(
        "redis-server",
        &[
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        &dir,
    );
    wait_for_port(port);
    let mut s = connect(port);
    let before = split_pings(&mut s);
    assert!(before >= 30.0, "no stall to fix: {before:.1} ms");
    let cgroup = cg.dir.to_str().unwrap().to_owned();
    let (child, _) = start_fix(&[
        "--cgroup",
        &cgroup,
        "--ack-delay-max",
        "8ms",
        "--duration",
        "2s",
    ]);
    let during = split_pings(&mut s);
    let fresh = split_pings(&mut connect(port));
    // The stall is now the bound (8 ms, at most a tick or two more), not 40 ms; on the
    // connection that existed, only where the kernel has TCP_DELACK_MAX_US (Linux 6.15).
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    if nagless_fix::plan::parse_release(&release).is_some_and(|v| v >= (6, 15)) {
        assert!(during < 25.0, "existing connection: {during:.1} ms");
    }
    assert!(fresh < 25.0, "new connection: {fresh:.1} ms");
    finish_fix(child);
}

#[test]
fn static_and_setuid_binaries_are_reached() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _x = exclusive();
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "/bin/busybox (Debian's busybox-static; ./scripts/test installs it)"
    );
    // A setuid-root copy, started by nobody; removed however the test ends.
    struct Gone(PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = std::env::temp_dir().join(format!("nagless-fix-suid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _gone = Gone(dir.clone());
    let suid = dir.join("busybox");
    std::fs::copy(busybox, &suid).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let suid = suid.to_str().unwrap().to_owned();
    for (what, program, pre, bin) in [
        ("static", "/bin/busybox", vec![], "/bin/busybox"),
        (
            "setuid",
            "setpriv",
            vec![
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                suid.as_str(),
            ],
            suid.as_str(),
        ),
    ] {
        let mut cg = Cgroup::new(what);
        let port = fixed_port();
        let p = port.to_string();
        let mut args = pre.clone();
        // A persistent server: a child per connection runs `cat` on it (an echo server).
        args.extend(["nc", "-ll", "-p", &p, "-e", bin, "cat"]);
        let pid = cg.spawn(program, &args, &dir);
        wait_for_port(port);
        let echo = |conn: &mut TcpStream| {
            conn.write_all(b"hi\n").unwrap();
            let mut echo = [0u8; 3];
            conn.read_exact(&mut echo).unwrap();
        };
        let mut conn = connect(port);
        echo(&mut conn);
        // The kernel's own state of the program's socket, not nagless's report of it.
        assert_eq!(nodelay_in(&cg), [0], "{what}: before");
        let (child, line) =
            start_fix(&["--pid", &pid.to_string(), "--nodelay", "--duration", "2s"]);
        assert!(
            line.contains("1 existing connection(s) changed"),
            "{what}: {line}"
        );
        assert_eq!(nodelay_in(&cg), [1], "{what}: the existing connection");
        // A new connection, accepted while the fix runs, gets it from the kernel program.
        let mut second = connect(port);
        echo(&mut second);
        let mut both = nodelay_in(&cg);
        both.sort();
        assert_eq!(both, [1, 1], "{what}: with a new connection");
        finish_fix(child);
        drop(second);
        std::thread::sleep(Duration::from_millis(200));
        // The existing connection is put back (a new one keeps what it was given).
        echo(&mut conn);
        assert_eq!(nodelay_in(&cg), [0], "{what}: after the undo");
    }
}

/// TCP_NODELAY of every connected TCP socket of the processes in `cg`, read through a copy of
/// each descriptor (`pidfd_getfd`): the kernel's own state, whatever nagless says. One value
/// per socket, however many descriptors share it.
fn nodelay_in(cg: &Cgroup) -> Vec<i32> {
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
            // SAFETY: `copy` is a descriptor this function opened and closes once.
            unsafe { libc::close(copy) };
            if let (Some(0), Some(n)) = (listening, nodelay) {
                found.insert(link, n.min(1));
            }
        }
        // SAFETY: `pidfd` is a descriptor this function opened and closes once.
        unsafe { libc::close(pidfd) };
    }
    found.into_values().collect()
}

/// `--container` and `--unit` find their cgroups the way `nagless watch` names them: a
/// container by a run of 64 hex digits in its cgroup's name, a unit by its directory.
#[test]
fn containers_and_units_are_found_by_their_cgroups() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _x = exclusive();
    let id = format!("{:016x}", std::process::id()).repeat(4);
    let unit = format!("nagless-test-{}", std::process::id());
    for (name, args) in [
        (
            format!("docker-{id}.scope"),
            vec!["--container".to_string(), id[..12].to_string()],
        ),
        (
            format!("{unit}.service"),
            vec!["--unit".to_string(), unit.clone()],
        ),
    ] {
        let mut cg = Cgroup::named(&name);
        cg.spawn("sleep", &["30"], Path::new("/"));
        // The process is in its cgroup once `sh` has moved it and exec'd.
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(cg.dir.join("cgroup.procs"))
            .unwrap()
            .trim()
            .is_empty()
        {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        all.extend(["--nodelay", "--duration", "0.2s"]);
        let o = fix(&all);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{name}: {o:?}");
        assert!(
            out.contains(&format!("on cgroup {} (1 processes)", cg.dir.display())),
            "{name}: {out}"
        );
    }
    let o = fix(&["--container", "fedcba9876543210", "--nodelay"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let o = fix(&["--unit", "nagless-no-such-unit", "--nodelay"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

#[test]
fn a_pinned_fix_is_listed_and_removed() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _x = exclusive();
    let www = www();
    let mut cg = Cgroup::new("pinned");
    let cgroup = cg.dir.to_str().unwrap().to_owned();
    let port = fixed_port();
    let mut cmd = Command::new("python3");
    http_server_args(&mut cmd, port);
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cg.spawn("python3", &args, &www);
    wait_for_port(port);
    // However the test ends, the pin goes (before the cgroup does).
    struct Unpin(String);
    impl Drop for Unpin {
        fn drop(&mut self) {
            let _ = fix(&["--remove", "--cgroup", &self.0]);
        }
    }
    let _unpin = Unpin(cgroup.clone());
    let p = port.to_string();
    let o = fix(&["--cgroup", &cgroup, "--nodelay", "--port", &p, "--persist"]);
    assert!(o.status.success(), "{o:?}");
    // The command has ended; the pinned program still fixes each new connection.
    let fixed = gets(&mut connect(port));
    assert!(
        fixed < 15.0,
        "pinned, a new connection stalls: {fixed:.1} ms"
    );
    let list = fix(&["--list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.lines().any(|l| l.contains(&cgroup)
            && l.contains("TCP_NODELAY")
            && l.contains(&format!("[{port}]"))
            && l.contains("1 new connection(s) selected")),
        "{text}"
    );
    let o = fix(&["--remove", "--cgroup", &cgroup]);
    assert!(o.status.success(), "{o:?}");
    let list = String::from_utf8_lossy(&fix(&["--list"]).stdout).into_owned();
    assert!(!list.contains(&cgroup), "{list}");
    // Removed: new connections stall again.
    let after = gets(&mut connect(port));
    assert!(after >= 30.0, "still fixed after --remove: {after:.1} ms");
    let _ = std::fs::remove_dir_all(&www);
}

/// With neither --nodelay nor --ack-delay-max, the fix is chosen from what a watch of the
/// host sees: a server whose answers wait (its own writes held) gets TCP_NODELAY; a server
/// whose client's requests wait for its ACKs gets a delayed-ACK bound; a quiet one, nothing.
#[test]
fn the_fix_is_chosen_from_what_watch_sees() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _x = exclusive();
    let www = www();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = |port: u16, split: bool| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut s = connect(port);
            let deadline = Instant::now() + Duration::from_secs(20);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                if split {
                    split_pings(&mut s);
                } else {
                    gets(&mut s);
                }
            }
        })
    };
    let mut web = Cgroup::new("chosen-web");
    let web_port = fixed_port();
    let mut cmd = Command::new("python3");
    http_server_args(&mut cmd, web_port);
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    web.spawn("python3", &args, &www);
    let mut redis = Cgroup::new("chosen-redis");
    let redis_port = fixed_port();
    let rp = redis_port.to_string();
    redis.spawn(
        "redis-server",
        &[
            "--port",
            &rp,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        &std::env::temp_dir(),
    );
    wait_for_port(web_port);
    wait_for_port(redis_port);
    let loads = [load(web_port, false), load(redis_port, true)];
    for (cg, port, want) in [
        (&web, web_port, "TCP_NODELAY"),
        (&redis, redis_port, "delayed ACKs of at most"),
    ] {
        let p = port.to_string();
        let o = fix(&[
            "--cgroup",
            cg.dir.to_str().unwrap(),
            "--port",
            &p,
            "--observe",
            "2s",
            "--duration",
            "0.2s",
        ]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{o:?}");
        let first = out.lines().next().unwrap_or("");
        assert!(
            first.contains("stall(s) of its own writes")
                && first.contains(&format!("ACKs: {want}")),
            "{want}: {out}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in loads {
        let _ = l.join();
    }
    // A quiet target: nothing to choose.
    let mut quiet = Cgroup::new("chosen-quiet");
    quiet.spawn("sleep", &["30"], Path::new("/"));
    let o = fix(&["--cgroup", quiet.dir.to_str().unwrap(), "--observe", "0.5s"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to do"));
    let _ = std::fs::remove_dir_all(&www);
}

/// `--pid` of a process that shares its cgroup (here, the test's own) changes only its own
/// connections, looking again for new ones; when it exits, the fix ends at once, cleanly.
#[test]
fn a_process_that_exits_mid_way_ends_the_fix() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _x = exclusive();
    let mut short = Command::new("sleep").arg("1").spawn().unwrap();
    let t = Instant::now();
    let o = fix(&[
        "--pid",
        &short.id().to_string(),
        "--nodelay",
        "--duration",
        "20s",
    ]);
    let _ = short.wait();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(
        out.contains("their cgroup holds others") && out.contains("exited"),
        "{out}"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn bad_requests_are_refused_before_anything_is_attached() {
    let o = fix(&["--pid", "999999999", "--nodelay"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no process 999999999"));
    let o = fix(&["--pid", "1", "--ack-delay-max", "1ms"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("timer ticks"));
    let o = fix(&["--list", "--nodelay"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let o = fix(&["--nodelay"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // Not root: the kernel refuses, the message says what it takes, nothing stays attached.
    if nagless_test_support::is_root() && nagless_test_support::have_tool("setpriv") {
        let cg = Cgroup::new("notroot");
        let o = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .arg(nagless())
            .args(["fix", "--cgroup", cg.dir.to_str().unwrap(), "--nodelay"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        assert!(err.contains("needs root"), "{err}");
    }
}

/// A new connection made from inside `cg` to 127.0.0.1:`port` by an unmodified python3:
/// its TCP_NODELAY as the program itself sees it (1 set, 0 not).
fn nodelay_of_a_new_connection(cg: &Cgroup, port: u16) -> String {
    const PROBE: &str = "import socket, sys\n\
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)\n\
import time; time.sleep(0.05)\n\
print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))\n";
    let out = Command::new("timeout")
        .args([
            "10",
            "sh",
            "-c",
            r#"echo $$ > "$0/cgroup.procs" && exec "$@""#,
        ])
        .arg(&cg.dir)
        .args(["python3", "-c", PROBE, &port.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Two listeners that accept and hold whatever connects, until the test ends.
fn two_listeners() -> [u16; 2] {
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

#[test]
fn options_change_only_inside_the_selection_and_go_when_a_signal_ends_the_fix() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive();
    let (target, neighbour) = (Cgroup::new("selected"), Cgroup::new("beside"));
    let [selected, other] = two_listeners();
    let cgroup = target.dir.display().to_string();
    // Before: the kernel's default on every new connection.
    assert_eq!(nodelay_of_a_new_connection(&target, selected), "0");
    let (mut child, _) = start_fix(&[
        "--cgroup",
        &cgroup,
        "--port",
        &selected.to_string(),
        "--nodelay",
    ]);
    // Inside the selection: set by the fix, seen by the program.
    assert_eq!(nodelay_of_a_new_connection(&target, selected), "1");
    // What the running fix sets is read back from its own map (as `nagless watch` reads it
    // to mark the rows it covers).
    let id = nagless_fix::attach::cgroup_id(&target.dir).unwrap();
    let running = nagless_fix::attach::running();
    let ours = running
        .iter()
        .find(|r| r.cgroup == id)
        .expect("a running fix");
    let (action, ports) = ours.config.expect("its config map").action();
    assert!(action.nodelay);
    assert_eq!(ports.as_slice(), [selected]);
    // The same cgroup to another port, and the neighbouring cgroup to the selected port: as
    // they were.
    assert_eq!(nodelay_of_a_new_connection(&target, other), "0");
    assert_eq!(nodelay_of_a_new_connection(&neighbour, selected), "0");
    // SIGTERM (as systemd or kill sends it) ends the fix cleanly and detaches the program.
    // SAFETY: kill(2) on the PID of a child this test started and has not yet waited for.
    let r = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(r, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "nagless fix did not end on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "nagless fix after SIGTERM: {status}");
    assert_eq!(nodelay_of_a_new_connection(&target, selected), "0");
    let listed = fix(&["--list"]);
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains(&cgroup),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
}

/// An unmodified python3 in `cg` holding one connection to 127.0.0.1:`port`; each line it
/// reads, it answers with that socket's TCP_NODELAY.
struct Holder {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Holder {
    fn start(cg: &Cgroup, port: u16) -> Holder {
        const HOLD: &str = "import socket, sys\n\
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)\n\
print('ready', flush=True)\n\
for _ in sys.stdin:\n    print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), flush=True)\n";
        let mut child = Command::new("sh")
            .args(["-c", r#"echo $$ > "$0/cgroup.procs" && exec "$@""#])
            .arg(&cg.dir)
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

    fn nodelay(&mut self) -> String {
        self.child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(b"?\n")
            .unwrap();
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

#[test]
fn a_pid_that_shares_its_cgroup_is_fixed_alone() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive();
    let shared = Cgroup::new("shared");
    let [port, _] = two_listeners();
    let (mut target, mut beside) = (Holder::start(&shared, port), Holder::start(&shared, port));
    assert_eq!(
        (target.nodelay().as_str(), beside.nodelay().as_str()),
        ("0", "0")
    );
    let pid = target.child.id().to_string();
    let (child, line) = start_fix(&["--pid", &pid, "--nodelay", "--duration", "2s"]);
    assert!(line.contains("their cgroup holds others"), "{line}");
    // The selected process's existing connection is changed; its neighbour's is not.
    assert_eq!(target.nodelay(), "1", "{line}");
    assert_eq!(beside.nodelay(), "0");
    finish_fix(child);
    // The undo puts the option back.
    assert_eq!(target.nodelay(), "0");
}

/// A network namespace made for one test (as a container has its own), removed when dropped.
struct Netns(String);

impl Netns {
    fn new(name: &str) -> Netns {
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

#[test]
fn a_program_in_its_own_network_namespace_is_reached_through_its_cgroup() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive();
    let (cg, ns) = (Cgroup::new("container"), Netns::new("container"));
    // An unmodified python3 inside the namespace and the cgroup, as in a container: a server
    // and a client of its own on the namespace's loopback; TCP_NODELAY of the client's socket.
    const PROBE: &str = "import socket\n\
l = socket.create_server(('127.0.0.1', 0))\n\
c = socket.create_connection(l.getsockname(), timeout=5)\n\
s, _ = l.accept()\n\
print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))\n";
    let probe = || {
        // Into the cgroup first: `ip netns exec` mounts the namespace's own /sys.
        let out = Command::new("timeout")
            .args([
                "10",
                "sh",
                "-c",
                r#"echo $$ > "$0/cgroup.procs" && exec "$@""#,
            ])
            .arg(&cg.dir)
            .args(["ip", "netns", "exec", &ns.0, "python3", "-c", PROBE])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(probe(), "0 0");
    let cgroup = cg.dir.display().to_string();
    let (child, _) = start_fix(&["--cgroup", &cgroup, "--nodelay", "--duration", "2s"]);
    // Both ends of a connection made and accepted in the namespace.
    assert_eq!(probe(), "1 1");
    finish_fix(child);
    assert_eq!(probe(), "0 0");
}
