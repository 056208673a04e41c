//! The stall rule against captures others made: every capture in `tests/corpus/` (public
//! test captures of the tcpdump and Zeek projects; `SOURCES.md`) is diagnosed, and its stalls
//! are matched, held frame by held frame, against the hand labels in `labels.txt`
//! (`README.md` there says how they were made). Stall-by-stall precision and recall over the
//! whole corpus must both be 0.95 or more; a stall found in a capture labelled with none is a
//! false alarm like any other.
//!
//! `cargo test -p nagless-doctor --test corpus -- --nocapture` prints the figures and every
//! disagreement.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use nagless_doctor::Options;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Labelled stalls (held frames) per capture file.
fn labels() -> BTreeMap<String, BTreeSet<u64>> {
    let text = std::fs::read_to_string(dir().join("labels.txt")).unwrap();
    let mut labels: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("== ") {
            let name = name.trim().to_string();
            assert!(
                labels.insert(name.clone(), BTreeSet::new()).is_none(),
                "{name} labelled twice"
            );
            current = Some(name);
        } else if let Some(rest) = line.strip_prefix("stall ") {
            let frame = rest.split_whitespace().next().unwrap().parse().unwrap();
            let name = current.as_ref().expect("a stall line before any capture");
            labels.get_mut(name).unwrap().insert(frame);
        }
    }
    labels
}

/// The held frames of every stall the doctor finds in `name`.
fn found(name: &str) -> BTreeSet<u64> {
    let bytes = std::fs::read(dir().join(name)).unwrap();
    let opts = Options {
        top: 0,
        every_stall: true,
        ..Options::default()
    };
    let d = nagless_doctor::diagnose_reader(&bytes[..], opts, |_| {}).unwrap();
    assert!(d.damage.is_none(), "{name}: {:?}", d.damage);
    d.flows
        .iter()
        .flat_map(|f| f.stalls.iter().map(|s| s.held.frame))
        .collect()
}

#[test]
fn every_capture_in_the_corpus_is_labelled_and_sourced() {
    let labels = labels();
    let sources = std::fs::read_to_string(dir().join("SOURCES.md")).unwrap();
    let mut files: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".pcap") || n.ends_with(".pcapng"))
        .collect();
    files.sort();
    assert!(files.len() >= 25, "{} captures", files.len());
    assert_eq!(files, labels.keys().cloned().collect::<Vec<_>>());
    for f in &files {
        assert!(sources.contains(&format!("| `{f}` |")), "{f} has no source");
    }
    // Captures with no stall weigh as much as those with stalls: both kinds are there.
    let quiet = labels.values().filter(|s| s.is_empty()).count();
    assert!(
        quiet >= 10 && labels.len() - quiet >= 10,
        "{quiet} without stalls"
    );
}

#[test]
fn the_rule_finds_the_labelled_stalls_and_no_others() {
    let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
    for (name, want) in labels() {
        let got = found(&name);
        let extra: Vec<_> = got.difference(&want).collect();
        let missed: Vec<_> = want.difference(&got).collect();
        tp += got.intersection(&want).count();
        fp += extra.len();
        fn_ += missed.len();
        if !extra.is_empty() || !missed.is_empty() {
            println!("{name}: false alarms at frames {extra:?}, missed {missed:?}");
        }
    }
    let precision = tp as f64 / (tp + fp) as f64;
    let recall = tp as f64 / (tp + fn_) as f64;
    println!(
        "{} labelled stalls, {} found: {tp} right, {fp} false alarms, {fn_} missed; \
         precision {precision:.3}, recall {recall:.3}",
        tp + fn_,
        tp + fp
    );
    assert!(precision >= 0.95, "precision {precision:.3}");
    assert!(recall >= 0.95, "recall {recall:.3}");
}
