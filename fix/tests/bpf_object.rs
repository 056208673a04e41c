//! The committed BPF object (fix/bpf/fix.bpf.o) is built from its source: the source's
//! hash matches the one `scripts/build-bpf` recorded beside the object, and, where the same
//! clang is installed, rebuilding gives the same bytes. `./scripts/test` (and so CI) installs
//! clang, llvm and libbpf-dev; elsewhere the rebuild is skipped with a note.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

// `skip()`: a tool the rebuild needs is missing: a note, or under CI a failure.
use nagless_test_support::skip;

fn bpf_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf")
}

fn stamp(key: &str) -> String {
    let text = std::fs::read_to_string(bpf_dir().join("fix.bpf.o.stamp")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("no {key} in fix.bpf.o.stamp: {text}"))
}

#[test]
fn bpf_object_matches_its_source() {
    let dir = bpf_dir();
    let source = std::fs::read(dir.join("fix.bpf.c")).unwrap();
    let mut sha = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum (coreutils)");
    std::io::Write::write_all(&mut sha.stdin.take().unwrap(), &source).unwrap();
    let out = sha.wait_with_output().unwrap();
    let hash = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        hash.split_whitespace().next().unwrap_or(""),
        stamp("source-sha256"),
        "fix/bpf/fix.bpf.c changed since fix.bpf.o was built: run scripts/build-bpf"
    );

    let have = |tool: &str| Command::new(tool).arg("--version").output().is_ok();
    if !have("clang")
        || !have("llvm-strip")
        || !Path::new("/usr/include/bpf/bpf_helpers.h").exists()
    {
        skip("clang, llvm-strip or libbpf-dev is not installed (./scripts/test installs them): the object was not rebuilt");
        return;
    }
    let version = Command::new("clang").arg("-dumpversion").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if version != stamp("clang") {
        eprintln!(
            "note: clang {version} here, the object was built with clang {}: bytes not compared",
            stamp("clang")
        );
        return;
    }
    let rebuilt = std::env::temp_dir().join(format!("nagless-fix-{}.bpf.o", std::process::id()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-bpf");
    let o = Command::new("bash")
        .arg(&script)
        .arg("fix")
        .arg(&rebuilt)
        .output()
        .unwrap();
    assert!(o.status.success(), "scripts/build-bpf: {o:?}");
    let same = std::fs::read(&rebuilt).unwrap() == std::fs::read(dir.join("fix.bpf.o")).unwrap();
    let _ = std::fs::remove_file(&rebuilt);
    assert!(
        same,
        "fix.bpf.o is not what its source builds to: run scripts/build-bpf"
    );
}
