//! Debian's own sandboxed daemons serving real sessions under `nagless run` (issue 40): vsftpd
//! with its seccomp sandbox (`seccomp_sandbox=YES`) and OpenSSH's sshd, whose pre-auth child
//! runs under a seccomp filter. Such a filter kills the process (SIGSYS) at the first syscall
//! it forbids, so the shim must never make one the program did not ask for (a `setsockopt` for
//! a cork, a `clone3` for its thread, an `rt_sigprocmask` probe). Each daemon runs with a
//! configuration of the test's own in a temporary directory, natively (the control) and under
//! `nagless run`; each run proves that the sandbox is really in force (a descendant of the
//! daemon runs under a seccomp filter of its own, by `/proc`) and that the session arrives
//! whole: greetings, logins, small command exchanges and a 200 KB file of random bytes
//! compared byte for byte.
//! Root only (the daemons chroot and change user); loopback only; every process started here
//! is killed here, by its ID.
//!
//! Debian 12's vsftpd 3.0.3 cannot stat a file inside its own sandbox, even natively: glibc 2.33
//! and later implement `stat` and `fstat` with `newfstatat`, which its filter does not allow, so
//! `SIZE`, `LIST`, `RETR` and `STOR` kill the session. Its sandboxed sessions here therefore
//! stop at what it serves natively (login, commands, `PASV`); the file and the listing come from
//! a second run of the same daemon with `seccomp_sandbox=NO`.

use nagless_test_support as common;

mod shim_support;
use shim_support::servers::TempDir;

use common::{exclusive, fixed_port, free_port, have_tool, tool_path};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long any client command (a whole FTP session, one ssh or sftp run) may take.
const CLIENT_LIMIT: Duration = Duration::from_secs(20);

/// A process started here as the leader of a process group of its own. Dropping it kills the
/// group by its ID, and each of the leader's descendants by its PID (sshd's per-connection
/// children start sessions of their own), while the leader is not yet reaped, so no ID can
/// have been reused.
struct Group {
    child: Child,
    reaped: bool,
}

impl Group {
    /// Starts `cmd` in a group of its own, stdin empty, stdout and stderr to the files given.
    fn spawn(cmd: &mut Command, out: std::fs::File, err: std::fs::File) -> Group {
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        Group {
            child,
            reaped: false,
        }
    }

    /// Waits for the leader to exit, at most `limit`; then everything left is killed.
    fn finish(mut self, limit: Duration) -> Option<ExitStatus> {
        let status = common::wait_at_most(&mut self.child, limit);
        self.reaped = status.is_some();
        status
    }

    /// The processes descended from the leader (not the leader itself).
    fn descendants(&self) -> Vec<u32> {
        descendants(self.child.id())
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        let mut targets = vec![format!("-{}", self.child.id())];
        targets.extend(self.descendants().iter().map(u32::to_string));
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .args(&targets)
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

/// The processes descended from `pid` (its children, theirs, ...), read from `/proc`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // "PID (comm) S PPID ...": the name may hold spaces and parentheses.
        let ppid = std::fs::read_to_string(format!("/proc/{p}/stat"))
            .ok()
            .and_then(|s| {
                let (_, rest) = s.rsplit_once(')')?;
                rest.split_whitespace().nth(1)?.parse::<u32>().ok()
            });
        if let Some(ppid) = ppid {
            parents.push((p, ppid));
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let of = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == of).map(|(c, _)| *c));
        i += 1;
    }
    found.split_off(1)
}

/// How many seccomp filters process `pid` (`self`: this one) runs under: `Seccomp_filters` in
/// `/proc` (Linux 5.9 and later), or 1 for `Seccomp: 2` on older kernels; 0 once it is gone.
fn seccomp_filters(pid: &str) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    field("Seccomp_filters:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(u32::from(field("Seccomp:") == Some("2")))
}

/// The daemon's descendants that installed a seccomp filter of their own: under more filters
/// than this test (a container's filter, if any, is inherited by all).
fn sandboxed(daemon: &Group) -> Vec<u32> {
    let inherited = seccomp_filters("self");
    daemon
        .descendants()
        .into_iter()
        .filter(|p| seccomp_filters(&p.to_string()) > inherited)
        .collect()
}

