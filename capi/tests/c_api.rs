//! The C API from C: the programs of `tests/c/`, compiled with `cc` against
//! `include/nagless.h` and the `libnagless.so` this build made, run on 127.0.0.1.
#![allow(clippy::disallowed_methods)]
// cc, ldd, pkg-config and shared objects named .so: the Linux toolchain. (`tests/abi.rs`
// calls the same functions on every OS.)
#![cfg(target_os = "linux")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

// `exclusive()`, held by each test while it runs: the C programs time real exchanges and
// must not share the two CPUs with each other when `cargo test` runs them in parallel.
use nagless_test_support::exclusive;

/// A directory laid out as an installed library: `libnagless.so` and its SONAME
/// (`libnagless.so.0.<minor>`) as links to the library this build made
/// (`target/<profile>/deps/libnagless_capi.so`: a test build does not copy it up).
fn lib_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(make_lib_dir).clone()
}

fn make_lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let built = [deps.to_path_buf(), deps.parent().unwrap().to_path_buf()]
        .into_iter()
        .map(|d| d.join("libnagless_capi.so"))
        .find(|f| f.is_file())
        .unwrap_or_else(|| panic!("libnagless_capi.so not built near {}", deps.display()));
    let dir = nagless_test_support::scratch_dir("capi-lib");
    let soname = format!("libnagless.so.0.{}", env!("CARGO_PKG_VERSION_MINOR"));
    for name in ["libnagless.so", soname.as_str()] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&built, &link).unwrap();
    }
    dir
}

/// Compiles `tests/c/<name>.c` against the header and the shared library; returns the binary.
fn compile(name: &str) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = nagless_test_support::scratch_dir("capi").join(name);
    let lib = lib_dir();
    let st = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-o"])
        .arg(&out)
        .arg(here.join(format!("tests/c/{name}.c")))
        .arg(format!("-I{}", here.join("include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lnagless")
        .status()
        .expect("cc");
    assert!(st.success(), "cc {name}.c");
    out
}

/// Runs a compiled test program; returns its `key=value` output.
fn run(name: &str) -> HashMap<String, f64> {
    let out = Command::new(compile(name)).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{name}: {}", stdout.trim());
    stdout
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
        .collect()
}

#[test]
fn nonblocking_backpressure_delivers_64_mib_once_in_order() {
    let _one = exclusive();
    let r = run("backpressure");
    assert_eq!(r["sent"], (64u64 << 20) as f64, "{r:?}");
    assert!(r["eagain"] > 0.0, "the slow reader must push back: {r:?}");
}

#[test]
fn bad_input_gives_minus_one_and_errno_never_a_crash() {
    let _one = exclusive();
    run("bad_input");
}

#[test]
fn the_version_macros_name_the_library_they_run_against() {
    let _one = exclusive();
    let out = Command::new(compile("version")).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("version={}", env!("CARGO_PKG_VERSION"))
    );
}

/// The SONAME, the full name and the plain name, as an install lays them out.
fn names() -> (String, String) {
    let soname = format!("libnagless.so.0.{}", env!("CARGO_PKG_VERSION_MINOR"));
    let full = format!("libnagless.so.{}", env!("CARGO_PKG_VERSION"));
    (soname, full)
}

/// `dir`'s links: libnagless.so -> SONAME -> full name -> `last` (a link too, or the file).
fn assert_link_chain(dir: &Path, last: Option<&str>) {
    let (soname, full) = names();
    let link = |name: &str| {
        std::fs::read_link(dir.join(name))
            .unwrap_or_else(|e| panic!("{}/{name}: {e}", dir.display()))
            .to_string_lossy()
            .into_owned()
    };
    assert_eq!(link("libnagless.so"), soname);
    assert_eq!(link(&soname), full);
    match last {
        Some(to) => assert_eq!(link(&full), to),
        None => assert!(
            std::fs::symlink_metadata(dir.join(&full))
                .unwrap()
                .is_file(),
            "{full} is the library itself"
        ),
    }
}

/// A program linked with `-lnagless` needs the library by its SONAME, and finds it in
/// `lib_dir` (on the library path, as an uninstalled build or a non-system prefix is).
fn assert_needs_soname(prog: &Path, lib_dir: &Path) {
    let ldd = Command::new("ldd")
        .arg(prog)
        .env("LD_LIBRARY_PATH", lib_dir)
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    let (soname, _) = names();
    let line = ldd
        .lines()
        .find(|l| l.contains("libnagless"))
        .unwrap_or_else(|| panic!("{ldd}"));
    assert!(
        line.trim_start()
            .starts_with(&format!("{soname} => {}", lib_dir.display())),
        "{line}"
    );
}

