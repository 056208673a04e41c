//! The stall rule against captures others made: every capture in `tests/corpus/` (public
//! test captures of the tcpdump, Zeek, nDPI, Suricata-verify, Arkime and ipfixprobe projects;
//! `SOURCES.md`) is diagnosed, and its stalls
//! are matched, by the held segment's frame and the releasing ACK's, against the hand labels
//! in `labels.txt`
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

/// Labelled stalls per capture file: (held frame, releasing ACK's frame).
fn labels() -> BTreeMap<String, BTreeSet<(u64, u64)>> {
    let text = std::fs::read_to_string(dir().join("labels.txt")).unwrap();
    let mut labels: BTreeMap<String, BTreeSet<(u64, u64)>> = BTreeMap::new();
    let mut current = None;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if let Some(name) = line.strip_prefix("== ") {
            let name = name.trim().to_string();
            assert!(
                labels.insert(name.clone(), BTreeSet::new()).is_none(),
                "{name} labelled twice"
            );
            current = Some(name);
        } else if let Some(rest) = line.strip_prefix("stall ") {
            // stall FRAME SENDER released-by ACK-FRAME delay MS - reasoning
            let w: Vec<&str> = rest.split_whitespace().collect();
            assert!(
                w.len() > 4 && w[2] == "released-by" && w[4] == "delay",
                "labels.txt:{n}: a stall line reads `stall FRAME SENDER released-by ACK delay MS - why`"
            );
            let frame = w[0].parse().unwrap();
            let ack = w[3].parse().unwrap();
            let name = current.as_ref().expect("a stall line before any capture");
            assert!(
                labels.get_mut(name).unwrap().insert((frame, ack)),
                "labels.txt:{n}: frame {frame} labelled twice"
            );
        } else {
            let known = ["#", "point:", "near ", "none"];
            assert!(
                line.trim().is_empty() || known.iter().any(|k| line.starts_with(k)),
                "labels.txt:{n}: a line starts with ==, point:, stall, near, none or #: {line:?}"
            );
        }
    }
    for (name, stalls) in &labels {
        let none = text
            .split("== ")
            .find(|b| b.starts_with(&format!("{name}\n")))
            .is_some_and(|b| b.lines().any(|l| l.starts_with("none")));
        assert!(
            none == stalls.is_empty(),
            "{name}: a capture has stall lines or a `none` line, not both and not neither"
        );
    }
    labels
}

/// Every stall the doctor finds in `name`: (held frame, releasing ACK's frame).
fn found(name: &str) -> BTreeSet<(u64, u64)> {
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
        .flat_map(|f| f.stalls.iter().map(|s| (s.held.frame, s.ack.frame)))
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
            println!("{name}: false alarms {extra:?}, missed {missed:?} (held frame, ACK frame)");
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

/// The honest negative on captures others made for the purpose: the four of *Practical
/// Packet Analysis*'s "locating the source of high latency" (one web request each: normal, the
/// wire's latency, the client's, the server's, as the book tells them), a receiver that stopped
/// reading, a segment never acknowledged, a connect never answered and one refused. No stall in any; each verdict names where the
/// time went as the book or the packets say, and says it once.
#[test]
fn practical_packet_analysis_s_slow_requests_are_named_by_their_source() {
    let verdict = |name: &str| {
        let bytes = std::fs::read(dir().join(name)).unwrap();
        let d = nagless_doctor::diagnose_reader(&bytes[..], Options::default(), |_| {}).unwrap();
        assert_eq!(d.flows.len(), 1, "{name}");
        assert_eq!(d.flows[0].stall_count, 0, "{name}");
        d.flows[0].verdict.join(" | ")
    };
    let round_trip = "most of the time waited (idle left out) was round trip";
    for (name, says, not) in [
        ("ppa-latency1.pcapng", round_trip, "first data"),
        ("ppa-latency2.pcapng", round_trip, "first data"),
        (
            "ppa-latency3.pcapng",
            "172.16.16.128:1606 sent the connection's first data 1.35 s after its handshake: its own time, not the network's",
            "think time",
        ),
        (
            "ppa-latency4.pcapng",
            "was 74.125.95.104:80's think time",
            "first data",
        ),
        (
            "ppa-tcp_zerowindowdead.pcapng",
            "172.31.136.85:38760's zero window, 23.73 s in all",
            "most of the time waited",
        ),
        (
            "ppa-tcp_retransmissions.pcapng",
            "retransmission timeouts of 10.3.30.1:1048's data, 9.21 s in all",
            "most of the time waited",
        ),
        (
            "ppa-nowebaccess3.pcapng",
            "172.16.0.8:1251's SYN went unanswered: sent 2 times over 1.00 s (connect retries)",
            "most of the time waited",
        ),
        (
            "ppa-tcp_refuseconnection.pcapng",
            "the connection was refused: 192.168.100.1:80 answered 192.168.100.138:3372's SYN with a reset",
            "most of the time waited",
        ),
    ] {
        let v = verdict(name);
        assert!(v.starts_with("no Nagle stall"), "{name}: {v}");
        assert!(v.contains(says), "{name}: {v}");
        assert!(!v.contains(not), "{name}: {v}");
    }
}
