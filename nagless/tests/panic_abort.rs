//! Under `panic = "abort"` tokio's panics cannot be caught, so the constructors' probes for a
//! time driver and a `LocalSet` cannot turn them into errors: the program must then stop at
//! the constructor, with tokio's message, not later inside a background task. Builds a small
//! program (`tests/programs/panic_abort.rs`) with `panic = "abort"` and runs it.
// Builds and runs a program with cargo: on the host OS only, not under an emulator.
#![cfg(all(feature = "tokio", unix))]

use std::path::Path;
use std::process::Command;

fn build() -> std::path::PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("panic-abort-check");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"panic-abort-check\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             publish = false\n[dependencies]\nnagless = {{ path = {:?}, features = [\"tokio\"] }}\n\
             tokio = {{ version = \"1\", features = [\"net\", \"rt\", \"time\"] }}\n\
             [profile.dev]\npanic = \"abort\"\n[workspace]\n",
            here.display().to_string()
        ),
    )
    .unwrap();
    std::fs::copy(
        here.join("tests/programs/panic_abort.rs"),
        dir.join("src/main.rs"),
    )
    .unwrap();
    // The workspace's lock file: the same dependency versions, already downloaded.
    std::fs::copy(here.join("../Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Its own target directory, whatever this build was told (cargo-llvm-cov and friends set
    // CARGO_TARGET_DIR; a cross target would put the binary elsewhere).
    let out = Command::new(cargo)
        .args(["build", "--quiet", "--offline", "--target-dir"])
        .arg(dir.join("target"))
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the panic = \"abort\" program failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("target/debug/panic-abort-check")
}

fn run(bin: &Path, what: &str) -> (Option<i32>, String) {
    let out = Command::new(bin)
        .arg(what)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn without_unwinding_a_missing_timer_or_local_set_stops_the_program_at_the_constructor() {
    let bin = build();
    for what in ["timer", "no-timer-explicit"] {
        let (code, err) = run(&bin, what);
        assert_eq!(code, Some(0), "{what}: {err}");
        assert!(err.contains("made: true"), "{what}: {err}");
    }
    for (what, says) in [("no-timer", "enable_time"), ("local", "LocalSet")] {
        let (code, err) = run(&bin, what);
        assert_eq!(code, None, "{what}: should end by SIGABRT: {err}");
        assert!(err.contains("making the stream"), "{what}: {err}");
        assert!(
            !err.contains("made:"),
            "{what}: went past the constructor: {err}"
        );
        assert!(
            err.contains(says),
            "{what}: tokio's message should say {says}: {err}"
        );
    }
}