#[test]
fn a_program_links_and_runs_against_the_build_tree() {
    let _one = exclusive();
    // target/<profile>, where `cargo build -p nagless-capi` leaves libnagless_capi.so and
    // build.rs its links.
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let profile = deps.parent().unwrap();
    assert_link_chain(profile, Some("libnagless_capi.so"));
    // `cargo test` builds the library in deps/ and, unlike `cargo build`, does not copy it
    // up: do what `cargo build` does, so the links lead to this build's library.
    let built = std::fs::read(deps.join("libnagless_capi.so")).unwrap();
    let up = profile.join("libnagless_capi.so");
    if std::fs::read(&up).ok().as_deref() != Some(&built[..]) {
        let tmp = profile.join(format!(".libnagless_capi.so.{}", std::process::id()));
        std::fs::write(&tmp, &built).unwrap();
        std::fs::rename(&tmp, &up).unwrap();
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = nagless_test_support::scratch_dir("capi").join("buildtree");
    let st = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-o"])
        .arg(&out)
        .arg(here.join("tests/c/version.c"))
        .arg(format!("-I{}", here.join("include").display()))
        .arg(format!("-L{}", profile.display()))
        .arg("-lnagless")
        .status()
        .unwrap();
    assert!(st.success(), "cc -L{} -lnagless", profile.display());
    assert_needs_soname(&out, profile);
    let o = Command::new(&out)
        .env("LD_LIBRARY_PATH", profile)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains(env!("CARGO_PKG_VERSION")));
    let _ = std::fs::remove_file(&out);
}

#[test]
fn a_program_outside_the_workspace_builds_with_pkg_config_alone() {
    let _one = exclusive();
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = nagless_test_support::scratch_dir("capi-install");
    let prefix = root.join("prefix");
    let lib = lib_dir();
    let built = std::fs::canonicalize(lib.join("libnagless.so")).unwrap();
    let from = built.parent().unwrap();
    let st = Command::new(here.join("../scripts/install-capi"))
        .arg("--prefix")
        .arg(&prefix)
        .arg("--from")
        .arg(from)
        .status()
        .unwrap();
    assert!(st.success(), "install-capi");
    // The example, copied out of the workspace, built with pkg-config alone.
    let work = root.join("elsewhere");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::copy(here.join("examples/request_reply.c"), work.join("prog.c")).unwrap();
    let pc = prefix.join("lib/pkgconfig");
    // Runs a build command line in `work`, with the installed nagless.pc on the search path.
    let build = |script: &str| {
        let o = Command::new("sh")
            .args(["-c", script])
            .current_dir(&work)
            .env("PKG_CONFIG_PATH", &pc)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    build("cc prog.c $(pkg-config --cflags --libs nagless) -o shared");
    let o = Command::new(work.join("shared"))
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("20 request/reply rounds"),
        "{text}"
    );
    // The program was linked against the installed library, by its SONAME, through the
    // installed links.
    assert_link_chain(&prefix.join("lib"), None);
    assert_needs_soname(&work.join("shared"), &prefix.join("lib"));
    // The installed header's version macros agree with the installed library.
    std::fs::copy(here.join("tests/c/version.c"), work.join("version.c")).unwrap();
    build("cc version.c $(pkg-config --cflags --libs nagless) -o version");
    let o = Command::new(work.join("version"))
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("version={}", env!("CARGO_PKG_VERSION")),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Static: the archive and pkg-config's private libraries; no libnagless.so needed.
    let script = format!(
        "cc prog.c $(pkg-config --cflags nagless) {}/libnagless.a $(pkg-config --static --libs-only-l nagless | sed 's/-lnagless//') -o static",
        prefix.join("lib").display()
    );
    build(&script);
    let o = Command::new(work.join("static")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&root);
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn write_write_read_stalls_with_plain_sockets_and_not_through_the_c_api() {
        let _one = exclusive();
        let r = run("wwr");
        assert!(r["plain_stalled"] >= 10.0, "{r:?}");
        // No stall through the C API: the median round far below one (40 ms), and at most one
        // round in five as long as one, which only a busy machine's scheduling may cause.
        let spare = (r["rounds"] / 5.0).floor();
        assert!(r["nagless_stalled"] <= spare, "{r:?}");
        assert!(r["nagless_median_ms"] < 15.0, "{r:?}");
        // One data segment per request (two writes), plus a linger release for each round of a
        // client descheduled between its writes (a few on a busy machine).
        assert!(
            (r["rounds"]..=r["rounds"] + spare).contains(&r["client_segs"]),
            "{r:?}"
        );
    }

    #[test]
    fn the_clocked_policy_leaves_nothing_in_the_handle_and_asks_the_kernels_send_queue() {
        let _one = exclusive();
        let r = run("clocked");
        // The hand-over was clocked (the send queue asked), not merely immediate; every request
        // in one segment at most.
        assert!(r["clock_checks"] > 0.0, "{r:?}");
        assert!(r["data_segs"] <= r["pipelined"], "{r:?}");
        // One request in flight: none waits for the peer's delayed ACK (40 ms) in the middle run.
        assert!(r["single_median_ms"] < 15.0, "{r:?}");
    }

    #[test]
    fn a_bgp_daemon_loop_sends_full_segments_and_never_end_of_rib_alone() {
        let _one = exclusive();
        let r = run("bgp");
        assert_eq!(r["bytes"], 255.0 * 45.0 + 23.0, "{r:?}");
        assert!(r["mss"] <= 1448.0, "MSS 1448 less TCP options: {r:?}");
        // ceil(bytes / MSS) segments; one more if a linger release split a burst.
        assert!(r["segs"] <= r["min_segs"] + 1.0, "{r:?}");
        assert_eq!(r["eor_alone"], 0.0, "{r:?}");
    }
}
