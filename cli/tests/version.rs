//! `nagless --version` and `nagless version --verbose`: the build's facts, and what this host
//! offers, each line agreeing with what the host has.
//!
//! `NAGLESS_BIN=/path/to/nagless` runs them against another build (CI: the static one
//! `scripts/install` makes).

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

fn nagless() -> OsString {
    std::env::var_os("NAGLESS_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_nagless").into())
}

fn stdout(args: &[&str]) -> String {
    let o = Command::new(nagless()).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "nagless {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The value of `key:` in the version text.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {key}: in\n{text}"))
        .trim()
}

#[test]
fn version_names_the_release_commit_target_and_features() {
    let text = stdout(&["--version"]);
    assert!(
        text.starts_with(&format!("nagless {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    // The commit this tree is at (build.rs reruns when HEAD moves), or "unknown" outside git.
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let commit = field(&text, "commit");
    match head {
        Some(h) if std::env::var_os("NAGLESS_BIN").is_none() => assert_eq!(commit, h),
        _ => assert!(
            commit == "unknown" || commit.chars().all(|c| c.is_ascii_hexdigit()),
            "{commit}"
        ),
    }
    let target = field(&text, "target");
    let triple = target.split_whitespace().next().unwrap();
    assert!(
        triple.starts_with(std::env::consts::ARCH) && triple.contains("-linux-"),
        "{target}"
    );
    // musl builds are static (scripts/install), glibc ones dynamic (cargo build).
    if triple.ends_with("-musl") {
        assert!(target.contains("statically linked"), "{target}");
    } else {
        assert!(target.contains("dynamically linked"), "{target}");
    }
    assert!(field(&text, "features").starts_with("none"), "{text}");
    // `nagless version` says the same.
    assert_eq!(stdout(&["version"]), text);
}

#[test]
fn version_verbose_says_what_this_host_offers_each_command() {
    let text = stdout(&["version", "--verbose"]);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line in\n{text}"))
            .trim_start()[name.len()..]
            .trim()
            .to_string()
    };
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(field(&text, "host").contains(release.trim()), "{text}");
    let root = nagless_test_support::is_root();
    // Each verdict is yes or no, and agrees with the facts a test can see.
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    let ebpf = line("watch eBPF backend");
    assert!(ebpf.starts_with("yes") || ebpf.starts_with("no"), "{ebpf}");
    if !btf {
        assert!(ebpf.starts_with("no") && ebpf.contains("BTF"), "{ebpf}");
    }
    if !root {
        assert!(ebpf.starts_with("no"), "{ebpf}");
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let cgroup2 = mountinfo.lines().any(|l| {
        l.split(" - ")
            .nth(1)
            .is_some_and(|t| t.starts_with("cgroup2 "))
    });
    let sock_ops = line("fix sock_ops (cgroup)");
    assert_eq!(sock_ops.starts_with("yes"), cgroup2 && root, "{sock_ops}");
    let pidfd = line("fix pidfd_getfd");
    if root {
        assert!(
            pidfd.starts_with("yes"),
            "{pidfd} (Linux 5.6 or later here)"
        );
    }
    let delack = line("TCP_DELACK_MAX_US");
    let (major, minor) = {
        let mut p = release.split(|c: char| !c.is_ascii_digit());
        (
            p.next().unwrap().parse::<u32>().unwrap(),
            p.next().unwrap().parse::<u32>().unwrap(),
        )
    };
    assert_eq!(
        delack.starts_with("yes"),
        (major, minor) >= (6, 15),
        "{delack}"
    );
    let loader = line("run's dynamic loader");
    let ld = if cfg!(target_arch = "x86_64") {
        "/lib64/ld-linux-x86-64.so.2"
    } else {
        "/lib/ld-linux-aarch64.so.1"
    };
    assert_eq!(
        loader.starts_with("yes"),
        Path::new(ld).exists(),
        "{loader}"
    );
}
