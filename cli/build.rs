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
