//! What a `nagless fix` selects and what it leaves alone, read from the programs' own sockets:
//! a port and a cgroup kept to, and SIGTERM ending the fix and detaching it; a pid that shares
//! its cgroup fixed alone and undone; a program in its own network namespace (as in a
//! container) reached through its cgroup. Root only; skipped otherwise (a failure under CI).

mod fix_support;

use std::time::Duration;

use fix_support::*;
use nagless_test_support::{exclusive_on_host, have_tool_of, root_or_skip};

#[test]
fn options_change_only_inside_the_selection_and_go_when_a_signal_ends_the_fix() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive_on_host("fixes");
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
    let status = nagless_test_support::wait_at_most(&mut child, Duration::from_secs(20))
        .expect("nagless fix did not end on SIGTERM");
    assert!(status.success(), "nagless fix after SIGTERM: {status}");
    assert_eq!(nodelay_of_a_new_connection(&target, selected), "0");
    let listed = fix(&["--list"]);
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains(&cgroup),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
}

#[test]
fn a_pid_that_shares_its_cgroup_is_fixed_alone() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive_on_host("fixes");
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

#[test]
fn a_program_in_its_own_network_namespace_is_reached_through_its_cgroup() {
    if !root_or_skip("nagless fix") || !have_tool_of("ip", "iproute2") {
        return;
    }
    let _one = exclusive_on_host("fixes");
    let (cg, ns) = (Cgroup::new("container"), Netns::new("container"));
    // An unmodified python3 inside the namespace and the cgroup, as in a container: a server
    // and a client of its own on the namespace's loopback; TCP_NODELAY of the client's socket.
    const PROBE: &str = "import socket\n\
l = socket.create_server(('127.0.0.1', 0))\n\
c = socket.create_connection(l.getsockname(), timeout=5)\n\
s, _ = l.accept()\n\
print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))\n";
    // Into the cgroup first: `ip netns exec` mounts the namespace's own /sys.
    let probe = || cg.run(&["ip", "netns", "exec", &ns.0, "python3", "-c", PROBE]);
    assert_eq!(probe(), "0 0");
    let cgroup = cg.dir.display().to_string();
    let (child, _) = start_fix(&["--cgroup", &cgroup, "--nodelay", "--duration", "2s"]);
    // Both ends of a connection made and accepted in the namespace.
    assert_eq!(probe(), "1 1");
    finish_fix(child);
    assert_eq!(probe(), "0 0");
}

/// An unmodified python3 in `cg` with a listener; on each line it reads, it makes `n` short
/// connections to its own listener, as quickly as it can, and prints for each the
/// TCP_NODELAY of both ends (the connecting one right after connect, the accepted one right
/// after accept) as "c s", then "done".
struct ShortConnections {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl ShortConnections {
    fn start(cg: &Cgroup) -> ShortConnections {
        const SHORT: &str = r#"import socket, sys
l = socket.create_server(('127.0.0.1', 0))
print('ready', flush=True)
for line in sys.stdin:
    for _ in range(int(line)):
        c = socket.create_connection(l.getsockname(), timeout=5)
        s, _ = l.accept()
        print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
              s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), flush=True)
        c.close()
        s.close()
    print('done', flush=True)
"#;
        let mut child = cg
            .command()
            .args(["python3", "-c", SHORT])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut s = ShortConnections { child, out };
        assert_eq!(s.line(), "ready");
        s
    }

    fn line(&mut self) -> String {
        use std::io::BufRead;
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    /// `n` short connections: how many of them had TCP_NODELAY at both ends.
    fn fixed_of(&mut self, n: usize) -> usize {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{n}").unwrap();
        let mut fixed = 0;
        loop {
            match self.line().as_str() {
                "done" => return fixed,
                "1 1" => fixed += 1,
                "" => panic!("the program ended"),
                _ => {}
            }
        }
    }
}

impl Drop for ShortConnections {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_pid_that_shares_its_cgroup_has_each_new_connection_fixed_as_it_is_made() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive_on_host("fixes");
    let shared = Cgroup::new("short");
    let (mut target, mut beside) = (
        ShortConnections::start(&shared),
        ShortConnections::start(&shared),
    );
    assert_eq!(target.fixed_of(3), 0);
    let pid = target.child.id().to_string();
    let (child, line) = start_fix(&["--pid", &pid, "--nodelay", "--duration", "5s"]);
    assert!(line.contains("their cgroup holds others"), "{line}");
    assert!(line.contains("every new one from now on"), "{line}");
    // Both ends of every one, made faster than any look for new connections could follow:
    // the connecting socket it makes, and the one its listener (made before the fix) accepts.
    assert_eq!(target.fixed_of(20), 20, "{line}");
    // Its neighbour in the same cgroup: untouched.
    assert_eq!(beside.fixed_of(20), 0);
    finish_fix(child);
    // The fix's end: new connections as they were.
    assert_eq!(target.fixed_of(3), 0);
}

