//! `nagless fix` in an operator's hands: never a false "done", never an undo of what is not
//! its own. A fix that cannot act fails and says why; the undo leaves an option the program
//! set itself while the fix ran; a second fix of a target a fix covers is refused with the
//! first's identity; selections that would take the whole host are refused unless `--all`
//! says so; `--dry-run` shows a selection and changes nothing; `--list` shows the fixes
//! running. Real programs (python3) in cgroups the tests create and remove. Root only;
//! skipped otherwise (a failure under CI).

mod fix_support;

use std::process::Command;

use fix_support::*;
use nagless_test_support::{exclusive_on_host, have_tool, root_or_skip};

fn text(o: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_undo_leaves_an_option_the_program_set_itself() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive_on_host("fixes");
    // A whole cgroup, and a process that shares its cgroup: both kinds of fix.
    for whole in [true, false] {
        let cg = Cgroup::new(if whole {
            "own-choice"
        } else {
            "own-choice-shared"
        });
        let [port, _] = two_listeners();
        let (mut chooser, mut plain) = (Holder::start(&cg, port), Holder::start(&cg, port));
        let cgroup = cg.dir.display().to_string();
        let pid = chooser.child.id().to_string();
        let args: Vec<&str> = if whole {
            vec!["--cgroup", &cgroup]
        } else {
            vec!["--pid", &pid]
        };
        let (child, line) = start_fix(&[&args[..], &["--nodelay", "--duration", "2s"]].concat());
        assert_eq!(chooser.nodelay(), "1", "{line}");
        // While the fix runs, the program chooses TCP_NODELAY for its socket itself.
        assert_eq!(chooser.set_nodelay(true), "1");
        finish_fix(child);
        assert_eq!(
            chooser.nodelay(),
            "1",
            "the undo took back the program's own TCP_NODELAY (whole cgroup: {whole})"
        );
        if whole {
            assert_eq!(plain.nodelay(), "0", "the fix's own change is undone");
        }
        // A program that turned it off itself while fixed keeps it off (it was on before
        // the fix: an undo to the old value would turn it on).
        assert_eq!(chooser.set_nodelay(true), "1");
        let (child, _) = start_fix(&[&args[..], &["--nodelay", "--duration", "2s"]].concat());
        let _ = chooser.set_nodelay(false);
        finish_fix(child);
        assert_eq!(chooser.nodelay(), "0");
    }
}

#[test]
fn a_second_fix_of_a_fixed_target_is_refused_with_the_firsts_identity() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive_on_host("fixes");
    let cg = Cgroup::new("overlap");
    let [port, _] = two_listeners();
    let mut h = Holder::start(&cg, port);
    let cgroup = cg.dir.display().to_string();
    let (first, _) = start_fix(&["--cgroup", &cgroup, "--nodelay", "--duration", "3s"]);
    let pid = h.child.id().to_string();
    for args in [
        vec!["--cgroup", &cgroup, "--nodelay", "--duration", "1s"],
        vec!["--pid", &pid, "--nodelay", "--duration", "1s"],
    ] {
        let second = fix(&args);
        let (out, err) = text(&second);
        assert!(!second.status.success(), "{args:?}: {out}{err}");
        assert!(
            err.contains(&format!("nagless fix (pid {})", first.id())),
            "{args:?}: the first fix is not named: {err}"
        );
        assert!(!out.contains("changed"), "{out}");
    }
    assert_eq!(h.nodelay(), "1", "the refused fix changed something");
    finish_fix(first);
    assert_eq!(h.nodelay(), "0", "the first fix's undo");
}

