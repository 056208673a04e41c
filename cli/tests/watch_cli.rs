//! `nagless watch` refusing and explaining: a backend that cannot start says why (eBPF
//! without CAP_BPF, an unknown backend), a watcher without root says what it cannot see, bad
//! arguments exit 2, and the help lists the command and gives examples.
#![allow(clippy::disallowed_methods)] // tests measure real time

mod watch_support;

use std::process::Command;

use nagless_test_support::{have_tool, root_or_skip};
use watch_support::NAGLESS;

#[test]
fn a_backend_that_cannot_start_says_why() {
    // Asked for by name, eBPF that cannot load is an error naming what is missing; `auto`
    // falls back to sampling and says why.
    if !root_or_skip("running the watcher as another user") || !have_tool("setpriv") {
        return;
    }
    let as_nobody = |backend: &str| {
        Command::new("setpriv")
            .args([
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                NAGLESS,
            ])
            .args(["watch", "--duration", "200ms", "--backend", backend])
            .output()
            .unwrap()
    };
    let o = as_nobody("ebpf");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("CAP_BPF"), "{err}");
    let o = as_nobody("auto");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("backend sampling, because eBPF is unavailable") && err.contains("CAP_BPF"),
        "{err}"
    );
    assert!(o.status.code().is_some_and(|c| c < 2), "{o:?}");
    let o = Command::new(NAGLESS)
        .args(["watch", "--backend", "kernel"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn without_root_it_says_what_it_cannot_see() {
    if !root_or_skip("tcpdump") || !have_tool("setpriv") {
        return;
    }
    let o = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            NAGLESS,
        ])
        .args(["watch", "--duration", "300ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not root") && err.contains("CAP_SYS_PTRACE"),
        "{err}"
    );
    assert!(o.status.code().is_some_and(|c| c < 2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("samples of up to"));
}

#[test]
fn help_lists_watch_beside_the_other_commands() {
    let o = Command::new(NAGLESS).arg("--help").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    for c in ["lab", "run", "doctor", "watch"] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(c)),
            "{c}: {out}"
        );
    }
}

#[test]
fn bad_arguments_exit_2() {
    let o = Command::new(NAGLESS)
        .args(["watch", "--interval", "5s", "--refresh", "1s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(NAGLESS)
        .args(["watch", "--interval", "fast"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn watch_help_has_examples() {
    let o = Command::new(NAGLESS)
        .args(["watch", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    let examples = &help[help.find("EXAMPLES").expect("an EXAMPLES section")..];
    for e in [
        "nagless watch --duration 30s",
        "nagless watch --port 8080",
        "nagless watch --pid 4242",
        "nagless watch --json --stalls",
        "nagless watch --serve :9911",
        "nagless watch --backend sampling",
    ] {
        assert!(examples.contains(e), "{e}: {help}");
    }
}
