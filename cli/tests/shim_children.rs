//! The shim in the processes a program starts with an environment of its own making (issue
//! 55): a daemon that empties the environment before it execs its workers (Dovecot keeps only
//! its `import_environment`) gets the shim carried into them, and nothing else of their
//! environment changes; a program that sets `LD_PRELOAD` itself is left its choice, and
//! `--stats` says which program the shim is not in. Each child is an unmodified python3 or
//! `env` that reports what it was started with.

use std::process::{Command, Output};

fn nagless() -> &'static str {
    env!("CARGO_BIN_EXE_nagless")
}

/// `nagless run [--stats] -- python3 -c SCRIPT`, at most 30 s.
fn run(script: &str, stats: bool) -> Output {
    let mut c = Command::new("timeout");
    c.args(["30", nagless(), "run"]);
    if stats {
        c.arg("--stats");
    }
    let out = c.args(["--", "python3", "-c", script]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether the child python3 that prints `HOLDS` runs with the shim loaded: what its own
/// memory map says.
const HOLDS: &str =
    "print('holds', any('libnagless_preload' in l for l in open('/proc/self/maps')))";

#[test]
fn a_child_execd_with_an_emptied_environment_holds_the_shim() {
    // execve with an environment of the program's own (as Dovecot starts its workers), and
    // execv after the program cleared its own environment.
    for how in [
        format!("import os, sys; os.execve(sys.executable, [sys.executable, '-c', {HOLDS:?}], {{'KEEP': '1'}})"),
        format!("import os, sys; os.environ.clear(); os.execv(sys.executable, [sys.executable, '-c', {HOLDS:?}])"),
    ] {
        let out = run(&how, false);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "holds True", "{how}");
    }
    // Natively the same children hold nothing: the check can fail.
    let out = Command::new("python3")
        .args(["-c", &format!("import os, sys; os.execve(sys.executable, [sys.executable, '-c', {HOLDS:?}], {{}})")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "holds False");
}

#[test]
fn only_the_shims_own_variables_are_added() {
    let out = run(
        "import os; os.execve('/usr/bin/env', ['env'], {'KEEP': '1', 'NAGLESS_MODE': 'nodelay'})",
        false,
    );
    let env = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = env.lines().collect();
    lines.sort();
    // The program's own two, its NAGLESS_MODE kept over the shim's; the loader's variable
    // back; the shim's other settings as `nagless run` gave them; nothing else (no PATH,
    // no HOME).
    assert!(lines.contains(&"KEEP=1"), "{env}");
    assert!(lines.contains(&"NAGLESS_MODE=nodelay"), "{env}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("LD_PRELOAD=") && l.contains("libnagless_preload")),
        "{env}"
    );
    for l in &lines {
        assert!(
            *l == "KEEP=1" || l.starts_with("LD_PRELOAD=") || l.starts_with("NAGLESS_"),
            "{l} was added: {env}"
        );
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("NAGLESS_MODE="))
            .count(),
        1,
        "{env}"
    );
}

#[test]
fn a_childs_own_ld_preload_is_left_and_stats_name_the_child() {
    let out = run(
        "import os; os.execve('/usr/bin/env', ['env'], {'LD_PRELOAD': '/nonexistent/x.so'})",
        true,
    );
    let env = String::from_utf8_lossy(&out.stdout);
    assert_eq!(env.trim(), "LD_PRELOAD=/nonexistent/x.so");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("the shim is not in /usr/bin/env").count(),
        1,
        "{err}"
    );
}

