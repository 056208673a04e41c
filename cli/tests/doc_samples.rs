//! Every sample of a command's output in README.md and docs/ is what the command prints today.
//!
//! - `nagless doctor` on a committed capture is deterministic: each ```text block line `$
//!   nagless doctor ARGS` is run from the repository's root and its output compared exactly.
//! - `nagless watch` watches a live host: a block marked `<!-- sample: http.server -->` (or
//!   `<!-- sample: http.server under nagless run -->`) is run again as it says (Python's
//!   `http.server` on a free port under `wrk -t1 -c2`, natively or under `nagless run`, and
//!   the block's `$` line with that port), and each line of its output must have the words of
//!   the sample's line: every number (a pid, a count, a time) may differ, every word may not.
//!
//! `NAGLESS_UPDATE_SAMPLES=1 cargo test -p nagless-cli --test doc_samples` writes what the
//! commands print into the documents instead.
#![allow(clippy::disallowed_methods)] // the watch samples run for real time

mod watch_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use nagless_test_support::{exclusive, free_port, have_tool, root_or_skip, watch_ebpf_or_skip};
use watch_support::{http_server, www, NAGLESS};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The documents that hold samples: README.md and docs/*.md.
fn documents() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// A sample: a command of a ```text block and the lines under it.
#[derive(Debug)]
struct Sample {
    /// The marker before the block (`http.server`, ...), if any.
    marker: Option<String>,
    /// The command, without `$ ` and without a trailing `# comment`.
    command: String,
    /// Lines of the document (0-based) that hold its output: `start..end`.
    start: usize,
    end: usize,
}

/// The samples of `text` whose command starts with `prefix` (`nagless doctor`).
fn samples(text: &str, prefix: &str) -> Vec<Sample> {
    let lines: Vec<&str> = text.lines().collect();
    let mut v = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i] != "```text" {
            i += 1;
            continue;
        }
        let marker = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.strip_prefix("<!-- sample: "))
            .and_then(|l| l.strip_suffix(" -->"))
            .map(str::to_owned);
        let close = i + 1 + lines[i + 1..].iter().position(|l| *l == "```").unwrap();
        let mut at = i + 1;
        while at < close {
            let Some(cmd) = lines[at].strip_prefix("$ ") else {
                at += 1;
                continue;
            };
            let end = (at + 1..close)
                .find(|&j| lines[j].starts_with("$ "))
                .unwrap_or(close);
            let command = cmd.split(" #").next().unwrap().trim().to_owned();
            if command.starts_with(prefix) || command.starts_with(&format!("sudo {prefix}")) {
                v.push(Sample {
                    marker: marker.clone(),
                    command,
                    start: at + 1,
                    end,
                });
            }
            at = end;
        }
        i = close + 1;
    }
    v
}

/// The `nagless doctor` samples of `text`.
fn doctor_samples(text: &str) -> Vec<Sample> {
    samples(text, "nagless doctor")
}

/// The `nagless watch` samples of `text` that are run again (those with a marker).
fn watch_samples(text: &str) -> Vec<Sample> {
    samples(text, "nagless watch")
        .into_iter()
        .filter(|s| s.marker.is_some())
        .collect()
}

/// Writes `outputs` (one per sample `find` finds, in order) over the samples' lines of
/// `path`, found again in the file as it is now: the doctor's and the watch's tests update
/// one document (README.md) at once, and lines one adds move the other's samples.
fn update(path: &Path, find: fn(&str) -> Vec<Sample>, outputs: &[String]) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let text = std::fs::read_to_string(path).unwrap();
    let found = find(&text);
    assert_eq!(found.len(), outputs.len(), "{}", path.display());
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (s, out) in found.iter().zip(outputs).rev() {
        lines.splice(s.start..s.end, out.lines().map(str::to_owned));
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn updating() -> bool {
    std::env::var_os("NAGLESS_UPDATE_SAMPLES").is_some()
}

#[test]
fn doctor_samples_are_what_the_doctor_prints() {
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let found = doctor_samples(&text);
        let mut outputs = Vec::new();
        for s in &found {
            let args: Vec<&str> = s.command.split_whitespace().skip(2).collect();
            let o = Command::new(NAGLESS)
                .arg("doctor")
                .args(&args)
                .current_dir(root())
                .output()
                .unwrap();
            let out = String::from_utf8(o.stdout).unwrap();
            let want = lines[s.start..s.end].join("\n");
            if !updating() {
                assert_eq!(
                    out.trim_end(),
                    want.trim_end(),
                    "{}:{}: `{}` prints otherwise today; refresh with \
                     NAGLESS_UPDATE_SAMPLES=1 cargo test -p nagless-cli --test doc_samples",
                    doc.display(),
                    s.start,
                    s.command
                );
            }
            outputs.push(out.trim_end().to_owned());
            checked += 1;
        }
        if updating() && !found.is_empty() {
            update(&doc, doctor_samples, &outputs);
        }
    }
    assert!(checked > 0, "no doctor sample found");
}

/// A line's words: every number (digits, with `.` and `,`) is `#`, a word the table cut
/// (`--protocol H...`: where it is cut depends on the pid's digits) is left out, and runs of
/// spaces are one.
fn words(line: &str) -> String {
    let mut masked = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || *d == '.' || *d == ',')
            {
                chars.next();
            }
            masked.push('#');
        } else {
            masked.push(c);
        }
    }
    masked
        .split_whitespace()
        .filter(|w| !w.contains("..."))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a watch sample's scenario; returns the watch's output with the sample's port.
fn run_watch_sample(s: &Sample) -> String {
    let shimmed = match s.marker.as_deref() {
        Some("http.server") => false,
        Some("http.server under nagless run") => true,
        other => panic!("{}: unknown sample marker {other:?}", s.command),
    };
    let dir = www("sample");
    let port = free_port();
    let server = http_server(&dir, port, shimmed);
    let mut args: Vec<String> = s
        .command
        .split_whitespace()
        .skip_while(|w| *w != "watch")
        .map(str::to_owned)
        .collect();
    let at = args.iter().position(|a| a == "--port").unwrap() + 1;
    let sample_port = std::mem::replace(&mut args[at], port.to_string());
    let watch = Command::new(NAGLESS)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let wrk = Command::new("wrk")
        .args(["-t1", "-c2", "-d5s"])
        .arg(format!("http://127.0.0.1:{port}/f.txt"))
        .output()
        .unwrap();
    assert!(wrk.status.success(), "{wrk:?}");
    let o = watch.wait_with_output().unwrap();
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
    // What a terminal shows: stderr's lines (the backend) then stdout's.
    let text =
        String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    text.replace(&port.to_string(), &sample_port)
}

#[test]
fn words_keep_the_words_and_mask_the_numbers() {
    assert_eq!(
        words("12791 python3 -m http.server --protocol H...    :8000      2      43.6  [1]"),
        "# python# -m http.server --protocol :# # # [#]"
    );
    assert_eq!(
        words("1,815 samples in 4.0 s: 0.05 ms"),
        "# samples in # s: # ms"
    );
}

/// Tests that run alone, with nothing else on the machine: they time what a busy
/// machine blurs, or take what is host-wide (docs/testing.md).
mod alone {
    use super::*;

    #[test]
    fn watch_samples_have_the_words_the_watch_prints() {
        let _one = exclusive();
        if !have_tool("wrk") || !root_or_skip("nagless watch's samples (every process)") {
            return;
        }
        let mut checked = 0;
        for doc in documents() {
            let text = std::fs::read_to_string(&doc).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let found = watch_samples(&text);
            let mut outputs = Vec::new();
            for s in &found {
                if !s.command.contains("--backend sampling") && !watch_ebpf_or_skip(NAGLESS) {
                    outputs.push(lines[s.start..s.end].join("\n"));
                    continue;
                }
                let out = run_watch_sample(s);
                let want: Vec<String> = lines[s.start..s.end].iter().map(|l| words(l)).collect();
                let got: Vec<String> = out.trim_end().lines().map(words).collect();
                if !updating() {
                    assert_eq!(
                        got,
                        want,
                        "{}:{}: `{}` prints other words today:\n{out}\nrefresh with \
                         NAGLESS_UPDATE_SAMPLES=1 cargo test -p nagless-cli --test doc_samples",
                        doc.display(),
                        s.start,
                        s.command
                    );
                }
                outputs.push(out.trim_end().to_owned());
                checked += 1;
            }
            if updating() && !found.is_empty() {
                update(&doc, watch_samples, &outputs);
            }
        }
        assert!(checked > 0, "no watch sample checked");
    }
}
