//! The Wireshark plugin (`deploy/wireshark/nagless.lua`) against the doctor: on every golden
//! capture (`fuzz/corpus/capture/`) and every capture of the corpus (`tests/corpus/`), the
//! doctor's JSON is written to a findings file, `tshark` (Debian package `tshark`, installed
//! by scripts/test) loads the plugin with `-X lua_script:` and filters `nagless.stall`, and
//! the frames it selects must be exactly the held segments and releasing ACKs the doctor
//! names, with the same delays and roles. Without tshark the test skips with a note (outside
//! CI).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use nagless_doctor::{report, Options};
use nagless_test_support::have_tool;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The captures: the goldens, then the corpus.
fn captures() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [
        "loopback-wwr.pcap",
        "loopback-wwr.pcapng",
        "synthetic-head.pcap",
    ]
    .iter()
    .map(|n| root().join("fuzz/corpus/capture").join(n))
    .collect();
    let mut corpus: Vec<PathBuf> = std::fs::read_dir(root().join("doctor/tests/corpus"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    corpus.sort();
    out.extend(corpus);
    out
}

/// What the doctor names in `capture`, by frame: (role, delay in µs), and the findings file
/// as `nagless doctor --json --every-stall --top 0` writes it.
fn doctor(capture: &Path) -> (BTreeMap<u64, Vec<(String, u64)>>, String) {
    let bytes = std::fs::read(capture).unwrap();
    let opts = Options {
        top: 0,
        every_stall: true,
        ..Options::default()
    };
    let d = nagless_doctor::diagnose_reader(&bytes[..], opts, |_| {}).unwrap();
    let mut named: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    for f in &d.flows {
        for s in &f.stalls {
            named
                .entry(s.held.frame)
                .or_default()
                .push(("held".into(), s.stalled_us));
            named
                .entry(s.ack.frame)
                .or_default()
                .push(("release".into(), s.stalled_us));
        }
    }
    for v in named.values_mut() {
        v.sort();
    }
    (named, report::json(&d).to_string())
}

/// What tshark with the plugin marks in `capture` under `-Y nagless.stall` (the marks of
/// kind `stall`), and what it said on stderr.
fn tshark(capture: &Path, findings: &Path) -> (BTreeMap<u64, Vec<(String, u64)>>, String) {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(capture)
        .arg("-X")
        .arg(format!(
            "lua_script:{}",
            root().join("deploy/wireshark/nagless.lua").display()
        ))
        .args(["-Y", "nagless.stall", "-T", "fields", "-E", "occurrence=a"])
        .args([
            "-e",
            "frame.number",
            "-e",
            "nagless.role",
            "-e",
            "nagless.delay",
            "-e",
            "nagless.kind",
        ])
        .env("NAGLESS_FINDINGS", findings)
        .output()
        .expect("tshark runs");
    // (synthetic-head.pcap is cut mid-record on purpose: tshark reads it up to the cut, as
    // the doctor does, and then fails.)
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stderr.contains("cut short in the middle of a packet"),
        "tshark on {}: {}",
        capture.display(),
        stderr
    );
    let mut marked: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 4, "{line:?}");
        let frame: u64 = cols[0].parse().unwrap();
        let roles = cols[1].split(',');
        let delays = cols[2].split(',');
        // (A stall's frame may carry another finding's mark too: a retransmission's, say.)
        let kinds = cols[3].split(',');
        for ((role, delay), _) in roles.zip(delays).zip(kinds).filter(|(_, k)| *k == "stall") {
            let ms: f64 = delay.parse().unwrap();
            marked
                .entry(frame)
                .or_default()
                .push((role.to_string(), (ms * 1000.0).round() as u64));
        }
    }
    for v in marked.values_mut() {
        v.sort();
    }
    (marked, stderr.into_owned())
}

