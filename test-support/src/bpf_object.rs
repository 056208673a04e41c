//! The committed BPF objects are built from their sources: [`assert_built_from_source`].

use std::path::Path;
use std::process::{Command, Stdio};

use crate::skip;

/// Asserts that `<crate_dir>/bpf/<object>` is what its `sources` (in that directory) build to:
/// their SHA-256, read in order, matches the one `scripts/build-bpf` recorded in
/// `<object>.stamp`, and, where the same clang is installed, `scripts/build-bpf <target>`
/// rebuilds the same bytes. `./scripts/test` (and so CI) installs clang, llvm and libbpf-dev;
/// elsewhere the rebuild is skipped with a note.
pub fn assert_built_from_source(crate_dir: &str, target: &str, object: &str, sources: &[&str]) {
    let dir = Path::new(crate_dir).join("bpf");
    let stamp_file = format!("{object}.stamp");
    let text = std::fs::read_to_string(dir.join(&stamp_file)).unwrap();
    let stamp = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {key} in {stamp_file}: {text}"))
    };

    let mut source = Vec::new();
    for s in sources {
        source.extend(std::fs::read(dir.join(s)).unwrap());
    }
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
        "{target}/bpf/{} changed since {object} was built: run scripts/build-bpf",
        sources.join(" or ")
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
    let rebuilt = std::env::temp_dir().join(format!("nagless-{}-{object}", std::process::id()));
    let script = Path::new(crate_dir).join("../scripts/build-bpf");
    let o = Command::new("bash")
        .arg(&script)
        .arg(target)
        .arg(&rebuilt)
        .output()
        .unwrap();
    assert!(o.status.success(), "scripts/build-bpf: {o:?}");
    let same = std::fs::read(&rebuilt).unwrap() == std::fs::read(dir.join(object)).unwrap();
    let _ = std::fs::remove_file(&rebuilt);
    assert!(
        same,
        "{object} is not what its source builds to: run scripts/build-bpf"
    );
}
