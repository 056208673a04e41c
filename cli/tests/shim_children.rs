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