/// Debian's Dovecot serving IMAP under `nagless run`, from a configuration of the test's own
/// (a temporary directory, a port of its own, a static user, no TLS): its master starts every
/// worker with an environment of its own making (`import_environment`), and its `imap-login`
/// processes chroot and drop privileges after their exec, then hand each logged-in client's
/// connection to an `imap` worker by `SCM_RIGHTS`. Every process of its tree holds the shim
/// (its own `/proc/PID/maps`), and every one that held a TCP socket, the `imap` worker with
/// the connection it was passed included, wrote its stats file.
#[test]
fn dovecot_serves_imap_with_every_worker_holding_the_shim_and_reporting() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};
    if !nagless_test_support::root_or_skip("Dovecot drops privileges")
        || !nagless_test_support::have_tool_of("dovecot", "dovecot-imapd")
    {
        return;
    }
    let dir = std::env::temp_dir().join(format!("nagless-dovecot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["run", "state", "mail", "stats"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    // Its users (nobody for the mail, dovenull and dovecot for its services) must reach their
    // directories, and write their stats files.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("stats"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let st = Command::new("chown")
        .arg("nobody:nogroup")
        .arg(dir.join("mail"))
        .status()
        .unwrap();
    assert!(st.success());
    let port = nagless_test_support::free_port();
    let d = dir.display();
    let conf = format!(
        "base_dir = {d}/run\nstate_dir = {d}/state\ninstance_name = nagless-test-{port}\n\
         listen = 127.0.0.1\nprotocols = imap\nssl = no\ndisable_plaintext_auth = no\n\
         auth_mechanisms = plain\nlog_path = {d}/dovecot.log\n\
         mail_location = maildir:{d}/mail/%u\n\
         passdb {{\n  driver = static\n  args = password=secret\n}}\n\
         userdb {{\n  driver = static\n  args = uid=nobody gid=nogroup home={d}/mail/%u\n}}\n\
         service imap-login {{\n  inet_listener imap {{\n    address = 127.0.0.1\n    port = {port}\n  }}\n  inet_listener imaps {{\n    port = 0\n  }}\n}}\n"
    );
    std::fs::write(dir.join("dovecot.conf"), conf).unwrap();
    let stats = dir.join("stats/s");
    // `nagless run` execs the program in its place: the child is Dovecot's master.
    let mut master = Command::new(nagless())
        .args(["run", "--stats-file"])
        .arg(&stats)
        .args(["--", "dovecot", "-F", "-c"])
        .arg(dir.join("dovecot.conf"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stop = |master: &mut std::process::Child| {
        // SAFETY: kill(2) on the PID of a child this test started and has not waited for.
        unsafe { libc::kill(master.id() as i32, libc::SIGTERM) };
        nagless_test_support::wait_at_most(master, Duration::from_secs(15))
    };
    let log = || std::fs::read_to_string(dir.join("dovecot.log")).unwrap_or_default();
    let connect = || {
        let start = Instant::now();
        loop {
            if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "no listener: {}",
                log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut s = connect();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut greeting = String::new();
        r.read_line(&mut greeting).unwrap();
        assert!(greeting.starts_with("* OK"), "{greeting}");
        let mut say = |tag: &str, line: &str| -> String {
            write!(s, "{tag} {line}\r\n").unwrap();
            let mut all = String::new();
            loop {
                let mut l = String::new();
                assert!(r.read_line(&mut l).unwrap() > 0, "closed: {}", log());
                all.push_str(&l);
                if l.starts_with(&format!("{tag} ")) {
                    return all;
                }
            }
        };
        assert!(say("a", "LOGIN user secret").contains("a OK"), "{}", log());
        assert!(say("b", "SELECT INBOX").contains("b OK"), "{}", log());
        // A second client, not logged in: an imap-login process of its own.
        let mut other = connect();
        let mut g = [0u8; 4];
        std::io::Read::read_exact(&mut other, &mut g).unwrap();
        // Every process of the master's tree, and whether the shim is in its memory.
        let tree = descendants(master.id());
        let holds: Vec<(u32, String, bool)> = tree
            .iter()
            .filter_map(|&p| {
                let cmd = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
                let maps = std::fs::read_to_string(format!("/proc/{p}/maps")).ok()?;
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                Some((
                    p,
                    cmd.trim().to_string(),
                    maps.contains("libnagless_preload"),
                ))
            })
            .collect();
        let named = |what: &str| {
            holds
                .iter()
                .filter(|(_, c, _)| c.ends_with(what))
                .map(|h| h.0)
                .collect::<Vec<_>>()
        };
        let (imap, login) = (named("/imap"), named("/imap-login"));
        assert!(
            !imap.is_empty() && !login.is_empty(),
            "no imap or imap-login worker: {holds:?}"
        );
        assert!(
            holds.iter().all(|h| h.2),
            "a process without the shim: {holds:?}"
        );
        assert!(say("c", "LOGOUT").contains("c OK"));
        drop(other);
        (imap, login)
    }));
    let status = stop(&mut master);
    let (imap, login) = match result {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            std::panic::resume_unwind(e);
        }
    };
    assert!(status.is_some(), "Dovecot did not stop on SIGTERM");
    // The worker that served the logged-in client, and a login process: each its own file.
    let start = Instant::now();
    let missing = || {
        imap.iter()
            .chain(&login)
            .filter(|p| !dir.join(format!("stats/s.{p}")).exists())
            .copied()
            .collect::<Vec<u32>>()
    };
    while !missing().is_empty() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let files: Vec<String> = std::fs::read_dir(dir.join("stats"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let gone = missing();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(gone.is_empty(), "no stats file from {gone:?}: {files:?}");
}

/// The processes descended from `root` now.
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    tree
}

/// A forked child that answers each line with one write (as rsync's daemon greets, then
/// drops privileges) stays single-threaded under the shim: a burst's first write leaves
/// plainly while the child has no flusher, and only a burst of two writes starts the thread.
/// (A second thread makes every `setuid` a broadcast that waits for it to be scheduled: on a
/// busy machine the child's next answer took milliseconds where natively it takes 0.1.)
#[test]
fn a_forked_child_that_answers_with_single_writes_starts_no_thread() {
    use std::io::{BufRead, BufReader, Write};
    const SERVER: &str = r#"import os, socket
def threads():
    for l in open('/proc/self/status'):
        if l.startswith('Threads:'):
            return int(l.split()[1])
l = socket.create_server(('127.0.0.1', 0))
print(l.getsockname()[1], flush=True)
c, _ = l.accept()
pid = os.fork()
if pid == 0:
    c.send(b'greeting\n')
    c.recv(100)
    one = threads()
    c.send(b'a')
    c.send(b'b\n')
    c.recv(100)
    c.send(f'{one} {threads()}\n'.encode())
    os._exit(0)
os.waitpid(pid, 0)
"#;
    let mut server = Command::new(nagless())
        .args(["run", "--", "python3", "-c", SERVER])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    let s =
        std::net::TcpStream::connect(("127.0.0.1", port.trim().parse::<u16>().unwrap())).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let mut line = || {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        l.trim().to_string()
    };
    assert_eq!(line(), "greeting");
    w.write_all(b"x\n").unwrap();
    assert_eq!(line(), "ab");
    w.write_all(b"y\n").unwrap();
    // The child's threads after its one-write burst, then after its two-write burst.
    assert_eq!(line(), "1 2");
    assert!(server.wait().unwrap().success());
}
