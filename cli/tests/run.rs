//! `nagless run`: refuses what it cannot reach, and fixes a write-write-read program.
//!
//! `NAGLESS_BIN=/path/to/nagless` runs these tests against another build of the command, such
//! as the statically linked one `scripts/install` makes (CI does).

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Command, Output};

fn tmp(name: &str) -> PathBuf {
    nagless_test_support::scratch_dir("run").join(name)
}

/// The command under test: this build's, or the one `NAGLESS_BIN` names.
fn nagless() -> OsString {
    std::env::var_os("NAGLESS_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_nagless").into())
}

/// `nagless run OPTIONS -- CMD...`, with its output.
fn nagless_run(options: &[&str], cmd: &[&OsStr]) -> Output {
    Command::new(nagless())
        .arg("run")
        .args(options)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap()
}

fn gcc(src: &str, out: &PathBuf, extra: &[&str]) {
    let st = Command::new("gcc")
        .args(extra)
        .args(["-O2", "-o"])
        .arg(out)
        .arg(src)
        .status()
        .expect("gcc");
    assert!(st.success());
}

#[test]
fn static_programs_and_missing_commands_exit_2() {
    let src = tmp("hello.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let bin = tmp("hello_static");
    gcc(src.to_str().unwrap(), &bin, &["-static"]);
    let o = nagless_run(&[], &[bin.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("statically linked"));
    let o = nagless_run(&[], &[OsStr::new("no-such-command-xyz")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("command not found"));
}

#[test]
fn go_programs_are_refused() {
    // A dynamically linked program carrying Go's build information in its own section, as
    // every Go binary does.
    let src = tmp("fakego.c");
    std::fs::write(
        &src,
        "__attribute__((section(\".go.buildinfo\"), used)) const char buildinfo[] = \"\\xff Go buildinf:\";\nint main(void) { return buildinfo[0] == 0; }\n",
    )
    .unwrap();
    let bin = tmp("fakego");
    gcc(src.to_str().unwrap(), &bin, &[]);
    let o = nagless_run(&[], &[bin.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Go program"));
}

/// A real Go program linked dynamically (Debian's promtool, which scripts/test installs with
/// prometheus): found by its `.go.buildinfo` section, without reading the whole binary.
#[test]
fn a_real_dynamically_linked_go_program_is_refused() {
    let Some(promtool) = nagless_test_support::tool_path("promtool") else {
        nagless_test_support::skip("promtool (Debian's prometheus package) is not installed");
        return;
    };
    let o = nagless_run(&[], &[promtool.as_os_str(), OsStr::new("--version")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("Go program"), "{err}");
}

#[test]
fn bad_options_exit_2_with_a_clear_message() {
    let t = OsStr::new("true");
    for (opts, says) in [
        (&["--mode", "fast"][..], "fast"),
        (&["--linger-us", "abc"][..], "abc"),
        (&["--linger-us", "5"][..], "5"),
        (
            &["--log", "/nonexistent-dir/nagless.log"][..],
            "cannot write the log",
        ),
    ] {
        let o = nagless_run(opts, &[t]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{opts:?}: {err}");
        assert!(err.contains(says), "{opts:?}: {err}");
    }
}

#[test]
fn shims_of_other_builds_unused_for_a_month_leave_the_cache() {
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, SystemTime};
    let cache = tmp("xdg-cache");
    let dir = cache.join("nagless");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let stale = dir.join("libnagless_preload-0000000000000000.so");
    let recent = dir.join("libnagless_preload-1111111111111111.so");
    let other = dir.join("notes.txt");
    for (path, age_days) in [(&stale, 40), (&recent, 2), (&other, 400)] {
        let f = std::fs::File::create(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(age_days * 24 * 3600))
            .unwrap();
    }
    let out = Command::new(nagless())
        .args(["run", "--print-shim"])
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let shim = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(
        shim.starts_with(&dir) && shim.is_file(),
        "{}",
        shim.display()
    );
    assert!(!stale.exists(), "a shim unused for 40 days was kept");
    assert!(recent.exists(), "a shim used 2 days ago was removed");
    assert!(other.exists(), "a file that is not a shim was removed");
    let _ = std::fs::remove_dir_all(&cache);
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn run_fixes_write_write_read_and_reports_stats() {
        let bin = tmp("wwr");
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/wwr.c");
        gcc(src, &bin, &["-Wall", "-Werror"]);
        let o = nagless_run(&["--stats"], &[bin.as_os_str(), OsStr::new("20")]);
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{out}\n{err}");
        let field = |k: &str| -> u64 {
            out.split_whitespace()
                .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {out}"))
        };
        // Natively most of these rounds wait 40 ms for a delayed ACK. Under the shim none
        // should: the median round is far below a stall, and a busy machine may delay a round
        // or two (but not most) that long.
        assert!(field("stalled") <= 2, "{out}");
        assert!(field("median_us") < 15_000, "{out}");
        // One data segment per request; a client descheduled past the linger bound between its
        // two writes has that burst released early, as two segments (the shim counts them).
        let released: u64 = err
            .lines()
            .filter(|l| l.contains("nagless stats:"))
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.windows(2)
                    .find(|p| p[1] == "released")
                    .and_then(|p| p[0].parse::<u64>().ok())
            })
            .sum();
        let segs = field("client_segs");
        assert!((20..=20 + released).contains(&segs), "{out}\n{err}");
        assert_eq!(err.matches("nagless stats:").count(), 2, "{err}");
        assert!(err.contains("mode nagless"), "{err}");
    }
}