#[test]
fn the_plugin_marks_exactly_the_frames_the_doctor_names() {
    if !have_tool("tshark") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("nagless-wireshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut stalled_captures = 0;
    for capture in captures() {
        let (named, json) = doctor(&capture);
        let findings = dir.join("findings.json");
        std::fs::write(&findings, json).unwrap();
        let (marked, stderr) = tshark(&capture, &findings);
        assert_eq!(marked, named, "{}", capture.display());
        assert!(!stderr.contains("nagless:"), "{stderr}");
        stalled_captures += usize::from(!named.is_empty());
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        stalled_captures >= 20,
        "{stalled_captures} captures with stalls"
    );
}

#[test]
fn without_findings_the_plugin_marks_nothing() {
    if !have_tool("tshark") {
        return;
    }
    let capture = root().join("fuzz/corpus/capture/loopback-wwr.pcap");
    let (marked, stderr) = tshark(&capture, Path::new("/nonexistent/nagless.json"));
    assert!(marked.is_empty(), "{marked:?}");
    assert!(
        stderr.contains("nagless: cannot read findings /nonexistent/nagless.json"),
        "{stderr}"
    );
}

/// A kind of finding the plugin has no code for (an ACK-clocked stretch, say) is marked from
/// the data alone: its frames, its kind, its delay and its summary as expert info.
#[test]
fn a_finding_of_a_new_kind_is_marked_by_its_data() {
    if !have_tool("tshark") {
        return;
    }
    let capture = root().join("fuzz/corpus/capture/loopback-wwr.pcap");
    let dir = std::env::temp_dir().join(format!("nagless-wireshark-kind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let findings = dir.join("findings.json");
    let doc = serde_json::json!({"schema": 2, "flows": [{"index": 1, "stalls": [], "findings": [
        {"kind": "ack-clocked", "delay_ms": 0.2, "summary": "departures clocked by the peer's ACKs",
         "frames": [{"frame": 3, "role": "clocked"}, {"frame": 5, "role": "clocked"}]}
    ]}]});
    std::fs::write(&findings, doc.to_string()).unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&capture)
        .arg("-X")
        .arg(format!(
            "lua_script:{}",
            root().join("deploy/wireshark/nagless.lua").display()
        ))
        .args(["-Y", "nagless.kind == \"ack-clocked\" && !nagless.stall"])
        .args(["-T", "fields", "-e", "frame.number", "-e", "nagless.role"])
        .args(["-e", "_ws.expert.message"])
        .env("NAGLESS_FINDINGS", &findings)
        .output()
        .expect("tshark runs");
    std::fs::remove_dir_all(&dir).ok();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("3\tclocked\t"), "{text}");
    assert!(
        lines[0].contains("nagless ack-clocked: departures clocked by the peer's ACKs"),
        "{text}"
    );
    assert!(lines[1].starts_with("5\tclocked\t"), "{text}");
}

/// The doctor's own ACK-clocked findings on a capture with one (`tests/clocked/`: a
/// multiplexed client with Nagle on, over loopback, gzip as committed): the plugin marks
/// exactly the frames the findings list, each with its role, under `nagless.kind ==
/// "ack-clocked"`.
#[test]
fn the_plugin_marks_the_ack_clocked_frames_the_doctor_names() {
    if !have_tool("tshark") {
        return;
    }
    let capture = root().join("doctor/tests/clocked/loopback.pcap.gz");
    let bytes = std::fs::read(&capture).unwrap();
    let (reader, _) = nagless_doctor::input::decompressed(&bytes[..]).unwrap();
    let opts = Options {
        top: 0,
        every_stall: true,
        ..Options::default()
    };
    let d = nagless_doctor::diagnose_reader(reader, opts, |_| {}).unwrap();
    let mut named: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for f in &d.flows {
        for fd in f.findings.iter().filter(|x| x.kind != "exchange-budget") {
            assert_eq!(fd.kind, "ack-clocked");
            for fr in &fd.frames {
                named
                    .entry(fr.frame)
                    .or_default()
                    .push(format!("ack-clocked {}", fr.role));
            }
        }
    }
    assert!(named.len() >= 64, "{named:?}");
    let dir = std::env::temp_dir().join(format!("nagless-wireshark-clk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let findings = dir.join("findings.json");
    std::fs::write(&findings, report::json(&d).to_string()).unwrap();
    let (marked, stderr, ok) = marks_of_kinds(&capture, &findings, &["ack-clocked"]);
    std::fs::remove_dir_all(&dir).ok();
    assert!(ok && !stderr.contains("nagless:"), "{stderr}");
    for v in named.values_mut() {
        v.sort();
    }
    assert_eq!(marked, named);
}

/// The waits that are not Nagle's and the budget (issue 51): on every capture of the corpus,
/// the frames the doctor's `retransmission-timeout`, `zero-window` and `exchange-budget`
/// findings list are exactly the frames the plugin marks with those kinds, each with its
/// role; some captures have waits.
#[test]
fn the_plugin_marks_the_timeouts_zero_windows_and_budgets_the_doctor_names() {
    if !have_tool("tshark") {
        return;
    }
    const KINDS: [&str; 3] = ["retransmission-timeout", "zero-window", "exchange-budget"];
    let dir = std::env::temp_dir().join(format!("nagless-wireshark-wait-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut with_waits, mut with_budgets) = (0, 0);
    for capture in captures() {
        let bytes = std::fs::read(&capture).unwrap();
        let opts = Options {
            top: 0,
            ..Options::default()
        };
        let d = nagless_doctor::diagnose_reader(&bytes[..], opts, |_| {}).unwrap();
        let mut named: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for fd in d.flows.iter().flat_map(|f| &f.findings) {
            if KINDS.contains(&fd.kind) {
                for fr in &fd.frames {
                    named
                        .entry(fr.frame)
                        .or_default()
                        .push(format!("{} {}", fd.kind, fr.role));
                }
            }
        }
        let findings = dir.join("findings.json");
        std::fs::write(&findings, report::json(&d).to_string()).unwrap();
        let (marked, stderr, ok) = marks_of_kinds(&capture, &findings, &KINDS);
        // (synthetic-head.pcap is cut mid-record on purpose: tshark fails at the cut.)
        assert!(
            (ok || stderr.contains("cut short in the middle of a packet"))
                && !stderr.contains("nagless:"),
            "{stderr}"
        );
        for v in named.values_mut() {
            v.sort();
        }
        assert_eq!(marked, named, "{}", capture.display());
        with_waits += usize::from(
            named
                .values()
                .flatten()
                .any(|m| !m.starts_with("exchange-budget")),
        );
        with_budgets += usize::from(
            named
                .values()
                .flatten()
                .any(|m| m.starts_with("exchange-budget")),
        );
    }
    assert!(
        with_budgets >= 1,
        "no capture of the corpus has a slow exchange"
    );
    std::fs::remove_dir_all(&dir).ok();
    assert!(with_waits >= 1, "no capture of the corpus has such a wait");
    eprintln!("{with_waits} capture(s) with retransmission timeouts or zero windows");
}

/// What tshark with the plugin marks in `capture` with one of `kinds`, by frame: each mark as
/// "kind role", sorted (a frame may carry marks of other kinds too: a stall's, say; they are
/// left out), what it said on stderr, and whether it succeeded.
fn marks_of_kinds(
    capture: &Path,
    findings: &Path,
    kinds: &[&str],
) -> (BTreeMap<u64, Vec<String>>, String, bool) {
    let filter = kinds
        .iter()
        .map(|k| format!("nagless.kind == \"{k}\""))
        .collect::<Vec<_>>()
        .join(" || ");
    let out = Command::new("tshark")
        .arg("-r")
        .arg(capture)
        .arg("-X")
        .arg(format!(
            "lua_script:{}",
            root().join("deploy/wireshark/nagless.lua").display()
        ))
        .args(["-Y", &filter])
        .args(["-T", "fields", "-E", "occurrence=a", "-e", "frame.number"])
        .args(["-e", "nagless.role", "-e", "nagless.kind"])
        .env("NAGLESS_FINDINGS", findings)
        .output()
        .expect("tshark runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut marked: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        let frame: u64 = cols[0].parse().unwrap();
        for (role, kind) in cols[1].split(',').zip(cols[2].split(',')) {
            if kinds.contains(&kind) {
                marked
                    .entry(frame)
                    .or_default()
                    .push(format!("{kind} {role}"));
            }
        }
    }
    for v in marked.values_mut() {
        v.sort();
    }
    (marked, stderr, out.status.success())
}
