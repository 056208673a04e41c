//! Builds the preload shim (`libnagless_preload.so`, crate `nagless-preload`) and hands its
//! path to the `nagless` binary, which embeds its bytes: `nagless run` then works from a plain
//! `cargo build`, `cargo test` or `cargo install`, with no library to find at run time.
//!
//! Cargo cannot depend on a cdylib, so this runs a nested `cargo build` of the shim in its own
//! target directory (no lock shared with the outer build), always with the release profile: the
//! shim sits in every read and write of the programs it runs under.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest
        .parent()
        .expect("cli/ lives in the workspace")
        .to_path_buf();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    // What the shim is built from is not listed here: cargo's own dep-info of the nested
    // build names every source file of it and of its path dependencies (see
    // `rerun_if_shim_sources_change`), so a new module or dependency of the shim rebuilds
    // the embedded copy. The lock file and the workspace's manifest, besides.
    for f in ["Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", workspace.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=NAGLESS_SHIM_TARGET_DIR");
    // Shared by the debug and release builds of the cli (and by clippy and doc runs), so the
    // shim is compiled once per change. `target/shim` unless told otherwise.
    let target_dir = std::env::var_os("NAGLESS_SHIM_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir_of(&out).join("shim"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args([
            "build",
            "--release",
            "-p",
            "nagless-preload",
            "--target-dir",
        ])
        .arg(&target_dir);
    // The outer build's settings for this crate must not leak into the nested one.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO_") && key != "CARGO_HOME" || key == "RUSTC_WRAPPER" {
            cmd.env_remove(&key);
        }
    }
    // Small: no debug info in a library copied into every run's cache.
    cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    let status = cmd.status().expect("run cargo for the preload shim");
    assert!(status.success(), "building the preload shim failed");
    let so = target_dir.join("release/libnagless_preload.so");
    assert!(so.is_file(), "{} was not built", so.display());
    rerun_if_shim_sources_change(&target_dir.join("release/libnagless_preload.d"), &workspace);
    println!("cargo:rustc-env=NAGLESS_SHIM_PATH={}", so.display());
    // A name for the cached copy that changes whenever the bytes do.
    let bytes = std::fs::read(&so).expect("read the built shim");
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    println!("cargo:rustc-env=NAGLESS_SHIM_HASH={hash:016x}");
    println!("cargo:rerun-if-changed={}", so.display());
    git_commit(&workspace);
    // `nagless --version` names the target this binary was built for, how it is linked, the
    // profile and the crate's enabled cargo features.
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    println!("cargo:rustc-env=NAGLESS_TARGET={}", var("TARGET"));
    let linkage = if var("CARGO_CFG_TARGET_ENV") == "musl"
        || var("CARGO_CFG_TARGET_FEATURE")
            .split(',')
            .any(|f| f == "crt-static")
    {
        "statically linked"
    } else {
        "dynamically linked"
    };
    println!("cargo:rustc-env=NAGLESS_LINKAGE={linkage}");
    println!("cargo:rustc-env=NAGLESS_PROFILE={}", var("PROFILE"));
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(str::to_owned))
        .map(|f| f.to_lowercase().replace('_', "-"))
        .collect();
    features.sort();
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(", ")
    };
    println!("cargo:rustc-env=NAGLESS_FEATURES={features}");
}

/// Hands `nagless --version` the commit it was built from: `NAGLESS_GIT_COMMIT` if set (a
/// build from a source tarball that knows its commit), else `git rev-parse --short HEAD`, else
/// "unknown" (no git, or no repository: a `cargo package` build, a tarball).
fn git_commit(workspace: &std::path::Path) {
    println!("cargo:rerun-if-env-changed=NAGLESS_GIT_COMMIT");
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(workspace)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let commit = std::env::var("NAGLESS_GIT_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=NAGLESS_GIT_COMMIT={commit}");
    // Rebuilt when HEAD moves: HEAD itself (a checkout), the branch it names (a commit) and
    // packed-refs. Only files that exist: a missing one would rerun this script every build.
    let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--absolute-git-dir"]),
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
    ) else {
        return;
    };
    let mut watch = vec![
        PathBuf::from(&git_dir).join("HEAD"),
        PathBuf::from(&common).join("packed-refs"),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(PathBuf::from(&common).join(branch));
    }
    for f in watch.iter().filter(|f| f.is_file()) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
}

/// Tells cargo to run this again when a file the shim was built from changes: each file the
/// nested build's dep-info (`DEP: FILE FILE ...`, spaces in names escaped by `\`) names inside
/// the workspace, and the manifest of each crate they belong to. (Files of the registry do
/// not change under a given lock file.)
fn rerun_if_shim_sources_change(dep_info: &std::path::Path, workspace: &std::path::Path) {
    let text = std::fs::read_to_string(dep_info).expect("the shim's dep-info");
    let deps = text
        .lines()
        .find_map(|l| l.split_once(": ").map(|(_, d)| d))
        .unwrap_or_default();
    let mut manifests = std::collections::BTreeSet::new();
    for file in deps.replace("\\ ", "\0").split(' ') {
        let file = PathBuf::from(file.replace('\0', " "));
        if !file.starts_with(workspace) || file.as_os_str().is_empty() {
            continue;
        }
        println!("cargo:rerun-if-changed={}", file.display());
        if let Some(m) = file
            .ancestors()
            .skip(1)
            .take_while(|d| d.starts_with(workspace))
            .map(|d| d.join("Cargo.toml"))
            .find(|m| m.is_file())
        {
            manifests.insert(m);
        }
    }
    assert!(
        !manifests.is_empty(),
        "no source of the shim in {}",
        dep_info.display()
    );
    for m in manifests {
        println!("cargo:rerun-if-changed={}", m.display());
    }
}

/// The target directory that holds `out` (`<target>/<profile>/build/<pkg>-<hash>/out`).
fn target_dir_of(out: &std::path::Path) -> PathBuf {
    out.ancestors()
        .nth(4)
        .map(PathBuf::from)
        .unwrap_or_else(|| out.join("target"))
}
