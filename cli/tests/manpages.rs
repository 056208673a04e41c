//! The man pages and shell completions in deploy/ are what the command's clap definition
//! makes today: `nagless generate` into a temporary directory, compared file by file.

use std::path::Path;
use std::process::Command;

const REFRESH: &str = "cargo run -p nagless-cli -- generate deploy";

#[test]
fn deploy_man_pages_and_completions_are_current() {
    let out = std::env::temp_dir().join(format!("nagless-generate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = Command::new(env!("CARGO_BIN_EXE_nagless"))
        .arg("generate")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let mut stale = Vec::new();
    for sub in ["man", "completions"] {
        let names = |dir: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(dir)
                .map(|d| {
                    d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        };
        let made = names(&out.join(sub));
        let kept = names(&deploy.join(sub));
        for n in made.iter().chain(kept.iter()) {
            let a = std::fs::read(out.join(sub).join(n)).ok();
            let b = std::fs::read(deploy.join(sub).join(n)).ok();
            if a != b && !stale.contains(&format!("deploy/{sub}/{n}")) {
                stale.push(format!("deploy/{sub}/{n}"));
            }
        }
    }
    // One page per command, three shells.
    for f in [
        "man/nagless.1",
        "man/nagless-lab.1",
        "man/nagless-run.1",
        "man/nagless-doctor.1",
        "man/nagless-watch.1",
        "man/nagless-fix.1",
        "completions/nagless.bash",
        "completions/_nagless",
        "completions/nagless.fish",
    ] {
        assert!(out.join(f).is_file(), "nagless generate made no {f}");
    }
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        stale.is_empty(),
        "stale or missing: {} (the CLI changed): refresh them with `{REFRESH}`",
        stale.join(", ")
    );
}

#[test]
fn the_pages_render_and_the_completions_parse() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    // man(1) renders each page without a warning (groff's -ww), where man-db is installed.
    if Command::new("man").arg("--version").output().is_ok() {
        for e in std::fs::read_dir(deploy.join("man")).unwrap() {
            let page = e.unwrap().path();
            let o = Command::new("man")
                .args(["--warnings=w", "-l"])
                .arg(&page)
                .env("MANWIDTH", "80")
                .env("MAN_KEEP_STDERR", "1")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                o.status.success() && err.trim().is_empty(),
                "{}: {err}",
                page.display()
            );
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                text.contains("SYNOPSIS") && text.contains("SEE ALSO"),
                "{text}"
            );
        }
    }
    // bash parses its completion and then completes the commands.
    let script = format!(
        "source {} && COMP_WORDS=(nagless d) && COMP_CWORD=1 && _nagless nagless d nagless && echo \"${{COMPREPLY[@]}}\"",
        deploy.join("completions/nagless.bash").display()
    );
    let o = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("doctor"));
    // zsh and fish check their scripts' syntax, where installed.
    for (shell, flag, file) in [
        ("zsh", "-n", "_nagless"),
        ("fish", "--no-execute", "nagless.fish"),
    ] {
        if let Ok(o) = Command::new(shell)
            .arg(flag)
            .arg(deploy.join("completions").join(file))
            .output()
        {
            assert!(
                o.status.success(),
                "{shell}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}
