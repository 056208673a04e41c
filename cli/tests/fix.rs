//! `nagless fix` on unmodified programs from Debian, in cgroups the tests create and remove:
//! a running server fixed with no restart (its existing keep-alive connection and every new
//! one stop stalling, a neighbouring cgroup's do not, and the undo puts the stall back); a
//! client that cannot be changed, fixed from its server's side by bounding the server's
//! delayed ACK; a static and a setuid binary reached all the same (their sockets read through
//! pidfd_getfd); containers and units found; the pinned fix listed and removed; the fix chosen
//! from what watch sees; and the errors. What a fix selects and leaves alone:
//! `fix_selection.rs`. Root only (BPF, cgroups, pidfd_getfd); skipped otherwise (a failure
//! under CI).

mod fix_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fix_support::*;
use nagless_test_support::{
    exclusive_on_host, fixed_port, have_tool, http_server_args, root_or_skip, static_tool,
    wait_for_port,
};

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
fn static_and_setuid_binaries_are_reached() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let Some(busybox) = static_tool("busybox", "busybox-static") else {
        return;
    };
    if !have_tool("setpriv") {
        return;
    }
    let _x = exclusive_on_host("fixes");
    let busybox = busybox.to_str().unwrap();
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
        ("static", busybox, vec![], busybox),
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

/// `--container` and `--unit` find their cgroups the way `nagless watch` names them: a
/// container by a run of 64 hex digits in its cgroup's name, a unit by its directory.
#[test]
fn containers_and_units_are_found_by_their_cgroups() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _x = exclusive_on_host("fixes");
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
            out.contains(&format!("on cgroup {} (1 process)", cg.dir.display())),
            "{name}: {out}"
        );
    }
    let o = fix(&["--container", "fedcba9876543210", "--nodelay"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let o = fix(&["--unit", "nagless-no-such-unit", "--nodelay"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

/// `--pid` of a process that shares its cgroup (here, the test's own) changes only its own
/// connections, looking again for new ones; when it exits, the fix ends at once, cleanly.
#[test]
fn a_process_that_exits_mid_way_ends_the_fix() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _x = exclusive_on_host("fixes");
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
    let me = std::process::id().to_string();
    let o = fix(&["--pid", &me, "--ack-delay-max", "1ms"]);
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

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn a_running_server_is_fixed_without_restart_and_the_fix_undone() {
        if !root_or_skip("nagless fix") {
            return;
        }
        let _x = exclusive_on_host("fixes");
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

    #[test]
    fn a_client_that_cannot_change_is_fixed_from_its_servers_side() {
        if !root_or_skip("nagless fix") || !have_tool("redis-server") {
            return;
        }
        let _x = exclusive_on_host("fixes");
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
        if nagless_host::text::kernel_version(&release).is_some_and(|v| v >= (6, 15)) {
            assert!(during < 25.0, "existing connection: {during:.1} ms");
        }
        assert!(fresh < 25.0, "new connection: {fresh:.1} ms");
        finish_fix(child);
    }

    #[test]
    fn a_pinned_fix_is_listed_and_removed() {
        if !root_or_skip("nagless fix") {
            return;
        }
        let _x = exclusive_on_host("fixes");
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
        if !root_or_skip("nagless fix") || !have_tool("redis-server") {
            return;
        }
        let _x = exclusive_on_host("fixes");
        let www = www();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = |port: u16, split: bool| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut s = connect(port);
                let deadline = Instant::now() + Duration::from_secs(20);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline
                {
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
            // After the line that says it watches: what it saw and chose.
            let first = out.lines().nth(1).unwrap_or("");
            assert!(
                out.lines()
                    .next()
                    .unwrap_or("")
                    .contains("watching 1 process for 2s"),
                "{out}"
            );
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
}