#[test]
fn a_fix_that_cannot_act_fails_and_says_why() {
    if !root_or_skip("nagless fix") || !have_tool("setpriv") {
        return;
    }
    let _one = exclusive_on_host("fixes");
    let cg = Cgroup::new("not-mine");
    let [port, _] = two_listeners();
    // Two processes in the cgroup: a fix of one is a fix of its own connections.
    let (mut h, _beside) = (Holder::start(&cg, port), Holder::start(&cg, port));
    let pid = h.child.id().to_string();
    // As another user over a root-owned process: first without any privilege (no BPF), then
    // with what BPF needs but not CAP_SYS_PTRACE (its descriptors cannot be listed, which
    // read as "no sockets", and a success, before).
    for caps in ["", "+bpf,+net_admin,+perfmon"] {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        if !caps.is_empty() {
            cmd.arg(format!("--inh-caps={caps}"))
                .arg(format!("--ambient-caps={caps}"));
        }
        let o = cmd
            .arg(nagless())
            .args(["fix", "--pid", &pid, "--nodelay", "--duration", "1s"])
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(
            !o.status.success(),
            "{caps:?}: a fix that did nothing succeeded: {out}{err}"
        );
        let why = if caps.is_empty() {
            "root"
        } else {
            "CAP_SYS_PTRACE"
        };
        assert!(err.contains(why), "{caps:?}: no reason given: {err}");
        assert!(!out.contains("existing connection(s) changed"), "{out}");
    }
    assert_eq!(h.nodelay(), "0");
}

#[test]
fn selections_that_would_take_the_host_or_nothing_are_refused() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let refused = |args: &[&str], says: &str| {
        let o = fix(args);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
        err
    };
    refused(&["--pid", "1", "--nodelay", "--dry-run"], "--all");
    refused(&["--pid", "2", "--nodelay", "--dry-run"], "kernel thread");
    refused(&["--pid", "1", "--port", "0", "--nodelay"], "--port 0");
    let err = refused(&["--pid", "1", "--ack-delay-max", "0", "--all"], "0 ms");
    assert!(!err.contains("0ns"), "{err}");
    let err = refused(&["--remove"], "--all");
    assert!(err.contains("Try"), "a usage error points to --help: {err}");
    // A refusal that is no misuse does not point to --help.
    let err = refused(&["--pid", "2", "--nodelay"], "kernel thread");
    assert!(!err.contains("Try"), "{err}");
    // Hours are a duration.
    let cg = Cgroup::new("hours");
    let cgroup = cg.dir.display().to_string();
    let o = fix(&[
        "--cgroup",
        &cgroup,
        "--nodelay",
        "--duration",
        "1h",
        "--dry-run",
    ]);
    assert!(o.status.success(), "{:?}", text(&o));
}

#[test]
fn a_dry_run_shows_the_selection_and_changes_nothing() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive_on_host("fixes");
    let cg = Cgroup::new("dry");
    let [port, _] = two_listeners();
    let mut h = Holder::start(&cg, port);
    let cgroup = cg.dir.display().to_string();
    let o = fix(&["--cgroup", &cgroup, "--nodelay", "--dry-run"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains(&format!("{} python3", h.child.id())), "{out}");
    assert!(out.contains("1 connection(s) to change now"), "{out}");
    assert!(out.contains(&cgroup), "{out}");
    assert_eq!(h.nodelay(), "0", "a dry run changed the connection");
    let id = nagless_fix::attach::cgroup_id(&cg.dir).unwrap();
    assert!(!nagless_fix::attach::running()
        .iter()
        .any(|r| r.cgroup == id));
}

#[test]
fn the_list_shows_the_fixes_running() {
    if !root_or_skip("nagless fix") {
        return;
    }
    let _one = exclusive_on_host("fixes");
    let (whole, shared) = (Cgroup::new("listed"), Cgroup::new("listed-shared"));
    let [port, _] = two_listeners();
    let (_a, b, _c) = (
        Holder::start(&whole, port),
        Holder::start(&shared, port),
        Holder::start(&shared, port),
    );
    let cgroup = whole.dir.display().to_string();
    let pid = b.child.id().to_string();
    let (one, _) = start_fix(&["--cgroup", &cgroup, "--nodelay", "--duration", "3s"]);
    let (two, _) = start_fix(&["--pid", &pid, "--nodelay", "--duration", "3s"]);
    let (out, _) = text(&fix(&["--list"]));
    assert!(
        out.contains(&format!("running (nagless fix pid {})", one.id())) && out.contains(&cgroup),
        "{out}"
    );
    assert!(
        out.contains(&format!("running (nagless fix pid {})", two.id()))
            && out.contains(&format!("process {pid}")),
        "{out}"
    );
    finish_fix(one);
    finish_fix(two);
    let (out, _) = text(&fix(&["--list"]));
    assert!(!out.contains(&cgroup), "{out}");
}
