//! What the shim's test files share: the shim library, and the C programs of `tests/c/`.
#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The shim library `nagless run` preloads (embedded in the binary, unpacked to a cache).
pub fn shim() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = Command::new(env!("CARGO_BIN_EXE_nagless"))
            .args(["run", "--print-shim"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(path.is_file(), "{} missing", path.display());
        path
    })
    .clone()
}

/// Compiles a C program of `tests/c/` once per test run.
pub fn c_program(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("nagless-preload-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    });
    let out = dir.join(name);
    if !out.exists() {
        let gcc = compile_c(name, &out, &[]);
        assert!(
            gcc.status.success(),
            "gcc {name}: {}",
            String::from_utf8_lossy(&gcc.stderr)
        );
    }
    out
}

/// Compiles `tests/c/NAME.c` to `out` with the tests' warnings and `extra` flags.
pub fn compile_c(name: &str, out: &Path, extra: &[&str]) -> Output {
    Command::new("gcc")
        .args(extra)
        .args(["-O2", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c")))
        .output()
        .expect("gcc")
}