#[test]
fn connections_accepted_by_a_listener_charged_to_another_cgroup_are_fixed() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive_on_host("fixes");
    // The listener is made in one cgroup; then its process is moved to a cgroup of its own
    // (as a supervisor moves a started service): every connection it accepts is charged to
    // the first cgroup, where the listener was made.
    let (made, moved) = (Cgroup::new("made"), Cgroup::new("moved"));
    let mut server = ShortConnections::start(&made);
    let pid = server.child.id();
    std::fs::write(moved.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    let (child, line) = start_fix(&["--pid", &pid.to_string(), "--nodelay", "--duration", "4s"]);
    // The process is alone in its cgroup now: the whole cgroup is fixed.
    assert!(line.contains(&moved.dir.display().to_string()), "{line}");
    assert_eq!(server.fixed_of(10), 10, "{line}");
    finish_fix(child);
    assert_eq!(server.fixed_of(3), 0);
}

/// Issue 52's dry run: a policy's rules select by cgroup, port and peer range, the first rule
/// that selects a connection takes it, alone, and nothing is changed; a bad file is refused
/// with its line.
#[test]
fn a_policys_dry_run_names_what_each_rule_selects_and_changes_nothing() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive_on_host("fixes");
    let (a, b) = (Cgroup::new("policy-a"), Cgroup::new("policy-b"));
    let [selected, other] = two_listeners();
    let mut in_a = Holder::start(&a, selected);
    let mut in_a_too = Holder::start(&a, other);
    let mut in_b = Holder::start(&b, other);
    let rel = |cg: &Cgroup| {
        let root = nagless_fix::target::cgroup2_root().unwrap();
        format!("/{}", cg.dir.strip_prefix(root).unwrap().display())
    };
    let dir = std::env::temp_dir().join(format!("nagless-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("policy.toml");
    std::fs::write(
        &file,
        format!(
            "[[rule]]\nname = \"a to the selected port\"\ncgroup = \"{}\"\nports = [{selected}]\n\
             peers = [\"127.0.0.0/8\"]\nnodelay = true\n\n\
             [[rule]]\nname = \"all of a\"\ncgroup = \"{}\"\n\
             ack_delay_max = \"8ms\"\n\n\
             [[rule]]\nname = \"b\"\ncgroup = \"{}\"\nack_delay_max = \"8ms\"\ncanary = 100\n",
            rel(&a),
            rel(&a),
            rel(&b)
        ),
    )
    .unwrap();
    let out = fix(&["--policy", file.to_str().unwrap(), "--dry-run"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each rule's section: from its header to the next one.
    let section = |header: &str| {
        let start = text
            .find(header)
            .unwrap_or_else(|| panic!("no {header}:\n{text}"));
        let rest = &text[start + header.len()..];
        rest[..rest.find("\nrule ").unwrap_or(rest.len())].to_string()
    };
    let line_in = |section: &str, pid: u32| {
        section
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{pid} ")))
            .unwrap_or_else(|| panic!("no line for {pid} in {section}\n{text}"))
            .to_string()
    };
    let (pa, pa2, pb) = (in_a.child.id(), in_a_too.child.id(), in_b.child.id());
    let first = section("rule \"a to the selected port\" (line 1)");
    let second = section("rule \"all of a\" (line 8)");
    let third = section("rule \"b\" (line 13)");
    // The connection to the selected port: the first rule's, alone.
    let l = line_in(&first, pa);
    assert!(
        l.contains("1 connection(s) to change now 127.0.0.1:")
            && l.contains(&format!("->127.0.0.1:{selected}")),
        "{text}"
    );
    assert!(line_in(&first, pa2).contains("0 connection(s)"), "{text}");
    // The second rule selects both of A's processes, and takes only the other connection.
    assert!(line_in(&second, pa).contains("0 connection(s)"), "{text}");
    assert!(
        line_in(&second, pa2).contains("1 connection(s) to change now 127.0.0.1:"),
        "{text}"
    );
    assert!(!second.contains(&format!("{pb} ")), "{text}");
    // B's: the third's.
    assert!(
        line_in(&third, pb).contains(&format!("->127.0.0.1:{other}")),
        "{text}"
    );
    assert!(!third.contains(&format!("\n  {pa} ")), "{text}");
    // Nothing changed.
    assert_eq!(in_a.nodelay(), "0");
    assert_eq!(in_a_too.nodelay(), "0");
    assert_eq!(in_b.nodelay(), "0");
    // A bad file: refused with its line, nothing applied.
    std::fs::write(
        &file,
        "[[rule]]\nname = \"x\"\nunit = \"api\"\npeers = [\"10.0.0.0/40\"]\nnodelay = true\n",
    )
    .unwrap();
    let out = fix(&["--policy", file.to_str().unwrap(), "--dry-run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("line 4: \"10.0.0.0/40\": the prefix length must be 0 to 32; nothing applied"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
