//! The doctor's whole output pinned on the committed captures of the fuzzer's seed corpus
//! (`fuzz/corpus/capture/`: real loopback captures with stalls, and the head of a generated
//! capture of many flows, cut mid-record): the JSON, the text report and the SVG timeline
//! must match `tests/golden/` byte for byte, as `nagless doctor` prints them (`--top 10`, its
//! default). A change in any finding, number, field or word fails here; when a change is
//! meant, rewrite the files with `NAGLESS_BLESS=1 cargo test -p nagless-doctor --test golden`
//! and review their diff.

use std::path::{Path, PathBuf};

use nagless_doctor::{report, Diagnosis, Options};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/capture")
}

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Diagnoses `name` from the corpus as `nagless doctor NAME --svg FILE` does.
fn diagnose(name: &str) -> Diagnosis {
    let bytes = std::fs::read(corpus().join(name)).unwrap();
    let (reader, _) = nagless_doctor::input::decompressed(&bytes[..]).unwrap();
    let opts = Options {
        top: 10,
        timeline: true,
        ..Options::default()
    };
    nagless_doctor::diagnose_reader(reader, opts, |_| {}).unwrap()
}

/// The JSON as `nagless doctor --json` prints it, with the tool's version left out.
fn json(d: &Diagnosis) -> String {
    let mut doc = report::json(d);
    doc["tool"] = "nagless-doctor VERSION".into();
    serde_json::to_string_pretty(&doc).unwrap() + "\n"
}

/// Compares `got` with the golden file `name` (or rewrites it under `NAGLESS_BLESS`).
fn check(name: &str, got: &str) {
    let path = golden(name);
    if std::env::var_os("NAGLESS_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (NAGLESS_BLESS=1 writes it)", path.display()));
    if got != want {
        let line = got
            .lines()
            .zip(want.lines())
            .position(|(g, w)| g != w)
            .unwrap_or(got.lines().count().min(want.lines().count()));
        panic!(
            "{name} differs from {} from line {}:\n  got:  {:?}\n  want: {:?}",
            path.display(),
            line + 1,
            got.lines().nth(line),
            want.lines().nth(line)
        );
    }
}

#[test]
fn the_seed_captures_give_the_pinned_json_text_and_timeline() {
    for name in [
        "loopback-wwr.pcap",
        "loopback-wwr.pcapng",
        "synthetic-head.pcap",
    ] {
        let d = diagnose(name);
        check(&format!("{name}.json"), &json(&d));
        check(&format!("{name}.txt"), &report::text(&d));
    }
    let d = diagnose("loopback-wwr.pcap");
    assert!(d.stalls_total > 0, "a capture with stalls is pinned");
    check("loopback-wwr.pcap.svg", &report::svg(&d.flows[0]));
}

#[test]
fn a_compressed_capture_gives_the_same_json_as_the_plain_one() {
    assert_eq!(
        json(&diagnose("loopback-wwr.pcap.gz")),
        json(&diagnose("loopback-wwr.pcap"))
    );
}