/// Polls [`sandboxed`] for up to 5 s until it finds a process.
fn wait_for_sandboxed(daemon: &Group) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let found = sandboxed(daemon);
        if !found.is_empty() || start.elapsed() > Duration::from_secs(5) {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `program ARGS` natively or under `nagless run`, its output to `log`, and waits
/// until it listens on `port`.
fn start_daemon(program: &Path, args: &[&str], under_shim: bool, log: &Path, port: u16) -> Group {
    let mut cmd = if under_shim {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nagless"));
        c.args(["run", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args);
    let out = std::fs::File::create(log).unwrap();
    let mut daemon = Group::spawn(&mut cmd, out.try_clone().unwrap(), out);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        let exited = daemon.child.try_wait().unwrap();
        daemon.reaped = exited.is_some();
        assert!(
            exited.is_none() && start.elapsed() < Duration::from_secs(10),
            "{} never listened on port {port} ({exited:?}): {}",
            program.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    daemon
}

/// What a client printed, and how it ended.
struct ClientRun {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl ClientRun {
    fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Runs a client to its end, at most [`CLIENT_LIMIT`] (then it is killed), its stdout and
/// stderr kept in `LOG.out` and `LOG.err`.
fn client(cmd: &mut Command, log: &Path) -> ClientRun {
    let (out, err) = (log.with_extension("out"), log.with_extension("err"));
    let files = |p: &Path| std::fs::File::create(p).unwrap();
    let status = Group::spawn(cmd, files(&out), files(&err)).finish(CLIENT_LIMIT);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    ClientRun {
        status,
        stdout: read(&out),
        stderr: read(&err),
    }
}

impl std::fmt::Display for ClientRun {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{:?}\n{}{}", self.status, self.stdout, self.stderr)
    }
}

/// `len` random bytes (from the kernel), written to `path`.
fn random_file(path: &Path, len: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .take(len)
        .read_to_end(&mut bytes)
        .unwrap();
    std::fs::write(path, &bytes).unwrap();
    bytes
}

/// Where `got` first differs from `want`, for a failure message.
fn first_difference(got: &[u8], want: &[u8]) -> String {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(at) => format!("first difference at byte {at}"),
        None => format!("{} bytes where {} were sent", got.len(), want.len()),
    }
}

/// Whether this test can run here: root, and every tool installed (else skipped outside CI,
/// a failure under CI).
fn can_run(what: &str, tools: &[&str]) -> bool {
    common::root_or_skip(what) && tools.iter().all(|t| have_tool(t))
}

/// The FTP client: python3's ftplib, driving one session against 127.0.0.1:PORT. `commands`
/// runs the small exchanges and `PASV` (what vsftpd serves inside its sandbox); `transfer`
/// runs them and adds `LIST` and `RETR blob.bin` (saved to OUT). Every reply is printed.
const FTP_CLIENT: &str = r#"
import ftplib, sys
port, mode, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
f = ftplib.FTP()
print(f.connect("127.0.0.1", port, timeout=10))
print(f.login())
for _ in range(10):
    print(f.sendcmd("NOOP"))
print(f.sendcmd("SYST"))
print(f.sendcmd("PWD"))
print(f.cwd("/"))
print(f.sendcmd("TYPE I"))
print(f.sendcmd("STAT"))
print(f.sendcmd("HELP"))
if mode == "transfer":
    lines = []
    print(f.retrlines("LIST", lines.append))
    print("\n".join(lines))
    with open(out, "wb") as o:
        print(f.retrbinary("RETR blob.bin", o.write))
else:
    print(f.sendcmd("PASV"))
print(f.quit())
"#;

/// One vsftpd run (a daemon of its own) and one FTP session against it: with its seccomp
/// sandbox the small exchanges and `PASV`, without it the listing and the file as well.
fn vsftpd_session(dir: &Path, sandbox: bool, under_shim: bool, blob: &[u8]) {
    let how = format!(
        "vsftpd, seccomp_sandbox={}, {}",
        if sandbox { "YES" } else { "NO" },
        if under_shim {
            "under nagless run"
        } else {
            "native"
        }
    );
    let port = free_port();
    let pasv = fixed_port();
    let conf = dir.join("vsftpd.conf");
    std::fs::write(
        &conf,
        format!(
            "listen=YES\nlisten_ipv6=NO\nlisten_address=127.0.0.1\nlisten_port={port}\n\
             background=NO\nseccomp_sandbox={sandbox}\n\
             anonymous_enable=YES\nno_anon_password=YES\nanon_root={d}/anon\n\
             local_enable=NO\nwrite_enable=NO\nsecure_chroot_dir={d}/empty\n\
             pasv_enable=YES\npasv_address=127.0.0.1\n\
             pasv_min_port={pasv}\npasv_max_port={pasv_max}\nconnect_from_port_20=NO\n\
             xferlog_enable=NO\nsyslog_enable=NO\ndirmessage_enable=NO\n",
            d = dir.display(),
            sandbox = if sandbox { "YES" } else { "NO" },
            pasv_max = pasv.saturating_add(20),
        ),
    )
    .unwrap();
    let got_path = dir.join("got.bin");
    let _ = std::fs::remove_file(&got_path);
    let vsftpd = tool_path("vsftpd").unwrap();
    let log = dir.join("vsftpd.log");
    let daemon = start_daemon(&vsftpd, &[conf.to_str().unwrap()], under_shim, &log, port);
    let mode = if sandbox { "commands" } else { "transfer" };
    let run = client(
        Command::new("python3")
            .args(["-c", FTP_CLIENT, &port.to_string(), mode])
            .arg(&got_path),
        &dir.join("ftp-client.log"),
    );
    // Proof that the filter is in force: a session stopped after its greeting has a
    // sandboxed child (none without the sandbox).
    let mut probe = TcpStream::connect(("127.0.0.1", port)).unwrap();
    probe
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut greeting = String::new();
    let _ = BufReader::new(&probe).read_line(&mut greeting);
    let filtered = if sandbox {
        wait_for_sandboxed(&daemon)
    } else {
        sandboxed(&daemon)
    };
    let _ = probe.write_all(b"QUIT\r\n");
    drop(probe);
    drop(daemon);
    let daemon_log = std::fs::read_to_string(&log).unwrap_or_default();
    let context = format!("{how}:\n--- client: {run}\n--- vsftpd:\n{daemon_log}");
    eprintln!(
        "{how}: greeted {:?}, {} reply lines, {} sandboxed session process(es)",
        run.stdout.lines().next().unwrap_or_default(),
        run.stdout.lines().count(),
        filtered.len()
    );
    assert!(
        run.stdout.starts_with("220"),
        "the greeting is not 220: {context}"
    );
    assert!(!run.stdout.contains("500 OOPS"), "{context}");
    assert!(run.ok(), "the client did not end cleanly: {context}");
    assert!(run.stdout.contains("230 "), "no login: {context}");
    assert_eq!(run.stdout.matches("200 NOOP ok.").count(), 10, "{context}");
    assert!(run.stdout.trim_end().ends_with("221 Goodbye."), "{context}");
    assert!(greeting.starts_with("220"), "probe greeting {greeting:?}");
    if sandbox {
        assert!(
            run.stdout.contains("227 Entering Passive Mode (127,0,0,1,"),
            "{context}"
        );
        assert!(
            !filtered.is_empty(),
            "no session process of vsftpd runs under a seccomp filter: {context}"
        );
    } else {
        assert!(filtered.is_empty(), "sandboxed without the sandbox?");
        assert!(run.stdout.contains("blob.bin"), "no listing: {context}");
        assert!(run.stdout.contains("226 Transfer complete."), "{context}");
        let got = std::fs::read(&got_path).unwrap_or_default();
        assert!(
            got == blob,
            "{how}: the file came back altered ({}): {context}",
            first_difference(&got, blob)
        );
    }
}

/// Debian's vsftpd, natively and under `nagless run`: with its seccomp sandbox on, every
/// session is greeted (`220`, never `500 OOPS: child died`), logs in and answers its commands;
/// with the sandbox off, a 200 KB file of random bytes arrives byte for byte.
#[test]
fn vsftpd_in_its_seccomp_sandbox_serves_under_the_shim() {
    let _one = exclusive();
    if !can_run("vsftpd chroots and changes user", &["vsftpd", "python3"]) {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("nagless-vsftpd-{}", std::process::id())));
    // The anonymous root (chrooted into, so root's and not writable) with the file to fetch,
    // and the empty directory vsftpd chroots its unprivileged processes into.
    for sub in ["anon", "empty"] {
        std::fs::create_dir_all(dir.0.join(sub)).unwrap();
        std::fs::set_permissions(dir.0.join(sub), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let blob = random_file(&dir.0.join("anon/blob.bin"), 200_000);
    for under_shim in [false, true] {
        for sandbox in [false, true] {
            vsftpd_session(&dir.0, sandbox, under_shim, &blob);
        }
    }
}

/// One sshd run (a daemon of its own): `ssh ... 'echo hello'`, an sftp `get` of a 200 KB file
/// of random bytes, and a pre-auth connection that shows the sandbox in force.
fn sshd_session(dir: &Path, under_shim: bool, blob: &[u8]) {
    let how = if under_shim {
        "sshd, under nagless run"
    } else {
        "sshd, native"
    };
    let port = free_port();
    let conf = dir.join("sshd_config");
    let d = dir.display();
    std::fs::write(
        &conf,
        format!(
            "ListenAddress 127.0.0.1\nPort {port}\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n\
             PubkeyAuthentication yes\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPrintMotd no\n\
             PrintLastLog no\nLoginGraceTime 30\n\
             Subsystem sftp /usr/lib/openssh/sftp-server\n"
        ),
    )
    .unwrap();
    let sshd = tool_path("sshd").unwrap();
    let log = dir.join("sshd.log");
    // -D: in the foreground; -e: its log on stderr.
    let daemon = start_daemon(
        &sshd,
        &["-D", "-e", "-f", conf.to_str().unwrap()],
        under_shim,
        &log,
        port,
    );
    let key = dir.join("client_key");
    let options = |cmd: &mut Command| {
        cmd.args(["-F", "/dev/null", "-i"]).arg(&key).args([
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
        ]);
    };
    let mut ssh = Command::new("ssh");
    options(&mut ssh);
    ssh.args(["-p", &port.to_string(), "root@127.0.0.1", "echo hello"]);
    let hello = client(&mut ssh, &dir.join("ssh.log"));
    let got_path = dir.join("got.bin");
    let _ = std::fs::remove_file(&got_path);
    let batch = dir.join("sftp.batch");
    std::fs::write(&batch, format!("get {d}/blob.bin {}\n", got_path.display())).unwrap();
    let mut sftp = Command::new("sftp");
    options(&mut sftp);
    sftp.args(["-P", &port.to_string(), "-b"])
        .arg(&batch)
        .arg("root@127.0.0.1");
    let fetched = client(&mut sftp, &dir.join("sftp.log"));
    // Proof that the pre-auth sandbox is in force (built in: no option of sshd_config turns it
    // off, and `sshd -T` does not show it): after the banners are exchanged, sshd's pre-auth
    // child waits for the key exchange under its seccomp filter.
    let mut probe = TcpStream::connect(("127.0.0.1", port)).unwrap();
    probe
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut banner = String::new();
    let _ = BufReader::new(&probe).read_line(&mut banner);
    let _ = probe.write_all(b"SSH-2.0-nagless_probe\r\n");
    let filtered = wait_for_sandboxed(&daemon);
    drop(probe);
    drop(daemon);
    let daemon_log = std::fs::read_to_string(&log).unwrap_or_default();
    let context = format!("{how}:\n--- ssh: {hello}\n--- sftp: {fetched}\n--- sshd:\n{daemon_log}");
    eprintln!(
        "{how}: ssh printed {:?}, sftp {:?}, {} sandboxed pre-auth process(es)",
        hello.stdout.trim(),
        fetched.status,
        filtered.len()
    );
    assert!(hello.ok(), "ssh failed: {context}");
    assert_eq!(hello.stdout.trim(), "hello", "{context}");
    assert!(fetched.ok(), "sftp failed: {context}");
    let got = std::fs::read(&got_path).unwrap_or_default();
    assert!(
        got == blob,
        "{how}: the file came back altered ({}): {context}",
        first_difference(&got, blob)
    );
    assert!(banner.starts_with("SSH-2.0-OpenSSH"), "banner {banner:?}");
    assert!(
        !filtered.is_empty(),
        "no pre-auth process of sshd runs under a seccomp filter: {context}"
    );
}

/// Debian's OpenSSH sshd (its pre-auth child sandboxed by seccomp), natively and under
/// `nagless run`: a key login runs `echo hello`, and sftp fetches a 200 KB file of random
/// bytes byte for byte (under the shim, connections used to be reset).
#[test]
fn sshd_with_its_preauth_sandbox_serves_under_the_shim() {
    let _one = exclusive();
    if !can_run("sshd", &["sshd", "ssh", "sftp", "ssh-keygen"]) {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("nagless-sshd-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    // sshd's privilege separation directory (Debian's service makes it at start).
    let privsep = PathBuf::from("/run/sshd");
    if !privsep.is_dir() {
        std::fs::create_dir_all(&privsep).unwrap();
        std::fs::set_permissions(&privsep, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for key in ["host_key", "client_key"] {
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.0.join(key))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    std::fs::copy(dir.0.join("client_key.pub"), dir.0.join("authorized_keys")).unwrap();
    let blob = random_file(&dir.0.join("blob.bin"), 200_000);
    for under_shim in [false, true] {
        sshd_session(&dir.0, under_shim, &blob);
    }
}
